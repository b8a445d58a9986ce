//! Write transactions on the caller's thread, for the order path's writers
//! on a SQLite file: the account actors' shared commit, a supplier order
//! written down with its units, delivered profiles stored with their orders
//! settled.
//!
//! sqlx hands every statement of a SQLite connection to that connection's
//! own worker thread and the answer back: a shared commit (`BEGIN`, one
//! debit, four inserts, `COMMIT`) is seven round trips between threads, and
//! under load each costs more than the statement it carries, all of it with
//! the process's write gate held, so every other writer waits for the
//! hand-offs too. Here the same statements (built by the same functions for
//! SQLite) run on the caller's thread over one connection per file, after
//! the caller has taken the gate like every writer
//! ([`super::begin_write`]). Inserts are the one difference: the pool's
//! writers pack a table's rows into one JSON parameter, so that many rows
//! cost one hand-off, and SQLite unpacks it column by column; with no
//! hand-off to save, one cached single-row insert run once per row
//! ([`insert_rows`]) stores the same cells for less of the gate's time.
//! The connection never waits for SQLite's lock
//! (busy timeout zero): holding the gate, it finds the lock taken only by
//! another program, and then, as on any error, the write is rolled back and
//! the caller writes through the pool, which waits as it always does.
//!
//! **One commit for every writer waiting.** Each commit is an fsync, and
//! the writers (the three above, and the supplier orders' bookkeeping: the
//! call counted before it is sent, the order number, the final status) made
//! several hundred a second, each holding the gate through it. So a write is
//! queued first; whichever writer then takes the gate runs every write
//! queued by then in one transaction and commits once: one fsync for all of
//! them. A writer whose write was run by another finds its answer without
//! taking the gate. The writes run one after another with no savepoint
//! between them: a savepoint makes SQLite copy every page its write then
//! touches (the statement journal, 4 KiB a page, a dozen pages an order),
//! so that the write could be undone alone, and the writes of this path
//! almost never need that (a guard firing on a float or a key, a unit
//! taken by another pass). When one does refuse, or fails, the whole
//! transaction rolls back: the writes that ran before it are answered
//! `Unavailable`, so their callers write through the pool, as after a
//! failed commit, and the writes after it run in a new transaction
//! ([`run_together`]).
//!
//! The connection is set up as the pool's are (WAL, `synchronous=FULL`,
//! foreign keys), so what it commits is as durable and as checked as what
//! the pool commits; checkpoints are left to the pool's connections: the
//! commit that leaves the WAL past the mark asks the pool for one, and the
//! next writer with the turn copies only what came during it, so that the
//! WAL starts over ([`super::checkpoint`]). PostgreSQL and in-memory SQLite
//! databases have no inline writer.
//!
//! A transaction holds the async worker it runs on for its length, its
//! statements and the commit's fsync (about 2 ms for a shared commit of 32
//! orders on the reference machine), as sqlx's thread was held before; the
//! other workers go on meanwhile. Only these bounded writers run here, never
//! a scan, and the bulk of a checkpoint, which can take tens of
//! milliseconds, is left to the pool.

