//! The live suppliers of this node, by name, each with its rate gate, its
//! tally of calls and units, its circuit breaker and its counts, and the
//! route that orders them.
//!
//! The supplier-order drivers ask the set which supplier should carry new
//! units of a plan ([`SupplierSet::choose`]), which comes next when one will
//! certainly not deliver ([`SupplierSet::next_after`]), and report every
//! call's outcome to the breaker ([`SupplierEntry::record`]). Operators read
//! [`SupplierSet::view`].

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Instant,
};

use serde::Serialize;

use super::{Supplier, SupplierError, gate::RateGate, metered::Tally};
use crate::{
    domain::supplier::{Breaker, BreakerState, Packages, Route, SupplierName},
    sync::lock,
};

/// One live supplier and what is known of it.
pub struct SupplierEntry {
    /// Its name.
    pub name: SupplierName,
    /// Its client (metered).
    pub client: Arc<dyn Supplier>,
    /// Its rate gate.
    pub gate: Arc<RateGate>,
    /// Its calls and placed units since start.
    pub tally: Arc<Tally>,
    /// Most units one of its orders carries.
    pub max_units: usize,
    /// Its placements under way at once: a quarter of a second's calls
    /// keeps its gate busy without queueing far past it. While all are
    /// busy, units gather into fuller supplier orders (or go to another
    /// supplier of the route).
    pub slots: Arc<tokio::sync::Semaphore>,
    /// How many slots there are.
    slot_count: usize,
    /// Supplier orders of this node waiting for or holding a slot.
    queued: AtomicU64,
    /// Out of the route after failures in a row, for a while.
    breaker: Mutex<Breaker>,
    /// Placements it refused since start.
    refusals: AtomicU64,
    /// Calls that failed without an answer (or never left) since start.
    failures: AtomicU64,
    /// Units moved away from it to the next supplier since start.
    failed_over: AtomicU64,
}

impl SupplierEntry {
    /// A supplier with a closed breaker.
    pub fn new(
        name: SupplierName,
        client: Arc<dyn Supplier>,
        gate: Arc<RateGate>,
        tally: Arc<Tally>,
        breaker: Breaker,
    ) -> Self {
        let max_units = usize::try_from(client.max_units_per_order()).unwrap_or(usize::MAX);
        let slot_count = match gate.per_second() {
            0 => 64,
            rate => (rate as usize / 4).max(1),
        };
        Self {
            name,
            client,
            gate,
            tally,
            max_units,
            slots: Arc::new(tokio::sync::Semaphore::new(slot_count)),
            slot_count,
            queued: AtomicU64::new(0),
            breaker: Mutex::new(breaker),
            refusals: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            failed_over: AtomicU64::new(0),
        }
    }

    /// Whether a call may go out now (false while the breaker is open, or
    /// while another call is its half-open probe).
    pub fn allow_call(&self) -> bool {
        lock(&self.breaker).allow(Instant::now())
    }

    /// Whether new units should be given to it now (also published as
    /// `esim_supplier_up`).
    pub fn takes_work(&self) -> bool {
        let takes = lock(&self.breaker).takes_work(Instant::now());
        crate::metrics::supplier_up(self.name.as_str(), takes);
        takes
    }

    /// Records a call's outcome: any answer (a refusal too) says the
    /// supplier is up; a failure without one counts toward opening.
    pub fn record<T>(&self, result: &Result<T, SupplierError>) {
        match result {
            Ok(_) | Err(SupplierError::SlowDown(_)) => lock(&self.breaker).success(),
            Err(SupplierError::Refused(_)) => {
                self.refusals.fetch_add(1, Ordering::Relaxed);
                lock(&self.breaker).success();
            }
            Err(SupplierError::Transient(_) | SupplierError::NotSent(_)) => {
                self.failures.fetch_add(1, Ordering::Relaxed);
                if lock(&self.breaker).failure(Instant::now()) {
                    tracing::warn!(
                        supplier = self.name.as_str(),
                        "supplier taken out of the route after failures in a row"
                    );
                    crate::metrics::supplier_breaker_opened(self.name.as_str());
                }
            }
        }
    }

