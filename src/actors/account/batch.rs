//! Deciding and committing a batch of order requests: one decision over
//! everything queued, one transaction, then the answers; a fired guard
//! reloads and decides again.

use super::*;

/// Decides and commits one batch, then answers every request in it.
pub(super) async fn flush(state: &mut AccountState, batch: Vec<Pending>) {
    if batch.is_empty() {
        return;
    }
    let (requests, replies): (Vec<PlaceOrder>, Vec<_>) =
        batch.into_iter().map(|(r, reply)| (*r, reply)).unzip();
    let answers = answer_batch(state, &requests).await;
    for (reply, answer) in replies.into_iter().zip(answers) {
        announce(state, &answer);
        let _ = reply.send(answer);
    }
}

/// The answers to a batch, one per request. A batch that other nodes
/// outraced at every attempt is decided again one request at a time: a key
/// raced over and over then costs only its own request a `409 conflict`,
/// never the requests that happened to share its batch.
async fn answer_batch(
    state: &mut AccountState,
    requests: &[PlaceOrder],
) -> Vec<Result<Decision, AccountError>> {
    match decide_and_commit(state, requests).await {
        Ok(decisions) => decisions.into_iter().map(Ok).collect(),
        Err(Undecided::Outraced) if requests.len() > 1 => {
            tracing::info!(partner_id = %state.args.partner_id, size = requests.len(), "guards fired at every attempt on an order batch; deciding its requests one by one");
            let mut answers = Vec::with_capacity(requests.len());
            for request in requests {
                answers.push(answer_alone(state, request).await);
            }
            answers
        }
        Err(undecided) => {
            let err = AccountError::from(undecided);
            if let AccountError::Internal(why) = &err {
                tracing::warn!(partner_id = %state.args.partner_id, size = requests.len(), error = %why, "order batch not committed; every request in it is answered 500 (retry with the same key is safe)");
            }
            (0..requests.len()).map(|_| Err(err.clone())).collect()
        }
    }
}

/// The answer to one request decided and committed in a batch of its own.
async fn answer_alone(
    state: &mut AccountState,
    request: &PlaceOrder,
) -> Result<Decision, AccountError> {
    let mut decisions = decide_and_commit(state, std::slice::from_ref(request)).await?;
    decisions
        .pop()
        .ok_or_else(|| AccountError::internal("a request was left undecided"))
}

/// Why a batch got no decisions.
enum Undecided {
    /// A guard fired at every attempt: other nodes kept committing first
    /// (moving the float, binding a key of the batch).
    Outraced,
    /// The database refused or is down.
    Failed(AccountError),
}

impl From<Undecided> for AccountError {
    fn from(undecided: Undecided) -> Self {
        match undecided {
            Undecided::Outraced => AccountError::Conflict {
                message: "The account changed under this request; retry with the same key.".into(),
                param: None,
            },
            Undecided::Failed(err) => err,
        }
    }
}

impl From<sea_orm::DbErr> for Undecided {
    fn from(err: sea_orm::DbErr) -> Self {
        Undecided::Failed(AccountError::from(err))
    }
}

/// Decides a batch against memory and commits it. When a database guard
/// fires (another node moved the float or bound a key first), memory is
/// reloaded and the batch decided again, so the loser of a race replays the
/// winner. When the database is down, the batch fails as a whole and memory
/// is reloaded so it never drifts from what committed.
///
/// The first attempt takes the keys memory does not hold for new, without
/// reading them: they almost always are (a partner sends a new key for each
/// new order), and the commit's binding of them finds any bound already
/// (a retry of an order the account has forgotten, or a key another node
/// bound). Then the batch's keys are read and it is decided again, which
/// replays that binding; only then do attempts count against
/// [`GUARD_ATTEMPTS`].
async fn decide_and_commit(
    state: &mut AccountState,
    requests: &[PlaceOrder],
) -> Result<Vec<Decision>, Undecided> {
    let attempts =
        std::iter::once(Keys::TakenForNew).chain(std::iter::repeat_n(Keys::Read, GUARD_ATTEMPTS));
    for keys in attempts {
        match try_batch(state, requests, keys).await {
            Ok(decisions) => return Ok(decisions),
            Err(Attempt::Taken) if keys == Keys::TakenForNew => {
                tracing::debug!(partner_id = %state.args.partner_id, "a key of an order batch is bound already; reading its keys and deciding it again");
                forget(state, requests);
            }
            Err(Attempt::Taken) => {
                tracing::info!(partner_id = %state.args.partner_id, "another node bound a key of an order batch; deciding it again");
                forget(state, requests);
                state.reload_balances().await?;
            }
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
                return Err(Undecided::Failed(err));
            }
        }
    }
    Err(Undecided::Outraced)
}

/// Drops what memory holds of a batch's keys (the database knows better).
fn forget(state: &mut AccountState, requests: &[PlaceOrder]) {
    for request in requests {
        state.keys.remove(&request.key);
    }
}

/// How an attempt at a batch learns what the keys memory does not hold are
/// bound to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Keys {
    /// Not read: they are decided as new, and the commit finds out.
    TakenForNew,
    /// Read from the database before deciding.
    Read,
}

