//! The actors that decide and do the work behind the HTTP handlers.
//!
//! - [`account`]: one per partner, the only writer of its floats. It decides
//!   idempotency, balance and acceptance of orders, and refunds.
//! - [`accounts`]: the directory that spawns account actors on first use,
//!   supervises them (restart with state reloaded from the database), and
//!   passivates idle ones.
//! - [`provisioning`]: asks the supplier for profiles of accepted orders,
//!   with bounded concurrency; [`supplier_orders`] gathers their units
//!   into supplier orders, and [`deliveries`] writes the profiles back in
//!   batches.
//! - [`reconciler`]: re-drives orders stranded in `processing`.
//! - [`admission`]: the node's view of what the supplier can take, from
//!   which account actors admit live orders (not an actor: a shared view
//!   refreshed beside them).
//!
//! Every start, stop, failure and restart is one log line with the fields
//! `actor`, `partner_id` (account actors) and `reason`, and is kept in
//! [`events`] for the operator console.

pub(crate) mod account;
pub(crate) mod accounts;
pub(crate) mod admission;
pub(crate) mod claims;
pub(crate) mod deliveries;
pub(crate) mod events;
pub(crate) mod provisioning;
pub(crate) mod reconciler;
pub(crate) mod services;
pub(crate) mod supplier_orders;
pub(crate) mod writer;

/// Logs one supervision event in the uniform shape operators filter on,
/// and keeps it for the console.
pub(crate) fn log_lifecycle(actor: &str, partner_id: Option<&str>, event: &str, reason: &str) {
    events::record(events::SupervisionEvent {
        at: crate::domain::time::now(),
        actor: actor.to_owned(),
        partner_id: partner_id.map(str::to_owned),
        event: event.to_owned(),
        reason: reason.to_owned(),
    });
    match event {
        "failed" => tracing::error!(actor, partner_id, event, reason, "actor {event}"),
        _ => tracing::info!(actor, partner_id, event, reason, "actor {event}"),
    }
}

/// An order settled at `now`, wherever it settled (its profiles delivered,
/// its last units refunded, a pass that found none left): counted, its time
/// since acceptance recorded, and one `order settled` line in one shape, so
/// that an operator finds every order's end, and whose order it was, by one
/// message.
pub(crate) fn order_settled(
    order_id: &str,
    settled: &crate::store::orders::Settled,
    now: chrono::DateTime<chrono::Utc>,
) {
    crate::metrics::order_settled(settled, now);
    // Clocks of two nodes may disagree: never a negative time.
    let settled_after_ms = (now - settled.created_at).num_milliseconds().max(0);
    tracing::info!(
        order_id,
        partner_id = %settled.partner_id,
        mode = settled.mode.as_str(),
        status = settled.status.as_str(),
        failure_code = settled.failure_code.map(|code| code.as_str()),
        settled_after_ms,
        "order settled"
    );
}

/// An inline writer of `db`'s SQLite file for `writer`, its outcomes
/// counted in the metrics; `None` on PostgreSQL.
pub(crate) fn inline_writer(
    db: &crate::store::Db,
    writer: &'static str,
) -> Option<crate::store::inline_write::InlineWriter> {
    let counted = crate::store::inline_write::Counts {
        outcome: crate::metrics::inline_write,
        commit: crate::metrics::inline_commit,
        wal: crate::metrics::sqlite_wal,
    };
    crate::store::inline_write::InlineWriter::for_db(db, writer, counted)
}

/// Runs `work` in a transaction of `inline`, the writer's SQLite connection
/// on this thread: `Some(Ok)` committed, `Some(Err)` the work refused
/// (rolled back), `None` no inline writer, or it failed otherwise (rolled
/// back): the caller writes through the pool, whose answer is the one given.
pub(crate) async fn write_inline<T, E>(
    inline: Option<&crate::store::inline_write::InlineWriter>,
    work: impl FnOnce(&rusqlite::Connection) -> Result<T, crate::store::inline_write::InlineFailed<E>>
    + Send
    + 'static,
) -> Option<Result<T, E>>
where
    T: Send + 'static,
    E: Send + 'static,
{
    use crate::store::inline_write::InlineFailed;
    match inline?.transaction(work).await {
        Ok(done) => Some(Ok(done)),
        Err(InlineFailed::Refused(why)) => Some(Err(why)),
        Err(InlineFailed::Unavailable(_)) => None,
    }
}
