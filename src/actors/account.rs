//! `AccountActor`: one per partner; the only writer of that partner's floats.
//!
//! Order requests queue in the actor's mailbox. Each `Flush` takes every
//! request queued so far (up to the batch limit; a limit of one is
//! `store.commit_mode = "per_request"`), decides them together with
//! [`ordering::decide`] against the in-memory floats and key bindings, and
//! commits the decided batch in one transaction before answering any of
//! them, so no 202 is ever sent for money that is not committed. The
//! database keeps the last word: the debit is conditional and a key is
//! unique per partner; when a guard fires (another node moved the float or
//! bound one of the keys) the actor reloads what it holds and decides the
//! batch again.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use entities::{deposit, ledger_entry, order};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

use super::{
    admission::Admission,
    provisioning::{ProvisioningHandle, ProvisioningMsg},
};
use crate::{
    domain::{
        admission::Allowance,
        order::FailureCode,
        ordering::{self, Binding, Bound, Floats, OrderRequest, Outcome, Priced, Refusal},
        partner::Mode,
        time,
    },
    store::{
        self, Db,
        orders::{AcceptError, NewOrder, RefusalRow},
    },
};

/// Keys remembered in memory per account; past it the memory is cleared
/// (the database still knows them all).
const REMEMBERED_KEYS: usize = 4096;

/// Most order requests committed in one transaction.
pub const MAX_BATCH: usize = 512;

/// Times a batch is decided again after a guard fired before giving up
/// with `409 conflict` (each time after reloading from the database).
const GUARD_RETRIES: usize = 3;

/// An order request: the priced order (the edge's refusal otherwise).
pub type PlaceOrder = OrderRequest<order::Model>;

impl Priced for order::Model {
    fn order_id(&self) -> &str {
        &self.id
    }

    fn total_cents(&self) -> i64 {
        self.total_cents
    }

    fn units(&self) -> u64 {
        u64::try_from(self.quantity).unwrap_or(0)
    }
}

/// What the account decided.
#[derive(Debug)]
pub enum Decision {
    /// A new order, committed (202).
    Accepted(order::Model),
    /// The key's earlier order, as it is now (200, replayed).
    Replayed(order::Model),
    /// Refused (the key is bound if the refusal binds).
    Refused(Refusal),
    /// The key's earlier binding refusal (replayed).
    ReplayedRefusal(Refusal),
}

/// Why an account actor could not do what it was asked. The edges turn it
/// into the spec's error.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AccountError {
    /// Nothing was written, or the outcome is unknown (the database failed,
    /// the actor did not answer): retrying with the same key is safe.
    #[error("{0}")]
    Internal(String),
    /// The account changed under the request, or a value must be unique.
    #[error("{message}")]
    Conflict {
        message: String,
        /// The field at fault, when there is one.
        param: Option<&'static str>,
    },
    /// The account refused (a movement the float cannot pay).
    #[error("refused: {0:?}")]
    Refused(Refusal),
}

impl AccountError {
    /// An internal failure described by `cause`.
    pub fn internal(cause: impl std::fmt::Display) -> Self {
        Self::Internal(cause.to_string())
    }
}

impl From<sea_orm::DbErr> for AccountError {
    fn from(err: sea_orm::DbErr) -> Self {
        Self::Internal(format!("database: {err}"))
    }
}

/// Messages of the account actor.
pub enum AccountMsg {
    /// Decide an order (with the next flush).
    PlaceOrder(
        Box<PlaceOrder>,
        RpcReplyPort<Result<Decision, AccountError>>,
    ),
    /// Return the money of undelivered units of an order.
    Refund {
        order_id: String,
        unit_ids: Vec<String>,
        failure: FailureCode,
        reply: RpcReplyPort<Result<(), String>>,
    },
    /// An operator's movement on the live float: one ledger row.
    Movement(
        Movement,
        RpcReplyPort<Result<ledger_entry::Model, AccountError>>,
    ),
    /// Sets the sandbox float (play money, no ledger row).
    SetSandboxFloat(i64, RpcReplyPort<Result<(), AccountError>>),
    /// Credit a confirmed crypto deposit with what arrived (once).
    CreditDeposit(String, i64, RpcReplyPort<Result<bool, AccountError>>),
    /// Record an operator's wire deposit, already credited.
    WireDeposit(
        i64,
        String,
        RpcReplyPort<Result<deposit::Model, AccountError>>,
    ),
    /// Decide and persist every order request queued so far.
    Flush,
    /// The balances as this actor holds them: (live, sandbox).
    Balances(RpcReplyPort<(i64, i64)>),
    /// Fault injection: fail this actor (the directory restarts it).
    Fail,
}

