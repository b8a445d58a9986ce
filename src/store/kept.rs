//! Connections the order path's writers keep on PostgreSQL, instead of
//! taking one from the pool for every transaction and lone statement.
//!
//! sqlx pings a connection as it is taken from the pool (`test_before_acquire`)
//! and again, always, as it goes back: a `Sync` answered by `ReadyForQuery`,
//! a round trip that wakes the server process and this one for nothing
//! else, and the connection is not free again until the answer is in. The
//! order path's writers (the shared commit, the delivery writer, the
//! supplier orders' bookkeeping) took about one connection for every three
//! orders, so two pings for every three. Each of them now keeps a few
//! connections taken from the pool once ([`Kept`]), and through
//! [`super::WriterDb`] uses them where it used the pool.
//!
//! What the pool's pings were for is kept where it matters: a connection
//! idle for [`IDLE_BEFORE_PING`] or more is pinged before it is used (as the
//! pool did, to find one a failover or a proxy broke while it slept); any
//! error but the database's own answer (the connection lost, a protocol
//! error) gives the connection up, closed, and the next write takes a fresh
//! one from the pool; a `BEGIN` that fails that way is sent once more on a
//! fresh one (nothing ran yet); and a transaction dropped without its
//! `COMMIT` or `ROLLBACK` (a writer's `?` on an error) is rolled back at
//! once, its connection serving nothing else until it is (its row locks
//! must not outlast it: the writer may go on to the same rows through the
//! pool). A kept connection's prepared
//! statements are closed every [`REPLAN_EVERY`], so that their plans follow
//! the tables as they grow rather than stay those of a node's first second.
//!
//! On SQLite there is nothing to keep: its writers already run on
//! connections of their own ([`super::inline_write`]), and a
//! [`super::WriterDb`] there is the pool behind the write gate.

