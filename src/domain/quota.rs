//! A supplier's limit counted in windows longer than a second (Airalo's is
//! so many calls a minute), learnt from the waits its "slow down" answers
//! name.
//!
//! The pace of [`super::pace`] learns a rate from refusals a second apart.
//! Against a limit of a minute it meets the minute in bursts: calls go out
//! at the learnt rate until the supplier refuses one, and every call then
//! waits out the rest of the minute (tens of seconds), so an order accepted
//! in that time waits for the next minute. A refusal whose named wait is at
//! least [`LONG_WAIT`] names where the supplier's window ends. Two such ends
//! in a row measure the window (the time between them) and its quota (the
//! calls that went out between them and were answered); from then on
//! [`WindowQuota`] spends each window's quota, less a margin, in two parts:
//!
//! - a **burst** of [`BURST_SHARE`] of it at the window's start, for the
//!   calls that gathered before it (after the supplier's wait, a backlog of
//!   several plans' units, each plan's its own call);
//! - the **rest spread evenly** over the window, so that a call waits a
//!   moment for its share of the window, not the rest of the minute.
//!
//! Whatever the calls asked, no window of ours holds more than the quota
//! less the margin, and the allowance not used early in a window is used
//! later in it, never carried into the next. A refusal while the quota
//! paces re-anchors the windows where the supplier says its window ends and
//! takes the calls it answered in ours as the quota (a refusal naming a
//! short wait too, when that wait ends about where our window does); a
//! window in which calls waited for the allowance without a refusal lets
//! the next spend a call more, so that a raised limit is found again, as
//! the pace climbs back.
//!
//! A supplier that documents the length of its window (Airalo counts a
//! minute) needs one named end, not two: [`WindowQuota::documented`] keeps
//! the times of the calls sent within a window's length, and the first
//! refusal naming a long wait learns the window at once, its quota the
//! calls answered since the window the refusal ends began. Otherwise the
//! first window is not spread: until two ends have been named, the pace's
//! own cut and the supplier's wait apply, as they did before.
//! Windows are anchored at the ends the supplier named and then follow one
//! another at the learnt length: a supplier whose windows start with a
//! client's first call after the last one ended (rather than on the clock)
//! sees at most a window's spread calls more in one of its windows, which
//! the margin absorbs, and a refusal re-anchors.
//!
//! Time is a [`Duration`] since an origin the caller chooses, so the
//! arithmetic is pure and tested without a clock.

use std::{collections::VecDeque, time::Duration};

/// A named wait at least this long is the rest of a window, not a second's
/// pause.
pub const LONG_WAIT: Duration = Duration::from_secs(2);
/// The share of a window's quota that may go out at once at its start.
pub const BURST_SHARE: f64 = 0.25;
/// A window's calls are kept to this share of the quota it measured.
pub const MARGIN: f64 = 0.9;
/// A window longer than this is not learnt (a wait this long is an outage's
/// or a day's quota's, not a pace to spread).
const LONGEST_WINDOW: Duration = Duration::from_secs(3600);
/// How late a named end may be: waits are named in whole seconds, counted
/// from the second the call came in.
const NAMED_LATE: Duration = Duration::from_secs(1);

/// Windows learnt from a supplier's named waits, and the calls in them.
#[derive(Debug, Clone, Default)]
pub struct WindowQuota {
    /// Where the last window the supplier named ends, until a window is
    /// learnt (the learnt window then keeps its own start).
    anchor: Option<Duration>,
    /// Calls sent since `anchor`, before a window is learnt.
    sent_since_anchor: u64,
    /// The learnt window, once two named ends measured one (or one named
    /// end the documented window).
    learnt: Option<Learnt>,
    /// The length of window the supplier documents counting its limit in,
    /// if it does.
    documented: Option<Duration>,
    /// When the calls within the documented window (and a second) before
    /// the last one went out, until a window is learnt.
    recent: VecDeque<Duration>,
}

/// A window and its quota, and the calls of the current one.
#[derive(Debug, Clone, Copy)]
struct Learnt {
    /// The window's length.
    length: Duration,
    /// Calls the supplier answers in a window.
    quota: f64,
    /// Where the current window began.
    start: Duration,
    /// Calls sent in the current window.
    sent: u64,
    /// Whether a call waited for the allowance in the current window.
    waited: bool,
    /// Whether the current window began where a refusal said the
    /// supplier's ends: it raises nothing.
    refused: bool,
}

