//! `ProvisioningActor`: turns accepted orders into profiles.
//!
//! Each `Provision(order)` claims the order (a lease column, so one node and
//! one worker at a time), then puts its pending units in supplier orders
//! together with the units of other orders being provisioned at the same
//! time ([`super::supplier_orders`]), waits for those supplier orders to end,
//! and deals the order its profiles. A supplier order the supplier will not
//! deliver (a permanent refusal, the deadline, or no answer through every
//! attempt) refunds the units it carried as `supplier_error`; a unit this
//! service could not even write down into a supplier order is refunded as
//! `internal_error` after `max_attempts` passes. The work of a pass (claim,
//! read, write its units into supplier orders) is bounded by a semaphore, so
//! a slow supplier never blocks order acceptance; the wait for the profiles
//! is not: a pass gives up its slot once its units are in supplier orders,
//! since how many orders wait is bounded by admission, and one slot per
//! waiting order would cap settlement at slots / allocation time whatever
//! the supplier's capacity. Anything lost in a crash is re-driven by the
//! reconciler.

use std::{sync::Arc, time::Duration};

use chrono::{DateTime, Utc};
use entities::{esim, order, order_unit};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use std::{
    collections::{HashMap, HashSet},
    sync::Mutex,
};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::{
    accounts::Accounts,
    claims::HeldClaims,
    deliveries::DeliveryWriter,
    log_lifecycle,
    supplier_orders::{Outcome, SupplierOrders},
};
use crate::{
    domain::{
        esim as esim_rules,
        order::{FailureCode, UnitStatus},
        partner::Mode,
        states::EsimStatus,
        time,
    },
    store::{self, Db},
    sync::lock,
};

/// Messages of the provisioning actor.
pub enum ProvisioningMsg {
    /// Provision the pending units of an order. `claimed_until`: the order
    /// was inserted claimed by this node until then (fresh from acceptance);
    /// while most of that lease is left no claim write is needed.
    Provision {
        order_id: String,
        claimed_until: Option<DateTime<Utc>>,
        /// The order as it was just accepted on this node, so the first
        /// pass need not read it and its units back.
        fresh: Option<Arc<order::Model>>,
    },
    /// Fail on purpose (operator fault injection), so that supervision can
    /// be watched restarting the actor.
    Fail,
}

/// Where provisioning is, across its restarts: account actors and the
/// reconciler send through this handle, which the supervisor points at each
/// new provisioning actor. A message sent while no actor is running (between
/// a failure and the restart) waits here and is handed to the next one.
#[derive(Clone, Default)]
pub struct ProvisioningHandle(Arc<Mutex<Slot>>);

#[derive(Default)]
struct Slot {
    /// The running actor, if any.
    actor: Option<ActorRef<ProvisioningMsg>>,
    /// Sent while none ran, oldest first.
    waiting: Vec<ProvisioningMsg>,
}

/// Most messages kept while provisioning restarts; past that they are
/// dropped, and the orders are taken back by the restarted actor's sweep of
/// this node's claims.
const MAX_WAITING: usize = 100_000;

impl ProvisioningHandle {
    /// Hands a message to the running actor, or keeps it for the next one.
    pub fn send(&self, message: ProvisioningMsg) {
        let mut slot = lock(&self.0);
        let message = match &slot.actor {
            Some(actor) => match actor.cast(message) {
                Ok(()) => return,
                Err(ractor::MessagingErr::SendErr(message)) => message,
                Err(_) => return,
            },
            None => message,
        };
        if slot.waiting.len() < MAX_WAITING {
            slot.waiting.push(message);
        }
    }

    /// Points the handle at a (re)started actor and gives it what waited.
    pub fn install(&self, actor: ActorRef<ProvisioningMsg>) {
        let mut slot = lock(&self.0);
        for message in std::mem::take(&mut slot.waiting) {
            let _ = actor.cast(message);
        }
        slot.actor = Some(actor);
    }

    /// Makes the running actor fail (operator fault injection); false when
    /// none runs.
    pub fn fail(&self) -> bool {
        lock(&self.0)
            .actor
            .as_ref()
            .is_some_and(|actor| actor.cast(ProvisioningMsg::Fail).is_ok())
    }

