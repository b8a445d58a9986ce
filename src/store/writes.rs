//! This process's turn to write. SQLite takes one writer at a time; the
//! writers of this process (every transaction, and the single-statement
//! writes of the order path: claims, supplier-order bookkeeping, heartbeats)
//! queue for it on one in-process gate per database file, in arrival order,
//! instead of meeting at SQLite's lock, where the loser sleeps in the busy
//! handler. The rarer lone writes (operator actions, deposits, audit rows)
//! still meet the lock. PostgreSQL takes concurrent writers: there is no gate.

use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{
        Arc, LazyLock,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use sea_orm::{
    ConnectionTrait, DatabaseTransaction, DbBackend, DbErr, ExecResult, QueryResult,
    SqliteTransactionMode, Statement, TransactionOptions, TransactionTrait,
};
use tokio::sync::OwnedMutexGuard;

use super::{Db, sqlite_file};
use crate::sync::lock;

/// Begins a transaction that will write after reading: `BEGIN IMMEDIATE` on
/// SQLite, a plain `BEGIN` (READ COMMITTED) on PostgreSQL.
///
/// SQLite takes one writer at a time, and a writer that finds the lock held
/// sleeps in SQLite's busy handler (1, 2, 5, 10 .. 100 ms steps), which is
/// what stretched the tail of order latency while the account writer, the
/// delivery writer and the drivers took turns. So on SQLite the writers of
/// this process first queue on one in-process gate per database file, in
/// arrival order and without sleeping; the busy handler still covers other
/// processes. The gate is held until the transaction ends.
pub async fn begin_write(db: &Db) -> Result<WriteTxn, DbErr> {
    let turn = write_turn(db).await?;
    let options = TransactionOptions {
        sqlite_transaction_mode: (db.get_database_backend() == DbBackend::Sqlite)
            .then_some(SqliteTransactionMode::Immediate),
        ..Default::default()
    };
    let txn = db.begin_with_options(options).await?;
    Ok(WriteTxn { txn, _turn: turn })
}

/// Runs `write`, one statement outside any transaction (SQLite commits it
/// by itself), in this process's turn to write, as [`begin_write`] does for
/// a transaction. An ungated write takes SQLite's lock behind the gate's
/// back: the gated transaction that finds it held sleeps in the busy handler
/// with the gate in its hands (every writer of the process waits behind
/// it), and the write that finds a gated transaction sleeps in 1 to 100 ms
/// steps however soon the lock frees. On PostgreSQL it simply runs.
pub(crate) async fn write_alone<T>(
    db: &Db,
    write: impl Future<Output = Result<T, DbErr>>,
) -> Result<T, DbErr> {
    let _turn = write_turn(db).await?;
    write.await
}

/// This process's turn to write to its SQLite file, waited for in arrival
/// order at most the busy timeout; `None` (no turn needed) on PostgreSQL.
async fn write_turn(db: &Db) -> Result<Option<Turn>, DbErr> {
    match write_gate(db) {
        Some(gate) => take_turn(&gate).await.map(Some),
        None => Ok(None),
    }
}

/// The turn at `gate`, waited for in arrival order at most its wait.
pub(super) async fn take_turn(gate: &Gate) -> Result<Turn, DbErr> {
    let guard = tokio::time::timeout(gate.wait, gate.lock.clone().lock_owned())
        .await
        .map_err(|_| DbErr::Custom("database is locked (write queue)".into()))?;
    Ok(Turn {
        _guard: guard,
        taken: Instant::now(),
        counts: gate.counts.clone(),
    })
}

/// A writer's turn at its file's gate. Dropping it passes the turn on and
/// counts how long it was held: a gate held nearly all the time is what
/// bounds this process's writes, whatever the CPU left idle.
pub(super) struct Turn {
    /// The gate's guard.
    _guard: OwnedMutexGuard<()>,
    /// When the turn was taken.
    taken: Instant,
    /// The gate's counts, where this turn is added when it ends.
    counts: Arc<GateCounts>,
}

impl Drop for Turn {
    fn drop(&mut self) {
        let held = u64::try_from(self.taken.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.counts.turns.fetch_add(1, Ordering::Relaxed);
        self.counts.held_nanos.fetch_add(held, Ordering::Relaxed);
    }
}

/// Turns taken at a gate since the process started, and how long they were
/// held in all.
#[derive(Debug, Default)]
struct GateCounts {
    /// Turns that ended.
    turns: AtomicU64,
    /// Nanoseconds those turns were held, summed.
    held_nanos: AtomicU64,
}

/// How a SQLite file's write gate was used since the process started.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GateUse {
    /// Turns to write taken and ended.
    pub turns: u64,
    /// How long those turns held the gate, summed: per second of the
    /// clock, the share of time some writer of this process held it.
    pub held: Duration,
}

/// How the write gate of `db`'s SQLite database was used; `None` on
/// PostgreSQL, which has none.
pub fn write_gate_use(db: &Db) -> Option<GateUse> {
    let counts = write_gate(db)?.counts;
    Some(GateUse {
        turns: counts.turns.load(Ordering::Relaxed),
        held: Duration::from_nanos(counts.held_nanos.load(Ordering::Relaxed)),
    })
}

/// A write transaction and, on SQLite, this process's turn to write.
/// Fields drop in order: the transaction ends before the turn passes on.
pub struct WriteTxn {
    /// The transaction itself.
    txn: DatabaseTransaction,
    /// The turn to write (SQLite), passed on when the transaction is gone.
    _turn: Option<Turn>,
}

impl WriteTxn {
    /// Commits, then passes the turn on.
    pub async fn commit(self) -> Result<(), DbErr> {
        self.txn.commit().await
    }

    /// Rolls back, then passes the turn on.
    pub async fn rollback(self) -> Result<(), DbErr> {
        self.txn.rollback().await
    }

    /// Commits when `keep`, else rolls back (a guarded write that found its
    /// guard broken); returns `keep`.
    pub async fn keep_if(self, keep: bool) -> Result<bool, DbErr> {
        match keep {
            true => self.commit().await?,
            false => self.rollback().await?,
        }
        Ok(keep)
    }
}

impl std::ops::Deref for WriteTxn {
    type Target = DatabaseTransaction;

    fn deref(&self) -> &DatabaseTransaction {
        &self.txn
    }
}

#[async_trait::async_trait]
impl ConnectionTrait for WriteTxn {
    fn get_database_backend(&self) -> DbBackend {
        self.txn.get_database_backend()
    }

    async fn execute_raw(&self, stmt: Statement) -> Result<ExecResult, DbErr> {
        self.txn.execute_raw(stmt).await
    }

    async fn execute_unprepared(&self, sql: &str) -> Result<ExecResult, DbErr> {
        self.txn.execute_unprepared(sql).await
    }

    async fn query_one_raw(&self, stmt: Statement) -> Result<Option<QueryResult>, DbErr> {
        self.txn.query_one_raw(stmt).await
    }

    async fn query_all_raw(&self, stmt: Statement) -> Result<Vec<QueryResult>, DbErr> {
        self.txn.query_all_raw(stmt).await
    }

    fn support_returning(&self) -> bool {
        self.txn.support_returning()
    }
}

/// The write gates of this process, one per SQLite file, with how long a
/// writer waits for its turn (the configured busy timeout).
type Gates = HashMap<PathBuf, Gate>;

/// One file's write gate: the turn, how long a writer waits for it, and
/// how the turns went.
#[derive(Clone)]
pub(super) struct Gate {
    /// Held by the writer whose turn it is.
    pub(super) lock: Arc<tokio::sync::Mutex<()>>,
    /// How long a writer waits for its turn (the configured busy timeout).
    wait: Duration,
    /// Turns taken and how long they were held.
    counts: Arc<GateCounts>,
}

static WRITE_GATES: LazyLock<std::sync::Mutex<Gates>> = LazyLock::new(Default::default);

/// Registers the gate of a SQLite file (at connect).
pub(super) fn register_write_gate(db: &Db, wait: Duration) {
    let Some(file) = sqlite_file(db) else { return };
    let mut gates = lock(&WRITE_GATES);
    gates.entry(file).or_insert_with(|| Gate {
        lock: Arc::default(),
        wait,
        counts: Arc::default(),
    });
}

pub(super) fn write_gate(db: &Db) -> Option<Gate> {
    let file = sqlite_file(db)?;
    let gates = lock(&WRITE_GATES);
    gates.get(&file).cloned()
}
