//! The operator API (`/operator/v1` on its own listener) and the `admin` CLI
//! that wraps it. Same error envelope as the partner API; a bearer token from
//! configuration, compared in constant time.

mod actors;
mod catalogue;
pub mod cli;
pub(crate) mod client;
mod console;
mod keys;
mod limits;
pub(crate) mod money;
mod partners;
pub(crate) mod reviews;
mod suppliers;
mod views;

use axum::{
    Router,
    extract::{Request, State},
    http::header,
    middleware::{self, Next},
    response::Response,
    routing::{get, patch, post, put},
};
use secrecy::ExposeSecret;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::{
    http::error::{ApiError, ErrorCode},
    state::AppState,
};

pub(crate) use console::routes as console_routes;

/// Routes under `/operator/v1`, all behind the operator token.
pub fn routes(state: AppState) -> Router<AppState> {
    Router::new()
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
        .route_layer(middleware::from_fn_with_state(
            state,
            require_operator_token,
        ))
}

/// Lets a request through only with the operator token (`Bearer`).
pub(crate) async fn require_operator_token(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .ok_or_else(|| ApiError::new(ErrorCode::AuthMissing))?
        .to_str()
        .ok()
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default();
    if is_operator_token(&state, presented) {
        Ok(next.run(request).await)
    } else {
        Err(ApiError::new(ErrorCode::AuthInvalidKey)
            .with_message("The operator token is not valid."))
    }
}

/// Whether `presented` is the operator token. Digests are compared so that
/// neither the length nor a prefix of the token leaks through timing.
pub(crate) fn is_operator_token(state: &AppState, presented: &str) -> bool {
    let expected = Sha256::digest(state.operator_token.expose_secret().as_bytes());
    let given = Sha256::digest(presented.as_bytes());
    bool::from(expected.ct_eq(&given))
}

/// Accepts `null` as "clear" and absence as "leave as it is" for PATCH bodies.
pub(crate) fn double_option<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    serde::Deserialize::deserialize(deserializer).map(Some)
}
