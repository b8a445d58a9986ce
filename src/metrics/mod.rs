//! Prometheus metrics, served as text at `/metrics` on the operator listener.
//!
//! Built on the `metrics` facade with `metrics-exporter-prometheus` as the
//! recorder: event sites record with one call to a helper below, without
//! passing a registry around, and the exporter renders the text format. The
//! recorder is process-wide and installed once ([`install`]), so several
//! applications in one process (the integration tests) share one set of
//! series; a deployment runs one application per process.
//!
//! Counters and histograms are recorded where the event happens. Gauges that
//! describe the present (live actors, mailbox lengths, the database pool) are
//! read from their source when `/metrics` is scraped ([`render`]), which is
//! more honest than keeping a second count up to date.
//!
//! Labels are bounded: a request is labelled with its route template (axum's
//! [`MatchedPath`], never the raw path, so ids do not make new series),
//! unknown methods with `other`, and nothing is labelled per partner.

use std::{sync::OnceLock, time::Duration};

use axum::{extract::MatchedPath, http::Method};
use chrono::{DateTime, Utc};
use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram};
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};

mod database;
mod requests;
mod scrape;

pub(crate) use database::*;
pub(crate) use requests::request_finished;
pub(crate) use scrape::{ScrapeGauges, render};

use crate::store::orders::Settled;

