//! Point reads of a SQLite file on the calling thread.
//!
//! sqlx runs every statement of a SQLite connection on that connection's own
//! worker thread: a read is handed over and its rows handed back, two thread
//! wake-ups around a few microseconds of SQLite. For the hottest point reads
//! (a float's balance, an order a partner polls) that hand-off is most of
//! the cost, so they run here instead, on the caller's thread, over a small
//! set of connections to the same file: in WAL mode a reader never waits for
//! the writer, and the connections' busy timeout is zero, so a read that
//! would have to wait (a WAL recovery, a truncating checkpoint, another
//! program's exclusive lock) fails at once and the caller falls back to the
//! pool, which waits as it always does; so does a row the hand-written
//! mapping cannot read. Each read is a lookup by key of a few pages, so it
//! holds the async worker for microseconds, less than the hand-off costs;
//! only such reads belong here, never scans. PostgreSQL and in-memory SQLite
//! databases have no inline reader: the caller uses the pool.

use std::{
    path::PathBuf,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use rusqlite::{Connection, OpenFlags};

use super::{Db, sqlite_file};
use crate::sync::lock;

/// Idle connections kept; more are opened when every kept one is in use,
/// and closed when returned beyond this.
const KEPT_CONNECTIONS: usize = 8;

/// Connections to one SQLite file for reads on the caller's thread. Owned
/// by the application state: its connections close when the state drops.
pub struct InlineReader {
    /// The database file.
    file: PathBuf,
    /// Connections not in use.
    idle: Mutex<Vec<Connection>>,
    /// Reads answered inline.
    answered: AtomicU64,
    /// Reads that failed inline and went to the pool.
    fell_back: AtomicU64,
}

/// How an inline reader has fared since it opened (for the metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InlineReadCounts {
    /// Reads answered inline.
    pub answered: u64,
    /// Reads that failed inline and went to the pool.
    pub fell_back: u64,
}

impl InlineReader {
    /// An inline reader of `db`'s file; `None` for PostgreSQL or an
    /// in-memory SQLite database (no file another connection can open).
    pub fn for_db(db: &Db) -> Option<Arc<Self>> {
        let file = sqlite_file(db).filter(|file| file.is_file())?;
        Some(Arc::new(Self {
            file,
            idle: Mutex::new(Vec::new()),
            answered: AtomicU64::new(0),
            fell_back: AtomicU64::new(0),
        }))
    }

    /// Reads answered and fallen back so far.
    pub fn counts(&self) -> InlineReadCounts {
        InlineReadCounts {
            answered: self.answered.load(Ordering::Relaxed),
            fell_back: self.fell_back.load(Ordering::Relaxed),
        }
    }

    fn open_connection(&self) -> rusqlite::Result<Connection> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let connection = Connection::open_with_flags(&self.file, flags)?;
        // Never wait here: a read that would wait is the pool's.
        connection.busy_timeout(Duration::ZERO)?;
        connection.pragma_update(None, "query_only", true)?;
        Ok(connection)
    }

    /// Runs `read` on an idle connection (opening one if none is idle).
    fn run<T>(&self, read: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> rusqlite::Result<T> {
        let taken = lock(&self.idle).pop();
        let connection = match taken {
            Some(connection) => connection,
            None => self.open_connection()?,
        };
        let result = read(&connection);
        let mut idle = lock(&self.idle);
        if idle.len() < KEPT_CONNECTIONS {
            idle.push(connection);
        }
        result
    }
}

/// Runs `read` on `reader`'s connection; `None` without a reader, or when
/// the inline read failed (the caller then reads through the pool, which
/// answers the error or waits as it should).
pub(crate) fn read<T>(
    reader: Option<&InlineReader>,
    read: impl FnOnce(&Connection) -> rusqlite::Result<T>,
) -> Option<T> {
    let reader = reader?;
    match reader.run(read) {
        Ok(found) => {
            reader.answered.fetch_add(1, Ordering::Relaxed);
            Some(found)
        }
        Err(err) => {
            reader.fell_back.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(error = %err, "inline read failed; reading through the pool");
            None
        }
    }
}

