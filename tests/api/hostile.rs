//! Hostile input on every route: odd path segments, query values, body
//! fields, bodies and headers never get a 5xx. Every refusal of the partner
//! API carries the spec's envelope with its request id, a code of the spec's
//! vocabulary, and a status the OpenAPI document lists for its operation (a
//! generated client meets no undocumented answer); the operator API answers
//! in the same envelope. Whatever orders the sweep got accepted are debited
//! exactly once.

use esim_reseller::http::error::ErrorCode;
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{
    OPERATOR_TOKEN, TestApp, balance, fund, get, live_partner, sandbox_key, spawn_app_with,
};

/// Strings put in path segments and query values.
const ODD_TEXT: &[&str] = &[
    "",
    " ",
    "\u{0}",
    "ü",
    "😀",
    "../../etc/passwd",
    "'; DROP TABLE orders;--",
    "%00",
    "null",
    "-1",
    "0",
    "99999999999999999999999",
    "1e308",
    "NaN",
    "2026-13-45T99:00:00Z",
    "<script>",
];

/// JSON values put in every body field.
fn odd_values() -> Vec<Value> {
    vec![
        Value::Null,
        json!(true),
        json!(0),
        json!(-1),
        json!(1.5),
        json!(i64::MAX),
        json!(i64::MIN),
        json!(u64::MAX),
        json!(1e300),
        json!(""),
        json!("x".repeat(5000)),
        json!("ü😀"),
        json!([]),
        json!({}),
        json!([1, 2]),
        json!({ "a": { "b": [1] } }),
        json!("0"),
    ]
}

/// Bodies that are not the object a route takes.
fn odd_bodies() -> Vec<Vec<u8>> {
    let deep = format!("{{\"a\":{}{}}}", "[".repeat(300), "]".repeat(300));
    vec![
        b"".to_vec(),
        b"[]".to_vec(),
        b"null".to_vec(),
        b"1".to_vec(),
        b"\"x\"".to_vec(),
        b"{".to_vec(),
        b"\xff\xfe".to_vec(),
        deep.into_bytes(),
        b"{\"quantity\":1,\"quantity\":2}".to_vec(),
        b"{} trailing".to_vec(),
    ]
}

/// What the sweep has seen.
#[derive(Default)]
struct Sweep {
    /// Requests sent.
    requests: usize,
    /// The prices of the live orders it got accepted.
    accepted_live_cents: i64,
}

impl Sweep {
    /// Sends `request` and checks its answer; `documented` is the partner
    /// operation's list of statuses (none for the operator API).
    async fn check(&mut self, what: &str, request: RequestBuilder, documented: Option<&Value>) {
        let response = request.send().await.unwrap();
        self.requests += 1;
        let status = response.status();
        let (request_id, body) = answer(response).await;
        assert!(status.as_u16() < 500, "{what}: answered {status}: {body}");
        let request_id = request_id.unwrap_or_else(|| panic!("{what}: no X-Request-Id"));
        if let Some(documented) = documented {
            assert!(
                documented.get(status.as_str()).is_some(),
                "{what}: {status} is not documented for the operation: {body}"
            );
        }
        if status.is_client_error() {
            let error = &body["error"];
            assert_eq!(error["request_id"], request_id.as_str(), "{what}: {body}");
            if documented.is_some() {
                let code = error["code"].as_str().unwrap_or_default();
                assert!(
                    ErrorCode::ALL.iter().any(|known| known.as_str() == code),
                    "{what}: code {code:?} is outside the spec's vocabulary: {body}"
                );
            }
        }
        if status == StatusCode::ACCEPTED && body["mode"] == "live" {
            self.accepted_live_cents += body["total_cents"].as_i64().unwrap();
        }
    }
}

/// The answer's `X-Request-Id` and its JSON body (`Null` when it is not JSON).
async fn answer(response: Response) -> (Option<String>, Value) {
    let request_id = response
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let text = response.text().await.unwrap();
    (
        request_id,
        serde_json::from_str(&text).unwrap_or(Value::Null),
    )
}

