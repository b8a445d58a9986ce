//! The `/v2` routes of the simulated Airalo: the gate in front of them
//! (outage, rate limits, injected failures), what they share, and the token
//! endpoint.

use std::{
    sync::{Arc, atomic::Ordering},
    time::{Duration, Instant},
};

use axum::{
    Json, Router,
    body::Bytes,
    extract::{Request, State},
    http::{
        HeaderMap, HeaderValue, StatusCode,
        header::{AUTHORIZATION, CONTENT_TYPE},
    },
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use serde_json::{Map, Value, json};

use super::{AiraloSim, LOSE_MS, TOKEN_TTL_SECS, Window, lock, lookup, ordering};

/// Token requests a minute while limits are on (Rate limits: `/token`).
const TOKEN_LIMIT_PER_MINUTE: u32 = 3;
/// The code of injected refusals unless `reject_code` says.
const DEFAULT_REJECT_CODE: i64 = 33;

pub(super) fn routes(sim: Arc<AiraloSim>) -> Router<Arc<AiraloSim>> {
    Router::new()
        .route("/v2/token", post(token))
        .route("/v2/orders", post(ordering::order).get(lookup::order_list))
        .route("/v2/orders-async", post(ordering::order_async))
        .route("/v2/orders/{id}", get(lookup::order_get))
        .route("/v2/sims/{iccid}/usage", get(lookup::usage))
        .route("/v2/packages", get(lookup::packages))
        .route_layer(middleware::from_fn_with_state(sim, gatekeeper))
}

/// Outage, the account's rate limit and injected failures, before any
/// route; the limit's headers on every answer.
async fn gatekeeper(State(sim): State<Arc<AiraloSim>>, request: Request, next: Next) -> Response {
    sim.stats.requests.fetch_add(1, Ordering::Relaxed);
    if sim.faults().down {
        return unavailable();
    }
    let limit = sim.rate_limit_per_minute;
    let remaining = if limit == 0 {
        None
    } else {
        match count(&mut lock(&sim.window), limit) {
            Ok(remaining) => Some(remaining),
            Err(reset) => return too_many(&sim, limit, reset),
        }
    };
    if take_failure(&sim) {
        return unavailable();
    }
    let mut response = next.run(request).await;
    if let Some(remaining) = remaining {
        let headers = response.headers_mut();
        headers.insert("x-ratelimit-limit", HeaderValue::from(limit));
        headers.insert("x-ratelimit-remaining", HeaderValue::from(remaining));
    }
    response
}

/// Counts a call in a one-minute window of `limit` calls: the calls left,
/// or the Unix second the full window ends.
pub(super) fn count(window: &mut Window, limit: u32) -> Result<u32, u64> {
    let start = window_start();
    if window.0 != start {
        *window = (start, 0);
    }
    if window.1 >= limit {
        return Err(start + 60);
    }
    window.1 += 1;
    Ok(limit - window.1)
}

pub(super) fn too_many(sim: &AiraloSim, limit: u32, reset: u64) -> Response {
    sim.stats.rate_limited.fetch_add(1, Ordering::Relaxed);
    let wait = reset
        .saturating_sub(crate::limits::unix_now_seconds())
        .max(1);
    (
        StatusCode::TOO_MANY_REQUESTS,
        [
            ("retry-after", wait.to_string()),
            ("x-ratelimit-limit", limit.to_string()),
            ("x-ratelimit-remaining", "0".to_owned()),
            ("x-ratelimit-reset", reset.to_string()),
        ],
        Json(json!({ "message": "Too Many Attempts." })),
    )
        .into_response()
}

fn unavailable() -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(json!({ "message": "Service Unavailable" })),
    )
        .into_response()
}

fn take_failure(sim: &AiraloSim) -> bool {
    let mut faults = sim.faults();
    if faults.fail_next > 0 {
        faults.fail_next -= 1;
        return true;
    }
    faults.fail_rate > 0.0 && rand::random::<f64>() < faults.fail_rate
}

pub(super) fn take_rejection(sim: &AiraloSim) -> Option<i64> {
    let mut faults = sim.faults();
    (faults.reject_next > 0).then(|| {
        faults.reject_next -= 1;
        faults.reject_code.unwrap_or(DEFAULT_REJECT_CODE)
    })
}

pub(super) fn take_loss(sim: &AiraloSim) -> Option<Duration> {
    let mut faults = sim.faults();
    (faults.lose_next > 0).then(|| {
        faults.lose_next -= 1;
        Duration::from_millis(faults.lose_ms.unwrap_or(LOSE_MS))
    })
}