/// Column readers for rows mapped by hand: the same values sqlx decodes
/// for the entities, or a conversion error (the caller falls back to the
/// pool, which answers that row's error as it always does).
pub(crate) mod columns {
    use chrono::{DateTime, NaiveDateTime, Utc};
    use entities::states::Vocabulary;
    use rusqlite::Row;

    fn failed(index: usize, text: &str, what: &str) -> rusqlite::Error {
        rusqlite::Error::FromSqlConversionFailure(
            index,
            rusqlite::types::Type::Text,
            format!("not {what}: {text:?}").into(),
        )
    }

    /// A stored word of a closed vocabulary (`live`, `completed`, ...).
    pub(crate) fn word<T: Vocabulary>(row: &Row<'_>, index: usize) -> rusqlite::Result<T> {
        let text: String = row.get(index)?;
        T::parse(&text).ok_or_else(|| failed(index, &text, "a known word"))
    }

    /// A nullable stored word.
    pub(crate) fn optional_word<T: Vocabulary>(
        row: &Row<'_>,
        index: usize,
    ) -> rusqlite::Result<Option<T>> {
        let text: Option<String> = row.get(index)?;
        text.map(|text| T::parse(&text).ok_or_else(|| failed(index, &text, "a known word")))
            .transpose()
    }

    /// An instant as sqlx writes it (RFC 3339), or as SQLite's own
    /// functions do (`YYYY-MM-DD HH:MM:SS[.f]`, UTC).
    pub(crate) fn time(row: &Row<'_>, index: usize) -> rusqlite::Result<DateTime<Utc>> {
        let text: String = row.get(index)?;
        parse_time(&text).ok_or_else(|| failed(index, &text, "an instant"))
    }

    /// A nullable instant.
    pub(crate) fn optional_time(
        row: &Row<'_>,
        index: usize,
    ) -> rusqlite::Result<Option<DateTime<Utc>>> {
        let text: Option<String> = row.get(index)?;
        text.map(|text| parse_time(&text).ok_or_else(|| failed(index, &text, "an instant")))
            .transpose()
    }

    fn parse_time(text: &str) -> Option<DateTime<Utc>> {
        if let Ok(at) = text.parse::<DateTime<chrono::FixedOffset>>() {
            return Some(at.with_timezone(&Utc));
        }
        ["%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M:%S%.f"]
            .iter()
            .find_map(|format| NaiveDateTime::parse_from_str(text, format).ok())
            .map(|naive| naive.and_utc())
    }

    /// A JSON document stored as text.
    pub(crate) fn json(row: &Row<'_>, index: usize) -> rusqlite::Result<serde_json::Value> {
        let text: String = row.get(index)?;
        serde_json::from_str(&text).map_err(|err| {
            rusqlite::Error::FromSqlConversionFailure(
                index,
                rusqlite::types::Type::Text,
                Box::new(err),
            )
        })
    }

    #[cfg(test)]
    mod tests {
        use super::parse_time;

        #[test]
        fn instants_parse_as_sqlx_and_sqlite_write_them() {
            let expected = "2026-11-26T18:08:47.539020Z".parse().ok();
            assert_eq!(parse_time("2026-11-26T18:08:47.539020+00:00"), expected);
            assert_eq!(parse_time("2026-11-26 18:08:47.539020+00:00"), expected);
            assert_eq!(parse_time("2026-11-26 18:08:47.539020"), expected);
            assert_eq!(parse_time("2026-11-26T19:08:47.539020+01:00"), expected);
            assert_eq!(parse_time("yesterday"), None);
        }
    }
}

#[cfg(test)]
mod tests {
    use sea_orm::{ConnectionTrait, DbBackend, Statement};

    use super::*;
    use crate::{
        config::DatabaseSettings,
        domain::partner::Mode,
        store::{self, partners, tests::sqlite_file_db},
    };