/// Rate limits out of the way: the sweep is about answers, not windows.
const LIFTED: &[(&str, &str)] = &[
    ("rate_limit.bands.bronze.read.limit", "1000000"),
    ("rate_limit.bands.bronze.write.limit", "1000000"),
    ("rate_limit.bands.bronze.catalogue.limit", "1000000"),
    ("rate_limit.bands.bronze.supplier.limit", "1000000"),
    ("rate_limit.bands.sandbox.read.limit", "1000000"),
    ("rate_limit.bands.sandbox.write.limit", "1000000"),
    ("rate_limit.bands.sandbox.catalogue.limit", "1000000"),
    ("rate_limit.bands.sandbox.supplier.limit", "1000000"),
];

/// One partner operation as the sweep sends it: with one key, its path
/// with real ids, its documented answers, and Idempotency-Keys never reused.
struct Target<'a> {
    app: &'a TestApp,
    secret: &'a str,
    method: Method,
    template: &'a str,
    path: String,
    documented: &'a Value,
    keys: usize,
}

impl Target<'_> {
    /// A request to `path`, with a fresh Idempotency-Key on a `POST`.
    fn request(&mut self, path: &str) -> RequestBuilder {
        let request = self.app.as_partner(self.secret, self.method.clone(), path);
        if self.method != Method::POST {
            return request;
        }
        self.keys += 1;
        request.header(
            "Idempotency-Key",
            format!("hostile-sweep-{:016}", self.keys),
        )
    }

    /// Odd text in each path parameter.
    async fn path_segments(&mut self, sweep: &mut Sweep) {
        if !self.template.contains('{') {
            return;
        }
        for text in ODD_TEXT {
            let segment = urlencoding(text);
            let path = self
                .template
                .replace("{id}", &segment)
                .replace("{iccid}", &segment);
            let what = format!(
                "{} {} with {text:?} in the path",
                self.method, self.template
            );
            let request = self.request(&path);
            sweep.check(&what, request, Some(self.documented)).await;
        }
    }

    /// Odd values of each documented query parameter and of an unknown one,
    /// and each named twice.
    async fn query_values(&mut self, sweep: &mut Sweep, names: &[String]) {
        let path = self.path.clone();
        for name in names.iter().map(String::as_str).chain(["unknown"]) {
            for text in ODD_TEXT {
                let what = format!("{} {}?{name}={text:?}", self.method, self.template);
                let request = self.request(&path).query(&[(name, *text)]);
                sweep.check(&what, request, Some(self.documented)).await;
            }
            let what = format!("{} {} with {name} twice", self.method, self.template);
            let request = self.request(&path).query(&[(name, "1"), (name, "2")]);
            sweep.check(&what, request, Some(self.documented)).await;
        }
    }

    /// Odd values in each field of `base` and an unknown one, each field
    /// left out, and bodies that are not the object the route takes.
    async fn bodies(&mut self, sweep: &mut Sweep, base: &Value, fields: &[String]) {
        let path = self.path.clone();
        for field in fields.iter().map(String::as_str).chain(["extra"]) {
            for value in odd_values() {
                let mut body = base.clone();
                body[field] = value.clone();
                let what = format!("POST {} with {field} = {}", self.template, short(&value));
                let request = self.request(&path).json(&body);
                sweep.check(&what, request, Some(self.documented)).await;
            }
            let mut body = base.clone();
            body.as_object_mut().unwrap().remove(field);
            let what = format!("POST {} without {field}", self.template);
            let request = self.request(&path).json(&body);
            sweep.check(&what, request, Some(self.documented)).await;
        }
        let oversized = json!({ "plan_id": "x".repeat(70_000) })
            .to_string()
            .into_bytes();
        for raw in odd_bodies().into_iter().chain([oversized]) {
            let what = format!("POST {} with body {}", self.template, lossy(&raw));
            let request = self
                .request(&path)
                .header("Content-Type", "application/json")
                .body(raw);
            sweep.check(&what, request, Some(self.documented)).await;
        }
    }

    /// The right body under odd `Content-Type`s and Idempotency-Keys.
    async fn headers(&mut self, sweep: &mut Sweep, base: &Value) {
        let path = self.path.clone();
        for content_type in ["text/plain", "application/x-www-form-urlencoded", ""] {
            let what = format!("POST {} as {content_type:?}", self.template);
            let request = self
                .request(&path)
                .header("Content-Type", content_type)
                .body(base.to_string());
            sweep.check(&what, request, Some(self.documented)).await;
        }
        for key in ["", "short", &"k".repeat(256)] {
            let what = format!("POST {} with Idempotency-Key {key:.20?}", self.template);
            let request = self
                .app
                .as_partner(self.secret, Method::POST, &path)
                .header("Idempotency-Key", key)
                .json(base);
            sweep.check(&what, request, Some(self.documented)).await;
        }
    }
}

