//! Deposit reviews: `GET /reviews`, and `POST /reviews/{id}/approve`,
//! `/reject` and `/resolve`. The console decides through the same functions.
//!
//! Approving moves the amount in question through the partner's account
//! actor, once (see `actors::account`'s review step); rejecting and
//! resolving close the review without moving money. Each decision applies
//! only to an open review: a second one is a 409, never a second movement.

use axum::{
    Json,
    extract::{Path, State},
};
use entities::review;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{
    domain::{states::ReviewStatus, time},
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
    Path(id): Path<String>,
    StrictJson(body): StrictJson<ResolveBody>,
) -> Result<Json<Value>, ApiError> {
    let note = checked_note("resolution", &body.resolution)?;
    close(&state, &id, ReviewStatus::Resolved, note)
        .await
        .map(|r| Json(review_json(r)))
}

#[tracing::instrument(skip_all, fields(review_id = %id))]
pub(crate) async fn approve_route(
    State(state): State<AppState>,
    Path(id): Path<String>,
    StrictJson(body): StrictJson<DecisionBody>,
) -> Result<Json<Value>, ApiError> {
    let note = checked_note("note", &body.note)?;
    approve(&state, &id, note)
        .await
        .map(|r| Json(review_json(r)))
}

#[tracing::instrument(skip_all, fields(review_id = %id))]
pub(crate) async fn reject_route(
    State(state): State<AppState>,
    Path(id): Path<String>,
    StrictJson(body): StrictJson<DecisionBody>,
) -> Result<Json<Value>, ApiError> {
    let note = checked_note("note", &body.note)?;
    close(&state, &id, ReviewStatus::Rejected, note)
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

/// Approves a review through its partner's account actor: the amount in
/// question moves once, and the review is closed in the same transaction.
pub(crate) async fn approve(
    state: &AppState,
    id: &str,
    note: &str,
) -> Result<review::Model, ApiError> {
    let found = find(state, id).await?;
    let approved = state
        .accounts
        .approve_review(&found.partner_id, &found.id, note)
        .await?;
    Ok(approved)
}

/// Closes an open review as `status` (rejected or resolved) without moving
/// money.
pub(crate) async fn close(
    state: &AppState,
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
    if !store::deposits::decide_review(&state.db, &found.id, decision).await? {
        let current = find(state, id).await?;
        return Err(ApiError::new(ErrorCode::Conflict).with_message(format!(
            "The review is already {}; nothing changed.",
            current.status
        )));
    }
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

fn review_json(row: review::Model) -> Value {
    json!({
        "object": "review", "id": row.id, "deposit_id": row.deposit_id, "partner_id": row.partner_id,
        "reason": row.reason, "detail": row.detail, "amount_cents": row.amount_cents,
        "status": row.status, "resolution": row.resolution, "ledger_entry_id": row.ledger_entry_id,
        "created_at": row.created_at, "resolved_at": row.resolved_at,
    })
}
