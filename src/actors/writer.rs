//! The shared commit writer: one task that commits the group-commit batches
//! of many account actors together.
//!
//! SQLite admits one writer at a time, so account actors committing their
//! own small batches would queue on its lock one fsync each. Instead each
//! actor hands its decided batch to this writer and awaits the answer; the
//! writer takes every job queued behind the one in progress and commits them
//! in one transaction with the same statements whatever their number
//! ([`store::orders::accept_batches`]: one conditional debit over every
//! float, one insert per table), so a hundred partners cost what one does.
//! A job whose guard fires (another node moved that float, or one of its
//! Idempotency-Keys is bound already) is answered alone and the others are
//! committed again without it; any other unique violation fails the shared
//! statement, and then each job is committed in its own savepoint so that
//! only the job that lost is refused. On a SQLite
//! file the shared commit is a write of the file's inline connection
//! ([`store::inline_write`]), none of its statements handed to sqlx's
//! connection thread, committed with whatever the other writers of the
//! order path queued meanwhile; anything but a fired guard sends it through
//! the pool.
//!
//! The actors' reads of their unknown Idempotency-Keys, one per batch, are
//! merged the same way: a key reader task answers every lookup queued behind
//! the one in progress with one query.

use chrono::{DateTime, Utc};
use sea_orm::TransactionTrait;
use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use sea_orm::DbErr;
use tokio::sync::{mpsc, oneshot};

use crate::{
    domain::{ordering::Binding, time},
    store::{
        self, Db,
        inline_write::InlineWriter,
        orders::{AcceptError, Balances, PartnerBatch, SharedError},
    },
};

/// Most jobs committed in one transaction.
const MAX_JOBS: usize = 128;

/// One actor's decided batch.
pub struct Job {
    /// The partner's orders and binding refusals (shared with the inline
    /// write, which may run on whichever writer takes the turn).
    pub batch: Arc<PartnerBatch>,
    /// When the batch was decided.
    pub now: DateTime<Utc>,
}

/// Balances after a job: (live, sandbox), `None` for a mode it did not touch.
pub(crate) type Committed = Balances;

type Queued = (Job, oneshot::Sender<Result<Committed, AcceptError>>);

/// Most lookups answered by one query.
const MAX_LOOKUPS: usize = 256;

/// One actor's question: what are these keys of this partner bound to?
struct Lookup {
    partner_id: String,
    keys: Vec<String>,
    answer: oneshot::Sender<Result<Vec<(String, Binding)>, DbErr>>,
}

/// A handle on the writer task (cheap to clone).
#[derive(Clone)]
pub struct CommitWriter {
    queue: mpsc::Sender<Queued>,
    /// The key reader: the lookups of many actors in one query.
    lookups: mpsc::Sender<Lookup>,
}

impl CommitWriter {
    /// Starts the writer; it ends when every handle is dropped.
    pub fn start(db: Db) -> Self {
        let (lookups, questions) = mpsc::channel::<Lookup>(1024);
        tokio::spawn(read_bindings(db.clone(), questions));
        let (queue, mut incoming) = mpsc::channel::<Queued>(1024);
        tokio::spawn(async move {
            let committer = Committer {
                inline: super::inline_writer(&db, "orders"),
                kept: store::WriterDb::new(&db, 1),
                db,
            };
            // Waits for one job and takes every one queued behind it.
            let mut jobs = Vec::with_capacity(MAX_JOBS);
            while incoming.recv_many(&mut jobs, MAX_JOBS).await > 0 {
                committer.commit_jobs(std::mem::take(&mut jobs)).await;
            }
        });
        Self { queue, lookups }
    }

    /// What `keys` of a partner are bound to (those that are), read with the
    /// lookups of other actors queued at the same time in one query.
    pub async fn bindings(
        &self,
        partner_id: &str,
        keys: Vec<String>,
    ) -> Result<Vec<(String, Binding)>, DbErr> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let stopped = || DbErr::Custom("the key reader stopped".into());
        let (answer, answered) = oneshot::channel();
        let lookup = Lookup {
            partner_id: partner_id.to_owned(),
            keys,
            answer,
        };
        self.lookups.send(lookup).await.map_err(|_| stopped())?;
        answered.await.map_err(|_| stopped())?
    }

    /// Commits one actor's batch with whatever else is queued.
    pub async fn submit(&self, job: Job) -> Result<Committed, AcceptError> {
        let stopped =
            || AcceptError::Db(sea_orm::DbErr::Custom("the commit writer stopped".into()));
        let (answer, answered) = oneshot::channel();
        self.queue
            .send((job, answer))
            .await
            .map_err(|_| stopped())?;
        answered.await.map_err(|_| stopped())?
    }
}