use std::{
    sync::{
        Arc, Weak,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use sea_orm::{
    ConnectionTrait, DatabaseConnectionType, DbBackend, DbErr, ExecResult, QueryResult, RuntimeErr,
    Statement,
    sea_query::Values,
    sqlx::{
        self, Connection, PgPool, Postgres,
        pool::PoolConnection,
        postgres::{PgDatabaseError, PgSeverity},
    },
};
use sea_query_sqlx::SqlxValues;
use tokio::sync::{Mutex, OwnedMutexGuard, oneshot};

use super::Db;

/// A kept connection idle this long is pinged before it is used again, as
/// the pool pings every connection it hands out.
const IDLE_BEFORE_PING: Duration = Duration::from_secs(1);

/// A kept connection's prepared statements are closed this often, and made
/// again (their plans with them) at their next use. From a prepared
/// statement's sixth run PostgreSQL may keep to its generic plan, costed on
/// the tables as they were then; a connection kept from a node's start runs
/// its statements thousands of times in its first second, so without this
/// its plans could be those of nearly empty tables until autovacuum next
/// analyzes them. The pool's own connections share the work and come later
/// to their sixth run.
const REPLAN_EVERY: Duration = Duration::from_secs(1);

/// The pool's size below which writers keep no connections: each kept one
/// is out of the pool for good, and a small pool is left to the requests.
const POOL_TO_KEEP_FROM: u32 = 8;

/// A few connections kept by one writer, taken from the pool when first
/// needed and given back only when they fail.
pub struct Kept {
    /// Where a connection comes from, and a broken one is replaced from.
    pool: PgPool,
    /// The connections, each used by one statement or transaction at a time.
    slots: Vec<Arc<Mutex<Slot>>>,
    /// Where the next taker starts looking for a free slot.
    next: AtomicUsize,
    /// Dropped with this: the task that gives the connections back when
    /// the pool closes ([`release_on_close`]) then ends too.
    _release: oneshot::Sender<()>,
}

/// One kept connection.
struct Slot {
    /// The connection; `None` before the first use and after a failure.
    conn: Option<PoolConnection<Postgres>>,
    /// When it last answered.
    used: Instant,
    /// When its prepared statements were last closed ([`REPLAN_EVERY`]).
    planned: Instant,
    /// When it was taken from the pool: past the pool's `max_lifetime` it
    /// is closed and replaced, as the pool recycles its own.
    since: Instant,
    /// A transaction was begun and neither committed nor rolled back: its
    /// holder dropped it outside a runtime (rolled back before the next
    /// use; within one it is rolled back at once, [`KeptTxn`]).
    open: bool,
}

impl Kept {
    /// `slots` connections for one writer of `db`; `None` on SQLite, or when
    /// the pool is too small to spare them.
    pub fn new(db: &Db, slots: usize) -> Option<Arc<Self>> {
        let DatabaseConnectionType::SqlxPostgresPoolConnection(_) = &db.inner else {
            return None;
        };
        let pool = db.get_postgres_connection_pool().clone();
        if pool.options().get_max_connections() < POOL_TO_KEEP_FROM {
            return None;
        }
        let slots: Vec<_> = (0..slots.max(1))
            .map(|_| {
                Arc::new(Mutex::new(Slot {
                    conn: None,
                    used: Instant::now(),
                    planned: Instant::now(),
                    since: Instant::now(),
                    open: false,
                }))
            })
            .collect();
        let release = release_on_close(&pool, &slots)?;
        Some(Arc::new(Kept {
            pool,
            slots,
            next: AtomicUsize::new(0),
            _release: release,
        }))
    }

    /// A slot for one statement or transaction: the first free one from
    /// where the last taker started, else (all busy) that one's turn; its
    /// connection ready to use.
    async fn take(&self) -> Result<OwnedMutexGuard<Slot>, DbErr> {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let count = self.slots.len();
        let free = (0..count).find_map(|i| {
            self.slots[(start + i) % count]
                .clone()
                .try_lock_owned()
                .ok()
        });
        let mut slot = match free {
            Some(slot) => slot,
            None => self.slots[start % count].clone().lock_owned().await,
        };
        self.ready(&mut slot).await?;
        Ok(slot)
    }

    /// Makes the slot's connection ready: a dropped transaction rolled
    /// back, pinged if idle too long, its prepared statements closed every
    /// [`REPLAN_EVERY`], replaced from the pool if any of these failed, if
    /// it is older than the pool lets its own live, or if there is none.
    async fn ready(&self, slot: &mut Slot) -> Result<(), DbErr> {
        let stale = slot.open || slot.used.elapsed() >= IDLE_BEFORE_PING;
        if let (true, Some(conn)) = (stale, slot.conn.as_mut()) {
            let checked = match slot.open {
                true => sqlx::raw_sql(sqlx::AssertSqlSafe("ROLLBACK"))
                    .execute(&mut **conn)
                    .await
                    .map(|_| ()),
                false => conn.ping().await,
            };
            slot.open = false;
            if checked.is_err() {
                give_up(slot);
            }
        }
        if let (true, Some(conn)) = (slot.planned.elapsed() >= REPLAN_EVERY, slot.conn.as_mut()) {
            slot.planned = Instant::now();
            if conn.clear_cached_statements().await.is_err() {
                give_up(slot);
            }
        }
        let lifetime = self.pool.options().get_max_lifetime();
        if lifetime.is_some_and(|lifetime| slot.since.elapsed() >= lifetime) {
            give_up(slot);
        }
        if slot.conn.is_none() {
            let conn = self.pool.acquire().await.map_err(conn_err)?;
            slot.conn = Some(conn);
            slot.since = Instant::now();
            slot.planned = Instant::now();
        }
        slot.used = Instant::now();
        Ok(())
    }

    /// Begins a transaction on a kept connection: `BEGIN` (READ COMMITTED,
    /// as [`super::begin_write`] on PostgreSQL), sent once more on a fresh
    /// connection if the kept one was lost.
    pub async fn begin(&self) -> Result<KeptTxn, DbErr> {
        let mut slot = self.take().await?;
        if run(&mut slot, Sql::Begin).await.is_err() {
            // Nothing ran: whatever refused a bare `BEGIN`, a fresh
            // connection is the one to try it on.
            give_up(&mut slot);
            self.ready(&mut slot).await?;
            run(&mut slot, Sql::Begin).await?;
        }
        slot.open = true;
        Ok(KeptTxn::new(slot))
    }
}

/// Gives the kept connections up when the pool closes: closing waits for
/// every connection taken from it to come back, and kept ones would never
/// come back by themselves (a node's shutdown closes the pool while its
/// writers still stand). The task ends with the returned sender's [`Kept`]
/// if that goes first. `None` outside a runtime (nothing is kept then).
fn release_on_close(pool: &PgPool, slots: &[Arc<Mutex<Slot>>]) -> Option<oneshot::Sender<()>> {
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    let (release, kept_gone) = oneshot::channel::<()>();
    let closing = pool.close_event();
    let slots: Vec<Weak<Mutex<Slot>>> = slots.iter().map(Arc::downgrade).collect();
    runtime.spawn(async move {
        tokio::select! {
            _ = closing => {}
            _ = kept_gone => return,
        }
        for slot in slots.iter().filter_map(Weak::upgrade) {
            give_up(&mut *slot.lock().await);
        }
    });
    Some(release)
}

/// Gives the slot's connection up, closed rather than pinged back into the
/// pool, which the next use refills from.
fn give_up(slot: &mut Slot) {
    if let Some(mut conn) = slot.conn.take() {
        conn.close_on_drop();
    }
    slot.open = false;
}

/// What runs on a kept connection.
enum Sql<'a> {
    /// `BEGIN`.
    Begin,
    /// `COMMIT` or `ROLLBACK`, unprepared.
    End(&'static str),
    /// A statement whose rows are not read.
    Execute(&'a Statement),
    /// A statement whose rows are read.
    Fetch(&'a Statement),
}

/// What came back.
enum Answer {
    /// Rows affected.
    Done(ExecResult),
    /// Rows returned.
    Rows(Vec<QueryResult>),
}

/// Runs `sql` on the slot's connection. Any error but the database's own
/// answer gives the connection up.
async fn run(slot: &mut Slot, sql: Sql<'_>) -> Result<Answer, DbErr> {
    let Some(conn) = slot.conn.as_mut() else {
        return Err(DbErr::Conn(RuntimeErr::Internal(
            "no kept connection".into(),
        )));
    };
    let answer = match sql {
        Sql::Begin => sqlx::raw_sql(sqlx::AssertSqlSafe("BEGIN"))
            .execute(&mut **conn)
            .await
            .map(|done| Answer::Done(done.into())),
        Sql::End(sql) => sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(&mut **conn)
            .await
            .map(|done| Answer::Done(done.into())),
        Sql::Execute(stmt) => query(stmt)
            .execute(&mut **conn)
            .await
            .map(|done| Answer::Done(done.into())),
        Sql::Fetch(stmt) => query(stmt)
            .fetch_all(&mut **conn)
            .await
            .map(|rows| Answer::Rows(rows.into_iter().map(QueryResult::from).collect())),
    };
    match answer {
        Ok(answer) => {
            slot.used = Instant::now();
            Ok(answer)
        }
        Err(err) => {
            if connection_lost(&err) {
                give_up(slot);
            }
            Err(match sql {
                Sql::Fetch(_) => DbErr::Query(RuntimeErr::SqlxError(Arc::new(err))),
                _ => DbErr::Exec(RuntimeErr::SqlxError(Arc::new(err))),
            })
        }
    }
}

/// Whether `err` leaves the connection unusable: anything but the
/// database's own answer to a statement, or reading a row, is; and an
/// answer of severity `FATAL` or `PANIC` (the server ending the session,
/// as `pg_terminate_backend` or a shutdown does) is too.
fn connection_lost(err: &sqlx::Error) -> bool {
    use sqlx::Error::*;
    match err {
        Database(answer) => answer
            .try_downcast_ref::<PgDatabaseError>()
            .is_some_and(|answer| {
                matches!(answer.severity(), PgSeverity::Fatal | PgSeverity::Panic)
            }),
        RowNotFound
        | ColumnNotFound(_)
        | ColumnIndexOutOfBounds { .. }
        | ColumnDecode { .. }
        | Decode(_)
        | Encode(_)
        | TypeNotFound { .. } => false,
        _ => true,
    }
}

/// A sea-orm statement as sqlx runs it, its values bound (as sea-orm's own
/// PostgreSQL driver does).
fn query(stmt: &Statement) -> sqlx::query::Query<'_, Postgres, SqlxValues> {
    let values = stmt.values.clone().unwrap_or(Values(Vec::new()));
    sqlx::query_with(sqlx::AssertSqlSafe(stmt.sql.as_str()), SqlxValues(values))
}

/// A pool error taking a connection, as sea-orm reports one.
fn conn_err(err: sqlx::Error) -> DbErr {
    DbErr::Conn(RuntimeErr::SqlxError(Arc::new(err)))
}

/// The rows of a fetch, or an empty answer's none.
fn rows(answer: Answer) -> Vec<QueryResult> {
    match answer {
        Answer::Rows(rows) => rows,
        Answer::Done(_) => Vec::new(),
    }
}

/// Rows affected by an execute.
fn done(answer: Answer) -> ExecResult {
    match answer {
        Answer::Done(done) => done,
        // A fetch is never asked for an execute's answer; an empty result
        // stands for it.
        Answer::Rows(_) => ExecResult::from(sqlx::postgres::PgQueryResult::default()),
    }
}

/// A transaction on a kept connection; dropped without [`KeptTxn::commit`]
/// or [`KeptTxn::rollback`] (a writer's `?` on an error), it is rolled back
/// at once by a task that holds the slot until it is done: its row locks
/// must not wait for the slot's next use, since the writer may go on to
/// the same rows through the pool (the shared commit's fallback does).
pub struct KeptTxn {
    /// The slot, held for the whole transaction (statements take `&self`);
    /// `None` once ended.
    slot: Mutex<Option<OwnedMutexGuard<Slot>>>,
}

impl KeptTxn {
    fn new(slot: OwnedMutexGuard<Slot>) -> Self {
        KeptTxn {
            slot: Mutex::new(Some(slot)),
        }
    }

    /// Commits.
    pub async fn commit(self) -> Result<(), DbErr> {
        self.end("COMMIT").await
    }

    /// Rolls back.
    pub async fn rollback(self) -> Result<(), DbErr> {
        self.end("ROLLBACK").await
    }

    async fn end(mut self, sql: &'static str) -> Result<(), DbErr> {
        let Some(mut slot) = self.slot.get_mut().take() else {
            return Err(ended());
        };
        end(&mut slot, sql).await
    }

    async fn run(&self, sql: Sql<'_>) -> Result<Answer, DbErr> {
        let mut slot = self.slot.lock().await;
        let Some(slot) = slot.as_mut() else {
            return Err(ended());
        };
        run(slot, sql).await
    }
}

impl Drop for KeptTxn {
    fn drop(&mut self) {
        let Some(mut slot) = self.slot.get_mut().take() else {
            return;
        };
        // Without a runtime the slot stays marked open, and its next use
        // rolls it back first ([`Kept::ready`]).
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = end(&mut slot, "ROLLBACK").await;
            });
        }
    }
}

