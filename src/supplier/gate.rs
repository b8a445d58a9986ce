//! The supplier's rate limit, kept on our side: every live supplier call
//! passes [`RateGate::admit`] first.
//!
//! Within a node, calls are spaced evenly (governor, one call per period,
//! no burst), with a small margin so that scheduling jitter never puts one
//! call more than the limit into any one-second window as the supplier counts
//! them. With Redis configured, every node also counts its calls in a shared
//! one-second window and waits for the next window when it is full, so the
//! whole fleet stays under the supplier's limit. An answer that says "slow
//! down" pauses every call of the node for a moment ([`RateGate::slow_down`]).

use std::{
    num::NonZeroU32,
    sync::{Arc, Mutex},
    time::Duration,
};

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use tokio::time::Instant;

use crate::{domain::rate::Window, limits::Limiter, sync::lock};

/// Spacing margin over the exact period, in parts per thousand.
const MARGIN_PER_MILLE: u32 = 25;

/// The gate in front of a supplier.
pub struct RateGate {
    /// Calls per second the supplier accepts; 0 lifts the limit.
    per_second: u32,
    local: Option<DefaultDirectRateLimiter>,
    shared: Option<Arc<Limiter>>,
    /// The name of the shared window (one per supplier account).
    window_name: &'static str,
    paused_until: Mutex<Option<Instant>>,
    /// "Slow down" answers since start.
    slow_downs: std::sync::atomic::AtomicU64,
}

impl RateGate {
    /// A gate of `per_second` calls (0: no limit); `shared` counts across
    /// nodes (pass the Redis limiter, or `None` for one node).
    pub fn new(per_second: u32, shared: Option<Arc<Limiter>>, window_name: &'static str) -> Self {
        let local = NonZeroU32::new(per_second).and_then(|n| {
            let period = Duration::from_secs(1) / n.get() * (1000 + MARGIN_PER_MILLE) / 1000;
            Quota::with_period(period).map(RateLimiter::direct)
        });
        Self {
            per_second,
            shared: if per_second == 0 { None } else { shared },
            window_name,
            local,
            paused_until: Mutex::new(None),
            slow_downs: Default::default(),
        }
    }

    /// The limit in force, in calls per second (0: none).
    pub fn per_second(&self) -> u32 {
        self.per_second
    }

    /// Waits until one more call may go out.
    pub async fn admit(&self) {
        let pause = *lock(&self.paused_until);
        if let Some(until) = pause
            && until > Instant::now()
        {
            tokio::time::sleep_until(until).await;
        }
        if let Some(local) = &self.local {
            local.until_ready().await;
        }
        if let Some(shared) = &self.shared {
            let window = Window {
                limit: self.per_second,
                window_seconds: 1,
            };
            loop {
                let state = shared.hit(self.window_name, window).await;
                if state.allowed {
                    break;
                }
                let wait = state
                    .reset_unix
                    .saturating_mul(1000)
                    .saturating_sub(crate::limits::unix_now_millis());
                tokio::time::sleep(Duration::from_millis(wait.clamp(1, 1000))).await;
            }
        }
    }

    /// The supplier said "too many requests": hold every call for `pause`.
    pub fn slow_down(&self, pause: Duration) {
        let until = Instant::now() + pause;
        let mut paused = lock(&self.paused_until);
        if paused.is_none_or(|current| current < until) {
            *paused = Some(until);
        }
        self.slow_downs
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        crate::metrics::supplier_slow_down();
    }

    /// "Slow down" answers since start.
    pub fn slow_downs(&self) -> u64 {
        self.slow_downs.load(std::sync::atomic::Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn calls_are_spaced_to_stay_under_the_limit() {
        // governor keeps its own (real) clock.
        let gate = RateGate::new(8, None, "test");
        let started = std::time::Instant::now();
        for _ in 0..9 {
            gate.admit().await;
        }
        // Nine calls at eight a second need more than one second.
        assert!(
            started.elapsed() >= Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_down_holds_the_next_call() {
        let gate = RateGate::new(0, None, "test");
        gate.slow_down(Duration::from_secs(2));
        let started = Instant::now();
        gate.admit().await;
        assert!(started.elapsed() >= Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn no_limit_lets_calls_through_at_once() {
        let gate = RateGate::new(0, None, "test");
        let started = Instant::now();
        for _ in 0..100 {
            gate.admit().await;
        }
        assert!(started.elapsed() < Duration::from_millis(1));
    }
}