/// HTTP requests answered: `listener`, `route`, `method`, `status`.
pub(crate) const HTTP_REQUESTS: &str = "esim_http_requests_total";
/// Seconds from a request's arrival to its answer, same labels as [`HTTP_REQUESTS`].
pub(crate) const HTTP_REQUEST_DURATION: &str = "esim_http_request_duration_seconds";
/// Orders accepted (202) by the account actors: `mode`.
pub(crate) const ORDERS_ACCEPTED: &str = "esim_orders_accepted_total";
/// Orders settled: `mode`, `status`, `failure_code`.
pub(crate) const ORDERS_SETTLED: &str = "esim_orders_settled_total";
/// Seconds from an order's acceptance to its settlement: `mode`, `status`.
pub(crate) const PROVISIONING_DURATION: &str = "esim_provisioning_duration_seconds";
/// Calls to a live supplier: `supplier`, `operation`, `outcome`.
pub(crate) const SUPPLIER_CALLS: &str = "esim_supplier_calls_total";
pub(crate) const SUPPLIER_SLOW_DOWNS: &str = "esim_supplier_slow_downs_total";
/// Calls a second a node sends a supplier: the rate learnt from its "slow
/// down" answers while it paces, else the configured limit (0: none): `supplier`.
pub(crate) const SUPPLIER_PACE: &str = "esim_supplier_pace_requests_per_second";
pub(crate) const SUPPLIER_ORDER_UNITS: &str = "esim_supplier_order_units";
/// Seconds since the last good periodic backup.
pub(crate) const BACKUP_AGE: &str = "esim_backup_age_seconds";
/// Unix time of the last good periodic backup.
pub(crate) const BACKUP_LAST: &str = "esim_backup_last_success_timestamp_seconds";
/// Size of the last good periodic backup, in bytes.
pub(crate) const BACKUP_BYTES: &str = "esim_backup_size_bytes";
/// Times a supplier's breaker took it out of the route: `supplier`.
pub(crate) const SUPPLIER_BREAKER_OPENS: &str = "esim_supplier_breaker_opens_total";
/// Units moved from one supplier to the next: `from`, `to`, `reason`.
pub(crate) const SUPPLIER_FAILOVERS: &str = "esim_supplier_failover_units_total";
/// Whether a supplier takes work now (1) or is out of the route (0): `supplier`.
pub(crate) const SUPPLIER_UP: &str = "esim_supplier_up";
/// Seconds per supplier call: `supplier`, `operation`, `outcome`.
pub(crate) const SUPPLIER_CALL_DURATION: &str = "esim_supplier_call_duration_seconds";
/// Deposit status changes: `from`, `to`.
pub(crate) const DEPOSIT_TRANSITIONS: &str = "esim_deposit_transitions_total";
/// Actors running on this node: `kind`.
pub(crate) const ACTORS_LIVE: &str = "esim_actors_live";
/// Messages sent to actors and not yet answered, summed over the kind: `kind`.
pub(crate) const ACTOR_MAILBOX_MESSAGES: &str = "esim_actor_mailbox_messages";
/// The longest mailbox of one actor of the kind: `kind`.
pub(crate) const ACTOR_MAILBOX_MAX: &str = "esim_actor_mailbox_max_messages";
/// Actors restarted by their supervisor after a failure: `kind`.
pub(crate) const ACTOR_RESTARTS: &str = "esim_actor_restarts_total";
/// Log lines dropped because the log writer's queue was full (the output
/// stalled): read from the writer when scraped.
pub(crate) const LOG_LINES_DROPPED: &str = "esim_log_lines_dropped_total";
/// Transactions that committed accepted orders: `path` (`shared`: many
/// partners' batches in set-based statements; `savepoints`: the same batches
/// one savepoint each, after a key lost a race; `alone`: one batch, without
/// the shared writer).
pub(crate) const ORDER_COMMITS: &str = "esim_order_commits_total";
/// Order batches (one per partner) per such transaction.
pub(crate) const ORDER_COMMIT_BATCHES: &str = "esim_order_commit_batches";
/// Orders written per such transaction (accepted orders and bound refusals).
pub(crate) const ORDER_COMMIT_ORDERS: &str = "esim_order_commit_orders";
/// Requests refused with 429: `class` (`read`, `write`, `supplier`,
/// `catalogue`, or `failed_auth` when the source's failed-authentication
/// budget is spent).
pub(crate) const RATE_LIMIT_REJECTIONS: &str = "esim_rate_limit_rejections_total";
/// Whether this node counts its rate-limit windows in Redis (1) or, Redis
/// not answering, in its own memory (0). Only with `rate_limit.backend = redis`.
pub(crate) const RATE_LIMIT_REDIS_UP: &str = "esim_rate_limit_redis_up";
/// Rate-limit calls to Redis that failed or outlasted `rate_limit.redis_timeout_ms`.
pub(crate) const RATE_LIMIT_REDIS_FAILURES: &str = "esim_rate_limit_redis_failures_total";
/// Rate-limit calls (window counts, failed-authentication budget reads)
/// answered from the node's memory because Redis was down.
pub(crate) const RATE_LIMIT_REDIS_FALLBACKS: &str = "esim_rate_limit_redis_fallbacks_total";
/// Failed authentications of partner requests (each one consumes the
/// source's budget): `code` (`auth.missing`, `auth.invalid_key`, `auth.key_expired`).
pub(crate) const AUTH_FAILURES: &str = "esim_auth_failures_total";
/// Keys read from the database because they were not cached (first seen,
/// expired, or forgotten after a change); lookups that waited for another's
/// read are not counted.
pub(crate) const KEY_READS: &str = "esim_auth_key_reads_total";

/// Live orders refused at admission: `reason` (`capacity`, `fair_share`,
/// `settling`).
pub(crate) const ADMISSION_REFUSALS: &str = "esim_admission_refusals_total";
/// Live units per second the supplier can deliver, as admission estimates it.
pub(crate) const ADMISSION_CAPACITY: &str = "esim_admission_capacity_units_per_second";
/// Live units per second this service settled while behind, as learnt
/// (0 while it keeps up).
pub(crate) const ADMISSION_SETTLING: &str = "esim_admission_settling_units_per_second";
/// Live units the backlog may hold (the lower of the capacity × horizon and
/// the settling rate × half the horizon).
pub(crate) const ADMISSION_ROOM: &str = "esim_admission_room_units";
/// Live units accepted and not settled, every node's.
pub(crate) const ADMISSION_BACKLOG: &str = "esim_admission_backlog_units";
/// Partners with live units in the backlog.
pub(crate) const ADMISSION_ACTIVE_PARTNERS: &str = "esim_admission_active_partners";

