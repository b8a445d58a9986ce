//! How the connection pool is used, for the metrics.

use sea_orm::{DatabaseConnectionType, sqlx};

use super::Db;

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
            Some(use_of(db.get_sqlite_connection_pool()))
        }
        DatabaseConnectionType::SqlxPostgresPoolConnection(_) => {
            Some(use_of(db.get_postgres_connection_pool()))
        }
        _ => None,
    }
}

fn use_of<DB: sqlx::Database>(pool: &sqlx::Pool<DB>) -> PoolUse {
    PoolUse {
        size: pool.size(),
        idle: pool.num_idle(),
        max: pool.options().get_max_connections(),
    }
}
