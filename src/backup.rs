//! Backups of the embedded SQLite database: `esim-reseller backup --to FILE`
//! takes a consistent copy of the running service's database without
//! stopping it, `esim-reseller verify FILE` checks a copy (SQLite's
//! integrity check, then the money invariants of [`crate::store::verify`]), and
//! with `backup.every_minutes` set the service takes, verifies and keeps its
//! own copies in `backup.dir`, the newest `backup.keep` of them.
//!
//! What can be lost is what was written after the last good copy: with a
//! backup every N minutes, up to N minutes of orders and ledger rows. The age
//! of the last good copy is in `/metrics` (`esim_backup_age_seconds`) and on
//! the console, and the log warns when it is older than twice the interval.

use std::{
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::Context;
use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::{
    domain::time,
    store::{Db, verify},
};

/// The first bytes of every SQLite database file.
const SQLITE_HEADER: &[u8; 16] = b"SQLite format 3\0";

/// What a backup copied.
#[derive(Debug, Clone, Serialize)]
pub struct BackupReport {
    /// The copy's path.
    pub path: PathBuf,
    /// Its size in bytes.
    pub bytes: u64,
    /// Orders in it.
    pub orders: i64,
    /// Partners in it.
    pub partners: i64,
    /// How long the copy took, in milliseconds.
    pub took_ms: u128,
}

/// Copies the database behind `db` to `to` (which must not exist yet).
pub async fn take(db: &Db, to: &Path) -> anyhow::Result<BackupReport> {
    if to.exists() {
        anyhow::bail!(
            "{} exists already: a backup never overwrites a file",
            to.display()
        );
    }
    let target = to
        .to_str()
        .context("the backup path must be valid UTF-8")?
        .to_owned();
    let started = Instant::now();
    verify::vacuum_into(db, &target)
        .await
        .with_context(|| format!("copying the database to {target}"))?;
    let took_ms = started.elapsed().as_millis();
    let copy = verify::open_read_only(&target).await?;
    let (orders, partners) = verify::counts(&copy).await?;
    copy.close().await?;
    Ok(BackupReport {
        path: to.to_owned(),
        bytes: std::fs::metadata(to)?.len(),
        orders,
        partners,
        took_ms,
    })
}

/// Why a copy cannot be trusted.
#[derive(Debug, thiserror::Error)]
pub enum Unfit {
    /// Not a SQLite database at all (or cut off before its header).
    #[error("{0} is not a SQLite database (no SQLite header): a truncated or foreign file")]
    NotSqlite(String),
    /// SQLite's own check failed.
    #[error("SQLite's integrity check failed: {0}")]
    Damaged(String),
    /// A money invariant is broken.
    #[error("money invariant broken: {0}")]
    Invariant(String),
    /// It could not be read (a copy, or the serving database checked in
    /// place).
    #[error("could not be read: {0}")]
    Unreadable(String),
}

/// What a verified copy holds.
#[derive(Debug, Clone, Serialize)]
pub struct Verified {
    pub orders: i64,
    pub partners: i64,
}

/// Checks a copy: a SQLite file, intact, whose money adds up.
pub async fn verify(path: &Path) -> Result<Verified, Unfit> {
    let shown = path.display().to_string();
    let mut header = [0u8; 16];
    let read = std::fs::File::open(path)
        .and_then(|mut file| std::io::Read::read_exact(&mut file, &mut header));
    if read.is_err() || &header != SQLITE_HEADER {
        return Err(Unfit::NotSqlite(shown));
    }
    let db = verify::open_read_only(&shown)
        .await
        .map_err(|e| Unfit::Unreadable(e.to_string()))?;
    let outcome = check(&db).await;
    let _ = db.close().await;
    outcome
}

/// Checks the service's own database where it stands (SQLite or
/// PostgreSQL), while it keeps serving: the money invariants and the
/// references, in one snapshot. SQLite's page-by-page integrity check is
/// left to copies (`verify FILE`): it reads the whole file.
pub async fn verify_in_place(db: &sea_orm::DatabaseConnection) -> Result<Verified, Unfit> {
    match verify::in_one_snapshot(db).await {
        Ok((None, orders, partners)) => Ok(Verified { orders, partners }),
        Ok((Some(problem), _, _)) => Err(Unfit::Invariant(problem)),
        Err(err) => Err(Unfit::Unreadable(err.to_string())),
    }
}

async fn check(db: &sea_orm::DatabaseConnection) -> Result<Verified, Unfit> {
    // A damaged file may fail the check itself with an error: damaged too.
    match verify::integrity(db).await {
        Ok(None) => {}
        Ok(Some(problem)) => return Err(Unfit::Damaged(problem)),
        Err(err) => return Err(Unfit::Damaged(err.to_string())),
    }
    match verify::first_violation(db).await {
        Ok(None) => {}
        Ok(Some(problem)) => return Err(Unfit::Invariant(problem)),
        Err(err) => return Err(Unfit::Damaged(err.to_string())),
    }
    let (orders, partners) = verify::counts(db)
        .await
        .map_err(|e| Unfit::Unreadable(e.to_string()))?;
    Ok(Verified { orders, partners })
}

/// How periodic backups run.
#[derive(Debug, Clone)]
pub struct Schedule {
    /// Between two backups.
    pub every: Duration,
    /// Where they are written.
    pub dir: PathBuf,
    /// How many good copies are kept (the newest).
    pub keep: usize,
}

/// When the last good periodic backup was taken, shared with the console.
#[derive(Debug, Clone, Default)]
pub struct LastBackup(Arc<Mutex<Option<DateTime<Utc>>>>);

impl LastBackup {
    /// When the last good copy was taken.
    pub fn at(&self) -> Option<DateTime<Utc>> {
        *crate::sync::lock(&self.0)
    }

    fn set(&self, at: DateTime<Utc>) {
        *crate::sync::lock(&self.0) = Some(at);
    }
}

/// One periodic backup: copy to a partial file, verify it, then give it its
/// name; older copies beyond `keep` are removed.
pub async fn periodic_once(db: &Db, schedule: &Schedule, last: &LastBackup) -> anyhow::Result<()> {
    std::fs::create_dir_all(&schedule.dir)
        .with_context(|| format!("creating {}", schedule.dir.display()))?;
    let now = time::now();
    let name = format!("esim-{}.db", now.format("%Y%m%dT%H%M%S%.3fZ"));
    let partial = schedule.dir.join(format!("{name}.partial"));
    let _ = std::fs::remove_file(&partial);
    let report = take(db, &partial).await?;
    if let Err(unfit) = verify(&partial).await {
        let _ = std::fs::remove_file(&partial);
        anyhow::bail!("the new backup failed its check and was removed: {unfit}");
    }
    let done = schedule.dir.join(&name);
    std::fs::rename(&partial, &done)?;
    last.set(now);
    crate::metrics::backup_taken(now, report.bytes);
    tracing::info!(path = %done.display(), bytes = report.bytes, orders = report.orders, took_ms = report.took_ms as u64, "backup taken and verified");
    prune(&schedule.dir, schedule.keep);
    Ok(())
}

/// Removes all but the newest `keep` copies (their names sort by time).
fn prune(dir: &Path, keep: usize) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut copies: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("esim-") && n.ends_with(".db"))
        })
        .collect();
    copies.sort();
    let excess = copies.len().saturating_sub(keep.max(1));
    for old in copies.into_iter().take(excess) {
        if let Err(err) = std::fs::remove_file(&old) {
            tracing::warn!(path = %old.display(), error = %err, "could not remove an old backup");
        }
    }
}

