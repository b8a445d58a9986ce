//! Fixed-window counters for rate limits and the failed-authentication budget.
//!
//! `memory` counts in this process (one node); `redis` counts with
//! `INCR` + `EXPIRE` on a key per window, so every node shares the windows.
//! If Redis cannot be reached the request is let through and the error is
//! logged: limits protect capacity, not money (a conditional debit and a
//! uniqueness constraint do that).

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{SystemTime, UNIX_EPOCH},
};

use anyhow::Context;
use redis::aio::ConnectionManager;

use crate::{
    config::{RateLimitBackend, RateLimitSettings},
    domain::rate::{Window, WindowState, window_bounds},
};

/// Where windows are counted.
pub enum Limiter {
    /// In this process.
    Memory(MemoryCounters),
    /// In Redis, shared by every node.
    Redis(RedisCounters),
}

impl Limiter {
    /// Builds the configured backend; Redis is connected at once so that a
    /// wrong URL stops `serve` at start.
    pub async fn connect(settings: &RateLimitSettings) -> anyhow::Result<Self> {
        match (settings.backend, &settings.redis_url) {
            (RateLimitBackend::Memory, _) => Ok(Self::Memory(MemoryCounters::default())),
            (RateLimitBackend::Redis, Some(url)) => {
                Ok(Self::Redis(RedisCounters::connect(url).await?))
            }
            (RateLimitBackend::Redis, None) => anyhow::bail!("`rate_limit.redis_url` is required"),
        }
    }

    /// Counts one request against `bucket` in the current window of `window`.
    pub async fn hit(&self, bucket: &str, window: Window) -> WindowState {
        let now = unix_now_seconds();
        let (start, reset) = window_bounds(now, window.window_seconds);
        let count = match self {
            Self::Memory(counters) => counters.add(bucket, start, 1),
            Self::Redis(counters) => counters.add(bucket, start, window.window_seconds, 1).await,
        };
        WindowState::after(count, window, reset)
    }

    /// How many requests `bucket` has used in the current window, without counting one.
    pub async fn used(&self, bucket: &str, window: Window) -> u64 {
        let (start, _) = window_bounds(unix_now_seconds(), window.window_seconds);
        match self {
            Self::Memory(counters) => counters.add(bucket, start, 0),
            Self::Redis(counters) => counters.add(bucket, start, window.window_seconds, 0).await,
        }
    }
}

/// Seconds since the Unix epoch.
pub(crate) fn unix_now_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Milliseconds since the Unix epoch.
pub(crate) fn unix_now_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// In-process counters: bucket -> (window start, count).
#[derive(Default)]
pub struct MemoryCounters {
    windows: Mutex<HashMap<String, (u64, u64)>>,
}

/// Above this many buckets, stale windows are swept on the next write.
const SWEEP_ABOVE: usize = 100_000;

impl MemoryCounters {
    /// Adds `n` to the bucket's count in the window starting at `start`; returns the count.
    fn add(&self, bucket: &str, start: u64, n: u64) -> u64 {
        // The lock is never held across an await, and nothing in here panics,
        // so a poisoned lock can only come from an allocation failure: carry on.
        let mut windows = self
            .windows
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if windows.len() > SWEEP_ABOVE {
            windows.retain(|_, (window_start, _)| *window_start >= start);
        }
        if n == 0 {
            return windows
                .get(bucket)
                .filter(|(s, _)| *s == start)
                .map_or(0, |(_, c)| *c);
        }
        let entry = windows.entry(bucket.to_owned()).or_insert((start, 0));
        if entry.0 != start {
            *entry = (start, 0);
        }
        entry.1 += n;
        entry.1
    }
}

/// Counters in Redis.
pub struct RedisCounters {
    connection: ConnectionManager,
}

impl RedisCounters {
    async fn connect(url: &str) -> anyhow::Result<Self> {
        let client =
            redis::Client::open(url).context("invalid configuration: `rate_limit.redis_url`")?;
        let connection = ConnectionManager::new(client)
            .await
            .context("connecting to Redis (`rate_limit.redis_url`)")?;
        Ok(Self { connection })
    }

    async fn add(&self, bucket: &str, start: u64, window_seconds: u32, n: u64) -> u64 {
        let key = format!("esim:rl:{bucket}:{start}");
        let mut connection = self.connection.clone();
        // The key expires a little after its window so that a late reader still sees it.
        let result: redis::RedisResult<(u64, i64)> = redis::pipe()
            .atomic()
            .incr(&key, n)
            .expire(&key, i64::from(window_seconds) + 1)
            .query_async(&mut connection)
            .await;
        match result {
            Ok((count, _)) => count,
            Err(err) => {
                tracing::error!(error = %err, "rate-limit counter unavailable; letting the request through");
                0
            }
        }
    }
}
