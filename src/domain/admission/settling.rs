//! What this service settles a second, learnt from its own backlog.
//!
//! The suppliers' capacity is one bound on the backlog; this service's own
//! pipeline (claims, supplier orders, deliveries, settlements) is another.
//! With the suppliers' limits lifted, or orders of many units, the
//! pipeline can fall behind acceptance: accepted orders then wait longer
//! and longer, and past the provisioning deadline they are refunded. So
//! admission also bounds the backlog by what the service itself settled a
//! second while it had more to do than it could ([`SettlingRate`]).
//!
//! Each reading of the backlog says how many live units were processing
//! then (`before`) and, of those, how many still are at the next reading
//! (`left`): the units between the two settled in that window, whichever
//! node settled them. A window is *busy* when it settled some units and
//! the older work left over is at least as large: the pipeline worked on
//! all it could and did not catch up. Only busy windows say what the
//! pipeline can do. A window that settled nothing while work waited says
//! nothing about the pipeline (no supplier answered, or no node
//! provisions) and is neither learnt from nor counted as caught up: the
//! suppliers' breakers and the provisioning deadline deal with those.

/// One window between two readings of the backlog.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct SettleWindow {
    /// Its length.
    pub seconds: f64,
    /// Live units processing at its start.
    pub before: u64,
    /// Of those, the units still processing at its end.
    pub left: u64,
}

impl SettleWindow {
    /// Units of the window's start settled during it.
    pub(crate) fn settled(&self) -> u64 {
        self.before.saturating_sub(self.left)
    }

    /// Whether it settled nothing while work was waiting: no supplier
    /// answered, or no node provisions; nothing to learn from.
    pub(crate) fn stalled(&self) -> bool {
        self.settled() == 0 && self.left > 0
    }

    /// Whether the pipeline settled some and had at least as much left.
    pub(crate) fn busy(&self) -> bool {
        let settled = self.settled();
        settled > 0 && self.left >= settled
    }
}

/// Weight of a busy window faster than the estimate (a slower one sets it).
const LEARNING_RATE: f64 = 0.3;

/// A running estimate of the units this service settles a second while
/// behind, and whether it bounds admission now.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct SettlingRate {
    /// Units a second, from busy windows (`None`: never busy yet, or
    /// forgotten).
    estimate: Option<f64>,
    /// Busy seconds since the pipeline was last caught up.
    busy_seconds: f64,
    /// Seconds since the last busy window.
    quiet_seconds: f64,
}

impl SettlingRate {
    /// Learns from one window; `forget_after` is how long the pipeline
    /// must stay caught up before the estimate no longer bounds admission.
    pub(crate) fn observe(&mut self, window: SettleWindow, forget_after: f64) {
        if window.seconds.is_nan() || window.seconds <= 0.0 {
            return;
        }
        if window.stalled() {
            return;
        }
        let rate = window.settled() as f64 / window.seconds;
        if window.busy() {
            self.quiet_seconds = 0.0;
            self.busy_seconds += window.seconds;
            // Down at once, up slowly: a backlog admitted at a rate the
            // pipeline no longer keeps is work every later order waits
            // behind, while one admitted too slowly is only refused early.
            self.estimate = Some(match self.estimate {
                Some(estimate) if rate > estimate => estimate + LEARNING_RATE * (rate - estimate),
                _ => rate,
            });
            return;
        }
        self.quiet_seconds += window.seconds;
        if self.quiet_seconds >= forget_after {
            *self = Self::default();
        } else if let Some(estimate) = self.estimate.as_mut() {
            // Not behind now: it settled more than it left, and what it
            // settled it can settle, so the estimate is at least this.
            *estimate = estimate.max(rate);
        }
    }

    /// Units a second that bound admission, once busy windows add up to
    /// `settle_after` seconds (a burst the pipeline absorbs within a few
    /// seconds is not refused); `None` while the pipeline keeps up.
    pub(crate) fn bound(&self, settle_after: f64) -> Option<f64> {
        self.estimate.filter(|_| self.busy_seconds >= settle_after)
    }

