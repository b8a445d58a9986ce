//! The recent supervision events of this process, kept in memory for the
//! operator console beside the log line each one also is.

use std::{
    collections::VecDeque,
    sync::{Mutex, MutexGuard},
};

use chrono::{DateTime, Utc};
use serde::Serialize;

/// How many events are kept; older ones fall off (the logs keep them all).
const CAPACITY: usize = 200;

/// One start, stop, failure or restart of an actor.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SupervisionEvent {
    /// When it happened.
    pub at: DateTime<Utc>,
    /// `account`, `provisioning`, `accounts_supervisor`, ...
    pub actor: String,
    /// The partner of an account actor.
    pub partner_id: Option<String>,
    /// `started`, `stopped`, `failed` or `restarted`.
    pub event: String,
    /// Why, in the supervisor's words.
    pub reason: String,
}

static RECENT: Mutex<VecDeque<SupervisionEvent>> = Mutex::new(VecDeque::new());

/// The ring; a panic while it was held cannot leave it half-written (each
/// change is one push or pop), so a poisoned lock is taken over.
fn ring() -> MutexGuard<'static, VecDeque<SupervisionEvent>> {
    crate::sync::lock(&RECENT)
}

/// Keeps `event`, dropping the oldest past the capacity.
pub(crate) fn record(event: SupervisionEvent) {
    let mut ring = ring();
    if ring.len() == CAPACITY {
        ring.pop_front();
    }
    ring.push_back(event);
}

/// The kept events, newest first.
pub(crate) fn recent() -> Vec<SupervisionEvent> {
    ring().iter().rev().cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_keeps_the_newest_and_drops_past_its_capacity() {
        let marker = format!("test-{}", uuid::Uuid::new_v4());
        for i in 0..CAPACITY + 5 {
            record(SupervisionEvent {
                at: Utc::now(),
                actor: marker.clone(),
                partner_id: None,
                event: "started".into(),
                reason: i.to_string(),
            });
        }
        let kept = recent();
        assert!(kept.len() <= CAPACITY);
        assert_eq!(kept[0].actor, marker);
        assert_eq!(kept[0].reason, (CAPACITY + 4).to_string(), "newest first");
    }
}
