//! Windows counted in Redis, bounded, with this node's memory behind them.
//!
//! The redis crate's `ConnectionManager` reconnects a lost connection inside
//! the call that finds it lost, and by default retries 6 times with
//! exponential backoff (100 ms doubling, with jitter: 9 to 19 s) before it
//! fails that call, and then the next call starts over. So the manager is
//! built with no retries of its own and short time-outs, and each call is
//! bounded again here as a whole (`rate_limit.redis_timeout_ms`).
//!
//! A failed or late call opens a [`Breaker`]: the node counts in memory
//! meanwhile, then one call probes Redis. Once Redis answers again, the next
//! call of each bucket adds what the node counted in memory for a window
//! still running to the shared count, in the same `INCRBY`, so the fleet's
//! windows resume with every request they saw.

use std::{
    sync::{
        Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use ::redis::{
    Client, RedisError, RedisResult,
    aio::{ConnectionManager, ConnectionManagerConfig},
};
use anyhow::Context;
use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{
    MemoryCounters,
    breaker::{Breaker, Change, Permit},
    unix_now_seconds,
};
use crate::{config::RateLimitSettings, domain::time};

/// How long one (re)connection attempt may take. Never waited for by a
/// request longer than its bound: the manager reconnects in a task of its
/// own, and the call awaiting it gives up at the bound.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Attempts to connect at start, [`START_PAUSE`] apart: Redis may come up a
/// moment after the node, but a wrong URL must still stop `serve`.
const START_ATTEMPTS: u32 = 5;
/// Pause between the attempts at start.
const START_PAUSE: Duration = Duration::from_millis(500);

/// Counters in Redis, in memory while Redis is down.
pub struct RedisCounters {
    /// Where the manager connects, to build a fresh one (see [`Self::renew`]).
    client: Client,
    /// How the manager is built.
    config: ConnectionManagerConfig,
    /// The shared connection (a handle: cloned per call).
    connection: Mutex<ConnectionManager>,
    /// Bound on each call, connection included.
    timeout: Duration,
    /// Whether Redis is asked, and since when.
    health: Mutex<Health>,
    /// Windows counted while Redis is down.
    fallback: MemoryCounters,
    /// Calls to Redis that failed or outlasted the bound, since start.
    calls_failed: AtomicU64,
    /// Calls answered from memory because Redis was down, since start.
    calls_in_memory: AtomicU64,
}

/// The breaker and what operators are told about it.
struct Health {
    /// Whether calls go to Redis.
    breaker: Breaker,
    /// When Redis last went down or came back (or the node connected).
    since: DateTime<Utc>,
    /// Times Redis went down since start.
    times_down: u64,
}

/// Redis as one node sees it (`GET /operator/v1/rate-limits`).
#[derive(Debug, Clone, Serialize)]
pub struct RedisView {
    /// Whether this node counts its windows in Redis now (`false`: in its
    /// own memory, Redis being down).
    pub up: bool,
    /// `up`, `down` (counting in memory) or `probing` (one call is asking
    /// Redis whether it is back).
    pub state: &'static str,
    /// When Redis last went down or came back (or the node connected).
    pub since: DateTime<Utc>,
    /// While down: seconds until a call may probe Redis again.
    pub next_probe_in_seconds: Option<f64>,
    /// Times Redis went down since start.
    pub times_down: u64,
    /// Calls to Redis that failed or outlasted the bound, since start.
    pub calls_failed: u64,
    /// Calls answered from this node's memory instead of Redis, since start
    /// (a request makes one or two: its source's failed-authentication
    /// budget is read, then its key's window is counted).
    pub calls_in_memory: u64,
    /// Windows held in this node's memory and still running: their counts
    /// join Redis's when Redis answers again.
    pub windows_in_memory: usize,
    /// The bound on each call, in milliseconds (`rate_limit.redis_timeout_ms`).
    pub timeout_ms: u64,
    /// How long the node stays off Redis after a failure, in milliseconds
    /// (`rate_limit.redis_breaker_open_ms`).
    pub breaker_open_ms: u64,
}

/// Why a call did not count in Redis.
enum CallError {
    /// Redis (or the connection to it) said no.
    Failed(RedisError),
    /// No answer within the bound.
    TimedOut,
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Failed(err) => err.fmt(f),
            Self::TimedOut => f.write_str("no answer within rate_limit.redis_timeout_ms"),
        }
    }
}

