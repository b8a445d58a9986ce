//! Group commit: how an account actor decides a batch of queued order
//! requests against its in-memory state before one transaction persists them.
//!
//! The planner is pure: it sees each request's existing key binding (looked
//! up beforehand in one query) and the balances, and says for every request
//! in order whether it is accepted, refused (binding the key or not), a
//! replay, or a key reuse. Keys bound earlier in the same batch count as
//! bound, so duplicates inside one batch replay the first.

use std::collections::HashMap;

use entities::{idempotency_key, order};

use crate::{
    domain::partner::Mode,
    http::error::{ApiError, ErrorCode},
};

/// One queued request, as the planner needs it.
#[derive(Debug, Clone)]
pub struct Request {
    pub key: String,
    pub mode: Mode,
    pub fingerprint: String,
    pub verdict: Result<order::Model, ApiError>,
    pub always_insufficient: bool,
}

/// What to do with one request.
#[derive(Debug, Clone)]
pub enum Plan {
    /// Debit and write this order.
    Accept(Box<order::Model>),
    /// Refuse; `bind` when the refusal binds the key (402, 403).
    Refuse { error: ApiError, bind: bool },
    /// The key is bound already (before or earlier in this batch): replay it.
    Replay(Binding),
    /// The key is bound to another request or mode.
    Reused(ApiError),
}

/// A key's binding, existing or planned in this batch.
#[derive(Debug, Clone)]
pub enum Binding {
    Order(String),
    Refusal(ApiError),
}

/// The planned batch.
#[derive(Debug)]
pub struct Planned {
    pub plans: Vec<Plan>,
    /// Balances after every accepted order: (live, sandbox).
    pub balances: (i64, i64),
}

/// Decides a batch in order against `balances` and the existing bindings.
pub fn plan(
    requests: &[Request],
    existing: &HashMap<String, idempotency_key::Model>,
    balances: (i64, i64),
) -> Planned {
    let (mut live, mut sandbox) = balances;
    let mut planned: HashMap<&str, (&str, &str, Binding)> = HashMap::new();
    let mut plans = Vec::with_capacity(requests.len());
    for request in requests {
        let bound = planned
            .get(request.key.as_str())
            .map(|(mode, fingerprint, binding)| (*mode, *fingerprint, binding.clone()))
            .or_else(|| {
                existing.get(&request.key).map(|record| {
                    let binding = match (
                        &record.order_id,
                        record.error_body.as_ref().and_then(ApiError::from_stored),
                    ) {
                        (Some(order_id), _) => Binding::Order(order_id.clone()),
                        (None, Some(error)) => Binding::Refusal(error),
                        (None, None) => Binding::Refusal(ApiError::new(ErrorCode::InternalError)),
                    };
                    (record.mode.as_str(), record.fingerprint.as_str(), binding)
                })
            });
        if let Some((mode, fingerprint, binding)) = bound {
            if mode != request.mode.as_str() || fingerprint != request.fingerprint {
                plans.push(Plan::Reused(key_reused(mode != request.mode.as_str())));
            } else {
                plans.push(Plan::Replay(binding));
            }
            continue;
        }
        let balance = match request.mode {
            Mode::Live => &mut live,
            Mode::Sandbox => &mut sandbox,
        };
        let plan = match &request.verdict {
            Err(error) => Plan::Refuse {
                bind: binds(error),
                error: error.clone(),
            },
            Ok(order) if request.always_insufficient || *balance < order.total_cents => {
                Plan::Refuse {
                    error: insufficient(request.mode, *balance, order.total_cents),
                    bind: true,
                }
            }
            Ok(order) => {
                *balance -= order.total_cents;
                Plan::Accept(Box::new(order.clone()))
            }
        };
        match &plan {
            Plan::Accept(order) => {
                planned.insert(
                    &request.key,
                    (
                        request.mode.as_str(),
                        &request.fingerprint,
                        Binding::Order(order.id.clone()),
                    ),
                );
            }
            Plan::Refuse { error, bind: true } => {
                planned.insert(
                    &request.key,
                    (
                        request.mode.as_str(),
                        &request.fingerprint,
                        Binding::Refusal(error.clone()),
                    ),
                );
            }
            _ => {}
        }
        plans.push(plan);
    }
    Planned {
        plans,
        balances: (live, sandbox),
    }
}

/// Refusals that bind the key for good (402, 403).
pub fn binds(refusal: &ApiError) -> bool {
    matches!(refusal.http_status().as_u16(), 402 | 403)
}

/// The 402 of an order the float cannot pay.
pub fn insufficient(mode: Mode, balance: i64, required: i64) -> ApiError {
    let mut refusal = ApiError::new(ErrorCode::BalanceInsufficient)
        .with_extra("balance_cents", balance)
        .with_extra("required_cents", required);
    if mode == Mode::Sandbox {
        refusal = refusal.with_extra("mode", "sandbox");
    }
    refusal
}

