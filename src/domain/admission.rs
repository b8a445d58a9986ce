//! Admission: accept only the live units the supplier can deliver in time.
//!
//! The supplier takes a fixed number of calls per second and a call carries
//! a number of units that depends on how full supplier orders are and how
//! many questions each one needs; [`Capacity`] turns both into units per
//! second. The backlog (live units accepted and not settled yet) drains at
//! that rate, so it may not grow beyond what drains within the horizon:
//! `capacity × horizon`. That room is shared among the partners that are
//! waiting for units or asking for them, equally: each may hold at most its
//! share of it ([`allowance_at`]).
//!
//! With a horizon of at most half the provisioning deadline, a backlog full
//! to the brim drains well before the deadline of the last unit in it, even
//! while shares move as partners come and go.
//!
//! The same room is also bounded by what this service itself settles a
//! second while it is behind ([`settling`]): whichever of the two is lower
//! drains the backlog ([`bound`]).

mod settling;

pub(crate) use settling::{SettleWindow, SettlingRate};

/// What the supplier can take right now, as the estimator sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Capacity {
    /// Calls per second the supplier accepts (its documented limit).
    pub calls_per_second: f64,
    /// Units each call moves on average: units placed over every live call
    /// made (placements, allocation questions, usage), learnt while the
    /// supplier is busy.
    pub units_per_call: f64,
    /// Below 1 while the supplier recently said "slow down".
    pub slowdown_factor: f64,
}

impl Capacity {
    /// Units per second the supplier can deliver.
    pub(crate) fn units_per_second(&self) -> f64 {
        (self.calls_per_second * self.units_per_call * self.slowdown_factor).max(0.0)
    }
}

/// The backlog as admission sees it: live units accepted and not settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Backlog {
    /// Every partner's units together.
    pub total_units: u64,
    /// The asking partner's units.
    pub partner_units: u64,
    /// Partners with units in the backlog, the asking one included.
    pub active_partners: u64,
}

/// Why units were not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Busy {
    /// The whole backlog is at what the supplier can deliver in time.
    Capacity,
    /// This partner holds its share of it already.
    FairShare,
    /// The whole backlog, or this partner's share of it, is at what this
    /// service itself settles in time.
    Settling,
}

impl Busy {
    /// The reason's name in metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Busy::Capacity => "capacity",
            Busy::FairShare => "fair_share",
            Busy::Settling => "settling",
        }
    }
}

/// The suppliers that sell a plan, one bit per supplier of the route (bit
/// `i`: the route's `i`-th supplier). A plan every supplier sells, or one
/// of unknown sellers, is [`ANY_SELLER`].
pub(crate) type Sellers = u8;

/// Every supplier sells it: no group bounds it but the whole room.
pub(crate) const ANY_SELLER: Sellers = Sellers::MAX;

/// The room left for the plans that only the suppliers of `sellers` sell:
/// what those suppliers can deliver within the horizon, less what such
/// plans already hold. A plan only Airalo sells is admitted by Airalo's
/// capacity, not by the sum over the route.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct GroupRoom {
    /// The suppliers of the group.
    pub sellers: Sellers,
    /// Units the group's plans may still be admitted.
    pub units_left: u64,
    /// Units per second the group's suppliers deliver together.
    pub drain_per_second: f64,
}

impl GroupRoom {
    /// Whether a plan sold by `sellers` can only go to this group's
    /// suppliers.
    fn bounds(&self, sellers: Sellers) -> bool {
        sellers != 0 && sellers & !self.sellers == 0
    }
}

/// How many more live units one partner may be admitted now.
#[derive(Debug, Clone, PartialEq)]
pub struct Allowance {
    /// Units left; `None` when admission is off (no supplier limit).
    units_left: Option<u64>,
    /// What bounds the units left: a refusal names it.
    bound_by: Busy,
    /// Units per second this partner's backlog drains at (its share of the
    /// capacity), to say when to retry.
    drain_per_second: f64,
    /// Units this partner may hold in all (its share of the room).
    share_units: u64,
    /// The room's longest wait, in whole seconds: no retry is asked later.
    horizon_seconds: u32,
    /// Rooms of the plans only some suppliers of the route sell.
    groups: Vec<GroupRoom>,
    /// The sellers of the plans asked for, where known.
    plans: std::collections::HashMap<String, Sellers>,
}

impl Allowance {
    /// No limit: every unit is admitted.
    pub fn unlimited() -> Self {
        Self {
            units_left: None,
            bound_by: Busy::Capacity,
            drain_per_second: 0.0,
            share_units: u64::MAX,
            horizon_seconds: 0,
            groups: Vec::new(),
            plans: std::collections::HashMap::new(),
        }
    }

