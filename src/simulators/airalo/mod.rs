//! A simulated Airalo Partner API v2, a copy of the service as its
//! documentation (developers.partners.airalo.com) describes it; recorded
//! shapes and their sources: `tests/fixtures/airalo/README.md`.
//!
//! - `POST /v2/token` (Request access token): client credentials as form
//!   fields (or JSON, as the Node SDK sends them), `grant_type`
//!   `client_credentials`; a wrong client id is the documented 422, a wrong
//!   secret the documented 401 "Client authentication failed". Tokens last
//!   `expires_in` (the documented 31622400 s unless `token_ttl_secs` says
//!   otherwise) and every other call needs one (401 "This action is
//!   unauthorized." otherwise).
//! - `POST /v2/orders` (Submit order): `package_id`, `quantity` 1 to 50,
//!   `type` `sim`, `description`, as JSON or form fields, validated with
//!   the documented Laravel-style 422 `{data: {field: message}, meta}`;
//!   unknown packages are 422 code 34 and the sandbox test packages answer
//!   code 11 and 33 (Error handling). The answer carries the sims.
//! - `POST /v2/orders-async` (Submit order async, Webhook definition): 202
//!   `{request_id, accepted_at}`, then the order as the regular order
//!   answer plus `request_id`, POSTed to `webhook_url` (or the opted-in
//!   URL) with `airalo-signature` = hex HMAC-SHA512 of the body keyed with
//!   the client secret, delivered again on a non-2xx answer.
//! - `GET /v2/orders` (Get order list) with `filter[description]` (a
//!   `LIKE '%…%'` search), `filter[code]`, `filter[iccid]`, `include`,
//!   `limit`, `page`; `GET /v2/orders/{id}` (Get order).
//! - `GET /v2/sims/{iccid}/usage` (Get usage) and `GET /v2/packages` (Get
//!   packages, a small list).
//! - Rate limits (Rate limits): a per-account limit a minute (the sandbox
//!   documents 50 requests a minute per client id, production none; 0 lifts
//!   every limit),
//!   and while it is on, 3 token requests a minute and 10 usage requests a
//!   minute per ICCID. Past a limit: 429 `{"message": "Too Many Attempts."}`
//!   with `Retry-After` and `X-RateLimit-Limit/Remaining/Reset`.
//!
//! Faults are injected with `POST /sim/airalo/faults` ([`AiraloFaults`]);
//! `GET /sim/airalo/stats` counts what the simulator saw, including the
//! orders taken per description.

mod api;
mod lookup;
mod ordering;
mod orders;

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use axum::{
    Json, Router,
    extract::State,
    routing::{get, post},
};
use serde::Deserialize;
use serde_json::{Value, json};

use orders::SimOrder;

use crate::simulators::stock::IccidStock;
use crate::sync::lock;

/// The documented token lifetime (`expires_in`).
const TOKEN_TTL_SECS: u64 = 31_622_400;
/// How long a lost answer is held back unless `lose_ms` says.
const LOSE_MS: u64 = 30_000;

/// Faults and latency, replaced by `POST /sim/airalo/faults`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AiraloFaults {
    /// Time before an order answers, or before an async order's webhook.
    #[serde(default)]
    pub(crate) latency_ms: u64,
    /// The next N calls answer HTTP 503; nothing is taken.
    #[serde(default)]
    pub(crate) fail_next: u32,
    /// Share of calls answered HTTP 503.
    #[serde(default)]
    pub(crate) fail_rate: f64,
    /// The next N orders answer 422 with `reject_code`; nothing is taken.
    #[serde(default)]
    pub(crate) reject_next: u32,
    /// The code of those refusals (default 33, insufficient stock).
    #[serde(default)]
    pub(crate) reject_code: Option<i64>,
    /// The next N orders are taken (recorded, listed by `GET /v2/orders`)
    /// but answered only after `lose_ms`, past the caller's time-out.
    #[serde(default)]
    pub(crate) lose_next: u32,
    /// How long a lost answer is held back (default 30 000 ms).
    #[serde(default)]
    pub(crate) lose_ms: Option<u64>,
    /// Every call answers 503 while set.
    #[serde(default)]
    pub(crate) down: bool,
    /// Lifetime of tokens issued from now on (default: the documented
    /// 31 622 400 s).
    #[serde(default)]
    pub(crate) token_ttl_secs: Option<u64>,
}

