//! The driver of one supplier order: places it under its transaction id
//! (in a placement slot when live) with the supplier it was written down for,
//! hands its units to the next supplier of the route when that one will
//! certainly not deliver, then waits for the profiles, woken by the
//! supplier's webhook or polling with backoff, and writes down how it ended.

use std::{sync::Arc, time::Duration};

use chrono::Utc;
use entities::supplier_order;
use tokio::sync::Notify;

use super::{
    Delivered, Inner, NewRow, Outcome, SupplierOrdersArgs, WEBHOOKS_FLOWING, lock, new_id, new_row,
    packages_of,
};
use crate::{
    domain::{
        order::FailureCode, partner::Mode, states::SupplierOrderStatus, supplier::SupplierName,
        time,
    },
    store::{self, supplier_orders as rows},
    supplier::{Allocation, Placed, Profile, Supplier, SupplierError, set::SupplierEntry},
};

/// How one supplier order's placement ended.
enum Placement {
    /// The supplier took it: its order number, and the profiles when the
    /// answer carried them.
    Placed(String, Vec<Profile>),
    /// Its units went to a new supplier order (failover): drive that one.
    HandedOver(String),
    /// It ended here.
    Ended(Outcome),
}

/// Carries one supplier order to its end, following its successors when its
/// units were handed to another supplier.
#[tracing::instrument(skip_all, fields(transaction_id = %id))]
pub(super) async fn drive(inner: &Inner, id: &str) -> Outcome {
    let mut id = id.to_owned();
    // A chain is at most as long as the route; the bound only guards
    // against a corrupted successor loop.
    for _ in 0..16 {
        let row = match rows::get(&inner.args.writes, &id).await {
            Ok(Some(row)) => row,
            Ok(None) => {
                return Outcome::Failed {
                    code: FailureCode::InternalError,
                    reason: format!("supplier order {id} was never written down"),
                };
            }
            Err(err) => return Outcome::Later(err.to_string()),
        };
        if row.status == SupplierOrderStatus::Failed {
            match row.successor_id {
                Some(next) => {
                    id = next;
                    continue;
                }
                None => {
                    return Outcome::Failed {
                        code: FailureCode::SupplierError,
                        reason: row.last_error.unwrap_or_default(),
                    };
                }
            }
        }
        match drive_one(inner, &row).await {
            Step::Next(next) => id = next,
            Step::Ended(outcome) => return outcome,
        }
    }
    Outcome::Failed {
        code: FailureCode::InternalError,
        reason: format!("supplier order {id}: too many hand-overs"),
    }
}

/// Where driving one supplier order led.
enum Step {
    /// Drive this supplier order next (its successor, or itself again
    /// after another node settled it).
    Next(String),
    /// The end.
    Ended(Outcome),
}

/// Places one supplier order (unless already placed) and waits for its
/// profiles.
async fn drive_one(inner: &Inner, row: &supplier_order::Model) -> Step {
    let args = &inner.args;
    let (supplier, entry): (Arc<dyn Supplier>, Option<Arc<SupplierEntry>>) = match row.mode {
        Mode::Sandbox => (args.sandbox.clone(), None),
        Mode::Live => match SupplierName::parse(&row.supplier).and_then(|n| args.live.get(n)) {
            Some(entry) => (entry.client.clone(), Some(entry.clone())),
            None => {
                return Step::Ended(Outcome::Later(format!(
                    "supplier `{}` is not configured on this node",
                    row.supplier
                )));
            }
        },
    };
    let deadline = row.created_at
        + chrono::Duration::from_std(args.deadline).unwrap_or(chrono::Duration::seconds(92));
    let order_no = match row.order_no.clone() {
        Some(order_no) => order_no,
        None => {
            let placement = {
                // Counted as queued at its supplier (for spreading new work)
                // while it waits for and holds one of the supplier's slots.
                let _queued = entry.as_ref().map(|e| e.queue());
                let _slot = match &entry {
                    Some(entry) => entry.slots.clone().acquire_owned().await.ok(),
                    None => None,
                };
                place(args, supplier.as_ref(), entry.as_deref(), row, deadline).await
            };
            match placement {
                // A synchronous answer with every profile: nothing to wait for.
                Placement::Placed(_, profiles)
                    if profiles.len() >= usize::try_from(row.unit_count).unwrap_or(usize::MAX) =>
                {
                    return Step::Ended(allocated(args, row, profiles).await);
                }
                Placement::Placed(order_no, _) => order_no,
                Placement::HandedOver(next) => return Step::Next(next),
                Placement::Ended(outcome) => return Step::Ended(outcome),
            }
        }
    };
    Step::Ended(wait_for(inner, supplier.as_ref(), row, &order_no, deadline).await)
}

