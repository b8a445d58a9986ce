//! The partner API (`/partner/v1`): axum handlers that parse, forward and
//! answer. They never touch SQL (that is `store/`) and never decide money
//! (that is the account actors).

pub mod auth;
pub mod deposits;
pub(crate) mod envelope;
pub mod error;
pub mod esims;
pub mod extract;
pub(crate) mod health;
pub(crate) mod me;
pub mod openapi;
pub mod orders;
pub mod pagination;
pub mod plans;
pub(crate) mod server;

use axum::{
    Router, middleware,
    routing::{get, post},
};

use crate::{domain::rate::RateClass, state::AppState};

/// The providers' callbacks (`/callbacks/...`), not partner routes: BTCPay
/// Server's webhooks, authenticated by their signature, and eSIM Access's
/// webhooks, which are only hints (the supplier order is read back).
pub fn callback_routes() -> Router<AppState> {
    Router::new()
        .route("/btcpay", post(deposits::btcpay_callback))
        .route("/esim-access", post(orders::esim_access_callback))
        .route("/airalo", post(orders::airalo_callback))
}

/// Routes under `/partner/v1`: `/health` open, the rest behind the
/// authentication layer of their rate class.
pub fn partner_routes(state: &AppState) -> Router<AppState> {
    let read = Router::new()
        .route("/me", get(me::me))
        .route("/balance", get(me::balance))
        .route("/plans/{id}", get(plans::show))
        .route("/plans/{id}/price", get(plans::price))
        .route("/destinations", get(plans::destinations))
        .route("/orders/{id}", get(orders::show))
        .route("/esims", get(esims::list))
        .route("/esims/{iccid}", get(esims::show))
        .route("/esims/{iccid}/install", get(esims::install))
        .route("/esims/{iccid}/usage", get(esims::usage))
        .route("/deposits/{id}", get(deposits::show))
        .route("/ledger", get(deposits::ledger));
    let catalogue = Router::new().route("/plans", get(plans::list));
    let list_orders = Router::new().route("/orders", get(orders::list));
    let list_deposits = Router::new().route("/deposits", get(deposits::list));
    let write_deposits = Router::new().route("/deposits", post(deposits::create));
    // POST /orders gates in the handler: a gating refusal binds the Idempotency-Key.
    let write_orders = Router::new().route("/orders", post(orders::create));
    Router::new()
        .route("/health", get(health::health))
        .route("/openapi.json", get(openapi::serve))
        .merge(behind_auth(read, state, RateClass::Read, false))
        .merge(behind_auth(catalogue, state, RateClass::Catalogue, false))
        .merge(
            behind_auth(list_orders, state, RateClass::Read, false).merge(behind_auth(
                write_orders,
                state,
                RateClass::Write,
                true,
            )),
        )
        .merge(
            behind_auth(list_deposits, state, RateClass::Read, false).merge(behind_auth(
                write_deposits,
                state,
                RateClass::Write,
                false,
            )),
        )
}

fn behind_auth(
    routes: Router<AppState>,
    state: &AppState,
    class: RateClass,
    defer_gating: bool,
) -> Router<AppState> {
    let layer = auth::AuthLayer {
        app: state.clone(),
        class,
        defer_gating,
    };
    routes.route_layer(middleware::from_fn_with_state(layer, auth::authenticate))
}
