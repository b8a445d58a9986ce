//! The pace of calls to a supplier, learnt from its "slow down" answers.
//!
//! A supplier may take fewer calls a second than this service was told, or
//! this service may have been told nothing (`requests_per_second = 0`).
//! Pausing every call for a moment on each "slow down" answer is not enough
//! on its own: the calls that queued during the pause all go out when it
//! ends, meet the limit again, and pause again, so the supplier takes a
//! handful of calls a pause and refuses the rest, and the refused calls'
//! retries back off further still. [`Pace`] learns a rate instead, the way
//! TCP learns a window, and spaces the calls at it:
//!
//! - The first "slow down" answer to a call of the current round starts a
//!   pause and a new round (answers to calls sent before it say nothing about
//!   the rate that follows, so they cut nothing). When the pause ends the
//!   rate is cut to [`KEEP_ON_CUT`] of the rate in force, and to no more
//!   than [`MARGIN`] of what the supplier answered in the second before the
//!   first refusal (the calls sent then less the round's refusals), though
//!   never below `KEEP_ON_CUT`² of the rate in force in one cut (that second
//!   need not be the supplier's window). With no rate in force, what the
//!   supplier answered alone: a burst it met with four answers and a
//!   hundred refusals is paced at about four calls a second at once, not
//!   halved seven times.
//! - A second in which calls had to wait for the rate, without a refusal,
//!   raises it: by [`CLIMB`] while it is below the rate the last cut came
//!   at, by [`PROBE`] once it is near it (the limit is there).
//! - A rate that climbs back to the configured limit is dropped: the
//!   configured limit paces again.
//! - A refusal naming a wait of [`super::quota::LONG_WAIT`] or more names
//!   the end of a window longer than a second; once two such ends measured
//!   one (or one did, for a supplier that documents its window's length:
//!   [`Pace::with_window`]), [`WindowQuota`] spends each window's quota (a burst at its start,
//!   the rest spread over it), and the window's refusals cut no rate: the
//!   supplier was not counting seconds.
//!
//! Time is a [`Duration`] since an origin the caller chooses, so the
//! arithmetic is pure and tested without a clock.

use std::time::Duration;

use super::quota::WindowQuota;

/// A cut keeps this share of the rate in force.
pub const KEEP_ON_CUT: f64 = 0.7;
/// A cut paces at no more than this share of what the supplier answered in
/// the second before the refusal.
pub const MARGIN: f64 = 0.9;
/// Share a busy second adds to a rate below the one the last cut came at.
pub const CLIMB: f64 = 0.05;
/// Share a busy second adds once the rate is near the one the last cut came
/// at.
pub const PROBE: f64 = 0.01;
/// "Near" the rate the last cut came at: at least this share of it.
const NEAR: f64 = 0.95;
/// Smallest rise of a busy second, in calls a second: a slow rate still
/// climbs back within seconds.
const MIN_STEP: f64 = 0.1;
/// The learnt rate never falls below this, in calls a second.
pub const FLOOR: f64 = 0.1;
/// The first rate learnt (with no limit configured) is at least this.
const FIRST_FLOOR: f64 = 1.0;
/// A call that asks again within this long after its slot waited through
/// the seconds before it: they were busy, though no call went out in them.
const ONE_SECOND: Duration = Duration::from_secs(1);

/// What a call carries from the pace to its answer: the round it was sent in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pass {
    /// The round of the pace when the call went out.
    round: u64,
}

/// The learnt pace of one supplier's calls.
#[derive(Debug, Clone)]
pub struct Pace {
    /// The configured limit in calls a second (`None`: not told).
    ceiling: Option<f64>,
    /// The learnt rate in calls a second (`None`: nothing learnt, the
    /// configured limit applies, if any).
    learnt: Option<f64>,
    /// The rate in force when the last cut came: the limit is near it.
    cut_from: Option<f64>,
    /// Bumped by every cut; a refusal cuts only for a call of the current round.
    round: u64,
    /// A cut measured, applied when its pause ends.
    pending: Option<Pending>,
    /// No call goes out before this.
    paused_until: Duration,
    /// When the next call may go out at the learnt rate.
    next_slot: Duration,
    /// Calls sent, counted by second.
    sends: SlidingCount,
    /// The current second, for raises.
    second: Second,
    /// The supplier's window longer than a second, once learnt.
    windows: WindowQuota,
    /// The round whose first refusal the window explained: its other
    /// refusals lower the window's quota.
    window_round: Option<u64>,
}