impl WindowQuota {
    /// A quota for a supplier that documents counting its limit in windows
    /// of `length`: the first refusal naming a long wait learns it.
    pub fn documented(length: Duration) -> Self {
        Self {
            documented: Some(length),
            ..Self::default()
        }
    }

    /// The window learnt, if any: its length and the calls a window spends
    /// (the quota less the margin).
    pub fn learnt(&self) -> Option<(Duration, u64)> {
        self.learnt.map(|l| (l.length, l.usable()))
    }

    /// When a call may go out at `now`, if not now: the allowance of the
    /// current window is spent up to `now`.
    pub fn wait_until(&mut self, now: Duration) -> Option<Duration> {
        let learnt = self.learnt.as_mut()?;
        learnt.roll(now);
        let next = learnt.next_allowed();
        (next > now).then(|| {
            learnt.waited = true;
            next
        })
    }

    /// Counts a call going out at `now`.
    pub fn sent(&mut self, now: Duration) {
        match &mut self.learnt {
            Some(learnt) => {
                learnt.roll(now);
                learnt.sent += 1;
            }
            None => {
                if self.anchor.is_some_and(|anchor| now >= anchor) {
                    self.sent_since_anchor += 1;
                }
                if let Some(length) = self.documented {
                    self.recent.push_back(now);
                    while self
                        .recent
                        .front()
                        .is_some_and(|at| *at + length + NAMED_LATE < now)
                    {
                        self.recent.pop_front();
                    }
                }
            }
        }
    }

    /// The supplier refused a call at `now`, naming `wait`, and the refusal
    /// is the first of a new round (calls sent after the last cut). True
    /// when the refusal is a window's and the window explains it: the
    /// caller's per-second cut would then cut what is not the limit.
    pub fn named(&mut self, now: Duration, wait: Duration) -> bool {
        let end = now + wait;
        if let Some(learnt) = &mut self.learnt {
            // A short wait is the window's too when it ends about where
            // ours does: calls spread to the end of a window meet a limit
            // there (a raise probed too far).
            if wait < LONG_WAIT && end + LONG_WAIT < learnt.start + learnt.length {
                return false;
            }
            learnt.refused_at(end);
            return true;
        }
        if wait < LONG_WAIT {
            return false;
        }
        if let Some(length) = self.documented.filter(|length| wait <= *length) {
            self.learn_documented(end, length);
            return true;
        }
        let explained = match self.anchor {
            Some(anchor) => self.learn(end - anchor.min(end)),
            None => false,
        };
        self.anchor = Some(end);
        self.sent_since_anchor = 0;
        explained
    }

    /// Another refusal of the round the last named end began: the window
    /// answered one call fewer than counted.
    pub fn refused_again(&mut self) {
        if let Some(learnt) = &mut self.learnt {
            learnt.quota = (learnt.quota - 1.0).max(1.0);
        }
    }

    /// Learns a window of `length` from the calls sent since the last end;
    /// the window starts where the anchor now moves.
    fn learn(&mut self, length: Duration) -> bool {
        let length = whole_window(length);
        if !(LONG_WAIT..=LONGEST_WINDOW).contains(&length) {
            return false;
        }
        let Some(anchor) = self.anchor else {
            return false;
        };
        // The call just refused was counted as sent.
        let answered = self.sent_since_anchor.saturating_sub(1).max(1);
        self.learnt = Some(Learnt::from(length, answered, anchor + length));
        true
    }

    /// Learns the documented window of `length` from the supplier's window
    /// ending at `end`: its quota is the calls sent since that window began
    /// but the one refused. The end may be named up to a second late, so a
    /// second more is counted (a second's calls of the window before, at
    /// most, which the margin absorbs and a refusal corrects).
    fn learn_documented(&mut self, end: Duration, length: Duration) {
        let began = end.saturating_sub(length + NAMED_LATE);
        let sent = self.recent.iter().filter(|at| **at >= began).count() as u64;
        self.learnt = Some(Learnt::from(length, sent.saturating_sub(1).max(1), end));
        self.recent = VecDeque::new();
    }
}

/// The window two named ends `measured` apart: each end may be up to a
/// second late (waits are named in whole seconds, counted from the second
/// the call came in), so a minute can measure 59 or 61 s, and windows a
/// second off would drift from the supplier's by a second a window. Within
/// a second of whole minutes it is those minutes, else whole seconds.
fn whole_window(measured: Duration) -> Duration {
    let seconds = measured.as_secs_f64();
    let minutes = (seconds / 60.0).round();
    if minutes >= 1.0 && (seconds - minutes * 60.0).abs() <= NAMED_LATE.as_secs_f64() {
        return Duration::from_secs(minutes as u64 * 60);
    }
    Duration::from_secs(seconds.round() as u64)
}

