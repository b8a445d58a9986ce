//! `POST /deposits`, `GET /deposits`, `GET /deposits/{id}`, `GET /ledger`,
//! and the payment provider's callback.

use axum::{
    Extension, Json,
    body::Bytes,
    extract::{Path, State},
    http::{HeaderMap, StatusCode},
};
use chrono::{DateTime, Utc};
use entities::{deposit, ledger_entry};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{
    auth::Caller,
    error::{ApiError, ErrorCode, Violations},
    extract::{NoQuery, StrictJson, StrictQuery, whole_number},
    orders::time_id_keyset,
    pagination::{self, ListEnvelope},
};
use crate::{
    domain::{
        ids::check_id,
        partner::Mode,
        states::{DepositStatus, LedgerKind},
    },
    state::AppState,
    store::{self, deposits::LedgerQuery},
};

/// The Deposit resource.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DepositView {
    pub object: &'static str,
    pub id: String,
    pub status: DepositStatus,
    #[schema(value_type = DepositMethod)]
    pub method: String,
    pub requested_cents: i64,
    pub credited_cents: Option<i64>,
    pub currency: &'static str,
    pub reference: Option<String>,
    pub ledger_entry_id: Option<String>,
    pub payment_url: Option<String>,
    pub expires_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub credited_at: Option<DateTime<Utc>>,
}

/// How a deposit is paid: `crypto` through a hosted invoice (the only method
/// partners open), or `wire`, recorded by an operator.
#[derive(utoipa::ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum DepositMethod {
    Crypto,
    Wire,
}

impl DepositView {
    pub fn new(row: deposit::Model) -> Self {
        Self {
            object: "deposit",
            id: row.id,
            status: row.status,
            method: row.method,
            requested_cents: row.requested_cents,
            credited_cents: row.credited_cents,
            currency: "USD",
            reference: row.reference,
            ledger_entry_id: row.ledger_entry_id,
            payment_url: row.payment_url,
            expires_at: row.expires_at,
            created_at: row.created_at,
            credited_at: row.credited_at,
        }
    }
}

/// Body of `POST /deposits`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewDeposit {
    // Absent reads as null, so a missing amount is named like a wrong one.
    /// Whole dollars from $100 to $10,000, in cents.
    #[serde(default)]
    #[schema(value_type = i64, required = true, minimum = 10000, maximum = 1000000, multiple_of = 100, example = 25000)]
    amount_cents: Value,
}

/// Bounds of a crypto deposit: whole dollars from $100 to $10,000.
pub const MIN_DEPOSIT_CENTS: i64 = 10_000;
pub const MAX_DEPOSIT_CENTS: i64 = 1_000_000;

#[utoipa::path(
    post, path = "/deposits", operation_id = "createDeposit", tag = "deposits",
    request_body(content = NewDeposit, content_type = "application/json"),
    responses(
        (status = 201, description = "A crypto invoice, `pending` until paid.", body = DepositView),
        (status = 400, description = "`request.invalid`", body = crate::http::openapi::ErrorBody),
        (status = 403, description = "`forbidden` (with `mode` `sandbox`) for a sandbox key", body = crate::http::openapi::ErrorBody),
        (status = 500, description = "`internal_error`", body = crate::http::openapi::ErrorBody),
        (status = 503, description = "`service_unavailable`: the invoice could not be opened; nothing charged", body = crate::http::openapi::ErrorBody),
    )
)]
#[tracing::instrument(skip_all, fields(partner_id = %caller.partner_id()))]
pub async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    StrictQuery(NoQuery {}): StrictQuery<NoQuery>,
    StrictJson(body): StrictJson<NewDeposit>,
) -> Result<(StatusCode, Json<DepositView>), ApiError> {
    let amount = match whole_number(&body.amount_cents) {
        Some(amount) if !(MIN_DEPOSIT_CENTS..=MAX_DEPOSIT_CENTS).contains(&amount) => {
            return Err(ApiError::invalid(
                "amount_cents",
                "must be from 10000 to 1000000 ($100 to $10,000)",
            ));
        }
        Some(amount) if amount % 100 != 0 => {
            return Err(ApiError::invalid(
                "amount_cents",
                "must be a multiple of 100 (whole dollars)",
            ));
        }
        Some(amount) => amount,
        None if body.amount_cents.is_null() => {
            return Err(ApiError::invalid(
                "amount_cents",
                "is required: an integer number of cents",
            ));
        }
        None => {
            return Err(ApiError::invalid(
                "amount_cents",
                "must be an integer number of cents",
            ));
        }
    };
    if caller.mode == Mode::Sandbox {
        return Err(ApiError::new(ErrorCode::Forbidden)
            .with_message("Sandbox keys cannot open deposits; the sandbox float is play money.")
            .with_extra("mode", "sandbox"));
    }
    let deposit = state.deposits.open(caller.partner_id(), amount).await?;
    Ok((StatusCode::CREATED, Json(DepositView::new(deposit))))
}

