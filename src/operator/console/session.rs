//! Signing in to the console: the operator token, posted once, becomes a
//! session cookie `<expiry>.<hmac>`: its own expiry signed with HMAC-SHA256
//! keyed by the token. Any node with the same token accepts it, nothing is
//! stored, and changing the token signs every console out. Forms carry a
//! CSRF token derived from the session the same way.

use std::net::SocketAddr;

use axum::{
    extract::{ConnectInfo, FromRequestParts, State},
    http::{HeaderMap, StatusCode, header, request::Parts},
    response::{IntoResponse, Redirect, Response},
};
use chrono::Utc;
use hmac::{Hmac, Mac};
use secrecy::ExposeSecret;
use serde::Deserialize;
use sha2::Sha256;
use subtle::ConstantTimeEq;

use super::{FormResult, views};
use crate::{operator::is_operator_token, state::AppState};

/// The session cookie's name.
const COOKIE: &str = "esim_console";
/// How long a sign-in lasts.
const SESSION_SECONDS: i64 = 12 * 60 * 60;

/// A signed-in operator; extracting it sends anyone else to the sign-in page.
pub(super) struct Operator {
    /// The CSRF token every form of this session carries.
    pub csrf: String,
}

impl Operator {
    /// Whether a submitted form carries this session's CSRF token.
    pub(super) fn sent(&self, csrf: &str) -> bool {
        bool::from(self.csrf.as_bytes().ct_eq(csrf.as_bytes()))
    }
}

impl FromRequestParts<AppState> for Operator {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        let now = Utc::now().timestamp();
        cookie(&parts.headers, COOKIE)
            .filter(|session| session_is_valid(state, session, now))
            .and_then(|session| sign(state, &format!("csrf:{session}")))
            .map(|csrf| Operator { csrf })
            .ok_or_else(|| Redirect::to("/console/login").into_response())
    }
}

/// The form of `POST /console/login`.
#[derive(Debug, Deserialize)]
pub(super) struct SignIn {
    token: String,
}

/// The form of `POST /console/logout`.
#[derive(Debug, Deserialize)]
pub(super) struct SignOut {
    csrf: String,
}

/// `GET /console/login`.
pub(super) async fn login_page() -> Response {
    views::page(StatusCode::OK, views::login(None))
}

/// `POST /console/login`: a session for the operator token, a 401 page for
/// anything else. Failed attempts count against the source address's
/// failed-authentication budget, as partner keys do.
pub(super) async fn login(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    form: FormResult<SignIn>,
) -> Response {
    let bucket = format!("console:{}", peer.ip());
    if state.limiter.used(&bucket, state.failed_auth).await >= u64::from(state.failed_auth.limit) {
        let message = "Too many failed sign-ins from this address; wait and try again.";
        return views::page(StatusCode::TOO_MANY_REQUESTS, views::login(Some(message)));
    }
    let Ok(axum::Form(form)) = form else {
        let message = "The form was not understood; enter the operator token.";
        return views::page(StatusCode::BAD_REQUEST, views::login(Some(message)));
    };
    if !is_operator_token(&state, &form.token) {
        state.limiter.hit(&bucket, state.failed_auth).await;
        tracing::warn!(peer = %peer.ip(), "console sign-in refused");
        let message = "That is not the operator token.";
        return views::page(StatusCode::UNAUTHORIZED, views::login(Some(message)));
    }
    tracing::info!(peer = %peer.ip(), "console sign-in");
    let expires = Utc::now().timestamp() + SESSION_SECONDS;
    let Some(signature) = sign(&state, &format!("session:{expires}")) else {
        return views::page(
            StatusCode::INTERNAL_SERVER_ERROR,
            views::login(Some("The session could not be signed.")),
        );
    };
    let session = format!("{expires}.{signature}");
    let secure = if state.console_secure_cookie {
        "; Secure"
    } else {
        ""
    };
    let cookie = format!(
        "{COOKIE}={session}; Path=/console; Max-Age={SESSION_SECONDS}; HttpOnly; SameSite=Strict{secure}"
    );
    ([(header::SET_COOKIE, cookie)], Redirect::to("/console")).into_response()
}

/// `POST /console/logout`: forgets the cookie.
pub(super) async fn logout(operator: Operator, form: FormResult<SignOut>) -> Response {
    if !form.is_ok_and(|axum::Form(form)| operator.sent(&form.csrf)) {
        return views::page(StatusCode::FORBIDDEN, views::stale_form());
    }
    let cookie = format!("{COOKIE}=; Path=/console; Max-Age=0; HttpOnly; SameSite=Strict");
    (
        [(header::SET_COOKIE, cookie)],
        Redirect::to("/console/login"),
    )
        .into_response()
}

/// The value of cookie `name`, if the request carries it.
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
}

/// Whether `session` is one this token signed and it has not expired.
fn session_is_valid(state: &AppState, session: &str, now: i64) -> bool {
    let Some((expires, signature)) = session.split_once('.') else {
        return false;
    };
    let (Ok(expires), Ok(signature)) = (expires.parse::<i64>(), hex::decode(signature)) else {
        return false;
    };
    if expires <= now || expires > now + SESSION_SECONDS {
        return false;
    }
    mac(state, &format!("session:{expires}"))
        .is_some_and(|mac| mac.verify_slice(&signature).is_ok())
}

/// HMAC-SHA256 of `message` keyed by the operator token, in hex.
fn sign(state: &AppState, message: &str) -> Option<String> {
    mac(state, message).map(|mac| hex::encode(mac.finalize().into_bytes()))
}

/// The MAC of `message`; `None` only if the key were refused, which HMAC
/// never does (it takes keys of any length), so nothing signs or verifies then.
fn mac(state: &AppState, message: &str) -> Option<Hmac<Sha256>> {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(state.operator_token.expose_secret().as_bytes()).ok()?;
    mac.update(message.as_bytes());
    Some(mac)
}