/// Answers key lookups, every one queued behind the query in progress with
/// the next query. Lookups of one partner may share a query: each gets the
/// bindings of its own keys.
async fn read_bindings(db: Db, mut questions: mpsc::Receiver<Lookup>) {
    let mut queued = Vec::with_capacity(MAX_LOOKUPS);
    while questions.recv_many(&mut queued, MAX_LOOKUPS).await > 0 {
        let lookups = std::mem::take(&mut queued);
        let wanted: Vec<(String, String)> = lookups
            .iter()
            .flat_map(|l| l.keys.iter().map(|k| (l.partner_id.clone(), k.clone())))
            .collect();
        match store::orders::find_bindings_of_many(&db, &wanted).await {
            Ok(found) => {
                let mut by_pair: HashMap<(String, String), Binding> = found
                    .into_iter()
                    .map(|(partner, key, binding)| ((partner, key), binding))
                    .collect();
                for lookup in lookups {
                    let mine = lookup
                        .keys
                        .iter()
                        .filter_map(|key| {
                            let pair = (lookup.partner_id.clone(), key.clone());
                            by_pair.remove(&pair).map(|binding| (key.clone(), binding))
                        })
                        .collect();
                    let _ = lookup.answer.send(Ok(mine));
                }
            }
            Err(err) => {
                for lookup in lookups {
                    let _ = lookup.answer.send(Err(err.clone()));
                }
            }
        }
    }
}

/// What the writer task commits through.
struct Committer {
    /// The database (the pool).
    db: Db,
    /// The shared commit's way to the database: on PostgreSQL a connection
    /// of its own ([`store::kept`]), not one taken from the pool each time.
    kept: store::WriterDb,
    /// On a SQLite file, the file's inline connection, which runs a shared
    /// commit on the thread of whichever writer holds the turn
    /// ([`store::inline_write`]).
    inline: Option<InlineWriter>,
}

impl Committer {
    /// Commits queued jobs, each partner at most once per transaction (an actor
    /// waits for its answer before it hands over another job, so a second job
    /// of one partner comes only from a restarted actor; it goes in a next round).
    async fn commit_jobs(&self, jobs: Vec<Queued>) {
        let mut rest = jobs;
        while !rest.is_empty() {
            let mut seen = HashSet::new();
            let (round, later): (Vec<Queued>, Vec<Queued>) = rest
                .into_iter()
                .partition(|(job, _)| seen.insert(job.batch.partner_id.clone()));
            self.commit_round(round).await;
            rest = later;
        }
    }

    /// Commits jobs of distinct partners in one transaction; a job a guard
    /// turns back (its debit, or a key bound already) is answered
    /// `Insufficient` or `KeyTaken` and the rest committed without it.
    async fn commit_round(&self, jobs: Vec<Queued>) {
        let mut open = jobs;
        while !open.is_empty() {
            let now = open
                .iter()
                .map(|(job, _)| job.now)
                .max()
                .unwrap_or_else(time::now);
            let batches: Vec<Arc<PartnerBatch>> =
                open.iter().map(|(job, _)| Arc::clone(&job.batch)).collect();
            match self.commit_shared(&batches, now).await {
                Ok(balances) => {
                    for ((_, answer), balances) in open.into_iter().zip(balances) {
                        let _ = answer.send(Ok(balances));
                    }
                    return;
                }
                Err(SharedError::Turned(turned)) => {
                    let mut kept = Vec::with_capacity(open.len());
                    for (index, (job, answer)) in open.into_iter().enumerate() {
                        if turned.batches().contains(&index) {
                            let _ = answer.send(Err(turned.error()));
                        } else {
                            kept.push((job, answer));
                        }
                    }
                    open = kept;
                }
                Err(SharedError::Db(err)) if open.len() > 1 => {
                    tracing::info!(jobs = open.len(), error = %err, "shared commit refused; committing its jobs one by one");
                    return commit_each(&self.db, open).await;
                }
                Err(SharedError::Db(err)) => {
                    for (_, answer) in open {
                        let _ = answer.send(Err(AcceptError::Db(err.clone())));
                    }
                    return;
                }
            }
        }
    }

