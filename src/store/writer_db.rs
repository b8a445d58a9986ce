//! How an order-path writer reaches the database ([`WriterDb`]): on
//! PostgreSQL through the connections it keeps ([`super::kept`]), elsewhere
//! through the pool, behind the write gate on SQLite ([`super::begin_write`]).

use std::sync::Arc;

use sea_orm::{ConnectionTrait, DbBackend, DbErr, ExecResult, QueryResult, Statement};

use super::{
    Db, WriteTxn, begin_write,
    kept::{Kept, KeptTxn},
};

/// How an order-path writer reaches the database: its kept connections on
/// PostgreSQL, the pool (behind the write gate) on SQLite or a small pool.
#[derive(Clone)]
pub struct WriterDb {
    /// The pool, for the write gate and where nothing is kept.
    db: Db,
    /// The writer's kept connections, on PostgreSQL.
    kept: Option<Arc<Kept>>,
}

impl WriterDb {
    /// A writer's way to `db`, keeping `slots` connections on PostgreSQL.
    pub fn new(db: &Db, slots: usize) -> Self {
        WriterDb {
            db: db.clone(),
            kept: Kept::new(db, slots),
        }
    }

    /// The pool behind it.
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// Whether it writes through connections of its own.
    pub fn keeps_connections(&self) -> bool {
        self.kept.is_some()
    }

    /// Begins a write transaction: on a kept connection, else as
    /// [`begin_write`] does.
    pub async fn begin(&self) -> Result<WriterTxn, DbErr> {
        match &self.kept {
            Some(kept) => kept.begin().await.map(WriterTxn::Kept),
            None => begin_write(&self.db).await.map(WriterTxn::Pool),
        }
    }
}

#[async_trait::async_trait]
impl ConnectionTrait for WriterDb {
    fn get_database_backend(&self) -> DbBackend {
        self.db.get_database_backend()
    }

    async fn execute_raw(&self, stmt: Statement) -> Result<ExecResult, DbErr> {
        match &self.kept {
            Some(kept) => kept.execute_raw(stmt).await,
            None => self.db.execute_raw(stmt).await,
        }
    }

    async fn execute_unprepared(&self, sql: &str) -> Result<ExecResult, DbErr> {
        match &self.kept {
            Some(kept) => kept.execute_unprepared(sql).await,
            None => self.db.execute_unprepared(sql).await,
        }
    }

    async fn query_one_raw(&self, stmt: Statement) -> Result<Option<QueryResult>, DbErr> {
        match &self.kept {
            Some(kept) => kept.query_one_raw(stmt).await,
            None => self.db.query_one_raw(stmt).await,
        }
    }

    async fn query_all_raw(&self, stmt: Statement) -> Result<Vec<QueryResult>, DbErr> {
        match &self.kept {
            Some(kept) => kept.query_all_raw(stmt).await,
            None => self.db.query_all_raw(stmt).await,
        }
    }

    fn support_returning(&self) -> bool {
        self.db.support_returning()
    }
}

/// A writer's transaction: on a kept connection or from the pool.
pub enum WriterTxn {
    /// From the pool, with the write gate's turn on SQLite.
    Pool(WriteTxn),
    /// On a kept PostgreSQL connection.
    Kept(KeptTxn),
}

impl WriterTxn {
    /// Commits.
    pub async fn commit(self) -> Result<(), DbErr> {
        match self {
            WriterTxn::Pool(txn) => txn.commit().await,
            WriterTxn::Kept(txn) => txn.commit().await,
        }
    }

    /// Rolls back.
    pub async fn rollback(self) -> Result<(), DbErr> {
        match self {
            WriterTxn::Pool(txn) => txn.rollback().await,
            WriterTxn::Kept(txn) => txn.rollback().await,
        }
    }

    /// Commits when `keep`, else rolls back; returns `keep`.
    pub async fn keep_if(self, keep: bool) -> Result<bool, DbErr> {
        match keep {
            true => self.commit().await?,
            false => self.rollback().await?,
        }
        Ok(keep)
    }
}

#[async_trait::async_trait]
impl ConnectionTrait for WriterTxn {
    fn get_database_backend(&self) -> DbBackend {
        match self {
            WriterTxn::Pool(txn) => txn.get_database_backend(),
            WriterTxn::Kept(txn) => txn.get_database_backend(),
        }
    }

    async fn execute_raw(&self, stmt: Statement) -> Result<ExecResult, DbErr> {
        match self {
            WriterTxn::Pool(txn) => txn.execute_raw(stmt).await,
            WriterTxn::Kept(txn) => txn.execute_raw(stmt).await,
        }
    }

    async fn execute_unprepared(&self, sql: &str) -> Result<ExecResult, DbErr> {
        match self {
            WriterTxn::Pool(txn) => txn.execute_unprepared(sql).await,
            WriterTxn::Kept(txn) => txn.execute_unprepared(sql).await,
        }
    }

    async fn query_one_raw(&self, stmt: Statement) -> Result<Option<QueryResult>, DbErr> {
        match self {
            WriterTxn::Pool(txn) => txn.query_one_raw(stmt).await,
            WriterTxn::Kept(txn) => txn.query_one_raw(stmt).await,
        }
    }

    async fn query_all_raw(&self, stmt: Statement) -> Result<Vec<QueryResult>, DbErr> {
        match self {
            WriterTxn::Pool(txn) => txn.query_all_raw(stmt).await,
            WriterTxn::Kept(txn) => txn.query_all_raw(stmt).await,
        }
    }

    fn support_returning(&self) -> bool {
        match self {
            WriterTxn::Pool(txn) => txn.support_returning(),
            WriterTxn::Kept(txn) => txn.support_returning(),
        }
    }
}
