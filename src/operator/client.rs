//! A small HTTP client of the operator API, used by `admin` and `loadtest`.

use anyhow::Context;
use reqwest::{Method, StatusCode};
use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;

/// Talks to `/operator/v1` of a running `serve`.
pub(crate) struct OperatorClient {
    /// e.g. `http://127.0.0.1:8081`, no trailing slash.
    base_url: String,
    /// The operator bearer token.
    token: SecretString,
    http: reqwest::Client,
}

impl OperatorClient {
    pub(crate) fn new(base_url: &str, token: SecretString) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(30))
            .build()
            .context("building the HTTP client")?;
        Ok(Self {
            base_url: base_url.trim_end_matches('/').to_owned(),
            token,
            http,
        })
    }

    /// Sends one request to `/operator/v1{path}` and returns the status and JSON body.
    pub(crate) async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<(StatusCode, Value)> {
        let url = format!("{}/operator/v1{path}", self.base_url);
        let mut request = self
            .http
            .request(method, &url)
            .bearer_auth(self.token.expose_secret());
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request
            .send()
            .await
            .with_context(|| format!("calling {url}"))?;
        let status = response.status();
        let text = response.text().await.context("reading the answer")?;
        let json = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        Ok((status, json))
    }
}