/// Why one attempt at a batch did not commit.
enum Attempt {
    /// A key of the batch is bound already: read the keys, decide again.
    Taken,
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

/// One attempt: load the unknown keys (unless taken for new), decide,
/// commit, build the answers.
async fn try_batch(
    state: &mut AccountState,
    requests: &[PlaceOrder],
    keys: Keys,
) -> Result<Vec<Decision>, Attempt> {
    if keys == Keys::Read {
        state.load_bindings(requests).await?;
    }
    let allowance = state.allowance(requests);
    let mut decided = ordering::decide(requests, &state.keys, state.floats, allowance.clone());
    if keys == Keys::TakenForNew && answers_unwritten(state, requests, &decided.outcomes) {
        // A refusal that binds nothing is answered without a commit, so no
        // commit would find its key's binding: read the keys first.
        state.load_bindings(requests).await?;
        decided = ordering::decide(requests, &state.keys, state.floats, allowance.clone());
    }
    if decided.refused_for_money() {
        // Another node may have credited a deposit: confirm before binding keys.
        let before = state.floats;
        state.reload_balances().await?;
        if state.floats != before {
            decided = ordering::decide(requests, &state.keys, state.floats, allowance);
        }
    }
    let job = job_of(state, requests, &decided.outcomes);
    if !job.batch.orders.is_empty() || !job.batch.refusals.is_empty() {
        state.count_admitted(requests, &decided.outcomes);
        let committed = match &state.args.writer {
            Some(writer) => writer.submit(job).await,
            None => commit_alone(&state.args.db, job).await,
        };
        if committed.is_err() {
            state.withdraw_admitted(requests, &decided.outcomes);
        }
        let (live, sandbox) = committed.map_err(|e| match e {
            AcceptError::Insufficient => Attempt::Guard("the float moved under the batch"),
            AcceptError::KeyTaken => Attempt::Taken,
            AcceptError::Db(err) if store::is_unique_violation(&err) => {
                Attempt::Guard("another node bound a key of the batch")
            }
            AcceptError::Db(err) => Attempt::from(err),
        })?;
        state.floats.live = live.unwrap_or(state.floats.live);
        state.floats.sandbox = sandbox.unwrap_or(state.floats.sandbox);
    }
    state.report_refusals(&decided.outcomes);
    let bindings: Vec<(String, Binding)> = decided
        .new_bindings(requests)
        .map(|(key, binding)| (key.to_owned(), binding))
        .collect();
    for (key, binding) in bindings {
        state.remember(&key, binding);
    }
    answers(state, requests, decided.outcomes).await
}

/// Whether a request whose key memory does not hold is refused with a
/// refusal that binds nothing (answered without a commit).
fn answers_unwritten(state: &AccountState, requests: &[PlaceOrder], outcomes: &[Outcome]) -> bool {
    requests.iter().zip(outcomes).any(|(request, outcome)| {
        matches!(outcome, Outcome::Refuse(refusal) if !refusal.binds())
            && !state.keys.contains_key(&request.key)
    })
}

/// The rows a decided batch writes.
fn job_of(
    state: &AccountState,
    requests: &[PlaceOrder],
    outcomes: &[Outcome],
) -> crate::actors::writer::Job {
    let mut accepted = Vec::new();
    let mut refusals = Vec::new();
    for (request, outcome) in requests.iter().zip(outcomes) {
        match (outcome, &request.ask) {
            (Outcome::Accept, Ok(order)) => accepted.push(NewOrder {
                order: Arc::clone(order),
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
    crate::actors::writer::Job {
        batch: Arc::new(store::orders::PartnerBatch {
            partner_id: state.args.partner_id.clone(),
            orders: accepted,
            refusals,
        }),
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
    let accepted_here: HashMap<&str, &Arc<order::Model>> = requests
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
    let read_back: HashMap<String, Arc<order::Model>> =
        store::orders::get_orders(&state.args.db, &earlier)
            .await?
            .into_iter()
            .map(|o| (o.id.clone(), Arc::new(o)))
            .collect();
    let mut decisions = Vec::with_capacity(outcomes.len());
    for (request, outcome) in requests.iter().zip(outcomes) {
        decisions.push(match outcome {
            Outcome::Accept => match &request.ask {
                Ok(order) => Decision::Accepted(Arc::clone(order)),
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
                    Some(order) => Arc::clone(order),
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
pub(super) async fn commit_alone(
    db: &Db,
    job: crate::actors::writer::Job,
) -> Result<crate::actors::writer::Committed, AcceptError> {
    let txn = store::begin_write(db).await?;
    let committed = store::orders::accept_batch(&txn, &job.batch, job.now).await?;
    txn.commit().await?;
    crate::metrics::orders_committed("alone", 1, job.batch.written());
    Ok(committed)
}

/// Counts an accepted order and hands it to provisioning.
pub(super) fn announce(state: &AccountState, decision: &Result<Decision, AccountError>) {
    let Ok(Decision::Accepted(order)) = decision else {
        return;
    };
    crate::metrics::order_accepted(order.mode.as_str());
    if let Some(provisioning) = &state.args.provisioning {
        provisioning.send(ProvisioningMsg::Provision {
            order_id: order.id.clone(),
            claimed_until: order.claimed_until,
            fresh: Some(Arc::clone(order)),
        });
    }
}
