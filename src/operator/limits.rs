//! `GET /rate-limits`: where this node counts the partners' rate-limit
//! windows and failed-authentication budgets, and, with Redis, whether Redis
//! answers. The partner `/health` stays as the spec defines it (a Redis
//! outage costs no request there), so this is where operators see it.

use axum::{Json, extract::State};

use crate::{limits::LimiterView, state::AppState};

/// `GET /rate-limits`: the backend and, with Redis, whether it is up, since
/// when, the calls that failed and what was counted in memory meanwhile.
pub(super) async fn status(State(state): State<AppState>) -> Json<LimiterView> {
    Json(state.limiter.view())
}
