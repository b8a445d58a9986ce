//! Point reads gathered into one query per round.
//!
//! Where a hot point read has no inline reader (PostgreSQL, an in-memory
//! SQLite database), each one is a round trip through the pool: a
//! connection taken, a statement sent, parsed, planned and answered, for a
//! single row. Under load many such reads wait at the same moment, and the
//! database's per-statement cost, paid once each on the same two cores the
//! service runs on, is what bounds them. Here a read queues its key, and a
//! round takes every key queued by then and reads them all with one query.
//!
//! **Freshness.** A round takes the queue before its query starts and never
//! answers a read queued after that (it waits for the next round), so every
//! answer comes from a query that began after its read was asked: it sees
//! every write committed before the request arrived, as a read of its own
//! would. Nothing is kept between rounds; this gathers reads, it does not
//! cache them (the spec's balance is "read fresh on every call").
//!
//! A set number of rounds may run at once ([`Gathered::new`]): a read that
//! finds one free starts a round at once, so at light load gathering adds no
//! wait; under load the rounds are busy and the queue fills, so each round
//! carries more keys.
//! Rounds are tasks of their own, so a caller that gives up (a client that
//! hangs up) never strands the others' reads.

use std::{
    collections::HashMap,
    hash::Hash,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
};

use futures::future::BoxFuture;
use sea_orm::DbErr;
use tokio::sync::oneshot;

use crate::sync::lock;

/// Reads every key of a round at once: the value of each key found (a key
/// missing from the map is answered `None`).
pub type ReadMany<K, V> =
    Arc<dyn Fn(Vec<K>) -> BoxFuture<'static, Result<HashMap<K, V>, DbErr>> + Send + Sync>;

/// What a waiting read is answered with (a failed round's error as text:
/// every read of the round gets it).
type Answer<V> = Result<Option<V>, String>;

/// Point reads of one kind, gathered into rounds. Cheap to share: clones
/// share the queue.
pub struct Gathered<K, V> {
    /// The queue and how to read it.
    inner: Arc<Inner<K, V>>,
}

impl<K, V> Clone for Gathered<K, V> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

/// What the handles of one [`Gathered`] share.
struct Inner<K, V> {
    /// Reads not yet taken by a round, and the rounds running.
    queue: Mutex<Queue<K, V>>,
    /// The query of a round.
    read_many: ReadMany<K, V>,
    /// Rounds allowed to run at once.
    rounds_at_most: usize,
    /// Reads answered by a round (found, missing or failed).
    reads: AtomicU64,
    /// Rounds that ran a query.
    rounds: AtomicU64,
}

/// Reads waiting for a round.
struct Queue<K, V> {
    /// Each waiting read's key and where its answer goes.
    waiting: Vec<(K, oneshot::Sender<Answer<V>>)>,
    /// Rounds running now.
    running: usize,
}

/// How a [`Gathered`] has fared since it was made (for the metrics and tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GatheredCounts {
    /// Reads answered.
    pub reads: u64,
    /// Queries that answered them.
    pub rounds: u64,
}

impl<K, V> Gathered<K, V>
where
    K: Eq + Hash + Clone + Send + 'static,
    V: Clone + Send + 'static,
{
    /// Reads gathered into rounds of `read_many`, at most `rounds_at_most`
    /// of them at once (at least one).
    pub fn new(rounds_at_most: usize, read_many: ReadMany<K, V>) -> Self {
        Self {
            inner: Arc::new(Inner {
                queue: Mutex::new(Queue {
                    waiting: Vec::new(),
                    running: 0,
                }),
                read_many,
                rounds_at_most: rounds_at_most.max(1),
                reads: AtomicU64::new(0),
                rounds: AtomicU64::new(0),
            }),
        }
    }

    /// The value of `key`, read by a query that starts after this call.
    pub async fn read(&self, key: K) -> Result<Option<V>, DbErr> {
        let (answer, answered) = oneshot::channel();
        let start_round = {
            let mut queue = lock(&self.inner.queue);
            queue.waiting.push((key, answer));
            let free = queue.running < self.inner.rounds_at_most;
            if free {
                queue.running += 1;
            }
            free
        };
        if start_round {
            tokio::spawn(Round::new(Arc::clone(&self.inner)).run());
        }
        match answered.await {
            Ok(answer) => answer.map_err(DbErr::Custom),
            Err(_) => Err(DbErr::Custom("the read's round ended unanswered".into())),
        }
    }

    /// Reads answered and rounds run so far.
    pub fn counts(&self) -> GatheredCounts {
        GatheredCounts {
            reads: self.inner.reads.load(Ordering::Relaxed),
            rounds: self.inner.rounds.load(Ordering::Relaxed),
        }
    }
}

