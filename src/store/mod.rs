//! Persistence through sea-orm: the only place that knows SQL.
//!
//! SQLite (the embedded default) runs in WAL mode with `synchronous=FULL` and a
//! busy timeout; every transaction that reads and then writes starts
//! `IMMEDIATE` ([`begin_write`]) so two writers never deadlock on a lock
//! upgrade and SQLite never answers `SQLITE_BUSY` mid-transaction.

pub(crate) mod bulk;
pub(crate) mod catalogue;
pub(crate) mod changes;
pub(crate) mod deposits;
pub(crate) mod esims;
pub(crate) mod keys;
pub mod nodes;
pub mod orders;
pub mod partners;
pub(crate) mod supplier_orders;
pub mod supply;

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    str::FromStr,
    sync::{Arc, LazyLock},
    time::Duration,
};

use anyhow::Context;
use migration::{Migrator, MigratorTrait};
use sea_orm::{
    ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DatabaseConnectionType,
    DatabaseTransaction, DbBackend, DbErr, ExecResult, QueryResult, SqlErr, SqliteTransactionMode,
    Statement, TransactionOptions, TransactionTrait,
    sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous},
};

use tokio::sync::OwnedMutexGuard;

use crate::config::DatabaseSettings;

/// A shared handle on the database pool.
pub type Db = DatabaseConnection;

/// Opens the pool, creating the SQLite file and its folder on first run.
#[tracing::instrument(skip_all, fields(backend))]
pub async fn connect(settings: &DatabaseSettings) -> anyhow::Result<Db> {
    let is_sqlite = settings.url.starts_with("sqlite:");
    tracing::Span::current().record("backend", if is_sqlite { "sqlite" } else { "postgres" });
    if is_sqlite {
        ensure_sqlite_folder(&settings.url)?;
    }
    let mut options = ConnectOptions::new(settings.url.clone());
    let pool_size = match (settings.max_connections, is_sqlite) {
        (0, true) => 8,
        (0, false) => 16,
        (n, _) => n,
    };
    options
        .max_connections(pool_size)
        .min_connections(1)
        .connect_timeout(Duration::from_secs(5))
        .acquire_timeout(Duration::from_secs(5))
        .sqlx_logging(false);
    if is_sqlite {
        let busy = Duration::from_millis(settings.busy_timeout_ms);
        options.map_sqlx_sqlite_opts(move |opts: SqliteConnectOptions| {
            opts.create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Full)
                .busy_timeout(busy)
                .foreign_keys(true)
        });
    }
    let db = Database::connect(options)
        .await
        .with_context(|| format!("connecting to the database ({})", redact_url(&settings.url)))?;
    register_write_gate(&db, Duration::from_millis(settings.busy_timeout_ms.max(1)));
    Ok(db)
}

/// Applies every pending migration.
#[tracing::instrument(skip_all)]
pub async fn migrate(db: &Db) -> anyhow::Result<()> {
    Migrator::up(db, None).await.context("applying migrations")
}

/// A cheap round trip, for the health probe.
pub async fn ping(db: &Db) -> Result<(), DbErr> {
    db.ping().await
}

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
    let turn = match write_gate(db) {
        Some((gate, wait)) => Some(
            tokio::time::timeout(wait, gate.lock_owned())
                .await
                .map_err(|_| DbErr::Custom("database is locked (write queue)".into()))?,
        ),
        None => None,
    };
    let options = TransactionOptions {
        sqlite_transaction_mode: (db.get_database_backend() == DbBackend::Sqlite)
            .then_some(SqliteTransactionMode::Immediate),
        ..Default::default()
    };
    let txn = db.begin_with_options(options).await?;
    Ok(WriteTxn { txn, _turn: turn })
}

