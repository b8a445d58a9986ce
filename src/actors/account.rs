//! `AccountActor`: one per partner; the only writer of that partner's floats.
//!
//! A message that moves money is decided against the in-memory balances and
//! committed to the database before it is answered, so no 202 is ever sent
//! for money that is not committed. The database keeps the last word: the
//! debit is conditional, an idempotency key is unique per partner, and when a
//! guard fires (another node moved the money) the actor reloads and decides
//! again.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use entities::{deposit, idempotency_key, ledger_entry, order};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

use super::{
    batch::{binds, insufficient, key_reused},
    provisioning::ProvisioningMsg,
};
use crate::{
    domain::{order::FailureCode, partner::Mode, time},
    http::error::{ApiError, ErrorCode},
    store::{
        self, Db,
        orders::{AcceptError, NewOrder},
    },
};

/// Keys remembered in memory per account before the oldest half is dropped
/// (the database still knows them all).
const REMEMBERED_KEYS: usize = 4096;

/// An order the handler has parsed and priced.
#[derive(Debug, Clone)]
pub struct PlaceOrder {
    /// The trimmed Idempotency-Key.
    pub key: String,
    pub mode: Mode,
    /// Fingerprint of the request body.
    pub fingerprint: String,
    /// The priced order, or the refusal the plan or the account gave.
    pub verdict: Result<order::Model, ApiError>,
    /// The plan is the sandbox fixture that always answers 402.
    pub always_insufficient: bool,
}

/// What the account decided.
#[derive(Debug)]
pub enum Decision {
    /// A new order, committed (202).
    Accepted(order::Model),
    /// The key's earlier order, as it is now (200, replayed).
    Replayed(order::Model),
    /// Refused (the key is bound if the refusal binds).
    Refused(ApiError),
    /// The key's earlier binding refusal (replayed).
    ReplayedRefusal(ApiError),
}

/// Messages of the account actor.
pub enum AccountMsg {
    /// Decide an order.
    PlaceOrder(Box<PlaceOrder>, RpcReplyPort<Result<Decision, ApiError>>),
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
        RpcReplyPort<Result<ledger_entry::Model, ApiError>>,
    ),
    /// Sets the sandbox float (play money, no ledger row).
    SetSandboxFloat(i64, RpcReplyPort<Result<(), ApiError>>),
    /// Credit a confirmed crypto deposit with what arrived (once).
    CreditDeposit(String, i64, RpcReplyPort<Result<bool, ApiError>>),
    /// Record an operator's wire deposit, already credited.
    WireDeposit(i64, String, RpcReplyPort<Result<deposit::Model, ApiError>>),
    /// Group commit: decide and persist every order request queued so far.
    Flush,
    /// The balances as this actor holds them: (live, sandbox).
    Balances(RpcReplyPort<(i64, i64)>),
    /// Fault injection: fail this actor (the directory restarts it).
    Fail,
}

/// An order request waiting for the next group commit.
type Pending = (Box<PlaceOrder>, RpcReplyPort<Result<Decision, ApiError>>);

/// Most order requests committed in one transaction.
const MAX_BATCH: usize = 512;

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
    pub provisioning: Option<ActorRef<ProvisioningMsg>>,
    /// Group commit (`store.commit_mode = "batch"`) or one transaction per order.
    pub batching: bool,
    /// The shared writer that commits many actors' batches together (SQLite).
    pub writer: Option<super::writer::CommitWriter>,
}

/// The actor.
pub struct AccountActor;

/// Its state: the floats and the recently used keys.
pub struct AccountState {
    args: AccountArgs,
    live_cents: i64,
    sandbox_cents: i64,
    keys: HashMap<String, idempotency_key::Model>,
    /// Order requests queued for the next flush.
    pending: Vec<Pending>,
    /// A `Flush` is in the mailbox.
    flush_scheduled: bool,
}

impl AccountState {
    fn balance(&self, mode: Mode) -> i64 {
        match mode {
            Mode::Live => self.live_cents,
            Mode::Sandbox => self.sandbox_cents,
        }
    }