/// What the simulator saw (`GET /sim/airalo/stats`).
#[derive(Default)]
struct Stats {
    /// Calls under `/v2`.
    requests: AtomicU64,
    /// Calls of `POST /v2/token`.
    token_calls: AtomicU64,
    /// Orders taken, sync and async.
    orders: AtomicU64,
    /// eSIMs in those orders.
    units: AtomicU64,
    /// Orders taken per description.
    per_description: Mutex<HashMap<String, u64>>,
    /// Calls of `GET /v2/orders` and `GET /v2/orders/{id}`.
    lookups: AtomicU64,
    /// Calls of `GET /v2/sims/{iccid}/usage`.
    usage_calls: AtomicU64,
    /// 429 answers.
    rate_limited: AtomicU64,
    /// Webhooks delivered (answered 2xx).
    webhooks_sent: AtomicU64,
    /// Webhook deliveries tried.
    webhook_attempts: AtomicU64,
}

/// A fixed one-minute window: (its start, Unix seconds; calls in it).
type Window = (u64, u32);

/// Shared simulator state.
pub(crate) struct AiraloSim {
    /// The account's client id.
    client_id: String,
    /// The account's client secret (also the webhook signing key).
    client_secret: String,
    /// Faults in force.
    faults: Mutex<AiraloFaults>,
    /// Calls a minute per account; 0 lifts every limit.
    rate_limit_per_minute: u32,
    /// The account's window.
    window: Mutex<Window>,
    /// The token endpoint's window.
    token_window: Mutex<Window>,
    /// Usage windows by ICCID.
    usage_windows: Mutex<HashMap<String, Window>>,
    /// Tokens issued, with when each ends.
    tokens: Mutex<HashMap<String, Instant>>,
    /// Orders taken, oldest first.
    orders: Mutex<Vec<Arc<SimOrder>>>,
    /// Orders by the ICCIDs of their eSIMs.
    by_iccid: Mutex<HashMap<String, Arc<SimOrder>>>,
    /// The next order id.
    next_id: AtomicU64,
    /// The ICCIDs it issues, in order.
    stock: IccidStock,
    /// The opted-in async-orders webhook URL.
    webhook_url: Mutex<Option<String>>,
    /// Counters.
    stats: Stats,
    /// Client of webhook deliveries.
    http: reqwest::Client,
}

impl AiraloSim {
    pub(crate) fn new(
        client_id: &str,
        client_secret: &str,
        faults: AiraloFaults,
        rate_limit_per_minute: u32,
    ) -> Arc<Self> {
        Arc::new(Self {
            client_id: client_id.to_owned(),
            client_secret: client_secret.to_owned(),
            faults: Mutex::new(faults),
            rate_limit_per_minute,
            window: Mutex::new((0, 0)),
            token_window: Mutex::new((0, 0)),
            usage_windows: Mutex::default(),
            tokens: Mutex::default(),
            orders: Mutex::default(),
            by_iccid: Mutex::default(),
            // Order ids of simulators of different nodes do not meet.
            next_id: AtomicU64::new(rand::random_range(1_000_000..9_000_000)),
            stock: IccidStock::new(),
            webhook_url: Mutex::new(None),
            stats: Stats::default(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap_or_default(),
        })
    }

    /// Opts the account in to async-order webhooks at `url`.
    pub(crate) fn set_webhook_url(&self, url: String) {
        *lock(&self.webhook_url) = Some(url);
    }

    /// Ends every token issued so far (as a revoked credential would).
    #[cfg(test)]
    pub(crate) fn revoke_tokens(&self) {
        lock(&self.tokens).clear();
    }

    fn faults(&self) -> std::sync::MutexGuard<'_, AiraloFaults> {
        lock(&self.faults)
    }
}

