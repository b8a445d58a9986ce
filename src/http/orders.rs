//! `POST /orders`, `GET /orders`, `GET /orders/{id}`.
//!
//! Checks run in the order partners can rely on: authentication and account
//! gating; the `Idempotency-Key`; the body; the plan; then the account actor
//! decides idempotency, balance and acceptance. A gating refusal (403) and an
//! insufficient balance (402) bind the key; validation, plan and server
//! errors leave it usable.

use std::sync::Arc;

use axum::{
    Extension, Json,
    body::Bytes,
    extract::{Path, State},
    http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use chrono::{DateTime, Utc};
use entities::{esim, order};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{
    accepted,
    auth::Caller,
    error::{ApiError, ErrorCode, Violations},
    esims::EsimView,
    extract::{NoQuery, StrictQuery, from_object, parse_value, whole_number},
    pagination::{self, ListEnvelope},
    plans::{MAX_QUANTITY, caller_rate},
};
use crate::{
    actors::account::{Decision, PlaceOrder},
    catalogue::{Snapshot, Standing},
    domain::{
        idempotency::{MAX_KEY_LEN, MIN_KEY_LEN, fingerprint},
        ids::{OrderId, check_id},
        order::{FailureCode, OrderStatus},
        ordering::Refusal,
        partner::Mode,
        pricing::{self, Unavailable, discount_from_prices},
        time,
    },
    state::AppState,
    store::{self, orders::OrderQuery},
};

/// The header partners send.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
/// The header on a replayed answer.
pub const IDEMPOTENCY_REPLAYED: &str = "idempotency-replayed";
/// Largest metadata object, serialized.
pub const MAX_METADATA_BYTES: usize = 4096;
/// How soon to poll an order that is still processing.
const POLL_AFTER_MS: u64 = 1000;

/// The Order resource.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct OrderView {
    pub object: &'static str,
    pub id: String,
    pub mode: Mode,
    pub status: OrderStatus,
    pub plan_id: String,
    pub quantity: i32,
    pub unit_price_cents: i64,
    pub total_cents: i64,
    pub list_unit_cents: i64,
    pub discount_bps: i64,
    pub price_source: String,
    pub currency: &'static str,
    pub refunded_cents: i64,
    #[schema(value_type = Object)]
    pub metadata: Value,
    pub esims: Vec<EsimView>,
    pub failure_code: Option<FailureCode>,
    pub poll_after_ms: Option<u64>,
    #[serde(serialize_with = "super::instants::z")]
    pub created_at: DateTime<Utc>,
    #[serde(serialize_with = "super::instants::optional_z")]
    pub completed_at: Option<DateTime<Utc>>,
}

impl OrderView {
    pub fn new(order: order::Model, esims: Vec<esim::Model>) -> Self {
        Self {
            object: "order",
            discount_bps: discount_from_prices(order.list_unit_cents, order.unit_price_cents),
            id: order.id,
            mode: order.mode,
            status: order.status,
            plan_id: order.plan_id,
            quantity: order.quantity,
            unit_price_cents: order.unit_price_cents,
            total_cents: order.total_cents,
            list_unit_cents: order.list_unit_cents,
            price_source: order.price_source,
            currency: "USD",
            refunded_cents: order.refunded_cents,
            metadata: order.metadata,
            esims: esims.into_iter().map(EsimView::new).collect(),
            failure_code: order.failure_code,
            poll_after_ms: poll_after_ms(order.status),
            created_at: order.created_at,
            completed_at: order.completed_at,
        }
    }
}

/// How soon to poll an order in `status`: only one still processing.
pub(crate) fn poll_after_ms(status: OrderStatus) -> Option<u64> {
    (status == OrderStatus::Processing).then_some(POLL_AFTER_MS)
}

// Values are checked by hand rather than by serde so that every problem is
// named in one 400.
/// Body of `POST /orders`: the plan, how many eSIMs, and your own metadata.
/// Every invalid field is named in one `request.invalid` answer.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OrderBody {
    /// The plan to buy.
    #[schema(value_type = String, required = true, pattern = r"^pl_[A-Za-z0-9_-]{1,61}$", example = "pl_fr_1gb_7d")]
    plan_id: Option<Value>,
    /// Units, 1 to 50; absent or null means 1.
    #[schema(value_type = Option<i64>, minimum = 1, maximum = 50, example = 1)]
    quantity: Option<Value>,
    /// Echoed verbatim on the order; at most 4096 bytes serialized. Absent or null means `{}`.
    #[schema(value_type = Option<Object>, example = json!({"customer_ref": "c-1042"}))]
    metadata: Option<Value>,
}

