//! What `/metrics` reads from its sources when it is scraped (actors,
//! pool, readers), set as gauges and counters just before the text is
//! rendered.

use axum::{
    http::{HeaderValue, header},
    response::{IntoResponse, Response},
};
use metrics::{counter, gauge};

use super::{
    ACTOR_MAILBOX_MAX, ACTOR_MAILBOX_MESSAGES, ACTORS_LIVE, CONTENT_TYPE, DB_GATHERED_READS,
    DB_GATHERED_ROUNDS, DB_INLINE_READS, DB_POOL_CONNECTIONS, DB_POOL_MAX, DB_WRITE_GATE_HELD,
    DB_WRITE_GATE_TURNS, LOG_LINES_DROPPED, install,
};
use crate::store::{GateUse, PoolUse, gathered::GatheredCounts, inline::InlineReadCounts};

/// What `/metrics` reads from its sources when scraped.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ScrapeGauges {
    /// Account actors running, messages waiting at them, the most at one.
    pub accounts_live: usize,
    pub accounts_queued: usize,
    pub accounts_max_queued: usize,
    /// Whether the provisioning actor runs on this node.
    pub provisioning_running: bool,
    /// The database pool, when the driver reports it.
    pub pool: Option<PoolUse>,
    /// The inline reader's counts (SQLite files only).
    pub inline_reads: Option<InlineReadCounts>,
    /// The gathered balance reads' counts.
    pub gathered_reads: GatheredCounts,
    /// The SQLite file's write gate: turns taken and how long they held it.
    pub write_gate: Option<GateUse>,
}

/// The body of `GET /metrics`: the scrape-time gauges, then every series as
/// Prometheus text. The route lives with the application, which knows
/// where each gauge comes from.
pub(crate) fn render(gauges: ScrapeGauges) -> Response {
    let handle = install();
    gauge!(ACTORS_LIVE, "kind" => "account").set(gauges.accounts_live as f64);
    gauge!(ACTOR_MAILBOX_MESSAGES, "kind" => "account").set(gauges.accounts_queued as f64);
    gauge!(ACTOR_MAILBOX_MAX, "kind" => "account").set(gauges.accounts_max_queued as f64);
    gauge!(ACTORS_LIVE, "kind" => "provisioning")
        .set(f64::from(u8::from(gauges.provisioning_running)));
    if let Some(pool) = gauges.pool {
        gauge!(DB_POOL_CONNECTIONS, "state" => "idle").set(pool.idle as f64);
        gauge!(DB_POOL_CONNECTIONS, "state" => "in_use").set(pool.in_use() as f64);
        gauge!(DB_POOL_MAX).set(f64::from(pool.max));
    }
    counter!(LOG_LINES_DROPPED).absolute(crate::telemetry::dropped_lines());
    counter!(DB_GATHERED_READS).absolute(gauges.gathered_reads.reads);
    counter!(DB_GATHERED_ROUNDS).absolute(gauges.gathered_reads.rounds);
    if let Some(reads) = gauges.inline_reads {
        counter!(DB_INLINE_READS, "outcome" => "answered").absolute(reads.answered);
        counter!(DB_INLINE_READS, "outcome" => "fell_back").absolute(reads.fell_back);
    }
    if let Some(gate) = gauges.write_gate {
        counter!(DB_WRITE_GATE_TURNS).absolute(gate.turns);
        let held = u64::try_from(gate.held.as_micros()).unwrap_or(u64::MAX);
        counter!(DB_WRITE_GATE_HELD).absolute(held);
    }
    (
        [(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE))],
        handle.render(),
    )
        .into_response()
}