impl RedisCounters {
    /// Connects (a few attempts at start) with bounded calls and no retries
    /// inside the manager.
    pub(super) async fn connect(url: &str, settings: &RateLimitSettings) -> anyhow::Result<Self> {
        let client = Client::open(url).context("invalid configuration: `rate_limit.redis_url`")?;
        let timeout = Duration::from_millis(settings.redis_timeout_ms.max(1));
        let config = ConnectionManagerConfig::new()
            .set_number_of_retries(0)
            .set_response_timeout(Some(timeout))
            .set_connection_timeout(Some(CONNECT_TIMEOUT.max(timeout)));
        let mut attempt = 1;
        let connection = loop {
            match ConnectionManager::new_with_config(client.clone(), config.clone()).await {
                Ok(connection) => break connection,
                Err(err) if attempt < START_ATTEMPTS => {
                    tracing::warn!(error = %err, attempt, "Redis (`rate_limit.redis_url`) not reachable yet; trying again");
                    tokio::time::sleep(START_PAUSE).await;
                    attempt += 1;
                }
                Err(err) => {
                    return Err(err).context("connecting to Redis (`rate_limit.redis_url`)");
                }
            }
        };
        crate::metrics::rate_limit_redis_up(true);
        Ok(Self {
            client,
            config,
            connection: Mutex::new(connection),
            timeout,
            health: Mutex::new(Health {
                breaker: Breaker::new(Duration::from_millis(settings.redis_breaker_open_ms)),
                since: time::now(),
                times_down: 0,
            }),
            fallback: MemoryCounters::default(),
            calls_failed: AtomicU64::new(0),
            calls_in_memory: AtomicU64::new(0),
        })
    }

    /// Adds `n` to the bucket's count in the window starting at `start`:
    /// in Redis if it answers within the bound, else in memory.
    pub(super) async fn add(&self, bucket: &str, start: u64, window_seconds: u32, n: u64) -> u64 {
        let permit = self.lock_health().breaker.permit(Instant::now());
        if permit == Permit::Memory {
            return self.count_in_memory(bucket, start, window_seconds, n);
        }
        // What this node counted in memory for this window during an outage
        // joins the shared count now.
        let carried = self.fallback.take(bucket, start);
        let key = format!("esim:rl:{bucket}:{start}");
        match self.incr(&key, window_seconds, n + carried).await {
            Ok(count) => {
                let change = self.update(|breaker| breaker.succeeded(permit));
                say(change, None);
                count
            }
            Err(err) => {
                self.failed(permit, &err);
                self.count_in_memory(bucket, start, window_seconds, n + carried)
            }
        }
    }

