//! Four eyes on money: a movement above `operator.four_eyes_cents` (an
//! adjustment, payout, chargeback, wire deposit or review approval) is held
//! as an approval and moves nothing until a *different* finance or admin
//! operator approves it. `GET /approvals`, `GET /approvals/{id}`,
//! `POST /approvals/{id}/approve` and `/reject`.
//!
//! Approving carries the held request out through the partner's account
//! actor, whose transaction also closes the approval (guarded on its still
//! being pending), so racing approvals move the money once. A rejection or
//! a lapse (`operator.approval_lapse_seconds`, 24 h) moves nothing.

use axum::{
    Extension, Json,
    extract::{Path, State},
    http::StatusCode,
    response::{IntoResponse, Response},
};
use entities::approval;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    auth::{Rule, record_refusal},
    reviews::checked_note,
};
use crate::{
    actors::account::{Authority, Movement},
    domain::{
        ids::ApprovalId,
        operators::{Caller, effective_status},
        states::{ApprovalKind, ApprovalStatus, LedgerKind},
        time,
    },
    http::{
        deposits::{DepositView, LedgerEntryView},
        error::{ApiError, ErrorCode, Violations},
        extract::{StrictJson, StrictQuery},
        pagination::parse_one_of,
    },
    state::AppState,
    store::{self, approvals::NewApproval},
};

/// Most approvals a list shows.
const LIST_LIMIT: u64 = 500;

/// What a held request is: its kind, partner, cents and the body to carry out.
pub(crate) struct Held {
    pub kind: ApprovalKind,
    pub partner_id: String,
    pub amount_cents: i64,
    pub request: Value,
}

/// Holds `held` for a second operator: the approval and the requester's
/// audit row (`action`, outcome `pending_approval`) in one transaction.
pub(crate) async fn hold(
    state: &AppState,
    caller: &Caller,
    action: &'static str,
    held: Held,
) -> Result<approval::Model, ApiError> {
    let now = time::now();
    let id = ApprovalId::generate().into_string();
    let entry = caller
        .audit(action, "approval", &id, now)
        .partner(&held.partner_id)
        .amount(held.amount_cents)
        .after(held.request.clone())
        .pending();
    let new = NewApproval {
        id,
        kind: held.kind,
        partner_id: held.partner_id,
        amount_cents: held.amount_cents,
        request: held.request,
        requested_by_id: caller.id.clone(),
        requested_by_name: caller.name.clone(),
        expires_at: now + state.approval_lapse,
    };
    let txn = store::begin_write(&state.db).await?;
    let row = store::approvals::insert(&txn, new, now).await?;
    store::audit::append(&txn, &entry).await?;
    txn.commit().await?;
    tracing::info!(approval_id = %row.id, partner_id = %row.partner_id, amount_cents = row.amount_cents, kind = %row.kind.as_str(), "money movement held for a second operator");
    Ok(row)
}

/// The 202 answer to a held request.
pub(crate) fn held_response(row: approval::Model) -> Response {
    (StatusCode::ACCEPTED, Json(view(row))).into_response()
}

/// Query of `GET /approvals`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ApprovalsQuery {
    status: Option<String>,
}

/// `GET /approvals`: newest first, as they stand now (a pending approval
/// past its time shows as lapsed).
pub(super) async fn list(
    State(state): State<AppState>,
    StrictQuery(query): StrictQuery<ApprovalsQuery>,
) -> Result<Json<Value>, ApiError> {
    let mut v = Violations::default();
    let wanted = parse_one_of::<ApprovalStatus>(query.status.as_deref(), "status", &mut v);
    v.into_result()?;
    let data: Vec<Value> = listed(&state, wanted)
        .await?
        .into_iter()
        .map(view)
        .collect();
    Ok(Json(json!({ "object": "list", "data": data })))
}

/// Approvals as they stand now, only those `wanted` if given.
pub(crate) async fn listed(
    state: &AppState,
    wanted: Option<ApprovalStatus>,
) -> Result<Vec<approval::Model>, ApiError> {
    let now = time::now();
    let rows = store::approvals::list(&state.db, LIST_LIMIT).await?;
    Ok(rows
        .into_iter()
        .map(|row| approval::Model {
            status: effective_status(row.status, row.expires_at, now),
            ..row
        })
        .filter(|row| wanted.is_none_or(|status| row.status == status))
        .collect())
}

