//! `ReconcilerActor`: every `reconciler.interval_seconds`, re-drives orders
//! left in `processing` with no live claim (a crash between the 202 and
//! provisioning, or a pass that stopped half-way). Claims make it safe to run
//! on several nodes at once: an order is provisioned by one worker at a time.

use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};

use super::{accounts::Accounts, log_lifecycle, provisioning::ProvisioningMsg};
use crate::{
    domain::time,
    store::{self, Db},
};

/// Messages of the reconciler.
pub(crate) enum ReconcilerMsg {
    /// Run one pass now.
    Tick,
}

#[derive(Clone)]
pub(crate) struct ReconcilerArgs {
    pub db: Db,
    /// Where the current provisioning actor is found.
    pub accounts: Accounts,
    pub interval: Duration,
    /// Orders younger than this are left to the provisioning already under way.
    pub grace: Duration,
    /// A node quiet for this long is taken for dead: its claims are free.
    pub liveness: Duration,
}

pub(crate) struct ReconcilerActor;

impl Actor for ReconcilerActor {
    type Msg = ReconcilerMsg;
    type State = ReconcilerArgs;
    type Arguments = ReconcilerArgs;

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        _state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        log_lifecycle("reconciler", None, "stopped", "shutdown");
        Ok(())
    }

    async fn pre_start(
        &self,
        myself: ActorRef<ReconcilerMsg>,
        args: ReconcilerArgs,
    ) -> Result<ReconcilerArgs, ActorProcessingErr> {
        let every = args.interval;
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if myself.cast(ReconcilerMsg::Tick).is_err() {
                    return;
                }
            }
        });
        log_lifecycle("reconciler", None, "started", "service start");
        Ok(args)
    }

    async fn handle(
        &self,
        _myself: ActorRef<ReconcilerMsg>,
        _message: ReconcilerMsg,
        args: &mut ReconcilerArgs,
    ) -> Result<(), ActorProcessingErr> {
        let now = time::now();
        let older_than = now - chrono::Duration::from_std(args.grace).unwrap_or_default();
        let alive_since = now - chrono::Duration::from_std(args.liveness).unwrap_or_default();
        match store::orders::stranded(&args.db, older_than, now, alive_since, 500).await {
            Ok(ids) => {
                if !ids.is_empty() {
                    tracing::info!(count = ids.len(), order_ids = ?ids, "re-driving stranded orders");
                }
                let Some(provisioning) = args.accounts.provisioning() else {
                    return Ok(());
                };
                for id in ids {
                    provisioning.send(ProvisioningMsg::Provision {
                        order_id: id,
                        claimed_until: None,
                        fresh: None,
                    });
                }
            }
            Err(err) => tracing::warn!(error = %err, "reconciler pass failed"),
        }
        Ok(())
    }
}