/// Waits for the profiles of a placed supplier order, woken by its webhook.
async fn wait_for(
    inner: &Inner,
    supplier: &dyn Supplier,
    row: &supplier_order::Model,
    order_no: &str,
    deadline: chrono::DateTime<Utc>,
) -> Outcome {
    let args = &inner.args;
    let notify = lock(&inner.wakers).wait(order_no);
    let webhooks_flowing =
        lock(&inner.last_webhook).is_some_and(|at| at.elapsed() < WEBHOOKS_FLOWING);
    let first_wait = match (row.mode == Mode::Live, webhooks_flowing) {
        (false, _) => Duration::ZERO,
        (true, true) => args.max_poll_interval,
        (true, false) => args.poll_interval,
    };
    let outcome = await_profiles(
        args,
        supplier,
        row,
        order_no,
        Wait {
            deadline,
            first: first_wait,
            woken: &notify,
        },
    )
    .await;
    lock(&inner.wakers).done(order_no);
    outcome
}

/// The outcome of allocated profiles: they and the units they go to, read
/// once here rather than by every order that carries a unit.
async fn delivered(
    args: &SupplierOrdersArgs,
    row: &supplier_order::Model,
    profiles: Vec<Profile>,
) -> Outcome {
    match rows::unit_ids_of(&args.writes, &row.id).await {
        Ok(carriers) => Outcome::Profiles(Arc::new(Delivered {
            supplier: row.supplier.clone(),
            profiles,
            seats: carriers
                .into_iter()
                .enumerate()
                .map(|(seat, id)| (id, seat))
                .collect(),
        })),
        Err(err) => Outcome::Later(format!("reading the units of {}: {err}", row.id)),
    }
}

/// Whether a transient failure may still be retried: the deadline leaves
/// more than the reserve to place and allocate.
fn time_left_to_retry(args: &SupplierOrdersArgs, deadline: chrono::DateTime<Utc>) -> bool {
    let reserve = chrono::Duration::from_std(args.reserve).unwrap_or(chrono::Duration::zero());
    time::now() + reserve < deadline
}

/// The pause before the n-th retry: doubling from `retry_backoff`, capped.
fn backoff(args: &SupplierOrdersArgs, attempts: i32) -> Duration {
    let doublings = u32::try_from(attempts.saturating_sub(1).clamp(0, 16)).unwrap_or(0);
    args.retry_backoff
        .saturating_mul(1 << doublings)
        .min(args.max_retry_backoff)
}