/// Ends the slot's transaction with `sql`; a `ROLLBACK` that fails gives
/// the connection up (the server ends a session's transaction with it).
async fn end(slot: &mut Slot, sql: &'static str) -> Result<(), DbErr> {
    let ended = run(slot, Sql::End(sql)).await;
    if ended.is_err() && sql == "ROLLBACK" {
        give_up(slot);
    }
    // Ended, or the connection is gone with it.
    slot.open = false;
    ended.map(|_| ())
}

/// A transaction used after it ended: cannot happen through its own
/// methods, which take it by value.
fn ended() -> DbErr {
    DbErr::Conn(RuntimeErr::Internal("the transaction has ended".into()))
}

impl Kept {
    /// Runs one lone statement on a slot's connection.
    async fn run(&self, sql: Sql<'_>) -> Result<Answer, DbErr> {
        let mut slot = self.take().await?;
        run(&mut slot, sql).await
    }
}

/// sea-orm's way in to a type with an inherent `run` of [`Sql`]: a
/// transaction runs on its slot, a lone statement on any free one.
macro_rules! connection_through_run {
    ($kind:ty) => {
        #[async_trait::async_trait]
        impl ConnectionTrait for $kind {
            fn get_database_backend(&self) -> DbBackend {
                DbBackend::Postgres
            }

            async fn execute_raw(&self, stmt: Statement) -> Result<ExecResult, DbErr> {
                self.run(Sql::Execute(&stmt)).await.map(done)
            }

            async fn execute_unprepared(&self, sql: &str) -> Result<ExecResult, DbErr> {
                self.execute_raw(Statement::from_string(DbBackend::Postgres, sql))
                    .await
            }

            async fn query_one_raw(&self, stmt: Statement) -> Result<Option<QueryResult>, DbErr> {
                Ok(self.query_all_raw(stmt).await?.into_iter().next())
            }

            async fn query_all_raw(&self, stmt: Statement) -> Result<Vec<QueryResult>, DbErr> {
                self.run(Sql::Fetch(&stmt)).await.map(rows)
            }

            fn support_returning(&self) -> bool {
                true
            }
        }
    };
}