impl Learnt {
    /// A window of `length` starting at `start`, `answered` calls of the
    /// one before it the quota.
    fn from(length: Duration, answered: u64, start: Duration) -> Self {
        Self {
            length,
            quota: answered as f64,
            start,
            sent: 0,
            waited: false,
            refused: false,
        }
    }

    /// Calls a window spends: the quota less the margin, at least one.
    fn usable(&self) -> u64 {
        ((self.quota * MARGIN).floor() as u64).max(1)
    }

    /// Calls allowed at the window's start.
    fn burst(&self) -> f64 {
        (self.usable() as f64 * BURST_SHARE).floor().max(1.0)
    }

    /// Moves to the window of `now`: a window that ended busy (calls
    /// waited) and did not begin at a refusal lets the next spend a call
    /// more.
    fn roll(&mut self, now: Duration) {
        if now < self.start + self.length {
            return;
        }
        if self.waited && !self.refused {
            self.quota += 1.0 / MARGIN;
        }
        let windows = ((now - self.start).as_secs_f64() / self.length.as_secs_f64()).floor();
        self.start += self.length.mul_f64(windows);
        self.sent = 0;
        self.waited = false;
        self.refused = false;
    }

    /// When the allowance of the current window covers one more call: the
    /// burst at once, the rest spread evenly, the next window's start once
    /// it is spent.
    fn next_allowed(&self) -> Duration {
        let usable = self.usable() as f64;
        let next = (self.sent + 1) as f64;
        if next > usable {
            return self.start + self.length;
        }
        let burst = self.burst().min(usable);
        if next <= burst {
            return self.start;
        }
        // The spread calls go out at n/(n+1) of the window at the latest,
        // so the last is still this window's.
        let share = (next - burst) / (usable - burst + 1.0);
        self.start + self.length.mul_f64(share)
    }