/// Places the supplier order under its transaction id until the supplier
/// answers an order number, the units move to the next supplier, or it is
/// settled that nobody will deliver them.
async fn place(
    args: &SupplierOrdersArgs,
    supplier: &dyn Supplier,
    entry: Option<&SupplierEntry>,
    row: &supplier_order::Model,
    deadline: chrono::DateTime<Utc>,
) -> Placement {
    let mut attempts = row.attempts;
    let mut sent = row.calls_sent;
    loop {
        // A supplier out of the route gets no call; its units move on if
        // nothing was ever sent, else they wait for it.
        if let Some(entry) = entry
            && !entry.allow_call()
        {
            if sent == 0
                && let Some(next) = hand_over(args, entry, row, "out of the route").await
            {
                return next;
            }
            if !time_left_to_retry(args, deadline) {
                return Placement::Ended(
                    fail(args, &row.id, "the supplier stayed out of the route".into()).await,
                );
            }
            tokio::time::sleep(backoff(args, attempts.max(1))).await;
            continue;
        }
        let result = attempt(args, supplier, row, &mut sent).await;
        if let Some(entry) = entry {
            entry.record(&result);
        }
        match result {
            Ok(placed) => return record_placed(args, row, placed).await,
            Err(error) if error.certainly_not_taken() && sent == 0 => {
                if let Some(entry) = entry
                    && let Some(next) = hand_over(args, entry, row, &error.to_string()).await
                {
                    return next;
                }
                if let SupplierError::Refused(reason) = error {
                    tracing::warn!(transaction_id = %row.id, reason, "supplier refused the order");
                    return Placement::Ended(fail(args, &row.id, reason).await);
                }
                // Not reached, and no other supplier: wait for this one.
                attempts = match count_attempt(args, row, &error).await {
                    Ok(n) => n,
                    Err(outcome) => return Placement::Ended(outcome),
                };
            }
            Err(error) => {
                tracing::warn!(transaction_id = %row.id, attempts, %error, "supplier order attempt failed; asking again under the same transaction id");
                attempts = match count_attempt(args, row, &error).await {
                    Ok(n) => n,
                    Err(outcome) => return Placement::Ended(outcome),
                };
            }
        }
        if !time_left_to_retry(args, deadline) {
            let reason = format!(
                "the supplier did not take the order in {attempts} attempts before the deadline"
            );
            return Placement::Ended(fail(args, &row.id, reason).await);
        }
        tokio::time::sleep(backoff(args, attempts)).await;
    }
}

/// One placement call, preceded (for a supplier without an idempotency key,
/// when an earlier call may have been taken) by a lookup. `sent` counts the
/// calls that may have been taken, as written down.
async fn attempt(
    args: &SupplierOrdersArgs,
    supplier: &dyn Supplier,
    row: &supplier_order::Model,
    sent: &mut i32,
) -> Result<Placed, SupplierError> {
    let live = row.mode == Mode::Live;
    if live && !supplier.idempotent_placement() && *sent > 0 {
        match supplier.find_order(&row.id).await? {
            Some(placed) => {
                tracing::info!(transaction_id = %row.id, order_no = placed.order_no, "a lost placement was found by its transaction id");
                return Ok(placed);
            }
            None => {
                rows::none_taken(&args.writes, &row.id, time::now())
                    .await
                    .map_err(|e| SupplierError::Transient(e.to_string()))?;
                *sent = 0;
                tracing::info!(transaction_id = %row.id, "the supplier has no order under this transaction id: nothing was taken");
                return Err(SupplierError::NotSent(
                    "the lookup proved the earlier placement was never taken".into(),
                ));
            }
        }
    }
    if live {
        *sent = rows::count_sent(
            &args.writes,
            args.inline.as_deref(),
            &row.id,
            1,
            time::now(),
        )
        .await
        .map_err(|e| SupplierError::NotSent(format!("writing the call down: {e}")))?;
    }
    let count = u32::try_from(row.unit_count).unwrap_or(1);
    let result = supplier
        .place_order(&row.id, &row.package_code, count)
        .await;
    match &result {
        // A refusal under a transaction id the supplier treats as the same
        // order says that no call under it was ever taken.
        Err(SupplierError::Refused(_)) if live && supplier.idempotent_placement() => {
            *sent = match rows::none_taken(&args.writes, &row.id, time::now()).await {
                Ok(()) => 0,
                // Not written down: the count stays, and the next call is
                // asked under the same transaction id all the same.
                Err(_) => *sent,
            };
        }
        // Nothing left, or nothing was bought by this call: it is taken back.
        Err(e) if live && e.certainly_not_taken() => {
            *sent = rows::count_sent(
                &args.writes,
                args.inline.as_deref(),
                &row.id,
                -1,
                time::now(),
            )
            .await
            .unwrap_or(*sent);
        }
        _ => {}
    }
    result
}

