//! Two suppliers: eSIM Access and Airalo (both simulated, each a copy of the
//! real service). A unit moves to the next supplier only when the previous
//! one will certainly not deliver it; a transient failure is retried until
//! the deadline leaves only the time to place and allocate; a lost Airalo
//! answer is looked up, never ordered again; only when every supplier of the
//! plan refused is a unit refunded.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{
    OPERATOR_TOKEN, ServeProcess, TestApp, eventually, fund, get, live_partner, read,
    spawn_app_with,
};

const PLAN: &str = "pl_fr_1gb_7d";
/// Longest a settled order may take in these tests (outages included).
const SETTLE: Duration = Duration::from_secs(80);

/// Quick retries and a short deadline reserve, so outages are short too.
const QUICK: [(&str, &str); 5] = [
    // Polling orders must not spend the read window.
    ("rate_limit.bands.bronze.read.limit", "100000"),
    ("supplier.retry_backoff_ms", "200"),
    ("supplier.max_retry_backoff_ms", "1000"),
    ("simulators.supplier_latency_ms", "0"),
    ("simulators.airalo_latency_ms", "0"),
];

async fn app_with(extra: &[(&str, &str)]) -> TestApp {
    let mut settings: Vec<(&str, &str)> = QUICK.to_vec();
    settings.extend_from_slice(extra);
    spawn_app_with(&settings).await
}

async fn sim(app: &TestApp, method: Method, path: &str, body: Option<Value>) -> Value {
    let simulators = app.simulators.as_deref().expect("the simulators run");
    let mut request = app.client.request(method, format!("{simulators}{path}"));
    if let Some(body) = body {
        request = request.json(&body);
    }
    let (status, answer) = read(request.send().await.unwrap()).await;
    assert_eq!(status, StatusCode::OK, "{path}: {answer}");
    answer
}

async fn esim_access_faults(app: &TestApp, faults: Value) {
    sim(app, Method::POST, "/sim/supplier/faults", Some(faults)).await;
}

async fn airalo_faults(app: &TestApp, faults: Value) {
    sim(app, Method::POST, "/sim/airalo/faults", Some(faults)).await;
}

async fn airalo_stats(app: &TestApp) -> Value {
    sim(app, Method::GET, "/sim/airalo/stats", None).await
}

async fn esim_access_stats(app: &TestApp) -> Value {
    sim(app, Method::GET, "/sim/supplier/stats", None).await
}

/// A funded live partner's secret.
async fn funded(app: &TestApp) -> String {
    let (partner_id, secret) = live_partner(app).await;
    fund(app, &partner_id, 1_000_000).await;
    secret
}

