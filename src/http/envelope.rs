//! The outermost middleware of every listener: gives each request an id,
//! opens its log span, and guarantees that every error response carries the
//! spec's JSON envelope and every response an `X-Request-Id`.

use std::time::Instant;

use axum::{
    body::Body,
    extract::{MatchedPath, Request, State},
    http::{HeaderValue, header},
    middleware::Next,
    response::Response,
};
use tracing::Instrument;

use super::error::ApiError;
use crate::domain::ids::new_request_id;

/// The response header carrying the request id.
pub(crate) const REQUEST_ID_HEADER: &str = "x-request-id";

/// Marks a non-2xx response whose body is already final (the health body),
/// so the envelope leaves it alone.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FinalBody;

/// The request's id, left in its extensions for handlers that record it
/// (the operators' audit trail).
#[derive(Debug, Clone)]
pub(crate) struct RequestId(pub String);

/// What the envelope needs to render errors.
#[derive(Clone)]
pub(crate) struct EnvelopeContext {
    /// Base of `doc_url`, without a trailing slash.
    pub docs_base: std::sync::Arc<str>,
}

/// Request id, span, access log line and error rendering.
pub(crate) async fn envelope(
    State(ctx): State<EnvelopeContext>,
    mut request: Request,
    next: Next,
) -> Response {
    let request_id = new_request_id();
    request
        .extensions_mut()
        .insert(RequestId(request_id.clone()));
    let method = request.method().clone();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", |p| p.as_str())
        .to_owned();
    let span = tracing::info_span!(
        "request",
        request_id = %request_id,
        method = %method,
        route = %route,
        // Filled by the operator listener's authorization: who is asking.
        operator = tracing::field::Empty,
        operator_id = tracing::field::Empty,
    );
    let started = Instant::now();
    let response = next.run(request).instrument(span.clone()).await;
    let mut response = render_error(response, &request_id, &ctx.docs_base);
    if let Ok(value) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert(REQUEST_ID_HEADER, value);
    }
    let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
    let status = response.status().as_u16();
    span.in_scope(|| tracing::info!(status, latency_ms, "request finished"));
    response
}

/// Writes the envelope for an [`ApiError`] left by a handler, or for a bare
/// error status raised by axum or tower; anything else passes untouched.
fn render_error(response: Response, request_id: &str, docs_base: &str) -> Response {
    let status = response.status();
    let (mut parts, body) = response.into_parts();
    let error = match parts.extensions.remove::<ApiError>() {
        Some(error) => error,
        None if status.as_u16() >= 400 && parts.extensions.get::<FinalBody>().is_none() => {
            ApiError::from_bare_status(status)
        }
        None => return Response::from_parts(parts, body),
    };
    let bytes = serde_json::to_vec(&error.body(request_id, docs_base)).unwrap_or_default();
    parts.status = error.http_status();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    for (name, value) in &error.headers {
        parts.headers.insert(name.clone(), value.clone());
    }
    Response::from_parts(parts, Body::from(bytes))
}