/// Request latency buckets (seconds): a millisecond to ten seconds.
const HTTP_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// Provisioning buckets (seconds): a sandbox order settles in tens of
/// milliseconds, a live one in seconds, a slow supplier within its deadline.
const PROVISIONING_BUCKETS: &[f64] = &[
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
];
/// Supplier call buckets (seconds), up to the usual client time-outs.
const SUPPLIER_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
/// Sizes of a group commit, in powers of two up to an actor's batch limit.
const COMMIT_SIZE_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0];
/// Commit buckets (seconds): a commit's sync takes about a millisecond on
/// a local disk; a virtual disk sometimes takes hundreds.
const COMMIT_SECONDS_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];
/// How often recorded histogram samples are folded into their buckets when
/// nobody scrapes (the exporter keeps raw samples until then).
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// The Prometheus exposition format's content type.
pub(crate) const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The process's recorder, once [`install`]ed.
static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Whether the process's recorder is installed (handles registered before
/// would record nowhere).
fn is_installed() -> bool {
    HANDLE.get().is_some()
}

/// Installs the process's recorder on first call and returns its handle.
/// Later calls return the same handle.
pub(crate) fn install() -> &'static PrometheusHandle {
    HANDLE.get_or_init(|| {
        let builder = with_buckets().unwrap_or_else(|err| {
            tracing::warn!(error = %err, "histogram buckets refused; latencies are exported as summaries");
            PrometheusBuilder::new()
        });
        let recorder = builder.build_recorder();
        let handle = recorder.handle();
        if metrics::set_global_recorder(recorder).is_err() {
            tracing::warn!("another metrics recorder is installed; /metrics will stay empty");
        }
        describe();
        let upkeep = handle.clone();
        let spawned = std::thread::Builder::new()
            .name("metrics-upkeep".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(UPKEEP_EVERY);
                    upkeep.run_upkeep();
                }
            });
        if let Err(err) = spawned {
            tracing::warn!(error = %err, "metrics upkeep thread not started; histograms fold at scrape time only");
        }
        handle
    })
}

fn with_buckets() -> Result<PrometheusBuilder, BuildError> {
    let buckets: [(&str, &[f64]); 7] = [
        (HTTP_REQUEST_DURATION, HTTP_BUCKETS),
        (PROVISIONING_DURATION, PROVISIONING_BUCKETS),
        (SUPPLIER_CALL_DURATION, SUPPLIER_BUCKETS),
        (ORDER_COMMIT_BATCHES, COMMIT_SIZE_BUCKETS),
        (ORDER_COMMIT_ORDERS, COMMIT_SIZE_BUCKETS),
        (DB_INLINE_COMMIT_WRITES, COMMIT_SIZE_BUCKETS),
        (DB_INLINE_COMMIT_SECONDS, COMMIT_SECONDS_BUCKETS),
    ];
    buckets
        .into_iter()
        .try_fold(PrometheusBuilder::new(), |builder, (name, buckets)| {
            builder.set_buckets_for_metric(Matcher::Full(name.into()), buckets)
        })
}

fn describe() {
    describe_requests();
    describe_outside();
    describe_internals();
    describe_database();
    describe_rate_limit_redis();
}

/// HTTP requests, orders and their provisioning.
fn describe_requests() {
    describe_counter!(
        HTTP_REQUESTS,
        "HTTP requests answered, by listener, route template, method and status."
    );
    describe_histogram!(
        HTTP_REQUEST_DURATION,
        metrics::Unit::Seconds,
        "Time from a request's arrival to its answer."
    );
    describe_counter!(
        ORDERS_ACCEPTED,
        "Orders accepted (202) by the account actors, by mode."
    );
    describe_counter!(
        ORDERS_SETTLED,
        "Orders settled, by mode, final status and failure code."
    );
    describe_histogram!(
        PROVISIONING_DURATION,
        metrics::Unit::Seconds,
        "Time from an order's acceptance to its settlement."
    );
}