    /// One `INCRBY` + `EXPIRE`, bounded as a whole.
    async fn incr(&self, key: &str, window_seconds: u32, n: u64) -> Result<u64, CallError> {
        let mut connection = self.lock_connection().clone();
        // The key expires a little after its window so that a late reader still sees it.
        let mut pipe = ::redis::pipe();
        pipe.atomic()
            .incr(key, n)
            .expire(key, i64::from(window_seconds) + 1);
        let call = async {
            let first: RedisResult<(u64, i64)> = pipe.query_async(&mut connection).await;
            match first {
                // The call that finds the connection lost fails, and the
                // manager starts reconnecting then: one more try meets the
                // new connection, so a restart of Redis needs no breaker.
                Err(err) if err.is_io_error() || err.is_unrecoverable_error() => {
                    pipe.query_async(&mut connection).await
                }
                other => other,
            }
        };
        match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok((count, _))) => Ok(count),
            Ok(Err(err)) => Err(CallError::Failed(err)),
            Err(_) => Err(CallError::TimedOut),
        }
    }

    /// Records a failed call: the breaker, the count, and a fresh connection
    /// after a late probe.
    fn failed(&self, permit: Permit, err: &CallError) {
        self.calls_failed.fetch_add(1, Ordering::Relaxed);
        crate::metrics::rate_limit_redis_failure();
        tracing::debug!(error = %err, ?permit, "rate-limit call to Redis failed");
        if permit == Permit::Probe && matches!(err, CallError::TimedOut) {
            // The manager reconnects only when the connection is dropped; a
            // silent one (a partition, a stopped server) would keep every
            // probe waiting for ever.
            self.renew();
        }
        let change = self.update(|breaker| breaker.failed(permit, Instant::now()));
        say(change, Some(err));
    }

    /// Counts in memory, as the memory backend would.
    fn count_in_memory(&self, bucket: &str, start: u64, window_seconds: u32, n: u64) -> u64 {
        self.calls_in_memory.fetch_add(1, Ordering::Relaxed);
        crate::metrics::rate_limit_redis_fallback();
        self.fallback.add(bucket, start, window_seconds, n)
    }

    /// Moves the breaker; a change is dated, counted and exported under
    /// the same lock, so the gauge follows the changes in their order.
    fn update(&self, apply: impl FnOnce(&mut Breaker) -> Change) -> Change {
        let mut health = self.lock_health();
        let change = apply(&mut health.breaker);
        if change != Change::None {
            health.since = time::now();
            if change == Change::WentDown {
                health.times_down += 1;
            }
            crate::metrics::rate_limit_redis_up(change == Change::CameBack);
        }
        change
    }

    /// Replaces the connection with a new one, made at its first use.
    fn renew(&self) {
        match ConnectionManager::new_lazy_with_config(self.client.clone(), self.config.clone()) {
            Ok(fresh) => {
                // Connect now, in a task of its own: a lazy manager connects
                // only while a call awaits it, and every call gives up at
                // the bound, which may be shorter than a connection takes.
                let mut warm = fresh.clone();
                tokio::spawn(async move {
                    let _: RedisResult<()> = ::redis::cmd("PING").query_async(&mut warm).await;
                });
                *self.lock_connection() = fresh;
            }
            Err(err) => tracing::debug!(error = %err, "could not renew the Redis connection"),
        }
    }

    /// What operators are shown.
    pub(super) fn view(&self) -> RedisView {
        let now = Instant::now();
        let (up, state, since, next_probe, times_down, open_for) = {
            let health = self.lock_health();
            (
                health.breaker.is_closed(),
                health.breaker.state_name(now),
                health.since,
                health.breaker.next_probe_in(now),
                health.times_down,
                health.breaker.open_for(),
            )
        };
        RedisView {
            up,
            state,
            since,
            next_probe_in_seconds: next_probe.map(|d| d.as_secs_f64()),
            times_down,
            calls_failed: self.calls_failed.load(Ordering::Relaxed),
            calls_in_memory: self.calls_in_memory.load(Ordering::Relaxed),
            windows_in_memory: self.fallback.live(unix_now_seconds()),
            timeout_ms: u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX),
            breaker_open_ms: u64::try_from(open_for.as_millis()).unwrap_or(u64::MAX),
        }
    }

    fn lock_health(&self) -> std::sync::MutexGuard<'_, Health> {
        // Never held across an await and nothing under it panics.
        crate::sync::lock(&self.health)
    }

    fn lock_connection(&self) -> std::sync::MutexGuard<'_, ConnectionManager> {
        // Never held across an await and nothing under it panics.
        crate::sync::lock(&self.connection)
    }
}

/// Logs a change of the breaker: once per outage and recovery, not per request.
fn say(change: Change, err: Option<&CallError>) {
    match change {
        Change::None => {}
        Change::WentDown => {
            let reason = err.map(ToString::to_string).unwrap_or_default();
            tracing::warn!(
                error = %reason,
                "Redis is not answering: rate-limit windows and the failed-authentication budget are counted in this node's memory until it does",
            );
        }
        Change::CameBack => {
            tracing::info!("Redis answers again: rate-limit windows are shared again");
        }
    }
}
