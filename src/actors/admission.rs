//! The node's view of what the supplier can take, for the account actors'
//! admission decisions ([`crate::domain::admission`]).
//!
//! - **Capacity** is the sum over the suppliers of the route: each one's
//!   limit (`supplier.requests_per_second`, `airalo.requests_per_second`)
//!   times the units one of its calls moves, learnt from its [`Tally`] each
//!   second it was busy, halved for ten seconds after it said "slow down".
//! - **Backlog** comes from the database every `admission.refresh_ms`: live
//!   units of orders still processing, per partner, on every node, so the
//!   whole fleet shares one room. Units admitted on this node since the last
//!   reading are added on top until the next one includes them.
//! - **Settling**: each reading also says how much of the backlog at the
//!   settling window's start is still processing, so the units the fleet
//!   settled in the window; while the pipeline is behind, that rate over
//!   half the horizon bounds the room too
//!   ([`crate::domain::admission::SettlingRate`]), whatever the suppliers'
//!   limits (lifted or not).
//!
//! Account actors ask for an [`Allowance`] before deciding a batch and
//! report what they admitted and refused; this view never blocks on the
//! database (the refresh runs beside it).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use tokio_util::sync::CancellationToken;

use crate::{
    domain::{
        admission::{
            self, Allowance, Backlog, Busy, Capacity, GroupRoom, Sellers, SettlingRate,
            UnitsPerCall,
        },
        time,
    },
    store::{self, Db},
    supplier::{gate::RateGate, metered::Tally},
};

mod settling;
mod view;

use settling::Reading;

/// How long a "slow down" answer halves the capacity.
const SLOWDOWN_MEMORY: Duration = Duration::from_secs(10);

/// How often one partner's refusals for one reason are logged.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// How long the supplier's tally is summed before units per call are
/// learnt from it: long enough for several calls at any documented limit.
const LEARN_EVERY: Duration = Duration::from_secs(5);

/// What admission needs to know about one supplier of the route.
pub struct LaneArgs {
    /// The supplier's name.
    pub name: &'static str,
    /// Calls per second the supplier accepts (0: no limit; admission then
    /// weighs this service's settling only).
    pub calls_per_second: u32,
    /// Most units in one of its supplier orders.
    pub batch_size: usize,
    /// Its running count of calls and placed units.
    pub tally: Arc<Tally>,
    /// Its gate (its "slow down" answers).
    pub gate: Arc<RateGate>,
}

/// Which suppliers of the route (one bit per lane, in route order) sell a
/// plan.
pub(crate) type SellersOf = Arc<dyn Fn(&str) -> Sellers + Send + Sync>;

/// What admission needs to know about the suppliers.
pub struct AdmissionArgs {
    /// Every supplier of the route.
    pub lanes: Vec<LaneArgs>,
    /// Seconds of supplier work the backlog may hold.
    pub horizon_seconds: u32,
    /// The sellers of a plan (all of them when `None`).
    pub sellers_of: Option<SellersOf>,
}

/// The node's admission view.
pub struct Admission {
    lanes: Vec<LaneArgs>,
    horizon_seconds: u32,
    sellers_of: Option<SellersOf>,
    state: Mutex<State>,
}

/// What is learnt of one supplier.
struct Learnt {
    units_per_call: UnitsPerCall,
    /// The tally when the current learning window began, and when.
    learnt_at: (Instant, (u64, u64)),
    last_slow_downs: u64,
    slowed_until: Option<Instant>,
}

impl Learnt {
    fn units_per_second(&self, lane: &LaneArgs) -> f64 {
        Capacity {
            calls_per_second: lane.calls_now(),
            units_per_call: self.units_per_call.get(),
            slowdown_factor: if self.halved(lane) { 0.5 } else { 1.0 },
        }
        .units_per_second()
    }

    /// Whether a recent "slow down" answer halves the supplier's capacity:
    /// unless its gate paces the calls at a rate learnt from such answers,
    /// which already counts them.
    fn halved(&self, lane: &LaneArgs) -> bool {
        self.slowed_until
            .is_some_and(|until| until > Instant::now())
            && lane.gate.learnt_per_second().is_none()
    }
}