/// Writes the order number down.
async fn record_placed(
    args: &SupplierOrdersArgs,
    row: &supplier_order::Model,
    placed: Placed,
) -> Placement {
    if let Err(err) = rows::placed(
        &args.writes,
        args.inline.as_deref(),
        &row.id,
        &placed.order_no,
        placed.unit_cost_cents,
        time::now(),
    )
    .await
    {
        // Not written down: the next driver asks again under the same
        // transaction id (or looks it up) and gets the same order.
        return Placement::Ended(Outcome::Later(err.to_string()));
    }
    tracing::info!(transaction_id = %row.id, supplier = row.supplier, order_no = placed.order_no, units = row.unit_count, "supplier order placed");
    Placement::Placed(placed.order_no, placed.profiles)
}

/// Counts a placement call that settled nothing.
async fn count_attempt(
    args: &SupplierOrdersArgs,
    row: &supplier_order::Model,
    error: &SupplierError,
) -> Result<i32, Outcome> {
    rows::failed_attempt(&args.writes, &row.id, &error.to_string(), time::now())
        .await
        .map_err(|err| Outcome::Later(err.to_string()))
}

/// Hands the units to the next supplier of the route that sells the plan,
/// if there is one: `None` when there is none (or the order was settled
/// meanwhile by another node, whose outcome the caller then reads).
async fn hand_over(
    args: &SupplierOrdersArgs,
    from: &SupplierEntry,
    row: &supplier_order::Model,
    reason: &str,
) -> Option<Placement> {
    let plan_id = row.plan_id.as_deref()?;
    let (next, package_code) = args
        .live
        .next_after(from.name, &packages_of(args, plan_id))?;
    let successor = new_row(
        args,
        NewRow {
            id: new_id(),
            mode: row.mode,
            supplier: next.as_str().to_owned(),
            plan_id,
            package_code,
            units: usize::try_from(row.unit_count).unwrap_or(0),
            // The deadline runs from the first supplier order: a failover
            // does not give the units more time than the spec allows.
            created_at: row.created_at,
        },
    );
    let to = successor.id.clone();
    let written = async {
        let txn = store::begin_write(&args.db).await?;
        let handed = rows::hand_over(&txn, &row.id, reason, successor).await?;
        txn.keep_if(handed).await
    };
    match written.await {
        Ok(true) => {
            from.failed_over(usize::try_from(row.unit_count).unwrap_or(0));
            crate::metrics::supplier_failover(
                from.name.as_str(),
                next.as_str(),
                failover_reason(reason),
                usize::try_from(row.unit_count).unwrap_or(0),
            );
            tracing::warn!(transaction_id = %row.id, from = from.name.as_str(), to = next.as_str(), successor = %to, reason, "units handed to the next supplier");
            Some(Placement::HandedOver(to))
        }
        // Settled by someone else meanwhile: read it again from the top.
        Ok(false) => Some(Placement::HandedOver(row.id.clone())),
        Err(err) => Some(Placement::Ended(Outcome::Later(err.to_string()))),
    }
}

/// The `reason` label of a failover.
fn failover_reason(reason: &str) -> &'static str {
    if reason.contains("refused") {
        "refused"
    } else if reason.contains("out of the route") {
        "out_of_route"
    } else {
        "not_sent"
    }
}

/// How a driver waits for profiles.
struct Wait<'a> {
    deadline: chrono::DateTime<Utc>,
    /// Before the first question: a real allocation takes a while, and the
    /// supplier's webhook usually says when it is done.
    first: Duration,
    woken: &'a Notify,
}