/// An order request waiting for the next flush.
type Pending = (
    Box<PlaceOrder>,
    RpcReplyPort<Result<Decision, AccountError>>,
);

/// An operator's money movement.
#[derive(Debug, Clone)]
pub struct Movement {
    /// `adjustment`, `payout`, `chargeback`.
    pub kind: String,
    /// Signed cents.
    pub amount_cents: i64,
    pub description: String,
    /// Whether the float may go below zero (chargebacks).
    pub allow_overdraft: bool,
}

/// What an account actor needs.
#[derive(Clone)]
pub struct AccountArgs {
    pub partner_id: String,
    pub db: Db,
    pub provisioning: Option<ProvisioningHandle>,
    /// Most order requests decided and committed together (1: one
    /// transaction per order).
    pub max_batch: usize,
    /// The shared writer that commits many actors' batches together (SQLite).
    pub writer: Option<super::writer::CommitWriter>,
    /// What the supplier can take: live orders beyond it are refused.
    pub admission: Option<Arc<Admission>>,
}

/// The actor.
pub struct AccountActor;

/// Its state: the floats and the recently used keys.
pub struct AccountState {
    args: AccountArgs,
    floats: Floats,
    keys: HashMap<String, Binding>,
    /// Order requests queued for the next flush.
    pending: Vec<Pending>,
    /// A `Flush` is in the mailbox.
    flush_scheduled: bool,
}

impl AccountState {
    async fn reload_balances(&mut self) -> Result<(), sea_orm::DbErr> {
        let (live, sandbox) = store::orders::balances(&self.args.db, &self.args.partner_id).await?;
        self.floats = Floats { live, sandbox };
        Ok(())
    }

    /// The live units this account may be admitted now.
    fn allowance(&self) -> Allowance {
        self.args
            .admission
            .as_ref()
            .map_or_else(Allowance::unlimited, |a| a.allowance(&self.args.partner_id))
    }

    /// Tells admission what a committed batch admitted and refused.
    fn report_admission(&self, requests: &[PlaceOrder], outcomes: &[Outcome]) {
        let Some(admission) = &self.args.admission else {
            return;
        };
        let mut admitted = 0;
        for (request, outcome) in requests.iter().zip(outcomes) {
            match (outcome, &request.ask) {
                (Outcome::Accept, Ok(order)) if request.mode == Mode::Live => {
                    admitted += order.units();
                }
                (
                    Outcome::Refuse(Refusal::SupplierBusy {
                        busy,
                        retry_after_seconds,
                    }),
                    _,
                ) => {
                    admission.refused(&self.args.partner_id, *busy, *retry_after_seconds);
                }
                _ => {}
            }
        }
        admission.admitted(&self.args.partner_id, admitted);
    }

    fn remember(&mut self, key: &str, binding: Binding) {
        if self.keys.len() >= REMEMBERED_KEYS {
            self.keys.clear();
        }
        self.keys.insert(key.to_owned(), binding);
    }

    /// Loads, in one query, the bindings of the batch's keys not in memory.
    async fn load_bindings(&mut self, requests: &[PlaceOrder]) -> Result<(), sea_orm::DbErr> {
        let unknown: Vec<String> = requests
            .iter()
            .filter(|r| !self.keys.contains_key(&r.key))
            .map(|r| r.key.clone())
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        for (key, binding) in
            store::orders::find_bindings(&self.args.db, &self.args.partner_id, &unknown).await?
        {
            self.remember(&key, binding);
        }
        Ok(())
    }
}