/// The supplier and the deposits.
fn describe_outside() {
    describe_counter!(
        SUPPLIER_CALLS,
        "Calls to the live eSIM suppliers, by supplier, operation and outcome."
    );
    describe_counter!(
        SUPPLIER_SLOW_DOWNS,
        "Answers of the supplier that said to slow down (rate limit); every call of the node paused."
    );
    describe_gauge!(
        SUPPLIER_PACE,
        "Calls a second this node sends a supplier: the rate learnt from its slow-down answers while it paces lower, else the configured limit (0: none)."
    );
    describe_gauge!(
        BACKUP_AGE,
        metrics::Unit::Seconds,
        "Seconds since the last good (verified) periodic backup of the SQLite database."
    );
    describe_gauge!(
        BACKUP_LAST,
        "Unix time of the last good (verified) periodic backup."
    );
    describe_gauge!(
        BACKUP_BYTES,
        metrics::Unit::Bytes,
        "Size of the last good periodic backup."
    );
    describe_counter!(
        SUPPLIER_BREAKER_OPENS,
        "Times a supplier was taken out of the route after failures in a row (circuit breaker)."
    );
    describe_counter!(
        SUPPLIER_FAILOVERS,
        "Units moved from one supplier to the next one of the route, by reason."
    );
    describe_gauge!(
        SUPPLIER_UP,
        "Whether a supplier takes new work now (1) or is out of the route (0)."
    );
    describe_histogram!(
        SUPPLIER_ORDER_UNITS,
        "Units carried by each supplier order placed (batching across orders and partners)."
    );
    describe_histogram!(
        SUPPLIER_CALL_DURATION,
        metrics::Unit::Seconds,
        "Duration of calls to the live eSIM suppliers, by supplier."
    );
    describe_counter!(
        DEPOSIT_TRANSITIONS,
        "Deposit status changes, by from and to status."
    );
}

/// Actors, refusals at the door and admission.
fn describe_internals() {
    describe_gauge!(ACTORS_LIVE, "Actors running on this node, by kind.");
    describe_gauge!(
        ACTOR_MAILBOX_MESSAGES,
        "Messages sent to the actors of a kind and not yet answered."
    );
    describe_gauge!(
        ACTOR_MAILBOX_MAX,
        "Messages waiting at the busiest actor of a kind."
    );
    describe_counter!(
        ACTOR_RESTARTS,
        "Actors restarted by their supervisor after a failure, by kind."
    );
    describe_counter!(
        LOG_LINES_DROPPED,
        "Log lines dropped because the log output fell behind and the writer's queue was full."
    );
    describe_counter!(
        ORDER_COMMITS,
        "Transactions that committed accepted orders, by path (shared, savepoints, alone)."
    );
    describe_histogram!(
        ORDER_COMMIT_BATCHES,
        "Partners' order batches per committed transaction (what one fsync is shared by)."
    );
    describe_histogram!(
        ORDER_COMMIT_ORDERS,
        "Orders and bound refusals written per committed transaction."
    );
    describe_counter!(
        RATE_LIMIT_REJECTIONS,
        "Requests refused with 429, by rate class (failed_auth: the failed-authentication budget)."
    );
    describe_counter!(
        AUTH_FAILURES,
        "Failed authentications of partner requests, by error code."
    );
    describe_counter!(
        KEY_READS,
        "Keys read from the database because they were not cached; lookups that waited for another's read are not counted."
    );
    describe_counter!(
        ADMISSION_REFUSALS,
        "Live orders refused at admission (502 supplier_error with Retry-After), by reason."
    );
    describe_gauge!(
        ADMISSION_CAPACITY,
        "Live units per second the supplier can deliver, as estimated."
    );
    describe_gauge!(
        ADMISSION_SETTLING,
        "Live units per second this service settled while behind, as learnt (0 while it keeps up)."
    );
    describe_gauge!(
        ADMISSION_ROOM,
        "Live units the backlog may hold: the lower of the capacity times the horizon and the settling rate times half of it."
    );
    describe_gauge!(
        ADMISSION_BACKLOG,
        "Live units accepted and not settled yet, every node's."
    );
    describe_gauge!(
        ADMISSION_ACTIVE_PARTNERS,
        "Partners with live units in the backlog."
    );
}