impl LaneArgs {
    /// Calls a second the supplier takes now: the pace its gate learnt from
    /// its "slow down" answers (always below the configured limit), else the
    /// configured limit (0: none).
    fn calls_now(&self) -> f64 {
        self.gate
            .learnt_per_second()
            .unwrap_or(f64::from(self.calls_per_second))
    }
}

/// Highest units per call the estimate may reach: a supplier order carries
/// at most `batch_size` units and takes at least two calls.
fn ceiling(lane: &LaneArgs) -> f64 {
    (lane.batch_size.max(1) as f64 / 2.0).max(1.0)
}

struct State {
    /// One per lane, in the same order.
    learnt: Vec<Learnt>,
    /// When each partner last asked for live units: partners asking within
    /// the horizon share the room even while they hold nothing (refused).
    asked: HashMap<String, Instant>,
    /// Live units processing per partner, at the last database reading.
    read: HashMap<String, u64>,
    /// Units admitted here while the reading was being taken (it may or
    /// may not include them) and since.
    reading: HashMap<String, u64>,
    since: HashMap<String, u64>,
    /// The same per plan: live units processing at the last reading, and
    /// admitted here during and since it.
    plan_read: HashMap<String, u64>,
    plan_reading: HashMap<String, u64>,
    plan_since: HashMap<String, u64>,
    /// Refusals by reason since start, and when each partner's were logged.
    refusals: HashMap<Busy, u64>,
    logged: HashMap<(String, Busy), Instant>,
    /// What the fleet settles a second while behind.
    settling: SettlingRate,
    /// The reading of the backlog the current settling window began at.
    window_start: Option<Reading>,
}

impl State {
    fn partner_units(&self, partner: &str) -> u64 {
        [&self.read, &self.reading, &self.since]
            .iter()
            .map(|m| m.get(partner).copied().unwrap_or(0))
            .sum()
    }

    fn total_units(&self) -> u64 {
        [&self.read, &self.reading, &self.since]
            .iter()
            .flat_map(|m| m.values())
            .sum()
    }

    /// Partners holding units or asking for some within `horizon`.
    fn active_partners(&self, horizon: Duration) -> u64 {
        let holding = [&self.read, &self.reading, &self.since]
            .into_iter()
            .flat_map(|m| m.iter())
            .filter(|(_, units)| **units > 0)
            .map(|(partner, _)| partner.as_str());
        let asking = self
            .asked
            .iter()
            .filter(|(_, at)| at.elapsed() < horizon)
            .map(|(partner, _)| partner.as_str());
        holding
            .chain(asking)
            .collect::<std::collections::HashSet<&str>>()
            .len() as u64
    }
}

impl Admission {
    /// A view with a conservative start: one unit per call until the busy
    /// supplier shows more.
    pub fn new(args: AdmissionArgs) -> Self {
        let learnt = args
            .lanes
            .iter()
            .map(|lane| Learnt {
                units_per_call: UnitsPerCall::new(1.0),
                learnt_at: (Instant::now(), lane.tally.read()),
                last_slow_downs: lane.gate.slow_downs(),
                slowed_until: None,
            })
            .collect();
        let state = State {
            learnt,
            asked: HashMap::new(),
            read: HashMap::new(),
            reading: HashMap::new(),
            since: HashMap::new(),
            plan_read: HashMap::new(),
            plan_reading: HashMap::new(),
            plan_since: HashMap::new(),
            refusals: HashMap::new(),
            logged: HashMap::new(),
            settling: SettlingRate::default(),
            window_start: None,
        };
        Self {
            lanes: args.lanes,
            horizon_seconds: args.horizon_seconds,
            sellers_of: args.sellers_of,
            state: Mutex::new(state),
        }
    }

    /// Whether the suppliers' capacity bounds the room (every supplier of
    /// the route has a limit, configured or learnt).
    pub fn suppliers_limited(&self) -> bool {
        !self.lanes.is_empty() && self.lanes.iter().all(|lane| lane.calls_now() > 0.0)
    }

