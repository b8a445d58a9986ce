//! The operator API (`/operator/v1` on its own listener) and the `admin` CLI
//! that wraps it. Same error envelope as the partner API.
//!
//! Every route is behind [`auth::authorize`]: a named operator's token (or
//! the configured bootstrap token, an admin) and the role the route asks
//! for (`domain::operators::required_role`). Every change writes one row of
//! the audit trail in its own transaction; money above the four-eyes limit
//! is held in [`approvals`] for a second operator.

mod actors;
pub(crate) mod approvals;
mod audit;
mod auth;
mod catalogue;
pub mod cli;
pub mod cli_team;
pub(crate) mod client;
mod console;
mod keys;
mod limits;
pub(crate) mod money;
mod operators;
mod partners;
pub(crate) mod reviews;
mod suppliers;
mod views;

use axum::{
    Router, middleware,
    routing::{get, patch, post, put},
};

use crate::state::AppState;

pub(crate) use auth::authorize;
pub(crate) use console::routes as console_routes;

/// Routes under `/operator/v1`, each behind the caller's role.
pub fn routes(state: AppState) -> Router<AppState> {
    Router::new()
        .route("/me", get(operators::me))
        .route("/operators", get(operators::list).post(operators::create))
        .route("/operators/{id}/rotate", post(operators::rotate))
        .route("/operators/{id}/revoke", post(operators::revoke))
        .route("/audit", get(audit::list))
        .route("/approvals", get(approvals::list))
        .route("/approvals/{id}", get(approvals::show))
        .route("/approvals/{id}/approve", post(approvals::approve_route))
        .route("/approvals/{id}/reject", post(approvals::reject_route))
        .route("/partners", post(partners::create))
        .route(
            "/partners/{id}",
            get(partners::show).patch(partners::update),
        )
        .route("/partners/{id}/keys", post(keys::issue))
        .route("/partners/{id}/movements", post(money::create_movement))
        .route(
            "/partners/{id}/wire-deposits",
            post(money::create_wire_deposit),
        )
        .route("/reviews", get(reviews::list))
        .route("/reviews/{id}/resolve", post(reviews::resolve))
        .route("/reviews/{id}/approve", post(reviews::approve_route))
        .route("/reviews/{id}/reject", post(reviews::reject_route))
        .route(
            "/partners/{id}/sandbox-float",
            put(money::set_sandbox_float),
        )
        .route("/keys/{id}", patch(keys::update))
        .route("/actors", get(actors::list))
        .route("/admission", get(actors::admission))
        .route("/rate-limits", get(limits::status))
        .route("/suppliers", get(suppliers::list))
        .route("/orders/{id}/supply", get(suppliers::order_supply))
        .route("/margins", get(suppliers::margins))
        .route("/actors/provisioning/fail", post(actors::fail_provisioning))
        .route("/actors/{partner_id}/fail", post(actors::fail))
        .route("/plans", post(catalogue::upsert_plans))
        .route("/plans/{id}", patch(catalogue::patch_plan))
        .route("/destinations", post(catalogue::upsert_destinations))
        .route("/destinations/{code}", patch(catalogue::patch_destination))
        .route("/keys/{id}/rotate", post(keys::rotate))
        .route("/keys/{id}/revoke", post(keys::revoke))
        .route_layer(middleware::from_fn_with_state(state, authorize))
}

/// Accepts `null` as "clear" and absence as "leave as it is" for PATCH bodies.
pub(crate) fn double_option<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    serde::Deserialize::deserialize(deserializer).map(Some)
}