    fn set_balance(&mut self, mode: Mode, cents: i64) {
        match mode {
            Mode::Live => self.live_cents = cents,
            Mode::Sandbox => self.sandbox_cents = cents,
        }
    }

    async fn reload_balances(&mut self) -> Result<(), sea_orm::DbErr> {
        (self.live_cents, self.sandbox_cents) =
            store::orders::balances(&self.args.db, &self.args.partner_id).await?;
        Ok(())
    }

    fn remember(&mut self, record: idempotency_key::Model) {
        if self.keys.len() >= REMEMBERED_KEYS {
            let oldest: Vec<String> = {
                let mut by_age: Vec<(&String, &DateTime<Utc>)> =
                    self.keys.iter().map(|(k, r)| (k, &r.created_at)).collect();
                by_age.sort_by_key(|(_, at)| **at);
                by_age
                    .iter()
                    .take(REMEMBERED_KEYS / 2)
                    .map(|(k, _)| (*k).clone())
                    .collect()
            };
            for key in oldest {
                self.keys.remove(&key);
            }
        }
        self.keys.insert(record.key.clone(), record);
    }

    async fn binding(
        &mut self,
        key: &str,
    ) -> Result<Option<idempotency_key::Model>, sea_orm::DbErr> {
        if let Some(record) = self.keys.get(key) {
            return Ok(Some(record.clone()));
        }
        let found = store::orders::find_key(&self.args.db, &self.args.partner_id, key).await?;
        if let Some(record) = &found {
            self.remember(record.clone());
        }
        Ok(found)
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
        let (live_cents, sandbox_cents) =
            Box::pin(store::orders::balances(&args.db, &args.partner_id)).await?;
        Ok(AccountState {
            args,
            live_cents,
            sandbox_cents,
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
    {
        match message {
            AccountMsg::PlaceOrder(request, reply) if state.args.batching => {
                // Everything already queued ahead of the Flush joins this batch.
                state.pending.push((request, reply));
                if !state.flush_scheduled {
                    myself.cast(AccountMsg::Flush)?;
                    state.flush_scheduled = true;
                }
            }
            AccountMsg::Flush => {
                state.flush_scheduled = false;
                let take = state.pending.len().min(MAX_BATCH);
                let batch: Vec<Pending> = state.pending.drain(..take).collect();
                if !state.pending.is_empty() {
                    myself.cast(AccountMsg::Flush)?;
                    state.flush_scheduled = true;
                }
                flush(state, batch).await;
            }
            AccountMsg::Balances(reply) => {
                let _ = reply.send((state.live_cents, state.sandbox_cents));
            }
            AccountMsg::PlaceOrder(request, reply) => {
                let decision = place_order(state, *request).await;
                announce(state, &decision);
                let _ = reply.send(decision);
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
                    state.sandbox_cents = cents;
                }
                let _ = reply.send(result.map(|_| ()).map_err(ApiError::from));
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
}

/// Decides a batch in memory and commits it in one transaction. If the
/// commit fails, the in-memory state is reloaded from the database, so memory
/// never drifts from what committed, and each request is decided again on its
/// own: when the failure was a guard firing (another node moved the float or
/// bound one of the keys), the others still go through and the loser replays;
/// when the database is down, each is answered 500 (the partner retries with
/// the same key, which is safe).
async fn flush(state: &mut AccountState, batch: Vec<Pending>) {
    if batch.is_empty() {
        return;
    }
    let requests: Vec<PlaceOrder> = batch.iter().map(|(r, _)| (**r).clone()).collect();
    match commit_batch(state, &requests).await {
        Ok(decisions) => {
            for ((_, reply), decision) in batch.into_iter().zip(decisions) {
                announce(state, &decision);
                let _ = reply.send(decision);
            }
        }
        Err(err) => {
            tracing::warn!(partner_id = %state.args.partner_id, size = requests.len(), error = %err, "group commit failed; deciding the batch one request at a time");
            state.keys.clear();
            if let Err(reload) = state.reload_balances().await {
                tracing::error!(partner_id = %state.args.partner_id, error = %reload, "balances could not be reloaded after a failed commit");
                for (_, reply) in batch {
                    let _ = reply.send(Err(ApiError::new(ErrorCode::InternalError)));
                }
                return;
            }
            for ((_, reply), request) in batch.into_iter().zip(requests) {
                let decision = place_order(state, request).await;
                announce(state, &decision);
                let _ = reply.send(decision);
            }
        }
    }
}

/// Commits one batch in its own transaction (no shared writer).
async fn commit_alone(
    db: &Db,
    job: super::writer::Job,
) -> Result<super::writer::Committed, AcceptError> {
    let txn = store::begin_write(db).await?;
    let committed =
        store::orders::accept_batch(&txn, &job.partner_id, &job.accepted, job.refusals, job.now)
            .await?;
    txn.commit().await?;
    Ok(committed)
}

/// Counts an accepted order and hands it to provisioning.
fn announce(state: &AccountState, decision: &Result<Decision, ApiError>) {
    if let Ok(Decision::Accepted(order)) = decision {
        crate::metrics::order_accepted(&order.mode);
    }
    if let Ok(Decision::Accepted(order)) = decision
        && let Some(provisioning) = &state.args.provisioning
    {
        let _ = provisioning.cast(ProvisioningMsg::Provision {
            order_id: order.id.clone(),
            claimed_until: order.claimed_until,
        });
    }
}

async fn commit_batch(
    state: &mut AccountState,
    requests: &[PlaceOrder],
) -> Result<Vec<Result<Decision, ApiError>>, ApiError> {
    use super::batch::{Binding, Plan, Request, plan};
    let unknown: Vec<String> = requests
        .iter()
        .filter(|r| !state.keys.contains_key(&r.key))
        .map(|r| r.key.clone())
        .collect();
    for record in store::orders::find_keys(&state.args.db, &state.args.partner_id, &unknown).await?
    {
        state.remember(record);
    }
    let planner_input: Vec<Request> = requests
        .iter()
        .map(|r| Request {
            key: r.key.clone(),
            mode: r.mode,
            fingerprint: r.fingerprint.clone(),
            verdict: r.verdict.clone(),
            always_insufficient: r.always_insufficient,
        })
        .collect();
    let mut planned = plan(
        &planner_input,
        &state.keys,
        (state.live_cents, state.sandbox_cents),
    );
    let refused_for_money = planned.plans.iter().any(
        |p| matches!(p, Plan::Refuse { error, .. } if error.code == ErrorCode::BalanceInsufficient),
    );
    if refused_for_money {
        // Another node may have credited a deposit: decide against the database before binding keys.
        let before = (state.live_cents, state.sandbox_cents);
        state.reload_balances().await?;
        if before != (state.live_cents, state.sandbox_cents) {
            planned = plan(
                &planner_input,
                &state.keys,
                (state.live_cents, state.sandbox_cents),
            );
        }
    }
    let now = time::now();
    let mut accepted = Vec::new();
    let mut refusals = Vec::new();
    for (request, plan) in requests.iter().zip(&planned.plans) {
        match plan {
            Plan::Accept(order) => accepted.push(NewOrder {
                order: (**order).clone(),
                fingerprint: request.fingerprint.clone(),
            }),
            Plan::Refuse { error, bind: true } => refusals.push(idempotency_key::Model {
                partner_id: state.args.partner_id.clone(),
                key: request.key.clone(),
                mode: request.mode.as_str().to_owned(),
                fingerprint: request.fingerprint.clone(),
                order_id: None,
                error_status: Some(i32::from(error.http_status().as_u16())),
                error_body: Some(error.to_stored()),
                created_at: now,
            }),
            _ => {}
        }
    }
    if !accepted.is_empty() || !refusals.is_empty() {
        let job = super::writer::Job {
            partner_id: state.args.partner_id.clone(),
            accepted: accepted.clone(),
            refusals: refusals.clone(),
            now,
        };
        let committed = match &state.args.writer {
            Some(writer) => writer.submit(job).await,
            None => commit_alone(&state.args.db, job).await,
        };
        let (live, sandbox) = committed.map_err(|e| match e {
            AcceptError::Insufficient => {
                ApiError::new(ErrorCode::Conflict).with_message("the float moved under the batch")
            }
            // Another node bound one of the keys first: a lost race, not a
            // fault (the batch is decided again one request at a time).
            AcceptError::Db(err) if store::is_unique_violation(&err) => {
                ApiError::new(ErrorCode::Conflict)
                    .with_message("another node bound a key of the batch")
            }
            AcceptError::Db(err) => ApiError::from(err),
        })?;
        if let Some(live) = live {
            state.live_cents = live;
        }
        if let Some(sandbox) = sandbox {
            state.sandbox_cents = sandbox;
        }
        for new in &accepted {
            state.remember(binding_of(new));
        }
        for refusal in refusals {
            state.remember(refusal);
        }
    }
    let in_batch: HashMap<&str, &order::Model> = accepted
        .iter()
        .map(|n| (n.order.id.as_str(), &n.order))
        .collect();
    let mut decisions = Vec::with_capacity(requests.len());
    for plan in planned.plans {
        decisions.push(match plan {
            Plan::Accept(order) => Ok(Decision::Accepted(*order)),
            Plan::Refuse { error, .. } | Plan::Reused(error) => Ok(Decision::Refused(error)),
            Plan::Replay(Binding::Refusal(error)) => Ok(Decision::ReplayedRefusal(error)),
            Plan::Replay(Binding::Order(id)) => match in_batch.get(id.as_str()) {
                Some(order) => Ok(Decision::Replayed((*order).clone())),
                None => store::orders::get_order(&state.args.db, &id)
                    .await
                    .map_err(ApiError::from)
                    .and_then(|o| o.ok_or_else(|| ApiError::internal("a bound order is missing")))
                    .map(Decision::Replayed),
            },
        });
    }
    Ok(decisions)
}

/// The decision on one order request.
async fn place_order(
    state: &mut AccountState,
    mut request: PlaceOrder,
) -> Result<Decision, ApiError> {
    if let Some(decision) = replay(state, &request).await? {
        return Ok(decision);
    }
    let verdict = std::mem::replace(
        &mut request.verdict,
        Err(ApiError::new(ErrorCode::Conflict)),
    );
    let order = match verdict {
        Ok(order) => order,
        Err(refusal) if binds(&refusal) => {
            return bind(
                state,
                &request.key,
                request.mode,
                &request.fingerprint,
                refusal,
            )
            .await;
        }
        Err(refusal) => return Ok(Decision::Refused(refusal)),
    };
    if request.always_insufficient {
        let refusal = insufficient(request.mode, state.balance(request.mode), order.total_cents);
        return bind(
            state,
            &request.key,
            request.mode,
            &request.fingerprint,
            refusal,
        )
        .await;
    }
    // Decide against memory; when the database disagrees, reload and decide once more.
    for attempt in 0..2 {
        if state.balance(request.mode) < order.total_cents {
            // Another node may have credited a deposit: confirm before binding the key.
            state.reload_balances().await?;
            if state.balance(request.mode) < order.total_cents {
                let refusal =
                    insufficient(request.mode, state.balance(request.mode), order.total_cents);
                return bind(
                    state,
                    &request.key,
                    request.mode,
                    &request.fingerprint,
                    refusal,
                )
                .await;
            }
        }
        let new = NewOrder {
            order: order.clone(),
            fingerprint: request.fingerprint.clone(),
        };
        match commit_order(&state.args.db, &new, request.mode).await {
            Ok(balance_after) => {
                state.set_balance(request.mode, balance_after);
                state.remember(binding_of(&new));
                return Ok(Decision::Accepted(new.order));
            }
            Err(AcceptError::Insufficient) if attempt == 0 => state.reload_balances().await?,
            Err(AcceptError::Insufficient) => {
                let refusal =
                    insufficient(request.mode, state.balance(request.mode), order.total_cents);
                return bind(
                    state,
                    &request.key,
                    request.mode,
                    &request.fingerprint,
                    refusal,
                )
                .await;
            }
            Err(AcceptError::Db(err)) if store::is_unique_violation(&err) => {
                // Another node bound this key first: answer as a replay.
                state.reload_balances().await?;
                return replay(state, &request)
                    .await?
                    .ok_or_else(|| ApiError::new(ErrorCode::Conflict));
            }
            Err(AcceptError::Db(err)) => {
                state.reload_balances().await.ok();
                return Err(ApiError::from(err));
            }
        }
    }
    Err(ApiError::new(ErrorCode::Conflict))
}

async fn commit_order(db: &Db, new: &NewOrder, mode: Mode) -> Result<i64, AcceptError> {
    let txn = store::begin_write(db).await?;
    let balance_after = store::orders::accept(&txn, new, mode, time::now()).await?;
    txn.commit().await?;
    Ok(balance_after)
}

fn binding_of(new: &NewOrder) -> idempotency_key::Model {
    idempotency_key::Model {
        partner_id: new.order.partner_id.clone(),
        key: new.order.idempotency_key.clone(),
        mode: new.order.mode.clone(),
        fingerprint: new.fingerprint.clone(),
        order_id: Some(new.order.id.clone()),
        error_status: None,
        error_body: None,
        created_at: new.order.created_at,
    }
}

/// If the key is known: a replay, or `key_reused`.
async fn replay(
    state: &mut AccountState,
    request: &PlaceOrder,
) -> Result<Option<Decision>, ApiError> {
    let Some(record) = state.binding(&request.key).await? else {
        return Ok(None);
    };
    if record.mode != request.mode.as_str() || record.fingerprint != request.fingerprint {
        return Ok(Some(Decision::Refused(key_reused(
            record.mode != request.mode.as_str(),
        ))));
    }
    if let Some(order_id) = &record.order_id {
        let order = store::orders::get_order(&state.args.db, order_id)
            .await?
            .ok_or_else(|| ApiError::internal("a bound order is missing"))?;
        return Ok(Some(Decision::Replayed(order)));
    }
    let refusal = record
        .error_body
        .as_ref()
        .and_then(ApiError::from_stored)
        .ok_or_else(|| ApiError::internal("a bound refusal is unreadable"))?;
    Ok(Some(Decision::ReplayedRefusal(refusal)))
}

/// Binds the key to a refusal and answers it. If another node bound the key
/// first, answers what that binding says.
async fn bind(
    state: &mut AccountState,
    key: &str,
    mode: Mode,
    fingerprint: &str,
    refusal: ApiError,
) -> Result<Decision, ApiError> {
    let record = idempotency_key::Model {
        partner_id: state.args.partner_id.clone(),
        key: key.to_owned(),
        mode: mode.as_str().to_owned(),
        fingerprint: fingerprint.to_owned(),
        order_id: None,
        error_status: Some(i32::from(refusal.http_status().as_u16())),
        error_body: Some(refusal.to_stored()),
        created_at: time::now(),
    };
    match store::orders::bind_refusal(&state.args.db, record.clone()).await {
        Ok(()) => {
            state.remember(record);
            Ok(Decision::Refused(refusal))
        }
        Err(err) if store::is_unique_violation(&err) => {
            let request = PlaceOrder {
                key: key.to_owned(),
                mode,
                fingerprint: fingerprint.to_owned(),
                verdict: Err(refusal),
                always_insufficient: false,
            };
            replay(state, &request)
                .await?
                .ok_or_else(|| ApiError::new(ErrorCode::Conflict))
        }
        Err(err) => Err(ApiError::from(err)),
    }
}

/// Refunds undelivered units, one transaction each, then settles the order.
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
    let mode = Mode::parse(&order.mode).unwrap_or(Mode::Sandbox);
    for unit_id in unit_ids {
        let txn = store::begin_write(&db).await?;
        let refunded =
            store::orders::refund_unit(&txn, &order, unit_id, failure, time::now()).await?;
        txn.commit().await?;
        if let Some(balance_after) = refunded {
            state.set_balance(mode, balance_after);
            tracing::info!(partner_id = %order.partner_id, order_id, unit_id, failure = failure.as_str(), "unit refunded");
        }
    }
    let now = time::now();
    if let Some(settled) = store::orders::finalize(&db, order_id, now).await? {
        crate::metrics::order_settled(&settled, now);
    }
    Ok(())
}

/// Moves money on the live float and writes its ledger row, in one transaction.
async fn apply_movement(
    state: &mut AccountState,
    movement: Movement,
) -> Result<ledger_entry::Model, ApiError> {
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
        return Err(insufficient(
            Mode::Live,
            state.live_cents,
            -movement.amount_cents,
        ));
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
    state.live_cents = balance_after;
    tracing::info!(partner_id = %state.args.partner_id, kind = %entry.kind, amount_cents = entry.amount_cents, balance_after, "money moved by the operator");
    Ok(entry)
}

/// Credits a crypto deposit in one transaction; `false` if it was already credited.
async fn credit_deposit(
    state: &mut AccountState,
    deposit_id: &str,
    amount: i64,
) -> Result<bool, ApiError> {
    let db = state.args.db.clone();
    let Some(deposit) = store::deposits::get(&db, deposit_id).await? else {
        return Ok(false);
    };
    let txn = store::begin_write(&db).await?;
    let credited = store::deposits::credit(&txn, &deposit, amount, time::now()).await;
    match credited {
        Ok(Some((balance_after, entry))) => {
            txn.commit().await?;
            state.live_cents = balance_after;
            tracing::info!(partner_id = %deposit.partner_id, deposit_id, amount_cents = amount, ledger_entry_id = %entry.id, "deposit credited");
            crate::metrics::deposit_transition(&deposit.status, store::deposits::CREDITED);
            Ok(true)
        }
        Ok(None) => Ok(false),
        Err(err) if store::is_unique_violation(&err) => Ok(false),
        Err(err) => Err(ApiError::from(err)),
    }
}

/// Records a wire deposit already credited.
async fn wire_deposit(
    state: &mut AccountState,
    amount: i64,
    reference: &str,
) -> Result<deposit::Model, ApiError> {
    let db = state.args.db.clone();
    let txn = store::begin_write(&db).await?;
    match store::deposits::record_wire(&txn, &state.args.partner_id, amount, reference, time::now())
        .await
    {
        Ok((deposit, balance_after)) => {
            txn.commit().await?;
            state.live_cents = balance_after;
            tracing::info!(partner_id = %deposit.partner_id, deposit_id = %deposit.id, amount_cents = amount, "wire deposit recorded");
            crate::metrics::deposit_transition("none", store::deposits::CREDITED);
            Ok(deposit)
        }
        Err(err) if store::is_unique_violation(&err) => Err(ApiError::new(ErrorCode::Conflict)
            .with_message("A deposit with this reference exists for this partner.")
            .with_param("reference")),
        Err(err) => Err(ApiError::from(err)),
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
            verdict: Ok(order::Model {
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
    ) -> Vec<Result<Decision, ApiError>> {
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
            batching: true,
            writer: Some(super::super::writer::CommitWriter::start(db.clone())),
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
            matches!(&decisions[1], Ok(Decision::Refused(e)) if e.code == ErrorCode::BalanceInsufficient),
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
            batching: true,
            writer: None,
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
                matches!(decision, Err(e) if e.code == ErrorCode::InternalError),
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
            let order = request(partner, key, total).verdict.unwrap();
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
