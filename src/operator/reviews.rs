//! Deposit reviews: `GET /reviews`, and `POST /reviews/{id}/approve`,
//! `/reject` and `/resolve`. The console decides through the same functions.
//!
//! Approving moves the amount in question through the partner's account
//! actor, once (see `actors::account`'s review step); rejecting and
//! resolving close the review without moving money. Each decision applies
//! only to an open review: a second one is a 409, never a second movement.

use axum::{
    Extension, Json,
    extract::{Path, State},
    response::{IntoResponse, Response},
};
use entities::{approval, review};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{
    actors::account::Authority,
    domain::{
        operators::{Caller, needs_second_operator},
        states::{ApprovalKind, ReviewStatus},
        time,
    },
    http::{
        error::{ApiError, ErrorCode, Violations},
        extract::{StrictJson, StrictQuery},
        pagination::parse_one_of,
    },
    state::AppState,
    store,
};

/// Query of `GET /reviews`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReviewsQuery {
    status: Option<String>,
}

pub(crate) async fn list(
    State(state): State<AppState>,
    StrictQuery(query): StrictQuery<ReviewsQuery>,
) -> Result<Json<Value>, ApiError> {
    let mut v = Violations::default();
    let status = parse_one_of::<ReviewStatus>(query.status.as_deref(), "status", &mut v);
    v.into_result()?;
    let rows = store::deposits::reviews(&state.db, status).await?;
    Ok(Json(
        json!({ "object": "list", "data": rows.into_iter().map(review_json).collect::<Vec<_>>() }),
    ))
}

/// Body of `POST /reviews/{id}/resolve`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResolveBody {
    resolution: String,
}

/// Body of `POST /reviews/{id}/approve` and `/reject`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DecisionBody {
    note: String,
}

#[tracing::instrument(skip_all, fields(review_id = %id))]
pub(crate) async fn resolve(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    StrictJson(body): StrictJson<ResolveBody>,
) -> Result<Json<Value>, ApiError> {
    let note = checked_note("resolution", &body.resolution)?;
    close(&state, &caller, &id, ReviewStatus::Resolved, note)
        .await
        .map(|r| Json(review_json(r)))
}

#[tracing::instrument(skip_all, fields(review_id = %id))]
pub(crate) async fn approve_route(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    StrictJson(body): StrictJson<DecisionBody>,
) -> Result<Response, ApiError> {
    let note = checked_note("note", &body.note)?;
    Ok(match approve(&state, &caller, &id, note).await? {
        Decided::Done(review) => Json(review_json(review)).into_response(),
        Decided::Held(approval) => super::approvals::held_response(approval),
    })
}

#[tracing::instrument(skip_all, fields(review_id = %id))]
pub(crate) async fn reject_route(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    StrictJson(body): StrictJson<DecisionBody>,
) -> Result<Json<Value>, ApiError> {
    let note = checked_note("note", &body.note)?;
    close(&state, &caller, &id, ReviewStatus::Rejected, note)
        .await
        .map(|r| Json(review_json(r)))
}

/// An operator's note: trimmed, 1 to 500 characters, else a 400 naming `param`.
pub(crate) fn checked_note<'a>(param: &'static str, note: &'a str) -> Result<&'a str, ApiError> {
    let note = note.trim();
    if note.is_empty() || note.chars().count() > 500 {
        return Err(ApiError::invalid(param, "must be 1 to 500 characters"));
    }
    Ok(note)
}

/// What an approval of a review did.
pub(crate) enum Decided {
    /// The decision is taken: the review is closed (and, if approved, the
    /// amount moved).
    Done(review::Model),
    /// The amount is above the four-eyes limit: held for a second operator.
    Held(approval::Model),
}

/// Approves a review through its partner's account actor: the amount in
/// question moves once, and the review is closed in the same transaction;
/// above the four-eyes limit it is held for a second operator instead.
pub(crate) async fn approve(
    state: &AppState,
    caller: &Caller,
    id: &str,
    note: &str,
) -> Result<Decided, ApiError> {
    let found = find(state, id).await?;
    if needs_second_operator(found.amount_cents, state.four_eyes_cents) {
        if found.status != ReviewStatus::Open {
            return Err(already(found.status));
        }
        let held = super::approvals::Held {
            kind: ApprovalKind::Review,
            partner_id: found.partner_id.clone(),
            amount_cents: found.amount_cents,
            request: json!({ "review_id": found.id, "note": note }),
        };
        let row = super::approvals::hold(state, caller, "review.approve", held).await?;
        return Ok(Decided::Held(row));
    }
    let audit = caller
        .audit("review.approve", "review", &found.id, time::now())
        .partner(&found.partner_id)
        .amount(found.amount_cents)
        .before(json!({ "status": found.status }))
        .note(note);
    let approved = state
        .accounts
        .approve_review(&found.partner_id, &found.id, note, Authority::direct(audit))
        .await?;
    Ok(Decided::Done(approved))
}

fn already(status: ReviewStatus) -> ApiError {
    ApiError::new(ErrorCode::Conflict)
        .with_message(format!("The review is already {status}; nothing changed."))
}

/// Closes an open review as `status` (rejected or resolved) without moving
/// money.
pub(crate) async fn close(
    state: &AppState,
    caller: &Caller,
    id: &str,
    status: ReviewStatus,
    note: &str,
) -> Result<review::Model, ApiError> {
    let found = find(state, id).await?;
    let now = time::now();
    let decision = store::deposits::Decision {
        status,
        note,
        ledger_entry_id: None,
        now,
    };
    let action = match status {
        ReviewStatus::Rejected => "review.reject",
        _ => "review.resolve",
    };
    let entry = caller
        .audit(action, "review", &found.id, now)
        .partner(&found.partner_id)
        .amount(found.amount_cents)
        .before(json!({ "status": found.status }))
        .after(json!({ "status": status }))
        .note(note);
    let txn = store::begin_write(&state.db).await?;
    if !store::deposits::decide_review(&txn, &found.id, decision).await? {
        txn.rollback().await?;
        let current = find(state, id).await?;
        return Err(already(current.status));
    }
    store::audit::append(&txn, &entry).await?;
    txn.commit().await?;
    tracing::info!(review_id = %found.id, deposit_id = %found.deposit_id, status = %status, "review closed");
    // What `decide_review` wrote (`now` is already at the stored precision).
    Ok(review::Model {
        status,
        resolution: Some(note.to_owned()),
        resolved_at: Some(now),
        ..found
    })
}

async fn find(state: &AppState, id: &str) -> Result<review::Model, ApiError> {
    store::deposits::review(&state.db, id)
        .await?
        .ok_or_else(|| ApiError::new(ErrorCode::NotFound).with_message("No such review."))
}

pub(crate) fn review_json(row: review::Model) -> Value {
    json!({
        "object": "review", "id": row.id, "deposit_id": row.deposit_id, "partner_id": row.partner_id,
        "reason": row.reason, "detail": row.detail, "amount_cents": row.amount_cents,
        "status": row.status, "resolution": row.resolution, "ledger_entry_id": row.ledger_entry_id,
        "created_at": row.created_at, "resolved_at": row.resolved_at,
    })
}
