//! Authentication, allowlists, rate limits and account gating, in that order,
//! for every partner route except `GET /health`.
//!
//! 1. The source address is resolved (`domain::net`), and a source past its
//!    failed-authentication budget is refused before any lookup.
//! 2. The bearer key is checked: form, then digest lookup, then revocation and
//!    expiry. Each failure consumes the source's budget.
//! 3. The key's CIDR allowlist, if any, must contain the source.
//! 4. The key's window for the route's class is counted; `X-RateLimit-*`
//!    headers go on every response from here on, errors included.
//! 5. The account must let the key's mode through.

use std::{net::SocketAddr, sync::Arc};

use axum::{
    extract::{ConnectInfo, Request, State},
    http::{HeaderMap, HeaderName, HeaderValue, header},
    middleware::Next,
    response::{IntoResponse, Response},
};

use crate::{
    auth::KeyRecord,
    config::SANDBOX_BAND,
    domain::{
        api_key,
        net::{self, Source},
        ordering,
        partner::{self, Mode},
        rate::{Band, RateClass, WindowState},
        time,
    },
    http::error::{ApiError, ErrorCode},
    limits::unix_now_millis,
    state::AppState,
};

/// The authenticated caller, for handlers (a request extension).
#[derive(Debug, Clone)]
pub struct Caller {
    /// The key and its account as authentication saw them.
    pub record: Arc<KeyRecord>,
    /// The key's mode: the only thing that decides live or sandbox.
    pub mode: Mode,
    /// The account's verdict on this key; always `Ok` unless the route gates
    /// in its handler (`POST /orders`, where a refusal binds the key).
    pub gate: Result<(), partner::Refusal>,
}

impl Caller {
    pub fn partner_id(&self) -> &str {
        &self.record.partner.id
    }

    pub fn key_id(&self) -> &str {
        &self.record.key.id
    }
}

/// Whose key a partner request was answered for, from the moment the key is
/// known (refusals of its allowlist, rate or account included): left in the
/// response's extensions, where the envelope names the partner and key on the
/// request's access line.
#[derive(Debug, Clone)]
pub(crate) struct Authenticated(pub Arc<KeyRecord>);

/// State of the authentication layer of one group of routes.
#[derive(Clone)]
pub struct AuthLayer {
    pub app: AppState,
    /// The rate class of the routes behind this layer.
    pub class: RateClass,
    /// Leave the account's refusal to the handler instead of answering it here.
    pub defer_gating: bool,
}

/// The middleware. See the module documentation for the order of checks.
pub async fn authenticate(
    State(layer): State<AuthLayer>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
    next: Next,
) -> Response {
    let app = &layer.app;
    let source = resolve_source(app, peer, request.headers());
    let budget_bucket = source.budget_bucket();
    if app.limiter.used(&budget_bucket, app.failed_auth).await >= u64::from(app.failed_auth.limit) {
        crate::metrics::rate_limited("failed_auth");
        return ApiError::new(ErrorCode::RateLimitExceeded)
            .with_message("Too many failed authentications from this address.")
            .into_response();
    }

    let record = match identify(app, request.headers()).await {
        Ok(record) => record,
        Err(Identify::Refused(error)) => {
            app.limiter.hit(&budget_bucket, app.failed_auth).await;
            crate::metrics::auth_failed(error.code.as_str());
            return error.into_response();
        }
        Err(Identify::Fault(error)) => return error.into_response(),
    };
    let answered_for = Authenticated(Arc::clone(&record));
    let mut response = answer(&layer, &source, record, request, next).await;
    response.extensions_mut().insert(answered_for);
    response
}

/// Steps 3 to 5 for a known key, and the route's answer when they pass.
async fn answer(
    layer: &AuthLayer,
    source: &Source,
    record: Arc<KeyRecord>,
    mut request: Request,
    next: Next,
) -> Response {
    let app = &layer.app;
    if !net::allowed(source, record.allowlist.as_deref()) {
        return ApiError::new(ErrorCode::AuthIpNotAllowed).into_response();
    }

    let window = band_for(app, &record).window(layer.class);
    let counted = app
        .limiter
        .hit(record.buckets.of(layer.class), window)
        .await;
    let response = if !counted.allowed {
        crate::metrics::rate_limited(layer.class.as_str());
        window_exceeded(layer.class, &counted).into_response()
    } else {
        match partner::gate(record.partner.status, record.mode) {
            Err(refusal) if !layer.defer_gating => {
                ApiError::from(ordering::Refusal::Gated(refusal)).into_response()
            }
            gate => {
                let mode = record.mode;
                request
                    .extensions_mut()
                    .insert(Caller { record, mode, gate });
                next.run(request).await
            }
        }
    };
    with_rate_headers(response, &counted)
}

