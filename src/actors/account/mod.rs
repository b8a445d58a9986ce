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
        states::{DepositStatus, LedgerKind, ReviewStatus},
        time,
    },
    store::{
        self, Db,
        orders::{AcceptError, NewOrder, RefusalRow},
    },
};

mod authority;
mod batch;
mod keys;
mod money;
mod review;

pub(crate) use authority::Authority;
use keys::LiveAccount;
pub(crate) use keys::LiveAccounts;

use batch::flush;
use money::{apply_movement, credit_deposit, refund, set_sandbox_float, wire_deposit};
use review::approve_review;

/// Most order requests committed in one transaction.
pub(crate) const MAX_BATCH: usize = 512;

/// Attempts at a batch while guards fire (each after reloading from the
/// database). A batch outraced at every attempt is decided again one request
/// at a time, each with as many attempts; a lone request still outraced is
/// answered `409 conflict` (retrying with the same key is safe).
const GUARD_ATTEMPTS: usize = 3;

/// An order request: the priced order (the edge's refusal otherwise),
/// shared rather than copied by the batch's job, its answer and its
/// provisioning pass.
pub(crate) type PlaceOrder = OrderRequest<Arc<order::Model>>;

/// The live orders a decided batch accepts.
fn admitted_live<'a>(
    requests: &'a [PlaceOrder],
    outcomes: &'a [Outcome],
) -> impl Iterator<Item = &'a order::Model> {
    requests
        .iter()
        .zip(outcomes)
        .filter(|(request, outcome)| {
            matches!(outcome, Outcome::Accept) && request.mode == Mode::Live
        })
        .filter_map(|(request, _)| request.ask.as_deref().ok())
}

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

    fn plan_id(&self) -> &str {
        &self.plan_id
    }
}

/// What the account decided.
#[derive(Debug)]
pub enum Decision {
    /// A new order, committed (202).
    Accepted(Arc<order::Model>),
    /// The key's earlier order, as it is now (200, replayed).
    Replayed(Arc<order::Model>),
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
pub(crate) enum AccountMsg {
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
        Box<Authority>,
        RpcReplyPort<Result<ledger_entry::Model, AccountError>>,
    ),
    /// Sets the sandbox float (play money, no ledger row).
    SetSandboxFloat(i64, Box<Authority>, RpcReplyPort<Result<(), AccountError>>),
    /// Credit a confirmed crypto deposit with what arrived (once).
    CreditDeposit(String, i64, RpcReplyPort<Result<bool, AccountError>>),
    /// Record an operator's wire deposit, already credited.
    WireDeposit(
        i64,
        String,
        Box<Authority>,
        RpcReplyPort<Result<deposit::Model, AccountError>>,
    ),
    /// Approve a deposit review: its movement, once.
    ApproveReview {
        review_id: String,
        note: String,
        authority: Box<Authority>,
        reply: RpcReplyPort<Result<entities::review::Model, AccountError>>,
    },
    /// Decide and persist every order request queued so far.
    Flush,
    /// The balances as this actor holds them: (live, sandbox); for tests.
    #[cfg(test)]
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
    /// `adjustment`, `payout` or `chargeback`.
    pub kind: LedgerKind,
    /// Signed cents.
    pub amount_cents: i64,
    pub description: String,
    /// Whether the float may go below zero (chargebacks).
    pub allow_overdraft: bool,
}

/// What an account actor needs.
#[derive(Clone)]
pub(crate) struct AccountArgs {
    pub partner_id: String,
    pub db: Db,
    pub provisioning: Option<ProvisioningHandle>,
    /// Most order requests decided and committed together (1: one
    /// transaction per order).
    pub max_batch: usize,
    /// The shared writer that commits many actors' batches together (SQLite).
    pub writer: Option<crate::actors::writer::CommitWriter>,
    /// What the supplier can take: live orders beyond it are refused.
    pub admission: Option<Arc<Admission>>,
    /// The account actors running, whose number sets the keys each keeps.
    pub live: LiveAccounts,
}

/// The actor.
pub(crate) struct AccountActor;

