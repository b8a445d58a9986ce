//! The partner API (`/partner/v1`): axum handlers that parse, forward and
//! answer. They never touch SQL (that is `store/`) and never decide money
//! (that is the account actors).

pub mod envelope;
pub mod error;
pub mod extract;
pub mod health;

use axum::{Router, routing::get};

use crate::app::AppState;

/// Routes under `/partner/v1`.
pub fn partner_routes() -> Router<AppState> {
    Router::new().route("/health", get(health::health))
}