/// An order body that passed every check, with its idempotency fingerprint.
pub struct ValidOrder {
    plan_id: String,
    quantity: i64,
    metadata: Value,
    fingerprint: String,
}

fn idempotency_key(headers: &HeaderMap) -> Result<String, ApiError> {
    let values: Vec<&HeaderValue> = headers.get_all(IDEMPOTENCY_KEY).iter().collect();
    let invalid = |why: &str| ApiError::invalid("Idempotency-Key", why.to_owned());
    match values.as_slice() {
        [] => Err(invalid("is required")),
        [one] => {
            let key = one
                .to_str()
                .map_err(|_| invalid("must be visible ASCII"))?
                .trim();
            if !key.bytes().all(|b| (b' '..=b'~').contains(&b)) {
                // `to_str` lets a tab through; a key is printable ASCII only.
                Err(invalid("must be visible ASCII"))
            } else if (MIN_KEY_LEN..=MAX_KEY_LEN).contains(&key.len()) {
                Ok(key.to_owned())
            } else {
                Err(invalid("must be 16 to 255 characters after trimming"))
            }
        }
        _ => Err(invalid("must be sent once")),
    }
}

/// Parses and checks a `POST /orders` body, naming every problem.
pub fn parse_order_body(body: &Bytes) -> Result<ValidOrder, ApiError> {
    let raw = parse_value(body)?;
    let fingerprint = fingerprint(&raw);
    let parsed: OrderBody = from_object(raw)?;
    let mut v = Violations::default();
    let plan_id = match &parsed.plan_id {
        Some(Value::String(id)) if id.len() <= 64 && check_id(id, "pl_").is_ok() => id.clone(),
        Some(Value::String(_)) => {
            v.add(
                "plan_id",
                "must be a plan id beginning `pl_`, at most 64 characters",
            );
            String::new()
        }
        Some(_) => {
            v.add("plan_id", "must be a string");
            String::new()
        }
        None => {
            v.add("plan_id", "is required");
            String::new()
        }
    };
    let quantity = match &parsed.quantity {
        None => 1,
        Some(value) => match whole_number(value) {
            Some(q) if (1..=MAX_QUANTITY).contains(&q) => q,
            _ => {
                v.add(
                    "quantity",
                    format!("must be an integer from 1 to {MAX_QUANTITY}"),
                );
                1
            }
        },
    };
    let metadata = match parsed.metadata {
        None => Value::Object(Default::default()),
        Some(Value::Object(map)) => {
            let object = Value::Object(map);
            v.check(
                object.to_string().len() > MAX_METADATA_BYTES,
                "metadata",
                "must serialize to at most 4096 bytes",
            );
            object
        }
        Some(_) => {
            v.add("metadata", "must be a JSON object");
            Value::Null
        }
    };
    v.into_result()?;
    Ok(ValidOrder {
        plan_id,
        quantity,
        metadata,
        fingerprint,
    })
}