    /// One transaction for many partners' batches; rolled back on error. On a
    /// SQLite file it runs inline, and through the pool if the inline
    /// transaction fails for any reason but a fired guard (the pool's answer,
    /// a lost race or the database's own error, is then the one given); on
    /// PostgreSQL, on the writer's kept connection ([`store::kept`]).
    async fn commit_shared(
        &self,
        batches: &[Arc<PartnerBatch>],
        now: DateTime<Utc>,
    ) -> Result<Vec<Balances>, SharedError> {
        let balances = match self.commit_inline(batches, now).await {
            Some(done) => done?,
            None => {
                let txn = self.kept.begin().await?;
                let borrowed: Vec<&PartnerBatch> = batches.iter().map(|b| &**b).collect();
                let balances = store::orders::accept_batches(&txn, &borrowed, now).await?;
                txn.commit().await?;
                balances
            }
        };
        let written = batches.iter().map(|b| b.written()).sum();
        crate::metrics::orders_committed("shared", batches.len(), written);
        Ok(balances)
    }

    /// The shared commit on the inline writer: `None` without one, or when it
    /// failed for a reason the pool should see for itself.
    async fn commit_inline(
        &self,
        batches: &[Arc<PartnerBatch>],
        now: DateTime<Utc>,
    ) -> Option<Result<Vec<Balances>, SharedError>> {
        // Shared: the write may run on whichever writer takes the turn.
        let owned = batches.to_vec();
        let done = super::write_inline(self.inline.as_ref(), move |connection| {
            let batches: Vec<&PartnerBatch> = owned.iter().map(|b| &**b).collect();
            store::orders::accept_batches_inline(connection, &batches, now)
        })
        .await?;
        Some(done.map_err(SharedError::Turned))
    }
}

/// Commits jobs in one transaction, each inside its own savepoint, so that a
/// job whose key lost a race rolls back alone while the others commit. The
/// jobs go in partner order after every float is locked, so the transaction
/// takes its locks in the order a shared commit does
/// ([`store::orders::lock_floats`]).
async fn commit_each(db: &Db, mut jobs: Vec<Queued>) {
    jobs.sort_by(|(a, _), (b, _)| a.batch.partner_id.cmp(&b.batch.partner_id));
    let mut results: Vec<Result<Committed, AcceptError>> = Vec::with_capacity(jobs.len());
    let outcome = async {
        let txn = store::begin_write(db).await?;
        let partners: Vec<&str> = jobs
            .iter()
            .map(|(job, _)| job.batch.partner_id.as_str())
            .collect();
        store::orders::lock_floats(&txn, &partners).await?;
        for (job, _) in &jobs {
            let savepoint = txn.begin().await?;
            match store::orders::accept_batch(&savepoint, &job.batch, job.now).await {
                Ok(committed) => {
                    savepoint.commit().await?;
                    results.push(Ok(committed));
                }
                Err(err) => {
                    savepoint.rollback().await?;
                    results.push(Err(err));
                }
            }
        }
        txn.commit().await
    }
    .await;
    match outcome {
        Ok(()) => {
            let committed = jobs.iter().zip(&results).filter(|(_, r)| r.is_ok());
            let (batches, written) = committed.fold((0, 0), |(n, w), ((job, _), _)| {
                (n + 1, w + job.batch.written())
            });
            if batches > 0 {
                crate::metrics::orders_committed("savepoints", batches, written);
            }
            for ((_, answer), result) in jobs.into_iter().zip(results) {
                let _ = answer.send(result);
            }
        }
        Err(err) => {
            tracing::warn!(jobs = jobs.len(), error = %err, "shared commit failed; every job is answered with the error");
            for (_, answer) in jobs {
                let _ = answer.send(Err(AcceptError::Db(err.clone())));
            }
        }
    }
}