/// Its state: the floats and the recently used keys.
pub(crate) struct AccountState {
    args: AccountArgs,
    floats: Floats,
    keys: HashMap<String, Binding>,
    /// Order requests queued for the next flush.
    pending: Vec<Pending>,
    /// A `Flush` is in the mailbox.
    flush_scheduled: bool,
    /// This actor, counted among the live accounts while its state lives.
    _live: LiveAccount,
}

impl AccountState {
    async fn reload_balances(&mut self) -> Result<(), sea_orm::DbErr> {
        let (live, sandbox) = store::orders::balances(&self.args.db, &self.args.partner_id).await?;
        self.floats = Floats { live, sandbox };
        Ok(())
    }

    /// The live units this account may be admitted now, for the plans of
    /// `requests`.
    fn allowance(&self, requests: &[PlaceOrder]) -> Allowance {
        let Some(admission) = self.args.admission.as_ref() else {
            return Allowance::unlimited();
        };
        let plans = requests
            .iter()
            .filter(|r| r.mode == Mode::Live)
            .filter_map(|r| r.ask.as_ref().ok())
            .map(|order| order.plan_id.as_str());
        admission.allowance_for(&self.args.partner_id, plans)
    }

    /// Tells admission the live units a batch is about to commit (before
    /// the commit: see [`Admission::admitted`]).
    fn count_admitted(&self, requests: &[PlaceOrder], outcomes: &[Outcome]) {
        let Some(admission) = &self.args.admission else {
            return;
        };
        let mut admitted = 0;
        for order in admitted_live(requests, outcomes) {
            admitted += order.units();
            admission.admitted_plan(&order.plan_id, order.units());
        }
        admission.admitted(&self.args.partner_id, admitted);
    }

    /// Takes back what [`Self::count_admitted`] counted for a batch whose
    /// commit failed.
    fn withdraw_admitted(&self, requests: &[PlaceOrder], outcomes: &[Outcome]) {
        let Some(admission) = &self.args.admission else {
            return;
        };
        let plans: Vec<(&str, u64)> = admitted_live(requests, outcomes)
            .map(|order| (order.plan_id.as_str(), order.units()))
            .collect();
        let units = plans.iter().map(|(_, units)| units).sum();
        admission.withdrawn(&self.args.partner_id, units, &plans);
    }

    /// Tells admission the orders of a decided batch it refused.
    fn report_refusals(&self, outcomes: &[Outcome]) {
        let Some(admission) = &self.args.admission else {
            return;
        };
        for outcome in outcomes {
            if let Outcome::Refuse(Refusal::SupplierBusy {
                busy,
                retry_after_seconds,
            }) = outcome
            {
                admission.refused(&self.args.partner_id, *busy, *retry_after_seconds);
            }
        }
    }