/// A cut waiting for its pause to end.
#[derive(Debug, Clone, Copy)]
struct Pending {
    /// The round the refusals answer.
    round: u64,
    /// Calls sent in the second before the first refusal.
    sent: f64,
    /// Refusals of that round so far.
    refused: u64,
}

impl Pace {
    /// A pace under a configured limit of `ceiling` calls a second (0: none).
    pub fn new(ceiling: u32) -> Self {
        Self {
            ceiling: (ceiling > 0).then(|| f64::from(ceiling)),
            learnt: None,
            cut_from: None,
            round: 0,
            pending: None,
            paused_until: Duration::ZERO,
            next_slot: Duration::ZERO,
            sends: SlidingCount::default(),
            second: Second::default(),
            windows: WindowQuota::default(),
            window_round: None,
        }
    }

    /// The same pace for a supplier that documents counting its limit in
    /// windows of `length`: one named end learns the window.
    pub fn with_window(mut self, length: Duration) -> Self {
        self.windows = WindowQuota::documented(length);
        self
    }

    /// The supplier's window learnt from its named waits, if any: its
    /// length and the calls this pace spends in one.
    pub fn window(&self) -> Option<(Duration, u64)> {
        self.windows.learnt()
    }

    /// The learnt rate, if one paces (below the configured limit).
    pub fn learnt(&self) -> Option<f64> {
        self.learnt
    }

    /// Whether a call may go out at `now`: its pass, or when to ask again.
    pub fn try_send(&mut self, now: Duration) -> Result<Pass, Duration> {
        self.roll(now);
        if now < self.paused_until {
            return Err(self.paused_until);
        }
        self.apply_pending();
        if let Some(until) = self.windows.wait_until(now) {
            return Err(until);
        }
        if let Some(rate) = self.learnt {
            if now < self.next_slot {
                self.second.busy = true;
                return Err(self.next_slot);
            }
            self.next_slot = now + Duration::from_secs_f64(1.0 / rate);
        }
        self.sends.add(now);
        self.windows.sent(now);
        Ok(Pass { round: self.round })
    }

    /// The supplier answered a call sent with `pass` with "slow down",
    /// naming a `pause`. True when it began a new round (and a pause).
    pub fn slowed(&mut self, pass: Pass, now: Duration, pause: Duration) -> bool {
        self.roll(now);
        if pass.round == self.round {
            // A pass of this round was given after the last cut applied, so
            // nothing is pending; applied anyway, a cut is never lost.
            self.apply_pending();
            self.window_round = None;
            if self.windows.named(now, pause) {
                // The window explains the refusal: no rate to cut.
                self.window_round = Some(self.round);
            } else {
                self.pending = Some(Pending {
                    round: self.round,
                    sent: self.sends.last_second(now),
                    refused: 1,
                });
            }
            self.round += 1;
            self.paused_until = self.paused_until.max(now + pause);
            self.second.cut = true;
            return true;
        }
        if let Some(pending) = &mut self.pending
            && pending.round == pass.round
        {
            pending.refused += 1;
        }
        if self.window_round == Some(pass.round) {
            self.windows.refused_again();
        }
        false
    }

    /// Holds every call until `until`, learning nothing.
    pub fn hold(&mut self, until: Duration) {
        self.paused_until = self.paused_until.max(until);
    }

    /// The rate in force, the learnt one or else the configured limit.
    fn in_force(&self) -> Option<f64> {
        self.learnt.or(self.ceiling)
    }