    /// A supplier order starts waiting for a placement slot; the guard
    /// counts it until dropped.
    pub fn queue(self: &Arc<Self>) -> Queued {
        self.queued.fetch_add(1, Ordering::Relaxed);
        Queued(self.clone())
    }

    /// Supplier orders waiting for or holding a slot, per slot.
    fn load(&self, extra: usize) -> f64 {
        let queued = self.queued.load(Ordering::Relaxed) as f64 + extra as f64;
        queued / self.slots_at_pace() as f64
    }

    /// The slots the supplier's pace keeps busy: a quarter of a second's
    /// calls at the pace (or window) learnt from its slow-down answers,
    /// else all of them. Units then gather into fuller supplier orders
    /// while the supplier takes fewer calls, rather than each of many thin
    /// orders spending two calls of a pace too slow for them.
    fn slots_at_pace(&self) -> usize {
        match self.gate.paced_per_second() {
            Some(pace) => ((pace / 4.0) as usize).clamp(1, self.slot_count),
            None => self.slot_count,
        }
    }

    /// Whether a placement slot is free under the supplier's pace.
    fn has_free_slot(&self) -> bool {
        let in_use = self.slot_count - self.slots.available_permits().min(self.slot_count);
        in_use < self.slots_at_pace()
    }

    /// Units moved from this supplier to the next one.
    pub fn failed_over(&self, units: usize) {
        self.failed_over.fetch_add(units as u64, Ordering::Relaxed);
    }

    /// What an operator sees of it.
    pub fn view(&self, in_route: bool) -> SupplierView {
        let breaker = lock(&self.breaker).clone();
        let now = Instant::now();
        let (state, open_for_seconds) = match breaker.state(now) {
            BreakerState::Closed if breaker.failures() == 0 => ("up", None),
            BreakerState::Closed => ("failing", None),
            BreakerState::Open { until } => ("out_of_route", Some((until - now).as_secs_f64())),
            BreakerState::HalfOpen => ("probing", None),
        };
        let (calls, units_placed) = self.tally.read();
        let window = self.gate.window();
        SupplierView {
            name: self.name,
            in_route,
            state,
            out_of_route_for_seconds: open_for_seconds,
            failures_in_a_row: breaker.failures(),
            times_taken_out: breaker.opened(),
            calls,
            units_placed,
            refusals: self.refusals.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            units_failed_over: self.failed_over.load(Ordering::Relaxed),
            requests_per_second: self.gate.per_second(),
            slow_downs: self.gate.slow_downs(),
            learnt_requests_per_second: self.gate.learnt_per_second().map(round_tenths),
            learnt_window_seconds: window.map(|(length, _)| length.as_secs()),
            learnt_requests_per_window: window.map(|(_, calls)| calls),
        }
    }
}

/// A supplier order counted as queued at its supplier until dropped.
pub struct Queued(Arc<SupplierEntry>);

