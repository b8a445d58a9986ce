//! The actors that decide and do the work behind the HTTP handlers.
//!
//! - [`account`]: one per partner, the only writer of its floats. It decides
//!   idempotency, balance and acceptance of orders, and refunds.
//! - [`accounts`]: the directory that spawns account actors on first use,
//!   supervises them (restart with state reloaded from the database), and
//!   passivates idle ones.
//! - [`provisioning`]: asks the supplier for profiles of accepted orders,
//!   with bounded concurrency.
//! - [`reconciler`]: re-drives orders stranded in `processing`.
//! - [`admission`]: the node's view of what the supplier can take, from
//!   which account actors admit live orders (not an actor: a shared view
//!   refreshed beside them).
//!
//! Every start, stop, failure and restart is one log line with the fields
//! `actor`, `partner_id` (account actors) and `reason`.

pub mod account;
pub mod accounts;
pub mod admission;
pub mod provisioning;
pub mod reconciler;
pub mod services;
pub mod supplier_orders;
pub mod writer;

/// Logs one supervision event in the uniform shape operators filter on.
pub fn log_lifecycle(actor: &str, partner_id: Option<&str>, event: &str, reason: &str) {
    match event {
        "failed" => tracing::error!(actor, partner_id, event, reason, "actor {event}"),
        _ => tracing::info!(actor, partner_id, event, reason, "actor {event}"),
    }
}