/// Waits for the profiles of a placed supplier order.
async fn await_profiles(
    args: &SupplierOrdersArgs,
    supplier: &dyn Supplier,
    row: &supplier_order::Model,
    order_no: &str,
    wait: Wait<'_>,
) -> Outcome {
    let Wait {
        deadline,
        first,
        woken,
    } = wait;
    let wanted = usize::try_from(row.unit_count).unwrap_or(1);
    let mut pause = args.poll_interval;
    let mut seen: Vec<Profile> = Vec::new();
    if !first.is_zero() {
        tokio::select! {
            _ = woken.notified() => {}
            _ = tokio::time::sleep(first) => {}
        }
    }
    loop {
        match supplier.query(order_no).await {
            Ok(Allocation::Ready(profiles)) if profiles.len() >= wanted => {
                return allocated(args, row, profiles).await;
            }
            Ok(Allocation::Ready(profiles)) => seen = profiles,
            Ok(Allocation::Pending) => {}
            Err(
                SupplierError::Transient(reason)
                | SupplierError::SlowDown(reason)
                | SupplierError::NotSent(reason),
            ) => {
                tracing::debug!(order_no, reason, "allocation query failed; asking again");
            }
            Err(SupplierError::Refused(reason)) => {
                tracing::warn!(order_no, reason, "supplier refused the allocation");
                return fail(args, &row.id, reason).await;
            }
        }
        if time::now() >= deadline {
            return short_at_deadline(args, row, order_no, seen).await;
        }
        let left = (deadline - time::now()).to_std().unwrap_or_default();
        tokio::select! {
            _ = woken.notified() => {}
            _ = tokio::time::sleep(pause.min(left)) => {}
        }
        pause = (pause * 2).min(args.max_poll_interval);
    }
}

/// The deadline passed with `seen` of the profiles allocated: those are
/// delivered and the rest refunded.
async fn short_at_deadline(
    args: &SupplierOrdersArgs,
    row: &supplier_order::Model,
    order_no: &str,
    seen: Vec<Profile>,
) -> Outcome {
    tracing::warn!(
        order_no,
        delivered = seen.len(),
        wanted = row.unit_count,
        "allocation did not finish within the provisioning deadline"
    );
    if seen.is_empty() {
        return fail(
            args,
            &row.id,
            "allocation did not finish within the deadline".into(),
        )
        .await;
    }
    let _ = rows::finish(
        &args.writes,
        args.inline.as_deref(),
        &row.id,
        SupplierOrderStatus::Allocated,
        Some("short at the deadline"),
        time::now(),
    )
    .await;
    delivered(args, row, sorted(seen)).await
}

/// Every profile arrived: the supplier order is allocated.
async fn allocated(
    args: &SupplierOrdersArgs,
    row: &supplier_order::Model,
    profiles: Vec<Profile>,
) -> Outcome {
    let _ = rows::finish(
        &args.writes,
        args.inline.as_deref(),
        &row.id,
        SupplierOrderStatus::Allocated,
        None,
        time::now(),
    )
    .await;
    delivered(args, row, sorted(profiles)).await
}

fn sorted(mut profiles: Vec<Profile>) -> Vec<Profile> {
    profiles.sort_by(|a, b| a.iccid.cmp(&b.iccid));
    profiles.dedup_by(|a, b| a.iccid == b.iccid);
    profiles
}

async fn fail(args: &SupplierOrdersArgs, id: &str, reason: String) -> Outcome {
    if let Err(err) = rows::finish(
        &args.writes,
        args.inline.as_deref(),
        id,
        SupplierOrderStatus::Failed,
        Some(&reason),
        time::now(),
    )
    .await
    {
        return Outcome::Later(err.to_string());
    }
    Outcome::Failed {
        code: FailureCode::SupplierError,
        reason,
    }
}
