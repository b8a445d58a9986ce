//! The partner API (`/partner/v1`): axum handlers that parse, forward and
//! answer. They never touch SQL (that is `store/`) and never decide money
//! (that is the account actors).

pub mod auth;
pub mod envelope;
pub mod error;
pub mod extract;
pub mod health;
pub mod me;
pub mod pagination;
pub mod plans;

use axum::{Router, middleware, routing::get};

use crate::{app::AppState, domain::rate::RateClass};

/// Routes under `/partner/v1`: `/health` open, the rest behind the
/// authentication layer of their rate class.
pub fn partner_routes(state: &AppState) -> Router<AppState> {
    let read = Router::new()
        .route("/me", get(me::me))
        .route("/balance", get(me::balance))
        .route("/plans/{id}", get(plans::show))
        .route("/plans/{id}/price", get(plans::price))
        .route("/destinations", get(plans::destinations));
    let catalogue = Router::new().route("/plans", get(plans::list));
    Router::new()
        .route("/health", get(health::health))
        .merge(behind_auth(read, state, RateClass::Read))
        .merge(behind_auth(catalogue, state, RateClass::Catalogue))
}

fn behind_auth(routes: Router<AppState>, state: &AppState, class: RateClass) -> Router<AppState> {
    let layer = auth::AuthLayer {
        app: state.clone(),
        class,
    };
    routes.route_layer(middleware::from_fn_with_state(layer, auth::authenticate))
}