/// Publishes the age of the last good copy, and warns (once per interval)
/// when it is older than twice the interval.
pub fn watch_age(schedule: &Schedule, last: &LastBackup, started: DateTime<Utc>) {
    let since = last.at().unwrap_or(started);
    let age = (time::now() - since).to_std().unwrap_or_default();
    crate::metrics::backup_age(age);
    if age > schedule.every * 2 {
        tracing::warn!(
            age_seconds = age.as_secs(),
            every_seconds = schedule.every.as_secs(),
            "the last good backup is older than twice the backup interval"
        );
    }
}

/// Takes periodic backups until `stop`.
pub async fn run_periodic(
    db: Db,
    schedule: Schedule,
    last: LastBackup,
    stop: tokio_util::sync::CancellationToken,
) {
    let started = time::now();
    let mut next = tokio::time::Instant::now() + schedule.every;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep_until(next) => {}
        }
        if let Err(err) = periodic_once(&db, &schedule, &last).await {
            tracing::error!(error = %format!("{err:#}"), "periodic backup failed");
        }
        watch_age(&schedule, &last, started);
        next += schedule.every;
    }
}

/// The database behind a `sqlite:` URL, for messages.
pub fn is_sqlite(url: &str) -> bool {
    url.starts_with("sqlite:")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_file_without_the_sqlite_header_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let foreign = dir.path().join("notes.db");
        std::fs::write(&foreign, b"these are not the pages you are looking for").unwrap();
        let empty = dir.path().join("empty.db");
        std::fs::write(&empty, b"").unwrap();
        for path in [foreign, empty, dir.path().join("missing.db")] {
            assert!(
                matches!(verify(&path).await, Err(Unfit::NotSqlite(_))),
                "{}",
                path.display()
            );
        }
    }

    #[test]
    fn only_the_newest_copies_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        for stamp in ["20261125T100000", "20261125T110000", "20261125T120000"] {
            std::fs::write(dir.path().join(format!("esim-{stamp}.000Z.db")), b"x").unwrap();
        }
        std::fs::write(dir.path().join("other.txt"), b"x").unwrap();
        prune(dir.path(), 2);
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(
            left,
            vec![
                "esim-20261125T110000.000Z.db",
                "esim-20261125T120000.000Z.db",
                "other.txt"
            ]
        );
    }
}
