//! The outermost middleware of every listener: gives each request an id,
//! opens its log span, and guarantees that every error response carries the
//! spec's JSON envelope and every response an `X-Request-Id`. It also
//! bounds the public listener's requests in time and records every
//! request's series: one middleware rather than three, because each layer
//! of axum middleware clones the services under it and boxes a future on
//! every request.

use std::time::{Duration, Instant};

use axum::{
    body::Body,
    extract::{MatchedPath, Request, State},
    http::{HeaderValue, header},
    middleware::Next,
    response::Response,
};
use tracing::{Instrument, field::display};

use super::{
    auth::Authenticated,
    error::{ApiError, ErrorCode},
};
use crate::{domain::ids::new_request_id, metrics};

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

/// What the envelope needs to render errors, bound and count requests.
#[derive(Clone)]
pub(crate) struct EnvelopeContext {
    /// Base of `doc_url`, without a trailing slash.
    pub docs_base: std::sync::Arc<str>,
    /// The listener's name in the request series; `None` records none.
    pub listener: Option<&'static str>,
    /// How long a request may take before it is answered 503 (`None`:
    /// unbounded).
    pub request_timeout: Option<Duration>,
}

/// Request id, span, access log line, time bound, error rendering and the
/// request's series.
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
    let matched = request.extensions().get::<MatchedPath>().cloned();
    let route = metrics::route_label(matched.as_ref());
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
    // The span covers the time bound too, so that a timeout's log line
    // carries the request's id and route.
    let answer = next.run(request);
    let response = match ctx.request_timeout {
        Some(limit) => within(limit, answer).instrument(span.clone()).await,
        None => answer.instrument(span.clone()).await,
    };
    let mut response = render_error(response, &request_id, &ctx.docs_base);
    if let Ok(value) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert(REQUEST_ID_HEADER, value);
    }
    let elapsed = started.elapsed();
    let status = response.status().as_u16();
    if let Some(listener) = ctx.listener {
        let method = metrics::method_label(&method);
        metrics::request_finished(listener, route, method, status, elapsed);
    }
    // Milliseconds to the microsecond: whole microseconds over a thousand
    // are written in their few digits (0.074), where the seconds' binary
    // fraction times a thousand came out in seventeen (0.07427099999999999).
    let latency_ms = elapsed.as_micros() as f64 / 1000.0;
    // A partner request names the partner and key on this line only: fields
    // of the line cost a fraction of fields recorded into the span after it
    // opened, and the lines logged inside the request share its request_id.
    // Written as they are (Display), where a `&str` is quoted and escaped
    // character by character in the plain format.
    let key = response.extensions_mut().remove::<Authenticated>();
    let partner_id = key.as_ref().map(|key| display(key.0.partner.id.as_str()));
    let key_id = key.as_ref().map(|key| display(key.0.key.id.as_str()));
    span.in_scope(|| tracing::info!(status, latency_ms, partner_id, key_id, "request finished"));
    response
}

/// Answers 503 `service_unavailable` (retryable) when a request outlasts
/// `http.request_timeout_ms`. An order whose answer is cut off this way may
/// still be committed by its account actor: the partner's retry with the
/// same Idempotency-Key gets it once.
async fn within(limit: Duration, answer: impl Future<Output = Response>) -> Response {
    use axum::response::IntoResponse;
    match tokio::time::timeout(limit, answer).await {
        Ok(response) => response,
        Err(_) => {
            tracing::warn!(
                limit_ms = limit.as_millis() as u64,
                "request outlasted http.request_timeout_ms; answered 503"
            );
            ApiError::new(ErrorCode::ServiceUnavailable)
                .with_message("The request took too long; retry it (with the same Idempotency-Key for an order).")
                .with_extra("retryable", true)
                .into_response()
        }
    }
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
