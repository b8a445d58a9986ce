//! HTTP to Airalo: the cached access token, the rate gate, and the
//! classification of answers (401 refreshes the token once, 429 slows
//! every call down).

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use reqwest::{
    StatusCode,
    header::{ACCEPT, CONTENT_TYPE, HeaderMap},
};
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Value, json};

use super::{errors, parse, webhook};
use crate::{
    domain::pace::Pass,
    supplier::{SupplierError, gate::RateGate},
};

/// Longest a token is used: the documentation gives a token "valid for 24
/// hours" and recommends refreshing within that even though `expires_in`
/// says a year.
const MAX_TOKEN_LIFETIME: Duration = Duration::from_secs(24 * 60 * 60);
/// How long before its end a token is replaced (at most a tenth of its
/// lifetime).
const REFRESH_MARGIN: Duration = Duration::from_secs(5 * 60);
/// Pause of every call after a 429 that names no wait.
const DEFAULT_SLOW_DOWN: Duration = Duration::from_secs(1);
/// Longest pause a 429 imposes on every call.
const MAX_SLOW_DOWN: Duration = Duration::from_secs(60);

/// One call to make.
pub(crate) struct Call {
    /// Path under the `/v2` root, e.g. `/orders/9666`; also names the call
    /// in errors.
    pub(crate) path: String,
    /// Query parameters.
    pub(crate) query: Vec<(&'static str, String)>,
    /// JSON body of a POST; `None` for a GET.
    pub(crate) body: Option<Value>,
}

impl Call {
    /// A GET of `path` with `query`.
    pub(crate) fn get(path: impl Into<String>, query: Vec<(&'static str, String)>) -> Self {
        Self {
            path: path.into(),
            query,
            body: None,
        }
    }

    /// A POST of `body` (JSON, as the official SDKs send it) to `path`.
    pub(crate) fn post(path: impl Into<String>, body: Value) -> Self {
        Self {
            path: path.into(),
            query: Vec::new(),
            body: Some(body),
        }
    }

    /// Usage and package history are limited per ICCID: a 429 there says
    /// nothing about the account's other calls.
    fn per_iccid(&self) -> bool {
        self.path.starts_with("/sims/")
    }
}

/// An access token in use.
struct Token {
    /// The bearer token.
    value: SecretString,
    /// When to fetch a new one.
    refresh_at: Instant,
    /// Which fetch this is, so that a 401 forgets only the token it got.
    generation: u64,
}

/// What one send got back.
enum Sent {
    /// A 2xx JSON answer.
    Answer(Value),
    /// HTTP 401, with its body.
    Unauthorized(String),
}

/// The HTTP side of the client.
pub(crate) struct Transport {
    /// The `/v2` root, without a trailing slash.
    base_url: String,
    /// API client id.
    client_id: SecretString,
    /// API client secret (also the key of `airalo-signature`).
    client_secret: SecretString,
    /// One client: connections are kept and reused.
    http: reqwest::Client,
    /// The rate gate every live call passes.
    gate: Arc<RateGate>,
    /// The token shared by every call; held while a new one is fetched, so
    /// concurrent calls fetch it once.
    token: tokio::sync::Mutex<Option<Token>>,
    /// Token fetches so far.
    generation: AtomicU64,
}

impl Transport {
    pub(crate) fn new(
        base_url: &str,
        client_id: SecretString,
        client_secret: SecretString,
        timeout: Duration,
        gate: Arc<RateGate>,
    ) -> anyhow::Result<Self> {
        Ok(Self {
            base_url: base_url.trim_end_matches('/').to_owned(),
            client_id,
            client_secret,
            http: crate::supplier::http_client(timeout)?,
            gate,
            token: tokio::sync::Mutex::new(None),
            generation: AtomicU64::new(0),
        })
    }

    /// Makes `call` with the cached token; on a 401 fetches a new token
    /// once and asks once more.
    pub(crate) async fn call(&self, call: &Call) -> Result<Value, SupplierError> {
        let (token, generation) = self.token().await?;
        match self.send(call, &token).await? {
            Sent::Answer(answer) => Ok(answer),
            Sent::Unauthorized(_) => {
                self.forget(generation).await;
                let (token, _) = self.token().await?;
                match self.send(call, &token).await? {
                    Sent::Answer(answer) => Ok(answer),
                    Sent::Unauthorized(body) => Err(errors::from_answer(
                        &call.path,
                        StatusCode::UNAUTHORIZED,
                        &body,
                    )),
                }
            }
        }
    }

    /// The token in use, fetched when there is none or it is due.
    async fn token(&self) -> Result<(SecretString, u64), SupplierError> {
        let mut slot = self.token.lock().await;
        if let Some(token) = slot.as_ref()
            && Instant::now() < token.refresh_at
        {
            return Ok((token.value.clone(), token.generation));
        }
        let (value, expires_in) = self.fetch_token().await?;
        let lifetime = expires_in.min(MAX_TOKEN_LIFETIME);
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        let value = SecretString::from(value);
        *slot = Some(Token {
            value: value.clone(),
            refresh_at: Instant::now() + lifetime - (lifetime / 10).min(REFRESH_MARGIN),
            generation,
        });
        Ok((value, generation))
    }