/// Routes of the simulated Airalo: the API under `/v2` and the control
/// routes under `/sim/airalo`.
pub(crate) fn routes(sim: Arc<AiraloSim>) -> Router {
    Router::new()
        .merge(api::routes(sim.clone()))
        .route("/sim/airalo/faults", post(set_faults))
        .route("/sim/airalo/stats", get(stats))
        .with_state(sim)
}

async fn set_faults(
    State(sim): State<Arc<AiraloSim>>,
    Json(faults): Json<AiraloFaults>,
) -> Json<Value> {
    tracing::info!(?faults, "simulated Airalo faults changed");
    *sim.faults() = faults;
    Json(json!({ "ok": true }))
}

async fn stats(State(sim): State<Arc<AiraloSim>>) -> Json<Value> {
    let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
    let s = &sim.stats;
    let per_description = lock(&s.per_description).clone();
    Json(json!({
        "requests": read(&s.requests),
        "token_calls": read(&s.token_calls),
        "orders": read(&s.orders),
        "units": read(&s.units),
        "orders_per_description": per_description,
        "lookups": read(&s.lookups),
        "usage_calls": read(&s.usage_calls),
        "rate_limited": read(&s.rate_limited),
        "webhooks_sent": read(&s.webhooks_sent),
        "webhook_attempts": read(&s.webhook_attempts),
        "rate_limit_per_minute": sim.rate_limit_per_minute,
    }))
}

#[cfg(test)]
mod tests {
    use std::{net::SocketAddr, time::Duration};

    use secrecy::SecretString;
    use serde_json::{Value, json};

    use super::{orders::SIM_SMDP, *};
    use crate::supplier::{
        Allocation, Supplier, SupplierError,
        airalo::{AiraloClient, verify_signature, webhook_order},
        gate::RateGate,
    };

    const ID: &str = "sim-client";
    const SECRET: &str = "sim-secret";
    const PACKAGE: &str = "simulated-7days-1gb";