impl Drop for Queued {
    fn drop(&mut self) {
        self.0.queued.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A supplier as operators see it (`GET /operator/v1/suppliers`).
#[derive(Debug, Clone, Serialize)]
pub struct SupplierView {
    /// `esim_access` or `airalo`.
    pub name: SupplierName,
    /// Whether `suppliers.route` has it.
    pub in_route: bool,
    /// `up`, `failing` (failures in a row, still in the route),
    /// `out_of_route` (its breaker is open) or `probing` (half-open).
    pub state: &'static str,
    /// While out of the route: seconds until it is probed again.
    pub out_of_route_for_seconds: Option<f64>,
    /// Failures without an answer in a row.
    pub failures_in_a_row: u32,
    /// Times its breaker opened since start.
    pub times_taken_out: u64,
    /// Calls made since start, on this node.
    pub calls: u64,
    /// Units it accepted since start, on this node.
    pub units_placed: u64,
    /// Placements it refused since start, on this node.
    pub refusals: u64,
    /// Calls that failed without an answer since start, on this node.
    pub failures: u64,
    /// Units moved from it to the next supplier since start, on this node.
    pub units_failed_over: u64,
    /// Its rate limit (0: none).
    pub requests_per_second: u32,
    /// "Slow down" answers since start.
    pub slow_downs: u64,
    /// The calls a second this node paces it at, learnt from its "slow
    /// down" answers, while lower than `requests_per_second` (or with no
    /// limit configured); `null` otherwise.
    pub learnt_requests_per_second: Option<f64>,
    /// The supplier's window longer than a second (Airalo's minute), in
    /// seconds, once two of its "slow down" answers named where it ends;
    /// `null` otherwise.
    pub learnt_window_seconds: Option<u64>,
    /// The calls this node spends in each such window (the calls the
    /// supplier answered in one, less a margin): a burst at its start, the
    /// rest spread over it; `null` with no window learnt.
    pub learnt_requests_per_window: Option<u64>,
}

/// A rate shown to a tenth of a call a second.
fn round_tenths(rate: f64) -> f64 {
    (rate * 10.0).round() / 10.0
}

/// Every live supplier of this node and the route over them.
pub struct SupplierSet {
    /// The configured preference.
    route: Route,
    /// Every supplier this node can reach (the route's, and any other that
    /// is configured, so orders placed before a route change still finish).
    entries: Vec<Arc<SupplierEntry>>,
}

impl SupplierSet {
    /// A set over `entries` in `route` order.
    pub fn new(route: Route, entries: Vec<Arc<SupplierEntry>>) -> Self {
        Self { route, entries }
    }

    /// The route.
    pub fn route(&self) -> &Route {
        &self.route
    }

    /// One supplier, if this node can reach it.
    pub fn get(&self, name: SupplierName) -> Option<&Arc<SupplierEntry>> {
        self.entries.iter().find(|e| e.name == name)
    }

    /// The suppliers of the route, in order.
    pub fn in_route(&self) -> impl Iterator<Item = &Arc<SupplierEntry>> {
        self.route
            .suppliers()
            .iter()
            .filter_map(|name| self.get(*name))
    }

    /// The supplier that should carry a new supplier order of a plan: the
    /// first of the route that sells it, takes work now and has a placement
    /// slot to spare (counting `assigned`, the orders given out in the same
    /// batch); when every one that takes work is busy, the least loaded of
    /// them, so a burst beyond one supplier's capacity spills over to the
    /// next. When none takes work, the first seller (its units wait for it);
    /// `None` when no supplier of the route sells the plan.
    pub fn choose(
        &self,
        packages: &Packages,
        assigned: &dyn Fn(SupplierName) -> usize,
    ) -> Option<(SupplierName, String)> {
        let sellers: Vec<(&Arc<SupplierEntry>, &str)> = self
            .route
            .sellers(packages)
            .into_iter()
            .filter_map(|(name, code)| self.get(name).map(|entry| (entry, code)))
            .collect();
        let working: Vec<&(&Arc<SupplierEntry>, &str)> =
            sellers.iter().filter(|(e, _)| e.takes_work()).collect();
        let spare = working
            .iter()
            .find(|(e, _)| e.load(assigned(e.name)) < 1.0)
            .copied();
        let least_loaded = || {
            working
                .iter()
                .min_by(|(a, _), (b, _)| {
                    a.load(assigned(a.name))
                        .total_cmp(&b.load(assigned(b.name)))
                })
                .copied()
        };
        spare
            .or_else(least_loaded)
            .or_else(|| sellers.first())
            .map(|(entry, code)| (entry.name, (*code).to_owned()))
    }

    /// Which suppliers of the route sell a plan: bit `i` for the route's
    /// `i`-th supplier that this node can reach (the order of admission's
    /// lanes).
    pub fn sellers_mask(&self, packages: &Packages) -> u8 {
        self.in_route()
            .enumerate()
            .filter(|(_, entry)| packages.of(entry.name).is_some())
            .fold(0, |mask, (i, _)| {
                mask | 1u8.checked_shl(i as u32).unwrap_or(0)
            })
    }

    /// Whether some supplier of the route has a free placement slot.
    pub fn any_free_slot(&self) -> bool {
        self.in_route().any(|e| e.has_free_slot())
    }

    /// The next supplier of the route after `current` that sells the plan
    /// and that this node can reach.
    pub fn next_after(
        &self,
        current: SupplierName,
        packages: &Packages,
    ) -> Option<(SupplierName, String)> {
        let mut from = current;
        while let Some((name, code)) = self.route.next_after(from, packages) {
            if self.get(name).is_some() {
                return Some((name, code.to_owned()));
            }
            from = name;
        }
        None
    }

    /// Most units one supplier order may carry with any supplier of the
    /// route, so that a failover never has to split one.
    pub fn max_units(&self) -> usize {
        self.in_route().map(|e| e.max_units).min().unwrap_or(1)
    }

    /// Every supplier as operators see it, the route's first.
    pub fn view(&self) -> Vec<SupplierView> {
        let mut views: Vec<SupplierView> = self.in_route().map(|e| e.view(true)).collect();
        views.extend(
            self.entries
                .iter()
                .filter(|e| !self.route.contains(e.name))
                .map(|e| e.view(false)),
        );
        views
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::supplier::sandbox::SandboxSupplier;

    fn entry_behind(name: SupplierName, gate: RateGate) -> (SupplierEntry, Arc<RateGate>) {
        let gate = Arc::new(gate);
        let entry = SupplierEntry::new(
            name,
            Arc::new(SandboxSupplier::new(Duration::ZERO)),
            gate.clone(),
            Arc::new(Tally::default()),
            Breaker::new(0, Duration::from_secs(1)),
        );
        (entry, gate)
    }

    fn unlimited_entry() -> (SupplierEntry, Arc<RateGate>) {
        entry_behind(SupplierName::EsimAccess, RateGate::new(0, None, "test"))
    }

    #[tokio::test(start_paused = true)]
    async fn a_learnt_pace_keeps_fewer_slots_free_so_units_gather() {
        let (entry, gate) = unlimited_entry();
        let _held: Vec<_> = (0..4)
            .map(|_| entry.slots.clone().try_acquire_owned().unwrap())
            .collect();
        // No limit told: 64 slots, 4 in use.
        assert!(entry.has_free_slot());
        // The supplier answers 20 of a burst of 40 and refuses the rest:
        // a pace of 18 calls a second keeps 4 slots busy.
        gate.met_burst(20, 20, Duration::from_secs(1)).await;
        tokio::time::advance(Duration::from_secs(1)).await;
        gate.admit().await;
        let pace = gate.learnt_per_second().unwrap();
        assert!((pace - 18.0).abs() < 1e-9, "{pace}");
        assert_eq!(entry.slots_at_pace(), 4);
        assert!(!entry.has_free_slot());
    }

    #[tokio::test(start_paused = true)]
    async fn a_learnt_window_keeps_one_slot_free_so_units_gather() {
        let minute = RateGate::new(0, None, "test").counting_in(Duration::from_secs(60));
        let (entry, gate) = entry_behind(SupplierName::Airalo, minute);
        // A minute's 120 calls in a burst, the 121st refused with the
        // rest of the minute: no pace a second, a window of 108 calls
        // (1.8 a second), one supplier order at a time.
        gate.met_burst(120, 1, Duration::from_secs(30)).await;
        assert_eq!(gate.learnt_per_second(), None);
        assert_eq!(gate.window(), Some((Duration::from_secs(60), 108)));
        assert_eq!(entry.slots_at_pace(), 1);
        let _held = entry.slots.clone().try_acquire_owned().unwrap();
        assert!(!entry.has_free_slot());
    }
}