/// One running round: takes the queue, reads it, answers it, and again
/// while reads keep arriving; counted in [`Queue::running`] until it ends.
struct Round<K, V> {
    /// The queue it serves.
    inner: Arc<Inner<K, V>>,
    /// Set once the round has left [`Queue::running`] itself.
    left: bool,
}

impl<K, V> Round<K, V>
where
    K: Eq + Hash + Clone + Send + 'static,
    V: Clone + Send + 'static,
{
    fn new(inner: Arc<Inner<K, V>>) -> Self {
        Self { inner, left: false }
    }

    async fn run(mut self) {
        while let Some(taken) = self.take() {
            let keys = distinct_keys(&taken);
            let found = (self.inner.read_many)(keys).await;
            self.inner.rounds.fetch_add(1, Ordering::Relaxed);
            self.inner
                .reads
                .fetch_add(taken.len() as u64, Ordering::Relaxed);
            answer(taken, found);
        }
    }

    /// Every read queued now; `None` (and the round leaves the count, under
    /// the same lock, so a read queued next starts a round of its own) if
    /// there is none.
    fn take(&mut self) -> Option<Vec<(K, oneshot::Sender<Answer<V>>)>> {
        let mut queue = lock(&self.inner.queue);
        if queue.waiting.is_empty() {
            queue.running -= 1;
            self.left = true;
            return None;
        }
        Some(std::mem::take(&mut queue.waiting))
    }
}

impl<K, V> Drop for Round<K, V> {
    /// A round that ended without leaving (its task panicked or was
    /// cancelled at shutdown) still leaves the count, or reads would queue
    /// behind a round that no longer runs.
    fn drop(&mut self) {
        if !self.left {
            lock(&self.inner.queue).running -= 1;
        }
    }
}

/// The keys of `taken`, each once.
fn distinct_keys<K: Eq + Hash + Clone, A>(taken: &[(K, A)]) -> Vec<K> {
    let mut seen = std::collections::HashSet::with_capacity(taken.len());
    taken
        .iter()
        .filter(|(key, _)| seen.insert(key))
        .map(|(key, _)| key.clone())
        .collect()
}