#[tokio::test]
async fn hostile_requests_to_every_partner_operation_get_a_documented_refusal_never_a_5xx() {
    let app = spawn_app_with(LIFTED).await;
    let funding = 10_000_000;
    let (partner_id, live) = live_partner(&app).await;
    let sandbox = sandbox_key(&app, &partner_id).await;
    fund(&app, &partner_id, funding).await;
    let (_, plans) = get(&app, &live, "/plans").await;
    let plan_id = plans["data"][0]["id"].as_str().unwrap().to_owned();
    let doc = esim_reseller::http::openapi::to_value();
    let mut sweep = Sweep::default();
    for (template, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let method = Method::from_bytes(method.to_ascii_uppercase().as_bytes()).unwrap();
            let base = match template.as_str() {
                "/orders" => json!({ "plan_id": plan_id, "quantity": 1 }),
                _ => json!({ "amount_cents": 10_000 }),
            };
            for secret in [&live, &sandbox] {
                let mut target = Target {
                    app: &app,
                    secret,
                    method: method.clone(),
                    template,
                    path: template
                        .replace("{id}", &plan_id)
                        .replace("{iccid}", "8944000000000000001"),
                    documented: &operation["responses"],
                    keys: 0,
                };
                target.path_segments(&mut sweep).await;
                target
                    .query_values(&mut sweep, &query_names(operation))
                    .await;
                if method == Method::POST {
                    target
                        .bodies(&mut sweep, &base, &body_fields(&doc, operation))
                        .await;
                    target.headers(&mut sweep, &base).await;
                }
            }
        }
    }
    assert!(
        sweep.requests > 1000,
        "only {} requests were sent",
        sweep.requests
    );
    // Nothing lost or doubled: the funding less every live order the sweep
    // got accepted.
    assert_eq!(
        balance(&app, &live).await,
        funding - sweep.accepted_live_cents
    );
}

/// The names of an operation's query parameters.
fn query_names(operation: &Value) -> Vec<String> {
    operation["parameters"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["in"] == "query")
        .filter_map(|p| p["name"].as_str().map(str::to_owned))
        .collect()
}

/// The properties of an operation's JSON request body.
fn body_fields(doc: &Value, operation: &Value) -> Vec<String> {
    let mut schema = &operation["requestBody"]["content"]["application/json"]["schema"];
    if let Some(name) = schema["$ref"].as_str().and_then(|r| r.rsplit('/').next()) {
        schema = &doc["components"]["schemas"][name];
    }
    schema["properties"]
        .as_object()
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default()
}

/// The first 40 characters of `value`, for a failure's message.
fn short(value: &Value) -> String {
    value.to_string().chars().take(40).collect()
}

/// The start of a raw body, for a failure's message.
fn lossy(raw: &[u8]) -> String {
    String::from_utf8_lossy(&raw[..raw.len().min(30)]).into_owned()
}

/// `text` as one path segment (percent-encoded; `form_urlencoded` writes a
/// space as `+`, which a path would keep as a plus).
fn urlencoding(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}