/// `GET /approvals/{id}`.
pub(super) async fn show(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let row = find(&state, &id).await?;
    let now = time::now();
    Ok(Json(view(approval::Model {
        status: effective_status(row.status, row.expires_at, now),
        ..row
    })))
}

/// Body of `POST /approvals/{id}/approve` and `/reject`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DecisionBody {
    note: String,
}

#[tracing::instrument(skip_all, fields(approval_id = %id))]
pub(super) async fn approve_route(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    StrictJson(body): StrictJson<DecisionBody>,
) -> Result<Json<Value>, ApiError> {
    let note = checked_note("note", &body.note)?;
    approve(&state, &caller, &id, note).await.map(Json)
}

#[tracing::instrument(skip_all, fields(approval_id = %id))]
pub(super) async fn reject_route(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    StrictJson(body): StrictJson<DecisionBody>,
) -> Result<Json<Value>, ApiError> {
    let note = checked_note("note", &body.note)?;
    reject(&state, &caller, &id, note)
        .await
        .map(|row| Json(view(row)))
}

/// Approves a held movement as `caller`: refused to its requester, a 409
/// once decided or lapsed; otherwise the money moves, once.
pub(crate) async fn approve(
    state: &AppState,
    caller: &Caller,
    id: &str,
    note: &str,
) -> Result<Value, ApiError> {
    let found = pending(state, id).await?;
    if found.requested_by_id == caller.id {
        let why = "the operator who asked for a movement cannot approve it";
        tracing::warn!(approval_id = %found.id, "four eyes: self-approval refused");
        record_refusal(
            state,
            caller,
            Rule::FourEyes,
            &format!("approval {}", found.id),
            why,
        )
        .await;
        return Err(ApiError::new(ErrorCode::Forbidden)
            .with_message("Another finance or admin operator must approve this; you asked for it.")
            .with_extra("rule", "four_eyes"));
    }
    let audit = caller
        .audit("approval.approve", "approval", &found.id, time::now())
        .partner(&found.partner_id)
        .amount(found.amount_cents)
        .note(note);
    let authority = Authority {
        audit,
        approval_id: Some(found.id.clone()),
    };
    let result = carry_out(state, &found, authority).await?;
    tracing::info!(approval_id = %found.id, partner_id = %found.partner_id, amount_cents = found.amount_cents, "held movement approved and carried out");
    let decided = find(state, id).await?;
    let mut shown = view(decided);
    shown["result"] = result;
    Ok(shown)
}

/// Carries the held request out through the partner's account actor; its
/// transaction closes the approval.
async fn carry_out(
    state: &AppState,
    found: &approval::Model,
    authority: Authority,
) -> Result<Value, ApiError> {
    let request = &found.request;
    let text = |field: &str| request[field].as_str().unwrap_or_default().to_owned();
    let partner = found.partner_id.as_str();
    match found.kind {
        ApprovalKind::Movement => {
            let kind = LedgerKind::parse(&text("kind"))
                .ok_or_else(|| ApiError::internal("a held movement has no kind"))?;
            let movement = Movement {
                allow_overdraft: kind == LedgerKind::Chargeback,
                kind,
                amount_cents: found.amount_cents,
                description: text("description"),
            };
            let entry = state
                .accounts
                .movement(partner, movement, authority)
                .await?;
            Ok(json!(LedgerEntryView::new(entry)))
        }
        ApprovalKind::WireDeposit => {
            let reference = text("reference");
            let deposit = state
                .accounts
                .wire_deposit(partner, found.amount_cents, &reference, authority)
                .await?;
            Ok(json!(DepositView::new(deposit)))
        }
        ApprovalKind::Review => {
            let review = state
                .accounts
                .approve_review(partner, &text("review_id"), &text("note"), authority)
                .await?;
            Ok(super::reviews::review_json(review))
        }
    }
}

