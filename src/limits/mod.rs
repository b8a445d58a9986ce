//! Fixed-window counters for rate limits and the failed-authentication budget.
//!
//! `memory` counts in this process (one node); `redis` counts with
//! `INCR` + `EXPIRE` on a key per window, so every node shares the windows.
//!
//! Redis going away must not become an API outage: limits protect capacity,
//! not money (a conditional debit and a uniqueness constraint do that). So
//! every Redis call is bounded (`rate_limit.redis_timeout_ms`), and after a
//! failure a breaker keeps the node off Redis for a while and counts its
//! windows in its own memory, as the `memory` backend would: requests keep
//! their latency, none is refused for the outage, and each node enforces the
//! limits on its own share until Redis answers a probe ([`redis`]).

mod breaker;
mod redis;

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{SystemTime, UNIX_EPOCH},
};

use serde::Serialize;

use self::redis::RedisCounters;
pub(crate) use self::redis::RedisView;
use crate::{
    config::{RateLimitBackend, RateLimitSettings},
    domain::rate::{Window, WindowState, window_bounds},
};

/// Where windows are counted.
pub enum Limiter {
    /// In this process.
    Memory(MemoryCounters),
    /// In Redis, shared by every node (in memory while Redis is down).
    /// Boxed: it is ten times the size of the memory counters.
    Redis(Box<RedisCounters>),
}

/// Where a node counts its windows, as operators see it (`GET /operator/v1/rate-limits`).
#[derive(Debug, Clone, Serialize)]
pub struct LimiterView {
    /// `memory` or `redis`, as configured.
    pub backend: &'static str,
    /// With the Redis backend: whether this node reaches it, and what it
    /// counted in memory while it did not; `null` with the memory backend.
    pub redis: Option<RedisView>,
}

impl Limiter {
    /// Builds the configured backend; Redis is connected at once so that a
    /// wrong URL stops `serve` at start.
    pub async fn connect(settings: &RateLimitSettings) -> anyhow::Result<Self> {
        match (settings.backend, &settings.redis_url) {
            (RateLimitBackend::Memory, _) => Ok(Self::Memory(MemoryCounters::default())),
            (RateLimitBackend::Redis, Some(url)) => Ok(Self::Redis(Box::new(
                RedisCounters::connect(url, settings).await?,
            ))),
            (RateLimitBackend::Redis, None) => anyhow::bail!("`rate_limit.redis_url` is required"),
        }
    }

    /// Counts one request against `bucket` in the current window of `window`.
    pub async fn hit(&self, bucket: &str, window: Window) -> WindowState {
        let now = unix_now_seconds();
        let (start, reset) = window_bounds(now, window.window_seconds);
        let count = self.add(bucket, start, window.window_seconds, 1).await;
        WindowState::after(count, window, reset)
    }

    /// How many requests `bucket` has used in the current window, without counting one.
    pub async fn used(&self, bucket: &str, window: Window) -> u64 {
        let (start, _) = window_bounds(unix_now_seconds(), window.window_seconds);
        self.add(bucket, start, window.window_seconds, 0).await
    }

    /// Adds `n` (0 only reads) to `bucket`'s window starting at `start`, and
    /// says what it holds now.
    async fn add(&self, bucket: &str, start: u64, window_seconds: u32, n: u64) -> u64 {
        match self {
            Self::Memory(counters) => counters.add(bucket, start, window_seconds, n),
            // Boxed: a Redis round trip is a large state machine that every
            // request's future would otherwise carry (and copy), Redis or not.
            Self::Redis(counters) => Box::pin(counters.add(bucket, start, window_seconds, n)).await,
        }
    }