#[utoipa::path(
    post, path = "/orders", operation_id = "createOrder", tag = "orders",
    params(("Idempotency-Key" = String, Header, min_length = 16, max_length = 255, pattern = r"^[!-~][ -~]{14,253}[!-~]$", example = "order-2026-11-22-0001",
        description = "Unique per order; 16 to 255 visible ASCII characters after trimming. Retry a 5xx with the same key.")),
    request_body(content = OrderBody, content_type = "application/json"),
    responses(
        (status = 202, description = "Accepted: the balance is debited; poll the order while `poll_after_ms` is not null.", body = OrderView),
        (status = 200, description = "A replay of the same key and request (`Idempotency-Replayed: true`).", body = OrderView,
            headers(("Idempotency-Replayed" = String, description = "`true` on a replayed answer."))),
        (status = 400, description = "`request.invalid` or `plan.inactive`", body = crate::http::openapi::ErrorBody),
        (status = 402, description = "`balance.insufficient` (binds the key)", body = crate::http::openapi::ErrorBody),
        (status = 404, description = "`plan.not_found`", body = crate::http::openapi::ErrorBody),
        (status = 409, description = "`idempotency.key_reused` or `conflict`", body = crate::http::openapi::ErrorBody),
        (status = 422, description = "`plan.unavailable`", body = crate::http::openapi::ErrorBody),
        (status = 500, description = "`internal_error`: retry with the same key", body = crate::http::openapi::ErrorBody),
        (status = 502, description = "`supplier_error`: the supplier, or this service's provisioning, cannot deliver this order within the provisioning deadline right now (the message says which). Nothing was charged and the key is not bound: retry with the same key after `Retry-After` seconds (also in `error.retry_after_seconds`).", body = crate::http::openapi::ErrorBody,
            headers(("Retry-After" = u32, description = "Seconds after which the same request may be accepted."))),
    )
)]
#[tracing::instrument(skip_all, fields(partner_id = %caller.partner_id()))]
pub async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    StrictQuery(NoQuery {}): StrictQuery<NoQuery>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let key = idempotency_key(&headers);
    if let Err(gate) = caller.gate {
        // A gating refusal binds a well-formed key to a well-formed request.
        let refusal = Refusal::Gated(gate);
        return match (
            key,
            require_json(&headers).and_then(|()| parse_order_body(&body)),
        ) {
            (Ok(key), Ok(valid)) => {
                decide(&state, &caller, key, valid.fingerprint, Err(refusal), false).await
            }
            _ => Err(refusal.into()),
        };
    }
    let key = key?;
    require_json(&headers)?;
    let valid = parse_order_body(&body)?;
    let snapshot = state.catalogue.snapshot();
    let verdict = price_order(&state, &caller, &snapshot, &key, &valid);
    let always_insufficient = valid.plan_id == "pl_sandbox_insufficient_balance";
    decide(
        &state,
        &caller,
        key,
        valid.fingerprint,
        verdict,
        always_insufficient,
    )
    .await
}

fn require_json(headers: &HeaderMap) -> Result<(), ApiError> {
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"));
    if json {
        Ok(())
    } else {
        Err(ApiError::invalid_request(
            "Content-Type must be application/json.",
        ))
    }
}

/// The order as it would be accepted now, or why the plan refuses it.
fn price_order(
    state: &AppState,
    caller: &Caller,
    snapshot: &Snapshot,
    key: &str,
    valid: &ValidOrder,
) -> Result<order::Model, Refusal> {
    let plan = snapshot
        .visible(&valid.plan_id, caller.mode)
        .ok_or(Refusal::PlanNotFound)?;
    let rate = caller_rate(state, caller);
    let unit = match Snapshot::standing(plan, &rate) {
        Standing::Sellable(unit) => unit,
        Standing::Inactive => return Err(Refusal::PlanInactive),
        Standing::Unavailable(reason) => return Err(Refusal::PlanUnavailable(reason)),
    };
    let total = pricing::total(unit.unit_cents, valid.quantity)
        .ok_or(Refusal::PlanUnavailable(Unavailable::NoUsablePrice))?;
    let now = time::now();
    Ok(order::Model {
        id: OrderId::generate().into_string(),
        partner_id: caller.partner_id().to_owned(),
        mode: caller.mode,
        idempotency_key: key.to_owned(),
        plan_id: plan.id.clone(),
        quantity: valid.quantity as i32,
        unit_price_cents: unit.unit_cents,
        total_cents: total,
        list_unit_cents: plan.list_price_cents,
        price_source: rate.source.label(),
        metadata: valid.metadata.clone(),
        status: OrderStatus::Processing,
        failure_code: None,
        refunded_cents: 0,
        attempts: 0,
        // A node that provisions claims the order as it accepts it.
        claimed_until: state.provisioning_lease.map(|lease| now + lease),
        claimed_by: state.provisioning_lease.map(|_| state.node_id.to_string()),
        created_at: now,
        completed_at: None,
    })
}