    /// What one partner may be admitted now.
    pub fn allowance(&self, partner_id: &str) -> Allowance {
        let mut state = self.lock();
        let Some(drain) = self.bound(&state) else {
            return Allowance::unlimited();
        };
        state.asked.insert(partner_id.to_owned(), Instant::now());
        let backlog = Backlog {
            total_units: state.total_units(),
            partner_units: state.partner_units(partner_id),
            active_partners: state.active_partners(self.horizon()),
        };
        admission::allowance_at(drain.per_second, drain.full, drain.horizon_seconds, backlog)
    }

    /// What one partner may be admitted now for orders of `plans`: its
    /// allowance, and for a plan only some suppliers of the route sell, the
    /// room of those suppliers.
    pub fn allowance_for<'a>(
        &self,
        partner_id: &str,
        plans: impl Iterator<Item = &'a str>,
    ) -> Allowance {
        let allowance = self.allowance(partner_id);
        let Some(sellers_of) = self.sellers_of.as_ref().filter(|_| self.lanes.len() > 1) else {
            return allowance;
        };
        if !self.suppliers_limited() {
            return allowance;
        }
        let asked: HashMap<String, Sellers> = plans
            .map(|plan| (plan.to_owned(), sellers_of(plan)))
            // A plan every supplier of the route sells (ANY_SELLER included)
            // is bounded by the whole room only.
            .filter(|(_, sellers)| *sellers & self.all_lanes() != self.all_lanes())
            .collect();
        if asked.is_empty() {
            return allowance;
        }
        let groups = self.group_rooms(sellers_of);
        allowance.with_groups(groups, asked)
    }

    /// Every lane's bit.
    fn all_lanes(&self) -> Sellers {
        match self.lanes.len() {
            n if n >= 8 => Sellers::MAX,
            n => (1 << n) - 1,
        }
    }

    /// The room left for each strict group of the route's suppliers: what
    /// they deliver within the horizon, less the backlog of the plans only
    /// they sell.
    fn group_rooms(&self, sellers_of: &SellersOf) -> Vec<GroupRoom> {
        let state = self.lock();
        let mut held: HashMap<Sellers, u64> = HashMap::new();
        for map in [&state.plan_read, &state.plan_reading, &state.plan_since] {
            for (plan, units) in map {
                *held.entry(sellers_of(plan) & self.all_lanes()).or_default() += units;
            }
        }
        let ups: Vec<f64> = self
            .lanes
            .iter()
            .zip(&state.learnt)
            .map(|(lane, learnt)| learnt.units_per_second(lane))
            .collect();
        (1..self.all_lanes())
            .map(|group: Sellers| {
                let drain: f64 = (0..ups.len())
                    .filter(|i| group & (1 << i) != 0)
                    .map(|i| ups[i])
                    .sum();
                let room = (drain * f64::from(self.horizon_seconds)).floor() as u64;
                let holding: u64 = held
                    .iter()
                    .filter(|(sellers, _)| **sellers != 0 && **sellers & !group == 0)
                    .map(|(_, units)| units)
                    .sum();
                GroupRoom {
                    sellers: group,
                    units_left: room.saturating_sub(holding),
                    drain_per_second: drain,
                }
            })
            .collect()
    }

    /// Live units of `plan` were admitted.
    pub fn admitted_plan(&self, plan: &str, units: u64) {
        if units == 0 || !self.suppliers_limited() || self.lanes.len() < 2 {
            return;
        }
        *self.lock().plan_since.entry(plan.to_owned()).or_default() += units;
    }

    /// A batch of `partner_id` is committing `units` live units. Counted
    /// before the commit: counted after it, a backlog reading taken between
    /// the two would hold the units twice and refuse orders the room has
    /// space for. [`Self::withdrawn`] takes them back if the commit fails.
    pub fn admitted(&self, partner_id: &str, units: u64) {
        if units == 0 {
            return;
        }
        *self.lock().since.entry(partner_id.to_owned()).or_default() += units;
    }

    /// The commit of a batch counted by [`Self::admitted`] and
    /// [`Self::admitted_plan`] failed: its `units` (per plan: `plans`) are no
    /// longer admitted.
    pub fn withdrawn(&self, partner_id: &str, units: u64, plans: &[(&str, u64)]) {
        if units == 0 {
            return;
        }
        let mut state = self.lock();
        let state = &mut *state;
        admission::take_back(&mut state.since, &mut state.reading, partner_id, units);
        for (plan, units) in plans.iter().filter(|_| self.lanes.len() > 1) {
            admission::take_back(&mut state.plan_since, &mut state.plan_reading, plan, *units);
        }
    }

    /// A live order of `partner_id` was refused for `busy`: counted, and
    /// logged once per partner and reason every ten seconds. Returns whether
    /// this refusal was the one logged.
    pub fn refused(&self, partner_id: &str, busy: Busy, retry_after_seconds: u32) -> bool {
        crate::metrics::admission_refused(busy.as_str());
        let mut state = self.lock();
        *state.refusals.entry(busy).or_default() += 1;
        let key = (partner_id.to_owned(), busy);
        let due = state
            .logged
            .get(&key)
            .is_none_or(|at| at.elapsed() >= LOG_EVERY);
        if !due {
            return false;
        }
        state.logged.insert(key, Instant::now());
        let refused = state.refusals.get(&busy).copied().unwrap_or(0);
        drop(state);
        tracing::info!(
            partner_id,
            reason = busy.as_str(),
            retry_after_seconds,
            refused_on_this_node = refused,
            "orders refused at admission: {} cannot deliver more in time (logged once per 10 s)",
            match busy {
                Busy::Settling => "provisioning",
                Busy::Capacity | Busy::FairShare => "the supplier",
            }
        );
        true
    }

    /// Reads the backlog from the database, learns from the supplier's
    /// tally since the last refresh and from what the fleet settled since
    /// the settling window began.
    pub async fn refresh(&self, db: &Db) {
        self.learn();
        {
            let mut state = self.lock();
            let since = std::mem::take(&mut state.since);
            for (partner, units) in since {
                *state.reading.entry(partner).or_default() += units;
            }
            let since = std::mem::take(&mut state.plan_since);
            for (plan, units) in since {
                *state.plan_reading.entry(plan).or_default() += units;
            }
        }
        if self.lanes.len() > 1 {
            self.read_plan_backlog(db).await;
        }
        let (at, wall) = (Instant::now(), time::now());
        let before = self.window_began(wall);
        match store::orders::live_backlog(db, before).await {
            Ok(read) => self.read_backlog(at, wall, read),
            Err(err) => {
                tracing::warn!(error = %err, "could not read the backlog; admission keeps its last view");
            }
        }
        self.publish();
    }

    /// The suppliers' capacities added up, as one: their calls per second
    /// together, and the units a call moves on average over them.
    fn capacity(&self, state: &State) -> Capacity {
        let calls: f64 = self.lanes.iter().map(LaneArgs::calls_now).sum();
        let units: f64 = self
            .lanes
            .iter()
            .zip(&state.learnt)
            .map(|(lane, learnt)| learnt.units_per_second(lane))
            .sum();
        Capacity {
            calls_per_second: calls,
            units_per_call: if calls > 0.0 { units / calls } else { 0.0 },
            slowdown_factor: 1.0,
        }
    }

    /// Notes "slow down" answers, and learns each supplier's units per call
    /// once its learning window is over.
    fn learn(&self) {
        let now = Instant::now();
        let mut state = self.lock();
        for (lane, learnt) in self.lanes.iter().zip(state.learnt.iter_mut()) {
            learn_lane(lane, learnt, now);
        }
        // Askers gone quiet for a horizon no longer hold a share.
        let horizon = self.horizon();
        state.asked.retain(|_, at| at.elapsed() < horizon);
    }

    fn horizon(&self) -> Duration {
        Duration::from_secs(u64::from(self.horizon_seconds))
    }

    fn publish(&self) {
        let state = self.lock();
        let capacity = self.capacity(&state);
        crate::metrics::admission_view(
            capacity.units_per_second(),
            state.settling.estimate().unwrap_or(0.0),
            self.bound(&state).map_or(0, |drain| drain.room_units()),
            state.total_units(),
            state.active_partners(self.horizon()),
        );
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        crate::sync::lock(&self.state)
    }
}