fn resolve_source(app: &AppState, peer: SocketAddr, headers: &HeaderMap) -> Source {
    let forwarded: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .map(|v| v.to_str().unwrap_or("\u{0}"))
        .collect();
    net::resolve_source(peer, &forwarded, &app.trusted_proxies)
}

enum Identify {
    /// A credential failure: counts against the source's budget.
    Refused(ApiError),
    /// Our fault (the database): does not count.
    Fault(ApiError),
}

/// The key the request presents, or why it is refused.
async fn identify(app: &AppState, headers: &HeaderMap) -> Result<Arc<KeyRecord>, Identify> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Err(Identify::Refused(ApiError::new(ErrorCode::AuthMissing)));
    };
    let invalid = || Identify::Refused(ApiError::new(ErrorCode::AuthInvalidKey));
    let presented = bearer_secret(value).ok_or_else(invalid)?;
    let claimed_mode = api_key::parse_form(presented).ok_or_else(invalid)?;
    let record = app
        .keys
        .lookup(&api_key::digest(presented))
        .await
        .map_err(|err| Identify::Fault(ApiError::from(err)))?
        .ok_or_else(invalid)?;
    if record.key.revoked_at.is_some() || record.mode != claimed_mode {
        return Err(invalid());
    }
    if record.key.expires_at.is_some_and(|at| at <= time::now()) {
        return Err(Identify::Refused(ApiError::new(ErrorCode::AuthKeyExpired)));
    }
    Ok(record)
}

/// The secret of an `Authorization: Bearer <secret>` value, trimmed; `None`
/// for a value that is not visible ASCII or names another scheme. Whether the
/// secret has a key's form is `api_key::parse_form`'s question.
pub fn bearer_secret(value: &HeaderValue) -> Option<&str> {
    value
        .to_str()
        .ok()
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim)
}

/// The band of a key: `sandbox` for sandbox keys, else the tier's.
pub fn band_for<'a>(app: &'a AppState, record: &KeyRecord) -> &'a Band {
    let name = match record.mode {
        Mode::Sandbox => SANDBOX_BAND,
        Mode::Live => app
            .tiers
            .get(&record.partner.tier)
            .map_or(SANDBOX_BAND, |tier| tier.rate_band.as_str()),
    };
    app.bands.get(name).unwrap_or(&app.fallback_band)
}

fn window_exceeded(class: RateClass, counted: &WindowState) -> ApiError {
    let retry_after = counted.retry_after_seconds(unix_now_millis());
    ApiError::new(ErrorCode::RateLimitExceeded)
        .with_message(format!(
            "Too many {} requests for this key; retry after {retry_after} s.",
            class.as_str()
        ))
        .with_extra("rate_class", class.as_str())
        .with_extra("retry_after_seconds", retry_after)
        .with_header(header::RETRY_AFTER, HeaderValue::from(retry_after))
}

fn with_rate_headers(mut response: Response, counted: &WindowState) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        HeaderName::from_static("x-ratelimit-limit"),
        HeaderValue::from(counted.limit),
    );
    headers.insert(
        HeaderName::from_static("x-ratelimit-remaining"),
        HeaderValue::from(counted.remaining),
    );
    headers.insert(
        HeaderName::from_static("x-ratelimit-reset"),
        HeaderValue::from(counted.reset_unix),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(raw: &[u8]) -> Option<String> {
        bearer_secret(&HeaderValue::from_bytes(raw).unwrap()).map(str::to_owned)
    }

    #[test]
    fn the_bearer_secret_is_split_from_its_scheme() {
        let key = "svc_sk_live_0123456789abcdefghijABCDEFGHIJ0123456789abc";
        assert_eq!(
            secret(format!("Bearer {key}").as_bytes()).as_deref(),
            Some(key)
        );
        assert_eq!(
            secret(format!("bearer {key}").as_bytes()).as_deref(),
            Some(key)
        );
        assert_eq!(
            secret(format!("Bearer   {key}  ").as_bytes()).as_deref(),
            Some(key)
        );
        assert_eq!(api_key::parse_form(key), Some(Mode::Live));
        assert_eq!(secret(b"Bearer ").as_deref(), Some(""));
        assert_eq!(secret(format!("BEARER {key}").as_bytes()), None);
        assert_eq!(secret(format!("Basic {key}").as_bytes()), None);
        assert_eq!(secret(key.as_bytes()), None);
        assert_eq!(secret(b"Bearer \xff\xfe"), None);
        assert_eq!(secret(b""), None);
    }
}