/// Rejects a held movement (its requester may withdraw it too): nothing moves.
pub(crate) async fn reject(
    state: &AppState,
    caller: &Caller,
    id: &str,
    note: &str,
) -> Result<approval::Model, ApiError> {
    let found = pending(state, id).await?;
    let now = time::now();
    let decision = store::approvals::Decision {
        status: ApprovalStatus::Rejected,
        by_id: &caller.id,
        by_name: &caller.name,
        note: Some(note),
        result_id: None,
        now,
    };
    let entry = caller
        .audit("approval.reject", "approval", &found.id, now)
        .partner(&found.partner_id)
        .amount(found.amount_cents)
        .before(json!({ "status": ApprovalStatus::PendingApproval }))
        .after(json!({ "status": ApprovalStatus::Rejected }))
        .note(note);
    let txn = store::begin_write(&state.db).await?;
    if !store::approvals::decide(&txn, &found.id, decision).await? {
        txn.rollback().await?;
        return Err(decided_meanwhile());
    }
    store::audit::append(&txn, &entry).await?;
    txn.commit().await?;
    tracing::info!(approval_id = %found.id, "held movement rejected; nothing moved");
    find(state, id).await
}

/// The approval if it is still pending now; a lapsed one is written as
/// lapsed (by `system`) and answered 409, a decided one 409.
async fn pending(state: &AppState, id: &str) -> Result<approval::Model, ApiError> {
    let found = find(state, id).await?;
    let now = time::now();
    match effective_status(found.status, found.expires_at, now) {
        ApprovalStatus::PendingApproval => Ok(found),
        ApprovalStatus::Lapsed => {
            lapse(state, &found, now).await?;
            Err(ApiError::new(ErrorCode::Conflict).with_message(format!(
                "The approval lapsed at {}; nothing moved. Ask for the movement again.",
                found.expires_at.to_rfc3339()
            )))
        }
        other => Err(ApiError::new(ErrorCode::Conflict).with_message(format!(
            "The approval is already {}; nothing changed.",
            other.as_str()
        ))),
    }
}

/// Writes the lapse of `found` and its audit row, once.
async fn lapse(
    state: &AppState,
    found: &approval::Model,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<(), ApiError> {
    let system = Caller::system();
    let decision = store::approvals::Decision {
        status: ApprovalStatus::Lapsed,
        by_id: &system.id,
        by_name: &system.name,
        note: None,
        result_id: None,
        now,
    };
    let entry = system
        .audit("approval.lapse", "approval", &found.id, now)
        .partner(&found.partner_id)
        .amount(found.amount_cents)
        .note("no second operator approved it in time; nothing moved");
    let txn = store::begin_write(&state.db).await?;
    if store::approvals::decide(&txn, &found.id, decision).await? {
        store::audit::append(&txn, &entry).await?;
    }
    txn.commit().await?;
    Ok(())
}

fn decided_meanwhile() -> ApiError {
    ApiError::new(ErrorCode::Conflict)
        .with_message("The approval was decided or lapsed meanwhile; nothing changed.")
}

async fn find(state: &AppState, id: &str) -> Result<approval::Model, ApiError> {
    ApprovalId::parse(id).map_err(|e| ApiError::invalid("id", e.to_string()))?;
    store::approvals::find(&state.db, id)
        .await?
        .ok_or_else(|| ApiError::new(ErrorCode::NotFound).with_message("No such approval."))
}

/// The approval as the API shows it.
pub(crate) fn view(row: approval::Model) -> Value {
    let decided_by = row
        .decided_by_id
        .map(|id| json!({ "id": id, "name": row.decided_by_name }));
    json!({
        "object": "approval", "id": row.id, "kind": row.kind, "status": row.status,
        "partner_id": row.partner_id, "amount_cents": row.amount_cents, "request": row.request,
        "requested_by": { "id": row.requested_by_id, "name": row.requested_by_name },
        "requested_at": row.requested_at, "expires_at": row.expires_at,
        "decided_by": decided_by, "decided_at": row.decided_at,
        "note": row.decision_note, "result_id": row.result_id,
    })
}