    /// The same allowance bounded, for plans only some suppliers sell, by
    /// those suppliers' rooms; `plans` names each asked plan's sellers.
    pub(crate) fn with_groups(
        mut self,
        groups: Vec<GroupRoom>,
        plans: std::collections::HashMap<String, Sellers>,
    ) -> Self {
        self.groups = groups;
        self.plans = plans;
        self
    }

    /// Takes `units` of `plan` if they fit both the partner's allowance and
    /// the room of the suppliers that sell the plan.
    pub fn take_for(&mut self, units: u64, plan: &str) -> Result<(), (Busy, u32)> {
        let sellers = self.plans.get(plan).copied().unwrap_or(ANY_SELLER);
        for group in self.groups.iter().filter(|g| g.bounds(sellers)) {
            if units > group.units_left {
                let seconds = retry_after(
                    units - group.units_left,
                    group.drain_per_second,
                    self.horizon_seconds,
                );
                return Err((Busy::Capacity, seconds));
            }
        }
        self.take(units)?;
        for group in self.groups.iter_mut().filter(|g| g.bounds(sellers)) {
            group.units_left -= units;
        }
        Ok(())
    }

    /// Takes `units` if they fit; otherwise says why not and after how many
    /// seconds the same request may fit (at least 1, at most the horizon).
    pub fn take(&mut self, units: u64) -> Result<(), (Busy, u32)> {
        let Some(left) = self.units_left else {
            return Ok(());
        };
        if units <= left {
            self.units_left = Some(left - units);
            return Ok(());
        }
        Err((
            self.bound_by,
            retry_after(units - left, self.drain_per_second, self.horizon_seconds),
        ))
    }

    /// Units still admissible (`None`: no limit).
    pub fn units_left(&self) -> Option<u64> {
        self.units_left
    }

    /// The units this partner may hold in all.
    pub fn share_units(&self) -> u64 {
        self.share_units
    }
}

/// Seconds until `missing` units drain at `drain_per_second` (at least 1,
/// at most the horizon).
fn retry_after(missing: u64, drain_per_second: f64, horizon_seconds: u32) -> u32 {
    let seconds = if drain_per_second > 0.0 {
        (missing as f64 / drain_per_second).ceil()
    } else {
        f64::from(horizon_seconds)
    };
    (seconds as u32).clamp(1, horizon_seconds.max(1))
}

/// What drains the backlog, over how long, and what a full room is called.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Drain {
    /// Units a second.
    pub per_second: f64,
    /// [`Busy::Capacity`] (the suppliers) or [`Busy::Settling`].
    pub full: Busy,
    /// The seconds of that work the backlog may hold.
    pub horizon_seconds: u32,
}

impl Drain {
    /// Units the backlog may hold.
    pub(crate) fn room_units(&self) -> u64 {
        self.room().floor() as u64
    }

    fn room(&self) -> f64 {
        self.per_second.max(0.0) * f64::from(self.horizon_seconds)
    }
}

/// What bounds the backlog: the suppliers' drain or this service's
/// settling, whichever room is smaller (a tie goes to the suppliers);
/// `None` when neither bounds it.
pub(crate) fn bound(suppliers: Option<Drain>, settling: Option<Drain>) -> Option<Drain> {
    match (suppliers, settling) {
        (Some(suppliers), Some(settling)) if settling.room() < suppliers.room() => Some(settling),
        (Some(suppliers), _) => Some(suppliers),
        (None, settling) => settling,
    }
}

/// The allowance of one partner given the units a second that drain the
/// backlog, the horizon and the backlog: what keeps both its own units
/// within its share and the whole backlog within `per_second × horizon`. A
/// full room is refused as `full` ([`Busy::Capacity`] or
/// [`Busy::Settling`]); a full share as [`Busy::FairShare`], or as
/// [`Busy::Settling`] when that bounds the room.
pub(crate) fn allowance_at(
    per_second: f64,
    full: Busy,
    horizon_seconds: u32,
    backlog: Backlog,
) -> Allowance {
    let per_second = per_second.max(0.0);
    let room = (per_second * f64::from(horizon_seconds)).floor() as u64;
    let active = backlog.active_partners.max(1);
    let share = room / active;
    let by_share = share.saturating_sub(backlog.partner_units);
    let by_room = room.saturating_sub(backlog.total_units);
    // While this service's own settling bounds the room, a full share is
    // named for it too: what the partner is told is what to wait for.
    let share_full = match full {
        Busy::Settling => Busy::Settling,
        Busy::Capacity | Busy::FairShare => Busy::FairShare,
    };
    let (units_left, bound_by, drain_per_second) = if by_share <= by_room {
        (by_share, share_full, per_second / active as f64)
    } else {
        (by_room, full, per_second)
    };
    Allowance {
        units_left: Some(units_left),
        bound_by,
        drain_per_second,
        share_units: share,
        horizon_seconds,
        groups: Vec::new(),
        plans: std::collections::HashMap::new(),
    }
}

