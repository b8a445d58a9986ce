//! Operator money routes: `POST /partners/{id}/movements`,
//! `POST /partners/{id}/wire-deposits` and `PUT /partners/{id}/sandbox-float`.
//! Each goes through the partner's account actor, never straight to the
//! database.
//!
//! An `adjustment` may be of either sign; a `payout` or a `chargeback` is
//! negative. Adjustments and payouts never take the live float below zero
//! (402 `balance.insufficient`); a chargeback may, because the money has
//! already left whatever the float says.

use axum::{
    Extension, Json,
    extract::{Path, State},
    http::StatusCode,
    response::{IntoResponse, Response},
};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    approvals::{Held, held_response, hold},
    partners::{parse_partner_id, partner_not_found},
};
use crate::{
    actors::account::{Authority, Movement},
    domain::{
        operators::{Caller, needs_second_operator},
        partner::Status,
        states::{ApprovalKind, LedgerKind},
        time,
    },
    http::error::{ApiError, Violations},
    http::{deposits::LedgerEntryView, extract::StrictJson},
    state::AppState,
    store,
};

/// Body of `POST /partners/{id}/movements`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MovementBody {
    kind: String,
    amount_cents: i64,
    description: String,
}

/// What `kind` may be.
const KINDS: &str = "must be adjustment, payout or chargeback";

/// Largest single movement: $10,000,000.
const MAX_MOVEMENT_CENTS: i64 = 1_000_000_000;

#[tracing::instrument(skip_all, fields(partner_id = %id))]
pub(crate) async fn create_movement(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    StrictJson(body): StrictJson<MovementBody>,
) -> Result<Response, ApiError> {
    let id = parse_partner_id(&id)?;
    let mut v = Violations::default();
    // Only these three kinds are an operator's to write.
    let kind = LedgerKind::parse(&body.kind).filter(|kind| {
        matches!(
            kind,
            LedgerKind::Adjustment | LedgerKind::Payout | LedgerKind::Chargeback
        )
    });
    match kind {
        Some(LedgerKind::Adjustment) => {
            v.check(body.amount_cents == 0, "amount_cents", "must not be zero")
        }
        Some(LedgerKind::Payout | LedgerKind::Chargeback) => v.check(
            body.amount_cents >= 0,
            "amount_cents",
            "must be negative for a payout or a chargeback",
        ),
        _ => v.add("kind", KINDS),
    }
    // `unsigned_abs`: `i64::MIN` has no positive counterpart, and must be refused, not overflow.
    v.check(
        body.amount_cents.unsigned_abs() > MAX_MOVEMENT_CENTS.unsigned_abs(),
        "amount_cents",
        "must be at most 1000000000 cents either way",
    );
    let description = body.description.trim().to_owned();
    v.check(
        description.is_empty() || description.chars().count() > 255,
        "description",
        "must be 1 to 255 characters",
    );
    v.into_result()?;
    let Some(kind) = kind else {
        return Err(ApiError::invalid("kind", KINDS));
    };
    store::partners::find(&state.db, id.as_str())
        .await?
        .ok_or_else(partner_not_found)?;
    if needs_second_operator(body.amount_cents, state.four_eyes_cents) {
        let held = Held {
            kind: ApprovalKind::Movement,
            partner_id: id.as_str().to_owned(),
            amount_cents: body.amount_cents,
            request: json!({ "kind": kind, "amount_cents": body.amount_cents, "description": description }),
        };
        return Ok(held_response(
            hold(&state, &caller, "movement.create", held).await?,
        ));
    }
    let audit = caller
        .audit("movement.create", "partner", id.as_str(), time::now())
        .partner(id.as_str())
        .amount(body.amount_cents)
        .note(description.clone());
    let movement = Movement {
        allow_overdraft: kind == LedgerKind::Chargeback,
        kind,
        amount_cents: body.amount_cents,
        description,
    };
    let entry = state
        .accounts
        .movement(id.as_str(), movement, Authority::direct(audit))
        .await?;
    Ok((StatusCode::CREATED, Json(LedgerEntryView::new(entry))).into_response())
}

/// Body of `PUT /partners/{id}/sandbox-float`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SandboxFloatBody {
    balance_cents: i64,
}

#[tracing::instrument(skip_all, fields(partner_id = %id))]
pub(crate) async fn set_sandbox_float(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    StrictJson(body): StrictJson<SandboxFloatBody>,
) -> Result<Json<Value>, ApiError> {
    let id = parse_partner_id(&id)?;
    if !(0..=MAX_MOVEMENT_CENTS).contains(&body.balance_cents) {
        return Err(ApiError::invalid(
            "balance_cents",
            "must be from 0 to 1000000000",
        ));
    }
    store::partners::find(&state.db, id.as_str())
        .await?
        .ok_or_else(partner_not_found)?;
    let audit = caller
        .audit("sandbox_float.set", "partner", id.as_str(), time::now())
        .partner(id.as_str());
    state
        .accounts
        .set_sandbox_float(id.as_str(), body.balance_cents, Authority::direct(audit))
        .await?;
    Ok(Json(
        json!({ "object": "balance", "mode": "sandbox", "balance_cents": body.balance_cents, "currency": "USD" }),
    ))
}

/// Body of `POST /partners/{id}/wire-deposits`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WireDepositBody {
    amount_cents: i64,
    /// The bank-statement text; unique per partner.
    reference: String,
}

/// Records a wire transfer, already credited, with one `deposit` ledger row.
#[tracing::instrument(skip_all, fields(partner_id = %id))]
pub(crate) async fn create_wire_deposit(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    StrictJson(body): StrictJson<WireDepositBody>,
) -> Result<Response, ApiError> {
    let id = parse_partner_id(&id)?;
    let mut v = Violations::default();
    v.check(
        !(1..=MAX_MOVEMENT_CENTS).contains(&body.amount_cents),
        "amount_cents",
        "must be from 1 to 1000000000",
    );
    let reference = body.reference.trim().to_owned();
    v.check(
        reference.is_empty() || reference.chars().count() > 200,
        "reference",
        "must be 1 to 200 characters",
    );
    v.into_result()?;
    let partner = store::partners::find(&state.db, id.as_str())
        .await?
        .ok_or_else(partner_not_found)?;
    if partner.status == Status::Closed {
        return Err(ApiError::new(crate::http::error::ErrorCode::Conflict)
            .with_message("The account is closed; a person must decide where the money goes."));
    }
    if needs_second_operator(body.amount_cents, state.four_eyes_cents) {
        let held = Held {
            kind: ApprovalKind::WireDeposit,
            partner_id: id.as_str().to_owned(),
            amount_cents: body.amount_cents,
            request: json!({ "amount_cents": body.amount_cents, "reference": reference }),
        };
        return Ok(held_response(
            hold(&state, &caller, "wire_deposit.create", held).await?,
        ));
    }
    let audit = caller
        .audit("wire_deposit.create", "partner", id.as_str(), time::now())
        .partner(id.as_str())
        .amount(body.amount_cents)
        .note(reference.clone());
    let deposit = state
        .accounts
        .wire_deposit(
            id.as_str(),
            body.amount_cents,
            &reference,
            Authority::direct(audit),
        )
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(crate::http::deposits::DepositView::new(deposit)),
    )
        .into_response())
}