/// Places an order that must be accepted; returns its id.
async fn order(app: &TestApp, secret: &str, plan: &str, quantity: i64) -> String {
    let (status, body) = read(
        app.as_partner(secret, Method::POST, "/orders")
            .header("idempotency-key", uuid::Uuid::new_v4().to_string())
            .json(&json!({ "plan_id": plan, "quantity": quantity }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    body["id"].as_str().unwrap().to_owned()
}

/// Polls the order until it leaves `processing`.
async fn settled(app: &TestApp, secret: &str, id: &str) -> Value {
    eventually(&format!("order {id} to settle"), SETTLE, || async {
        let (status, order) = get(app, secret, &format!("/orders/{id}")).await;
        assert_eq!(status, StatusCode::OK, "{order}");
        (order["status"] != "processing").then_some(order)
    })
    .await
}

/// The operator's view of which supplier carried each unit.
async fn supply(app: &TestApp, id: &str) -> Value {
    let (status, body) = read(
        app.operator(Method::GET, &format!("/orders/{id}/supply"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

fn suppliers_of(supply: &Value) -> Vec<String> {
    supply["units"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["supplier"].as_str().unwrap_or("none").to_owned())
        .collect()
}

/// Adds a plan sold under the given packages.
async fn plan_sold_by(app: &TestApp, id: &str, packages: Value) {
    let plan = json!([{
        "id": id, "name": "Failover test plan", "country_code": "FR", "region": "europe",
        "global": false, "plan_type": "fixed", "data_amount_mb": 1024, "daily_allowance_mb": null,
        "fup_speed": null, "unlimited": false, "duration_days": 7, "voice_minutes": null,
        "sms_count": null, "coverage_types": ["4G"], "speed": "4G", "networks": null,
        "requires_kyc": null, "list_price_cents": 500, "cost_floor_cents": 300, "active": true,
        "supplier_packages": packages,
    }]);
    let (status, body) = read(
        app.operator(Method::POST, "/plans")
            .json(&plan)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

fn assert_delivered(order: &Value, quantity: usize) {
    assert_eq!(order["status"], "completed", "{order}");
    assert_eq!(order["refunded_cents"], 0, "{order}");
    assert_eq!(
        order["esims"].as_array().unwrap().len(),
        quantity,
        "{order}"
    );
}

#[tokio::test]
async fn an_outage_shorter_than_the_deadline_refunds_nothing() {
    // A 40 s deadline with a 10 s reserve: placements are retried for 30 s.
    let app = app_with(&[
        ("suppliers.breaker_open_seconds", "2"),
        ("supplier.deadline_seconds", "40"),
        ("supplier.reserve_seconds", "10"),
    ])
    .await;
    let secret = funded(&app).await;
    esim_access_faults(&app, json!({ "fail_rate": 1.0 })).await;
    let ids = [
        order(&app, &secret, PLAN, 2).await,
        order(&app, &secret, PLAN, 1).await,
    ];
    // A 10-second outage: the supplier fails every call (HTTP 500, nothing
    // taken), is taken out of the route and fails its probes too.
    let outage = std::time::Instant::now();
    eventually("a 10 s outage with many failed calls", SETTLE, || async {
        let view = supplier_view(&app, "esim_access").await;
        let failed = view["failures"].as_u64().unwrap() >= 8
            && view["times_taken_out"].as_u64().unwrap() >= 1;
        (failed && outage.elapsed() >= Duration::from_secs(10)).then_some(())
    })
    .await;
    for id in &ids {
        let (_, order) = get(&app, &secret, &format!("/orders/{id}")).await;
        assert_eq!(order["status"], "processing", "still waiting: {order}");
    }
    esim_access_faults(&app, json!({})).await;
    for id in &ids {
        let order = settled(&app, &secret, id).await;
        assert_eq!(order["status"], "completed", "{order}");
        assert_eq!(order["refunded_cents"], 0, "{order}");
    }
    eventually("the supplier to be back in the route", SETTLE, || async {
        (supplier_view(&app, "esim_access").await["state"] == "up").then_some(())
    })
    .await;
}

/// One supplier as `GET /operator/v1/suppliers` shows it.
async fn supplier_view(app: &TestApp, name: &str) -> Value {
    let (status, body) = read(
        app.operator(Method::GET, "/suppliers")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no {name} in {body}"))
}

#[tokio::test]
async fn no_stock_at_the_first_supplier_is_delivered_by_the_second() {
    let app = app_with(&[("suppliers.route", "esim_access,airalo")]).await;
    let secret = funded(&app).await;
    // "Insufficient available profiles" for every placement.
    esim_access_faults(
        &app,
        json!({ "reject_next": 1000, "reject_code": "200011" }),
    )
    .await;
    let id = order(&app, &secret, PLAN, 3).await;
    let order = settled(&app, &secret, &id).await;
    assert_delivered(&order, 3);
    let supply = supply(&app, &id).await;
    assert_eq!(suppliers_of(&supply), vec!["airalo"; 3], "{supply}");
    assert!(
        supply["cost_cents"].as_i64().is_some(),
        "Airalo names its price: {supply}"
    );
    let stats = airalo_stats(&app).await;
    assert_eq!(stats["units"], 3, "{stats}");
}

#[tokio::test]
async fn maintenance_at_the_first_supplier_is_delivered_by_the_second() {
    let app = app_with(&[("suppliers.route", "airalo,esim_access")]).await;
    let secret = funded(&app).await;
    // Airalo's "operator under maintenance" (13) for every placement.
    airalo_faults(&app, json!({ "reject_next": 1000, "reject_code": 13 })).await;
    let id = order(&app, &secret, PLAN, 2).await;
    let order = settled(&app, &secret, &id).await;
    assert_delivered(&order, 2);
    assert_eq!(
        suppliers_of(&supply(&app, &id).await),
        vec!["esim_access"; 2]
    );
}

#[tokio::test]
async fn a_supplier_unreachable_before_sending_is_passed_over() {
    // Nothing listens on port 9 of loopback: every connection is refused.
    let app = app_with(&[
        ("suppliers.route", "esim_access,airalo"),
        ("supplier.base_url", "http://127.0.0.1:9"),
    ])
    .await;
    let secret = funded(&app).await;
    let id = order(&app, &secret, PLAN, 2).await;
    let order = settled(&app, &secret, &id).await;
    assert_delivered(&order, 2);
    assert_eq!(suppliers_of(&supply(&app, &id).await), vec!["airalo"; 2]);
}

#[tokio::test]
async fn a_lost_airalo_answer_ends_with_exactly_one_airalo_order() {
    let app = app_with(&[("suppliers.route", "airalo"), ("airalo.timeout_ms", "1000")]).await;
    let secret = funded(&app).await;
    // The order is taken, and its answer comes after the client gave up.
    airalo_faults(&app, json!({ "lose_next": 1, "lose_ms": 3000 })).await;
    let id = order(&app, &secret, PLAN, 2).await;
    let order = settled(&app, &secret, &id).await;
    assert_delivered(&order, 2);
    let stats = airalo_stats(&app).await;
    assert_eq!(stats["orders"], 1, "exactly one Airalo order: {stats}");
    let per_description = stats["orders_per_description"].as_object().unwrap();
    assert!(per_description.values().all(|n| n == 1), "{stats}");
    assert!(
        stats["lookups"].as_u64().unwrap() >= 1,
        "the lost order was looked up: {stats}"
    );
}

#[tokio::test]
async fn both_suppliers_refusing_refunds_as_supplier_error() {
    let app = app_with(&[("suppliers.route", "esim_access,airalo")]).await;
    plan_sold_by(
        &app,
        "pl_fr_failover_nostock",
        json!({ "esim_access": "pl_fr_failover_nostock", "airalo": "test-out-of-stock-7days-1gb" }),
    )
    .await;
    let secret = funded(&app).await;
    esim_access_faults(
        &app,
        json!({ "reject_next": 1000, "reject_code": "200011" }),
    )
    .await;
    let id = order(&app, &secret, "pl_fr_failover_nostock", 2).await;
    let order = settled(&app, &secret, &id).await;
    assert_eq!(order["status"], "failed", "{order}");
    assert_eq!(order["failure_code"], "supplier_error", "{order}");
    assert_eq!(order["refunded_cents"], order["total_cents"], "{order}");
}

#[tokio::test]
async fn a_plan_only_airalo_sells_is_bought_from_airalo() {
    let app = app_with(&[("suppliers.route", "esim_access,airalo")]).await;
    plan_sold_by(
        &app,
        "pl_fr_airalo_only",
        json!({ "airalo": "bonjour-7days-1gb" }),
    )
    .await;
    let secret = funded(&app).await;
    let before = esim_access_stats(&app).await;
    let id = order(&app, &secret, "pl_fr_airalo_only", 1).await;
    assert_delivered(&settled(&app, &secret, &id).await, 1);
    assert_eq!(suppliers_of(&supply(&app, &id).await), vec!["airalo"]);
    let after = esim_access_stats(&app).await;
    assert_eq!(
        before["orders"], after["orders"],
        "eSIM Access was not asked"
    );
}

#[tokio::test]
async fn operators_see_each_supplier_and_the_margins() {
    let app = app_with(&[("suppliers.route", "esim_access,airalo")]).await;
    let secret = funded(&app).await;
    esim_access_faults(
        &app,
        json!({ "reject_next": 1000, "reject_code": "200011" }),
    )
    .await;
    let id = order(&app, &secret, PLAN, 2).await;
    assert_delivered(&settled(&app, &secret, &id).await, 2);

    let (status, suppliers) = read(
        app.operator(Method::GET, "/suppliers")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{suppliers}");
    assert_eq!(suppliers["route"], json!(["esim_access", "airalo"]));
    let first = &suppliers["data"][0];
    assert_eq!(first["name"], "esim_access");
    assert!(first["refusals"].as_u64().unwrap() >= 1, "{suppliers}");
    assert!(
        first["units_failed_over"].as_u64().unwrap() >= 2,
        "{suppliers}"
    );
    assert_eq!(suppliers["data"][1]["units_placed"], 2, "{suppliers}");

    let (status, margins) = read(app.operator(Method::GET, "/margins").send().await.unwrap()).await;
    assert_eq!(status, StatusCode::OK, "{margins}");
    assert_eq!(margins["units"], 2, "{margins}");
    let row = &margins["data"][0];
    assert_eq!(row["supplier"], "airalo", "{margins}");
    assert_eq!(
        row["estimated_cost_units"], 0,
        "Airalo named its price: {margins}"
    );
    assert_eq!(
        row["margin_cents"].as_i64().unwrap(),
        row["revenue_cents"].as_i64().unwrap() - row["cost_cents"].as_i64().unwrap()
    );

    // The console shows the same.
    let cookie = crate::console::sign_in(&app).await;
    let page = crate::console::open(&app, Some(&cookie), "/console/suppliers").await;
    assert_eq!(page.status, StatusCode::OK);
    let html = page.body;
    assert!(
        html.contains("<h1>Suppliers</h1>") && html.contains("esim_access → airalo"),
        "{html}"
    );
    assert!(html.contains("<code>airalo</code>"), "{html}");

    let (status, bad) = read(
        app.operator(Method::GET, "/margins?from=yesterday")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");

    let metrics = app
        .client
        .get(format!("{}/metrics", app.operator))
        .bearer_auth(OPERATOR_TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("esim_supplier_failover_units_total")
            && metrics.contains("supplier=\"airalo\""),
        "{metrics}"
    );
}

#[tokio::test]
async fn an_airalo_webhook_is_verified_before_it_wakes_anything() {
    use hmac::{Hmac, Mac};
    let app = app_with(&[]).await;
    let body = br#"{"data":{"id":1,"description":"so_unknown"},"request_id":"r1"}"#;
    let sign = |secret: &str| {
        let mut mac = Hmac::<sha2::Sha512>::new_from_slice(secret.as_bytes()).unwrap();
        mac.update(body);
        hex::encode(mac.finalize().into_bytes())
    };
    let callback = |signature: Option<String>| {
        let mut request = app
            .client
            .post(format!("{}/callbacks/airalo", app.public))
            .header("content-type", "application/json")
            .body(body.to_vec());
        if let Some(signature) = signature {
            request = request.header("airalo-signature", signature);
        }
        request.send()
    };
    // Signed with the account's client secret (the development one here).
    let (status, answer) = read(
        callback(Some(sign("sim-airalo-client-secret")))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["received"], true);
    // A redelivery is acknowledged alike.
    let (status, _) = read(
        callback(Some(sign("sim-airalo-client-secret")))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    for forged in [None, Some(sign("another-secret")), Some("00".repeat(64))] {
        let (status, answer) = read(callback(forged).await.unwrap()).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{answer}");
        assert_eq!(answer["error"]["code"], "auth.invalid_key", "{answer}");
    }
}

/// The simulators of a `serve` process of their own, so they outlive the
/// node that is killed.
struct SimHost {
    serve: ServeProcess,
    base: String,
}

impl SimHost {
    async fn start() -> Self {
        let serve = ServeProcess::start(&[("ESIM__SIMULATORS__SUPPLIER_LATENCY_MS", "0")]).await;
        let addr = eventually("the simulators listener", SETTLE, || async {
            serve.listener("simulators")
        })
        .await;
        Self {
            serve,
            base: format!("http://{addr}"),
        }
    }

    async fn post(&self, path: &str, body: Value) {
        let response = reqwest::Client::new()
            .post(format!("{}{path}", self.base))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{path}");
    }

    async fn airalo_stats(&self) -> Value {
        reqwest::get(format!("{}/sim/airalo/stats", self.base))
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }
}

/// A node on `database` buying from `sims`, with eSIM Access first and
/// Airalo second, and a fixed node id (a restart takes its claims back).
async fn failover_node(database: &str, sims: &SimHost) -> ServeProcess {
    let airalo = format!("{}/v2", sims.base);
    ServeProcess::start(&[
        ("ESIM__DATABASE__URL", database),
        ("ESIM__NODE__ID", "failover-node"),
        ("ESIM__OPERATOR__TOKEN", OPERATOR_TOKEN),
        ("ESIM__SUPPLIERS__ROUTE", "esim_access,airalo"),
        ("ESIM__SUPPLIER__BASE_URL", &sims.base),
        ("ESIM__AIRALO__BASE_URL", &airalo),
        ("ESIM__AIRALO__TIMEOUT_MS", "1000"),
        ("ESIM__SUPPLIER__RETRY_BACKOFF_MS", "200"),
        ("ESIM__SUPPLIER__MAX_RETRY_BACKOFF_MS", "1000"),
        ("ESIM__RECONCILER__INTERVAL_SECONDS", "1"),
        ("ESIM__RECONCILER__GRACE_SECONDS", "1"),
        ("ESIM__RATE_LIMIT__BANDS__GOLD__READ__LIMIT", "100000"),
        ("ESIM__RATE_LIMIT__BANDS__GOLD__WRITE__LIMIT", "100000"),
    ])
    .await
}

#[tokio::test]
async fn a_kill_9_in_the_middle_of_a_failover_never_buys_a_unit_twice() {
    let sims = SimHost::start().await;
    // eSIM Access has no stock; Airalo takes the orders and their answers
    // come after the node gave up waiting (and after it was killed).
    sims.post(
        "/sim/supplier/faults",
        json!({ "reject_next": 100000, "reject_code": "200011" }),
    )
    .await;
    sims.post(
        "/sim/airalo/faults",
        json!({ "lose_next": 3, "lose_ms": 2500 }),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}/node.db?mode=rwc", dir.path().display());
    let node = failover_node(&database, &sims).await;
    let (partner, key) = node.live_partner(OPERATOR_TOKEN).await;
    let partner_id = partner["id"].as_str().unwrap().to_owned();
    node.fund(OPERATOR_TOKEN, &partner_id, 1_000_000).await;
    let secret = key["secret"].as_str().unwrap().to_owned();
    let mut ids = Vec::new();
    for _ in 0..6 {
        let (status, body) = node.order(&secret, PLAN, 2).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        ids.push(body["id"].as_str().unwrap().to_owned());
    }
    // Killed once Airalo has taken an order whose answer is still on its way.
    eventually("Airalo to take an order", SETTLE, || async {
        (sims.airalo_stats().await["orders"].as_u64().unwrap() >= 1).then_some(())
    })
    .await;
    node.kill().await;

    let node = failover_node(&database, &sims).await;
    let client = reqwest::Client::new();
    for id in &ids {
        let order = eventually(&format!("order {id} to settle"), SETTLE, || async {
            let (status, order) = read(
                client
                    .get(format!("http://{}/partner/v1/orders/{id}", node.public))
                    .bearer_auth(&secret)
                    .send()
                    .await
                    .unwrap(),
            )
            .await;
            assert_eq!(status, StatusCode::OK, "{order}");
            (order["status"] != "processing").then_some(order)
        })
        .await;
        assert_delivered(&order, 2);
    }
    let stats = sims.airalo_stats().await;
    let per_description = stats["orders_per_description"].as_object().unwrap();
    assert!(
        per_description.values().all(|n| n == 1),
        "one Airalo order per supplier order: {stats}"
    );
    assert_eq!(stats["units"], 12, "every unit bought once: {stats}");
    node.terminate().await;
    sims.serve.terminate().await;
}

#[tokio::test]
async fn a_request_held_past_the_http_timeout_is_answered_503_retryable() {
    let app = app_with(&[
        ("http.request_timeout_ms", "400"),
        ("supplier.timeout_ms", "5000"),
    ])
    .await;
    let secret = funded(&app).await;
    let id = order(&app, &secret, PLAN, 1).await;
    let delivered = settled(&app, &secret, &id).await;
    assert_delivered(&delivered, 1);
    let esim = &delivered["esims"][0];
    let iccid = esim
        .as_str()
        .or_else(|| esim["iccid"].as_str())
        .unwrap_or_else(|| panic!("no ICCID in {delivered}"))
        .to_owned();
    // The supplier takes the usage question and answers it 3 s later.
    esim_access_faults(&app, json!({ "slow_next": 1, "slow_ms": 3000 })).await;
    // Answered at the bound (a 503), not when the supplier answers (a 200).
    let (status, body) = get(&app, &secret, &format!("/esims/{iccid}/usage")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["error"]["code"], "service_unavailable", "{body}");
    assert_eq!(body["error"]["retryable"], true, "{body}");
}