async fn decide(
    state: &AppState,
    caller: &Caller,
    key: String,
    fingerprint: String,
    ask: Result<order::Model, Refusal>,
    always_insufficient: bool,
) -> Result<Response, ApiError> {
    let request = PlaceOrder {
        key,
        mode: caller.mode,
        fingerprint,
        ask: ask.map(Arc::new),
        always_insufficient,
    };
    let replayed = (
        HeaderName::from_static(IDEMPOTENCY_REPLAYED),
        HeaderValue::from_static("true"),
    );
    match state
        .accounts
        .place_order(caller.partner_id(), request)
        .await?
    {
        // Written from the shared order: its provisioning pass usually
        // holds it still, and the answer needs no copy of it.
        Decision::Accepted(order) => Ok(accepted::response(&order)),
        Decision::Replayed(order) => {
            // Boxed: a replay is rare, and its read would otherwise make
            // every order request's future larger (and copied as large).
            let esims = Box::pin(store::orders::esims_of(
                &state.db,
                std::slice::from_ref(&order.id),
            ))
            .await?;
            Ok((
                StatusCode::OK,
                [replayed],
                Json(OrderView::new(Arc::unwrap_or_clone(order), esims)),
            )
                .into_response())
        }
        Decision::Refused(refusal) => Err(refusal.into()),
        Decision::ReplayedRefusal(refusal) => {
            Err(ApiError::from(refusal).with_header(replayed.0, replayed.1))
        }
    }
}

#[utoipa::path(
    get, path = "/orders/{id}", operation_id = "getOrder", tag = "orders",
    params(("id" = String, Path, pattern = r"^po_[A-Za-z0-9_-]{1,64}$", description = "An order id.")),
    responses(
        (status = 200, description = "The order; poll while `poll_after_ms` is not null.", body = OrderView),
        (status = 400, description = "`request.invalid`: not an order id", body = crate::http::openapi::ErrorBody),
        (status = 404, description = "`order.not_found`", body = crate::http::openapi::ErrorBody),
    )
)]
#[tracing::instrument(skip_all, fields(partner_id = %caller.partner_id(), order_id = %id))]
pub async fn show(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    StrictQuery(NoQuery {}): StrictQuery<NoQuery>,
) -> Result<Json<OrderView>, ApiError> {
    OrderId::parse(&id).map_err(|e| ApiError::invalid("id", e.to_string()))?;
    let (order, esims) = store::orders::find_order_with_esims(
        &state.db,
        state.inline_reads.as_deref(),
        caller.partner_id(),
        caller.mode,
        &id,
    )
    .await?
    .ok_or_else(|| ApiError::new(ErrorCode::OrderNotFound))?;
    Ok(Json(OrderView::new(order, esims)))
}

/// Query of `GET /orders`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct OrdersQuery {
    /// Only orders in this state.
    #[param(value_type = Option<crate::domain::states::OrderStatus>)]
    status: Option<String>,
    /// Orders created after this instant (exclusive).
    #[param(value_type = Option<String>, format = DateTime)]
    created_after: Option<String>,
    /// Orders created before this instant (exclusive).
    #[param(value_type = Option<String>, format = DateTime)]
    created_before: Option<String>,
    /// Page size, 1 to 200 (default 50).
    #[param(value_type = Option<i64>, minimum = 1, maximum = 200)]
    limit: Option<String>,
    /// Opaque; pass back `next_cursor` with the same filters.
    #[param(value_type = Option<String>, min_length = 1, max_length = 512)]
    cursor: Option<String>,
}

#[utoipa::path(
    get, path = "/orders", operation_id = "listOrders", tag = "orders", params(OrdersQuery),
    responses(
        (status = 200, description = "Orders of the key's mode, newest first.", body = ListEnvelope<OrderView>),
        (status = 400, description = "`request.invalid`", body = crate::http::openapi::ErrorBody),
    )
)]
#[tracing::instrument(skip_all, fields(partner_id = %caller.partner_id()))]
pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    StrictQuery(query): StrictQuery<OrdersQuery>,
) -> Result<Json<ListEnvelope<OrderView>>, ApiError> {
    let mut v = Violations::default();
    let status = pagination::parse_one_of::<OrderStatus>(query.status.as_deref(), "status", &mut v);
    let created_after =
        pagination::parse_datetime(query.created_after.as_deref(), "created_after", &mut v);
    let created_before =
        pagination::parse_datetime(query.created_before.as_deref(), "created_before", &mut v)
            .map(pagination::ceil_to_micros);
    let limit = pagination::parse_limit(query.limit.as_deref(), &mut v);
    pagination::check_cursor_length(query.cursor.as_deref(), &mut v);
    v.into_result()?;
    let scope = format!(
        "orders|{}|{:?}|{:?}|{:?}",
        caller.mode.as_str(),
        query.status,
        created_after.map(|t| t.timestamp_micros()),
        created_before.map(|t| t.timestamp_micros())
    );
    let before = pagination::decode_keyset(
        &state.cursors,
        &scope,
        query.cursor.as_deref(),
        time_id_keyset,
    )?;
    let rows = store::orders::list_orders(
        &state.db,
        caller.partner_id(),
        caller.mode,
        &OrderQuery {
            status,
            created_after,
            created_before,
            before,
            limit: limit as u64 + 1,
        },
    )
    .await?;
    let (rows, has_more, next_cursor) =
        pagination::cut_page(rows, limit, &state.cursors, &scope, |o| {
            vec![o.created_at.timestamp_micros().into(), o.id.clone().into()]
        });
    let ids: Vec<String> = rows.iter().map(|o| o.id.clone()).collect();
    let mut esims = store::orders::esims_of(&state.db, &ids).await?;
    let data = rows
        .into_iter()
        .map(|order| {
            let (mine, rest): (Vec<esim::Model>, Vec<esim::Model>) =
                esims.drain(..).partition(|e| e.order_id == order.id);
            esims = rest;
            OrderView::new(order, mine)
        })
        .collect();
    Ok(Json(ListEnvelope {
        data,
        has_more,
        next_cursor,
    }))
}

