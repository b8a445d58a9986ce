//! Named operators: `GET /me`, `GET /operators`, and the administrator's
//! `POST /operators`, `POST /operators/{id}/rotate` and `/revoke`. A token
//! is shown once, in the answer that made it; only its SHA-256 is stored.
//! A revoked or rotated token is refused from the next request on, on
//! every node (tokens are looked up on each request).

use axum::{
    Extension, Json,
    extract::{Path, State},
    http::StatusCode,
};
use entities::operator;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{
    domain::{
        ids::OperatorId,
        operators::{Caller, Role, is_valid_name, issue_token, required_role},
        time,
    },
    http::{
        error::{ApiError, ErrorCode, Violations},
        extract::StrictJson,
    },
    state::AppState,
    store::{self, operators::NewOperator},
};

/// `GET /me`: who the token belongs to and what the role allows.
pub(super) async fn me(Extension(caller): Extension<Caller>) -> Json<Value> {
    Json(json!({
        "object": "operator", "id": caller.id, "name": caller.name, "role": caller.role,
        "may": allowed(caller.role),
    }))
}

/// What each kind of change needs, for `GET /me` and the console.
fn allowed(role: Role) -> Value {
    let may = |method: &str, route: &str| role >= required_role(method, route);
    json!({
        "read": true,
        "keys_and_partners": may("POST", "/partners/{id}/keys"),
        "money": may("POST", "/partners/{id}/movements"),
        "approve": may("POST", "/approvals/{id}/approve"),
        "operators": may("POST", "/operators"),
    })
}

/// `GET /operators`: every operator, oldest first (never a token).
pub(super) async fn list(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let rows = store::operators::list(&state.db).await?;
    let data: Vec<Value> = rows.into_iter().map(|row| view(row, None)).collect();
    Ok(Json(json!({ "object": "list", "data": data })))
}

/// Body of `POST /operators`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CreateOperator {
    name: String,
    role: String,
}

#[tracing::instrument(skip_all)]
pub(super) async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    StrictJson(body): StrictJson<CreateOperator>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let mut v = Violations::default();
    let name = body.name.trim().to_owned();
    v.check(
        !is_valid_name(&name),
        "name",
        "must be 1 to 100 letters, digits, spaces, dots, hyphens, underscores or @ (not bootstrap or system)",
    );
    let role = Role::parse(&body.role);
    v.check(
        role.is_none(),
        "role",
        "must be one of viewer, support, finance, admin",
    );
    v.into_result()?;
    let role = role.unwrap_or(Role::Viewer);
    let now = time::now();
    let token = issue_token();
    let new = NewOperator {
        id: OperatorId::generate().into_string(),
        name,
        role,
        token_hash: token.hash,
        last4: token.last4,
        created_by: caller.name.clone(),
    };
    let txn = store::begin_write(&state.db).await?;
    let row = store::operators::insert(&txn, new, now)
        .await
        .map_err(|err| match store::is_unique_violation(&err) {
            true => ApiError::new(ErrorCode::Conflict)
                .with_message("An operator with this name exists.")
                .with_param("name"),
            false => err.into(),
        })?;
    let entry = caller
        .audit("operator.create", "operator", &row.id, now)
        .after(view(row.clone(), None));
    store::audit::append(&txn, &entry).await?;
    txn.commit().await?;
    tracing::info!(new_operator = %row.name, new_role = row.role.as_str(), "operator created");
    Ok((StatusCode::CREATED, Json(view(row, Some(token.secret)))))
}

/// `POST /operators/{id}/rotate`: a new token now; the old one stops at once.
#[tracing::instrument(skip_all, fields(target_operator = %id))]
pub(super) async fn rotate(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let current = find(&state, &id).await?;
    if current.revoked_at.is_some() {
        return Err(revoked());
    }
    let now = time::now();
    let token = issue_token();
    let txn = store::begin_write(&state.db).await?;
    let Some(row) = store::operators::set_token(&txn, &id, token.hash, token.last4, now).await?
    else {
        txn.rollback().await?;
        return Err(revoked());
    };
    let entry = caller
        .audit("operator.rotate", "operator", &row.id, now)
        .before(json!({ "last4": current.last4 }))
        .after(json!({ "last4": row.last4 }));
    store::audit::append(&txn, &entry).await?;
    txn.commit().await?;
    tracing::info!(target_name = %row.name, "operator token rotated");
    Ok(Json(view(row, Some(token.secret))))
}

/// `POST /operators/{id}/revoke`: the token is refused from the next
/// request on, on every node. Revoking again changes nothing.
#[tracing::instrument(skip_all, fields(target_operator = %id))]
pub(super) async fn revoke(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let current = find(&state, &id).await?;
    let now = time::now();
    let txn = store::begin_write(&state.db).await?;
    let Some(row) = store::operators::revoke(&txn, current.clone(), now).await? else {
        txn.rollback().await?;
        return Ok(Json(view(current, None)));
    };
    let entry = caller
        .audit("operator.revoke", "operator", &row.id, now)
        .before(json!({ "revoked_at": null }))
        .after(json!({ "revoked_at": row.revoked_at }));
    store::audit::append(&txn, &entry).await?;
    txn.commit().await?;
    tracing::info!(target_name = %row.name, "operator revoked");
    Ok(Json(view(row, None)))
}

fn revoked() -> ApiError {
    ApiError::new(ErrorCode::Conflict)
        .with_message("The operator is revoked; create a new operator instead.")
}

async fn find(state: &AppState, id: &str) -> Result<operator::Model, ApiError> {
    OperatorId::parse(id).map_err(|e| ApiError::invalid("id", e.to_string()))?;
    store::operators::find(&state.db, id)
        .await?
        .ok_or_else(|| ApiError::new(ErrorCode::NotFound).with_message("No such operator."))
}

/// An operator as the API shows it; `token` only in the answer that made it.
fn view(row: operator::Model, token: Option<String>) -> Value {
    let mut shown = json!({
        "object": "operator", "id": row.id, "name": row.name, "role": row.role,
        "last4": row.last4, "created_by": row.created_by, "created_at": row.created_at,
        "rotated_at": row.rotated_at, "revoked_at": row.revoked_at,
    });
    if let Some(token) = token {
        shown["token"] = json!(token);
    }
    shown
}