    fn remember(&mut self, key: &str, binding: Binding) {
        if self.keys.len() >= keys::keys_kept(self.args.live.count()) {
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
        let found = match &self.args.writer {
            Some(writer) => writer.bindings(&self.args.partner_id, unknown).await?,
            None => {
                store::orders::find_bindings(&self.args.db, &self.args.partner_id, &unknown).await?
            }
        };
        for (key, binding) in found {
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
        crate::actors::log_lifecycle(
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
        let counted = args.live.enter();
        Ok(AccountState {
            args,
            floats: Floats { live, sandbox },
            keys: HashMap::new(),
            pending: Vec::new(),
            flush_scheduled: false,
            _live: counted,
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
        #[cfg(test)]
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
        AccountMsg::Movement(movement, authority, reply) => {
            let _ = reply.send(apply_movement(state, movement, &authority).await);
        }
        AccountMsg::SetSandboxFloat(cents, authority, reply) => {
            let _ = reply.send(set_sandbox_float(state, cents, &authority).await);
        }
        AccountMsg::CreditDeposit(deposit_id, amount, reply) => {
            let _ = reply.send(credit_deposit(state, &deposit_id, amount).await);
        }
        AccountMsg::WireDeposit(amount, reference, authority, reply) => {
            let _ = reply.send(wire_deposit(state, amount, &reference, &authority).await);
        }
        AccountMsg::ApproveReview {
            review_id,
            note,
            authority,
            reply,
        } => {
            let _ = reply.send(approve_review(state, &review_id, &note, &authority).await);
        }
        AccountMsg::Fail => return Err("fault injected by the operator".into()),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use chrono::Utc;
    use ractor::rpc::CallResult;
    use sea_orm::ConnectionTrait;

    use super::*;
    use crate::{config::DatabaseSettings, store::partners::gold_partner};

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
        let partner_id = gold_partner(&db, "t", 10_000).await;
        (dir, db, partner_id)
    }

    fn request(partner_id: &str, key: &str, total: i64) -> PlaceOrder {
        PlaceOrder {
            key: key.into(),
            mode: Mode::Sandbox,
            fingerprint: key.into(),
            ask: Ok(Arc::new(crate::domain::order::fixtures::accepted(
                &crate::domain::ids::OrderId::generate().into_string(),
                partner_id,
                key,
                total,
            ))),
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

    /// An account actor without provisioning or admission, batching fully.
    async fn spawn_actor(
        db: &Db,
        partner_id: &str,
        writer: Option<crate::actors::writer::CommitWriter>,
    ) -> ActorRef<AccountMsg> {
        let args = AccountArgs {
            partner_id: partner_id.to_owned(),
            db: db.clone(),
            provisioning: None,
            max_batch: MAX_BATCH,
            writer,
            admission: None,
            live: LiveAccounts::default(),
        };
        Actor::spawn(None, AccountActor, args).await.unwrap().0
    }

    #[tokio::test]
    async fn a_batch_commits_in_order_and_memory_matches_the_database() {
        let (_dir, db, partner_id) = database().await;
        let writer = crate::actors::writer::CommitWriter::start(db.clone());
        let actor = spawn_actor(&db, &partner_id, Some(writer)).await;

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
        let actor = spawn_actor(&db, &partner_id, None).await;
        // Sabotage: orders cannot be written, so the batch transaction fails
        // half-way (after its debit and its keys).
        db.execute_unprepared("ALTER TABLE orders RENAME TO orders_gone")
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
        db.execute_unprepared("ALTER TABLE orders_gone RENAME TO orders")
            .await
            .unwrap();
        let retried = send_batch(&actor, vec![request(&partner_id, "a1", 1000)]).await;
        assert!(matches!(retried[0], Ok(Decision::Accepted(_))));
        assert_eq!(
            balances(&actor).await,
            store::orders::balances(&db, &partner_id).await.unwrap()
        );
    }

    /// Key `a1` accepted by an actor that then stops, and a fresh actor for
    /// the same partner, which holds no key in memory (as after a restart
    /// or passivation): the accepted order and the fresh actor.
    async fn accepted_then_forgotten(
        db: &Db,
        partner_id: &str,
        writer: impl Fn() -> Option<crate::actors::writer::CommitWriter>,
    ) -> (order::Model, ActorRef<AccountMsg>) {
        let first = spawn_actor(db, partner_id, writer()).await;
        let before = send_batch(&first, vec![request(partner_id, "a1", 1000)]).await;
        let Ok(Decision::Accepted(original)) = &before[0] else {
            panic!("{before:?}")
        };
        first.stop(None);
        (
            (**original).clone(),
            spawn_actor(db, partner_id, writer()).await,
        )
    }

    /// A key the account no longer holds in memory (here: a fresh actor, as
    /// after a restart or passivation) is decided as new without being read,
    /// found bound by the commit, then read and replayed: charged once, its
    /// batch-mates accepted, through the shared writer and without it.
    #[tokio::test]
    async fn a_fresh_actor_replays_a_key_bound_before_it_and_charges_it_once() {
        for shared in [false, true] {
            let (_dir, db, partner_id) = database().await;
            let writer = || shared.then(|| crate::actors::writer::CommitWriter::start(db.clone()));
            let (original, fresh) = accepted_then_forgotten(&db, &partner_id, writer).await;

            let after = send_batch(
                &fresh,
                vec![
                    request(&partner_id, "a1", 1000),
                    request(&partner_id, "a2", 2000),
                ],
            )
            .await;

            assert!(
                matches!(&after[0], Ok(Decision::Replayed(o)) if o.id == original.id),
                "{after:?}"
            );
            assert!(matches!(&after[1], Ok(Decision::Accepted(_))), "{after:?}");
            let stored = store::orders::balances(&db, &partner_id).await.unwrap();
            assert_eq!(stored.1, 10_000 - 3_000, "a1 charged once, a2 once");
            assert_eq!(balances(&fresh).await, stored);
        }
    }

    /// A refusal that binds nothing is answered without a commit, so the
    /// commit cannot find the key bound: such a request's key is read first,
    /// and a key bound before still replays its order (a retry whose plan
    /// went off sale since gets its order, not `plan.inactive`).
    #[tokio::test]
    async fn a_fresh_actor_replays_a_bound_key_over_a_refusal_that_binds_nothing() {
        let (_dir, db, partner_id) = database().await;
        let (original, fresh) = accepted_then_forgotten(&db, &partner_id, || None).await;
        let mut retry = request(&partner_id, "a1", 1000);
        retry.ask = Err(Refusal::PlanInactive);

        let after = send_batch(&fresh, vec![retry]).await;

        assert!(
            matches!(&after[0], Ok(Decision::Replayed(o)) if o.id == original.id),
            "{after:?}"
        );
    }

    /// A job of one sandbox order for the shared writer.
    fn job(partner: &str, key: &str, total: i64) -> crate::actors::writer::Job {
        let order = request(partner, key, total).ask.unwrap();
        crate::actors::writer::Job {
            batch: Arc::new(store::orders::PartnerBatch {
                partner_id: partner.into(),
                orders: vec![NewOrder {
                    order,
                    fingerprint: key.into(),
                }],
                refusals: Vec::new(),
            }),
            now: Utc::now(),
        }
    }

    /// A second partner with a 50,000 cent sandbox float.
    async fn rich_partner(db: &Db, slug: &str) -> String {
        gold_partner(db, slug, 50_000).await
    }

    #[tokio::test]
    async fn the_shared_writer_commits_other_partners_when_one_jobs_guard_fires() {
        use crate::actors::writer::CommitWriter;
        let (_dir, db, poor) = database().await;
        let rich = rich_partner(&db, "r").await;
        let writer = CommitWriter::start(db.clone());
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

    #[tokio::test]
    async fn the_shared_writer_refuses_only_the_job_whose_key_another_node_bound() {
        use crate::actors::writer::CommitWriter;
        let (_dir, db, first) = database().await;
        let second = rich_partner(&db, "s").await;
        // Another node binds `first`'s key k1 before this node's job arrives.
        let elsewhere = job(&first, "k1", 1000).batch;
        let txn = store::begin_write(&db).await.unwrap();
        store::orders::accept_batch(&txn, &elsewhere, Utc::now())
            .await
            .unwrap();
        txn.commit().await.unwrap();
        let writer = CommitWriter::start(db.clone());

        let (lost, won) = tokio::join!(
            writer.submit(job(&first, "k1", 1000)),
            writer.submit(job(&second, "s1", 1000))
        );
        let bound = writer
            .bindings(&first, vec!["k1".into(), "never".into()])
            .await
            .unwrap();

        assert!(matches!(&lost, Err(AcceptError::KeyTaken)), "{lost:?}");
        assert_eq!(
            won.unwrap().1,
            Some(49_000),
            "the other partner's job committed"
        );
        assert_eq!(
            store::orders::balances(&db, &first).await.unwrap().1,
            9_000,
            "only the other node's order was debited"
        );
        assert_eq!(bound.len(), 1);
        assert_eq!(bound[0].0, "k1");
        assert!(
            matches!(&bound[0].1.bound, Bound::Order(id) if *id == elsewhere.orders[0].order.id)
        );
    }
}
