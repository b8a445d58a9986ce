//! The circuit breaker in front of Redis: after a failed call the node stops
//! asking Redis for `open_for` (it counts in memory meanwhile), then lets one
//! call through as a probe, and goes back to Redis when the probe answers.
//!
//! Pure state over an `Instant` passed in, so the tests drive the clock. Not
//! the suppliers' breaker (`domain::supplier::Breaker`): that one waits for a
//! probe's answer forever, and here the probe is an HTTP request whose client
//! may hang up mid-call and drop it, so a probe that never reports is given
//! up after `open_for` and another call probes.

use std::time::{Duration, Instant};

/// Whether Redis is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Breaker {
    /// How long Redis is left alone after a failure, and how long a probe
    /// may stay out without reporting.
    open_for: Duration,
    /// Where it stands.
    state: State,
}

/// The breaker's states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Redis answers: every call goes to it.
    Closed,
    /// Redis failed: calls are counted in memory until then.
    Open {
        /// When one call may probe Redis.
        until: Instant,
    },
    /// One call is probing Redis; the others are counted in memory.
    Probing {
        /// When the probe is given up for lost and another call may probe.
        until: Instant,
    },
}

/// What a call may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Permit {
    /// Ask Redis: it answers.
    Call,
    /// Ask Redis: this call is the probe that decides whether it is back.
    Probe,
    /// Count in memory: Redis is down.
    Memory,
}

/// A change of the breaker worth saying (once, not once per request).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Change {
    /// Nothing changed that an operator would want to hear.
    None,
    /// Redis stopped answering: the node counts in memory from now on.
    WentDown,
    /// The probe was answered: the node counts in Redis again.
    CameBack,
}

impl Breaker {
    /// A closed breaker that stays open `open_for` after a failure.
    pub(super) fn new(open_for: Duration) -> Self {
        Self {
            open_for,
            state: State::Closed,
        }
    }

    /// What a call starting at `now` may do. Past the open time, the first
    /// caller gets the probe and the others go on counting in memory.
    pub(super) fn permit(&mut self, now: Instant) -> Permit {
        match self.state {
            State::Closed => Permit::Call,
            State::Open { until } | State::Probing { until } if now < until => Permit::Memory,
            State::Open { .. } | State::Probing { .. } => {
                self.state = State::Probing {
                    until: now + self.open_for,
                };
                Permit::Probe
            }
        }
    }

    /// Redis answered a call made under `permit`. Only a probe closes the
    /// breaker: a late answer to a call sent before the failure says little
    /// about Redis now.
    pub(super) fn succeeded(&mut self, permit: Permit) -> Change {
        match (permit, self.state) {
            (Permit::Probe, State::Probing { .. }) => {
                self.state = State::Closed;
                Change::CameBack
            }
            _ => Change::None,
        }
    }

    /// A call made under `permit` failed (or outlasted its bound) at `now`.
    /// Failures of calls sent before the breaker opened do not move it again,
    /// so a burst of failures opens it once.
    pub(super) fn failed(&mut self, permit: Permit, now: Instant) -> Change {
        let open = State::Open {
            until: now + self.open_for,
        };
        match (permit, self.state) {
            (Permit::Call, State::Closed) => {
                self.state = open;
                Change::WentDown
            }
            (Permit::Probe, State::Probing { .. }) => {
                self.state = open;
                Change::None
            }
            _ => Change::None,
        }
    }

    /// How long it stays open after a failure.
    pub(super) fn open_for(&self) -> Duration {
        self.open_for
    }

    /// Whether calls go to Redis.
    pub(super) fn is_closed(&self) -> bool {
        self.state == State::Closed
    }

