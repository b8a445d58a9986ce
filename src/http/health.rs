//! `GET /health`: no key, no rate limit, no `object` field.

use axum::{Json, extract::State, http::StatusCode, response::IntoResponse};
use serde::Serialize;

use super::{
    envelope::FinalBody,
    extract::{NoQuery, StrictQuery},
};
use crate::{state::AppState, store};

/// Whether the service and its database answer.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct Health {
    /// `ok` or `degraded`.
    pub status: &'static str,
    /// Seconds since this process started.
    pub uptime_seconds: u64,
    /// `ok` or `down`.
    pub database: &'static str,
}

/// 200 when a database round trip succeeds within the probe time-out, else 503.
#[utoipa::path(
    get, path = "/health", operation_id = "getHealth", tag = "health",
    responses(
        (status = 200, description = "The service and its database answer.", body = Health),
        (status = 503, description = "The database probe failed or took over two seconds.", body = Health),
    )
)]
#[tracing::instrument(skip_all)]
pub(crate) async fn health(
    State(state): State<AppState>,
    StrictQuery(NoQuery {}): StrictQuery<NoQuery>,
) -> impl IntoResponse {
    let probe = tokio::time::timeout(state.probe_timeout, store::ping(&state.db)).await;
    let database_ok = matches!(probe, Ok(Ok(())));
    if !database_ok {
        tracing::warn!(timed_out = probe.is_err(), "database probe failed");
    }
    let body = Health {
        status: if database_ok { "ok" } else { "degraded" },
        uptime_seconds: state.started_at.elapsed().as_secs(),
        database: if database_ok { "ok" } else { "down" },
    };
    let status = if database_ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        [(axum::http::header::CACHE_CONTROL, "no-store")],
        axum::Extension(FinalBody),
        Json(body),
    )
}
