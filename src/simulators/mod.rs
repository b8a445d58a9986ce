//! Stand-ins for the eSIM supplier and the crypto payment provider, served on
//! their own listener and speaking the same HTTP protocols as the real ones.

pub(crate) mod airalo;
pub(crate) mod payments;
mod stock;
pub(crate) mod supplier;

use std::sync::Arc;

use axum::{Json, Router, routing::get};

/// The stand-ins of one node.
#[derive(Clone)]
pub(crate) struct Simulators {
    /// eSIM Access.
    pub supplier: Arc<supplier::SupplierSim>,
    /// Airalo's Partner API.
    pub airalo: Arc<airalo::AiraloSim>,
    /// BTCPay Server.
    pub payments: Arc<payments::PaymentsSim>,
}

/// Routes of the simulators listener.
pub(crate) fn routes(sims: &Simulators) -> Router {
    Router::new()
        .route(
            "/sim/health",
            get(|| async { Json(serde_json::json!({ "status": "ok" })) }),
        )
        .merge(supplier::routes(sims.supplier.clone()))
        .merge(airalo::routes(sims.airalo.clone()))
        .merge(payments::routes(sims.payments.clone()))
}