    async fn partner_db(name: &str) -> (tempfile::TempDir, Db, String, Arc<InlineReader>) {
        let (dir, db) = sqlite_file_db(name, 2).await;
        store::migrate(&db).await.unwrap();
        let partner = partners::gold_partner(&db, "inline", 1_234).await;
        let reader = InlineReader::for_db(&db).expect("a SQLite file has an inline reader");
        (dir, db, partner, reader)
    }

    fn inline_view(reader: &InlineReader, partner: &str) -> Option<Option<partners::FloatView>> {
        read(Some(reader), |c| {
            partners::float_view_inline(c, partner, Mode::Sandbox)
        })
    }

    #[tokio::test]
    async fn a_float_read_inline_is_the_one_the_pool_reads() {
        let (_dir, db, partner, reader) = partner_db("same.db").await;
        let pooled =
            partners::float_view(&partners::float_reads(&db), None, &partner, Mode::Sandbox)
                .await
                .unwrap();
        assert_eq!(pooled.as_ref().map(|v| v.balance_cents), Some(1_234));
        assert_eq!(inline_view(&reader, &partner), Some(pooled));
        assert_eq!(
            reader.counts(),
            InlineReadCounts {
                answered: 1,
                fell_back: 0
            }
        );
        assert_eq!(
            inline_view(&reader, "pa_nobody"),
            Some(None),
            "an unknown partner is a read that found nothing, not a failure"
        );
        let pragma = |name: &str| {
            read(Some(&reader), |c| {
                c.query_row(&format!("PRAGMA {name}"), [], |row| row.get::<_, i64>(0))
            })
        };
        assert_eq!(
            pragma("busy_timeout"),
            Some(0),
            "an inline read never waits"
        );
        assert_eq!(
            pragma("query_only"),
            Some(1),
            "an inline connection never writes"
        );
    }

    #[tokio::test]
    async fn an_inline_read_sees_what_the_pool_just_committed() {
        let (_dir, db, partner, reader) = partner_db("fresh.db").await;
        assert_eq!(
            inline_view(&reader, &partner)
                .flatten()
                .map(|v| v.balance_cents),
            Some(1_234),
            "the connection has read the float once"
        );
        db.execute_raw(Statement::from_sql_and_values(
            DbBackend::Sqlite,
            "UPDATE floats SET balance_cents = 99 WHERE partner_id = ?1 AND mode = 'sandbox'",
            [partner.clone().into()],
        ))
        .await
        .unwrap();
        assert_eq!(
            inline_view(&reader, &partner)
                .flatten()
                .map(|v| v.balance_cents),
            Some(99)
        );
    }

    #[tokio::test]
    async fn an_inline_read_that_would_wait_gives_way_to_the_pool() {
        let (dir, db, partner, reader) = partner_db("locked.db").await;
        db.close().await.unwrap();
        // A connection that keeps the file to itself (the pool closed, the
        // reader not yet connected): in WAL mode with the exclusive locking
        // mode, no other connection can read.
        let holder = Connection::open(dir.path().join("locked.db")).unwrap();
        holder
            .execute_batch("PRAGMA locking_mode = EXCLUSIVE; BEGIN IMMEDIATE; UPDATE floats SET balance_cents = 7;")
            .unwrap();
        assert_eq!(
            inline_view(&reader, &partner),
            None,
            "the inline read does not wait; its caller reads through the pool"
        );
        assert_eq!(
            reader.counts(),
            InlineReadCounts {
                answered: 0,
                fell_back: 1
            }
        );
        holder.execute_batch("COMMIT").unwrap();
    }

    #[tokio::test]
    async fn an_in_memory_database_has_no_inline_reader() {
        let settings = DatabaseSettings {
            url: "sqlite::memory:".into(),
            max_connections: 1,
            busy_timeout_ms: 1_000,
            probe_timeout_ms: 1_000,
        };
        let db = store::connect(&settings).await.unwrap();
        assert!(InlineReader::for_db(&db).is_none());
        assert!(read(None, |_| Ok(())).is_none());
    }
}