    /// Drops the token of fetch `generation` if it is still the one in use.
    async fn forget(&self, generation: u64) {
        let mut slot = self.token.lock().await;
        if slot.as_ref().is_some_and(|t| t.generation == generation) {
            *slot = None;
        }
    }

    /// `POST /token` with the client credentials as form fields.
    async fn fetch_token(&self) -> Result<(String, Duration), SupplierError> {
        let id = self.client_id.expose_secret();
        let secret = self.client_secret.expose_secret();
        let payload =
            json!({ "client_id": id, "client_secret": secret, "grant_type": "client_credentials" });
        let form = form_urlencoded::Serializer::new(String::new())
            .append_pair("client_id", id)
            .append_pair("client_secret", secret)
            .append_pair("grant_type", "client_credentials")
            .finish();
        self.gate.admit().await;
        let request = self
            .http
            .post(format!("{}/token", self.base_url))
            .header(ACCEPT, "application/json")
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(
                webhook::SIGNATURE_HEADER,
                webhook::sign(secret, webhook::canonical_json(&payload).as_bytes()),
            )
            .body(form);
        let (status, headers, text) = exchange("/token", request).await?;
        if status == StatusCode::TOO_MANY_REQUESTS {
            // The token endpoint has a limit of its own (3 a minute): no
            // call can go without a token, so every call waits, but the
            // pace of the others says nothing about it.
            let wait = retry_after(&headers);
            self.gate.hold(wait.min(MAX_SLOW_DOWN));
            return Err(SupplierError::SlowDown(format!(
                "/token: HTTP 429 too many requests (retry after {}s)",
                wait.as_secs()
            )));
        }
        if !status.is_success() {
            return Err(errors::from_answer("/token", status, &text));
        }
        let answer: Value = serde_json::from_str(&text)
            .map_err(|_| SupplierError::Transient("/token: not JSON".into()))?;
        parse::read_token(&answer)
    }

    /// Sends `call` once with `token`.
    async fn send(&self, call: &Call, token: &SecretString) -> Result<Sent, SupplierError> {
        let url = format!("{}{}", self.base_url, call.path);
        let request = match &call.body {
            None => self.http.get(url).query(&call.query),
            Some(body) => {
                let text = webhook::canonical_json(body);
                let signature = webhook::sign(self.client_secret.expose_secret(), text.as_bytes());
                self.http
                    .post(url)
                    .header(CONTENT_TYPE, "application/json")
                    .header(webhook::SIGNATURE_HEADER, signature)
                    .body(text)
            }
        }
        .header(ACCEPT, "application/json")
        .bearer_auth(token.expose_secret());
        let pass = self.gate.admit().await;
        let (status, headers, text) = exchange(&call.path, request).await?;
        match status {
            StatusCode::UNAUTHORIZED => Ok(Sent::Unauthorized(text)),
            StatusCode::TOO_MANY_REQUESTS => {
                let limits_every_call = !call.per_iccid();
                Err(self.too_many(&call.path, &headers, limits_every_call.then_some(pass)))
            }
            status if !status.is_success() => Err(errors::from_answer(&call.path, status, &text)),
            _ => serde_json::from_str(&text)
                .map(Sent::Answer)
                .map_err(|_| SupplierError::Transient(format!("{}: not JSON", call.path))),
        }
    }

    /// A 429: the call may succeed later. When the limit is the account's
    /// (`pass` given; not a per-ICCID limit), every call of the node pauses
    /// for the wait the answer names and the gate learns a lower pace.
    fn too_many(&self, path: &str, headers: &HeaderMap, pass: Option<Pass>) -> SupplierError {
        let wait = retry_after(headers);
        if let Some(pass) = pass {
            self.gate.slow_down(pass, wait.min(MAX_SLOW_DOWN));
        }
        SupplierError::SlowDown(format!(
            "{path}: HTTP 429 too many requests (retry after {}s)",
            wait.as_secs()
        ))
    }
}

/// Sends `request`; the status, headers and body text, or a transient error
/// for a time-out or a broken connection.
async fn exchange(
    path: &str,
    request: reqwest::RequestBuilder,
) -> Result<(StatusCode, HeaderMap, String), SupplierError> {
    let response = request
        .send()
        .await
        .map_err(|e| SupplierError::Transient(format!("{path}: {}", e.without_url())))?;
    let status = response.status();
    let headers = response.headers().clone();
    let text = response
        .text()
        .await
        .map_err(|e| SupplierError::Transient(format!("{path}: reading: {}", e.without_url())))?;
    Ok((status, headers, text))
}

/// The wait a 429 names: `Retry-After` (seconds), else `X-RateLimit-Reset`
/// (a Unix time), else a second.
pub(crate) fn retry_after(headers: &HeaderMap) -> Duration {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    if let Some(seconds) = header("retry-after") {
        return Duration::from_secs(seconds.max(1));
    }
    if let Some(reset) = header("x-ratelimit-reset") {
        let now = crate::limits::unix_now_seconds();
        return Duration::from_secs(reset.saturating_sub(now).max(1));
    }
    DEFAULT_SLOW_DOWN
}