    /// `up`, `down` (counting in memory) or `probing` (one call is asking
    /// Redis whether it is back).
    pub(super) fn state_name(&self, now: Instant) -> &'static str {
        match self.state {
            State::Closed => "up",
            State::Probing { until } if now < until => "probing",
            State::Open { .. } | State::Probing { .. } => "down",
        }
    }

    /// While open: how long until a call may probe (zero once it may).
    pub(super) fn next_probe_in(&self, now: Instant) -> Option<Duration> {
        match self.state {
            State::Closed | State::Probing { .. } => None,
            State::Open { until } => Some(until.saturating_duration_since(now)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPEN: Duration = Duration::from_secs(2);

    fn later(start: Instant, millis: u64) -> Instant {
        start + Duration::from_millis(millis)
    }

    #[test]
    fn a_closed_breaker_lets_every_call_through_and_success_changes_nothing() {
        let mut breaker = Breaker::new(OPEN);
        let now = Instant::now();
        for _ in 0..3 {
            assert_eq!(breaker.permit(now), Permit::Call);
            assert_eq!(breaker.succeeded(Permit::Call), Change::None);
        }
        assert!(breaker.is_closed());
        assert_eq!(breaker.state_name(now), "up");
        assert_eq!(breaker.next_probe_in(now), None);
    }

    #[test]
    fn the_first_failure_opens_it_once_and_calls_go_to_memory_until_the_open_time_passes() {
        let mut breaker = Breaker::new(OPEN);
        let now = Instant::now();
        let permits: Vec<Permit> = (0..3).map(|_| breaker.permit(now)).collect();
        assert_eq!(breaker.failed(permits[0], now), Change::WentDown);
        // The burst sent before it opened: one "down", not one per request.
        assert_eq!(breaker.failed(permits[1], now), Change::None);
        assert_eq!(breaker.failed(permits[2], later(now, 10)), Change::None);
        assert!(!breaker.is_closed());
        assert_eq!(breaker.state_name(now), "down");
        assert_eq!(
            breaker.next_probe_in(later(now, 500)),
            Some(later(now, 2000) - later(now, 500))
        );
        assert_eq!(breaker.permit(later(now, 1999)), Permit::Memory);
        // The late failures did not push the probe further away.
        assert_eq!(breaker.permit(later(now, 2000)), Permit::Probe);
    }

    #[test]
    fn one_probe_at_a_time_and_an_answered_probe_closes_it() {
        let mut breaker = Breaker::new(OPEN);
        let now = Instant::now();
        let permit = breaker.permit(now);
        assert_eq!(breaker.failed(permit, now), Change::WentDown);
        let at = later(now, 2000);
        assert_eq!(breaker.permit(at), Permit::Probe);
        assert_eq!(breaker.state_name(at), "probing");
        assert_eq!(
            breaker.permit(at),
            Permit::Memory,
            "the others wait for it in memory"
        );
        assert_eq!(breaker.next_probe_in(at), None);
        assert_eq!(breaker.succeeded(Permit::Probe), Change::CameBack);
        assert!(breaker.is_closed());
        assert_eq!(breaker.permit(at), Permit::Call);
        assert_eq!(breaker.succeeded(Permit::Probe), Change::None, "said once");
    }

    #[test]
    fn a_failed_probe_opens_it_again_for_the_whole_open_time_without_saying_it_again() {
        let mut breaker = Breaker::new(OPEN);
        let now = Instant::now();
        assert_eq!(breaker.failed(Permit::Call, now), Change::WentDown);
        let at = later(now, 2100);
        assert_eq!(breaker.permit(at), Permit::Probe);
        assert_eq!(breaker.failed(Permit::Probe, at), Change::None);
        assert_eq!(breaker.state_name(at), "down");
        assert_eq!(breaker.permit(later(at, 1999)), Permit::Memory);
        assert_eq!(breaker.permit(later(at, 2000)), Permit::Probe);
    }

    #[test]
    fn a_late_answer_to_a_call_sent_before_the_failure_does_not_close_it() {
        let mut breaker = Breaker::new(OPEN);
        let now = Instant::now();
        assert_eq!(breaker.failed(Permit::Call, now), Change::WentDown);
        assert_eq!(breaker.succeeded(Permit::Call), Change::None);
        assert!(!breaker.is_closed());
        // Nor while a probe is out: the probe decides.
        assert_eq!(breaker.permit(later(now, 2000)), Permit::Probe);
        assert_eq!(breaker.succeeded(Permit::Call), Change::None);
        assert_eq!(breaker.failed(Permit::Call, later(now, 2001)), Change::None);
        assert_eq!(breaker.state_name(later(now, 2001)), "probing");
    }

    #[test]
    fn a_probe_that_never_reports_is_given_up_and_another_call_probes() {
        let mut breaker = Breaker::new(OPEN);
        let now = Instant::now();
        breaker.failed(Permit::Call, now);
        let first = later(now, 2000);
        assert_eq!(breaker.permit(first), Permit::Probe);
        // Its request was dropped: no report ever comes.
        assert_eq!(breaker.permit(later(first, 1999)), Permit::Memory);
        assert_eq!(breaker.state_name(later(first, 2000)), "down");
        assert_eq!(breaker.permit(later(first, 2000)), Permit::Probe);
        assert_eq!(breaker.succeeded(Permit::Probe), Change::CameBack);
    }

    #[test]
    fn a_stale_probe_answering_after_another_probe_failed_does_not_close_it() {
        let mut breaker = Breaker::new(OPEN);
        let now = Instant::now();
        breaker.failed(Permit::Call, now);
        assert_eq!(breaker.permit(later(now, 2000)), Permit::Probe);
        assert_eq!(breaker.permit(later(now, 4000)), Permit::Probe);
        assert_eq!(
            breaker.failed(Permit::Probe, later(now, 4010)),
            Change::None
        );
        assert_eq!(breaker.succeeded(Permit::Probe), Change::None);
        assert_eq!(breaker.permit(later(now, 4100)), Permit::Memory);
    }
}
