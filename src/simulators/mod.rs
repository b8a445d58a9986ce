//! Stand-ins for the eSIM supplier and the crypto payment provider, served on
//! their own listener and speaking the same HTTP protocols as the real ones.

pub(crate) mod payments;
pub(crate) mod supplier;

use std::sync::Arc;

use axum::{Json, Router, routing::get};

/// Routes of the simulators listener.
pub(crate) fn routes(
    supplier: Arc<supplier::SupplierSim>,
    payments: Arc<payments::PaymentsSim>,
) -> Router {
    Router::new()
        .route(
            "/sim/health",
            get(|| async { Json(serde_json::json!({ "status": "ok" })) }),
        )
        .merge(supplier::routes(supplier))
        .merge(payments::routes(payments))
}
