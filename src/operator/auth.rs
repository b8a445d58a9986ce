//! Who is calling the operator API, and whether their role allows the route.
//!
//! A bearer token is either the configured bootstrap token (an admin named
//! `bootstrap`, for a fresh install to create the first operators) or a
//! named operator's, looked up by its SHA-256 on every request, so a
//! revocation holds on every node from the next request on. The role a
//! route asks for comes from `domain::operators::required_role`; a call
//! outside it is a 403 `forbidden` naming the missing role, and is written
//! to the audit trail. The request runs inside a span naming the operator,
//! so every log line of it says who.

use axum::{
    extract::{MatchedPath, OriginalUri, Request, State},
    http::header,
    middleware::Next,
    response::Response,
};
use secrecy::ExposeSecret;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tracing::Instrument;

use crate::{
    domain::{
        api_key::digest,
        operators::{Caller, Role, is_token_form, required_role},
        time,
    },
    http::{
        envelope::RequestId,
        error::{ApiError, ErrorCode},
    },
    state::AppState,
    store,
};

/// The prefix below which operator routes are named in the role table.
const API_PREFIX: &str = "/operator/v1";

/// Resolves the caller, checks the route's role, and serves the request in
/// a span naming the operator.
pub(crate) async fn authorize(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let request_id = request.extensions().get::<RequestId>().map(|r| r.0.clone());
    let presented = bearer(&request)?;
    let caller = resolve(&state, &presented, request_id)
        .await?
        .ok_or_else(invalid_token)?;
    let method = request.method().as_str().to_owned();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("", |p| p.as_str());
    let route = route.strip_prefix(API_PREFIX).unwrap_or(route).to_owned();
    let needed = required_role(&method, &route);
    // The request's own span names the operator, so its access line does too.
    let request_span = tracing::Span::current();
    request_span.record("operator", caller.name.as_str());
    request_span.record("operator_id", caller.id.as_str());
    let span = tracing::info_span!(
        "operator",
        operator_id = %caller.id,
        operator = %caller.name,
        role = caller.role.as_str(),
    );
    if !caller.may(needed) {
        // Nested routers see the path below their prefix; the trail names the whole one.
        let path = request
            .extensions()
            .get::<OriginalUri>()
            .map_or(request.uri().path(), |uri| uri.path())
            .chars()
            .take(100)
            .collect::<String>();
        return Err(refuse(&state, &caller, needed, &format!("{method} {path}"))
            .instrument(span)
            .await);
    }
    request.extensions_mut().insert(caller);
    Ok(next.run(request).instrument(span).await)
}

/// The bearer token of `request`, or the 401 for its absence.
fn bearer(request: &Request) -> Result<String, ApiError> {
    let header = request
        .headers()
        .get(header::AUTHORIZATION)
        .ok_or_else(|| ApiError::new(ErrorCode::AuthMissing))?;
    Ok(header
        .to_str()
        .ok()
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default()
        .to_owned())
}

fn invalid_token() -> ApiError {
    ApiError::new(ErrorCode::AuthInvalidKey).with_message("The operator token is not valid.")
}

/// The operator `presented` belongs to: the bootstrap admin, a named
/// operator not revoked, or nobody.
pub(crate) async fn resolve(
    state: &AppState,
    presented: &str,
    request_id: Option<String>,
) -> Result<Option<Caller>, ApiError> {
    if is_bootstrap_token(state, presented) {
        return Ok(Some(Caller::bootstrap(request_id)));
    }
    if !is_token_form(presented) {
        return Ok(None);
    }
    let found = store::operators::find_by_hash(&state.db, &digest(presented)).await?;
    Ok(found
        .filter(|row| row.revoked_at.is_none())
        .map(|row| Caller {
            id: row.id,
            name: row.name,
            role: row.role,
            request_id,
        }))
}

/// Whether `presented` is the configured bootstrap token. Digests are
/// compared so that neither its length nor a prefix leaks through timing.
pub(crate) fn is_bootstrap_token(state: &AppState, presented: &str) -> bool {
    let expected = Sha256::digest(state.operator_token.expose_secret().as_bytes());
    let given = Sha256::digest(presented.as_bytes());
    bool::from(expected.ct_eq(&given))
}

/// Records the refusal of `what` (a route, or a step such as approving
/// one's own movement) and returns the 403 to answer.
pub(crate) async fn refuse(
    state: &AppState,
    caller: &Caller,
    needed: Role,
    what: &str,
) -> ApiError {
    let why = format!("needs the {} role", needed.as_str());
    tracing::warn!(needed = needed.as_str(), what, "operator refused: role");
    record_refusal(state, caller, Rule::Role, what, &why).await;
    forbidden_role(caller, needed)
}

/// The 403 for a caller whose role is below `needed`.
pub(crate) fn forbidden_role(caller: &Caller, needed: Role) -> ApiError {
    ApiError::new(ErrorCode::Forbidden)
        .with_message(format!(
            "This needs the {} role; {} is a {}.",
            needed.as_str(),
            caller.name,
            caller.role.as_str()
        ))
        .with_extra("required_role", needed.as_str())
        .with_extra("role", caller.role.as_str())
}

/// Which rule refused an operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rule {
    /// The caller's role is below what the route or step needs.
    Role,
    /// The caller asked for the movement it tried to approve.
    FourEyes,
}

impl Rule {
    /// The audit action a refusal under this rule is recorded as.
    fn action(self) -> &'static str {
        match self {
            Rule::Role => "role.refuse",
            Rule::FourEyes => "four_eyes.refuse",
        }
    }
}

/// Appends a refused attempt to the trail. A refusal is answered even if
/// the row cannot be written (it is logged then), since nothing changed.
pub(crate) async fn record_refusal(
    state: &AppState,
    caller: &Caller,
    rule: Rule,
    what: &str,
    why: &str,
) {
    let action = rule.action();
    let entry = caller
        .audit(action, "route", what, time::now())
        .refused(why);
    if let Err(err) = store::audit::append(&state.db, &entry).await {
        tracing::error!(error = %err, what, "a refusal could not be written to the audit trail");
    }
}
