//! `GET /actors`, `GET /admission` and the fault-injection routes.

use axum::{
    Extension, Json,
    extract::{Path, State},
};
use serde_json::{Value, json};

use crate::{
    domain::{operators::Caller, time},
    http::error::{ApiError, ErrorCode},
    state::AppState,
    store,
};

/// The live actors (kind, partner, mailbox length, restarts, start time)
/// and this process's recent supervision events, newest first.
pub(super) async fn list(State(state): State<AppState>) -> Json<Value> {
    let accounts = state.accounts.list();
    Json(json!({
        "object": "list",
        "data": accounts,
        "account_restarts_total": state.accounts.total_restarts(),
        "provisioning": state.accounts.provisioning().is_some(),
        "recent_events": crate::actors::events::recent(),
    }))
}

/// `GET /admission`: what the supplier can take, the backlog, each waiting
/// partner's share and the refusals on this node.
pub(super) async fn admission(State(state): State<AppState>) -> Json<Value> {
    match &state.admission {
        Some(admission) => Json(json!(admission.view())),
        None => Json(json!({
            "enabled": false,
            "why": "admission is off (admission.enabled = false, or supplier.requests_per_second = 0)",
        })),
    }
}

/// `POST /actors/{partner_id}/fail`: makes the partner's account actor fail,
/// so an operator can watch supervision restart it. Off unless
/// `operator.fault_injection` is true.
pub(super) async fn fail(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(partner_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    if !state.fault_injection {
        return Err(ApiError::new(ErrorCode::NotFound)
            .with_message("Fault injection is off (operator.fault_injection)."));
    }
    crate::domain::ids::PartnerId::parse(&partner_id)
        .map_err(|e| ApiError::invalid("partner_id", e.to_string()))?;
    state.accounts.fail(&partner_id).await?;
    // The failure is in memory, so the row follows it rather than sharing a
    // transaction with it.
    let entry = caller
        .audit(
            "actor.fail",
            "actor",
            format!("account:{partner_id}"),
            time::now(),
        )
        .partner(&partner_id);
    store::audit::append(&state.db, &entry).await?;
    Ok(Json(
        json!({ "injected": "failure", "partner_id": partner_id }),
    ))
}

/// `POST /actors/provisioning/fail`: makes the provisioning actor fail, so an
/// operator can watch its supervisor restart it (and orders carry on). Off
/// unless `operator.fault_injection` is true.
pub(super) async fn fail_provisioning(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<Value>, ApiError> {
    if !state.fault_injection {
        return Err(ApiError::new(ErrorCode::NotFound)
            .with_message("Fault injection is off (operator.fault_injection)."));
    }
    let injected = state
        .accounts
        .provisioning()
        .is_some_and(|handle| handle.fail());
    if !injected {
        return Err(ApiError::new(ErrorCode::NotFound)
            .with_message("Provisioning does not run on this node."));
    }
    let entry = caller.audit("actor.fail", "actor", "provisioning", time::now());
    store::audit::append(&state.db, &entry).await?;
    Ok(Json(
        json!({ "injected": "failure", "actor": "provisioning" }),
    ))
}
