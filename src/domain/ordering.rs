//! Deciding orders: the one rule book of `POST /orders`.
//!
//! An account actor queues the order requests that reach it and decides them
//! together with [`decide`]: a pure function of the requests, the account's
//! floats and the Idempotency-Keys already bound. It answers one [`Outcome`]
//! per request, in order, as if the requests had been decided one by one:
//!
//! - a key bound before (or earlier in the same batch) to the same mode and
//!   fingerprint replays its binding; bound to another request or mode, it is
//!   refused with [`Refusal::KeyReused`];
//! - a request the edge already refused (unknown plan, gated account) is
//!   refused with that refusal;
//! - an order the float cannot pay is refused with
//!   [`Refusal::Insufficient`], which leaves the float as it was, so a
//!   cheaper order later in the batch may still go through;
//! - a live order the supplier could not deliver in time is refused with
//!   [`Refusal::SupplierBusy`] (see [`super::admission`]): nothing is
//!   debited and the key stays usable, so the partner retries it later;
//! - anything else is accepted and debited.
//!
//! A [`Refusal`] knows whether it binds the key ([`Refusal::binds`]): a
//! gating refusal and an insufficient float do (the partner must use a new
//! key), the others leave the key usable. What is stored for a binding
//! refusal is the refusal itself ([`Refusal::to_stored`]), not an HTTP body:
//! the HTTP layer turns it into the spec's error each time it is answered.

use std::{collections::HashMap, sync::Arc};

use serde_json::{Value, json};

use super::{
    admission::{Allowance, Busy},
    partner::{self, Mode},
    pricing::Unavailable,
};

/// Why an order request is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No plan with that id is visible to the key's mode.
    PlanNotFound,
    /// The plan is not on sale.
    PlanInactive,
    /// The plan cannot be priced for this partner.
    PlanUnavailable(Unavailable),
    /// The account may not order in this mode.
    Gated(partner::Refusal),
    /// The float holds less than the order costs.
    Insufficient {
        /// The float the order was decided against.
        mode: Mode,
        /// What the float held.
        balance_cents: i64,
        /// What the order costs.
        required_cents: i64,
    },
    /// The key is bound to another request body or the other mode.
    KeyReused {
        /// Bound by a key of the other mode (else: another body).
        other_mode: bool,
    },
    /// The supplier could not deliver the order's units within the
    /// deadline now: retry with the same key after `retry_after_seconds`.
    SupplierBusy {
        /// Whether the whole backlog or this partner's share is full.
        busy: Busy,
        /// When the units are expected to fit.
        retry_after_seconds: u32,
    },
}

impl Refusal {
    /// Whether the refusal binds the Idempotency-Key for good: retries with
    /// the same key replay it. Refusals about the request itself (the plan,
    /// the key's reuse) leave the key usable.
    pub fn binds(&self) -> bool {
        matches!(self, Refusal::Gated(_) | Refusal::Insufficient { .. })
    }

    /// What a binding refusal stores to replay later.
    pub fn to_stored(&self) -> Value {
        match self {
            Refusal::PlanNotFound => json!({ "code": "plan.not_found" }),
            Refusal::PlanInactive => json!({ "code": "plan.inactive" }),
            Refusal::PlanUnavailable(why) => {
                json!({ "code": "plan.unavailable", "reason": unavailable_name(*why) })
            }
            Refusal::Gated(gate) => json!({ "code": gate_code(*gate) }),
            Refusal::Insufficient {
                mode,
                balance_cents,
                required_cents,
            } => json!({
                "code": "balance.insufficient",
                "mode": mode.as_str(),
                "balance_cents": balance_cents,
                "required_cents": required_cents,
            }),
            Refusal::KeyReused { other_mode } => {
                json!({ "code": "idempotency.key_reused", "other_mode": other_mode })
            }
            Refusal::SupplierBusy {
                busy,
                retry_after_seconds,
            } => json!({
                "code": "supplier_error",
                "reason": busy.as_str(),
                "retry_after_seconds": retry_after_seconds,
            }),
        }
    }