/// A running estimate of units per call, learnt only from busy seconds: an
/// idle supplier moves few units per call because few are asked for, which
/// says nothing about what it could move.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct UnitsPerCall {
    estimate: f64,
}

/// Weight of each busy second in the estimate.
const LEARNING_RATE: f64 = 0.3;

impl UnitsPerCall {
    /// Starts from `initial` (conservative: one unit per call).
    pub(crate) fn new(initial: f64) -> Self {
        Self {
            estimate: initial.max(0.0),
        }
    }

    /// The current estimate.
    pub(crate) fn get(&self) -> f64 {
        self.estimate
    }

    /// Learns from one sample: `calls` made and `units` placed in it, when
    /// the calls used at least half of `limit`. `ceiling` caps the estimate
    /// (a supplier order carries at most that many units and needs at least
    /// two calls: the placement and one question).
    pub(crate) fn observe(&mut self, calls: u64, units: u64, limit: u64, ceiling: f64) {
        if calls == 0 || calls * 2 < limit {
            return;
        }
        let sample = (units as f64 / calls as f64).min(ceiling);
        self.estimate += LEARNING_RATE * (sample - self.estimate);
    }
}

/// Takes `units` of `key` back from what was admitted since the last reading
/// and, where a refresh already moved them, from the reading in flight (a
/// reading that finished dropped them: it cannot hold units never committed).
pub(crate) fn take_back(
    since: &mut std::collections::HashMap<String, u64>,
    reading: &mut std::collections::HashMap<String, u64>,
    key: &str,
    mut units: u64,
) {
    for counted in [since, reading] {
        if let Some(held) = counted.get_mut(key) {
            let taken = units.min(*held);
            *held -= taken;
            units -= taken;
            if *held == 0 {
                counted.remove(key);
            }
        }
        if units == 0 {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use std::collections::HashMap;

    use super::*;

    /// The allowance at the suppliers' `capacity`.
    fn allowance(capacity: &Capacity, horizon_seconds: u32, backlog: Backlog) -> Allowance {
        allowance_at(
            capacity.units_per_second(),
            Busy::Capacity,
            horizon_seconds,
            backlog,
        )
    }

    fn capacity(units_per_second: f64) -> Capacity {
        Capacity {
            calls_per_second: 1.0,
            units_per_call: units_per_second,
            slowdown_factor: 1.0,
        }
    }

    #[test]
    fn one_partner_alone_may_fill_the_room() {
        let mut allowance = allowance(&capacity(10.0), 40, Backlog::default());
        assert_eq!(allowance.units_left(), Some(400));
        assert_eq!(allowance.take(400), Ok(()));
        assert_eq!(allowance.take(1), Err((Busy::FairShare, 1)));
    }

    #[test]
    fn a_full_room_refuses_with_the_time_it_needs_to_drain() {
        let backlog = Backlog {
            total_units: 400,
            partner_units: 0,
            active_partners: 2,
        };
        let mut allowance = allowance(&capacity(10.0), 40, backlog);
        assert_eq!(allowance.take(30), Err((Busy::Capacity, 3)));
    }

    #[test]
    fn a_partner_over_its_share_waits_for_its_own_units_to_drain() {
        let backlog = Backlog {
            total_units: 300,
            partner_units: 250,
            active_partners: 2,
        };
        // Room 400, share 200: 50 over; its share drains at 5 units/s.
        let mut allowance = allowance(&capacity(10.0), 40, backlog);
        assert_eq!(allowance.units_left(), Some(0));
        assert_eq!(allowance.take(1), Err((Busy::FairShare, 1)));
        assert_eq!(allowance.share_units(), 200);
    }

    #[test]
    fn retry_after_is_at_least_one_second_and_at_most_the_horizon() {
        let stopped = Capacity {
            slowdown_factor: 0.0,
            ..capacity(10.0)
        };
        let mut allowance = allowance(&stopped, 40, Backlog::default());
        assert_eq!(allowance.take(1), Err((Busy::FairShare, 40)));
    }

    #[test]
    fn the_lower_of_the_two_rates_bounds_and_names_a_full_room() {
        let drain = |per_second, full| Drain {
            per_second,
            full,
            horizon_seconds: 40,
        };
        let suppliers = |per_second| drain(per_second, Busy::Capacity);
        let settling = |per_second| drain(per_second, Busy::Settling);
        assert_eq!(bound(None, None), None);
        assert_eq!(bound(Some(suppliers(240.0)), None), Some(suppliers(240.0)));
        assert_eq!(bound(None, Some(settling(90.0))), Some(settling(90.0)));
        assert_eq!(
            bound(Some(suppliers(240.0)), Some(settling(90.0))),
            Some(settling(90.0))
        );
        assert_eq!(
            bound(Some(suppliers(60.0)), Some(settling(90.0))),
            Some(suppliers(60.0))
        );
        let backlog = Backlog {
            total_units: 400,
            partner_units: 0,
            active_partners: 2,
        };
        let mut allowance = allowance_at(10.0, Busy::Settling, 40, backlog);
        assert_eq!(allowance.take(30), Err((Busy::Settling, 3)));
        let mut alone = allowance_at(10.0, Busy::Settling, 40, Backlog::default());
        assert_eq!(
            alone.take(401),
            Err((Busy::Settling, 1)),
            "its share is full"
        );
    }

    #[test]
    fn no_limit_admits_everything() {
        let mut allowance = Allowance::unlimited();
        assert_eq!(allowance.take(u64::MAX), Ok(()));
        assert_eq!(allowance.units_left(), None);
    }

    #[test]
    fn units_per_call_learns_only_from_busy_seconds() {
        let mut estimate = UnitsPerCall::new(1.0);
        estimate.observe(2, 60, 8, 15.0); // idle: ignored
        assert_eq!(estimate.get(), 1.0);
        estimate.observe(8, 120, 8, 15.0); // busy: 15 per call
        assert!((estimate.get() - (1.0 + 0.3 * 14.0)).abs() < 1e-9);
        for _ in 0..50 {
            estimate.observe(8, 800, 8, 15.0); // capped at the ceiling
        }
        assert!(estimate.get() <= 15.0 && estimate.get() > 14.9);
    }

    proptest! {
        /// Whatever the backlog, admitting what the allowance lets through
        /// keeps the partner within its share and the whole within the room.
        #[test]
        fn admitted_units_stay_within_the_share_and_the_room(
            per_second in 0.0f64..500.0,
            horizon in 1u32..120,
            total in 0u64..100_000,
            mine_fraction in 0.0f64..=1.0,
            active in 1u64..200,
            asks in proptest::collection::vec(1u64..30, 1..50),
        ) {
            let partner_units = (total as f64 * mine_fraction) as u64;
            let backlog = Backlog { total_units: total, partner_units, active_partners: active };
            let room = (per_second * f64::from(horizon)).floor() as u64;
            let mut allowance = allowance(&capacity(per_second), horizon, backlog);
            let mut admitted = 0u64;
            for units in asks {
                match allowance.take(units) {
                    Ok(()) => admitted += units,
                    Err((_, retry_after)) => prop_assert!((1..=horizon).contains(&retry_after)),
                }
            }
            if admitted > 0 {
                prop_assert!(total + admitted <= room);
                prop_assert!(partner_units + admitted <= room / active);
            }
        }

        /// Equal partners asking in turn end up with equal shares of a full
        /// room, give or take one request.
        #[test]
        fn equal_partners_in_turn_get_equal_shares(
            per_second in 1.0f64..200.0,
            partners in 2usize..50,
            units in 1u64..4,
        ) {
            let horizon = 40;
            let mut held = vec![0u64; partners];
            for _round in 0..10_000 {
                let mut progressed = false;
                for p in 0..partners {
                    let backlog = Backlog {
                        total_units: held.iter().sum(),
                        partner_units: held[p],
                        active_partners: partners as u64,
                    };
                    if allowance(&capacity(per_second), horizon, backlog).take(units).is_ok() {
                        held[p] += units;
                        progressed = true;
                    }
                }
                if !progressed {
                    break;
                }
            }
            let most = *held.iter().max().unwrap();
            let least = *held.iter().min().unwrap();
            prop_assert!(most - least <= units, "{held:?}");
        }
    }

    /// Units taken back come out of `since` first, then out of the reading
    /// in flight; what is not there is not taken from anyone else.
    #[test]
    fn units_taken_back_leave_the_rest_counted() {
        let mut since = HashMap::from([("pt_a".to_owned(), 3)]);
        let mut reading = HashMap::from([("pt_a".to_owned(), 4), ("pt_b".to_owned(), 1)]);
        take_back(&mut since, &mut reading, "pt_a", 5);
        assert!(since.is_empty());
        assert_eq!(
            reading,
            HashMap::from([("pt_a".to_owned(), 2), ("pt_b".to_owned(), 1)])
        );
        take_back(&mut since, &mut reading, "pt_a", 9);
        assert_eq!(reading, HashMap::from([("pt_b".to_owned(), 1)]));
    }
}
