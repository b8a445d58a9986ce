//! The supplier's rate limit, kept on our side: every live supplier call
//! passes [`RateGate::admit`] first.
//!
//! Within a node, calls are spaced evenly (governor, one call per period,
//! no burst), with a small margin so that scheduling jitter never puts one
//! call more than the limit into any one-second window as the supplier counts
//! them. With Redis configured, every node also counts its calls in a shared
//! one-second window and waits for the next window when it is full, so the
//! whole fleet stays under the supplier's limit.
//!
//! The configured limit may be wrong, or missing (0). An answer that says
//! "slow down" ([`RateGate::slow_down`]) pauses every call of the node for the
//! wait it names and teaches the node's [`Pace`]: while the supplier takes
//! fewer calls than the configured limit, calls go out one at a time, in the
//! order they came, spaced at the learnt rate, so the calls that queued
//! during a pause do not all go out when it ends.

use std::{
    num::NonZeroU32,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use tokio::time::Instant;

use crate::{
    domain::{
        pace::{Pace, Pass},
        rate::Window,
    },
    limits::Limiter,
    sync::lock,
};

/// Spacing margin over the exact period, in parts per thousand.
const MARGIN_PER_MILLE: u32 = 25;
/// [`RateGate::learnt`] while no pace is learnt: not the bits of any rate
/// the pace holds (those are finite and at least its floor).
const NOT_LEARNT: u64 = u64::MAX;

/// The gate in front of a supplier.
pub struct RateGate {
    /// Calls per second the supplier accepts; 0 lifts the limit.
    per_second: u32,
    /// Spaces this node's calls at the configured limit.
    local: Option<DefaultDirectRateLimiter>,
    /// Counts every node's calls in a shared window (Redis).
    shared: Option<Arc<Limiter>>,
    /// The name of the shared window (one per supplier account).
    window_name: &'static str,
    /// The supplier's name on metrics.
    supplier: &'static str,
    /// The pace learnt from "slow down" answers, and its pause.
    pace: Mutex<Pace>,
    /// What the pace's time counts from.
    origin: Instant,
    /// Held by the call waiting for the pace, so that waiting calls go out
    /// in the order they came, one at a time.
    turn: tokio::sync::Mutex<()>,
    /// "Slow down" answers since start.
    slow_downs: AtomicU64,
    /// The pace's learnt rate as `f64` bits ([`NOT_LEARNT`]: none), copied
    /// at every change so that readers (admission, on the order path) need
    /// not take the pace's lock.
    learnt: AtomicU64,
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
            supplier: window_name,
            local,
            pace: Mutex::new(Pace::new(per_second)),
            origin: Instant::now(),
            turn: tokio::sync::Mutex::new(()),
            slow_downs: Default::default(),
            learnt: AtomicU64::new(NOT_LEARNT),
        }
    }

    /// The same gate for a supplier that documents counting its limit in
    /// windows of `length`: its pace learns the window from the first
    /// refusal naming a long wait, not from two.
    pub fn counting_in(mut self, length: Duration) -> Self {
        self.pace = Mutex::new(Pace::new(self.per_second).with_window(length));
        self
    }

    /// The same gate, naming its supplier on metrics.
    pub fn for_supplier(mut self, supplier: &'static str) -> Self {
        self.supplier = supplier;
        crate::metrics::supplier_pace(supplier, f64::from(self.per_second));
        self
    }

    /// The limit configured, in calls per second (0: none).
    pub fn per_second(&self) -> u32 {
        self.per_second
    }

    /// The rate learnt from "slow down" answers, in calls a second, while it
    /// paces below the configured limit.
    pub fn learnt_per_second(&self) -> Option<f64> {
        let bits = self.learnt.load(Ordering::Relaxed);
        (bits != NOT_LEARNT).then(|| f64::from_bits(bits))
    }

    /// Calls a second the supplier takes now, as learnt from its "slow
    /// down" answers: the lesser of the pace learnt and the learnt window's
    /// calls spread over it (a minute's 108 calls are 1.8 a second, however
    /// fast a burst of them goes out); `None` while nothing is learnt.
    /// Read where supplier orders are placed, not on the order path, so
    /// the window is read under the pace's lock.
    pub fn paced_per_second(&self) -> Option<f64> {
        let window = self
            .window()
            .map(|(length, calls)| calls as f64 / length.as_secs_f64());
        match (self.learnt_per_second(), window) {
            (Some(pace), Some(window)) => Some(pace.min(window)),
            (pace, window) => pace.or(window),
        }
    }

    /// Waits until one more call may go out; the pass it carries to
    /// [`RateGate::slow_down`] if the supplier answers "slow down".
    pub async fn admit(&self) -> Pass {
        let pass = self.paced().await;
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
        pass
    }

    /// Waits for the pause and the learnt pace, in turn.
    async fn paced(&self) -> Pass {
        let _turn = self.turn.lock().await;
        loop {
            let now = self.origin.elapsed();
            match self.with_pace(|pace| pace.try_send(now)) {
                Ok(pass) => return pass,
                Err(until) => tokio::time::sleep_until(self.origin + until).await,
            }
        }
    }

    /// Runs `change` on the pace and publishes the learnt rate if it moved
    /// (a call going out or an answer may end a busy second and raise it),
    /// and logs a window learnt or lowered.
    fn with_pace<R>(&self, change: impl FnOnce(&mut Pace) -> R) -> R {
        let (result, before, after) = {
            let mut pace = lock(&self.pace);
            let before = Learnt::of(&pace);
            let result = change(&mut pace);
            (result, before, Learnt::of(&pace))
        };
        if after.rate != before.rate {
            self.pace_changed(before.rate, after.rate);
        }
        if let Some((length, calls)) = after.window
            && before.window.is_none_or(|(_, before)| calls < before)
        {
            self.window_lowered(length, calls);
        }
        result
    }

    /// A window learnt from the supplier's named waits, or lowered by a
    /// refusal (a raise of a call a window is not logged).
    fn window_lowered(&self, length: Duration, calls: u64) {
        tracing::warn!(
            supplier = self.supplier,
            window_seconds = length.as_secs(),
            requests_per_window = calls,
            "supplier calls spread over the supplier's window, a burst at its start"
        );
    }

    /// The supplier's window learnt from its named waits, if any: its length
    /// and the calls this node spends in one.
    pub fn window(&self) -> Option<(Duration, u64)> {
        lock(&self.pace).window()
    }

    /// Publishes a new pace; a cut is logged.
    fn pace_changed(&self, before: Option<f64>, after: Option<f64>) {
        self.learnt
            .store(after.map_or(NOT_LEARNT, f64::to_bits), Ordering::Relaxed);
        let configured = f64::from(self.per_second);
        crate::metrics::supplier_pace(self.supplier, after.unwrap_or(configured));
        let cut = match (before, after) {
            (_, None) => false,
            (None, Some(_)) => true,
            (Some(before), Some(after)) => after < before,
        };
        if cut {
            tracing::warn!(
                supplier = self.supplier,
                configured_per_second = self.per_second,
                learnt_per_second = after,
                "supplier calls paced lower after it asked to slow down"
            );
        }
    }

    /// The supplier answered the call of `pass` with "too many requests":
    /// the first such answer of a round holds every call for `pause` and
    /// cuts the pace when the pause ends.
    pub fn slow_down(&self, pass: Pass, pause: Duration) {
        let now = self.origin.elapsed();
        let cut = self.with_pace(|pace| pace.slowed(pass, now, pause));
        self.slow_downs.fetch_add(1, Ordering::Relaxed);
        crate::metrics::supplier_slow_down();
        if cut {
            tracing::warn!(
                supplier = self.supplier,
                pause_ms = pause.as_millis() as u64,
                "supplier asked to slow down; every call of this node pauses"
            );
        }
    }

    /// Holds every call for `pause` without teaching the pace (a limit of
    /// one endpoint that every call needs first).
    pub fn hold(&self, pause: Duration) {
        let now = self.origin.elapsed();
        lock(&self.pace).hold(now + pause);
        self.slow_downs.fetch_add(1, Ordering::Relaxed);
        crate::metrics::supplier_slow_down();
    }

    /// "Slow down" answers since start.
    pub fn slow_downs(&self) -> u64 {
        self.slow_downs.load(Ordering::Relaxed)
    }
}