/// A write transaction and, on SQLite, this process's turn to write.
/// Fields drop in order: the transaction ends before the turn passes on.
pub struct WriteTxn {
    /// The transaction itself.
    txn: DatabaseTransaction,
    /// The gate's guard (SQLite), released when the transaction is gone.
    _turn: Option<OwnedMutexGuard<()>>,
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
type Gates = HashMap<PathBuf, (Arc<tokio::sync::Mutex<()>>, Duration)>;

static WRITE_GATES: LazyLock<std::sync::Mutex<Gates>> = LazyLock::new(Default::default);

/// Registers the gate of a SQLite file (at connect).
fn register_write_gate(db: &Db, wait: Duration) {
    let Some(file) = sqlite_file(db) else { return };
    // A poisoned map only means another thread panicked mid-insert; the map
    // itself is still whole, so keep using it.
    let mut gates = WRITE_GATES.lock().unwrap_or_else(|e| e.into_inner());
    gates.entry(file).or_insert_with(|| (Arc::default(), wait));
}

fn write_gate(db: &Db) -> Option<(Arc<tokio::sync::Mutex<()>>, Duration)> {
    let file = sqlite_file(db)?;
    let gates = WRITE_GATES.lock().unwrap_or_else(|e| e.into_inner());
    gates.get(&file).cloned()
}

fn sqlite_file(db: &Db) -> Option<PathBuf> {
    match &db.inner {
        DatabaseConnectionType::SqlxSqlitePoolConnection(_) => Some(
            db.get_sqlite_connection_pool()
                .connect_options()
                .get_filename()
                .to_path_buf(),
        ),
        _ => None,
    }
}

/// Whether an error is a unique-constraint violation (a lost race or a
/// duplicate), which callers turn into a 4xx.
pub fn is_unique_violation(err: &DbErr) -> bool {
    matches!(err.sql_err(), Some(SqlErr::UniqueConstraintViolation(_)))
}

/// How the connection pool is used right now (for metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolUse {
    /// Connections open.
    pub size: u32,
    /// Of those, waiting for work.
    pub idle: usize,
    /// Most connections the pool opens.
    pub max: u32,
}

impl PoolUse {
    /// Connections lent out.
    pub fn in_use(&self) -> usize {
        (self.size as usize).saturating_sub(self.idle)
    }
}

/// The pool's use, or `None` for a connection without a pool.
pub fn pool_use(db: &Db) -> Option<PoolUse> {
    // The pool getters panic on another backend: each is called only in the
    // arm that matched its own variant.
    match &db.inner {
        DatabaseConnectionType::SqlxSqlitePoolConnection(_) => {
            let pool = db.get_sqlite_connection_pool();
            Some(PoolUse {
                size: pool.size(),
                idle: pool.num_idle(),
                max: pool.options().get_max_connections(),
            })
        }
        DatabaseConnectionType::SqlxPostgresPoolConnection(_) => {
            let pool = db.get_postgres_connection_pool();
            Some(PoolUse {
                size: pool.size(),
                idle: pool.num_idle(),
                max: pool.options().get_max_connections(),
            })
        }
        _ => None,
    }
}

fn ensure_sqlite_folder(url: &str) -> anyhow::Result<()> {
    let rest = url.trim_start_matches("sqlite:").trim_start_matches("//");
    let path = rest.split('?').next().unwrap_or_default();
    if path.is_empty() || path == ":memory:" {
        return Ok(());
    }
    // Validate the URL the way the driver will read it.
    SqliteConnectOptions::from_str(url).context("invalid configuration: `database.url`")?;
    if let Some(parent) = Path::new(path)
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
    {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating the database folder {}", parent.display()))?;
    }
    Ok(())
}

/// The URL without its password, for messages.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let credentials = &url[scheme_end + 3..at];
            let user = credentials.split(':').next().unwrap_or_default();
            format!("{}{}@{}", &url[..scheme_end + 3], user, &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn sqlite_writers_of_one_file_take_turns_on_the_gate() {
        let dir = tempfile::tempdir().unwrap();
        let settings = DatabaseSettings {
            url: format!("sqlite://{}/gate.db", dir.path().display()),
            max_connections: 4,
            busy_timeout_ms: 5_000,
            probe_timeout_ms: 1_000,
        };
        let db = connect(&settings).await.unwrap();
        let (gate, _) = write_gate(&db).expect("a SQLite file has a gate");
        let first = begin_write(&db).await.unwrap();
        assert!(gate.try_lock().is_err(), "the first writer holds the turn");
        let second = tokio::spawn({
            let db = db.clone();
            async move { begin_write(&db).await.map(|txn| txn.commit()) }
        });
        first.commit().await.unwrap();
        let next = tokio::time::timeout(Duration::from_secs(10), second)
            .await
            .expect("the second writer gets its turn once the first commits")
            .unwrap()
            .unwrap();
        next.await.unwrap();
        assert!(gate.try_lock().is_ok(), "the turn is free once both ended");
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact_url("postgres://app:hunter2@db:5432/esim"),
            "postgres://app@db:5432/esim"
        );
        assert_eq!(redact_url("sqlite://data/x.db"), "sqlite://data/x.db");
    }
}