    /// Stops handing messages to an actor (shutdown): what is sent from now
    /// on waits, unsent, and the node's claims are taken over by others or
    /// by its next start.
    pub fn detach(&self) {
        lock(&self.0).actor = None;
    }

    /// Whether a provisioning actor is running now.
    pub fn is_running(&self) -> bool {
        lock(&self.0)
            .actor
            .as_ref()
            .is_some_and(|actor| actor.get_status() == ractor::ActorStatus::Running)
    }
}

/// What provisioning needs.
#[derive(Clone)]
pub(crate) struct ProvisioningArgs {
    pub db: Db,
    /// Stores delivered profiles in batches.
    pub writer: DeliveryWriter,
    pub accounts: Accounts,
    /// Supplier orders of this node: placement, batching and allocation.
    pub supplier_orders: SupplierOrders,
    /// Orders provisioned at once.
    pub concurrency: usize,
    /// Passes over a unit that could not be written into a supplier order
    /// before it is refunded as `internal_error`.
    pub max_attempts: i32,
    /// How long a claim on an order lasts; the node renews its claims every
    /// third of this.
    pub lease: Duration,
    /// The claims this node's passes hold, renewed together.
    pub claims: HeldClaims,
    /// A node quiet for this long is taken for dead: its claims are free.
    pub liveness: Duration,
    /// This node's id, written into the claims it holds.
    pub node_id: Arc<str>,
    /// Orders queued or being provisioned on this node: an order is never
    /// worked on twice at once by one node (the reconciler may name it
    /// again). Kept across restarts of the actor, whose passes outlive it.
    pub in_flight: Arc<Mutex<HashSet<String>>>,
    /// The passes under way, so that shutdown can wait for them (bounded).
    pub tasks: tokio_util::task::TaskTracker,
}

pub(crate) struct ProvisioningActor;