    /// A refusal of a call of this window, the supplier's window ending at
    /// `end`: what it answered of ours is the quota, and windows start
    /// there from now on.
    fn refused_at(&mut self, end: Duration) {
        let answered = self.sent.saturating_sub(1).max(1) as f64;
        self.quota = self.quota.min(answered);
        self.start = end;
        self.sent = 0;
        self.waited = false;
        self.refused = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    /// A quota that learnt a minute of 120 answered calls, its window
    /// starting at 120 s.
    fn a_minute_of_120() -> WindowQuota {
        let mut quota = WindowQuota::default();
        // The first refusal names the end of a window at 60 s.
        assert!(!quota.named(secs(50.0), secs(10.0)));
        for i in 0..121 {
            quota.sent(secs(60.0 + f64::from(i) * 0.1));
        }
        // The 121st call of the next window is refused, naming its end.
        assert!(quota.named(secs(72.1), secs(47.9)));
        quota
    }

    #[test]
    fn a_short_wait_learns_nothing() {
        let mut quota = WindowQuota::default();
        assert!(!quota.named(secs(1.0), secs(1.0)));
        assert!(!quota.named(secs(3.0), secs(1.0)));
        assert_eq!(quota.learnt(), None);
        assert_eq!(quota.wait_until(secs(4.0)), None);
    }

    #[test]
    fn two_named_ends_learn_the_window_and_its_quota() {
        let quota = a_minute_of_120();
        assert_eq!(quota.learnt(), Some((secs(60.0), 108)));
    }

    #[test]
    fn a_window_starts_with_a_burst_then_spreads_the_rest() {
        let mut quota = a_minute_of_120();
        // Nothing before the window the supplier named begins.
        assert_eq!(quota.wait_until(secs(119.0)), Some(secs(120.0)));
        // A quarter of 108 at once.
        for _ in 0..27 {
            assert_eq!(quota.wait_until(secs(120.0)), None);
            quota.sent(secs(120.0));
        }
        // The other 81 spread over the minute: the next at 1/82 of it.
        let next = quota.wait_until(secs(120.0)).unwrap();
        assert!(
            (next.as_secs_f64() - (120.0 + 60.0 / 82.0)).abs() < 1e-6,
            "{next:?}"
        );
        // A call that waited past several shares goes at once.
        assert_eq!(quota.wait_until(secs(150.0)), None);
    }

    #[test]
    fn a_spent_window_waits_for_the_next() {
        let mut quota = a_minute_of_120();
        for _ in 0..108 {
            quota.sent(secs(170.0));
        }
        assert_eq!(quota.wait_until(secs(175.0)), Some(secs(180.0)));
        // The next window starts over, one call richer for the wait.
        assert_eq!(quota.wait_until(secs(180.0)), None);
        assert_eq!(quota.learnt(), Some((secs(60.0), 109)));
    }

    #[test]
    fn a_refusal_while_paced_re_anchors_and_lowers_the_quota() {
        let mut quota = a_minute_of_120();
        for _ in 0..80 {
            quota.sent(secs(125.0));
        }
        // Another client shares the account: refused at the 80th.
        assert!(quota.named(secs(126.0), secs(55.0)));
        quota.refused_again();
        assert_eq!(quota.learnt(), Some((secs(60.0), 70)));
        assert_eq!(quota.wait_until(secs(130.0)), Some(secs(181.0)));
        // A window with a refusal raises nothing.
        quota.sent(secs(181.0));
        quota.wait_until(secs(250.0));
        assert_eq!(quota.learnt(), Some((secs(60.0), 70)));
    }

    #[test]
    fn a_documented_minute_is_learnt_from_one_named_end() {
        let mut quota = WindowQuota::documented(secs(60.0));
        // The window before: not counted.
        for i in 0..30 {
            quota.sent(secs(10.0 + f64::from(i) * 0.1));
        }
        // 120 answered in the window from 60 s, the 121st refused, its
        // end named 0.9 s late.
        for i in 0..121 {
            quota.sent(secs(60.0 + f64::from(i) * 0.1));
        }
        assert!(quota.named(secs(72.0), secs(48.9)));
        assert_eq!(quota.learnt(), Some((secs(60.0), 108)));
        // Nothing before the end named; then the burst.
        assert_eq!(quota.wait_until(secs(100.0)), Some(secs(120.9)));
        assert_eq!(quota.wait_until(secs(120.9)), None);
    }

    #[test]
    fn a_wait_longer_than_the_documented_window_is_not_it() {
        let mut quota = WindowQuota::documented(secs(60.0));
        quota.sent(secs(1.0));
        assert!(!quota.named(secs(1.0), secs(300.0)));
        assert!(!quota.named(secs(2.0), secs(1.0)));
        assert_eq!(quota.learnt(), None);
    }

    #[test]
    fn a_minute_measured_a_second_off_is_a_minute() {
        assert_eq!(whole_window(secs(59.2)), secs(60.0));
        assert_eq!(whole_window(secs(60.9)), secs(60.0));
        assert_eq!(whole_window(secs(119.4)), secs(120.0));
        assert_eq!(whole_window(secs(57.6)), secs(58.0));
        assert_eq!(whole_window(secs(9.6)), secs(10.0));
    }

    #[test]
    fn ends_too_close_or_too_far_apart_learn_nothing() {
        let mut quota = WindowQuota::default();
        quota.named(secs(0.0), secs(10.0));
        assert!(
            !quota.named(secs(9.0), secs(2.0)),
            "a second after the last"
        );
        assert!(!quota.named(secs(10.0), secs(4000.0)));
        assert_eq!(quota.learnt(), None);
    }

    proptest! {
        /// Whatever the calls and refusals, once a window is learnt no
        /// window of ours sends more than the quota less its margin, and a
        /// call told to wait is told a later time.
        #[test]
        fn no_window_sends_more_than_it_may(
            steps in proptest::collection::vec((1u64..3000, 0u8..20, 2u64..90), 1..400),
            documented in any::<bool>(),
        ) {
            let mut quota = if documented {
                WindowQuota::documented(Duration::from_secs(60))
            } else {
                WindowQuota::default()
            };
            let mut now = Duration::ZERO;
            let mut window: Option<(Duration, u64)> = None;
            for (gap_ms, action, wait) in steps {
                now += Duration::from_millis(gap_ms);
                if action == 0 {
                    quota.named(now, Duration::from_secs(wait));
                    window = None;
                    continue;
                }
                match quota.wait_until(now) {
                    Some(until) => prop_assert!(until > now),
                    None => {
                        quota.sent(now);
                        if let Some(l) = quota.learnt {
                            let count = match window {
                                Some((start, n)) if start == l.start => n + 1,
                                _ => 1,
                            };
                            prop_assert_eq!(count, l.sent);
                            prop_assert!(count <= l.usable());
                            window = Some((l.start, count));
                        }
                    }
                }
            }
        }
    }
}