    /// Cuts the rate by what the pending round measured.
    fn apply_pending(&mut self) {
        let Some(pending) = self.pending.take() else {
            return;
        };
        let answered = (pending.sent - pending.refused as f64).max(0.0);
        let measured = answered * MARGIN;
        let cut = match self.in_force() {
            // The second before a refusal may not be the supplier's window
            // (nor all its calls ours, when other clients share the
            // account): a cut keeps at least about half the rate.
            Some(rate) => (rate * KEEP_ON_CUT).min(measured.max(rate * KEEP_ON_CUT * KEEP_ON_CUT)),
            // Nothing to cut from: what the supplier answered, at least one
            // call a second to climb from.
            None => measured.max(FIRST_FLOOR),
        };
        self.cut_from = Some(self.in_force().unwrap_or(answered).max(FLOOR));
        self.learnt = Some(cut.max(FLOOR));
    }

    /// Moves to the second of `now`, raising the rate if the one that ended
    /// was busy without a cut.
    fn roll(&mut self, now: Duration) {
        let index = now.as_secs();
        if index == self.second.index {
            return;
        }
        let Second { busy, cut, .. } = self.second;
        // Seconds skipped entirely (no call in them) were busy only when a
        // call waited through them for its slot: a rate below one call a
        // second spaces its calls more than a second apart.
        let next = index == self.second.index + 1;
        let waited_through = now < self.next_slot + ONE_SECOND;
        if busy && !cut && (next || waited_through) {
            self.raise();
        }
        self.second = Second {
            index,
            ..Second::default()
        };
    }

    /// One busy second's rise.
    fn raise(&mut self) {
        let Some(rate) = self.learnt else {
            return;
        };
        let near = self.cut_from.is_none_or(|from| rate >= from * NEAR);
        let share = if near { PROBE } else { CLIMB };
        let raised = rate + (rate * share).max(MIN_STEP);
        self.learnt = match self.ceiling {
            Some(ceiling) if raised >= ceiling => None,
            _ => Some(raised),
        };
    }
}

/// One second of the pace's raises.
#[derive(Debug, Clone, Copy, Default)]
struct Second {
    /// Its index since the origin.
    index: u64,
    /// Whether a call waited for the rate in it.
    busy: bool,
    /// Whether a cut came in it.
    cut: bool,
}

/// Events counted in one-second buckets, read as a sliding second.
#[derive(Debug, Clone, Copy, Default)]
struct SlidingCount {
    /// The current bucket's second.
    index: u64,
    /// Events in the current bucket.
    current: u64,
    /// Events in the bucket before it.
    previous: u64,
}

impl SlidingCount {
    fn advance(&mut self, now: Duration) {
        let index = now.as_secs();
        if index == self.index {
            return;
        }
        self.previous = if index == self.index + 1 {
            self.current
        } else {
            0
        };
        self.current = 0;
        self.index = index;
    }

    fn add(&mut self, now: Duration) {
        self.advance(now);
        self.current += 1;
    }