pub(crate) struct ProvisioningState {
    args: Arc<ProvisioningArgs>,
    permits: Arc<Semaphore>,
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
        myself: ActorRef<ProvisioningMsg>,
        args: ProvisioningArgs,
    ) -> Result<ProvisioningState, ActorProcessingErr> {
        log_lifecycle("provisioning", None, "started", "service start");
        tokio::spawn(take_back_claims(
            myself,
            args.db.clone(),
            args.node_id.clone(),
        ));
        Ok(ProvisioningState {
            permits: Arc::new(Semaphore::new(args.concurrency.max(1))),
            args: Arc::new(args),
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<ProvisioningMsg>,
        message: ProvisioningMsg,
        state: &mut ProvisioningState,
    ) -> Result<(), ActorProcessingErr> {
        let (order_id, claimed_until, fresh) = match message {
            ProvisioningMsg::Provision {
                order_id,
                claimed_until,
                fresh,
            } => (order_id, claimed_until, fresh),
            ProvisioningMsg::Fail => return Err("failure injected by the operator".into()),
        };
        if !lock(&state.args.in_flight).insert(order_id.clone()) {
            tracing::debug!(order_id, "already queued or under way on this node");
            return Ok(());
        }
        let args = state.args.clone();
        let permits = state.permits.clone();
        let in_flight = state.args.in_flight.clone();
        // The pass's future is boxed, and so is the release of a failed
        // pass's claim: a task's future is moved (copied whole) as it is
        // spawned, once per order, so what is spawned holds only the wait
        // for a permit and two boxes (the pass keeps its own size down: see
        // `provision_order`).
        state.args.tasks.spawn(async move {
            if let Ok(permit) = permits.acquire_owned().await
                && let Err(err) =
                    Box::pin(provision_order(&args, &order_id, claimed_until, fresh, permit)).await
            {
                tracing::warn!(order_id, error = %err, "provisioning pass failed; the reconciler will re-drive it");
                let _ = Box::pin(store::orders::release(&args.db, &order_id, &args.node_id)).await;
            }
            lock(&in_flight).remove(&order_id);
        });
        Ok(())
    }
}

/// At start (of the process, or of the actor after a failure), provisions
/// again every order this node holds and is not working on: the orders an
/// earlier incarnation of the node claimed before it died, and those that
/// waited in the mailbox of a failed actor. Without this they would wait for
/// their claim to lapse.
async fn take_back_claims(myself: ActorRef<ProvisioningMsg>, db: Db, node_id: Arc<str>) {
    match store::orders::held_by(&db, &node_id).await {
        Ok(ids) => {
            if !ids.is_empty() {
                tracing::info!(count = ids.len(), node_id = %node_id, "taking back this node's claims");
            }
            for order_id in ids {
                let message = ProvisioningMsg::Provision {
                    order_id,
                    claimed_until: None,
                    fresh: None,
                };
                if myself.cast(message).is_err() {
                    return;
                }
            }
        }
        Err(err) => {
            tracing::warn!(error = %err, "could not read this node's claims; the reconciler takes them over once they lapse")
        }
    }
}

/// One provisioning pass over an order, if this node holds or can claim it.
#[tracing::instrument(skip_all, fields(order_id = %order_id))]
async fn provision_order(
    args: &ProvisioningArgs,
    order_id: &str,
    claimed_until: Option<DateTime<Utc>>,
    fresh: Option<Arc<order::Model>>,
    permit: OwnedSemaphorePermit,
) -> anyhow::Result<()> {
    let now = time::now();
    let lease = chrono::Duration::from_std(args.lease)?;
    // The claim made at acceptance is ours while it lasts; once half of it
    // went by waiting for a permit, claim again (ours, or free after it lapsed).
    let claim_holds = claimed_until.is_some_and(|until| until - now > lease / 2);
    let alive_since = now - chrono::Duration::from_std(args.liveness)?;
    // The database calls off the usual path (a fresh order's claim holds;
    // nothing fails) are boxed here and below: most are state machines of
    // kilobytes, and the pass's future, moved whole into its box as the
    // pass starts, would otherwise be as large as all of them together.
    if !claim_holds
        && !Box::pin(store::orders::claim(
            &args.db,
            order_id,
            &args.node_id,
            now,
            now + lease,
            alive_since,
        ))
        .await?
    {
        tracing::debug!(order_id, "held by another node; left to it");
        return Ok(());
    }
    // The accepted order is only as good as the claim made with it: once that
    // lapsed, another node may have worked on the order, so read it back.
    let fresh = fresh.filter(|_| claim_holds);
    keep_claimed(args, order_id, || {
        provision_claimed(args, order_id, fresh, permit)
    })
    .await
}

/// Runs the pass `start` makes while this node's claim on the order is
/// renewed with the node's other claims ([`HeldClaims`]). If the claim was
/// lost (this node stalled past the lease and another took the order over)
/// the pass is abandoned: the other node carries on. The pass is made here,
/// where it is kept: a pass handed in made would be kept twice over (as the
/// argument, and again where it is awaited), doubling every pass's future.
async fn keep_claimed<P>(
    args: &ProvisioningArgs,
    order_id: &str,
    start: impl FnOnce() -> P,
) -> anyhow::Result<()>
where
    P: Future<Output = anyhow::Result<()>>,
{
    let held = args.claims.hold(order_id);
    tokio::select! {
        result = start() => result,
        () = held.lost() => Ok(()),
    }
}

/// One pass over an order this node holds.
async fn provision_claimed(
    args: &ProvisioningArgs,
    order_id: &str,
    fresh: Option<Arc<order::Model>>,
    permit: OwnedSemaphorePermit,
) -> anyhow::Result<()> {
    let (order, units) = match fresh {
        // Just accepted here: every unit is pending and in no supplier order.
        Some(order) => {
            let units = store::orders::pending_units(&order, order.created_at);
            (order, units)
        }
        None => match Box::pin(read_back(&args.db, order_id)).await? {
            Some(read) => read,
            None => return Ok(()),
        },
    };
    let outcomes = if units.is_empty() {
        Vec::new()
    } else {
        let mode = order.mode;
        provision_units(args, &order, mode, units, permit).await
    };
    for failure in [FailureCode::SupplierError, FailureCode::InternalError] {
        let unit_ids: Vec<String> = outcomes
            .iter()
            .filter_map(|o| match o {
                UnitOutcome::Refund(id, f) if *f == failure => Some(id.clone()),
                _ => None,
            })
            .collect();
        if !unit_ids.is_empty() {
            Box::pin(
                args.accounts
                    .refund(&order.partner_id, order_id, unit_ids, failure),
            )
            .await
            .map_err(|e| anyhow::anyhow!("refund: {e}"))?;
        }
    }
    // Deliveries are settled by the delivery writer and refunds by the account
    // actor; what is left is a unit to retry later, or nothing to do at all.
    if outcomes.iter().any(|o| matches!(o, UnitOutcome::Later)) {
        Box::pin(store::orders::release(&args.db, order_id, &args.node_id)).await?;
    } else if outcomes.is_empty() {
        let now = time::now();
        if let Some(settled) = Box::pin(store::orders::finalize(&args.db, order_id, now)).await? {
            super::order_settled(order_id, &settled, now);
        }
    }
    Ok(())
}

/// An order read back with its pending units (a pass over an order not
/// fresh from acceptance here); `None` when the order is gone.
async fn read_back(
    db: &Db,
    order_id: &str,
) -> anyhow::Result<Option<(Arc<order::Model>, Vec<order_unit::Model>)>> {
    let Some(order) = store::orders::get_order(db, order_id).await? else {
        return Ok(None);
    };
    let units: Vec<order_unit::Model> = store::orders::units_of(db, &order)
        .await?
        .into_iter()
        .filter(|u| u.status == UnitStatus::Pending)
        .collect();
    Ok(Some((Arc::new(order), units)))
}

enum UnitOutcome {
    Delivered,
    /// Left pending for a later pass (e.g. the database was unreachable).
    Later,
    Refund(String, FailureCode),
}

/// Puts the order's pending units in supplier orders (those not yet in one),
/// gives up its provisioning slot, waits for those supplier orders, and
/// deals the units their profiles.
async fn provision_units(
    args: &ProvisioningArgs,
    order: &order::Model,
    mode: Mode,
    units: Vec<order_unit::Model>,
    permit: OwnedSemaphorePermit,
) -> Vec<UnitOutcome> {
    let mut outcomes = Vec::new();
    let mut carried: Vec<(order_unit::Model, String)> = Vec::new();
    let mut loose: Vec<order_unit::Model> = Vec::new();
    for unit in units {
        match unit.supplier_txn_id.clone() {
            Some(txn) => carried.push((unit, txn)),
            None => loose.push(unit),
        }
    }
    if !loose.is_empty() {
        let ids = loose.iter().map(|u| u.id.clone()).collect();
        match args.supplier_orders.carry(mode, &order.plan_id, ids).await {
            Ok(txn_of) => {
                for unit in loose {
                    match txn_of.get(&unit.id) {
                        Some(txn) => {
                            let txn = txn.clone();
                            carried.push((unit, txn));
                        }
                        None => outcomes.push(UnitOutcome::Later),
                    }
                }
            }
            Err(reason) => {
                for unit in loose {
                    outcomes.push(Box::pin(not_carried(args, &unit, &reason)).await);
                }
            }
        }
    }
    // The units now wait in their supplier orders, not in this pass: the
    // slot goes to the next order while this one waits for its profiles.
    drop(permit);
    let mut by_txn: HashMap<String, Vec<order_unit::Model>> = HashMap::new();
    for (unit, txn) in carried {
        by_txn.entry(txn).or_default().push(unit);
    }
    let dealt = futures::future::join_all(
        by_txn
            .into_iter()
            .map(|(txn, units)| deal(args, order, txn, units)),
    )
    .await;
    outcomes.extend(dealt.into_iter().flatten());
    outcomes
}

/// A unit that could not be written into a supplier order: tried again on
/// later passes, refunded as `internal_error` after `max_attempts`.
async fn not_carried(
    args: &ProvisioningArgs,
    unit: &order_unit::Model,
    reason: &str,
) -> UnitOutcome {
    tracing::warn!(unit_id = %unit.id, reason, "unit not written into a supplier order");
    if unit.attempts + 1 >= args.max_attempts {
        return UnitOutcome::Refund(unit.id.clone(), FailureCode::InternalError);
    }
    let _ = store::orders::unit_failed_attempt(&args.db, &unit.id, reason, time::now()).await;
    UnitOutcome::Later
}

/// Waits for one supplier order and deals this order's units their profiles.
async fn deal(
    args: &ProvisioningArgs,
    order: &order::Model,
    txn: String,
    units: Vec<order_unit::Model>,
) -> Vec<UnitOutcome> {
    let delivered = match args.supplier_orders.outcome(&txn).await {
        Outcome::Profiles(delivered) => delivered,
        Outcome::Failed { code, reason } => {
            tracing::warn!(order_id = %order.id, transaction_id = %txn, reason, "supplier order failed; refunding its units");
            return units
                .into_iter()
                .map(|u| UnitOutcome::Refund(u.id, code))
                .collect();
        }
        Outcome::Later(reason) => {
            tracing::warn!(order_id = %order.id, transaction_id = %txn, reason, "supplier order not settled; will retry");
            return units.into_iter().map(|_| UnitOutcome::Later).collect();
        }
    };
    let mut outcomes = Vec::with_capacity(units.len());
    let mut profiles = Vec::with_capacity(units.len());
    for unit in units {
        let seat = delivered.seats.get(&unit.id);
        let profile = seat.and_then(|&seat| delivered.profiles.get(seat));
        match profile.map(|profile| profile_row(order, &unit, profile)) {
            Some(Ok(row)) => profiles.push(row),
            Some(Err(refund)) => outcomes.push(refund),
            None => {
                tracing::warn!(unit_id = %unit.id, transaction_id = %txn, supplier = %delivered.supplier, "the supplier delivered fewer profiles than units");
                outcomes.push(UnitOutcome::Refund(unit.id, FailureCode::SupplierError));
            }
        }
    }
    outcomes.extend(store_profiles(args, order, profiles).await);
    outcomes
}

/// The eSIM row of a unit's profile, or the unit's refund when the supplier
/// sent a profile that is not one.
fn profile_row(
    order: &order::Model,
    unit: &order_unit::Model,
    profile: &crate::supplier::Profile,
) -> Result<esim::Model, UnitOutcome> {
    if !esim_rules::is_valid_iccid(&profile.iccid) {
        tracing::warn!(unit_id = %unit.id, iccid = %profile.iccid, "supplier sent an invalid ICCID");
        return Err(UnitOutcome::Refund(
            unit.id.clone(),
            FailureCode::SupplierError,
        ));
    }
    let Some((smdp, matching)) = esim_rules::parse_activation_code(&profile.activation_code) else {
        tracing::warn!(unit_id = %unit.id, "supplier sent an invalid activation code");
        return Err(UnitOutcome::Refund(
            unit.id.clone(),
            FailureCode::SupplierError,
        ));
    };
    let now: DateTime<Utc> = time::now();
    Ok(esim::Model {
        iccid: profile.iccid.clone(),
        partner_id: order.partner_id.clone(),
        mode: order.mode,
        order_id: order.id.clone(),
        unit_id: unit.id.clone(),
        plan_id: order.plan_id.clone(),
        status: EsimStatus::Released,
        smdp_address: smdp.to_owned(),
        matching_id: matching.to_owned(),
        activation_code: profile.activation_code.clone(),
        created_at: now,
        esim_tran_no: profile.esim_tran_no.clone(),
    })
}

/// Stores the profiles of the order's units together, in one delivery: the
/// order settles in that transaction, without its units counted, when they
/// were all of its units.
async fn store_profiles(
    args: &ProvisioningArgs,
    order: &order::Model,
    profiles: Vec<esim::Model>,
) -> Vec<UnitOutcome> {
    if profiles.is_empty() {
        return Vec::new();
    }
    let count = profiles.len();
    match args.writer.deliver(profiles, order.quantity).await {
        Ok(_) => (0..count).map(|_| UnitOutcome::Delivered).collect(),
        Err(err) => {
            tracing::warn!(order_id = %order.id, units = count, error = %err, "storing the profiles failed; will retry");
            (0..count).map(|_| UnitOutcome::Later).collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of what `make` returns, without calling it.
    fn size_of_output<A, B, F>(_make: impl Fn(A, B) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// A pass is moved whole into its box as it starts, once per order; its
    /// database calls off the usual path are boxed within it and the pass
    /// is made where it is kept, so that move copies about a kilobyte
    /// rather than the eight or more it copied when those calls were inline.
    #[test]
    fn a_pass_is_a_small_future() {
        let whole = size_of_output(
            |args: &'static ProvisioningArgs, permit: OwnedSemaphorePermit| {
                provision_order(args, "ord_a", None, None, permit)
            },
        );
        assert!(whole <= 2048, "a pass's future is {whole} bytes");
    }
}