    /// Reads a stored refusal back. Also reads the form stored before
    /// refusals were kept as such (`{code, message, param, extras}`), where
    /// the amounts sit under `extras` and a live float is not named.
    pub fn from_stored(stored: &Value) -> Option<Self> {
        let field = |name: &str| stored.get(name).or_else(|| stored.get("extras")?.get(name));
        Some(match stored.get("code")?.as_str()? {
            "plan.not_found" => Refusal::PlanNotFound,
            "plan.inactive" => Refusal::PlanInactive,
            "plan.unavailable" => {
                Refusal::PlanUnavailable(match field("reason").and_then(Value::as_str) {
                    Some("floor_above_list") => Unavailable::FloorAboveList,
                    _ => Unavailable::NoUsablePrice,
                })
            }
            "partner.not_live" => Refusal::Gated(partner::Refusal::NotLive),
            "partner.suspended" => Refusal::Gated(partner::Refusal::Suspended),
            "partner.closed" => Refusal::Gated(partner::Refusal::Closed),
            "balance.insufficient" => Refusal::Insufficient {
                mode: field("mode")
                    .and_then(Value::as_str)
                    .and_then(Mode::parse)
                    .unwrap_or(Mode::Live),
                balance_cents: field("balance_cents")?.as_i64()?,
                required_cents: field("required_cents")?.as_i64()?,
            },
            "idempotency.key_reused" => Refusal::KeyReused {
                other_mode: field("other_mode")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
            },
            _ => return None,
        })
    }
}

fn gate_code(gate: partner::Refusal) -> &'static str {
    match gate {
        partner::Refusal::NotLive => "partner.not_live",
        partner::Refusal::Suspended => "partner.suspended",
        partner::Refusal::Closed => "partner.closed",
    }
}

fn unavailable_name(why: Unavailable) -> &'static str {
    match why {
        Unavailable::NoUsablePrice => "no_usable_price",
        Unavailable::FloorAboveList => "floor_above_list",
    }
}

/// An order priced and ready to be debited.
pub(crate) trait Priced {
    /// The order's id, which a key accepted for it is bound to.
    fn order_id(&self) -> &str;
    /// What it costs, in cents.
    fn total_cents(&self) -> i64;
    /// How many units the supplier must deliver.
    fn units(&self) -> u64;
    /// The plan: which suppliers can deliver it bounds its admission.
    fn plan_id(&self) -> &str;
}

/// A shared order is priced as the order it points to.
impl<T: Priced> Priced for Arc<T> {
    fn order_id(&self) -> &str {
        T::order_id(self)
    }

    fn total_cents(&self) -> i64 {
        T::total_cents(self)
    }

    fn units(&self) -> u64 {
        T::units(self)
    }

    fn plan_id(&self) -> &str {
        T::plan_id(self)
    }
}

/// One order request as the account sees it.
#[derive(Debug, Clone)]
pub struct OrderRequest<T> {
    /// The trimmed Idempotency-Key.
    pub key: String,
    /// The key's mode: which float pays.
    pub mode: Mode,
    /// Fingerprint of the request body.
    pub fingerprint: String,
    /// The priced order, or the refusal the edge already gave (plan, gating).
    pub ask: Result<T, Refusal>,
    /// The sandbox plan that always answers 402.
    pub always_insufficient: bool,
}

/// What a key is bound to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bound {
    /// The order accepted under it.
    Order(String),
    /// The refusal it was answered with.
    Refusal(Refusal),
}

/// A key's binding: the request it was first used for and its answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    pub mode: Mode,
    pub fingerprint: String,
    pub bound: Bound,
}

/// The decision on one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Debit the float and write the order (202).
    Accept,
    /// Refuse; the key is bound when the refusal binds.
    Refuse(Refusal),
    /// The key is bound to this same request already: answer its binding again.
    Replay(Bound),
}

/// An account's two floats, in cents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Floats {
    pub live: i64,
    pub sandbox: i64,
}

impl Floats {
    /// The float a mode pays from, to change it.
    pub(crate) fn of_mut(&mut self, mode: Mode) -> &mut i64 {
        match mode {
            Mode::Live => &mut self.live,
            Mode::Sandbox => &mut self.sandbox,
        }
    }
}

/// A decided batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Decided {
    /// One per request, in order.
    pub outcomes: Vec<Outcome>,
    /// The floats after every accepted order.
    pub floats: Floats,
}