/// Query of `GET /deposits`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DepositsQuery {
    /// Only deposits in this state.
    #[param(value_type = Option<crate::domain::states::DepositStatus>)]
    status: Option<String>,
    /// Page size, 1 to 200 (default 50).
    #[param(value_type = Option<i64>, minimum = 1, maximum = 200)]
    limit: Option<String>,
    /// Opaque; pass back `next_cursor` with the same filters.
    #[param(value_type = Option<String>, min_length = 1, max_length = 512)]
    cursor: Option<String>,
}

#[utoipa::path(
    get, path = "/deposits", operation_id = "listDeposits", tag = "deposits", params(DepositsQuery),
    responses(
        (status = 200, description = "Deposits, newest first. A sandbox key gets an empty page.", body = ListEnvelope<DepositView>),
        (status = 400, description = "`request.invalid`", body = crate::http::openapi::ErrorBody),
    )
)]
#[tracing::instrument(skip_all, fields(partner_id = %caller.partner_id()))]
pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    StrictQuery(query): StrictQuery<DepositsQuery>,
) -> Result<Json<ListEnvelope<DepositView>>, ApiError> {
    let mut v = Violations::default();
    let status =
        pagination::parse_one_of::<DepositStatus>(query.status.as_deref(), "status", &mut v);
    let limit = pagination::parse_limit(query.limit.as_deref(), &mut v);
    pagination::check_cursor_length(query.cursor.as_deref(), &mut v);
    v.into_result()?;
    let scope = format!("deposits|{:?}", query.status);
    let before = pagination::decode_keyset(
        &state.cursors,
        &scope,
        query.cursor.as_deref(),
        time_id_keyset,
    )?;
    if caller.mode == Mode::Sandbox {
        return Ok(Json(ListEnvelope {
            data: Vec::new(),
            has_more: false,
            next_cursor: None,
        }));
    }
    let rows = store::deposits::list(
        &state.db,
        caller.partner_id(),
        status,
        before,
        limit as u64 + 1,
    )
    .await?;
    let (rows, has_more, next_cursor) =
        pagination::cut_page(rows, limit, &state.cursors, &scope, |d| {
            vec![d.created_at.timestamp_micros().into(), d.id.clone().into()]
        });
    Ok(Json(ListEnvelope {
        data: rows.into_iter().map(DepositView::new).collect(),
        has_more,
        next_cursor,
    }))
}

#[utoipa::path(
    get, path = "/deposits/{id}", operation_id = "getDeposit", tag = "deposits",
    params(("id" = String, Path, pattern = r"^dep_[A-Za-z0-9_-]{1,64}$", description = "A deposit id.")),
    responses(
        (status = 200, description = "The deposit.", body = DepositView),
        (status = 400, description = "`request.invalid`: not a deposit id", body = crate::http::openapi::ErrorBody),
        (status = 404, description = "`not_found` (every id for a sandbox key)", body = crate::http::openapi::ErrorBody),
    )
)]
#[tracing::instrument(skip_all, fields(partner_id = %caller.partner_id(), deposit_id = %id))]
pub async fn show(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    StrictQuery(NoQuery {}): StrictQuery<NoQuery>,
) -> Result<Json<DepositView>, ApiError> {
    // The kind is checked before the mode.
    check_id(&id, "dep_").map_err(|e| ApiError::invalid("id", e.to_string()))?;
    let not_found = || ApiError::new(ErrorCode::NotFound).with_message("No such deposit.");
    if caller.mode == Mode::Sandbox {
        return Err(not_found());
    }
    let deposit = store::deposits::find(&state.db, caller.partner_id(), &id)
        .await?
        .ok_or_else(not_found)?;
    Ok(Json(DepositView::new(deposit)))
}