/// Redis behind the rate limits.
fn describe_rate_limit_redis() {
    describe_gauge!(
        RATE_LIMIT_REDIS_UP,
        "Whether rate-limit windows are counted in Redis (1) or, Redis not answering, in this node's memory (0)."
    );
    describe_counter!(
        RATE_LIMIT_REDIS_FAILURES,
        "Rate-limit calls to Redis that failed or outlasted rate_limit.redis_timeout_ms."
    );
    describe_counter!(
        RATE_LIMIT_REDIS_FALLBACKS,
        "Rate-limit calls answered from this node's memory instead of Redis because Redis was down."
    );
}

/// The route template a request matched, or `unmatched`.
pub(crate) fn route_label(matched: Option<&MatchedPath>) -> &str {
    matched.map_or("unmatched", MatchedPath::as_str)
}

/// The method, or `other` for anything outside the standard set (a client
/// must not be able to mint series).
pub(crate) fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

/// An order accepted by its account actor.
pub(crate) fn order_accepted(mode: &'static str) {
    counter!(ORDERS_ACCEPTED, "mode" => mode).increment(1);
}

/// An order settled at `now`: counted by outcome, and its time since
/// acceptance recorded.
pub(crate) fn order_settled(settled: &Settled, now: DateTime<Utc>) {
    let failure_code = settled.failure_code.map_or("none", |code| code.as_str());
    counter!(
        ORDERS_SETTLED,
        "mode" => settled.mode.as_str(),
        "status" => settled.status.as_str(),
        "failure_code" => failure_code,
    )
    .increment(1);
    histogram!(
        PROVISIONING_DURATION,
        "mode" => settled.mode.as_str(),
        "status" => settled.status.as_str(),
    )
    .record(seconds_between(settled.created_at, now));
}

/// A transaction that committed `batches` partners' batches holding
/// `orders` orders and bound refusals, by `path` (see [`ORDER_COMMITS`]).
pub(crate) fn orders_committed(path: &'static str, batches: usize, orders: usize) {
    counter!(ORDER_COMMITS, "path" => path).increment(1);
    histogram!(ORDER_COMMIT_BATCHES, "path" => path).record(batches as f64);
    histogram!(ORDER_COMMIT_ORDERS, "path" => path).record(orders as f64);
}

/// Seconds from `from` to `to`, never negative (clocks of two nodes may disagree).
pub(crate) fn seconds_between(from: DateTime<Utc>, to: DateTime<Utc>) -> f64 {
    let micros = (to - from).num_microseconds().unwrap_or(i64::MAX).max(0);
    micros as f64 / 1_000_000.0
}

/// One call to a live supplier.
pub(crate) fn supplier_call(
    supplier: &'static str,
    operation: &'static str,
    outcome: &'static str,
    took: Duration,
) {
    let labels = [
        ("supplier", supplier),
        ("operation", operation),
        ("outcome", outcome),
    ];
    counter!(SUPPLIER_CALLS, &labels).increment(1);
    histogram!(SUPPLIER_CALL_DURATION, &labels).record(took.as_secs_f64());
}

/// A live order was refused at admission.
pub(crate) fn admission_refused(reason: &'static str) {
    counter!(ADMISSION_REFUSALS, "reason" => reason).increment(1);
}

/// Admission's latest view.
pub(crate) fn admission_view(
    capacity: f64,
    settling: f64,
    room: u64,
    backlog: u64,
    active_partners: u64,
) {
    gauge!(ADMISSION_CAPACITY).set(capacity);
    gauge!(ADMISSION_SETTLING).set(settling);
    gauge!(ADMISSION_ROOM).set(room as f64);
    gauge!(ADMISSION_BACKLOG).set(backlog as f64);
    gauge!(ADMISSION_ACTIVE_PARTNERS).set(active_partners as f64);
}

/// A periodic backup was taken and verified.
pub(crate) fn backup_taken(at: DateTime<Utc>, bytes: u64) {
    gauge!(BACKUP_LAST).set(at.timestamp() as f64);
    gauge!(BACKUP_BYTES).set(bytes as f64);
    gauge!(BACKUP_AGE).set(0.0);
}

/// The age of the last good backup.
pub(crate) fn backup_age(age: Duration) {
    gauge!(BACKUP_AGE).set(age.as_secs_f64());
}

