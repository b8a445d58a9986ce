//! `ProvisioningActor`: turns accepted orders into profiles.
//!
//! Each `Provision(order)` claims the order (a lease column, so one node and
//! one worker at a time), then for every pending unit places a supplier order
//! with the unit id as transaction id, polls until the profile is allocated,
//! and stores it. A supplier refusal refunds the unit (`supplier_error`); a
//! unit whose order could not be placed after `max_attempts` placements is
//! refunded as `internal_error`. Work runs on tasks bounded by a semaphore, so
//! a slow supplier never blocks order acceptance; anything lost in a crash is
//! re-driven by the reconciler.

use std::{sync::Arc, time::Duration};

use chrono::{DateTime, Utc};
use entities::{esim, order, order_unit};
use futures::StreamExt;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use std::{collections::HashSet, sync::Mutex};
use tokio::sync::Semaphore;

use super::{accounts::Accounts, log_lifecycle};
use crate::{
    domain::{
        esim as esim_rules,
        order::{FailureCode, UNIT_PENDING},
        partner::Mode,
        time,
    },
    store::{self, Db},
    supplier::{Allocation, Supplier, SupplierError},
};

/// Messages of the provisioning actor.
pub enum ProvisioningMsg {
    /// Provision the pending units of an order. `claimed_until`: the order
    /// was inserted claimed by this node until then (fresh from acceptance);
    /// while most of that lease is left no claim write is needed.
    Provision {
        order_id: String,
        claimed_until: Option<DateTime<Utc>>,
    },
}

/// What provisioning needs.
#[derive(Clone)]
pub struct ProvisioningArgs {
    pub db: Db,
    /// Stores delivered profiles in batches.
    pub writer: DeliveryWriter,
    pub accounts: Accounts,
    /// The supplier of live orders.
    pub live: Arc<dyn Supplier>,
    /// The supplier of sandbox orders.
    pub sandbox: Arc<dyn Supplier>,
    /// Orders provisioned at once.
    pub concurrency: usize,
    /// Units of one order provisioned at once.
    pub unit_concurrency: usize,
    /// Placements of one unit before it is refunded as `internal_error`.
    pub max_attempts: i32,
    /// Pause between placement attempts.
    pub retry_backoff: Duration,
    /// Pause between allocation polls.
    pub poll_interval: Duration,
    /// Longest a unit may take to allocate before it is refunded.
    pub deadline: Duration,
    /// How long a claim on an order lasts; a pass renews it every third of this.
    pub lease: Duration,
    /// This node's id, written into the claims it holds.
    pub node_id: Arc<str>,
}

pub struct ProvisioningActor;

pub struct ProvisioningState {
    args: Arc<ProvisioningArgs>,
    permits: Arc<Semaphore>,
    /// Orders queued or being provisioned here: an order is never worked on
    /// twice at once by one node (the reconciler may name it again).
    in_flight: Arc<Mutex<HashSet<String>>>,
}