/// What a pace has learnt, read before and after a change.
struct Learnt {
    /// The learnt rate, in calls a second.
    rate: Option<f64>,
    /// The learnt window and the calls spent in one.
    window: Option<(Duration, u64)>,
}

impl Learnt {
    fn of(pace: &Pace) -> Self {
        Self {
            rate: pace.learnt(),
            window: pace.window(),
        }
    }
}

/// Test-only: teaching a gate a pace.
#[cfg(test)]
impl RateGate {
    /// Sends a burst of `answered + refused` calls that the supplier meets
    /// with `answered` answers and `refused` "slow down" answers naming
    /// `pause`.
    pub(crate) async fn met_burst(&self, answered: usize, refused: usize, pause: Duration) {
        let mut passes = Vec::new();
        for _ in 0..answered + refused {
            passes.push(self.admit().await);
        }
        for pass in &passes[answered..] {
            self.slow_down(*pass, pause);
        }
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
        let pass = gate.admit().await;
        gate.slow_down(pass, Duration::from_secs(2));
        let started = Instant::now();
        gate.admit().await;
        assert!(started.elapsed() >= Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn after_a_slow_down_the_queued_calls_go_out_at_the_learnt_pace() {
        let gate = Arc::new(RateGate::new(0, None, "test"));
        // A burst of 20 the supplier met with 4 answers and 16 refusals.
        gate.met_burst(4, 16, Duration::from_secs(1)).await;
        assert_eq!(gate.slow_downs(), 16);
        // Ten calls queue during the pause.
        let started = Instant::now();
        let calls: Vec<_> = (0..10)
            .map(|_| {
                let gate = gate.clone();
                tokio::spawn(async move {
                    gate.admit().await;
                    Instant::now()
                })
            })
            .collect();
        let mut sent = Vec::new();
        for call in calls {
            sent.push(call.await.unwrap());
        }
        sent.sort();
        let learnt = gate.learnt_per_second().expect("a pace learnt");
        assert!(learnt <= 4.0, "{learnt}");
        // None before the pause ends, then one at a time at the pace.
        assert!(sent[0] >= started + Duration::from_secs(1));
        for pair in sent.windows(2) {
            assert!(
                pair[1] - pair[0]
                    >= Duration::from_secs_f64(1.0 / learnt) - Duration::from_millis(1)
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_hold_pauses_every_call_and_learns_nothing() {
        let gate = RateGate::new(0, None, "test");
        gate.hold(Duration::from_secs(3));
        let started = Instant::now();
        gate.admit().await;
        assert!(started.elapsed() >= Duration::from_secs(3));
        assert_eq!(gate.learnt_per_second(), None);
    }

    /// A supplier taking 60 calls a minute (minutes from the start), its
    /// refusals naming the rest of the minute; a caller always ready, for
    /// four minutes. The refusals from `learnt_by` on.
    async fn four_minutes_of_60_a_minute(gate: &RateGate, learnt_by: Duration) -> u32 {
        let origin = Instant::now();
        let (mut minute, mut count, mut refusals_after) = (0, 0, 0);
        while origin.elapsed() < Duration::from_secs(240) {
            let pass = gate.admit().await;
            let at = origin.elapsed();
            if at.as_secs() / 60 != minute {
                (minute, count) = (at.as_secs() / 60, 0);
            }
            if count < 60 {
                count += 1;
                continue;
            }
            refusals_after += u32::from(at >= learnt_by);
            gate.slow_down(pass, Duration::from_secs((minute + 1) * 60 - at.as_secs()));
        }
        refusals_after
    }

    /// Learnt as 54 (60 less the margin), one more for each busy window.
    fn a_minute_of_54_or_more(gate: &RateGate) {
        let (length, calls) = gate.window().expect("a window learnt");
        assert_eq!(length, Duration::from_secs(60));
        assert!((54..60).contains(&calls), "{calls}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_limit_a_minute_is_learnt_from_two_named_ends_and_spread() {
        let gate = RateGate::new(0, None, "test");
        let refused = four_minutes_of_60_a_minute(&gate, Duration::from_secs(121)).await;
        a_minute_of_54_or_more(&gate);
        assert_eq!(refused, 0);
        assert_eq!(gate.slow_downs(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_documented_minute_is_learnt_from_the_first_named_end() {
        let gate = RateGate::new(0, None, "test").counting_in(Duration::from_secs(60));
        let refused = four_minutes_of_60_a_minute(&gate, Duration::from_secs(61)).await;
        a_minute_of_54_or_more(&gate);
        assert_eq!(refused, 0);
        assert_eq!(gate.slow_downs(), 1);
        // No per-second pace was cut; the minute's calls spread over it
        // are what the supplier takes a second.
        assert_eq!(gate.learnt_per_second(), None);
        let (length, calls) = gate.window().expect("a window learnt");
        assert_eq!(
            gate.paced_per_second(),
            Some(calls as f64 / length.as_secs_f64())
        );
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
