//! Signing in to the console: an operator's own token (or the bootstrap
//! token), posted once, becomes a session cookie
//! `<expiry>.<operator id>.<hmac>`, signed with HMAC-SHA256 keyed by the
//! bootstrap token over the expiry, the operator and the SHA-256 of the
//! token that signed in. Any node with the same configuration accepts it
//! and nothing is stored; each page looks the operator up again, so a
//! revoked operator is signed out at once and a rotated token ends the
//! sessions it opened. Forms carry a CSRF token derived from the session
//! the same way.

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
use crate::{
    domain::{
        api_key::digest,
        operators::{BOOTSTRAP_ID, Caller},
        time,
    },
    http::envelope::RequestId,
    operator::auth::resolve,
    state::AppState,
    store,
};

/// The session cookie's name.
const COOKIE: &str = "esim_console";
/// How long a sign-in lasts.
const SESSION_SECONDS: i64 = 12 * 60 * 60;

/// A signed-in operator; extracting it sends anyone else to the sign-in page.
pub(super) struct Operator {
    /// The CSRF token every form of this session carries.
    pub csrf: String,
    /// Who signed in, with the request's id for the audit trail.
    pub caller: Caller,
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
        let signed_out = || Redirect::to("/console/login").into_response();
        let now = Utc::now().timestamp();
        let session = cookie(&parts.headers, COOKIE).ok_or_else(signed_out)?;
        let (expires, operator_id, signature) = split_session(session).ok_or_else(signed_out)?;
        if expires <= now || expires > now + SESSION_SECONDS {
            return Err(signed_out());
        }
        let request_id = parts.extensions.get::<RequestId>().map(|r| r.0.clone());
        let (mut caller, token_hash) =
            signed_in(state, operator_id).await.ok_or_else(signed_out)?;
        let message = session_message(expires, &caller.id, &token_hash);
        if mac(state, &message).is_none_or(|mac| mac.verify_slice(&signature).is_err()) {
            return Err(signed_out());
        }
        caller.request_id = request_id;
        let csrf = sign(state, &format!("csrf:{session}")).ok_or_else(signed_out)?;
        Ok(Operator { csrf, caller })
    }
}

/// The operator `id` names and the hash of its current token, if it may
/// still sign in (not revoked). A database failure signs nobody in.
async fn signed_in(state: &AppState, id: &str) -> Option<(Caller, String)> {
    if id == BOOTSTRAP_ID {
        let hash = digest(state.operator_token.expose_secret());
        return Some((Caller::bootstrap(None), hash));
    }
    let row = store::operators::find(&state.db, id).await.ok()??;
    if row.revoked_at.is_some() {
        return None;
    }
    let caller = Caller {
        id: row.id,
        name: row.name,
        role: row.role,
        request_id: None,
    };
    Some((caller, row.token_hash))
}

/// `<expiry>.<operator id>.<hex signature>`, parsed.
fn split_session(session: &str) -> Option<(i64, &str, Vec<u8>)> {
    let mut parts = session.splitn(3, '.');
    let expires = parts.next()?.parse::<i64>().ok()?;
    let operator_id = parts.next()?;
    let signature = hex::decode(parts.next()?).ok()?;
    Some((expires, operator_id, signature))
}

/// What a session's signature covers.
fn session_message(expires: i64, operator_id: &str, token_hash: &str) -> String {
    format!("session:{expires}:{operator_id}:{token_hash}")
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
    let token = form.token.trim();
    let Ok(Some(caller)) = resolve(&state, token, None).await else {
        state.limiter.hit(&bucket, state.failed_auth).await;
        tracing::warn!(peer = %peer.ip(), "console sign-in refused");
        let message = "That is not an operator token.";
        return views::page(StatusCode::UNAUTHORIZED, views::login(Some(message)));
    };
    tracing::info!(peer = %peer.ip(), operator = %caller.name, role = caller.role.as_str(), "console sign-in");
    let entry = caller.audit("console.sign_in", "operator", &caller.id, time::now());
    if let Err(err) = store::audit::append(&state.db, &entry).await {
        tracing::error!(error = %err, "a console sign-in could not be written to the audit trail");
    }
    let expires = Utc::now().timestamp() + SESSION_SECONDS;
    let message = session_message(expires, &caller.id, &digest(token));
    let Some(signature) = sign(&state, &message) else {
        return views::page(
            StatusCode::INTERNAL_SERVER_ERROR,
            views::login(Some("The session could not be signed.")),
        );
    };
    let session = format!("{expires}.{}.{signature}", caller.id);
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

/// HMAC-SHA256 of `message` keyed by the bootstrap token, in hex.
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
