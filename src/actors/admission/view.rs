//! What operators see of admission (`GET /operator/v1/admission`,
//! `esim-reseller admin admission`).

use std::collections::HashMap;

use serde::Serialize;

use super::Admission;
use crate::domain::admission::Busy;

impl Admission {
    /// What the operator sees.
    pub fn view(&self) -> AdmissionView {
        let state = self.lock();
        let capacity = self.capacity(&state);
        let bound = self.bound(&state);
        let room = bound.map_or(0, |drain| drain.room_units());
        let active = state.active_partners(self.horizon());
        let mut partners: HashMap<&str, u64> = HashMap::new();
        for map in [&state.read, &state.reading, &state.since] {
            for (partner, units) in map {
                *partners.entry(partner.as_str()).or_default() += units;
            }
        }
        let share = room / active.max(1);
        let mut partners: Vec<PartnerShare> = partners
            .into_iter()
            .filter(|(_, units)| *units > 0)
            .map(|(partner, units)| PartnerShare {
                partner_id: partner.to_owned(),
                backlog_units: units,
                share_units: share,
            })
            .collect();
        partners.sort_by_key(|p| std::cmp::Reverse(p.backlog_units));
        let suppliers: Vec<LaneView> = self
            .lanes
            .iter()
            .zip(&state.learnt)
            .map(|(lane, learnt)| LaneView {
                name: lane.name,
                calls_per_second: lane.calls_per_second,
                learnt_calls_per_second: lane.gate.learnt_per_second(),
                units_per_call: learnt.units_per_call.get(),
                slowed_down: learnt.halved(lane),
                capacity_units_per_second: learnt.units_per_second(lane),
            })
            .collect();
        AdmissionView {
            enabled: bound.is_some(),
            bound_by: bound.map(|drain| match drain.full {
                Busy::Settling => "settling",
                Busy::Capacity | Busy::FairShare => "suppliers",
            }),
            supplier_calls_per_second: capacity.calls_per_second.round() as u32,
            units_per_call: capacity.units_per_call,
            slowed_down: suppliers.iter().any(|s| s.slowed_down),
            suppliers,
            capacity_units_per_second: capacity.units_per_second(),
            settling_units_per_second: state.settling.estimate(),
            horizon_seconds: self.horizon_seconds,
            room_units: room,
            backlog_units: state.total_units(),
            active_partners: active,
            refusals: state
                .refusals
                .iter()
                .map(|(busy, n)| (busy.as_str(), *n))
                .collect(),
            partners,
        }
    }
}

/// `GET /operator/v1/admission`.
#[derive(Debug, Serialize)]
pub struct AdmissionView {
    /// Whether admission limits anything now: the suppliers have a limit,
    /// or this service's settling fell behind.
    pub enabled: bool,
    /// What bounds the room: `suppliers` (their capacity) or `settling`
    /// (this service's own, while behind); `null` when nothing does.
    pub bound_by: Option<&'static str>,
    /// The supplier's documented limit.
    pub supplier_calls_per_second: u32,
    /// Units one call moves, as learnt (averaged over the suppliers).
    pub units_per_call: f64,
    /// Whether a recent "slow down" answer halves a supplier's capacity.
    pub slowed_down: bool,
    /// Each supplier of the route: what it adds to the capacity.
    pub suppliers: Vec<LaneView>,
    /// Units per second the supplier can deliver.
    pub capacity_units_per_second: f64,
    /// Units per second the fleet settled while behind, as learnt (`null`
    /// while it keeps up); it bounds the room once behind for two seconds.
    pub settling_units_per_second: Option<f64>,
    /// Seconds of supplier work the backlog may hold.
    pub horizon_seconds: u32,
    /// Units the backlog may hold: the lower of the capacity × horizon and
    /// the settling rate × half the horizon (0 when nothing bounds it).
    pub room_units: u64,
    /// Live units accepted and not settled, every node's.
    pub backlog_units: u64,
    /// Partners with units in the backlog.
    pub active_partners: u64,
    /// Refusals on this node since start, by reason.
    pub refusals: HashMap<&'static str, u64>,
    /// Each partner with units in the backlog, and the share it may hold.
    pub partners: Vec<PartnerShare>,
}

/// One supplier's part of the capacity.
#[derive(Debug, Serialize)]
pub struct LaneView {
    /// The supplier.
    pub name: &'static str,
    /// Its configured limit (0: none).
    pub calls_per_second: u32,
    /// The pace its gate learnt from its "slow down" answers, counted
    /// instead of the limit while it holds (`null`: none).
    pub learnt_calls_per_second: Option<f64>,
    /// Units one of its calls moves, as learnt.
    pub units_per_call: f64,
    /// Whether a recent "slow down" answer halves its capacity.
    pub slowed_down: bool,
    /// Units per second it can deliver.
    pub capacity_units_per_second: f64,
}

/// One partner's place in the backlog.
#[derive(Debug, Serialize)]
pub struct PartnerShare {
    pub partner_id: String,
    pub backlog_units: u64,
    /// Units this partner may hold while the others ask too.
    pub share_units: u64,
}