impl Actor for ProvisioningActor {
    type Msg = ProvisioningMsg;
    type State = ProvisioningState;
    type Arguments = ProvisioningArgs;

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        _state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        log_lifecycle("provisioning", None, "stopped", "shutdown");
        Ok(())
    }

    async fn pre_start(
        &self,
        _myself: ActorRef<ProvisioningMsg>,
        args: ProvisioningArgs,
    ) -> Result<ProvisioningState, ActorProcessingErr> {
        log_lifecycle("provisioning", None, "started", "service start");
        Ok(ProvisioningState {
            permits: Arc::new(Semaphore::new(args.concurrency.max(1))),
            args: Arc::new(args),
            in_flight: Arc::default(),
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<ProvisioningMsg>,
        message: ProvisioningMsg,
        state: &mut ProvisioningState,
    ) -> Result<(), ActorProcessingErr> {
        let ProvisioningMsg::Provision {
            order_id,
            claimed_until,
        } = message;
        if !lock(&state.in_flight).insert(order_id.clone()) {
            tracing::debug!(order_id, "already queued or under way on this node");
            return Ok(());
        }
        let args = state.args.clone();
        let permits = state.permits.clone();
        let in_flight = state.in_flight.clone();
        tokio::spawn(async move {
            if let Ok(_permit) = permits.acquire_owned().await
                && let Err(err) = provision_order(&args, &order_id, claimed_until).await
            {
                tracing::warn!(order_id, error = %err, "provisioning pass failed; the reconciler will re-drive it");
                let _ = store::orders::release(&args.db, &order_id, &args.node_id).await;
            }
            lock(&in_flight).remove(&order_id);
        });
        Ok(())
    }
}

/// One provisioning pass over an order, if this node holds or can claim it.
#[tracing::instrument(skip_all, fields(order_id = %order_id))]
async fn provision_order(
    args: &ProvisioningArgs,
    order_id: &str,
    claimed_until: Option<DateTime<Utc>>,
) -> anyhow::Result<()> {
    let now = time::now();
    let lease = chrono::Duration::from_std(args.lease)?;
    // The claim made at acceptance is ours while it lasts; once half of it
    // went by waiting for a permit, claim again (ours, or free after it lapsed).
    let fresh = claimed_until.is_some_and(|until| until - now > lease / 2);
    if !fresh && !store::orders::claim(&args.db, order_id, &args.node_id, now, now + lease).await? {
        tracing::debug!(order_id, "held by another node; left to it");
        return Ok(());
    }
    keep_claimed(args, order_id, lease, provision_claimed(args, order_id)).await
}

/// Runs `pass` while renewing this node's claim every third of the lease.
/// If the claim was lost (this node stalled past the lease and another took
/// the order over) the pass is abandoned: the other node carries on.
async fn keep_claimed(
    args: &ProvisioningArgs,
    order_id: &str,
    lease: chrono::Duration,
    pass: impl Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<()> {
    let period = (args.lease / 3).max(Duration::from_millis(10));
    let mut renewals = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    tokio::pin!(pass);
    loop {
        tokio::select! {
            result = &mut pass => return result,
            _ = renewals.tick() => {
                let until = time::now() + lease;
                if !store::orders::renew(&args.db, order_id, &args.node_id, until).await? {
                    tracing::warn!(order_id, node_id = %args.node_id, "claim lost to another node; abandoning this pass");
                    return Ok(());
                }
            }
        }
    }
}

/// One pass over an order this node holds.
async fn provision_claimed(args: &ProvisioningArgs, order_id: &str) -> anyhow::Result<()> {
    let Some(order) = store::orders::get_order(&args.db, order_id).await? else {
        return Ok(());
    };
    let started = std::time::Instant::now();
    let units: Vec<order_unit::Model> = store::orders::units_of(&args.db, order_id)
        .await?
        .into_iter()
        .filter(|u| u.status == UNIT_PENDING)
        .collect();
    let supplier = match Mode::parse(&order.mode) {
        Some(Mode::Live) => args.live.clone(),
        _ => args.sandbox.clone(),
    };
    let outcomes: Vec<UnitOutcome> = futures::stream::iter(units)
        .map(|unit| provision_unit(args, supplier.as_ref(), &order, unit))
        .buffer_unordered(args.unit_concurrency.max(1))
        .collect()
        .await;
    for failure in [FailureCode::SupplierError, FailureCode::InternalError] {
        let unit_ids: Vec<String> = outcomes
            .iter()
            .filter_map(|o| match o {
                UnitOutcome::Refund(id, f) if *f == failure => Some(id.clone()),
                _ => None,
            })
            .collect();
        if !unit_ids.is_empty() {
            args.accounts
                .refund(&order.partner_id, order_id, unit_ids, failure)
                .await
                .map_err(|e| anyhow::anyhow!("refund: {e}"))?;
        }
    }
    // Deliveries are settled by the delivery writer and refunds by the account
    // actor; what is left is a unit to retry later, or nothing to do at all.
    if outcomes.iter().any(|o| matches!(o, UnitOutcome::Later)) {
        store::orders::release(&args.db, order_id, &args.node_id).await?;
    } else if outcomes.is_empty() {
        let now = time::now();
        if let Some(settled) = store::orders::finalize(&args.db, order_id, now).await? {
            crate::metrics::order_settled(&settled, now);
            tracing::info!(order_id, partner_id = %order.partner_id, status = settled.status, elapsed_ms = started.elapsed().as_millis() as u64, "order settled");
        }
    }
    Ok(())
}

enum UnitOutcome {
    Delivered,
    /// Left pending for a later pass (e.g. the database was unreachable).
    Later,
    Refund(String, FailureCode),
}

async fn provision_unit(
    args: &ProvisioningArgs,
    supplier: &dyn Supplier,
    order: &order::Model,
    unit: order_unit::Model,
) -> UnitOutcome {
    let order_no = match unit.supplier_order_no.clone() {
        Some(order_no) => order_no,
        None => match place(args, supplier, order, &unit).await {
            Ok(order_no) => order_no,
            Err(outcome) => return outcome,
        },
    };
    let deadline = tokio::time::Instant::now() + args.deadline;
    loop {
        match supplier.query(&order_no).await {
            Ok(Allocation::Ready(profile)) => {
                return store_profile(args, order, &unit, profile).await;
            }
            Ok(Allocation::Pending) | Err(SupplierError::Transient(_))
                if tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(args.poll_interval).await;
            }
            Ok(Allocation::Pending) | Err(SupplierError::Transient(_)) => {
                tracing::warn!(unit_id = %unit.id, "allocation did not finish within the provisioning deadline");
                return UnitOutcome::Refund(unit.id, FailureCode::SupplierError);
            }
            Err(SupplierError::Refused(reason)) => {
                tracing::warn!(unit_id = %unit.id, reason, "supplier refused the allocation");
                return UnitOutcome::Refund(unit.id, FailureCode::SupplierError);
            }
        }
    }
}

/// Places the unit's supplier order, retrying transient failures; the attempt
/// count survives restarts (it is stored on the unit).
async fn place(
    args: &ProvisioningArgs,
    supplier: &dyn Supplier,
    order: &order::Model,
    unit: &order_unit::Model,
) -> Result<String, UnitOutcome> {
    let mut attempts = unit.attempts;
    loop {
        if attempts >= args.max_attempts {
            tracing::warn!(unit_id = %unit.id, attempts, "the supplier order could not be opened");
            return Err(UnitOutcome::Refund(
                unit.id.clone(),
                FailureCode::InternalError,
            ));
        }
        match supplier.place_order(&unit.id, &order.plan_id).await {
            // Not written down: the supplier answers the same order number
            // for the same transaction id, so a re-drive simply asks again.
            Ok(order_no) => return Ok(order_no),
            Err(SupplierError::Refused(reason)) => {
                tracing::warn!(unit_id = %unit.id, reason, "supplier refused the order");
                return Err(UnitOutcome::Refund(
                    unit.id.clone(),
                    FailureCode::SupplierError,
                ));
            }
            Err(SupplierError::Transient(reason)) => {
                attempts += 1;
                tracing::warn!(unit_id = %unit.id, attempts, reason, "supplier order attempt failed");
                if store::orders::unit_failed_attempt(&args.db, &unit.id, &reason, time::now())
                    .await
                    .is_err()
                {
                    return Err(UnitOutcome::Later);
                }
                if attempts < args.max_attempts {
                    tokio::time::sleep(args.retry_backoff * attempts as u32).await;
                }
            }
        }
    }
}

async fn store_profile(
    args: &ProvisioningArgs,
    order: &order::Model,
    unit: &order_unit::Model,
    profile: crate::supplier::Profile,
) -> UnitOutcome {
    if !esim_rules::is_valid_iccid(&profile.iccid) {
        tracing::warn!(unit_id = %unit.id, iccid = %profile.iccid, "supplier sent an invalid ICCID");
        return UnitOutcome::Refund(unit.id.clone(), FailureCode::SupplierError);
    }
    let Some((smdp, matching)) = esim_rules::parse_activation_code(&profile.activation_code) else {
        tracing::warn!(unit_id = %unit.id, "supplier sent an invalid activation code");
        return UnitOutcome::Refund(unit.id.clone(), FailureCode::SupplierError);
    };
    let now: DateTime<Utc> = time::now();
    let row = esim::Model {
        iccid: profile.iccid.clone(),
        partner_id: order.partner_id.clone(),
        mode: order.mode.clone(),
        order_id: order.id.clone(),
        unit_id: unit.id.clone(),
        plan_id: order.plan_id.clone(),
        status: "released".into(),
        smdp_address: smdp.to_owned(),
        matching_id: matching.to_owned(),
        activation_code: profile.activation_code.clone(),
        created_at: now,
    };
    match args.writer.deliver(row).await {
        Ok(_) => UnitOutcome::Delivered,
        Err(err) => {
            tracing::warn!(unit_id = %unit.id, error = %err, "storing the profile failed; will retry");
            UnitOutcome::Later
        }
    }
}

/// One profile waiting for the delivery writer.
type Delivery = (
    esim::Model,
    tokio::sync::oneshot::Sender<Result<bool, sea_orm::DbErr>>,
);

/// Deliveries stored in one transaction at most.
const DELIVERY_BATCH: usize = 256;

/// The single writer of delivered profiles: it stores every profile queued
/// behind the one in progress, and settles their orders, in one transaction,
/// so provisioning does not compete with order acceptance for the database's
/// writer one fsync per unit.
#[derive(Clone)]
pub struct DeliveryWriter {
    queue: tokio::sync::mpsc::Sender<Delivery>,
}

impl DeliveryWriter {
    /// Starts the writer task; it ends when every handle is dropped.
    pub fn start(db: Db) -> Self {
        let (queue, mut incoming) = tokio::sync::mpsc::channel::<Delivery>(4096);
        tokio::spawn(async move {
            while let Some(first) = incoming.recv().await {
                let mut batch = vec![first];
                while batch.len() < DELIVERY_BATCH {
                    match incoming.try_recv() {
                        Ok(next) => batch.push(next),
                        Err(_) => break,
                    }
                }
                write_deliveries(&db, batch).await;
            }
        });
        Self { queue }
    }

    /// Stores one profile (and settles its order if that was its last unit).
    /// `Ok(false)`: the unit was already settled, nothing written.
    pub async fn deliver(&self, profile: esim::Model) -> Result<bool, sea_orm::DbErr> {
        let (answer, answered) = tokio::sync::oneshot::channel();
        self.queue
            .send((profile, answer))
            .await
            .map_err(|_| sea_orm::DbErr::Custom("the delivery writer stopped".into()))?;
        answered
            .await
            .map_err(|_| sea_orm::DbErr::Custom("the delivery writer stopped".into()))?
    }
}

async fn write_deliveries(db: &Db, batch: Vec<Delivery>) {
    let profiles: Vec<esim::Model> = batch.iter().map(|(p, _)| p.clone()).collect();
    match store_deliveries(db, &profiles).await {
        Ok(results) => {
            for ((_, answer), result) in batch.into_iter().zip(results) {
                let _ = answer.send(Ok(result));
            }
        }
        Err(err) if batch.len() > 1 => {
            // One bad row must not fail the others: store them one by one.
            tracing::warn!(size = batch.len(), error = %err, "batched delivery failed; storing one by one");
            for (profile, answer) in batch {
                let result = store_deliveries(db, std::slice::from_ref(&profile))
                    .await
                    .map(|r| r.first().copied().unwrap_or(false));
                let _ = answer.send(result);
            }
        }
        Err(err) => {
            for (_, answer) in batch {
                let _ = answer.send(Err(err.clone()));
            }
        }
    }
}

async fn store_deliveries(db: &Db, profiles: &[esim::Model]) -> Result<Vec<bool>, sea_orm::DbErr> {
    let now = time::now();
    let txn = store::begin_write(db).await?;
    let mut delivered = Vec::with_capacity(profiles.len());
    for profile in profiles {
        delivered.push(store::orders::deliver_unit(&txn, profile.clone(), now).await?);
    }
    let mut orders: Vec<&str> = profiles.iter().map(|p| p.order_id.as_str()).collect();
    orders.sort_unstable();
    orders.dedup();
    let mut settled = Vec::new();
    for order_id in orders {
        if let Some(order) = store::orders::finalize(&txn, order_id, now).await? {
            settled.push((order_id.to_owned(), order));
        }
    }
    txn.commit().await?;
    for (order_id, order) in settled {
        crate::metrics::order_settled(&order, now);
        tracing::info!(order_id, status = order.status, "order settled");
    }
    Ok(delivered)
}

/// The in-flight set survives a panic elsewhere: its data stays consistent.
fn lock(set: &Mutex<HashSet<String>>) -> std::sync::MutexGuard<'_, HashSet<String>> {
    set.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
