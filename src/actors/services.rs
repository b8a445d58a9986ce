//! `ServicesSupervisor`: parent of the provisioning and reconciler actors.
//! It logs their lifecycle and restarts a failed one with the same arguments;
//! a restarted provisioning actor is installed in the [`ProvisioningHandle`]
//! that account actors and the reconciler send through, which also hands it
//! what was sent while no actor ran.

use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};

use super::{
    log_lifecycle,
    provisioning::{ProvisioningActor, ProvisioningArgs, ProvisioningHandle},
    reconciler::{ReconcilerActor, ReconcilerArgs},
};

/// What the supervisor starts.
#[derive(Clone)]
pub(crate) struct ServicesArgs {
    /// Where senders find provisioning; pointed at each new actor.
    pub handle: ProvisioningHandle,
    pub provisioning: ProvisioningArgs,
    pub reconciler: ReconcilerArgs,
}

pub(crate) struct ServicesSupervisor;

pub(crate) struct ServicesState {
    args: ServicesArgs,
    provisioning_id: Option<ractor::ActorId>,
}

/// No messages: it only supervises.
pub(crate) enum ServicesMsg {}

impl ServicesSupervisor {
    async fn start_provisioning(
        myself: &ActorRef<ServicesMsg>,
        args: &ServicesArgs,
    ) -> Result<ractor::ActorId, ActorProcessingErr> {
        let (provisioning, _) = Actor::spawn_linked(
            None,
            ProvisioningActor,
            args.provisioning.clone(),
            myself.get_cell(),
        )
        .await?;
        args.handle.install(provisioning.clone());
        Ok(provisioning.get_id())
    }
}

impl Actor for ServicesSupervisor {
    type Msg = ServicesMsg;
    type State = ServicesState;
    type Arguments = ServicesArgs;

    async fn post_stop(
        &self,
        myself: ActorRef<Self::Msg>,
        _state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // Stop the children first, each finishing its current message, so
        // that their own stops are orderly and logged before ours.
        for child in myself.get_children() {
            let _ = child
                .stop_and_wait(
                    Some("shutdown".into()),
                    Some(std::time::Duration::from_secs(10)),
                )
                .await;
        }
        log_lifecycle("services_supervisor", None, "stopped", "shutdown");
        Ok(())
    }

    async fn pre_start(
        &self,
        myself: ActorRef<ServicesMsg>,
        args: ServicesArgs,
    ) -> Result<ServicesState, ActorProcessingErr> {
        let provisioning_id = Some(Self::start_provisioning(&myself, &args).await?);
        Actor::spawn_linked(
            None,
            ReconcilerActor,
            args.reconciler.clone(),
            myself.get_cell(),
        )
        .await?;
        log_lifecycle("services_supervisor", None, "started", "service start");
        Ok(ServicesState {
            args,
            provisioning_id,
        })
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<ServicesMsg>,
        event: SupervisionEvent,
        state: &mut ServicesState,
    ) -> Result<(), ActorProcessingErr> {
        match event {
            SupervisionEvent::ActorFailed(cell, error) => {
                let is_provisioning = state.provisioning_id == Some(cell.get_id());
                let kind = if is_provisioning {
                    "provisioning"
                } else {
                    "reconciler"
                };
                log_lifecycle(kind, None, "failed", &error.to_string());
                if is_provisioning {
                    state.provisioning_id =
                        Some(Self::start_provisioning(&myself, &state.args).await?);
                } else {
                    Actor::spawn_linked(
                        None,
                        ReconcilerActor,
                        state.args.reconciler.clone(),
                        myself.get_cell(),
                    )
                    .await?;
                }
                log_lifecycle(kind, None, "restarted", "after failure");
                crate::metrics::actor_restarted(kind);
            }
            // A child logs its own stop (post_stop).
            SupervisionEvent::ActorTerminated(..)
            | SupervisionEvent::ActorStarted(_)
            | SupervisionEvent::ProcessGroupChanged(_) => {}
        }
        Ok(())
    }
}
