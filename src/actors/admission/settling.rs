//! What this service's own settling allows: the settling windows read
//! from the backlog, and what bounds the room, the suppliers' capacity or
//! the settling rate ([`crate::domain::admission::SettlingRate`]).

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use super::{Admission, State};
use crate::{
    domain::admission::{self, Busy, Drain, SettleWindow},
    store,
};

/// Busy seconds of this service's settling before its rate bounds the
/// room: two windows, so that one reading alone never refuses anything.
/// Longer only lets the first burst of a load the pipeline cannot keep up
/// with grow further past the room before anything is refused; the room
/// itself (the horizon's work) is what admits bursts.
const SETTLING_BOUNDS_AFTER: f64 = 2.0;

/// The share of the horizon's work at the settling rate the backlog may
/// hold. Half: the rate moves with the load it is measured under (it fell
/// from 10,000 units a second to 3,000 under a flood of refused asks, while
/// what was admitted at the first still waited: 90 s with the whole
/// horizon, 49 s with half; docs/admission.md).
const SETTLING_ROOM_SHARE: f64 = 0.5;

/// Shortest window over which what the fleet settled is read: shorter
/// ones (the backlog may be read every 100 ms) would often settle nothing
/// while a slow pipeline works.
const SETTLE_WINDOW: Duration = Duration::from_secs(1);

/// When a reading of the backlog was taken, and what it held.
#[derive(Debug, Clone, Copy)]
pub(super) struct Reading {
    /// On this node's monotonic clock, for the window's length.
    at: Instant,
    /// On the wall clock the orders' acceptance times are written in.
    wall: DateTime<Utc>,
    /// Live units processing, every partner's.
    units: u64,
}

impl Admission {
    /// What bounds the backlog now: the suppliers' capacity over the
    /// horizon, or this service's settling rate over its share of it,
    /// whichever room is smaller; `None` when neither bounds it.
    pub(super) fn bound(&self, state: &State) -> Option<Drain> {
        let suppliers = self.suppliers_limited().then(|| Drain {
            per_second: self.capacity(state).units_per_second(),
            full: Busy::Capacity,
            horizon_seconds: self.horizon_seconds,
        });
        let settling = state
            .settling
            .bound(SETTLING_BOUNDS_AFTER)
            .map(|per_second| Drain {
                per_second,
                full: Busy::Settling,
                horizon_seconds: self.settling_horizon(),
            });
        admission::bound(suppliers, settling)
    }

    /// The seconds of settling the backlog may hold: the horizon's share.
    fn settling_horizon(&self) -> u32 {
        ((f64::from(self.horizon_seconds) * SETTLING_ROOM_SHARE).floor() as u32).max(1)
    }

    /// Since when units still processing count as left of the settling
    /// window's first reading (`now` when no window has begun).
    pub(super) fn window_began(&self, now: DateTime<Utc>) -> DateTime<Utc> {
        self.lock().window_start.map_or(now, |start| start.wall)
    }

    /// Takes a reading of the backlog begun at `at` (`wall`): it replaces
    /// the last one, and, once the settling window is [`SETTLE_WINDOW`]
    /// long and settled something, what is left of the units of the
    /// window's first reading says what the fleet settled during it; a new
    /// window begins.
    pub(super) fn read_backlog(
        &self,
        at: Instant,
        wall: DateTime<Utc>,
        read: store::orders::LiveBacklog,
    ) {
        let units = read.by_partner.values().sum();
        let reading = Reading { at, wall, units };
        let mut state = self.lock();
        let elapsed = state
            .window_start
            .map(|start| (start, at.saturating_duration_since(start.at)));
        match elapsed {
            None => state.window_start = Some(reading),
            Some((start, elapsed)) if elapsed >= SETTLE_WINDOW => {
                let window = SettleWindow {
                    seconds: elapsed.as_secs_f64(),
                    before: start.units,
                    left: read.accepted_before.min(start.units),
                };
                // A window that settled nothing yet stays open (a slow
                // pipeline settles something over a longer one), up to a
                // horizon; past that it is dropped unlearnt.
                if !window.stalled() || elapsed >= self.horizon() {
                    state
                        .settling
                        .observe(window, f64::from(self.horizon_seconds));
                    state.window_start = Some(reading);
                }
            }
            Some(_) => {}
        }
        state.read = read.by_partner;
        state.reading.clear();
    }
}