    /// Where this node counts, and how Redis is doing.
    pub fn view(&self) -> LimiterView {
        match self {
            Self::Memory(_) => LimiterView {
                backend: "memory",
                redis: None,
            },
            Self::Redis(counters) => LimiterView {
                backend: "redis",
                redis: Some(counters.view()),
            },
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

/// In-process counters: one slot per bucket, for its latest window.
#[derive(Default)]
pub struct MemoryCounters {
    /// Bucket -> its window and count.
    windows: Mutex<HashMap<String, Slot>>,
}

/// The count of one bucket in one window.
#[derive(Debug, Clone, Copy)]
struct Slot {
    /// Unix second the window starts at.
    start: u64,
    /// Unix second the window ends at: past it the slot is stale.
    end: u64,
    /// Requests counted in it.
    count: u64,
}

/// Above this many buckets, stale windows are swept on the next write.
const SWEEP_ABOVE: usize = 100_000;

impl MemoryCounters {
    /// Adds `n` to the bucket's count in the window starting at `start`; returns the count.
    fn add(&self, bucket: &str, start: u64, window_seconds: u32, n: u64) -> u64 {
        let mut windows = self.lock();
        if windows.len() > SWEEP_ABOVE {
            // By each slot's own end: buckets of longer windows stay whole.
            let now = unix_now_seconds();
            windows.retain(|_, slot| slot.end > now);
        }
        if n == 0 {
            return windows
                .get(bucket)
                .filter(|slot| slot.start == start)
                .map_or(0, |slot| slot.count);
        }
        let fresh = Slot {
            start,
            end: start + u64::from(window_seconds.max(1)),
            count: 0,
        };
        // Looked up by `&str` first: a bucket's name is copied only when it
        // is new, not on every request it counts.
        let slot = match windows.get_mut(bucket) {
            Some(slot) => slot,
            None => windows.entry(bucket.to_owned()).or_insert(fresh),
        };
        if slot.start != start {
            *slot = fresh;
        }
        slot.count += n;
        slot.count
    }

    /// Removes the bucket's count if it is of the window starting at
    /// `start`, and returns it (0 if there is none).
    fn take(&self, bucket: &str, start: u64) -> u64 {
        let mut windows = self.lock();
        if windows.is_empty() {
            return 0;
        }
        match windows.get(bucket) {
            Some(slot) if slot.start == start => windows.remove(bucket).map_or(0, |s| s.count),
            _ => 0,
        }
    }

    /// Buckets whose window is still running at `now_unix`.
    fn live(&self, now_unix: u64) -> usize {
        self.lock()
            .values()
            .filter(|slot| slot.end > now_unix)
            .count()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Slot>> {
        // The lock is never held across an await, and nothing under it
        // panics, so a poisoned lock can only come from an allocation
        // failure: carry on.
        crate::sync::lock(&self.windows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every request awaits a count: with Redis's round trip boxed, its
    /// future stays small whatever the backend, rather than every request's
    /// future carrying (and copying) Redis's state machine.
    #[test]
    fn a_count_is_a_small_future_whatever_the_backend() {
        let limiter = Limiter::Memory(MemoryCounters::default());
        let window = Window {
            limit: 10,
            window_seconds: 1,
        };
        let hit = std::mem::size_of_val(&limiter.hit("a", window));
        let used = std::mem::size_of_val(&limiter.used("a", window));
        assert!(hit <= 128 && used <= 128, "hit {hit}, used {used} bytes");
    }

    #[test]
    fn memory_counts_per_bucket_and_window_and_reading_counts_nothing() {
        let counters = MemoryCounters::default();
        assert_eq!(counters.add("a", 100, 10, 1), 1);
        assert_eq!(counters.add("a", 100, 10, 1), 2);
        assert_eq!(counters.add("a", 100, 10, 0), 2);
        assert_eq!(counters.add("b", 100, 10, 1), 1);
        assert_eq!(counters.add("a", 110, 10, 0), 0, "another window");
        assert_eq!(counters.add("a", 110, 10, 1), 1, "a new window starts at 1");
    }

    #[test]
    fn take_hands_over_the_current_window_only_and_once() {
        let counters = MemoryCounters::default();
        assert_eq!(counters.take("a", 100), 0);
        counters.add("a", 100, 10, 3);
        assert_eq!(counters.take("a", 90), 0, "not its window");
        assert_eq!(counters.take("a", 100), 3);
        assert_eq!(counters.take("a", 100), 0, "taken");
        assert_eq!(counters.add("a", 100, 10, 0), 0);
    }

    #[test]
    fn live_counts_the_windows_still_running() {
        let counters = MemoryCounters::default();
        counters.add("short", 100, 1, 1);
        counters.add("long", 100, 60, 1);
        assert_eq!(counters.live(100), 2);
        assert_eq!(counters.live(101), 1);
        assert_eq!(counters.live(160), 0);
    }
}