    /// The estimate, bounding or not (for operators).
    pub(crate) fn estimate(&self) -> Option<f64> {
        self.estimate
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn window(before: u64, left: u64) -> SettleWindow {
        SettleWindow {
            seconds: 1.0,
            before,
            left,
        }
    }

    #[test]
    fn a_pipeline_that_catches_up_is_never_a_bound() {
        let mut rate = SettlingRate::default();
        for _ in 0..100 {
            rate.observe(window(2_000, 0), 40.0);
        }
        assert_eq!(rate.bound(5.0), None);
        assert_eq!(rate.estimate(), None);
    }

    #[test]
    fn busy_windows_bound_admission_once_they_add_up() {
        let mut rate = SettlingRate::default();
        for second in 1..=5 {
            assert_eq!(rate.bound(5.0), None, "after {second} s");
            rate.observe(window(400_000, 390_000), 40.0);
        }
        assert_eq!(rate.bound(5.0), Some(10_000.0));
    }

    #[test]
    fn windows_that_settle_nothing_teach_nothing_and_forget_nothing() {
        let mut rate = SettlingRate::default();
        for _ in 0..10 {
            rate.observe(window(500, 500), 40.0);
        }
        assert_eq!(rate.estimate(), None);
        assert_eq!(rate.bound(5.0), None);
        for _ in 0..6 {
            rate.observe(window(1_000, 900), 3.0);
        }
        for _ in 0..10 {
            rate.observe(window(900, 900), 3.0);
        }
        assert_eq!(rate.bound(5.0), Some(100.0), "a stall is not a catching up");
    }

    #[test]
    fn caught_up_for_the_whole_horizon_it_is_forgotten() {
        let mut rate = SettlingRate::default();
        for _ in 0..6 {
            rate.observe(window(1_000, 900), 40.0);
        }
        assert_eq!(rate.bound(5.0), Some(100.0));
        for _ in 0..39 {
            rate.observe(window(50, 0), 40.0);
        }
        assert_eq!(rate.bound(5.0), Some(100.0), "not yet a whole horizon");
        rate.observe(window(50, 0), 40.0);
        assert_eq!(rate.bound(5.0), None);
    }

    #[test]
    fn a_slower_busy_window_sets_the_estimate_a_faster_one_raises_it_slowly() {
        let mut rate = SettlingRate::default();
        rate.observe(window(1_000, 900), 40.0);
        rate.observe(window(1_000, 950), 40.0);
        assert_eq!(rate.estimate(), Some(50.0));
        rate.observe(window(1_000, 850), 40.0);
        assert_eq!(rate.estimate(), Some(50.0 + 0.3 * 100.0));
    }

    #[test]
    fn a_quiet_window_faster_than_the_estimate_raises_it() {
        let mut rate = SettlingRate::default();
        for _ in 0..6 {
            rate.observe(window(1_000, 900), 40.0);
        }
        rate.observe(window(300, 0), 40.0);
        assert_eq!(rate.bound(5.0), Some(300.0));
    }

    #[test]
    fn empty_windows_are_ignored() {
        let mut rate = SettlingRate::default();
        rate.observe(
            SettleWindow {
                seconds: 0.0,
                before: 10,
                left: 5,
            },
            40.0,
        );
        assert_eq!(rate, SettlingRate::default());
    }

    proptest! {
        /// The estimate stays within the rates the windows showed, and
        /// bounds nothing before busy windows add up.
        #[test]
        fn the_estimate_stays_within_what_the_windows_showed(
            windows in proptest::collection::vec((0.1f64..5.0, 0u64..100_000, 0u64..100_000), 1..60),
        ) {
            let mut rate = SettlingRate::default();
            let mut busy = 0.0;
            let mut fastest: f64 = 0.0;
            for (seconds, before, left) in windows {
                let window = SettleWindow { seconds, before, left: left.min(before) };
                fastest = fastest.max(window.settled() as f64 / seconds);
                busy = if window.busy() { busy + seconds } else { busy };
                rate.observe(window, f64::INFINITY);
                if let Some(estimate) = rate.estimate() {
                    prop_assert!(estimate >= 0.0 && estimate <= fastest + 1e-6);
                }
                if busy < 5.0 {
                    prop_assert_eq!(rate.bound(5.0), None);
                }
            }
        }
    }
}