/// The 409 of a key bound to another request or mode.
pub fn key_reused(other_mode: bool) -> ApiError {
    let why = if other_mode {
        "This Idempotency-Key was used by a key of the other mode."
    } else {
        "This Idempotency-Key was used with a different request; use a new key or resend the original body."
    };
    ApiError::new(ErrorCode::IdempotencyKeyReused)
        .with_message(why)
        .with_param("Idempotency-Key")
}

#[cfg(test)]
mod tests {
    use chrono::Utc;
    use serde_json::json;

    use super::*;

    fn order(id: &str, total: i64) -> order::Model {
        order::Model {
            id: id.into(),
            partner_id: "pt_a".into(),
            mode: "live".into(),
            idempotency_key: String::new(),
            plan_id: "pl_x".into(),
            quantity: 1,
            unit_price_cents: total,
            total_cents: total,
            list_unit_cents: total,
            price_source: "tier:gold".into(),
            metadata: json!({}),
            status: "processing".into(),
            failure_code: None,
            refunded_cents: 0,
            attempts: 0,
            claimed_until: None,
            claimed_by: None,
            created_at: Utc::now(),
            completed_at: None,
        }
    }

    fn request(key: &str, fingerprint: &str, total: i64) -> Request {
        Request {
            key: key.into(),
            mode: Mode::Live,
            fingerprint: fingerprint.into(),
            verdict: Ok(order(&format!("po_{key}"), total)),
            always_insufficient: false,
        }
    }

    #[test]
    fn an_insufficient_order_in_the_middle_is_refused_and_the_rest_go_on() {
        let requests = [
            request("k1", "f", 600),
            request("k2", "f", 600),
            request("k3", "f", 300),
        ];
        let planned = plan(&requests, &HashMap::new(), (1000, 0));
        assert!(matches!(planned.plans[0], Plan::Accept(_)));
        match &planned.plans[1] {
            Plan::Refuse { error, bind } => {
                assert!(*bind);
                assert_eq!(error.code, ErrorCode::BalanceInsufficient);
                assert_eq!(error.extras["balance_cents"], 400);
                assert_eq!(error.extras["required_cents"], 600);
            }
            other => panic!("{other:?}"),
        }
        assert!(
            matches!(planned.plans[2], Plan::Accept(_)),
            "a cheaper order still fits"
        );
        assert_eq!(planned.balances, (100, 0));
    }

    #[test]
    fn duplicate_keys_inside_one_batch_replay_the_first_or_are_reused() {
        let requests = [
            request("k1", "f", 100),
            request("k1", "f", 100),
            request("k1", "other", 100),
        ];
        let planned = plan(&requests, &HashMap::new(), (1000, 0));
        assert!(matches!(planned.plans[0], Plan::Accept(_)));
        assert!(matches!(&planned.plans[1], Plan::Replay(Binding::Order(id)) if id == "po_k1"));
        assert!(
            matches!(&planned.plans[2], Plan::Reused(e) if e.code == ErrorCode::IdempotencyKeyReused)
        );
        assert_eq!(planned.balances.0, 900, "charged once");
    }

    #[test]
    fn a_key_bound_before_the_batch_replays_and_the_other_mode_is_reused() {
        let mut existing = HashMap::new();
        existing.insert(
            "k1".to_owned(),
            idempotency_key::Model {
                partner_id: "pt_a".into(),
                key: "k1".into(),
                mode: "live".into(),
                fingerprint: "f".into(),
                order_id: Some("po_old".into()),
                error_status: None,
                error_body: None,
                created_at: Utc::now(),
            },
        );
        let mut sandbox = request("k1", "f", 100);
        sandbox.mode = Mode::Sandbox;
        let planned = plan(&[request("k1", "f", 100), sandbox], &existing, (1000, 1000));
        assert!(matches!(&planned.plans[0], Plan::Replay(Binding::Order(id)) if id == "po_old"));
        assert!(matches!(&planned.plans[1], Plan::Reused(_)));
        assert_eq!(planned.balances, (1000, 1000), "nothing charged");
    }

    #[test]
    fn a_refusal_that_binds_makes_later_duplicates_replay_it() {
        let requests = [request("k1", "f", 5000), request("k1", "f", 5000)];
        let planned = plan(&requests, &HashMap::new(), (1000, 0));
        assert!(matches!(planned.plans[0], Plan::Refuse { bind: true, .. }));
        assert!(
            matches!(&planned.plans[1], Plan::Replay(Binding::Refusal(e)) if e.code == ErrorCode::BalanceInsufficient)
        );
    }

    #[test]
    fn refusals_that_do_not_bind_leave_the_key_usable() {
        let mut first = request("k1", "f", 100);
        first.verdict = Err(ApiError::new(ErrorCode::PlanNotFound));
        let planned = plan(
            &[first, request("k1", "f", 100)],
            &HashMap::new(),
            (1000, 0),
        );
        assert!(matches!(planned.plans[0], Plan::Refuse { bind: false, .. }));
        assert!(matches!(planned.plans[1], Plan::Accept(_)));
    }
}
