//! Operator catalogue routes: upsert destinations and plans, delist plans,
//! withdraw destinations. Each change bumps the catalogue version (so other
//! nodes reload) and reloads this node's catalogue before answering.

use std::collections::HashSet;

use axum::{
    Extension, Json,
    extract::{Path, State},
};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{
    catalogue::{DestinationInput, PlanInput, destination_row, plan_row},
    domain::{operators::Caller, time},
    http::{
        error::{ApiError, ErrorCode, Violations},
        extract::{StrictJson, StrictJsonArray},
    },
    state::AppState,
    store,
};

/// `POST /destinations`: upsert by code.
#[tracing::instrument(skip_all, fields(count = body.len()))]
pub(super) async fn upsert_destinations(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    StrictJsonArray(body): StrictJsonArray<DestinationInput>,
) -> Result<Json<Value>, ApiError> {
    let now = time::now();
    let mut v = Violations::default();
    let rows: Vec<_> = body
        .into_iter()
        .enumerate()
        .map(|(i, d)| destination_row(d, &format!("[{i}]."), now, &mut v))
        .collect();
    v.into_result()?;
    let count = rows.len();
    let codes: Vec<String> = rows.iter().map(|row| row.code.clone()).collect();
    let txn = store::begin_write(&state.db).await?;
    store::catalogue::upsert_destinations(&txn, rows).await?;
    store::catalogue::bump_version(&txn).await?;
    let entry = caller
        .audit("destinations.upsert", "catalogue", "destinations", now)
        .after(json!({ "codes": codes }));
    store::audit::append(&txn, &entry).await?;
    txn.commit().await?;
    state.catalogue.reload().await?;
    tracing::info!(count, "destinations upserted");
    Ok(Json(json!({ "upserted": count })))
}

/// `POST /plans`: upsert by id.
#[tracing::instrument(skip_all, fields(count = body.len()))]
pub(super) async fn upsert_plans(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    StrictJsonArray(body): StrictJsonArray<PlanInput>,
) -> Result<Json<Value>, ApiError> {
    let now = time::now();
    let codes: HashSet<String> = store::catalogue::destination_codes(&state.db)
        .await?
        .into_iter()
        .collect();
    let known = |code: &str| codes.contains(code);
    let mut v = Violations::default();
    let mut seen = HashSet::new();
    let rows: Vec<_> = body
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            v.check(
                !seen.insert(p.id.clone()),
                &format!("[{i}].id"),
                "appears twice in this request",
            );
            plan_row(p, &format!("[{i}]."), &known, now, &mut v)
        })
        .collect();
    v.into_result()?;
    let count = rows.len();
    let ids: Vec<String> = rows.iter().map(|row| row.id.clone()).collect();
    let txn = store::begin_write(&state.db).await?;
    store::catalogue::upsert_plans(&txn, rows).await?;
    store::catalogue::bump_version(&txn).await?;
    let entry = caller
        .audit("plans.upsert", "catalogue", "plans", now)
        .after(json!({ "ids": ids }));
    store::audit::append(&txn, &entry).await?;
    txn.commit().await?;
    state.catalogue.reload().await?;
    tracing::info!(count, "plans upserted");
    Ok(Json(json!({ "upserted": count })))
}

/// Body of `PATCH /plans/{id}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PlanPatch {
    active: bool,
}

#[tracing::instrument(skip_all, fields(plan_id = %id))]
pub(super) async fn patch_plan(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    StrictJson(body): StrictJson<PlanPatch>,
) -> Result<Json<Value>, ApiError> {
    let now = time::now();
    let txn = store::begin_write(&state.db).await?;
    let plan = store::catalogue::set_plan_active(&txn, &id, body.active, now)
        .await?
        .ok_or_else(|| ApiError::new(ErrorCode::PlanNotFound))?;
    store::catalogue::bump_version(&txn).await?;
    let entry = caller
        .audit("plan.update", "plan", &plan.id, now)
        .after(json!({ "active": plan.active }));
    store::audit::append(&txn, &entry).await?;
    txn.commit().await?;
    state.catalogue.reload().await?;
    tracing::info!(active = plan.active, "plan listing changed");
    Ok(Json(
        json!({ "object": "plan", "id": plan.id, "active": plan.active, "updated_at": plan.updated_at }),
    ))
}

/// Body of `PATCH /destinations/{code}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DestinationPatch {
    withdrawn: bool,
}

#[tracing::instrument(skip_all, fields(code = %code))]
pub(super) async fn patch_destination(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(code): Path<String>,
    StrictJson(body): StrictJson<DestinationPatch>,
) -> Result<Json<Value>, ApiError> {
    let code = code.to_ascii_uppercase();
    let now = time::now();
    let txn = store::begin_write(&state.db).await?;
    let destination = store::catalogue::set_destination_withdrawn(&txn, &code, body.withdrawn, now)
        .await?
        .ok_or_else(|| ApiError::new(ErrorCode::NotFound).with_message("No such destination."))?;
    store::catalogue::bump_version(&txn).await?;
    let entry = caller
        .audit("destination.update", "destination", &destination.code, now)
        .after(json!({ "withdrawn": destination.withdrawn }));
    store::audit::append(&txn, &entry).await?;
    txn.commit().await?;
    state.catalogue.reload().await?;
    tracing::info!(withdrawn = destination.withdrawn, "destination changed");
    Ok(Json(json!({
        "object": "destination", "code": destination.code, "name": destination.name,
        "region": destination.region, "withdrawn": destination.withdrawn,
    })))
}