/// Query of `GET /ledger`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct LedgerParams {
    /// Only entries of this kind.
    #[param(value_type = Option<LedgerKind>)]
    kind: Option<String>,
    /// Entries created at or after this instant (inclusive).
    #[param(value_type = Option<String>, format = DateTime)]
    created_after: Option<String>,
    /// Entries created before this instant (exclusive).
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
    get, path = "/ledger", operation_id = "listLedger", tag = "account", params(LedgerParams),
    responses(
        (status = 200, description = "Ledger entries, newest `seq` first. A sandbox key gets an empty page.", body = ListEnvelope<LedgerEntryView>),
        (status = 400, description = "`request.invalid`", body = crate::http::openapi::ErrorBody),
    )
)]
#[tracing::instrument(skip_all, fields(partner_id = %caller.partner_id()))]
pub async fn ledger(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    StrictQuery(query): StrictQuery<LedgerParams>,
) -> Result<Json<ListEnvelope<LedgerEntryView>>, ApiError> {
    let mut v = Violations::default();
    let kind = pagination::parse_one_of::<LedgerKind>(query.kind.as_deref(), "kind", &mut v);
    let created_after =
        pagination::parse_datetime(query.created_after.as_deref(), "created_after", &mut v)
            .map(pagination::ceil_to_micros);
    let created_before =
        pagination::parse_datetime(query.created_before.as_deref(), "created_before", &mut v)
            .map(pagination::ceil_to_micros);
    let limit = pagination::parse_limit(query.limit.as_deref(), &mut v);
    pagination::check_cursor_length(query.cursor.as_deref(), &mut v);
    v.into_result()?;
    let scope = format!(
        "ledger|{:?}|{:?}|{:?}",
        query.kind,
        created_after.map(|t| t.timestamp_micros()),
        created_before.map(|t| t.timestamp_micros())
    );
    let before_seq =
        pagination::decode_keyset(&state.cursors, &scope, query.cursor.as_deref(), |values| {
            values.first().and_then(Value::as_i64)
        })?;
    if caller.mode == Mode::Sandbox {
        return Ok(Json(ListEnvelope {
            data: Vec::new(),
            has_more: false,
            next_cursor: None,
        }));
    }
    let rows = store::deposits::ledger(
        &state.db,
        caller.partner_id(),
        &LedgerQuery {
            kind,
            created_after,
            created_before,
            before_seq,
            limit: limit as u64 + 1,
        },
    )
    .await?;
    let (rows, has_more, next_cursor) =
        pagination::cut_page(rows, limit, &state.cursors, &scope, |r| vec![r.seq.into()]);
    Ok(Json(ListEnvelope {
        data: rows.into_iter().map(LedgerEntryView::new).collect(),
        has_more,
        next_cursor,
    }))
}

/// `POST /callbacks/btcpay`: the provider's signed webhook.
#[tracing::instrument(skip_all)]
pub async fn btcpay_callback(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let signature = headers.get("btcpay-sig").and_then(|v| v.to_str().ok());
    state.deposits.on_callback(&body, signature).await?;
    Ok(Json(json!({ "received": true })))
}

/// The Ledger entry resource.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct LedgerEntryView {
    pub object: &'static str,
    pub id: String,
    pub seq: i64,
    pub kind: LedgerKind,
    pub amount_cents: i64,
    pub balance_after_cents: i64,
    pub description: String,
    pub order_id: Option<String>,
    pub deposit_id: Option<String>,
    pub created_at: DateTime<Utc>,
}

impl LedgerEntryView {
    pub fn new(row: ledger_entry::Model) -> Self {
        Self {
            object: "ledger_entry",
            id: row.id,
            seq: row.seq,
            kind: row.kind,
            amount_cents: row.amount_cents,
            balance_after_cents: row.balance_after_cents,
            description: row.description,
            order_id: row.order_id,
            deposit_id: row.deposit_id,
            created_at: row.created_at,
        }
    }
}