/// Every operator route that takes a body, with a body it accepts.
fn operator_bodies(partner_id: &str, key_id: &str) -> Vec<(Method, String, Value)> {
    let partners = format!("/partners/{partner_id}");
    vec![
        (
            Method::POST,
            "/operators".into(),
            json!({ "name": "x", "role": "viewer" }),
        ),
        (
            Method::POST,
            "/partners".into(),
            json!({ "name": "n", "tier": "gold", "status": "live", "discount_override_bps": 100, "low_balance_threshold_cents": 5 }),
        ),
        (
            Method::PATCH,
            partners.clone(),
            json!({ "status": "live", "tier": "gold", "discount_override_bps": null, "low_balance_threshold_cents": 5 }),
        ),
        (
            Method::POST,
            format!("{partners}/keys"),
            json!({ "mode": "live", "label": "l", "expires_at": "2030-01-01T00:00:00Z", "allowed_cidrs": ["10.0.0.0/8"] }),
        ),
        (
            Method::POST,
            format!("{partners}/movements"),
            json!({ "kind": "adjustment", "amount_cents": 5, "description": "d" }),
        ),
        (
            Method::POST,
            format!("{partners}/wire-deposits"),
            json!({ "amount_cents": 5, "reference": "r" }),
        ),
        (
            Method::PUT,
            format!("{partners}/sandbox-float"),
            json!({ "balance_cents": 5 }),
        ),
        (
            Method::PATCH,
            format!("/keys/{key_id}"),
            json!({ "allowed_cidrs": ["1.2.3.4"] }),
        ),
        (
            Method::POST,
            format!("/keys/{key_id}/rotate"),
            json!({ "grace_seconds": 5 }),
        ),
        (
            Method::POST,
            "/reviews/rv_x/resolve".into(),
            json!({ "resolution": "x" }),
        ),
        (
            Method::POST,
            "/approvals/ap_x/approve".into(),
            json!({ "note": "n" }),
        ),
        (
            Method::PATCH,
            "/plans/pl_x".into(),
            json!({ "active": true }),
        ),
        (
            Method::PATCH,
            "/destinations/FR".into(),
            json!({ "withdrawn": false }),
        ),
    ]
}

/// Odd values in each field of each operator body, and bodies that are not
/// the object the route takes.
async fn operator_body_sweep(app: &TestApp, sweep: &mut Sweep, partner_id: &str, key_id: &str) {
    for (method, path, base) in operator_bodies(partner_id, key_id) {
        let fields: Vec<String> = base.as_object().unwrap().keys().cloned().collect();
        for field in fields.iter().map(String::as_str).chain(["extra"]) {
            for value in odd_values() {
                let mut body = base.clone();
                body[field] = value.clone();
                let what = format!("{method} {path} with {field} = {}", short(&value));
                let request = app.operator(method.clone(), &path).json(&body);
                sweep.check(&what, request, None).await;
            }
        }
        for raw in odd_bodies() {
            let what = format!("{method} {path} with body {}", lossy(&raw));
            let request = app
                .operator(method.clone(), &path)
                .header("Content-Type", "application/json")
                .body(raw);
            sweep.check(&what, request, None).await;
        }
    }
}

/// Odd ids in the operator routes' paths and odd values of their query
/// parameters (and of an unknown one).
async fn operator_path_and_query_sweep(app: &TestApp, sweep: &mut Sweep) {
    for template in [
        "/partners/{}",
        "/orders/{}/supply",
        "/approvals/{}",
        "/keys/{}/revoke",
    ] {
        let method = if template.ends_with("revoke") {
            Method::POST
        } else {
            Method::GET
        };
        for text in ODD_TEXT {
            let path = template.replace("{}", &urlencoding(text));
            let what = format!("{method} {path}");
            sweep
                .check(&what, app.operator(method.clone(), &path), None)
                .await;
        }
    }
    for (path, names) in [
        ("/audit", &["limit", "cursor", "unknown"][..]),
        ("/reviews", &["status", "unknown"][..]),
        ("/approvals", &["status", "unknown"][..]),
        ("/margins", &["unknown"][..]),
    ] {
        for name in names {
            for text in ODD_TEXT {
                let what = format!("GET {path}?{name}={text:?}");
                let request = app.operator(Method::GET, path).query(&[(*name, *text)]);
                sweep.check(&what, request, None).await;
            }
        }
    }
    for token in ["", "x", OPERATOR_TOKEN.get(..10).unwrap_or_default()] {
        let request = app
            .client
            .get(format!("{}/operator/v1/me", app.operator))
            .bearer_auth(token);
        sweep
            .check(&format!("operator token {token:?}"), request, None)
            .await;
    }
}

#[tokio::test]
async fn hostile_requests_to_every_operator_route_get_an_envelope_never_a_5xx() {
    let app = spawn_app_with(&[]).await;
    let (partner, key) = app.partner_with_key(json!({}), "live").await;
    let partner_id = partner["id"].as_str().unwrap();
    let key_id = key["id"].as_str().unwrap();
    let mut sweep = Sweep::default();
    operator_body_sweep(&app, &mut sweep, partner_id, key_id).await;
    operator_path_and_query_sweep(&app, &mut sweep).await;
    assert!(
        sweep.requests > 1000,
        "only {} requests were sent",
        sweep.requests
    );
}