    /// Events in the second before `now`: the current bucket and the part
    /// of the previous one still within the second, weighted evenly.
    fn last_second(&mut self, now: Duration) -> f64 {
        self.advance(now);
        let into = f64::from(now.subsec_nanos()) / 1e9;
        self.current as f64 + self.previous as f64 * (1.0 - into)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    /// Sends `n` calls at `at` (none paced yet); their passes.
    fn burst(pace: &mut Pace, at: Duration, n: usize) -> Vec<Pass> {
        (0..n).map(|_| pace.try_send(at).unwrap()).collect()
    }

    #[test]
    fn without_a_refusal_nothing_is_learnt_and_nothing_waits() {
        let mut pace = Pace::new(0);
        assert_eq!(burst(&mut pace, ms(10), 500).len(), 500);
        assert_eq!(pace.learnt(), None);
    }

    #[test]
    fn a_burst_met_with_four_answers_is_paced_near_four_a_second() {
        let mut pace = Pace::new(0);
        let passes = burst(&mut pace, ms(100), 100);
        // The supplier answered four and refused the other 96.
        assert!(pace.slowed(passes[4], ms(105), Duration::from_secs(1)));
        for pass in &passes[5..] {
            assert!(!pace.slowed(*pass, ms(106), Duration::from_secs(1)));
        }
        // Paused a second.
        assert_eq!(pace.try_send(ms(500)), Err(ms(1105)));
        pace.try_send(ms(1105)).unwrap();
        let rate = pace.learnt().unwrap();
        assert!((rate - 4.0 * MARGIN).abs() < 1e-9, "{rate}");
        // The next call waits for its slot.
        let slot = pace.try_send(ms(1106)).unwrap_err();
        assert_eq!(slot, ms(1105) + Duration::from_secs_f64(1.0 / rate));
    }

    #[test]
    fn a_refusal_of_an_earlier_round_cuts_nothing() {
        let mut pace = Pace::new(8);
        let before = pace.try_send(ms(0)).unwrap();
        let after = {
            let first = pace.try_send(ms(1)).unwrap();
            assert!(pace.slowed(first, ms(2), ms(10)));
            pace.try_send(ms(20)).unwrap()
        };
        let learnt = pace.learnt();
        assert!(!pace.slowed(before, ms(30), ms(10)));
        assert_eq!(pace.learnt(), learnt);
        assert!(pace.slowed(after, ms(40), ms(10)));
    }

    #[test]
    fn a_configured_limit_is_cut_from_and_climbed_back_to() {
        let mut pace = Pace::new(8);
        let sent = burst(&mut pace, ms(0), 8);
        pace.slowed(sent[7], ms(900), ms(100));
        pace.try_send(ms(1000)).unwrap();
        let cut = pace.learnt().unwrap();
        assert!(cut <= 8.0 * KEEP_ON_CUT + 1e-9, "{cut}");
        // Busy seconds (calls waiting for their slot) climb back to the
        // configured limit, which then paces alone: within a minute.
        let mut now = ms(1000);
        for _ in 0..3000 {
            now += ms(20);
            let _ = pace.try_send(now);
            if pace.learnt().is_none() {
                break;
            }
        }
        assert_eq!(pace.learnt(), None);
    }

    #[test]
    fn a_rate_below_one_call_a_second_climbs_back_too() {
        let mut pace = Pace::new(1);
        let sent = pace.try_send(ms(0)).unwrap();
        pace.slowed(sent, ms(10), ms(100));
        pace.try_send(ms(200)).unwrap();
        let cut = pace.learnt().unwrap();
        assert!(cut < 1.0, "{cut}");
        // A caller with calls always waiting asks again at each slot, more
        // than a second apart: the seconds between are busy, and the rate
        // climbs back to the configured limit, which then paces alone.
        let mut now = ms(200);
        for _ in 0..100 {
            now = match pace.try_send(now) {
                Ok(_) => now + ms(1),
                Err(slot) => slot,
            };
            if pace.learnt().is_none() {
                break;
            }
        }
        assert_eq!(pace.learnt(), None);
    }

    #[test]
    fn idle_seconds_raise_nothing() {
        let mut pace = Pace::new(0);
        let pass = pace.try_send(ms(0)).unwrap();
        pace.slowed(pass, ms(1), ms(10));
        pace.try_send(ms(20)).unwrap();
        let learnt = pace.learnt();
        pace.try_send(ms(60_000)).unwrap();
        assert_eq!(pace.learnt(), learnt);
    }

    /// A supplier counting calls in minutes on the clock, as Airalo's
    /// simulator does: a refused call's wait runs to its minute's end, in
    /// whole seconds counted from the second the call came in.
    struct MinuteLimit {
        limit: u32,
        minute: u64,
        count: u32,
    }

    impl MinuteLimit {
        /// The wait named if the call at `at` is refused.
        fn call(&mut self, at: Duration) -> Option<Duration> {
            let minute = at.as_secs() / 60;
            if minute != self.minute {
                (self.minute, self.count) = (minute, 0);
            }
            if self.count >= self.limit {
                return Some(Duration::from_secs((minute + 1) * 60 - at.as_secs()));
            }
            self.count += 1;
            None
        }
    }

    /// Twenty minutes of a caller that always has a call waiting, against
    /// a supplier answering 120 calls a clock minute: when each call went
    /// out, and when each refused one did.
    fn twenty_minutes_of_a_limit_a_minute(mut pace: Pace) -> (Pace, Vec<Duration>, Vec<Duration>) {
        let mut supplier = MinuteLimit {
            limit: 120,
            minute: 0,
            count: 0,
        };
        let (mut now, mut refused_at, mut sent_at) = (ms(0), Vec::new(), Vec::new());
        while now < Duration::from_secs(1200) {
            match pace.try_send(now) {
                Ok(pass) => {
                    sent_at.push(now);
                    if let Some(wait) = supplier.call(now) {
                        refused_at.push(now);
                        pace.slowed(pass, now + ms(50), wait);
                    }
                    now += ms(1);
                }
                Err(until) => now = until,
            }
        }
        (pace, sent_at, refused_at)
    }

    /// Each minute once `learnt_by`: a quarter at its start, the rest at
    /// most a second apart; refused at most once, when a probed raise finds
    /// the limit again.
    fn spread_from(learnt_by: Duration, sent_at: &[Duration], refused_at: &[Duration]) {
        assert!(
            refused_at.iter().filter(|at| **at >= learnt_by).count() <= 1,
            "{refused_at:?}"
        );
        let later: Vec<_> = sent_at.iter().filter(|at| **at >= learnt_by).collect();
        // The wait a refusal names aside.
        let longest = later
            .windows(2)
            .filter(|pair| !refused_at.contains(pair[0]))
            .map(|pair| *pair[1] - *pair[0])
            .max()
            .unwrap();
        assert!(longest <= Duration::from_secs(1), "{longest:?}");
        let span = (Duration::from_secs(1200) - learnt_by).as_secs_f64();
        let minutes = later.len() as f64 / span * 60.0;
        assert!(
            (105.0..=120.0).contains(&minutes),
            "{minutes} calls a minute"
        );
    }

    #[test]
    fn a_limit_a_minute_is_learnt_in_two_and_then_spread_over_each() {
        let (pace, sent_at, refused_at) = twenty_minutes_of_a_limit_a_minute(Pace::new(0));
        // Two minutes in bursts, then the minute learnt.
        assert_eq!(
            pace.window().map(|(length, _)| length),
            Some(Duration::from_secs(60))
        );
        let learnt_by = Duration::from_secs(121);
        assert_eq!(refused_at.iter().filter(|at| **at < learnt_by).count(), 2);
        spread_from(learnt_by, &sent_at, &refused_at);
    }

    #[test]
    fn a_documented_minute_is_learnt_from_its_first_refusal() {
        let minute = Duration::from_secs(60);
        let (pace, sent_at, refused_at) =
            twenty_minutes_of_a_limit_a_minute(Pace::new(0).with_window(minute));
        assert_eq!(pace.window().map(|(length, _)| length), Some(minute));
        // One minute in a burst, then spread.
        let learnt_by = Duration::from_secs(61);
        assert_eq!(refused_at.iter().filter(|at| **at < learnt_by).count(), 1);
        spread_from(learnt_by, &sent_at, &refused_at);
    }

    proptest! {
        /// Whatever the calls and refusals, the learnt rate stays between
        /// the floor and the configured limit, and no two calls go out
        /// closer than the learnt rate allows.
        #[test]
        fn the_rate_stays_within_its_bounds_and_spaces_the_calls(
            ceiling in 0u32..50,
            steps in proptest::collection::vec((1u64..400, any::<bool>()), 1..300),
        ) {
            let mut pace = Pace::new(ceiling);
            let mut now = Duration::ZERO;
            let mut last_sent: Option<(Duration, Option<f64>)> = None;
            for (gap, refused) in steps {
                now += ms(gap);
                match pace.try_send(now) {
                    Ok(pass) => {
                        if let Some((at, Some(rate))) = last_sent
                            && pace.learnt() == Some(rate)
                        {
                            prop_assert!(now - at >= Duration::from_secs_f64(1.0 / rate) - ms(1));
                        }
                        last_sent = Some((now, pace.learnt()));
                        if refused {
                            pace.slowed(pass, now, ms(gap));
                        }
                    }
                    Err(until) => prop_assert!(until > now),
                }
                if let Some(rate) = pace.learnt() {
                    prop_assert!(rate >= FLOOR);
                    if ceiling > 0 {
                        prop_assert!(rate < f64::from(ceiling));
                    }
                }
            }
        }
    }
}