impl Admission {
    /// Reads the backlog per plan (for the rooms of plans only some
    /// suppliers sell).
    async fn read_plan_backlog(&self, db: &Db) {
        match store::orders::live_backlog_by_plan(db).await {
            Ok(read) => {
                let mut state = self.lock();
                state.plan_read = read;
                state.plan_reading.clear();
            }
            Err(err) => {
                tracing::warn!(error = %err, "could not read the backlog per plan; admission keeps its last view");
            }
        }
    }
}

/// Notes one supplier's "slow down" answers and, once its learning window
/// is over, learns how many units one of its calls moves.
fn learn_lane(lane: &LaneArgs, learnt: &mut Learnt, now: Instant) {
    let slow_downs = lane.gate.slow_downs();
    if slow_downs > learnt.last_slow_downs {
        learnt.slowed_until = Some(now + SLOWDOWN_MEMORY);
    }
    learnt.last_slow_downs = slow_downs;
    let (began, at_start) = learnt.learnt_at;
    let elapsed = now.duration_since(began);
    if elapsed < LEARN_EVERY {
        return;
    }
    let tally = lane.tally.read();
    let calls = tally.0.saturating_sub(at_start.0);
    let units = tally.1.saturating_sub(at_start.1);
    let limit = (lane.calls_now() * elapsed.as_secs_f64()).floor() as u64;
    learnt
        .units_per_call
        .observe(calls, units, limit, ceiling(lane));
    learnt.learnt_at = (now, tally);
}