use std::{
    borrow::Borrow,
    collections::HashMap,
    path::{Path, PathBuf},
    sync::{
        Arc, LazyLock, Mutex, Weak,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use rusqlite::{Connection, OpenFlags, types::Value as Cell};
use sea_orm::{DbErr, EntityTrait, Statement, Value};
use tokio::sync::oneshot;

use super::{
    Db,
    bulk::{self, Plain},
    checkpoint::Checkpoints,
    sqlite_file,
    writes::{Gate, take_turn, write_gate},
};
use crate::sync::lock;

/// One writer's handle on its file's inline connection. Callers take the
/// process's turn to write before the connection, so its lock is never
/// waited for.
pub struct InlineWriter {
    /// The file's connection and queue, shared by every inline writer of it.
    file: Arc<InlineFile>,
    /// Which writer this is, for its counts.
    writer: &'static str,
    /// Where outcomes and commits are counted.
    counted: Counts,
}

/// Where an inline writer's outcomes are counted.
#[derive(Clone, Copy)]
pub struct Counts {
    /// A write's outcome: (writer, `committed` | `refused` | `fell_back`).
    pub outcome: fn(&'static str, &'static str),
    /// A transaction committed, with the number of writes it carried and
    /// how long its `COMMIT` took (the WAL's frames written and synced,
    /// with the write gate held).
    pub commit: fn(usize, Duration),
    /// The file's WAL after a commit: its pages, and whether it started
    /// over since the commit before (the first writer of a file sets it).
    pub wal: fn(i64, bool),
}

impl Counts {
    /// Counts nothing.
    pub const NONE: Counts = Counts {
        outcome: |_, _| {},
        commit: |_, _| {},
        wal: |_, _| {},
    };
}

/// Why an inline transaction did not commit.
#[derive(Debug)]
pub enum InlineFailed<E> {
    /// The work itself decided not to commit (rolled back; nothing written).
    Refused(E),
    /// SQLite or a value the writer cannot bind refused it (rolled back;
    /// nothing written): commit through the pool instead.
    Unavailable(DbErr),
}

/// A SQLite file's inline connection and the writes queued for it.
struct InlineFile {
    /// The file's write gate, found once (every writer of the file takes it).
    gate: Gate,
    /// The connection, used only by the writer holding the gate.
    connection: Mutex<Connection>,
    /// Writes waiting for the next transaction, in arrival order, by number.
    queued: Mutex<Vec<(u64, Job)>>,
    /// The next write's number.
    numbers: AtomicU64,
    /// Copies the WAL back into the file and lets it start over.
    checkpoints: Checkpoints,
}

/// A queued write: run on the connection inside the runner's transaction,
/// or abandoned with the reason (answered `Unavailable`, nothing run).
/// `Some` when it ran and keeps its writes: what to answer once the
/// commit's outcome is known.
type Job = Box<dyn FnOnce(Result<&Connection, &DbErr>) -> Option<Settle> + Send>;

/// Answers a write that kept its writes, with the outcome of the commit.
type Settle = Box<dyn FnOnce(Result<(), &DbErr>) + Send>;

/// The inline connections of this process, one per SQLite file, alive as
/// long as a writer holds them.
static FILES: LazyLock<Mutex<HashMap<FileKey, Weak<InlineFile>>>> = LazyLock::new(Default::default);

/// A file by path and, on Unix, by inode: a file restored over the path
/// while an old writer still holds the old one gets a connection of its own.
type FileKey = (PathBuf, u64, u64);

fn file_key(path: &Path) -> FileKey {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if let Ok(meta) = std::fs::metadata(path) {
            return (path.to_owned(), meta.dev(), meta.ino());
        }
    }
    (path.to_owned(), 0, 0)
}

impl InlineWriter {
    /// An inline writer of `db`'s file; `None` for PostgreSQL, an in-memory
    /// SQLite database, or a file the writer cannot open as the pool does.
    /// The writers of one file share its connection.
    pub fn for_db(db: &Db, writer: &'static str, counted: Counts) -> Option<Self> {
        let file = sqlite_file(db).filter(|file| file.is_file())?;
        let gate = write_gate(db)?;
        match InlineFile::shared(&file, gate, db, counted.wal) {
            Ok(file) => Some(Self {
                file,
                writer,
                counted,
            }),
            Err(err) => {
                tracing::warn!(writer, error = %err, "no inline writer; its writes go through the pool");
                None
            }
        }
    }

    /// Runs `work` in this process's turn to write, in one transaction with
    /// whatever other writes of the file are queued: its writes committed
    /// when it returns `Ok`, rolled back otherwise; the outcome is counted.
    pub async fn transaction<T, E>(
        &self,
        work: impl FnOnce(&Connection) -> Result<T, InlineFailed<E>> + Send + 'static,
    ) -> Result<T, InlineFailed<E>>
    where
        T: Send + 'static,
        E: Send + 'static,
    {
        let done = self.file.write(work, self.counted.commit).await;
        let outcome = match &done {
            Ok(_) => "committed",
            Err(InlineFailed::Refused(_)) => "refused",
            Err(InlineFailed::Unavailable(err)) => {
                tracing::debug!(writer = self.writer, error = %err, "inline write failed; writing through the pool");
                "fell_back"
            }
        };
        (self.counted.outcome)(self.writer, outcome);
        done
    }
}

impl InlineFile {
    /// The file's inline connection, opened if no writer holds it yet.
    fn shared(
        path: &Path,
        gate: Gate,
        pool: &Db,
        wal: fn(i64, bool),
    ) -> rusqlite::Result<Arc<Self>> {
        let key = file_key(path);
        let mut files = lock(&FILES);
        if let Some(file) = files.get(&key).and_then(Weak::upgrade) {
            return Ok(file);
        }
        files.retain(|_, file| file.strong_count() > 0);
        let file = Arc::new(Self {
            gate,
            connection: Mutex::new(open(path)?),
            queued: Mutex::new(Vec::new()),
            numbers: AtomicU64::new(0),
            checkpoints: Checkpoints::new(pool, path, wal),
        });
        files.insert(key, Arc::downgrade(&file));
        Ok(file)
    }

    /// Queues `work`, then waits for its answer or the turn to write,
    /// whichever comes first; with the turn, runs every queued write.
    async fn write<T, E>(
        &self,
        work: impl FnOnce(&Connection) -> Result<T, InlineFailed<E>> + Send + 'static,
        commits: fn(usize, Duration),
    ) -> Result<T, InlineFailed<E>>
    where
        T: Send + 'static,
        E: Send + 'static,
    {
        let (answer, mut answered) = oneshot::channel();
        let number = self.numbers.fetch_add(1, Ordering::Relaxed);
        lock(&self.queued).push((number, job(work, answer)));
        let turn = tokio::select! {
            biased;
            done = &mut answered => return received(done),
            turn = take_turn(&self.gate) => turn,
        };
        match turn {
            Ok(_turn) => self.run_queued(commits),
            // Not run yet: withdrawn, so it never runs behind the caller's back.
            Err(err) if self.withdraw(number) => return Err(InlineFailed::Unavailable(err)),
            // Taken by the writer holding the turn: its answer is coming.
            Err(_) => {}
        }
        // A runner answers every write it took before it passes the turn on.
        received(answered.await)
    }

    /// Removes a write that has not been taken yet; `false` if it was.
    fn withdraw(&self, number: u64) -> bool {
        let mut queued = lock(&self.queued);
        let before = queued.len();
        queued.retain(|(queued, _)| *queued != number);
        queued.len() < before
    }

    /// Runs every queued write in one transaction (the caller holds the turn).
    fn run_queued(&self, commits: fn(usize, Duration)) {
        let jobs: Vec<Job> = std::mem::take(&mut *lock(&self.queued))
            .into_iter()
            .map(|(_, job)| job)
            .collect();
        if jobs.is_empty() {
            return;
        }
        // Held only with the turn, and never across an await: uncontended.
        let connection = lock(&self.connection);
        self.checkpoints.before_transaction(&connection);
        WAL_PAGES.set(-1);
        run_together(&connection, jobs, commits);
        self.checkpoints.after_commit(WAL_PAGES.get());
    }
}

/// A write made ready to queue: `work`, what it keeps and its answer.
fn job<T, E>(
    work: impl FnOnce(&Connection) -> Result<T, InlineFailed<E>> + Send + 'static,
    answer: oneshot::Sender<Result<T, InlineFailed<E>>>,
) -> Job
where
    T: Send + 'static,
    E: Send + 'static,
{
    Box::new(move |connection| {
        let connection = match connection {
            Ok(connection) => connection,
            Err(err) => {
                let _ = answer.send(Err(InlineFailed::Unavailable(err.clone())));
                return None;
            }
        };
        match work(connection) {
            Ok(done) => Some(Box::new(move |committed: Result<(), &DbErr>| {
                let answered = committed
                    .map(|()| done)
                    .map_err(|err| InlineFailed::Unavailable(err.clone()));
                let _ = answer.send(answered);
            }) as Settle),
            // The runner rolls the transaction back: nothing of it stays.
            Err(failed) => {
                let _ = answer.send(Err(failed));
                None
            }
        }
    })
}

/// A write's answer as received; a runner that vanished without answering
/// (it cannot, short of a panic) leaves the write uncommitted.
fn received<T, E>(
    done: Result<Result<T, InlineFailed<E>>, oneshot::error::RecvError>,
) -> Result<T, InlineFailed<E>> {
    done.unwrap_or_else(|_| {
        Err(InlineFailed::Unavailable(DbErr::Custom(
            "inline write: abandoned by its runner".into(),
        )))
    })
}

/// Runs `jobs` in as few transactions as their outcomes allow and answers
/// every write. The writes run one after another, outside any savepoint,
/// and commit together: a savepoint would copy every page its write
/// touches (SQLite's statement journal) so that the write could be undone
/// alone, a cost every write would pay for refusals that almost never come.
/// When a write does not keep its writes (it refused, or failed), the
/// transaction is rolled back: the writes kept before it in this
/// transaction are answered `Unavailable` and their callers write through
/// the pool, as they do when a commit fails; the writes after it run in a
/// new transaction. The number of writes committed is counted per commit,
/// with the time its `COMMIT` took.
fn run_together(connection: &Connection, jobs: Vec<Job>, commits: fn(usize, Duration)) {
    let mut jobs = jobs.into_iter().peekable();
    while jobs.peek().is_some() {
        if let Err(err) = begin(connection) {
            abandon(jobs.collect(), &err);
            return;
        }
        match run_while_kept(connection, &mut jobs) {
            Ran::All(kept) => commit(connection, kept, commits),
            Ran::Stopped(kept) => {
                let _ = connection.execute_batch("ROLLBACK");
                let why = DbErr::Custom(
                    "inline write: rolled back with a write of its transaction that refused or failed"
                        .into(),
                );
                settle_all(kept, Err(&why));
            }
            Ran::Lost => return,
        }
    }
}

/// What became of the writes run in one transaction.
enum Ran {
    /// Every write ran and kept its writes: to commit.
    All(Vec<Settle>),
    /// A write refused or failed (it is answered already); those kept
    /// before it are to be rolled back with it.
    Stopped(Vec<Settle>),
    /// The transaction was lost and every write answered.
    Lost,
}

/// Runs writes from `jobs` in the open transaction until one does not keep
/// its writes or none are left.
fn run_while_kept(connection: &Connection, jobs: &mut impl Iterator<Item = Job>) -> Ran {
    let mut kept: Vec<Settle> = Vec::new();
    while let Some(job) = jobs.next() {
        if connection.is_autocommit() {
            let why = DbErr::Custom("inline write: the transaction ended under a write".into());
            lose(
                connection,
                kept,
                std::iter::once(job).chain(jobs).collect(),
                &why,
            );
            return Ran::Lost;
        }
        match job(Ok(connection)) {
            Some(settle) => kept.push(settle),
            None => return Ran::Stopped(kept),
        }
    }
    Ran::All(kept)
}

/// Commits the open transaction and answers the writes it kept.
fn commit(connection: &Connection, kept: Vec<Settle>, commits: fn(usize, Duration)) {
    let began = Instant::now();
    let committed = connection.execute_batch("COMMIT").map_err(db_err);
    let took = began.elapsed();
    if committed.is_err() {
        let _ = connection.execute_batch("ROLLBACK");
    }
    let writes = kept.len();
    settle_all(kept, committed.as_ref().map(|_| ()));
    if committed.is_ok() && writes > 0 {
        commits(writes, took);
    }
}

/// `BEGIN IMMEDIATE`, after ending a transaction a failed rollback left open.
fn begin(connection: &Connection) -> Result<(), DbErr> {
    if !connection.is_autocommit() {
        connection.execute_batch("ROLLBACK").map_err(db_err)?;
    }
    connection.execute_batch("BEGIN IMMEDIATE").map_err(db_err)
}

/// The transaction is lost (SQLite ended it, or it cannot go on): nothing
/// of it commits, the writes that ran are answered with `why` and those
/// left are not run.
fn lose(connection: &Connection, kept: Vec<Settle>, left: Vec<Job>, why: &DbErr) {
    let _ = connection.execute_batch("ROLLBACK");
    settle_all(kept, Err(why));
    abandon(left, why);
}

fn settle_all(kept: Vec<Settle>, committed: Result<(), &DbErr>) {
    for settle in kept {
        settle(committed);
    }
}

fn abandon(jobs: Vec<Job>, why: &DbErr) {
    for job in jobs {
        let _ = job(Err(why));
    }
}

fn db_err(err: rusqlite::Error) -> DbErr {
    DbErr::Custom(format!("inline write: {err}"))
}

thread_local! {
    /// Pages in the WAL after the last commit on this thread's inline
    /// connection, as SQLite's WAL hook reports them.
    static WAL_PAGES: std::cell::Cell<i64> = const { std::cell::Cell::new(0) };
}

/// SQLite's WAL hook: called on the committing thread after each commit.
fn wal_pages(_: &rusqlite::hooks::Wal, pages: std::ffi::c_int) -> rusqlite::Result<()> {
    WAL_PAGES.set(i64::from(pages));
    Ok(())
}

fn open(file: &Path) -> rusqlite::Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let connection = Connection::open_with_flags(file, flags)?;
    // Never wait here: the lock held by another program is the pool's to wait for.
    connection.busy_timeout(Duration::ZERO)?;
    connection.pragma_update(None, "journal_mode", "wal")?;
    connection.pragma_update(None, "synchronous", "full")?;
    connection.pragma_update(None, "foreign_keys", true)?;
    connection.pragma_update(None, "temp_store", "memory")?;
    // A checkpoint run inside the commit that crosses the mark takes tens
    // of milliseconds: not on an async worker. The commit that leaves the
    // WAL past SQLITE_CHECKPOINT_PAGES pages asks the pool for one instead
    // (super::checkpoint); the hook reports the WAL's pages.
    connection.pragma_update(None, "wal_autocheckpoint", 0)?;
    connection.wal_hook(Some(wal_pages));
    Ok(connection)
}