impl Decided {
    /// Whether some order was refused for want of money (the caller may
    /// want to confirm the floats against the database before binding keys).
    pub(crate) fn refused_for_money(&self) -> bool {
        self.outcomes
            .iter()
            .any(|o| matches!(o, Outcome::Refuse(Refusal::Insufficient { .. })))
    }

    /// The keys this batch binds, with their bindings, in request order.
    pub(crate) fn new_bindings<'a, T: Priced>(
        &'a self,
        requests: &'a [OrderRequest<T>],
    ) -> impl Iterator<Item = (&'a str, Binding)> + 'a {
        requests
            .iter()
            .zip(&self.outcomes)
            .filter_map(|(request, outcome)| {
                let bound = binding_of(outcome, request)?;
                Some((
                    request.key.as_str(),
                    Binding {
                        mode: request.mode,
                        fingerprint: request.fingerprint.clone(),
                        bound,
                    },
                ))
            })
    }
}

/// Decides a batch in order against `floats`, the keys bound before it and
/// the live units the supplier can still take (`allowance`).
pub(crate) fn decide<T: Priced>(
    requests: &[OrderRequest<T>],
    bound_before: &HashMap<String, Binding>,
    floats: Floats,
    allowance: Allowance,
) -> Decided {
    let mut floats = floats;
    let mut allowance = allowance;
    let mut bound_here: HashMap<&str, Binding> = HashMap::new();
    let mut outcomes = Vec::with_capacity(requests.len());
    for request in requests {
        let known = bound_here
            .get(request.key.as_str())
            .or_else(|| bound_before.get(&request.key));
        let outcome = match known {
            Some(binding) => replay(binding, request),
            None => decide_new(request, &mut floats, &mut allowance),
        };
        if let Some(bound) = binding_of(&outcome, request) {
            bound_here.insert(
                &request.key,
                Binding {
                    mode: request.mode,
                    fingerprint: request.fingerprint.clone(),
                    bound,
                },
            );
        }
        outcomes.push(outcome);
    }
    Decided { outcomes, floats }
}

/// The answer to a key seen before.
fn replay<T>(binding: &Binding, request: &OrderRequest<T>) -> Outcome {
    if binding.mode != request.mode || binding.fingerprint != request.fingerprint {
        Outcome::Refuse(Refusal::KeyReused {
            other_mode: binding.mode != request.mode,
        })
    } else {
        Outcome::Replay(binding.bound.clone())
    }
}

/// The answer to a key seen for the first time.
fn decide_new<T: Priced>(
    request: &OrderRequest<T>,
    floats: &mut Floats,
    allowance: &mut Allowance,
) -> Outcome {
    let order = match &request.ask {
        Err(refusal) => return Outcome::Refuse(refusal.clone()),
        Ok(order) => order,
    };
    let float = floats.of_mut(request.mode);
    if request.always_insufficient || *float < order.total_cents() {
        return Outcome::Refuse(Refusal::Insufficient {
            mode: request.mode,
            balance_cents: *float,
            required_cents: order.total_cents(),
        });
    }
    if request.mode == Mode::Live
        && let Err((busy, retry_after_seconds)) = allowance.take_for(order.units(), order.plan_id())
    {
        return Outcome::Refuse(Refusal::SupplierBusy {
            busy,
            retry_after_seconds,
        });
    }
    *float -= order.total_cents();
    Outcome::Accept
}