impl Actor for AccountActor {
    type Msg = AccountMsg;
    type State = AccountState;
    type Arguments = AccountArgs;

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        super::log_lifecycle(
            "account",
            Some(&state.args.partner_id),
            "stopped",
            "drained",
        );
        Ok(())
    }

    async fn pre_start(
        &self,
        _myself: ActorRef<AccountMsg>,
        args: AccountArgs,
    ) -> Result<AccountState, ActorProcessingErr> {
        let (live, sandbox) = Box::pin(store::orders::balances(&args.db, &args.partner_id)).await?;
        Ok(AccountState {
            args,
            floats: Floats { live, sandbox },
            keys: HashMap::new(),
            pending: Vec::new(),
            flush_scheduled: false,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<AccountMsg>,
        message: AccountMsg,
        state: &mut AccountState,
    ) -> Result<(), ActorProcessingErr> {
        // Boxed: the actor's task is sized for its largest await state, and the
        // order and database futures are large; an idle actor should not carry them.
        Box::pin(handle_message(myself, message, state)).await
    }
}

async fn handle_message(
    myself: ActorRef<AccountMsg>,
    message: AccountMsg,
    state: &mut AccountState,
) -> Result<(), ActorProcessingErr> {
    match message {
        AccountMsg::PlaceOrder(request, reply) => {
            // Everything already queued ahead of the Flush joins this batch.
            state.pending.push((request, reply));
            if !state.flush_scheduled {
                myself.cast(AccountMsg::Flush)?;
                state.flush_scheduled = true;
            }
        }
        AccountMsg::Flush => {
            state.flush_scheduled = false;
            let take = state.pending.len().min(state.args.max_batch.max(1));
            let batch: Vec<Pending> = state.pending.drain(..take).collect();
            if !state.pending.is_empty() {
                myself.cast(AccountMsg::Flush)?;
                state.flush_scheduled = true;
            }
            flush(state, batch).await;
        }
        AccountMsg::Balances(reply) => {
            let _ = reply.send((state.floats.live, state.floats.sandbox));
        }
        AccountMsg::Refund {
            order_id,
            unit_ids,
            failure,
            reply,
        } => {
            let _ = reply.send(
                refund(state, &order_id, &unit_ids, failure)
                    .await
                    .map_err(|e| e.to_string()),
            );
        }
        AccountMsg::Movement(movement, reply) => {
            let _ = reply.send(apply_movement(state, movement).await);
        }
        AccountMsg::SetSandboxFloat(cents, reply) => {
            let result = store::orders::set_sandbox_float(
                &state.args.db,
                &state.args.partner_id,
                cents,
                time::now(),
            )
            .await;
            if matches!(result, Ok(true)) {
                state.floats.sandbox = cents;
            }
            let _ = reply.send(result.map(|_| ()).map_err(AccountError::from));
        }
        AccountMsg::CreditDeposit(deposit_id, amount, reply) => {
            let _ = reply.send(credit_deposit(state, &deposit_id, amount).await);
        }
        AccountMsg::WireDeposit(amount, reference, reply) => {
            let _ = reply.send(wire_deposit(state, amount, &reference).await);
        }
        AccountMsg::Fail => return Err("fault injected by the operator".into()),
    }
    Ok(())
}

/// Decides and commits one batch, then answers every request in it.
async fn flush(state: &mut AccountState, batch: Vec<Pending>) {
    if batch.is_empty() {
        return;
    }
    let (requests, replies): (Vec<PlaceOrder>, Vec<_>) =
        batch.into_iter().map(|(r, reply)| (*r, reply)).unzip();
    let answers: Vec<Result<Decision, AccountError>> = match decide_and_commit(state, &requests)
        .await
    {
        Ok(decisions) => decisions.into_iter().map(Ok).collect(),
        Err(err) => {
            if let AccountError::Internal(why) = &err {
                tracing::warn!(partner_id = %state.args.partner_id, size = requests.len(), error = %why, "order batch not committed; every request in it is answered 500 (retry with the same key is safe)");
            }
            (0..requests.len()).map(|_| Err(err.clone())).collect()
        }
    };
    for (reply, answer) in replies.into_iter().zip(answers) {
        announce(state, &answer);
        let _ = reply.send(answer);
    }
}

/// Decides a batch against memory and commits it. When a database guard
/// fires (another node moved the float or bound a key first), memory is
/// reloaded and the batch decided again, so the loser of a race replays the
/// winner. When the database is down, the batch fails as a whole and memory
/// is reloaded so it never drifts from what committed.
async fn decide_and_commit(
    state: &mut AccountState,
    requests: &[PlaceOrder],
) -> Result<Vec<Decision>, AccountError> {
    for _ in 0..GUARD_RETRIES {
        match try_batch(state, requests).await {
            Ok(decisions) => return Ok(decisions),
            Err(Attempt::Guard(why)) => {
                tracing::info!(partner_id = %state.args.partner_id, why, "a guard fired under an order batch; deciding it again");
                forget(state, requests);
                state.reload_balances().await?;
            }
            Err(Attempt::Failed(err)) => {
                forget(state, requests);
                if let Err(reload) = state.reload_balances().await {
                    tracing::error!(partner_id = %state.args.partner_id, error = %reload, "balances could not be reloaded after a failed commit");
                }
                return Err(err);
            }
        }
    }
    Err(AccountError::Conflict {
        message: "The account changed under this request; retry with the same key.".into(),
        param: None,
    })
}

/// Drops what memory holds of a batch's keys (the database knows better).
fn forget(state: &mut AccountState, requests: &[PlaceOrder]) {
    for request in requests {
        state.keys.remove(&request.key);
    }
}

/// Why one attempt at a batch did not commit.
enum Attempt {
    /// A guard fired: decide again after reloading.
    Guard(&'static str),
    /// The database refused or is down.
    Failed(AccountError),
}

impl From<sea_orm::DbErr> for Attempt {
    fn from(err: sea_orm::DbErr) -> Self {
        Attempt::Failed(AccountError::from(err))
    }
}

/// One attempt: load the unknown keys, decide, commit, build the answers.
async fn try_batch(
    state: &mut AccountState,
    requests: &[PlaceOrder],
) -> Result<Vec<Decision>, Attempt> {
    state.load_bindings(requests).await?;
    let allowance = state.allowance();
    let mut decided = ordering::decide(requests, &state.keys, state.floats, allowance);
    if decided.refused_for_money() {
        // Another node may have credited a deposit: confirm before binding keys.
        let before = state.floats;
        state.reload_balances().await?;
        if state.floats != before {
            decided = ordering::decide(requests, &state.keys, state.floats, allowance);
        }
    }
    let job = job_of(state, requests, &decided.outcomes);
    if !job.accepted.is_empty() || !job.refusals.is_empty() {
        let committed = match &state.args.writer {
            Some(writer) => writer.submit(job).await,
            None => commit_alone(&state.args.db, job).await,
        };
        let (live, sandbox) = committed.map_err(|e| match e {
            AcceptError::Insufficient => Attempt::Guard("the float moved under the batch"),
            AcceptError::Db(err) if store::is_unique_violation(&err) => {
                Attempt::Guard("another node bound a key of the batch")
            }
            AcceptError::Db(err) => Attempt::from(err),
        })?;
        state.floats.live = live.unwrap_or(state.floats.live);
        state.floats.sandbox = sandbox.unwrap_or(state.floats.sandbox);
    }
    state.report_admission(requests, &decided.outcomes);
    let bindings: Vec<(String, Binding)> = decided
        .new_bindings(requests)
        .map(|(key, binding)| (key.to_owned(), binding))
        .collect();
    for (key, binding) in bindings {
        state.remember(&key, binding);
    }
    answers(state, requests, decided.outcomes).await
}

/// The rows a decided batch writes.
fn job_of(
    state: &AccountState,
    requests: &[PlaceOrder],
    outcomes: &[Outcome],
) -> super::writer::Job {
    let mut accepted = Vec::new();
    let mut refusals = Vec::new();
    for (request, outcome) in requests.iter().zip(outcomes) {
        match (outcome, &request.ask) {
            (Outcome::Accept, Ok(order)) => accepted.push(NewOrder {
                order: order.clone(),
                fingerprint: request.fingerprint.clone(),
            }),
            (Outcome::Refuse(refusal), _) if refusal.binds() => refusals.push(RefusalRow {
                key: request.key.clone(),
                mode: request.mode,
                fingerprint: request.fingerprint.clone(),
                refusal: refusal.clone(),
            }),
            _ => {}
        }
    }
    super::writer::Job {
        partner_id: state.args.partner_id.clone(),
        accepted,
        refusals,
        now: time::now(),
    }
}

/// Turns committed outcomes into answers; replayed orders are read back in
/// one query, as they are now.
async fn answers(
    state: &AccountState,
    requests: &[PlaceOrder],
    outcomes: Vec<Outcome>,
) -> Result<Vec<Decision>, Attempt> {
    let accepted_here: HashMap<&str, &order::Model> = requests
        .iter()
        .zip(&outcomes)
        .filter(|(_, o)| matches!(o, Outcome::Accept))
        .filter_map(|(r, _)| r.ask.as_ref().ok())
        .map(|o| (o.id.as_str(), o))
        .collect();
    let earlier: Vec<String> = outcomes
        .iter()
        .filter_map(|o| match o {
            Outcome::Replay(Bound::Order(id)) if !accepted_here.contains_key(id.as_str()) => {
                Some(id.clone())
            }
            _ => None,
        })
        .collect();
    let read_back: HashMap<String, order::Model> =
        store::orders::get_orders(&state.args.db, &earlier)
            .await?
            .into_iter()
            .map(|o| (o.id.clone(), o))
            .collect();
    let mut decisions = Vec::with_capacity(outcomes.len());
    for (request, outcome) in requests.iter().zip(outcomes) {
        decisions.push(match outcome {
            Outcome::Accept => match &request.ask {
                Ok(order) => Decision::Accepted(order.clone()),
                Err(_) => {
                    return Err(Attempt::Failed(AccountError::internal(
                        "accepted a refusal",
                    )));
                }
            },
            Outcome::Refuse(refusal) => Decision::Refused(refusal),
            Outcome::Replay(Bound::Refusal(refusal)) => Decision::ReplayedRefusal(refusal),
            Outcome::Replay(Bound::Order(id)) => {
                let order = match accepted_here.get(id.as_str()) {
                    Some(order) => (*order).clone(),
                    None => read_back.get(&id).cloned().ok_or_else(|| {
                        Attempt::Failed(AccountError::internal("a bound order is missing"))
                    })?,
                };
                Decision::Replayed(order)
            }
        });
    }
    Ok(decisions)
}

/// Commits one batch in its own transaction (no shared writer).
async fn commit_alone(
    db: &Db,
    job: super::writer::Job,
) -> Result<super::writer::Committed, AcceptError> {
    let txn = store::begin_write(db).await?;
    let committed =
        store::orders::accept_batch(&txn, &job.partner_id, &job.accepted, &job.refusals, job.now)
            .await?;
    txn.commit().await?;
    Ok(committed)
}

/// Counts an accepted order and hands it to provisioning.
fn announce(state: &AccountState, decision: &Result<Decision, AccountError>) {
    let Ok(Decision::Accepted(order)) = decision else {
        return;
    };
    crate::metrics::order_accepted(&order.mode);
    if let Some(provisioning) = &state.args.provisioning {
        provisioning.send(ProvisioningMsg::Provision {
            order_id: order.id.clone(),
            claimed_until: order.claimed_until,
            fresh: Some(Box::new(order.clone())),
        });
    }
}

/// Refunds undelivered units and settles the order if nothing is left
/// pending, all in one transaction.
async fn refund(
    state: &mut AccountState,
    order_id: &str,
    unit_ids: &[String],
    failure: FailureCode,
) -> Result<(), sea_orm::DbErr> {
    let db = state.args.db.clone();
    let Some(order) = store::orders::get_order(&db, order_id).await? else {
        return Ok(());
    };
    let mode = store::orders::mode_of(&order)?;
    let now = time::now();
    let txn = store::begin_write(&db).await?;
    let refunded = store::orders::refund_units(&txn, &order, unit_ids, failure, now).await?;
    let settled = store::orders::finalize(&txn, order_id, now).await?;
    txn.commit().await?;
    if let Some(balance_after) = refunded {
        *state.floats.of_mut(mode) = balance_after;
        tracing::info!(partner_id = %order.partner_id, order_id, units = unit_ids.len(), failure = failure.as_str(), "units refunded");
    }
    if let Some(settled) = settled {
        crate::metrics::order_settled(&settled, now);
    }
    Ok(())
}

/// Moves money on the live float and writes its ledger row, in one transaction.
async fn apply_movement(
    state: &mut AccountState,
    movement: Movement,
) -> Result<ledger_entry::Model, AccountError> {
    let db = state.args.db.clone();
    let now = time::now();
    let txn = store::begin_write(&db).await?;
    let moved = store::orders::move_money_with(
        &txn,
        &state.args.partner_id,
        Mode::Live,
        movement.amount_cents,
        movement.allow_overdraft,
        now,
    )
    .await?;
    let Some((balance_after, Some(seq))) = moved else {
        drop(txn);
        state.reload_balances().await?;
        return Err(AccountError::Refused(Refusal::Insufficient {
            mode: Mode::Live,
            balance_cents: state.floats.live,
            required_cents: -movement.amount_cents,
        }));
    };
    let entry = store::orders::insert_ledger(
        &txn,
        store::orders::LedgerRow {
            partner_id: &state.args.partner_id,
            seq,
            kind: &movement.kind,
            amount_cents: movement.amount_cents,
            balance_after_cents: balance_after,
            description: movement.description,
            order_id: None,
            deposit_id: None,
            movement_key: None,
            now,
        },
    )
    .await?;
    txn.commit().await?;
    state.floats.live = balance_after;
    tracing::info!(partner_id = %state.args.partner_id, kind = %entry.kind, amount_cents = entry.amount_cents, balance_after, "money moved by the operator");
    Ok(entry)
}

/// Credits a crypto deposit in one transaction; `false` if it was already credited.
async fn credit_deposit(
    state: &mut AccountState,
    deposit_id: &str,
    amount: i64,
) -> Result<bool, AccountError> {
    let db = state.args.db.clone();
    let Some(deposit) = store::deposits::get(&db, deposit_id).await? else {
        return Ok(false);
    };
    let txn = store::begin_write(&db).await?;
    let credited = store::deposits::credit(&txn, &deposit, amount, time::now()).await;
    match credited {
        Ok(Some((balance_after, entry))) => {
            txn.commit().await?;
            state.floats.live = balance_after;
            tracing::info!(partner_id = %deposit.partner_id, deposit_id, amount_cents = amount, ledger_entry_id = %entry.id, "deposit credited");
            crate::metrics::deposit_transition(&deposit.status, store::deposits::CREDITED);
            Ok(true)
        }
        Ok(None) => Ok(false),
        Err(err) if store::is_unique_violation(&err) => Ok(false),
        Err(err) => Err(AccountError::from(err)),
    }
}

/// Records a wire deposit already credited.
async fn wire_deposit(
    state: &mut AccountState,
    amount: i64,
    reference: &str,
) -> Result<deposit::Model, AccountError> {
    let db = state.args.db.clone();
    let txn = store::begin_write(&db).await?;
    match store::deposits::record_wire(&txn, &state.args.partner_id, amount, reference, time::now())
        .await
    {
        Ok((deposit, balance_after)) => {
            txn.commit().await?;
            state.floats.live = balance_after;
            tracing::info!(partner_id = %deposit.partner_id, deposit_id = %deposit.id, amount_cents = amount, "wire deposit recorded");
            crate::metrics::deposit_transition("none", store::deposits::CREDITED);
            Ok(deposit)
        }
        Err(err) if store::is_unique_violation(&err) => Err(AccountError::Conflict {
            message: "A deposit with this reference exists for this partner.".into(),
            param: Some("reference"),
        }),
        Err(err) => Err(AccountError::from(err)),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use chrono::Utc;
    use ractor::rpc::CallResult;
    use sea_orm::ConnectionTrait;
    use serde_json::json;

    use super::*;
    use crate::{
        config::DatabaseSettings,
        store::partners::{NewPartner, create},
    };

    async fn database() -> (tempfile::TempDir, Db, String) {
        let dir = tempfile::tempdir().unwrap();
        let settings = DatabaseSettings {
            url: format!("sqlite://{}/t.db?mode=rwc", dir.path().display()),
            max_connections: 4,
            busy_timeout_ms: 5000,
            probe_timeout_ms: 2000,
        };
        let db = store::connect(&settings).await.unwrap();
        store::migrate(&db).await.unwrap();
        let partner = create(
            &db,
            NewPartner {
                name: "T".into(),
                slug: "t".into(),
                status: "live".into(),
                tier: "gold".into(),
                discount_override_bps: None,
                low_balance_threshold_cents: 0,
                sandbox_float_cents: 10_000,
            },
            Utc::now(),
        )
        .await
        .unwrap();
        (dir, db, partner.partner.id)
    }

    fn request(partner_id: &str, key: &str, total: i64) -> PlaceOrder {
        PlaceOrder {
            key: key.into(),
            mode: Mode::Sandbox,
            fingerprint: key.into(),
            ask: Ok(order::Model {
                id: crate::domain::ids::OrderId::generate().into_string(),
                partner_id: partner_id.into(),
                mode: "sandbox".into(),
                idempotency_key: key.into(),
                plan_id: "pl_x".into(),
                quantity: 1,
                unit_price_cents: total,
                total_cents: total,
                list_unit_cents: total,
                price_source: "tier:gold".into(),
                metadata: json!({}),
                status: "processing".into(),
                failure_code: None,
                refunded_cents: 0,
                attempts: 0,
                claimed_until: None,
                claimed_by: None,
                created_at: Utc::now(),
                completed_at: None,
            }),
            always_insufficient: false,
        }
    }

    async fn send_batch(
        actor: &ActorRef<AccountMsg>,
        requests: Vec<PlaceOrder>,
    ) -> Vec<Result<Decision, AccountError>> {
        let calls = requests.into_iter().map(|r| {
            let actor = actor.clone();
            async move {
                match actor
                    .call(
                        |reply| AccountMsg::PlaceOrder(Box::new(r), reply),
                        Some(Duration::from_secs(10)),
                    )
                    .await
                {
                    Ok(CallResult::Success(decision)) => decision,
                    other => panic!("no answer: {:?}", other.is_ok()),
                }
            }
        });
        futures::future::join_all(calls).await
    }

    async fn balances(actor: &ActorRef<AccountMsg>) -> (i64, i64) {
        match actor
            .call(AccountMsg::Balances, Some(Duration::from_secs(5)))
            .await
        {
            Ok(CallResult::Success(b)) => b,
            _ => panic!("no balances"),
        }
    }

    #[tokio::test]
    async fn a_batch_commits_in_order_and_memory_matches_the_database() {
        let (_dir, db, partner_id) = database().await;
        let args = AccountArgs {
            partner_id: partner_id.clone(),
            db: db.clone(),
            provisioning: None,
            max_batch: MAX_BATCH,
            writer: Some(super::super::writer::CommitWriter::start(db.clone())),
            admission: None,
        };
        let (actor, _) = Actor::spawn(None, AccountActor, args).await.unwrap();

        let requests = vec![
            request(&partner_id, "k1", 4000),
            request(&partner_id, "k2", 7000),
            request(&partner_id, "k3", 5000),
            request(&partner_id, "k1", 4000),
        ];
        let decisions = send_batch(&actor, requests).await;

        assert!(matches!(decisions[0], Ok(Decision::Accepted(_))));
        assert!(
            matches!(
                &decisions[1],
                Ok(Decision::Refused(Refusal::Insufficient { .. }))
            ),
            "7000 does not fit in 6000"
        );
        assert!(
            matches!(decisions[2], Ok(Decision::Accepted(_))),
            "5000 still fits"
        );
        assert!(
            matches!(decisions[3], Ok(Decision::Replayed(_))),
            "a duplicate key replays"
        );
        let in_memory = balances(&actor).await;
        assert_eq!(
            in_memory,
            store::orders::balances(&db, &partner_id).await.unwrap()
        );
        assert_eq!(in_memory.1, 1000);
    }

    #[tokio::test]
    async fn a_failed_commit_answers_the_whole_batch_500_and_memory_stays_equal_to_the_database() {
        let (_dir, db, partner_id) = database().await;
        let args = AccountArgs {
            partner_id: partner_id.clone(),
            db: db.clone(),
            provisioning: None,
            max_batch: MAX_BATCH,
            writer: None,
            admission: None,
        };
        let (actor, _) = Actor::spawn(None, AccountActor, args).await.unwrap();
        // Sabotage: units cannot be written, so the batch transaction fails half-way.
        db.execute_unprepared("ALTER TABLE order_units RENAME TO order_units_gone")
            .await
            .unwrap();

        let decisions = send_batch(
            &actor,
            vec![
                request(&partner_id, "a1", 1000),
                request(&partner_id, "a2", 2000),
            ],
        )
        .await;

        for decision in &decisions {
            assert!(
                matches!(decision, Err(AccountError::Internal(_))),
                "{decision:?}"
            );
        }
        let database_balances = store::orders::balances(&db, &partner_id).await.unwrap();
        assert_eq!(database_balances.1, 10_000, "nothing was debited");
        assert_eq!(balances(&actor).await, database_balances);

        // Once the database is whole again, the same keys go through.
        db.execute_unprepared("ALTER TABLE order_units_gone RENAME TO order_units")
            .await
            .unwrap();
        let retried = send_batch(&actor, vec![request(&partner_id, "a1", 1000)]).await;
        assert!(matches!(retried[0], Ok(Decision::Accepted(_))));
        assert_eq!(
            balances(&actor).await,
            store::orders::balances(&db, &partner_id).await.unwrap()
        );
    }

    #[tokio::test]
    async fn the_shared_writer_commits_other_partners_when_one_jobs_guard_fires() {
        use super::super::writer::{CommitWriter, Job};
        let (_dir, db, poor) = database().await;
        let rich = create(
            &db,
            NewPartner {
                name: "R".into(),
                slug: "r".into(),
                status: "live".into(),
                tier: "gold".into(),
                discount_override_bps: None,
                low_balance_threshold_cents: 0,
                sandbox_float_cents: 50_000,
            },
            Utc::now(),
        )
        .await
        .unwrap()
        .partner
        .id;
        let writer = CommitWriter::start(db.clone());
        let job = |partner: &str, key: &str, total: i64| {
            let order = request(partner, key, total).ask.unwrap();
            Job {
                partner_id: partner.into(),
                accepted: vec![NewOrder {
                    order,
                    fingerprint: key.into(),
                }],
                refusals: Vec::new(),
                now: Utc::now(),
            }
        };

        let (too_big, fits) = tokio::join!(
            writer.submit(job(&poor, "p1", 20_000)),
            writer.submit(job(&rich, "r1", 20_000))
        );

        assert!(matches!(too_big, Err(AcceptError::Insufficient)));
        assert_eq!(fits.unwrap().1, Some(30_000));
        assert_eq!(
            store::orders::balances(&db, &poor).await.unwrap().1,
            10_000,
            "the failed job rolled back alone"
        );
        assert_eq!(store::orders::balances(&db, &rich).await.unwrap().1, 30_000);
        assert!(
            store::orders::find_key(&db, &poor, "p1")
                .await
                .unwrap()
                .is_none()
        );
        assert!(
            store::orders::find_key(&db, &rich, "r1")
                .await
                .unwrap()
                .is_some()
        );
    }
}