/// Refreshes the view every `every` until `stop`.
pub(crate) async fn refresh_until_stopped(
    admission: Arc<Admission>,
    db: Db,
    every: Duration,
    stop: CancellationToken,
) {
    crate::periodic::every(every, &stop, || admission.refresh(&db)).await;
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::*;

    fn lane(name: &'static str, calls_per_second: u32) -> (LaneArgs, Arc<RateGate>) {
        let gate = Arc::new(RateGate::new(calls_per_second, None, name));
        let lane = LaneArgs {
            name,
            calls_per_second,
            batch_size: 30,
            tally: Arc::default(),
            gate: gate.clone(),
        };
        (lane, gate)
    }

    fn admission(calls_per_second: u32) -> (Admission, Arc<RateGate>) {
        let (lane, gate) = lane("esim_access", calls_per_second);
        let admission = Admission::new(AdmissionArgs {
            lanes: vec![lane],
            horizon_seconds: 40,
            sellers_of: None,
        });
        (admission, gate)
    }

    #[test]
    fn two_suppliers_add_their_capacities_up() {
        let (first, _) = lane("esim_access", 8);
        let (second, slowed) = lane("airalo", 4);
        let admission = Admission::new(AdmissionArgs {
            lanes: vec![first, second],
            horizon_seconds: 40,
            sellers_of: None,
        });
        // (8 + 4) calls/s × 1 unit per call × 40 s.
        assert_eq!(admission.view().room_units, 480);
        assert_eq!(admission.view().suppliers.len(), 2);
        slowed.hold(Duration::from_millis(1));
        admission.learn();
        // Only the second one halves: (8 + 2) × 40.
        assert_eq!(admission.view().room_units, 400);
    }

    #[test]
    fn a_plan_only_one_supplier_sells_is_admitted_by_that_supplier_s_room() {
        let (first, _) = lane("esim_access", 8);
        let (second, _) = lane("airalo", 4);
        let sellers_of: SellersOf = Arc::new(|plan: &str| match plan {
            "pl_airalo_only" => 0b10,
            "pl_esim_access_only" => 0b01,
            _ => 0b11,
        });
        let admission = Admission::new(AdmissionArgs {
            lanes: vec![first, second],
            horizon_seconds: 40,
            sellers_of: Some(sellers_of),
        });
        let plans = ["pl_airalo_only", "pl_both"];
        let mut allowance = admission.allowance_for("pt_a", plans.into_iter());
        // Airalo alone: 4 calls/s × 1 unit × 40 s = 160 of the 480.
        assert!(matches!(
            allowance.take_for(161, "pl_airalo_only"),
            Err((Busy::Capacity, _))
        ));
        assert_eq!(allowance.take_for(160, "pl_airalo_only"), Ok(()));
        assert!(allowance.take_for(1, "pl_airalo_only").is_err());
        // Plans both sell still have the rest of the room.
        assert_eq!(allowance.take_for(300, "pl_both"), Ok(()));
        // What was admitted stays counted until the backlog is read again.
        admission.admitted_plan("pl_airalo_only", 150);
        let mut again = admission.allowance_for("pt_a", plans.into_iter());
        assert!(again.take_for(11, "pl_airalo_only").is_err());
        assert_eq!(again.take_for(10, "pl_airalo_only"), Ok(()));
        // One supplier alone: no group bounds anything.
        let (only, _) = lane("esim_access", 8);
        let single = Admission::new(AdmissionArgs {
            lanes: vec![only],
            horizon_seconds: 40,
            sellers_of: Some(Arc::new(|_: &str| 0b1)),
        });
        let mut allowance = single.allowance_for("pt_a", ["pl_x"].into_iter());
        assert_eq!(allowance.take_for(320, "pl_x"), Ok(()));
    }

    /// A batch whose commit failed leaves nothing counted.
    #[test]
    fn a_withdrawn_batch_is_no_longer_counted() {
        let (admission, _) = admission(8);
        admission.admitted("pt_a", 5);
        admission.admitted("pt_b", 2);
        admission.withdrawn("pt_a", 5, &[("pl_x", 5)]);
        assert_eq!(admission.view().backlog_units, 2);
    }

    #[test]
    fn one_supplier_without_a_limit_lifts_the_suppliers_bound() {
        let (first, _) = lane("esim_access", 8);
        let (second, _) = lane("airalo", 0);
        let admission = Admission::new(AdmissionArgs {
            lanes: vec![first, second],
            horizon_seconds: 40,
            sellers_of: None,
        });
        assert!(!admission.suppliers_limited());
        assert_eq!(admission.allowance("pt_a").units_left(), None);
    }

    #[test]
    fn it_starts_at_one_unit_per_call_and_shares_the_room() {
        let (admission, _) = admission(8);
        // 8 calls/s × 1 unit per call × 40 s.
        assert_eq!(admission.allowance("pt_a").units_left(), Some(320));
        admission.admitted("pt_a", 300);
        // pt_b asks: two partners share 320 units; pt_a holds 300 already.
        assert_eq!(admission.allowance("pt_b").units_left(), Some(20));
        assert_eq!(admission.allowance("pt_a").units_left(), Some(0));
        let view = admission.view();
        assert_eq!(view.room_units, 320);
        assert_eq!(view.backlog_units, 300);
        assert_eq!(view.active_partners, 2);
    }

    #[test]
    fn no_supplier_limit_and_settling_that_keeps_up_admit_everything() {
        let (admission, _) = admission(0);
        let start = Instant::now();
        for second in 0..10 {
            // Every reading's backlog was settled by the next one.
            let at = start + Duration::from_secs(second);
            admission.read_backlog(at, Utc::now(), backlog(2_000, 0));
        }
        assert_eq!(admission.allowance("pt_a").units_left(), None);
        let view = admission.view();
        assert!(!view.enabled);
        assert_eq!(view.bound_by, None);
        assert_eq!(view.settling_units_per_second, None);
    }

    /// A reading holding `units` of `pt_a`, `left` of them accepted before
    /// the window's first reading.
    fn backlog(units: u64, left: u64) -> store::orders::LiveBacklog {
        store::orders::LiveBacklog {
            by_partner: HashMap::from([("pt_a".to_owned(), units)]),
            accepted_before: left,
        }
    }

    /// With the suppliers' limits lifted, a backlog the fleet works off
    /// slower than it grows bounds the room by what it settles once it has
    /// been behind for two seconds; refusals name the settling.
    #[test]
    fn settling_that_falls_behind_bounds_the_room() {
        let (lifted, _) = admission(0);
        let start = Instant::now();
        // Each second 100 of the last reading's units settle and 400 more
        // are accepted.
        let mut units = 1_000;
        for second in 0..=5 {
            let left = units - 100;
            if second > 0 {
                units += 300;
            }
            let at = start + Duration::from_secs(second);
            lifted.read_backlog(at, Utc::now(), backlog(units, left));
            if second < 2 {
                assert_eq!(lifted.allowance("pt_b").units_left(), None, "{second} s");
            }
        }
        let view = lifted.view();
        assert_eq!(view.bound_by, Some("settling"), "{view:?}");
        assert_eq!(view.settling_units_per_second, Some(100.0));
        // Half of 100 units/s × 40 s: 2,000 units of room, which the
        // backlog of 2,500 is past.
        assert_eq!(view.room_units, 2_000);
        assert_eq!(view.backlog_units, 2_500);
        let mut allowance = lifted.allowance("pt_b");
        assert!(matches!(allowance.take(1), Err((Busy::Settling, _))));
        // Six seconds in which 600 of it settle (100 a second, as before)
        // and nothing comes: 1,900 left, room for 100 more.
        let at = start + Duration::from_secs(11);
        lifted.read_backlog(at, Utc::now(), backlog(1_900, 1_900));
        let mut allowance = lifted.allowance("pt_b");
        assert!(matches!(allowance.take(101), Err((Busy::Settling, _))));
        assert_eq!(allowance.take(100), Ok(()));
        // With the suppliers' limit below it, the suppliers bound it again.
        let (limited, _) = admission(1);
        for second in 0..=5 {
            let at = start + Duration::from_secs(second);
            limited.read_backlog(at, Utc::now(), backlog(1_000, 900));
        }
        assert_eq!(limited.view().bound_by, Some("suppliers"));
        assert_eq!(limited.view().room_units, 40);
    }

    #[test]
    fn a_slow_down_answer_halves_the_capacity() {
        let (admission, gate) = admission(8);
        gate.hold(Duration::from_millis(1));
        admission.learn();
        assert_eq!(admission.view().room_units, 160);
        assert!(admission.view().slowed_down);
    }

    #[tokio::test]
    async fn a_pace_learnt_from_slow_downs_counts_instead_of_the_limit() {
        let (admission, gate) = admission(8);
        // Eight calls the supplier met with four answers and four refusals.
        gate.met_burst(4, 4, Duration::from_millis(1)).await;
        tokio::time::sleep(Duration::from_millis(5)).await;
        gate.admit().await;
        let pace = gate.learnt_per_second().expect("a pace learnt");
        assert!(pace < 8.0 * 0.7 + 1e-9, "{pace}");
        admission.learn();
        let view = admission.view();
        // The pace, not the limit, and not halved again: pace × 40 s.
        assert_eq!(view.room_units, (pace * 40.0).floor() as u64);
        assert_eq!(view.suppliers[0].learnt_calls_per_second, Some(pace));
        assert!(!view.slowed_down);
    }

    #[test]
    fn refusals_are_counted_each_time_and_logged_once_per_window() {
        let (admission, _) = admission(8);
        assert!(admission.refused("pt_a", Busy::FairShare, 3));
        assert!(!admission.refused("pt_a", Busy::FairShare, 3));
        assert!(
            admission.refused("pt_a", Busy::Capacity, 3),
            "another reason"
        );
        assert!(
            admission.refused("pt_b", Busy::FairShare, 3),
            "another partner"
        );
        let view = admission.view();
        assert_eq!(view.refusals.get("fair_share"), Some(&3));
        assert_eq!(view.refusals.get("capacity"), Some(&1));
    }
}