/// What a fresh outcome binds the key to, if anything.
fn binding_of<T: Priced>(outcome: &Outcome, request: &OrderRequest<T>) -> Option<Bound> {
    match (outcome, &request.ask) {
        (Outcome::Accept, Ok(order)) => Some(Bound::Order(order.order_id().to_owned())),
        (Outcome::Refuse(refusal), _) if refusal.binds() => Some(Bound::Refusal(refusal.clone())),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[derive(Debug, Clone)]
    struct Order {
        id: String,
        total: i64,
    }

    impl Priced for Order {
        fn order_id(&self) -> &str {
            &self.id
        }
        fn total_cents(&self) -> i64 {
            self.total
        }
        fn units(&self) -> u64 {
            1
        }
        fn plan_id(&self) -> &str {
            "pl_test"
        }
    }

    fn request(key: &str, fingerprint: &str, total: i64) -> OrderRequest<Order> {
        OrderRequest {
            key: key.into(),
            mode: Mode::Live,
            fingerprint: fingerprint.into(),
            ask: Ok(Order {
                id: format!("po_{key}_{fingerprint}"),
                total,
            }),
            always_insufficient: false,
        }
    }

    fn live(cents: i64) -> Floats {
        Floats {
            live: cents,
            sandbox: 0,
        }
    }

    #[test]
    fn an_insufficient_order_in_the_middle_is_refused_and_the_rest_go_on() {
        let requests = [
            request("k1", "f", 600),
            request("k2", "f", 600),
            request("k3", "f", 300),
        ];
        let decided = decide(
            &requests,
            &HashMap::new(),
            live(1000),
            Allowance::unlimited(),
        );
        assert_eq!(decided.outcomes[0], Outcome::Accept);
        assert_eq!(
            decided.outcomes[1],
            Outcome::Refuse(Refusal::Insufficient {
                mode: Mode::Live,
                balance_cents: 400,
                required_cents: 600
            })
        );
        assert_eq!(decided.outcomes[2], Outcome::Accept, "a cheaper order fits");
        assert_eq!(decided.floats, live(100));
        assert!(decided.refused_for_money());
    }

    #[test]
    fn duplicate_keys_inside_one_batch_replay_the_first_or_are_reused() {
        let requests = [
            request("k1", "f", 100),
            request("k1", "f", 100),
            request("k1", "other", 100),
        ];
        let decided = decide(
            &requests,
            &HashMap::new(),
            live(1000),
            Allowance::unlimited(),
        );
        assert_eq!(decided.outcomes[0], Outcome::Accept);
        assert_eq!(
            decided.outcomes[1],
            Outcome::Replay(Bound::Order("po_k1_f".into()))
        );
        assert_eq!(
            decided.outcomes[2],
            Outcome::Refuse(Refusal::KeyReused { other_mode: false })
        );
        assert_eq!(decided.floats, live(900), "charged once");
        assert_eq!(decided.new_bindings(&requests).count(), 1);
    }

    #[test]
    fn a_key_bound_before_replays_and_the_other_mode_is_reused() {
        let mut before = HashMap::new();
        before.insert(
            "k1".to_owned(),
            Binding {
                mode: Mode::Live,
                fingerprint: "f".into(),
                bound: Bound::Order("po_old".into()),
            },
        );
        let mut sandbox = request("k1", "f", 100);
        sandbox.mode = Mode::Sandbox;
        let requests = [request("k1", "f", 100), sandbox];
        let decided = decide(
            &requests,
            &before,
            Floats {
                live: 1000,
                sandbox: 1000,
            },
            Allowance::unlimited(),
        );
        assert_eq!(
            decided.outcomes[0],
            Outcome::Replay(Bound::Order("po_old".into()))
        );
        assert_eq!(
            decided.outcomes[1],
            Outcome::Refuse(Refusal::KeyReused { other_mode: true })
        );
        assert_eq!(decided.floats.live, 1000, "nothing charged");
    }

    #[test]
    fn a_binding_refusal_replays_and_one_that_does_not_leaves_the_key_usable() {
        let requests = [request("k1", "f", 5000), request("k1", "f", 5000)];
        let decided = decide(
            &requests,
            &HashMap::new(),
            live(1000),
            Allowance::unlimited(),
        );
        assert!(matches!(
            decided.outcomes[1],
            Outcome::Replay(Bound::Refusal(Refusal::Insufficient { .. }))
        ));

        let mut unknown_plan = request("k2", "f", 100);
        unknown_plan.ask = Err(Refusal::PlanNotFound);
        let requests = [unknown_plan, request("k2", "f", 100)];
        let decided = decide(
            &requests,
            &HashMap::new(),
            live(1000),
            Allowance::unlimited(),
        );
        assert_eq!(decided.outcomes[0], Outcome::Refuse(Refusal::PlanNotFound));
        assert_eq!(decided.outcomes[1], Outcome::Accept);
    }

    #[test]
    fn the_always_insufficient_plan_refuses_whatever_the_float() {
        let mut request = request("k1", "f", 1);
        request.always_insufficient = true;
        let decided = decide(
            &[request],
            &HashMap::new(),
            live(1_000_000),
            Allowance::unlimited(),
        );
        assert!(matches!(
            decided.outcomes[0],
            Outcome::Refuse(Refusal::Insufficient {
                balance_cents: 1_000_000,
                ..
            })
        ));
    }

    #[test]
    fn only_gating_and_money_bind() {
        let binding = [
            Refusal::Gated(partner::Refusal::Suspended),
            Refusal::Insufficient {
                mode: Mode::Live,
                balance_cents: 0,
                required_cents: 1,
            },
        ];
        let not_binding = [
            Refusal::PlanNotFound,
            Refusal::PlanInactive,
            Refusal::PlanUnavailable(Unavailable::FloorAboveList),
            Refusal::KeyReused { other_mode: true },
        ];
        assert!(binding.iter().all(Refusal::binds));
        assert!(!not_binding.iter().any(Refusal::binds));
    }

    #[test]
    fn every_refusal_reads_back_as_stored() {
        let all = [
            Refusal::PlanNotFound,
            Refusal::PlanInactive,
            Refusal::PlanUnavailable(Unavailable::FloorAboveList),
            Refusal::PlanUnavailable(Unavailable::NoUsablePrice),
            Refusal::Gated(partner::Refusal::NotLive),
            Refusal::Gated(partner::Refusal::Suspended),
            Refusal::Gated(partner::Refusal::Closed),
            Refusal::Insufficient {
                mode: Mode::Sandbox,
                balance_cents: 12,
                required_cents: 345,
            },
            Refusal::KeyReused { other_mode: true },
        ];
        for refusal in all {
            assert_eq!(
                Refusal::from_stored(&refusal.to_stored()),
                Some(refusal.clone()),
                "{refusal:?}"
            );
        }
    }

    #[test]
    fn the_earlier_stored_form_still_reads() {
        let old = json!({
            "code": "balance.insufficient",
            "message": "The balance is too low for this order.",
            "param": null,
            "extras": { "balance_cents": 400, "required_cents": 600, "mode": "sandbox" }
        });
        assert_eq!(
            Refusal::from_stored(&old),
            Some(Refusal::Insufficient {
                mode: Mode::Sandbox,
                balance_cents: 400,
                required_cents: 600
            })
        );
        let old_live = json!({ "code": "balance.insufficient", "message": "", "param": null,
            "extras": { "balance_cents": 1, "required_cents": 2 } });
        assert!(matches!(
            Refusal::from_stored(&old_live),
            Some(Refusal::Insufficient {
                mode: Mode::Live,
                ..
            })
        ));
        let gated =
            json!({ "code": "partner.suspended", "message": "x", "param": null, "extras": {} });
        assert_eq!(
            Refusal::from_stored(&gated),
            Some(Refusal::Gated(partner::Refusal::Suspended))
        );
        assert_eq!(Refusal::from_stored(&json!({ "code": "nonsense" })), None);
        assert_eq!(Refusal::from_stored(&json!("text")), None);
    }

    // --- one by one equals any batching ---

    fn arbitrary_request() -> impl Strategy<Value = OrderRequest<Order>> {
        (
            0u8..6,        // key
            0u8..2,        // fingerprint
            any::<bool>(), // sandbox
            1i64..400,     // total
            0u8..10,       // 0: plan refused, 1: gated, 2: always insufficient
        )
            .prop_map(|(key, fingerprint, sandbox, total, kind)| {
                let mut request = request(&format!("k{key}"), &format!("f{fingerprint}"), total);
                request.ask = match kind {
                    0 => Err(Refusal::PlanNotFound),
                    1 => Err(Refusal::Gated(partner::Refusal::NotLive)),
                    _ => request.ask,
                };
                request.always_insufficient = kind == 2;
                if sandbox {
                    request.mode = Mode::Sandbox;
                }
                request
            })
    }

    /// Decides `requests` in consecutive batches of the given sizes, carrying
    /// the floats and bindings over, as an account actor does.
    fn in_batches(
        requests: &[OrderRequest<Order>],
        sizes: &[usize],
        floats: Floats,
    ) -> (Vec<Outcome>, Floats, HashMap<String, Binding>) {
        let mut bindings = HashMap::new();
        let mut floats = floats;
        let mut outcomes = Vec::new();
        let mut rest = requests;
        let mut sizes = sizes.iter().cycle();
        while !rest.is_empty() {
            let take = (*sizes.next().unwrap_or(&1)).clamp(1, rest.len());
            let (batch, after) = rest.split_at(take);
            let decided = decide(batch, &bindings, floats, Allowance::unlimited());
            for (key, binding) in decided.new_bindings(batch) {
                bindings.insert(key.to_owned(), binding);
            }
            floats = decided.floats;
            outcomes.extend(decided.outcomes);
            rest = after;
        }
        (outcomes, floats, bindings)
    }

    #[test]
    fn live_orders_past_the_allowance_are_refused_uncharged_and_unbound() {
        use crate::domain::admission::{Backlog, Busy, allowance_at};
        // Room for two units: 1 unit/s over a 2-second horizon.
        let room = allowance_at(1.0, Busy::Capacity, 2, Backlog::default());
        let mut sandbox = request("k4", "f", 100);
        sandbox.mode = Mode::Sandbox;
        let requests = [
            request("k1", "f", 100),
            request("k2", "f", 100),
            request("k3", "f", 100),
            sandbox,
        ];
        let floats = Floats {
            live: 1000,
            sandbox: 1000,
        };
        let decided = decide(&requests, &HashMap::new(), floats, room);
        assert_eq!(decided.outcomes[0], Outcome::Accept);
        assert_eq!(decided.outcomes[1], Outcome::Accept);
        let Outcome::Refuse(refusal) = &decided.outcomes[2] else {
            panic!(
                "the third live unit does not fit: {:?}",
                decided.outcomes[2]
            );
        };
        assert!(matches!(
            refusal,
            Refusal::SupplierBusy {
                retry_after_seconds: 1,
                ..
            }
        ));
        assert!(!refusal.binds(), "the partner retries with the same key");
        assert_eq!(
            decided.outcomes[3],
            Outcome::Accept,
            "sandbox is not admitted"
        );
        assert_eq!(
            decided.floats,
            Floats {
                live: 800,
                sandbox: 900
            }
        );
        assert_eq!(decided.new_bindings(&requests).count(), 3);
    }

    proptest! {
        #[test]
        fn batches_of_any_size_decide_as_one_by_one(
            requests in proptest::collection::vec(arbitrary_request(), 0..60),
            sizes in proptest::collection::vec(1usize..20, 1..6),
            live in 0i64..3000,
            sandbox in 0i64..3000,
        ) {
            let floats = Floats { live, sandbox };
            let one_by_one = in_batches(&requests, &[1], floats);
            let batched = in_batches(&requests, &sizes, floats);
            let all_at_once = in_batches(&requests, &[requests.len().max(1)], floats);
            prop_assert_eq!(&one_by_one, &batched);
            prop_assert_eq!(&one_by_one, &all_at_once);
        }

        #[test]
        fn money_is_conserved_and_no_float_goes_negative(
            requests in proptest::collection::vec(arbitrary_request(), 0..60),
            live in 0i64..3000,
            sandbox in 0i64..3000,
        ) {
            let floats = Floats { live, sandbox };
            let decided = decide(&requests, &HashMap::new(), floats, Allowance::unlimited());
            let charged = |mode: Mode| -> i64 {
                requests.iter().zip(&decided.outcomes)
                    .filter(|(r, o)| r.mode == mode && **o == Outcome::Accept)
                    .map(|(r, _)| r.ask.as_ref().map_or(0, Priced::total_cents))
                    .sum()
            };
            prop_assert!(decided.floats.live >= 0 && decided.floats.sandbox >= 0);
            prop_assert_eq!(decided.floats.live, live - charged(Mode::Live));
            prop_assert_eq!(decided.floats.sandbox, sandbox - charged(Mode::Sandbox));
            // A key is accepted at most once.
            let mut accepted_keys: Vec<&str> = requests.iter().zip(&decided.outcomes)
                .filter(|(_, o)| **o == Outcome::Accept).map(|(r, _)| r.key.as_str()).collect();
            let before = accepted_keys.len();
            accepted_keys.sort_unstable();
            accepted_keys.dedup();
            prop_assert_eq!(before, accepted_keys.len());
        }
    }
}
