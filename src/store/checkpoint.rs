//! Copying a SQLite file's WAL back into the file while the order path's
//! writers keep committing, so that the WAL starts over.
//!
//! SQLite writes the WAL from its start again only when a writer begins
//! after a checkpoint copied every page the WAL holds. A checkpoint that
//! runs beside the writers never gets there: by the time it ends, they have
//! committed more. Under steady writes the WAL then grows for as long as
//! they keep coming (hundreds of megabytes in a ten-second drive), each
//! checkpoint copies only the few commits since the one before, and the
//! file is never synced by one (SQLite syncs it only after a copy that
//! reaches the WAL's end).
//!
//! So a commit that leaves the WAL a mark's worth of pages past the last
//! checkpoint asks for one, in two parts. The pool copies the WAL back beside
//! the writers, pass after pass (each copies what came during the one
//! before, so they shrink), syncing the file after each. Then the next
//! writer with the process's turn copies what is left before its own
//! transaction, with no commit in between: the WAL is whole in the file, and
//! that writer starts it over (unless a reader still reads an older snapshot
//! of it; the next mark's worth of pages asks again). The turn is held for
//! the last few commits' pages only.

use std::{
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicI64, Ordering},
    },
};

use rusqlite::Connection;
use sea_orm::{ConnectionTrait, DbErr, Statement};

use super::Db;
use crate::sync::lock;

/// WAL pages a pass beside the writers may find committed during the pass
/// before it and still leave the rest to the writer with the turn.
const TAIL_PAGES: i64 = 256;

/// Passes beside the writers at most, per checkpoint.
const PASSES: usize = 4;

/// A SQLite file's checkpoints, asked by its inline writers' commits.
pub(super) struct Checkpoints {
    /// The pool, whose connections copy the WAL beside the writers.
    pool: Db,
    /// The database file, synced after each pass.
    path: PathBuf,
    /// WAL pages past which a commit asks for a checkpoint.
    pub(super) mark: AtomicI64,
    /// The pool's passes are running.
    running: Arc<AtomicBool>,
    /// The pool's passes are done: the next writer with the turn copies the
    /// rest.
    tail_due: Arc<AtomicBool>,
    /// Where the WAL stood (read and written only with the turn held).
    wal: Mutex<WalMarks>,
    /// Told the WAL's pages after each commit, and whether it started over.
    report: fn(i64, bool),
}

/// Where the WAL stood, to space checkpoints out when it did not start over.
#[derive(Default)]
struct WalMarks {
    /// Pages in the WAL after the last commit.
    pages: i64,
    /// Pages in the WAL when the last checkpoint was asked (0 once the WAL
    /// started over).
    asked_at: i64,
}

impl Checkpoints {
    /// The checkpoints of `path`, copied through `pool`'s connections;
    /// `report` is told where the WAL stands after each commit.
    pub(super) fn new(pool: &Db, path: &Path, report: fn(i64, bool)) -> Self {
        Self {
            pool: pool.clone(),
            path: path.to_owned(),
            mark: AtomicI64::new(i64::from(super::SQLITE_CHECKPOINT_PAGES)),
            running: Arc::default(),
            tail_due: Arc::default(),
            wal: Mutex::default(),
            report,
        }
    }

    /// With the turn held, before the turn's transaction: copies what the
    /// pool's passes left, so that this transaction starts the WAL over.
    pub(super) fn before_transaction(&self, connection: &Connection) {
        if self.tail_due.swap(false, Ordering::AcqRel) {
            copy_the_rest(connection);
        }
    }

    /// With the turn held, after a transaction that left `pages` in the WAL
    /// (negative: it committed nothing): asks the pool for a checkpoint if
    /// one is due.
    pub(super) fn after_commit(&self, pages: i64) {
        if self.due(pages) {
            self.start();
        }
    }

    /// Records where the WAL stands after a commit (and tells `report`),
    /// then whether a checkpoint is due: past the mark, none running, and,
    /// when the WAL did not start over after the last one, a mark's worth of
    /// pages since that one was asked, so that checkpoints never run back to
    /// back copying a few commits each.
    fn due(&self, pages: i64) -> bool {
        if pages < 0 {
            return false;
        }
        let mark = self.mark.load(Ordering::Relaxed);
        let mut wal = lock(&self.wal);
        let started_over = pages < wal.pages;
        if started_over {
            wal.asked_at = 0;
        }
        wal.pages = pages;
        (self.report)(pages, started_over);
        let due =
            pages >= mark && pages - wal.asked_at >= mark && !self.running.load(Ordering::Acquire);
        if due {
            wal.asked_at = pages;
        }
        due
    }

    /// Runs the pool's passes on a task of their own (sqlx's thread does
    /// the copying, never the async worker that committed).
    fn start(&self) {
        if self.running.swap(true, Ordering::AcqRel) {
            return;
        }
        let (pool, path) = (self.pool.clone(), self.path.clone());
        let (running, tail_due) = (self.running.clone(), self.tail_due.clone());
        tokio::spawn(async move {
            match copy_beside_writers(&pool, path).await {
                Ok(()) => tail_due.store(true, Ordering::Release),
                Err(err) => {
                    tracing::warn!(error = %err, "WAL checkpoint failed; asked again a mark's worth of pages later");
                }
            }
            running.store(false, Ordering::Release);
        });
    }
}

/// The pool's passes: each copies the WAL into the file as far as readers
/// allow and the file is synced; they stop once a pass found at most
/// [`TAIL_PAGES`] pages committed since the one before, or after
/// [`PASSES`].
async fn copy_beside_writers(pool: &Db, path: PathBuf) -> Result<(), DbErr> {
    let checkpoint = Statement::from_string(
        pool.get_database_backend(),
        "PRAGMA wal_checkpoint(PASSIVE)",
    );
    let mut before: Option<i64> = None;
    for _ in 0..PASSES {
        let Some(row) = pool.query_one_raw(checkpoint.clone()).await? else {
            return Ok(());
        };
        // (busy, pages in the WAL, pages copied into the file)
        let wal: i64 = row.try_get_by_index(1)?;
        sync_file(path.clone()).await?;
        if before.is_some_and(|before| wal - before <= TAIL_PAGES) {
            break;
        }
        before = Some(wal);
    }
    Ok(())
}

/// Writes the pages a pass copied into the database file to disk.
async fn sync_file(path: PathBuf) -> Result<(), DbErr> {
    tokio::task::spawn_blocking(move || std::fs::File::open(path)?.sync_data())
        .await
        .map_err(std::io::Error::other)
        .flatten()
        .map_err(|err| DbErr::Custom(format!("database file sync: {err}")))
}

/// Copies what the WAL holds beyond the pool's passes (what was committed
/// while they ran) on the writer's connection, with the turn held. Passive:
/// it never waits for a reader.
fn copy_the_rest(connection: &Connection) {
    let began = std::time::Instant::now();
    let copied = connection.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
        Ok((row.get::<_, i64>(1)?, row.get::<_, i64>(2)?))
    });
    match copied {
        Ok((wal, copied)) => {
            tracing::debug!(wal, copied, took = ?began.elapsed(), "WAL checkpoint finished");
        }
        Err(err) => tracing::warn!(error = %err, "WAL checkpoint's last copy failed"),
    }
}
