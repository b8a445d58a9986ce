//! Persistence through sea-orm: the only place that knows SQL.
//!
//! SQLite (the embedded default) runs in WAL mode with `synchronous=FULL` and a
//! busy timeout; every transaction that reads and then writes starts
//! `IMMEDIATE` ([`begin_write`]) so two writers never deadlock on a lock
//! upgrade and SQLite never answers `SQLITE_BUSY` mid-transaction.

pub mod bulk;
pub mod catalogue;
pub mod deposits;
pub mod esims;
pub mod keys;
pub mod orders;
pub mod partners;
pub mod supplier_orders;

use std::{path::Path, str::FromStr, time::Duration};

use anyhow::Context;
use migration::{Migrator, MigratorTrait};
use sea_orm::{
    ConnectOptions, Database, DatabaseConnection, DatabaseConnectionType, DatabaseTransaction,
    DbBackend, DbErr, SqlErr, SqliteTransactionMode, TransactionOptions, TransactionTrait,
    sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous},
};

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
    Database::connect(options)
        .await
        .with_context(|| format!("connecting to the database ({})", redact_url(&settings.url)))
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
pub async fn begin_write(db: &Db) -> Result<DatabaseTransaction, DbErr> {
    let options = TransactionOptions {
        sqlite_transaction_mode: (db.get_database_backend() == DbBackend::Sqlite)
            .then_some(SqliteTransactionMode::Immediate),
        ..Default::default()
    };
    db.begin_with_options(options).await
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
    use super::redact_url;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact_url("postgres://app:hunter2@db:5432/esim"),
            "postgres://app@db:5432/esim"
        );
        assert_eq!(redact_url("sqlite://data/x.db"), "sqlite://data/x.db");
    }
}