/// Answers every read of a round from what its query found.
fn answer<K: Eq + Hash, V: Clone>(
    taken: Vec<(K, oneshot::Sender<Answer<V>>)>,
    found: Result<HashMap<K, V>, DbErr>,
) {
    match found {
        Ok(values) => {
            for (key, reply) in taken {
                // The caller may have gone; its answer is simply not needed.
                let _ = reply.send(Ok(values.get(&key).cloned()));
            }
        }
        Err(err) => {
            let err = err.to_string();
            for (_, reply) in taken {
                let _ = reply.send(Err(err.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::sync::{Notify, mpsc};

    use super::*;

    /// A read that records each round's keys and holds the round until
    /// released.
    fn held_reads() -> (
        Gathered<u32, u32>,
        mpsc::UnboundedReceiver<Vec<u32>>,
        Arc<Notify>,
    ) {
        let (seen, rounds) = mpsc::unbounded_channel();
        let release = Arc::new(Notify::new());
        let held = Arc::clone(&release);
        let read_many: ReadMany<u32, u32> = Arc::new(move |keys: Vec<u32>| {
            let seen = seen.clone();
            let held = Arc::clone(&held);
            Box::pin(async move {
                let _ = seen.send(keys.clone());
                held.notified().await;
                Ok(keys
                    .into_iter()
                    .filter(|k| *k != 0)
                    .map(|k| (k, k * 10))
                    .collect())
            })
        });
        (Gathered::new(1, read_many), rounds, release)
    }

    async fn next_round(rounds: &mut mpsc::UnboundedReceiver<Vec<u32>>) -> Vec<u32> {
        let mut keys = tokio::time::timeout(Duration::from_secs(5), rounds.recv())
            .await
            .expect("a round starts within the deadline")
            .expect("the reads are alive");
        keys.sort_unstable();
        keys
    }

    #[tokio::test]
    async fn reads_queued_behind_a_running_round_share_the_next_one_and_not_that_one() {
        let (gathered, mut rounds, release) = held_reads();
        let first = tokio::spawn({
            let gathered = gathered.clone();
            async move { gathered.read(1).await }
        });
        assert_eq!(next_round(&mut rounds).await, vec![1]);

        // Queued while round one holds its query: not its to answer.
        let later: Vec<_> = [2, 3, 2, 0]
            .into_iter()
            .map(|key| {
                let gathered = gathered.clone();
                tokio::spawn(async move { gathered.read(key).await })
            })
            .collect();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while lock(&gathered.inner.queue).waiting.len() < 4 {
            assert!(tokio::time::Instant::now() < deadline, "the reads queue");
            tokio::task::yield_now().await;
        }
        release.notify_one();
        assert_eq!(first.await.unwrap().unwrap(), Some(10));

        assert_eq!(
            next_round(&mut rounds).await,
            vec![0, 2, 3],
            "each key once"
        );
        release.notify_one();
        let answers: Vec<_> = futures::future::join_all(later)
            .await
            .into_iter()
            .map(|joined| joined.unwrap().unwrap())
            .collect();
        assert_eq!(answers, vec![Some(20), Some(30), Some(20), None]);
        assert_eq!(
            gathered.counts(),
            GatheredCounts {
                reads: 5,
                rounds: 2
            }
        );
    }

    #[tokio::test]
    async fn a_failed_round_answers_its_error_to_every_read_and_the_next_round_runs() {
        let calls = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&calls);
        let read_many: ReadMany<u32, u32> = Arc::new(move |keys: Vec<u32>| {
            let call = counted.fetch_add(1, Ordering::Relaxed);
            Box::pin(async move {
                if call == 0 {
                    Err(DbErr::Custom("the database went away".into()))
                } else {
                    Ok(keys.into_iter().map(|k| (k, k)).collect())
                }
            })
        });
        let gathered = Gathered::new(2, read_many);
        let failed = gathered.read(7).await.unwrap_err();
        assert!(
            failed.to_string().contains("the database went away"),
            "{failed}"
        );
        assert_eq!(gathered.read(7).await.unwrap(), Some(7));
        assert_eq!(
            lock(&gathered.inner.queue).running,
            0,
            "no round is left counted"
        );
    }

    #[tokio::test]
    async fn a_caller_that_gives_up_does_not_strand_the_round() {
        let (gathered, mut rounds, release) = held_reads();
        let abandoned = tokio::spawn({
            let gathered = gathered.clone();
            async move { gathered.read(4).await }
        });
        assert_eq!(next_round(&mut rounds).await, vec![4]);
        abandoned.abort();
        let waiting = tokio::spawn({
            let gathered = gathered.clone();
            async move { gathered.read(5).await }
        });
        release.notify_one();
        assert_eq!(next_round(&mut rounds).await, vec![5]);
        release.notify_one();
        assert_eq!(waiting.await.unwrap().unwrap(), Some(50));
    }
}