/// A bearer token issued and not ended, or the documented 401.
pub(super) fn authorized(sim: &AiraloSim, headers: &HeaderMap) -> Result<(), Box<Response>> {
    let token = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default();
    let valid = lock(&sim.tokens)
        .get(token)
        .is_some_and(|end| Instant::now() < *end);
    if valid {
        Ok(())
    } else {
        Err(Box::new(
            (
                StatusCode::UNAUTHORIZED,
                Json(json!({ "data": [], "meta": { "message": "This action is unauthorized." } })),
            )
                .into_response(),
        ))
    }
}

/// Body fields, sent as JSON or as form fields.
pub(super) fn params(headers: &HeaderMap, body: &[u8]) -> Map<String, Value> {
    let form = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    if form {
        return form_urlencoded::parse(body)
            .map(|(k, v)| (k.into_owned(), Value::String(v.into_owned())))
            .collect();
    }
    match serde_json::from_slice(body) {
        Ok(Value::Object(fields)) => fields,
        _ => Map::new(),
    }
}

/// A field as text (numbers written out).
pub(super) fn text(params: &Map<String, Value>, key: &str) -> Option<String> {
    match params.get(key)? {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The documented validation answer.
pub(super) fn invalid(errors: Vec<(&str, String)>) -> Response {
    let data: Map<String, Value> = errors
        .into_iter()
        .map(|(field, message)| (field.to_owned(), Value::String(message)))
        .collect();
    (
        StatusCode::UNPROCESSABLE_ENTITY,
        Json(json!({ "data": data, "meta": { "message": "the parameter is invalid" } })),
    )
        .into_response()
}

/// The documented business refusal.
pub(super) fn coded(code: i64) -> Response {
    let reason = match code {
        11 => "Insufficient Airalo Credit: simulated account.",
        13 => "The requested operator is currently undergoing maintenance. Please try again later.",
        33 => "Insufficient stock of eSIMs remaining: 0. Please try your request again later.",
        34 => {
            "The requested eSIM package is invalid or it is currently out of stock. Please try again later."
        }
        53 => {
            "Something unexpected happened. We're working to resolve the issue. Please try again later."
        }
        _ => "Bad request. Please check your input and try again.",
    };
    (
        StatusCode::UNPROCESSABLE_ENTITY,
        Json(json!({ "code": code, "reason": reason })),
    )
        .into_response()
}

async fn token(State(sim): State<Arc<AiraloSim>>, headers: HeaderMap, body: Bytes) -> Response {
    sim.stats.token_calls.fetch_add(1, Ordering::Relaxed);
    if sim.rate_limit_per_minute > 0
        && let Err(reset) = count(&mut lock(&sim.token_window), TOKEN_LIMIT_PER_MINUTE)
    {
        return too_many(&sim, TOKEN_LIMIT_PER_MINUTE, reset);
    }
    let params = params(&headers, &body);
    let field = |key: &str| text(&params, key).unwrap_or_default();
    let mut errors = Vec::new();
    for key in ["client_id", "client_secret", "grant_type"] {
        if field(key).is_empty() {
            errors.push((
                key,
                format!("The {} field is required.", key.replace('_', " ")),
            ));
        }
    }
    if errors.is_empty() && field("grant_type") != "client_credentials" {
        errors.push((
            "grant_type",
            "The selected grant type is invalid.".to_owned(),
        ));
    }
    if errors.is_empty() && field("client_id") != sim.client_id {
        errors.push(("client_id", "The selected client id is invalid.".to_owned()));
    }
    if !errors.is_empty() {
        return invalid(errors);
    }
    if field("client_secret") != sim.client_secret {
        return (
            StatusCode::UNAUTHORIZED,
            Json(json!({ "data": [], "meta": { "message": "Client authentication failed" } })),
        )
            .into_response();
    }
    let ttl = sim.faults().token_ttl_secs.unwrap_or(TOKEN_TTL_SECS);
    let token = format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    {
        let mut tokens = lock(&sim.tokens);
        let now = Instant::now();
        tokens.retain(|_, end| *end > now);
        tokens.insert(token.clone(), now + Duration::from_secs(ttl));
    }
    Json(json!({
        "data": { "token_type": "Bearer", "expires_in": ttl, "access_token": token },
        "meta": { "message": "success" },
    }))
    .into_response()
}

/// The start of the current one-minute window.
pub(super) fn window_start() -> u64 {
    let now = crate::limits::unix_now_seconds();
    now - now % 60
}