connection_through_run!(KeptTxn);
connection_through_run!(Kept);

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use sea_orm::{ConnectionTrait, DbBackend, SqlErr, Statement, TransactionTrait};

    use crate::store::{Db, WriterDb, tests};

    fn sql(text: &str) -> Statement {
        Statement::from_string(DbBackend::Postgres, text)
    }

    /// The server process behind the connection `db` runs on.
    async fn backend(db: &impl ConnectionTrait) -> i32 {
        let row = db.query_one_raw(sql("SELECT pg_backend_pid()")).await;
        row.unwrap().unwrap().try_get_by_index(0).unwrap()
    }

    async fn rows(db: &Db) -> i64 {
        let row = db
            .query_one_raw(sql("SELECT count(*) FROM kept_probe"))
            .await;
        row.unwrap().unwrap().try_get_by_index(0).unwrap()
    }

    #[tokio::test]
    async fn a_kept_connection_commits_rolls_back_and_outlives_a_refused_statement() {
        tests::on_own_postgres("esim_kept", |pool| async move {
            pool.execute_unprepared("CREATE TABLE kept_probe (n integer PRIMARY KEY)")
                .await
                .unwrap();
            let writer = WriterDb::new(&pool, 1);
            assert!(writer.keeps_connections(), "PostgreSQL: connections kept");
            let first = backend(&writer).await;

            let txn = writer.begin().await.unwrap();
            txn.execute_raw(sql("INSERT INTO kept_probe VALUES (1)"))
                .await
                .unwrap();
            txn.commit().await.unwrap();
            assert_eq!(rows(&pool).await, 1, "committed, seen by the pool");

            // Dropped on a writer's `?`: rolled back before the next use.
            let txn = writer.begin().await.unwrap();
            txn.execute_raw(sql("INSERT INTO kept_probe VALUES (2)"))
                .await
                .unwrap();
            drop(txn);
            let seen = writer
                .query_one_raw(sql("SELECT count(*) FROM kept_probe"))
                .await
                .unwrap()
                .unwrap();
            assert_eq!(seen.try_get_by_index::<i64>(0).unwrap(), 1);
            assert_eq!(rows(&pool).await, 1, "the dropped one left nothing");

            // The database's own refusal reads as the pool's would, and
            // keeps the connection.
            let refused = writer
                .execute_raw(sql("INSERT INTO kept_probe VALUES (1)"))
                .await
                .unwrap_err();
            assert!(matches!(
                refused.sql_err(),
                Some(SqlErr::UniqueConstraintViolation(_))
            ));
            let txn = writer.begin().await.unwrap();
            txn.execute_raw(sql("INSERT INTO kept_probe VALUES (3)"))
                .await
                .unwrap();
            txn.keep_if(false).await.unwrap();
            assert_eq!(rows(&pool).await, 1, "rolled back");
            assert_eq!(backend(&writer).await, first, "one connection all along");
        })
        .await;
    }

    #[tokio::test]
    async fn a_dropped_kept_transaction_lets_go_of_its_rows_at_once() {
        tests::on_own_postgres("esim_kept_dropped", |pool| async move {
            pool.execute_unprepared("CREATE TABLE kept_probe (n integer PRIMARY KEY)")
                .await
                .unwrap();
            pool.execute_unprepared("INSERT INTO kept_probe VALUES (1)")
                .await
                .unwrap();
            let writer = WriterDb::new(&pool, 1);
            let txn = writer.begin().await.unwrap();
            txn.execute_raw(sql("UPDATE kept_probe SET n = 1 WHERE n = 1"))
                .await
                .unwrap();
            // A writer's `?`; nothing uses the kept connection afterwards,
            // and the writer goes on to the same row through the pool.
            drop(txn);
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            loop {
                let other = pool.begin().await.unwrap();
                let locked = other
                    .execute_unprepared("SELECT n FROM kept_probe WHERE n = 1 FOR UPDATE NOWAIT")
                    .await;
                other.rollback().await.unwrap();
                if locked.is_ok() {
                    break;
                }
                assert!(std::time::Instant::now() < deadline, "the row let go");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
    }

    #[tokio::test]
    async fn a_lost_kept_connection_is_replaced_from_the_pool() {
        tests::on_own_postgres("esim_kept_lost", |pool| async move {
            let writer = WriterDb::new(&pool, 1);
            let lost = backend(&writer).await;
            pool.execute_unprepared(&format!("SELECT pg_terminate_backend({lost})"))
                .await
                .unwrap();

            // A transaction's BEGIN is sent again on a fresh connection.
            let txn = writer.begin().await.unwrap();
            let fresh = backend(&txn).await;
            txn.commit().await.unwrap();
            assert_ne!(fresh, lost);

            // A lone statement on a lost connection fails once at most (it
            // may have reached the server), and the next has a fresh one.
            pool.execute_unprepared(&format!("SELECT pg_terminate_backend({fresh})"))
                .await
                .unwrap();
            let after = match writer.query_one_raw(sql("SELECT pg_backend_pid()")).await {
                Ok(_) => backend(&writer).await,
                Err(_) => backend(&writer).await,
            };
            assert_ne!(after, fresh);
        })
        .await;
    }

    /// The statements the connection behind `db` holds prepared whose text
    /// names `marker`.
    async fn prepared(db: &impl ConnectionTrait, marker: &str) -> i64 {
        let row = db
            .query_one_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE $1 AND name LIKE 'sqlx%'",
                [format!("%{marker}%").into()],
            ))
            .await;
        row.unwrap().unwrap().try_get_by_index(0).unwrap()
    }

    #[tokio::test]
    async fn a_kept_connection_makes_its_plans_again_as_time_goes_by() {
        tests::on_own_postgres("esim_kept_replan", |pool| async move {
            let writer = WriterDb::new(&pool, 1);
            let first = backend(&writer).await;
            writer
                .query_one_raw(sql("SELECT 1 AS replan_marker"))
                .await
                .unwrap();
            assert_eq!(prepared(&writer, "replan_marker").await, 1, "prepared once");

            // Each look is a use of the one kept connection: past
            // REPLAN_EVERY its statements are closed before it serves.
            let deadline = std::time::Instant::now() + super::REPLAN_EVERY * 10;
            while prepared(&writer, "replan_marker").await != 0 {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the statement was closed"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            assert_eq!(backend(&writer).await, first, "on the same connection");
        })
        .await;
    }

    #[tokio::test]
    async fn the_pool_closes_while_a_writer_still_keeps_its_connections() {
        tests::on_own_postgres("esim_kept_close", |pool| async move {
            let writer = WriterDb::new(&pool, 2);
            let txn = writer.begin().await.unwrap();
            backend(&writer).await;
            txn.commit().await.unwrap();
            // A node's shutdown: the writers still stand.
            let closed = tokio::time::timeout(Duration::from_secs(10), pool.close_by_ref()).await;
            assert!(closed.is_ok(), "the kept connections were given back");
            assert!(
                writer.begin().await.is_err(),
                "nothing new from a closed pool"
            );
        })
        .await;
    }

    #[tokio::test]
    async fn nothing_is_kept_on_sqlite() {
        let (_dir, db) = tests::sqlite_file_db("kept.db", 2).await;
        let writer = WriterDb::new(&db, 1);
        assert!(!writer.keeps_connections());
        let txn = writer.begin().await.unwrap();
        txn.execute_unprepared("CREATE TABLE probe (n integer)")
            .await
            .unwrap();
        txn.commit().await.unwrap();
    }
}