/// A supplier's breaker opened.
pub(crate) fn supplier_breaker_opened(supplier: &'static str) {
    counter!(SUPPLIER_BREAKER_OPENS, "supplier" => supplier).increment(1);
}

/// Units moved from one supplier to the next.
pub(crate) fn supplier_failover(
    from: &'static str,
    to: &'static str,
    reason: &'static str,
    units: usize,
) {
    counter!(SUPPLIER_FAILOVERS, "from" => from, "to" => to, "reason" => reason)
        .increment(units as u64);
}

/// Whether a supplier takes work now.
pub(crate) fn supplier_up(supplier: &'static str, up: bool) {
    gauge!(SUPPLIER_UP, "supplier" => supplier).set(if up { 1.0 } else { 0.0 });
}

/// The supplier asked us to slow down.
pub(crate) fn supplier_slow_down() {
    counter!(SUPPLIER_SLOW_DOWNS).increment(1);
}

/// The calls a second a node now sends a supplier.
pub(crate) fn supplier_pace(supplier: &'static str, per_second: f64) {
    gauge!(SUPPLIER_PACE, "supplier" => supplier).set(per_second);
}

/// A supplier order of `units` units was written down.
pub(crate) fn supplier_order_opened(mode: &'static str, units: usize) {
    histogram!(SUPPLIER_ORDER_UNITS, "mode" => mode).record(units as f64);
}

/// A deposit moved from one status to another (`none`: it was just created).
pub(crate) fn deposit_transition(from: &str, to: &str) {
    counter!(DEPOSIT_TRANSITIONS, "from" => from.to_owned(), "to" => to.to_owned()).increment(1);
}

/// A supervisor restarted a failed actor.
pub(crate) fn actor_restarted(kind: &'static str) {
    counter!(ACTOR_RESTARTS, "kind" => kind).increment(1);
}

/// A request refused with 429 (`class`: the rate class, or `failed_auth`).
pub(crate) fn rate_limited(class: &'static str) {
    counter!(RATE_LIMIT_REJECTIONS, "class" => class).increment(1);
}

/// Whether rate-limit windows are counted in Redis now.
pub(crate) fn rate_limit_redis_up(up: bool) {
    gauge!(RATE_LIMIT_REDIS_UP).set(if up { 1.0 } else { 0.0 });
}

/// A rate-limit call to Redis failed or outlasted its bound.
pub(crate) fn rate_limit_redis_failure() {
    counter!(RATE_LIMIT_REDIS_FAILURES).increment(1);
}

/// A rate-limit call was answered from memory because Redis was down.
pub(crate) fn rate_limit_redis_fallback() {
    counter!(RATE_LIMIT_REDIS_FALLBACKS).increment(1);
}

/// A key read from the database (not cached, expired or forgotten).
pub(crate) fn key_read() {
    counter!(KEY_READS).increment(1);
}

/// A failed authentication of a partner request, by its error code.
pub(crate) fn auth_failed(code: &'static str) {
    counter!(AUTH_FAILURES, "code" => code).increment(1);
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    #[test]
    fn unknown_methods_share_one_label() {
        assert_eq!(method_label(&Method::GET), "GET");
        assert_eq!(method_label(&Method::PATCH), "PATCH");
        let custom = Method::from_bytes(b"BREW").unwrap();
        assert_eq!(method_label(&custom), "other");
    }

    #[test]
    fn an_unmatched_request_is_labelled_unmatched() {
        assert_eq!(route_label(None), "unmatched");
    }

    #[test]
    fn seconds_between_is_exact_and_never_negative() {
        let from = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let to = from + chrono::Duration::milliseconds(1500);
        assert_eq!(seconds_between(from, to), 1.5);
        assert_eq!(seconds_between(to, from), 0.0);
    }

    #[test]
    fn every_histogram_has_ascending_buckets() {
        for buckets in [
            HTTP_BUCKETS,
            PROVISIONING_BUCKETS,
            SUPPLIER_BUCKETS,
            COMMIT_SIZE_BUCKETS,
        ] {
            assert!(!buckets.is_empty());
            assert!(buckets.windows(2).all(|w| w[0] < w[1]), "{buckets:?}");
        }
        assert!(with_buckets().is_ok());
    }
}
