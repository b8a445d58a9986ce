//! The driver of one supplier order: places it under its transaction id
//! (in a placement slot when live), then waits for its profiles, woken by the
//! supplier's webhook or polling with backoff, and writes down how it ended.

use std::{sync::Arc, time::Duration};

use chrono::Utc;
use entities::supplier_order;
use tokio::sync::Notify;

use super::{Delivered, Inner, Outcome, SupplierOrdersArgs, WEBHOOKS_FLOWING, lock};
use crate::{
    domain::{order::FailureCode, partner::Mode, states::SupplierOrderStatus, time},
    store::supplier_orders as rows,
    supplier::{Allocation, Profile, Supplier, SupplierError},
};

/// Carries one supplier order to its end.
#[tracing::instrument(skip_all, fields(transaction_id = %id))]
pub(super) async fn drive(inner: &Inner, id: &str) -> Outcome {
    let args = &inner.args;
    let row = match rows::get(&args.db, id).await {
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
        return Outcome::Failed {
            code: FailureCode::SupplierError,
            reason: row.last_error.unwrap_or_default(),
        };
    }
    let supplier = match row.mode {
        Mode::Live => args.live.clone(),
        Mode::Sandbox => args.sandbox.clone(),
    };
    let deadline = row.created_at
        + chrono::Duration::from_std(args.deadline).unwrap_or(chrono::Duration::seconds(92));
    let order_no = match row.order_no.clone() {
        Some(order_no) => order_no,
        None => match place_in_slot(inner, supplier.as_ref(), &row, deadline).await {
            Ok(order_no) => order_no,
            Err(outcome) => return outcome,
        },
    };
    let notify = Arc::new(Notify::new());
    lock(&inner.wakers).insert(order_no.clone(), notify.clone());
    let webhooks_flowing =
        lock(&inner.last_webhook).is_some_and(|at| at.elapsed() < WEBHOOKS_FLOWING);
    let first_wait = match (row.mode == Mode::Live, webhooks_flowing) {
        (false, _) => Duration::ZERO,
        (true, true) => args.max_poll_interval,
        (true, false) => args.poll_interval,
    };
    let outcome = await_profiles(
        args,
        supplier.as_ref(),
        &row,
        &order_no,
        Wait {
            deadline,
            first: first_wait,
            woken: &notify,
        },
    )
    .await;
    lock(&inner.wakers).remove(&order_no);
    outcome
}

/// The outcome of allocated profiles: they and the units they go to, read
/// once here rather than by every order that carries a unit.
async fn delivered(args: &SupplierOrdersArgs, id: &str, profiles: Vec<Profile>) -> Outcome {
    match rows::units_of(&args.db, id).await {
        Ok(units) => Outcome::Profiles(Arc::new(Delivered {
            profiles,
            carriers: units.into_iter().map(|u| u.id).collect(),
        })),
        Err(err) => Outcome::Later(format!("reading the units of {id}: {err}")),
    }
}

/// Places a live supplier order in one of the placement slots.
async fn place_in_slot(
    inner: &Inner,
    supplier: &dyn Supplier,
    row: &supplier_order::Model,
    deadline: chrono::DateTime<Utc>,
) -> Result<String, Outcome> {
    let _slot = match row.mode == Mode::Live {
        true => inner.placing.clone().acquire_owned().await.ok(),
        false => None,
    };
    place(&inner.args, supplier, row, deadline).await
}

/// Places the supplier order under its transaction id until the supplier
/// answers an order number or settles that it will not.
async fn place(
    args: &SupplierOrdersArgs,
    supplier: &dyn Supplier,
    row: &supplier_order::Model,
    deadline: chrono::DateTime<Utc>,
) -> Result<String, Outcome> {
    let mut attempts = row.attempts;
    // Every driver asks at least once, even past the attempts or the
    // deadline: the call is idempotent under its transaction id, and an
    // order the supplier took before a crash is found again this way.
    loop {
        let count = u32::try_from(row.unit_count).unwrap_or(1);
        match supplier
            .place_order(&row.id, &row.package_code, count)
            .await
        {
            Ok(order_no) => {
                if let Err(err) = rows::placed(&args.db, &row.id, &order_no, time::now()).await {
                    // Not written down: the next driver asks again under the
                    // same transaction id and gets the same order number.
                    return Err(Outcome::Later(err.to_string()));
                }
                tracing::info!(transaction_id = %row.id, order_no, units = count, "supplier order placed");
                return Ok(order_no);
            }
            Err(SupplierError::Refused(reason)) => {
                tracing::warn!(transaction_id = %row.id, reason, "supplier refused the order");
                return Err(fail(args, &row.id, FailureCode::SupplierError, reason).await);
            }
            Err(SupplierError::Transient(reason)) => {
                tracing::warn!(transaction_id = %row.id, attempts, reason, "supplier order attempt failed; asking again under the same transaction id");
                attempts = match rows::failed_attempt(&args.db, &row.id, &reason, time::now()).await
                {
                    Ok(n) => n,
                    Err(err) => return Err(Outcome::Later(err.to_string())),
                };
                if attempts >= args.max_attempts || time::now() >= deadline {
                    let reason = format!(
                        "the supplier did not take the order in {attempts} attempts: {reason}"
                    );
                    return Err(fail(args, &row.id, FailureCode::SupplierError, reason).await);
                }
                tokio::time::sleep(args.retry_backoff * attempts.max(1) as u32).await;
            }
        }
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
                let _ = rows::finish(
                    &args.db,
                    &row.id,
                    SupplierOrderStatus::Allocated,
                    None,
                    time::now(),
                )
                .await;
                return delivered(args, &row.id, sorted(profiles)).await;
            }
            Ok(Allocation::Ready(profiles)) => seen = profiles,
            Ok(Allocation::Pending) => {}
            Err(SupplierError::Transient(reason)) => {
                tracing::debug!(order_no, reason, "allocation query failed; asking again");
            }
            Err(SupplierError::Refused(reason)) => {
                tracing::warn!(order_no, reason, "supplier refused the allocation");
                return fail(args, &row.id, FailureCode::SupplierError, reason).await;
            }
        }
        if time::now() >= deadline {
            tracing::warn!(
                order_no,
                delivered = seen.len(),
                wanted,
                "allocation did not finish within the provisioning deadline"
            );
            if seen.is_empty() {
                return fail(
                    args,
                    &row.id,
                    FailureCode::SupplierError,
                    "allocation did not finish within the deadline".into(),
                )
                .await;
            }
            let _ = rows::finish(
                &args.db,
                &row.id,
                SupplierOrderStatus::Allocated,
                Some("short at the deadline"),
                time::now(),
            )
            .await;
            return delivered(args, &row.id, sorted(seen)).await;
        }
        let left = (deadline - time::now()).to_std().unwrap_or_default();
        tokio::select! {
            _ = woken.notified() => {}
            _ = tokio::time::sleep(pause.min(left)) => {}
        }
        pause = (pause * 2).min(args.max_poll_interval);
    }
}

fn sorted(mut profiles: Vec<Profile>) -> Vec<Profile> {
    profiles.sort_by(|a, b| a.iccid.cmp(&b.iccid));
    profiles.dedup_by(|a, b| a.iccid == b.iccid);
    profiles
}

async fn fail(args: &SupplierOrdersArgs, id: &str, code: FailureCode, reason: String) -> Outcome {
    if let Err(err) = rows::finish(
        &args.db,
        id,
        SupplierOrderStatus::Failed,
        Some(&reason),
        time::now(),
    )
    .await
    {
        return Outcome::Later(err.to_string());
    }
    Outcome::Failed { code, reason }
}
