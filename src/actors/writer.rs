//! The shared commit writer: one task that commits the group-commit batches
//! of many account actors together.
//!
//! SQLite admits one writer at a time, so account actors committing their
//! own small batches would queue on its lock one fsync each. Instead each
//! actor hands its decided batch to this writer and awaits the answer; the
//! writer takes every job queued behind the one in progress and commits them
//! in one transaction, each job inside its own savepoint, so one job whose
//! guard fires rolls back alone while the others commit.

use chrono::{DateTime, Utc};
use sea_orm::TransactionTrait;
use tokio::sync::{mpsc, oneshot};

use crate::store::{
    self, Db,
    orders::{AcceptError, NewOrder, RefusalRow},
};

/// Most jobs committed in one transaction.
const MAX_JOBS: usize = 128;

/// One actor's decided batch.
pub struct Job {
    pub partner_id: String,
    /// Orders to debit and write, in acceptance order.
    pub accepted: Vec<NewOrder>,
    /// Refusals that bind their keys.
    pub refusals: Vec<RefusalRow>,
    /// When the batch was decided.
    pub now: DateTime<Utc>,
}

/// Balances after a job: (live, sandbox), `None` for a mode it did not touch.
pub(crate) type Committed = (Option<i64>, Option<i64>);

type Queued = (Job, oneshot::Sender<Result<Committed, AcceptError>>);

/// A handle on the writer task (cheap to clone).
#[derive(Clone)]
pub struct CommitWriter {
    queue: mpsc::Sender<Queued>,
}

impl CommitWriter {
    /// Starts the writer; it ends when every handle is dropped.
    pub fn start(db: Db) -> Self {
        let (queue, mut incoming) = mpsc::channel::<Queued>(1024);
        tokio::spawn(async move {
            while let Some(first) = incoming.recv().await {
                let mut jobs = vec![first];
                while jobs.len() < MAX_JOBS {
                    match incoming.try_recv() {
                        Ok(next) => jobs.push(next),
                        Err(_) => break,
                    }
                }
                commit_jobs(&db, jobs).await;
            }
        });
        Self { queue }
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

async fn commit_jobs(db: &Db, jobs: Vec<Queued>) {
    let mut results: Vec<Result<Committed, AcceptError>> = Vec::with_capacity(jobs.len());
    let outcome = async {
        let txn = store::begin_write(db).await?;
        for (job, _) in &jobs {
            let savepoint = txn.begin().await?;
            match store::orders::accept_batch(
                &savepoint,
                &job.partner_id,
                &job.accepted,
                &job.refusals,
                job.now,
            )
            .await
            {
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
