//! The database's series: the pool, gathered and inline reads, the order
//! path's inline writes, the SQLite WAL and write gate.

use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram};

/// Connections of the database pool: `state` (`idle`, `in_use`).
pub(crate) const DB_POOL_CONNECTIONS: &str = "esim_db_pool_connections";
/// The pool's configured maximum.
pub(crate) const DB_POOL_MAX: &str = "esim_db_pool_max_connections";
/// Point reads run on the handler's thread (SQLite), by outcome.
pub(crate) const DB_INLINE_READS: &str = "esim_db_inline_reads_total";
/// Balance reads through the pool gathered into rounds: reads, and rounds.
pub(crate) const DB_GATHERED_READS: &str = "esim_db_gathered_reads_total";
pub(crate) const DB_GATHERED_ROUNDS: &str = "esim_db_gathered_rounds_total";
/// Writes run inline by the order path's writers (SQLite), by writer and outcome.
pub(crate) const DB_INLINE_WRITES: &str = "esim_db_inline_writes_total";
/// Writes carried per inline SQLite transaction (one commit for them all).
pub(crate) const DB_INLINE_COMMIT_WRITES: &str = "esim_db_inline_commit_writes";
/// How long an inline SQLite transaction's `COMMIT` took (its WAL frames
/// written and synced, with the write gate held).
pub(crate) const DB_INLINE_COMMIT_SECONDS: &str = "esim_db_inline_commit_seconds";
/// Pages in the SQLite file's WAL after the order path's last commit.
pub(crate) const DB_WAL_PAGES: &str = "esim_db_wal_pages";
/// Times the SQLite file's WAL started over after a checkpoint.
pub(crate) const DB_WAL_RESTARTS: &str = "esim_db_wal_restarts_total";
/// Turns this process took at the SQLite file's write gate.
pub(crate) const DB_WRITE_GATE_TURNS: &str = "esim_db_write_gate_turns_total";
/// Microseconds those turns held the gate, summed.
pub(crate) const DB_WRITE_GATE_HELD: &str = "esim_db_write_gate_held_microseconds_total";

/// The database: the pool, gathered and inline reads, inline writes, the
/// WAL, the write gate.
pub(super) fn describe_database() {
    describe_gauge!(
        DB_POOL_CONNECTIONS,
        "Connections of the database pool, by state."
    );
    describe_gauge!(DB_POOL_MAX, "Most connections the database pool opens.");
    describe_counter!(
        DB_GATHERED_READS,
        "Balance reads through the pool (PostgreSQL), answered by a gathered round."
    );
    describe_counter!(
        DB_GATHERED_ROUNDS,
        "Queries that answered the gathered balance reads (each read's own query, or several's)."
    );
    describe_counter!(
        DB_INLINE_READS,
        "Point reads of the SQLite file run on the handler's thread: answered, or fell_back to the pool."
    );
    describe_counter!(
        DB_INLINE_WRITES,
        "Writes of the SQLite file's order-path writers run inline, by writer (orders, deliveries, supplier_orders): committed, refused (a guard fired; rolled back), or fell_back to the pool."
    );
    describe_gauge!(
        DB_WAL_PAGES,
        "Pages in the SQLite file's WAL after the order path's last commit; it starts over after each checkpoint."
    );
    describe_counter!(
        DB_WAL_RESTARTS,
        "Times the SQLite file's WAL started over after a checkpoint copied it back into the file."
    );
    describe_counter!(
        DB_WRITE_GATE_TURNS,
        "Turns this process's writers took, one at a time, at the SQLite file's write gate."
    );
    describe_counter!(
        DB_WRITE_GATE_HELD,
        "Microseconds the SQLite file's write gate was held, summed over its turns: a rate near 1,000,000 per second means the one writer at a time bounds the writes."
    );
    describe_histogram!(
        DB_INLINE_COMMIT_SECONDS,
        metrics::Unit::Seconds,
        "How long an inline SQLite transaction's COMMIT took: its WAL frames written and synced to disk, with the write gate held, so every writer of the order path waits behind a slow one."
    );
    describe_histogram!(
        DB_INLINE_COMMIT_WRITES,
        "Writes carried per inline SQLite transaction: the order-path writers' writes queued together share one commit and one fsync."
    );
}

/// One inline write's outcome: `committed`, `refused` (rolled back) or `fell_back` (to the pool).
pub(crate) fn inline_write(writer: &'static str, outcome: &'static str) {
    counter!(DB_INLINE_WRITES, "writer" => writer, "outcome" => outcome).increment(1);
}

/// One inline transaction committed with `writes` writes (one fsync for
/// all), its `COMMIT` having taken `took`.
pub(crate) fn inline_commit(writes: usize, took: std::time::Duration) {
    histogram!(DB_INLINE_COMMIT_WRITES).record(writes as f64);
    histogram!(DB_INLINE_COMMIT_SECONDS).record(took.as_secs_f64());
}

/// The SQLite file's WAL after an inline commit: its pages, and whether it
/// started over since the commit before.
pub(crate) fn sqlite_wal(pages: i64, started_over: bool) {
    gauge!(DB_WAL_PAGES).set(pages as f64);
    if started_over {
        counter!(DB_WAL_RESTARTS).increment(1);
    }
}