/// A SQLite error as the reason to commit through the pool instead.
pub(crate) fn unavailable<E>(err: rusqlite::Error) -> InlineFailed<E> {
    InlineFailed::Unavailable(db_err(err))
}

/// Runs a statement built for SQLite (`?` placeholders); rows changed.
pub(crate) fn execute<E>(
    connection: &Connection,
    stmt: &Statement,
) -> Result<usize, InlineFailed<E>> {
    let cells = cells(stmt).map_err(InlineFailed::Unavailable)?;
    let mut prepared = connection.prepare_cached(&stmt.sql).map_err(unavailable)?;
    prepared
        .execute(rusqlite::params_from_iter(cells))
        .map_err(unavailable)
}

/// Runs a query built for SQLite and maps each row it returns.
pub(crate) fn query<T, E>(
    connection: &Connection,
    stmt: &Statement,
    map: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> Result<Vec<T>, InlineFailed<E>> {
    let cells = cells(stmt).map_err(InlineFailed::Unavailable)?;
    let mut prepared = connection.prepare_cached(&stmt.sql).map_err(unavailable)?;
    let rows = prepared
        .query_map(rusqlite::params_from_iter(cells), map)
        .map_err(unavailable)?;
    rows.collect::<rusqlite::Result<Vec<T>>>()
        .map_err(unavailable)
}

/// Inserts `models` with one cached single-row statement run once per row
/// ([`bulk::row_insert_sql`]); whether each row went in: always for a plain
/// insert, and `false` for a row whose `skip_taken` columns are taken
/// (skipped, not an error). Any other refusal is `Unavailable`, as for
/// every statement here: the write rolls back and goes through the pool.
pub(crate) fn insert_rows<M: EntityTrait, E>(
    connection: &Connection,
    models: &[impl Borrow<M::Model>],
    skip_taken: &[M::Column],
) -> Result<Vec<bool>, InlineFailed<E>> {
    let sql = || bulk::row_insert_sql::<M>(skip_taken);
    let changed = each_row::<M, E>(connection, sql, models)?;
    Ok(changed.into_iter().map(|rows| rows == 1).collect())
}

/// Upserts `models` with one cached single-row statement run once per row
/// ([`bulk::row_upsert_sql`], the same clause as
/// [`bulk::upsert_statement`]'s); the rows written, inserted or
/// overwritten (a row whose existing one fails `guard` is left alone).
pub(crate) fn upsert_rows<M: EntityTrait, E>(
    connection: &Connection,
    models: &[impl Borrow<M::Model>],
    key: &[M::Column],
    set: &[M::Column],
    guard: &str,
) -> Result<usize, InlineFailed<E>> {
    let sql = || bulk::row_upsert_sql::<M>(key, set, guard);
    Ok(each_row::<M, E>(connection, sql, models)?.into_iter().sum())
}

/// Runs the statement `sql` makes (only when there are rows), cached, once
/// per model with its values; the rows each run changed.
fn each_row<M: EntityTrait, E>(
    connection: &Connection,
    sql: impl FnOnce() -> String,
    models: &[impl Borrow<M::Model>],
) -> Result<Vec<usize>, InlineFailed<E>> {
    if models.is_empty() {
        return Ok(Vec::new());
    }
    let mut prepared = connection.prepare_cached(&sql()).map_err(unavailable)?;
    models
        .iter()
        .map(|model| {
            let cells = bulk::row_values::<M>(model.borrow())
                .map(cell)
                .collect::<Result<Vec<Cell>, DbErr>>()
                .map_err(InlineFailed::Unavailable)?;
            prepared
                .execute(rusqlite::params_from_iter(cells))
                .map_err(unavailable)
        })
        .collect()
}

/// A statement's values as SQLite cells, each in the form sqlx binds it.
fn cells(stmt: &Statement) -> Result<Vec<Cell>, DbErr> {
    let Some(values) = &stmt.values else {
        return Ok(Vec::new());
    };
    values.0.iter().cloned().map(cell).collect()
}

/// A value as the SQLite cell sqlx binds for it (a boolean as 0 or 1).
fn cell(value: Value) -> Result<Cell, DbErr> {
    Ok(match bulk::plain(value)? {
        Plain::Null => Cell::Null,
        Plain::Integer(n) => Cell::Integer(n),
        Plain::Bool(b) => Cell::Integer(i64::from(b)),
        Plain::Text(text) => Cell::Text(text),
    })
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use chrono::{DateTime, Utc};
    use entities::{esim, float, idempotency_key, order, order_unit, supplier_order};
    use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter};

    use super::*;
    use crate::domain::{
        partner::Mode,
        states::{OrderStatus, SupplierOrderStatus, UnitStatus},
    };
    use crate::store::fixtures::{funded_partner, order_status, profile, supplier_row};
    use crate::store::orders::{
        Delivery, NewOrder, PartnerBatch, Turned, accept_batches_inline, deliver_and_settle_inline,
    };

    fn batch_of(partner_id: &str, key: &str, total_cents: i64) -> PartnerBatch {
        let order = order::Model {
            quantity: 2,
            unit_price_cents: total_cents / 2,
            list_unit_cents: total_cents / 2,
            metadata: serde_json::json!({"ref": "r'1", "n": [1, null]}),
            ..crate::domain::order::fixtures::accepted(
                &format!("ord_{key}"),
                partner_id,
                key,
                total_cents,
            )
        };
        PartnerBatch {
            partner_id: partner_id.into(),
            orders: vec![NewOrder {
                order: Arc::new(order),
                fingerprint: "f".into(),
            }],
            refusals: Vec::new(),
        }
    }

    /// The inline shared commit of one batch, as a write that owns it.
    fn accept(
        batch: &PartnerBatch,
    ) -> impl FnOnce(
        &Connection,
    ) -> Result<Vec<crate::store::orders::Balances>, InlineFailed<Turned>>
    + Send
    + 'static {
        let batch = batch.clone();
        move |c| accept_batches_inline(c, &[&batch], Utc::now())
    }

    async fn sandbox_balance(db: &Db, partner_id: &str) -> i64 {
        let float = float::Entity::find_by_id((partner_id.to_owned(), Mode::Sandbox))
            .one(db)
            .await
            .unwrap()
            .unwrap();
        float.balance_cents
    }

    async fn orders_of(db: &Db, partner_id: &str) -> u64 {
        order::Entity::find()
            .filter(order::Column::PartnerId.eq(partner_id))
            .count(db)
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn an_inline_shared_commit_writes_what_the_pool_reads_back() {
        let (_dir, db, partner_id) = funded_partner("inline-commit.db").await;
        let writer = InlineWriter::for_db(&db, "test", Counts::NONE)
            .expect("a SQLite file has an inline writer");
        let batch = batch_of(&partner_id, "k1", 2_250);

        let balances = writer.transaction(accept(&batch)).await.unwrap();

        assert_eq!(balances, vec![(None, Some(7_750))]);
        assert_eq!(sandbox_balance(&db, &partner_id).await, 7_750);
        let read = order::Entity::find_by_id("ord_k1").one(&db).await.unwrap();
        assert_eq!(
            read.as_ref(),
            Some(&*batch.orders[0].order),
            "every column as written"
        );
        let units = order_unit::Entity::find()
            .filter(order_unit::Column::OrderId.eq("ord_k1"))
            .count(&db)
            .await
            .unwrap();
        assert_eq!(
            units, 0,
            "a unit's row waits for the supplier order that takes it"
        );
        let key = idempotency_key::Entity::find_by_id((partner_id.clone(), "k1".to_owned()))
            .one(&db)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(key.order_id.as_deref(), Some("ord_k1"));
    }

    /// Every cell of the row of `M`'s table whose `id_column` is `id`, as
    /// SQLite holds it: its storage class and its literal.
    async fn stored_cells<M: EntityTrait>(db: &Db, id_column: &str, id: &str) -> String {
        use sea_orm::{ConnectionTrait, DbBackend, IdenStatic, Iterable};
        let cells = M::Column::iter()
            .map(|c| format!("typeof(\"{0}\") || ':' || quote(\"{0}\")", c.as_str()))
            .collect::<Vec<_>>()
            .join(" || ' | ' || ");
        let table = M::default().table_name().to_owned();
        let sql = format!("SELECT {cells} AS cells FROM \"{table}\" WHERE \"{id_column}\" = ?");
        let row = db
            .query_one_raw(Statement::from_sql_and_values(
                DbBackend::Sqlite,
                sql,
                [id.into()],
            ))
            .await
            .unwrap()
            .expect("the row is there");
        row.try_get("", "cells").unwrap()
    }

    /// A key binding of a refusal, with a JSON body holding a fraction and
    /// a null.
    fn refusal_key(partner_id: &str, key: &str, at: DateTime<Utc>) -> idempotency_key::Model {
        idempotency_key::Model {
            partner_id: partner_id.into(),
            key: key.into(),
            mode: Mode::Live,
            fingerprint: "f".into(),
            order_id: None,
            error_status: Some(422),
            error_body: Some(serde_json::json!({"code": "plan_not_found", "n": [1.5, null]})),
            created_at: at,
        }
    }

    #[tokio::test]
    async fn rows_inserted_one_at_a_time_hold_the_cells_the_pool_s_insert_stores() {
        let (_dir, db, partner_id) = funded_partner("inline-rows.db").await;
        let writer = InlineWriter::for_db(&db, "test", Counts::NONE).unwrap();
        let through_pool =
            Arc::unwrap_or_clone(batch_of(&partner_id, "pool", 2_000).orders.remove(0).order);
        let mut inline = through_pool.clone();
        inline.id = "ord_inline".into();
        let now = Utc::now();
        let (pool_key, inline_key) = (
            refusal_key(&partner_id, "pool", now),
            refusal_key(&partner_id, "inline", now),
        );

        crate::store::bulk::insert_models::<order::Entity, _>(
            &db,
            std::slice::from_ref(&through_pool),
        )
        .await
        .unwrap();
        crate::store::bulk::insert_models::<idempotency_key::Entity, _>(&db, &[pool_key])
            .await
            .unwrap();
        let rows = (inline.clone(), inline_key.clone());
        let inserted = writer
            .transaction(move |c| {
                let orders = insert_rows::<order::Entity, Infallible>(c, &[rows.0], &[])?;
                let keys = insert_rows::<idempotency_key::Entity, Infallible>(c, &[rows.1], &[])?;
                Ok([orders, keys].concat())
            })
            .await
            .unwrap();

        assert_eq!(inserted, [true, true]);
        assert_eq!(
            stored_cells::<order::Entity>(&db, "id", "ord_inline").await,
            stored_cells::<order::Entity>(&db, "id", "ord_pool")
                .await
                .replace("'ord_pool'", "'ord_inline'"),
            "the same storage class and literal in every column"
        );
        assert_eq!(
            stored_cells::<idempotency_key::Entity>(&db, "key", "inline").await,
            stored_cells::<idempotency_key::Entity>(&db, "key", "pool")
                .await
                .replace("'pool'", "'inline'"),
        );
    }

    #[tokio::test]
    async fn a_row_whose_unique_columns_are_taken_is_skipped_and_said_so() {
        let (_dir, db, partner_id) = funded_partner("inline-skip.db").await;
        let writer = InlineWriter::for_db(&db, "test", Counts::NONE).unwrap();
        let key = |key: &str| refusal_key(&partner_id, key, Utc::now());
        let rows = vec![key("a"), key("b"), key("a")];
        let unique = [
            idempotency_key::Column::PartnerId,
            idempotency_key::Column::Key,
        ];

        let inserted = writer
            .transaction(move |c| {
                insert_rows::<idempotency_key::Entity, Infallible>(c, &rows, &unique)
            })
            .await
            .unwrap();

        assert_eq!(inserted, [true, true, false], "the second \"a\" is skipped");
        let stored = idempotency_key::Entity::find()
            .filter(idempotency_key::Column::PartnerId.eq(&partner_id))
            .count(&db)
            .await
            .unwrap();
        assert_eq!(stored, 2);
    }

    #[tokio::test]
    async fn a_row_refused_midway_leaves_none_of_its_write_behind() {
        let (_dir, db, partner_id) = funded_partner("inline-midway.db").await;
        let writer = InlineWriter::for_db(&db, "test", Counts::NONE).unwrap();
        let first =
            Arc::unwrap_or_clone(batch_of(&partner_id, "first", 2_000).orders.remove(0).order);
        let mut same_id = first.clone();
        same_id.idempotency_key = "second".into();
        let rows = vec![first, same_id];

        let done = writer
            .transaction(move |c| insert_rows::<order::Entity, Infallible>(c, &rows, &[]))
            .await;

        assert!(
            matches!(done, Err(InlineFailed::Unavailable(_))),
            "the second row's id is taken: {done:?}"
        );
        assert_eq!(
            orders_of(&db, &partner_id).await,
            0,
            "the first row is rolled back with the second"
        );
    }

    #[tokio::test]
    async fn a_fired_debit_guard_writes_nothing_inline() {
        let (_dir, db, partner_id) = funded_partner("inline-fired.db").await;
        let writer = InlineWriter::for_db(&db, "test", Counts::NONE).unwrap();
        let batch = batch_of(&partner_id, "k2", 20_000);

        let done = writer.transaction(accept(&batch)).await;

        match done {
            Err(InlineFailed::Refused(Turned::Fired(fired))) => {
                assert_eq!(fired.into_iter().collect::<Vec<_>>(), [0])
            }
            other => panic!("the guard fires for the batch, got {other:?}"),
        }
        assert_eq!(sandbox_balance(&db, &partner_id).await, 10_000);
        assert_eq!(orders_of(&db, &partner_id).await, 0);
    }

    /// With many partners each float is debited by its own batch's total,
    /// one statement a float; a batch whose guard fires is named alone and
    /// nothing of the commit is written, and the others commit without it.
    #[tokio::test]
    async fn an_inline_debit_of_many_partners_moves_each_float_by_its_own_batch() {
        let (_dir, db, first) = funded_partner("inline-many.db").await;
        let second = crate::store::partners::gold_partner(&db, "second", 10_000).await;
        let third = crate::store::partners::gold_partner(&db, "third", 10_000).await;
        let writer = InlineWriter::for_db(&db, "test", Counts::NONE).unwrap();
        let (a, b, c) = (
            batch_of(&first, "m1", 2_000),
            batch_of(&second, "m2", 20_000),
            batch_of(&third, "m3", 3_000),
        );

        let refused = writer
            .transaction({
                let batches = [a.clone(), b.clone(), c.clone()];
                move |conn| {
                    accept_batches_inline(conn, &batches.iter().collect::<Vec<_>>(), Utc::now())
                }
            })
            .await;
        let fired = match refused {
            Err(InlineFailed::Refused(Turned::Fired(fired))) => {
                fired.into_iter().collect::<Vec<_>>()
            }
            other => panic!("the second batch's guard fires, got {other:?}"),
        };
        let untouched = [
            sandbox_balance(&db, &first).await,
            sandbox_balance(&db, &second).await,
            sandbox_balance(&db, &third).await,
        ];
        let balances = writer
            .transaction(move |conn| accept_batches_inline(conn, &[&a, &c], Utc::now()))
            .await
            .unwrap();

        assert_eq!(fired, [1]);
        assert_eq!(untouched, [10_000; 3]);
        assert_eq!(balances, vec![(None, Some(8_000)), (None, Some(7_000))]);
        assert_eq!(
            [
                sandbox_balance(&db, &first).await,
                sandbox_balance(&db, &second).await,
                sandbox_balance(&db, &third).await,
            ],
            [8_000, 10_000, 7_000]
        );
        assert_eq!(orders_of(&db, &second).await, 0);
    }

    /// A key bound already is skipped by the bindings' insert, and its batch
    /// turned back before anything of it is written.
    #[tokio::test]
    async fn a_key_bound_already_turns_its_batch_back_inline() {
        let (_dir, db, partner_id) = funded_partner("inline-taken.db").await;
        let writer = InlineWriter::for_db(&db, "test", Counts::NONE).unwrap();
        writer
            .transaction(accept(&batch_of(&partner_id, "k5", 1_000)))
            .await
            .unwrap();
        let mut again = batch_of(&partner_id, "k5", 1_000);
        Arc::make_mut(&mut again.orders[0].order).id = "ord_k5_again".into();

        let done = writer.transaction(accept(&again)).await;

        match done {
            Err(InlineFailed::Refused(Turned::Taken(taken))) => {
                assert_eq!(taken.into_iter().collect::<Vec<_>>(), [0])
            }
            other => panic!("the key is taken, got {other:?}"),
        }
        assert_eq!(sandbox_balance(&db, &partner_id).await, 9_000);
        assert_eq!(orders_of(&db, &partner_id).await, 1);
    }

    /// Another program holding SQLite's write lock: the inline commit gives
    /// up at once (nothing written, the gate passed on) rather than waiting
    /// with the gate held; once the lock frees, it commits.
    #[tokio::test]
    async fn a_lock_held_elsewhere_sends_the_commit_back_to_the_pool() {
        let (dir, db, partner_id) = funded_partner("inline-locked.db").await;
        let writer = InlineWriter::for_db(&db, "test", Counts::NONE).unwrap();
        let other = Connection::open(dir.path().join("inline-locked.db")).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let batch = batch_of(&partner_id, "k3", 1_000);

        let done = writer.transaction(accept(&batch)).await;

        assert!(
            matches!(done, Err(InlineFailed::Unavailable(_))),
            "{done:?}"
        );
        other.execute_batch("ROLLBACK").unwrap();
        assert_eq!(orders_of(&db, &partner_id).await, 0);
        let balances = writer.transaction(accept(&batch)).await.unwrap();
        assert_eq!(balances, vec![(None, Some(9_000))]);
        assert_eq!(orders_of(&db, &partner_id).await, 1);
    }

    async fn accepted(db: &Db, partner_id: &str, key: &str) -> order::Model {
        let writer = InlineWriter::for_db(db, "test", Counts::NONE).unwrap();
        let mut batch = batch_of(partner_id, key, 1_000);
        writer.transaction(accept(&batch)).await.unwrap();
        Arc::unwrap_or_clone(batch.orders.remove(0).order)
    }

    /// A supplier order `id` takes every unit of `orders` (writes their
    /// rows), inline.
    async fn carried_inline(writer: &InlineWriter, id: &str, orders: &[&order::Model]) {
        let units: Vec<String> = orders
            .iter()
            .flat_map(|o| (1..=o.quantity).map(|n| crate::store::orders::unit_id(&o.id, n)))
            .collect();
        let row = supplier_row(id, units.len() as i32);
        writer
            .transaction(move |c| crate::store::supplier_orders::open_inline(c, &row, &units))
            .await
            .unwrap();
    }

    /// Stores `profiles` (of orders of `quantity` units) in one inline
    /// delivery: per profile whether it was stored, and the orders settled.
    async fn deliver_inline(
        writer: &InlineWriter,
        profiles: Vec<esim::Model>,
        quantity: i32,
    ) -> crate::store::orders::DeliveredAndSettled {
        let deliveries: Vec<Delivery> = profiles
            .into_iter()
            .map(|profile| Delivery { profile, quantity })
            .collect();
        writer
            .transaction(move |c| {
                deliver_and_settle_inline::<Infallible>(c, &deliveries, Utc::now())
            })
            .await
            .unwrap()
    }

    /// A profile stores once, an order settles once its last unit is
    /// delivered, and what the pool reads back is what was written.
    #[tokio::test]
    async fn deliveries_stored_inline_settle_their_order_once() {
        let (_dir, db, partner_id) = funded_partner("inline-deliver.db").await;
        let order = accepted(&db, &partner_id, "d1").await;
        let writer = InlineWriter::for_db(&db, "test", Counts::NONE).unwrap();
        // A supplier order takes both units (writes their rows) first.
        carried_inline(&writer, "C1", &[&order]).await;
        let deliver = |profiles| deliver_inline(&writer, profiles, order.quantity);

        let (stored, settled) = deliver(vec![profile(&order, 1)]).await;
        assert_eq!(
            (stored, settled),
            (vec![true], vec![]),
            "one unit still pending"
        );
        let (stored, settled) = deliver(vec![profile(&order, 1), profile(&order, 2)]).await;
        assert_eq!(
            stored,
            [false, true],
            "the first unit was delivered already"
        );
        assert_eq!(settled.len(), 1);
        assert_eq!(settled[0].0, order.id);
        assert_eq!(settled[0].1.status, OrderStatus::Completed);
        assert_eq!(settled[0].1.mode, Mode::Sandbox);
        assert_eq!(settled[0].1.failure_code, None);
        assert_eq!(settled[0].1.created_at, order.created_at);

        let read = order::Entity::find_by_id(order.id.clone())
            .one(&db)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(read.status, OrderStatus::Completed);
        assert!(read.completed_at.is_some());
        let second = profile(&order, 2);
        let stored = esim::Entity::find_by_id(second.iccid.clone())
            .one(&db)
            .await
            .unwrap();
        assert_eq!(
            stored.map(|e| (e.unit_id, e.activation_code, e.esim_tran_no)),
            Some((second.unit_id, second.activation_code, second.esim_tran_no))
        );
        let (stored, settled) = deliver(vec![profile(&order, 2)]).await;
        assert_eq!((stored, settled), (vec![false], vec![]), "settled once");
    }

    /// An order whose every unit one delivery settles completes in it (no
    /// count of its units needed); an order that delivery leaves a unit
    /// pending of stays processing, and completes with its last unit.
    #[tokio::test]
    async fn a_delivery_completes_the_orders_it_delivers_whole_and_only_those() {
        let (_dir, db, partner_id) = funded_partner("inline-whole.db").await;
        let whole = accepted(&db, &partner_id, "w1").await;
        let split = accepted(&db, &partner_id, "w2").await;
        assert_eq!((whole.quantity, split.quantity), (2, 2));
        let writer = InlineWriter::for_db(&db, "test", Counts::NONE).unwrap();
        carried_inline(&writer, "W1", &[&whole, &split]).await;
        // Per profile whether it was stored, and the orders settled with
        // their final status.
        let deliver = |profiles| {
            let delivered = deliver_inline(&writer, profiles, 2);
            async move {
                let (stored, settled) = delivered.await;
                let settled: Vec<_> = settled.into_iter().map(|(id, s)| (id, s.status)).collect();
                (stored, settled)
            }
        };

        let (stored, settled) = deliver(vec![
            profile(&whole, 2),
            profile(&split, 1),
            profile(&whole, 1),
        ])
        .await;
        assert_eq!(stored, [true, true, true]);
        assert_eq!(settled, [(whole.id.clone(), OrderStatus::Completed)]);
        assert_eq!(order_status(&db, &whole.id).await, OrderStatus::Completed);
        assert_eq!(order_status(&db, &split.id).await, OrderStatus::Processing);

        let (stored, settled) = deliver(vec![profile(&split, 2)]).await;
        assert_eq!(stored, [true]);
        assert_eq!(settled, [(split.id.clone(), OrderStatus::Completed)]);
        assert_eq!(order_status(&db, &split.id).await, OrderStatus::Completed);
    }

    /// A supplier order is written down with its units only if none of them
    /// is carried already; otherwise nothing of it is written.
    #[tokio::test]
    async fn a_supplier_order_written_inline_takes_only_free_units() {
        let (_dir, db, partner_id) = funded_partner("inline-open.db").await;
        let order = accepted(&db, &partner_id, "s1").await;
        let writer = InlineWriter::for_db(&db, "test", Counts::NONE).unwrap();
        let units: Vec<String> = (1..=2)
            .map(|n| crate::store::orders::unit_id(&order.id, n))
            .collect();
        let first = supplier_row("B1", 2);
        writer
            .transaction({
                let (first, units) = (first.clone(), units.clone());
                move |c| crate::store::supplier_orders::open_inline(c, &first, &units)
            })
            .await
            .unwrap();
        let again = supplier_row("B2", 1);
        let refused = writer
            .transaction({
                let units = units[1..].to_vec();
                move |c| crate::store::supplier_orders::open_inline(c, &again, &units)
            })
            .await;

        assert!(
            matches!(refused, Err(InlineFailed::Refused(()))),
            "{refused:?}"
        );
        let read = supplier_order::Entity::find_by_id("B1")
            .one(&db)
            .await
            .unwrap();
        assert_eq!(read, Some(first));
        assert_eq!(
            supplier_order::Entity::find_by_id("B2")
                .one(&db)
                .await
                .unwrap(),
            None
        );
        let carried = order_unit::Entity::find()
            .filter(order_unit::Column::SupplierTxnId.eq("B1"))
            .count(&db)
            .await
            .unwrap();
        assert_eq!(carried, 2);
    }

    /// A unit whose row exists already (an earlier pass counted a failed
    /// attempt on it) is taken where it is pending and carried by none: the
    /// supplier order and the time are written over it, its attempts kept;
    /// a unit delivered already is not taken.
    #[tokio::test]
    async fn a_supplier_order_written_inline_takes_a_free_unit_s_existing_row() {
        use sea_orm::ActiveModelTrait;
        let (_dir, db, partner_id) = funded_partner("inline-open-existing.db").await;
        let order = accepted(&db, &partner_id, "e1").await;
        let writer = InlineWriter::for_db(&db, "test", Counts::NONE).unwrap();
        let earlier: DateTime<Utc> = "2026-01-02T03:04:05Z".parse().unwrap();
        for (n, status) in [(1, UnitStatus::Pending), (2, UnitStatus::Delivered)] {
            let mut row = crate::store::orders::unit_row(&order.id, n, status, None, earlier);
            row.attempts = 1;
            row.last_error = Some("timed out".into());
            order_unit::ActiveModel::from(row)
                .insert(&db)
                .await
                .unwrap();
        }
        let unit = |n| crate::store::orders::unit_id(&order.id, n);
        let first = supplier_row("E1", 1);
        let taken_at = first.created_at;
        writer
            .transaction({
                let units = vec![unit(1)];
                move |c| crate::store::supplier_orders::open_inline(c, &first, &units)
            })
            .await
            .unwrap();
        let refused = writer
            .transaction({
                let units = vec![unit(2)];
                let second = supplier_row("E2", 1);
                move |c| crate::store::supplier_orders::open_inline(c, &second, &units)
            })
            .await;

        let taken = order_unit::Entity::find_by_id(unit(1))
            .one(&db)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (
                taken.supplier_txn_id.as_deref(),
                taken.status,
                taken.attempts,
                taken.last_error.as_deref(),
                taken.updated_at
            ),
            (
                Some("E1"),
                UnitStatus::Pending,
                1,
                Some("timed out"),
                taken_at
            )
        );
        assert!(
            matches!(refused, Err(InlineFailed::Refused(()))),
            "{refused:?}"
        );
        let delivered = order_unit::Entity::find_by_id(unit(2))
            .one(&db)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(delivered.supplier_txn_id, None);
    }

    /// A supplier order's bookkeeping (the call counted, its number, its
    /// final status) written inline reads back as the pool writes it.
    #[tokio::test]
    async fn a_supplier_order_s_bookkeeping_written_inline_reads_back() {
        use crate::store::supplier_orders::{count_sent, finish, get, placed};
        let (_dir, db, partner_id) = funded_partner("inline-bookkeeping.db").await;
        let order = accepted(&db, &partner_id, "b1").await;
        let writer = InlineWriter::for_db(&db, "test", Counts::NONE).unwrap();
        let units = vec![crate::store::orders::unit_id(&order.id, 1)];
        let row = supplier_row("K1", 1);
        writer
            .transaction(move |c| crate::store::supplier_orders::open_inline(c, &row, &units))
            .await
            .unwrap();
        let inline = Some(&writer);
        let pool = &crate::store::WriterDb::new(&db, 1);

        assert_eq!(
            count_sent(pool, inline, "K1", 1, Utc::now()).await.unwrap(),
            1
        );
        assert_eq!(
            count_sent(pool, inline, "K1", 1, Utc::now()).await.unwrap(),
            2
        );
        assert_eq!(
            count_sent(pool, inline, "K1", -1, Utc::now())
                .await
                .unwrap(),
            1
        );
        assert_eq!(
            count_sent(pool, inline, "none", 1, Utc::now())
                .await
                .unwrap(),
            0
        );
        placed(pool, inline, "K1", "SO-1", Some(250), Utc::now())
            .await
            .unwrap();
        let allocated = SupplierOrderStatus::Allocated;
        finish(pool, inline, "K1", allocated, None, Utc::now())
            .await
            .unwrap();

        let read = get(&db, "K1").await.unwrap().unwrap();
        assert_eq!(
            (
                read.calls_sent,
                read.order_no.as_deref(),
                read.unit_cost_cents,
                read.status
            ),
            (1, Some("SO-1"), Some(250), allocated)
        );
        assert_eq!(
            count_sent(pool, None, "K1", 1, Utc::now()).await.unwrap(),
            2,
            "the pool counts on from what was written inline"
        );
    }

    /// A file restored over the path while a writer still holds the old one
    /// gets a connection of its own, never the old file's.
    #[tokio::test]
    async fn a_file_replaced_under_its_path_gets_its_own_connection() {
        let (dir, db, _) = funded_partner("inline-replaced.db").await;
        let before = InlineWriter::for_db(&db, "test", Counts::NONE).unwrap();
        let again = InlineWriter::for_db(&db, "test", Counts::NONE).unwrap();
        assert!(
            Arc::ptr_eq(&before.file, &again.file),
            "one file, one connection"
        );

        let path = dir.path().join("inline-replaced.db");
        let copy = dir.path().join("restored.db");
        std::fs::copy(&path, &copy).unwrap();
        std::fs::rename(&copy, &path).unwrap();
        let after = InlineWriter::for_db(&db, "test", Counts::NONE).unwrap();

        assert!(!Arc::ptr_eq(&before.file, &after.file));
    }

    /// A commit that leaves the WAL past the mark has the pool copy it back
    /// into the database file (this connection never checkpoints itself).
    #[tokio::test]
    async fn a_commit_past_the_wal_mark_has_the_pool_checkpoint() {
        let (dir, db, partner_id) = funded_partner("inline-checkpoint.db").await;
        let writer = InlineWriter::for_db(&db, "test", Counts::NONE).unwrap();
        // Only this test's file: the mark at one page.
        writer.file.checkpoints.mark.store(1, Ordering::Relaxed);
        let in_file_alone = || {
            let copy = dir.path().join("main-only.db");
            std::fs::copy(dir.path().join("inline-checkpoint.db"), &copy).unwrap();
            // Before any checkpoint the file alone may not even hold the tables.
            Connection::open(&copy)
                .unwrap()
                .query_row("SELECT count(*) FROM orders WHERE id = 'ord_w1'", [], |r| {
                    r.get::<_, i64>(0)
                })
                .is_ok_and(|found| found == 1)
        };

        writer
            .transaction(accept(&batch_of(&partner_id, "w1", 1_000)))
            .await
            .unwrap();

        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !in_file_alone() {
            assert!(
                std::time::Instant::now() < deadline,
                "checkpointed into the file"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Under commits that never pause, the WAL still starts over: the pool
    /// copies it back beside the writers and the writer with the turn copies
    /// the rest, so the WAL file stays near the mark however long writes
    /// keep coming (a checkpoint that only runs beside commits never catches
    /// up with them, and the WAL grows with every commit).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn under_commits_that_never_pause_the_wal_starts_over() {
        static RESTARTS: AtomicU64 = AtomicU64::new(0);
        let (dir, db, partner_id) = funded_partner("inline-restart.db").await;
        let counted = Counts {
            wal: |_, started_over| {
                if started_over {
                    RESTARTS.fetch_add(1, Ordering::Relaxed);
                }
            },
            ..Counts::NONE
        };
        let writer = Arc::new(InlineWriter::for_db(&db, "test", counted).unwrap());
        let mark = 64;
        writer.file.checkpoints.mark.store(mark, Ordering::Relaxed);
        let committers: Vec<_> = (0..4)
            .map(|task| {
                let (writer, partner_id) = (writer.clone(), partner_id.clone());
                tokio::spawn(async move {
                    for n in 0..600 {
                        let batch = batch_of(&partner_id, &format!("r{task}-{n}"), 2);
                        writer.transaction(accept(&batch)).await.unwrap();
                    }
                })
            })
            .collect();
        for committer in committers {
            committer.await.unwrap();
        }

        assert_eq!(orders_of(&db, &partner_id).await, 2_400);
        // A WAL that starts over is written again from its start: its file
        // keeps the largest size it reached. One that never does holds
        // every commit's pages (8,171 after half as many commits).
        let wal = std::fs::metadata(dir.path().join("inline-restart.db-wal"))
            .unwrap()
            .len();
        let page = 4_096 + 24;
        assert!(
            wal < 64 * mark as u64 * page,
            "the WAL reached {} pages against a mark of {mark}",
            wal / page
        );
        assert!(RESTARTS.load(Ordering::Relaxed) > 0, "restarts are told");
    }

    static COUNTED: std::sync::Mutex<Vec<(&str, &str)>> = std::sync::Mutex::new(Vec::new());

    fn remember(writer: &'static str, outcome: &'static str) {
        COUNTED.lock().unwrap().push((writer, outcome));
    }

    /// Every transaction's outcome reaches the writer's counter, under its name.
    #[tokio::test]
    async fn each_outcome_is_counted_under_the_writer_s_name() {
        let (dir, db, partner_id) = funded_partner("inline-counted.db").await;
        let writer = InlineWriter::for_db(
            &db,
            "counted",
            Counts {
                outcome: remember,
                ..Counts::NONE
            },
        )
        .unwrap();
        let commit = |key: &str, cents: i64| {
            let batch = batch_of(&partner_id, key, cents);
            let writer = &writer;
            async move {
                let _ = writer.transaction(accept(&batch)).await;
            }
        };

        commit("c1", 1_000).await;
        commit("c2", 1_000_000).await;
        let other = Connection::open(dir.path().join("inline-counted.db")).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        commit("c3", 1_000).await;
        other.execute_batch("ROLLBACK").unwrap();

        let counted: Vec<&str> = COUNTED
            .lock()
            .unwrap()
            .iter()
            .filter(|(writer, _)| *writer == "counted")
            .map(|(_, outcome)| *outcome)
            .collect();
        assert_eq!(counted, ["committed", "refused", "fell_back"]);
    }

    /// The answers to `writes` (writer, key, cents), queued while the turn
    /// is held elsewhere and then run by one writer, in order.
    async fn run_queued_together(
        db: &Db,
        partner_id: &str,
        counts: Counts,
        writes: [(&'static str, &str, i64); 3],
    ) -> Vec<Result<Vec<crate::store::orders::Balances>, InlineFailed<Turned>>> {
        let orders = Arc::new(InlineWriter::for_db(db, "orders", counts).unwrap());
        let deliveries = Arc::new(InlineWriter::for_db(db, "deliveries", counts).unwrap());
        assert!(
            Arc::ptr_eq(&orders.file, &deliveries.file),
            "the writers of one file share its connection"
        );
        let gate = write_gate(db).unwrap();
        let held = take_turn(&gate).await.unwrap();
        let mut running = Vec::new();
        for (name, key, cents) in writes {
            let writer = if name == "orders" {
                &orders
            } else {
                &deliveries
            }
            .clone();
            let batch = batch_of(partner_id, key, cents);
            running.push(tokio::spawn(async move {
                writer.transaction(accept(&batch)).await
            }));
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while lock(&orders.file.queued).len() < writes.len() {
            assert!(std::time::Instant::now() < deadline, "every write queued");
            tokio::task::yield_now().await;
        }
        drop(held);
        let mut answers = Vec::new();
        for write in running {
            answers.push(write.await.unwrap());
        }
        answers
    }

    static COMMITTED_TOGETHER: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());

    /// Writes queued while another writer holds the turn run in one
    /// transaction with one commit, each seeing the ones before it.
    #[tokio::test]
    async fn writes_queued_together_share_one_commit() {
        let (_dir, db, partner_id) = funded_partner("inline-together.db").await;
        let counts = Counts {
            commit: |writes, _| COMMITTED_TOGETHER.lock().unwrap().push(writes),
            ..Counts::NONE
        };
        let writes = [
            ("orders", "t1", 1_000),
            ("deliveries", "t2", 500),
            ("orders", "t3", 2_000),
        ];
        let answers = run_queued_together(&db, &partner_id, counts, writes).await;

        assert_eq!(answers[0].as_ref().unwrap(), &vec![(None, Some(9_000))]);
        assert_eq!(answers[1].as_ref().unwrap(), &vec![(None, Some(8_500))]);
        assert_eq!(answers[2].as_ref().unwrap(), &vec![(None, Some(6_500))]);
        assert_eq!(
            *COMMITTED_TOGETHER.lock().unwrap(),
            [3],
            "one commit of three writes"
        );
        assert_eq!(sandbox_balance(&db, &partner_id).await, 6_500);
        assert_eq!(orders_of(&db, &partner_id).await, 3);
    }

    static COMMITTED_AFTER_REFUSAL: std::sync::Mutex<Vec<usize>> =
        std::sync::Mutex::new(Vec::new());

    /// A write that refuses inside a shared transaction takes it back whole:
    /// the write before it is answered `Unavailable` (its caller writes
    /// through the pool), nothing of either stays, and the write after it
    /// commits in a transaction of its own.
    #[tokio::test]
    async fn a_refused_write_rolls_back_the_writes_before_it_and_not_those_after() {
        let (_dir, db, partner_id) = funded_partner("inline-refused-together.db").await;
        let counts = Counts {
            commit: |writes, _| COMMITTED_AFTER_REFUSAL.lock().unwrap().push(writes),
            ..Counts::NONE
        };
        let writes = [
            ("orders", "t1", 1_000),
            ("deliveries", "t2", 50_000),
            ("orders", "t3", 2_000),
        ];
        let answers = run_queued_together(&db, &partner_id, counts, writes).await;

        assert!(
            matches!(answers[0], Err(InlineFailed::Unavailable(_))),
            "rolled back with the refusal: {:?}",
            answers[0]
        );
        assert!(
            matches!(answers[1], Err(InlineFailed::Refused(_))),
            "the float cannot pay it: {:?}",
            answers[1]
        );
        assert_eq!(answers[2].as_ref().unwrap(), &vec![(None, Some(8_000))]);
        assert_eq!(
            *COMMITTED_AFTER_REFUSAL.lock().unwrap(),
            [1],
            "one commit, of the write after"
        );
        assert_eq!(sandbox_balance(&db, &partner_id).await, 8_000);
        assert_eq!(orders_of(&db, &partner_id).await, 1);
    }
}