/// A (created_at in µs, id) keyset from a verified cursor.
pub fn time_id_keyset(values: &[Value]) -> Option<(DateTime<Utc>, String)> {
    match values {
        [at, id] => Some((
            DateTime::from_timestamp_micros(at.as_i64()?)?,
            id.as_str()?.to_owned(),
        )),
        _ => None,
    }
}

/// eSIM Access's webhook (`POST /callbacks/esim-access`, set as the notify
/// URL in the supplier's console). It is unsigned, so it is only a hint: an
/// `ORDER_STATUS` of `GOT_RESOURCE` wakes the supplier order's driver on this
/// node, which then reads the profiles back through the API. Every other
/// notification (`CHECK_HEALTH`, `ESIM_STATUS`, `DATA_USAGE`,
/// `VALIDITY_USAGE`) is acknowledged and ignored.
pub async fn esim_access_callback(
    State(state): State<AppState>,
    body: axum::body::Bytes,
) -> Result<Json<Value>, ApiError> {
    let event: Value = serde_json::from_slice(&body)
        .map_err(|_| ApiError::invalid_request("The callback body is not JSON."))?;
    let kind = event["notifyType"].as_str().unwrap_or_default();
    let order_no = event["content"]["orderNo"].as_str().unwrap_or_default();
    let order_status = event["content"]["orderStatus"].as_str().unwrap_or_default();
    let woken = kind == "ORDER_STATUS"
        && order_status == "GOT_RESOURCE"
        && state.supplier_orders.wake(order_no);
    tracing::info!(kind, order_no, order_status, woken, "supplier webhook");
    Ok(Json(serde_json::json!({ "received": true })))
}

/// Airalo's webhook (`POST /callbacks/airalo`, the URL opted in with Airalo
/// for async orders). Signed: `airalo-signature` is HMAC-SHA512 with the
/// account's client secret, checked in constant time; an unsigned or forged
/// call is refused with 401. A valid one is only a hint: it wakes the driver
/// of the supplier order it names (by Airalo's order id and by our
/// transaction id in `description`), which reads the order back. Redeliveries
/// wake nothing twice and are acknowledged alike.
pub async fn airalo_callback(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> Result<Json<Value>, ApiError> {
    use crate::supplier::airalo::{SIGNATURE_HEADER, verify_signature, webhook_order};
    use secrecy::ExposeSecret;
    let signature = headers
        .get(SIGNATURE_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if !verify_signature(
        state.airalo_webhook_secret.expose_secret(),
        &body,
        signature,
    ) {
        tracing::warn!("Airalo webhook with a missing or wrong signature refused");
        return Err(ApiError::new(ErrorCode::AuthInvalidKey)
            .with_message("The airalo-signature header does not match the body."));
    }
    let event: Value = serde_json::from_slice(&body)
        .map_err(|_| ApiError::invalid_request("The callback body is not JSON."))?;
    let order = webhook_order(&event);
    let woken = order.as_ref().is_some_and(|order| {
        [&order.order_id, &order.description, &order.request_id]
            .into_iter()
            .flatten()
            .any(|key| state.supplier_orders.wake(key))
    });
    tracing::info!(
        order_id = order.as_ref().and_then(|o| o.order_id.as_deref()),
        description = order.as_ref().and_then(|o| o.description.as_deref()),
        woken,
        "Airalo webhook"
    );
    Ok(Json(serde_json::json!({ "received": true })))
}