    async fn serve(router: Router) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
        addr
    }

    async fn start(rate_limit_per_minute: u32) -> (Arc<AiraloSim>, SocketAddr) {
        crate::install_tls_provider();
        let sim = AiraloSim::new(ID, SECRET, AiraloFaults::default(), rate_limit_per_minute);
        let addr = serve(routes(sim.clone())).await;
        (sim, addr)
    }

    fn client(addr: SocketAddr, timeout: Duration) -> AiraloClient {
        AiraloClient::new(
            &format!("http://{addr}/v2"),
            SecretString::from(ID),
            SecretString::from(SECRET),
            timeout,
            Arc::new(RateGate::new(0, None, "airalo-calls")),
        )
        .unwrap()
    }

    async fn set_faults(addr: SocketAddr, faults: Value) {
        reqwest::Client::new()
            .post(format!("http://{addr}/sim/airalo/faults"))
            .json(&faults)
            .send()
            .await
            .unwrap()
            .error_for_status()
            .unwrap();
    }

    async fn stats(addr: SocketAddr) -> Value {
        let url = format!("http://{addr}/sim/airalo/stats");
        reqwest::get(url).await.unwrap().json().await.unwrap()
    }

    /// The token request's form fields.
    fn credentials(id: &str, secret: &str) -> String {
        format!("client_id={id}&client_secret={secret}&grant_type=client_credentials")
    }

    /// A token fetched by hand, for raw calls.
    async fn token(addr: SocketAddr) -> String {
        let answer: Value = reqwest::Client::new()
            .post(format!("http://{addr}/v2/token"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(credentials(ID, SECRET))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        answer["data"]["access_token"].as_str().unwrap().to_owned()
    }

    /// Polls `check` until it holds, for at most `within`.
    async fn eventually<F, Fut>(within: Duration, mut check: F) -> bool
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if check().await {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        check().await
    }

    #[tokio::test]
    async fn orders_share_one_token_and_are_found_by_their_description() {
        let (_sim, addr) = start(0).await;
        let client = client(addr, Duration::from_secs(5));
        let (a, b, c) = tokio::join!(
            client.place_order("tx-1", PACKAGE, 2),
            client.place_order("tx-10", PACKAGE, 1),
            client.place_order("tx-2", "simulated-30days-unlimited", 1),
        );
        let (a, _, _) = (a.unwrap(), b.unwrap(), c.unwrap());
        assert_eq!(stats(addr).await["token_calls"], 1);
        assert!(a.unit_cost_cents.is_some_and(|c| c > 0), "{a:?}");
        let Allocation::Ready(profiles) = client.query(&a.order_no).await.unwrap() else {
            panic!("no sims");
        };
        assert_eq!(profiles.len(), 2);
        for profile in &profiles {
            assert!(
                profile
                    .activation_code
                    .starts_with(&format!("LPA:1${SIM_SMDP}$"))
            );
            assert!(
                crate::domain::esim::is_valid_iccid(&profile.iccid),
                "{profile:?}"
            );
        }
        // `tx-10` contains `tx-1`: the search is matched exactly.
        let found = client.find_order("tx-1").await.unwrap().unwrap();
        assert_eq!(
            (&found.order_no, found.unit_cost_cents),
            (&a.order_no, a.unit_cost_cents)
        );
        assert_eq!(client.find_order("tx-404").await.unwrap(), None);
        let usage = client.usage(&profiles[0].iccid, None).await.unwrap();
        assert_eq!(usage.data_total_mb, 1024);
        assert_eq!(client.usage(&profiles[0].iccid, None).await.unwrap(), usage);
        let seen = stats(addr).await;
        assert_eq!(seen["usage_calls"], 1, "usage is kept 20 minutes");
        assert_eq!(seen["token_calls"], 1);
        assert_eq!(seen["units"], 4);
    }

    #[tokio::test]
    async fn refusals_outages_and_lost_answers() {
        let (_sim, addr) = start(0).await;
        let client = client(addr, Duration::from_secs(5));
        set_faults(addr, json!({ "reject_next": 1, "reject_code": 33 })).await;
        for (package, code) in [
            (PACKAGE, "33"),
            (orders::TEST_OUT_OF_STOCK, "33"),
            (orders::TEST_INSUFFICIENT_BALANCE, "11"),
            ("not-a-package", "34"),
        ] {
            match client.place_order("tx-refused", package, 1).await {
                Err(SupplierError::Refused(text)) => {
                    assert!(text.starts_with(&format!("/orders: {code} ")), "{text}")
                }
                other => panic!("{package}: {other:?}"),
            }
        }
        set_faults(addr, json!({ "down": true })).await;
        let down = client.place_order("tx-down", PACKAGE, 1).await;
        assert!(matches!(down, Err(SupplierError::Transient(_))), "{down:?}");
        let lookup = client.find_order("tx-down").await;
        assert!(
            matches!(lookup, Err(SupplierError::Transient(_))),
            "{lookup:?}"
        );
        set_faults(addr, json!({ "lose_next": 1, "lose_ms": 1500 })).await;
        let impatient = self::client(addr, Duration::from_millis(300));
        let lost = impatient.place_order("tx-lost", PACKAGE, 1).await;
        assert!(matches!(lost, Err(SupplierError::Transient(_))), "{lost:?}");
        let client = &client;
        let found = eventually(Duration::from_secs(5), || async move {
            matches!(client.find_order("tx-lost").await, Ok(Some(_)))
        })
        .await;
        assert!(found);
        let seen = stats(addr).await;
        assert_eq!(seen["orders_per_description"]["tx-lost"], 1);
        assert_eq!(seen["orders_per_description"].get("tx-refused"), None);
        assert_eq!(seen["orders_per_description"].get("tx-down"), None);
    }

    #[tokio::test]
    async fn a_revoked_token_is_fetched_again_once() {
        let (sim, addr) = start(0).await;
        let client = client(addr, Duration::from_secs(5));
        client.place_order("tx-a", PACKAGE, 1).await.unwrap();
        sim.revoke_tokens();
        client.place_order("tx-b", PACKAGE, 1).await.unwrap();
        let seen = stats(addr).await;
        assert_eq!(seen["token_calls"], 2);
        assert_eq!(seen["orders"], 2);
    }

    #[tokio::test]
    async fn async_orders_are_delivered_signed_until_accepted() {
        let (_sim, addr) = start(0).await;
        let received: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
        let inbox = received.clone();
        let hook = Router::new().route(
            "/hook",
            post(
                move |headers: axum::http::HeaderMap, body: String| async move {
                    let signature = headers[webhook_header()]
                        .to_str()
                        .unwrap_or_default()
                        .to_owned();
                    let mut inbox = lock(&inbox);
                    inbox.push((signature, body));
                    // The first delivery fails: it must come again.
                    if inbox.len() == 1 {
                        axum::http::StatusCode::BAD_GATEWAY
                    } else {
                        axum::http::StatusCode::OK
                    }
                },
            ),
        );
        let hook_addr = serve(hook).await;
        let answer = reqwest::Client::new()
            .post(format!("http://{addr}/v2/orders-async"))
            .bearer_auth(token(addr).await)
            .json(&json!({
                "package_id": PACKAGE, "quantity": 1, "type": "sim", "description": "tx-async",
                "webhook_url": format!("http://{hook_addr}/hook"),
            }))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 202);
        let accepted: Value = answer.json().await.unwrap();
        let request_id = accepted["data"]["request_id"].as_str().unwrap().to_owned();
        assert_eq!(request_id.len(), 25);
        let delivered = eventually(Duration::from_secs(5), || {
            let received = received.clone();
            async move { lock(&received).len() >= 2 }
        })
        .await;
        assert!(delivered);
        let (signature, body) = lock(&received)[1].clone();
        assert!(verify_signature(SECRET, body.as_bytes(), &signature));
        let order = webhook_order(&serde_json::from_str(&body).unwrap()).unwrap();
        assert_eq!(order.description.as_deref(), Some("tx-async"));
        assert_eq!(order.request_id, Some(request_id));
        assert_eq!(order.profiles.len(), 1);
        let seen = stats(addr).await;
        assert_eq!(
            (
                seen["webhooks_sent"].clone(),
                seen["webhook_attempts"].clone()
            ),
            (json!(1), json!(2))
        );
    }

    fn webhook_header() -> &'static str {
        crate::supplier::airalo::SIGNATURE_HEADER
    }

    #[tokio::test]
    async fn credentials_validation_and_the_rate_limit_answer_as_documented() {
        let (_sim, addr) = start(4).await;
        let http = reqwest::Client::new();
        let token_call = |id: &'static str, secret: &'static str| {
            http.post(format!("http://{addr}/v2/token"))
                .header("content-type", "application/x-www-form-urlencoded")
                .body(credentials(id, secret))
                .send()
        };
        assert_eq!(token_call(ID, "wrong").await.unwrap().status(), 401);
        assert_eq!(token_call("wrong", SECRET).await.unwrap().status(), 422);
        let token = token(addr).await;
        let too_many = http
            .post(format!("http://{addr}/v2/orders"))
            .bearer_auth(&token)
            .json(&json!({ "package_id": PACKAGE, "quantity": 51, "type": "sim" }))
            .send()
            .await
            .unwrap();
        assert_eq!(too_many.status(), 422);
        let body: Value = too_many.json().await.unwrap();
        assert_eq!(
            body["data"]["quantity"],
            "The quantity may not be greater than 50."
        );
        // Four calls a minute: the fifth is turned away.
        let limited = http
            .get(format!("http://{addr}/v2/packages"))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        assert_eq!(limited.status(), 429);
        let header = |name: &str| limited.headers()[name].to_str().unwrap().to_owned();
        assert!(header("retry-after").parse::<u64>().unwrap() >= 1);
        assert_eq!(header("x-ratelimit-limit"), "4");
        assert_eq!(header("x-ratelimit-remaining"), "0");
        assert!(header("x-ratelimit-reset").parse::<u64>().is_ok());
        assert_eq!(stats(addr).await["rate_limited"], 1);
    }
}
