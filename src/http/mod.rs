//! The partner API (`/partner/v1`): axum handlers that parse, forward and
//! answer. They never touch SQL (that is `store/`) and never decide money
//! (that is the account actors).

pub(crate) mod accepted;
pub mod auth;
pub mod deposits;
pub(crate) mod envelope;
pub mod error;
pub mod esims;
pub mod extract;
pub(crate) mod health;
pub(crate) mod instants;
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

/// Where the partner API is served.
pub const PARTNER_BASE: &str = "/partner/v1";

/// A partner route's full path. The routes carry it rather than being
/// nested under it: a nested route strips the prefix from every request's
/// URI (a new URI each time) before it reaches its handler.
fn at(path: &str) -> String {
    format!("{PARTNER_BASE}{path}")
}

/// Routes under [`PARTNER_BASE`]: `/health` open, the rest behind the
/// authentication layer of their rate class.
pub fn partner_routes(state: &AppState) -> Router<AppState> {
    let read = Router::new()
        .route(&at("/me"), get(me::me))
        .route(&at("/balance"), get(me::balance))
        .route(&at("/plans/{id}"), get(plans::show))
        .route(&at("/plans/{id}/price"), get(plans::price))
        .route(&at("/destinations"), get(plans::destinations))
        .route(&at("/orders/{id}"), get(orders::show))
        .route(&at("/esims"), get(esims::list))
        .route(&at("/esims/{iccid}"), get(esims::show))
        .route(&at("/esims/{iccid}/install"), get(esims::install))
        .route(&at("/esims/{iccid}/usage"), get(esims::usage))
        .route(&at("/deposits/{id}"), get(deposits::show))
        .route(&at("/ledger"), get(deposits::ledger));
    let catalogue = Router::new().route(&at("/plans"), get(plans::list));
    let list_orders = Router::new().route(&at("/orders"), get(orders::list));
    let list_deposits = Router::new().route(&at("/deposits"), get(deposits::list));
    let write_deposits = Router::new().route(&at("/deposits"), post(deposits::create));
    // POST /orders gates in the handler: a gating refusal binds the Idempotency-Key.
    let write_orders = Router::new().route(&at("/orders"), post(orders::create));
    Router::new()
        .route(&at("/health"), get(health::health))
        .route(&at("/openapi.json"), get(openapi::serve))
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
