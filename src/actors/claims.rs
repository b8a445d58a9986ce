//! The claims a node works on, renewed together.
//!
//! A provisioning pass holds its order's claim (a lease column) while it
//! works and while its units wait in supplier orders. Instead of a timer and
//! a statement per order, every pass registers its claim here, and one task
//! per node renews all of them with one statement every third of the lease
//! ([`store::orders::renew_many`]). A claim the renewal finds in another
//! node's hands (this node stalled past the lease and the other took the
//! order over) is marked lost, and its pass stops: the other node carries on.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, Weak},
    time::Duration,
};

use tokio_util::sync::CancellationToken;

use crate::{
    domain::time,
    store::{self, Db, orders::Renewal},
    sync::lock,
};

/// The orders whose claims this node's passes hold, each with the signal
/// that its claim was lost.
#[derive(Clone, Default)]
pub(crate) struct HeldClaims(Arc<Mutex<HashMap<String, CancellationToken>>>);

/// One pass's hold on its order's claim, renewed with the others until it
/// is dropped.
pub(crate) struct Held {
    /// Where the hold is registered.
    claims: HeldClaims,
    /// The order held.
    order_id: String,
    /// Cancelled when a renewal finds the claim in another node's hands.
    lost: CancellationToken,
}

impl HeldClaims {
    /// Registers a pass's claim on `order_id` (made or renewed moments ago,
    /// so the next renewal, at most a third of a lease away, keeps it).
    pub(crate) fn hold(&self, order_id: &str) -> Held {
        let lost = CancellationToken::new();
        lock(&self.0).insert(order_id.to_owned(), lost.clone());
        Held {
            claims: self.clone(),
            order_id: order_id.to_owned(),
            lost,
        }
    }

    /// Starts the node's renewal task: every `lease / 3` it extends every
    /// held claim by `lease` in one statement, and stops the passes whose
    /// claims were lost. It ends once every handle of these claims is gone.
    pub(crate) fn renew_every_third_of(&self, lease: Duration, db: Db, node_id: Arc<str>) {
        let claims = Arc::downgrade(&self.0);
        let period = (lease / 3).max(Duration::from_millis(10));
        tokio::spawn(async move {
            let start = tokio::time::Instant::now() + period;
            let mut ticks = tokio::time::interval_at(start, period);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                if !renew_once(&claims, &db, &node_id, lease).await {
                    return;
                }
            }
        });
    }
}

/// One renewal of every held claim; false once nobody holds the claims any
/// more (the node stopped).
async fn renew_once(
    claims: &Weak<Mutex<HashMap<String, CancellationToken>>>,
    db: &Db,
    node_id: &str,
    lease: Duration,
) -> bool {
    let Some(claims) = claims.upgrade() else {
        return false;
    };
    // The holds as they are now: a hold registered after this snapshot is
    // left to the next renewal, and a verdict stops only the hold it was
    // about (a later pass on the same order has a token of its own).
    let holds: HashMap<String, CancellationToken> = lock(&claims).clone();
    drop(claims);
    if holds.is_empty() {
        return true;
    }
    let ids: Vec<String> = holds.keys().cloned().collect();
    let until = time::now() + chrono::Duration::from_std(lease).unwrap_or(chrono::Duration::MAX);
    match store::orders::renew_many(db, &ids, node_id, until).await {
        Ok(found) => {
            for (order_id, renewal) in found {
                // Final: settled by its pass a moment ago, which is returning.
                if renewal == Renewal::Lost
                    && let Some(lost) = holds.get(&order_id)
                {
                    tracing::warn!(
                        order_id,
                        node_id,
                        "claim lost to another node; abandoning this pass"
                    );
                    lost.cancel();
                }
            }
        }
        Err(err) => {
            tracing::warn!(claims = ids.len(), error = %err, "renewing this node's claims failed; retrying at the next renewal");
        }
    }
    true
}

impl Held {
    /// Resolves once a renewal found this claim in another node's hands.
    pub(crate) async fn lost(&self) {
        self.lost.cancelled().await
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // One pass per order at a time on a node (provisioning's in-flight
        // set), so the entry under this order is this hold's.
        lock(&self.claims.0).remove(&self.order_id);
    }
}
