//! The eSIM Access adapter against the simulated supplier, and the simulator
//! against the documented shapes recorded in `tests/fixtures/esim_access/`:
//! batch orders, a repeated transaction id, usage by `esimTranNo`,
//! the documented error codes, the rate limit, and the `ORDER_STATUS`
//! webhook waking provisioning.

use std::{collections::HashSet, sync::Arc, time::Duration};

use esim_reseller::supplier::{
    Allocation, Supplier, SupplierError, esim_access::EsimAccessClient, gate::RateGate,
};
use reqwest::StatusCode;
use secrecy::SecretString;
use serde_json::{Value, json};

use crate::helpers::{
    TestApp, eventually, fund, get, live_partner, post_order, read, spawn_app_with,
};

/// The credentials the service and its simulator share by default.
const ACCESS_CODE: &str = "sim-access-code";
const SECRET: &str = "sim-supplier-secret";

fn fixture(name: &str) -> Value {
    let path = format!(
        "{}/tests/fixtures/esim_access/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The adapter pointed at the app's simulator, with its own gate.
fn client(app: &TestApp, secret: &str, per_second: u32) -> EsimAccessClient {
    let gate = Arc::new(RateGate::new(per_second, None, "supplier-calls"));
    client_behind(app, secret, gate)
}

/// The adapter pointed at the app's simulator, behind `gate`.
fn client_behind(app: &TestApp, secret: &str, gate: Arc<RateGate>) -> EsimAccessClient {
    EsimAccessClient::new(
        app.simulators.as_deref().expect("the simulators run"),
        SecretString::from(ACCESS_CODE),
        SecretString::from(secret),
        Duration::from_secs(5),
        gate,
    )
    .unwrap()
}

async fn sim_post(app: &TestApp, path: &str, body: Value) -> Value {
    let simulators = app.simulators.as_deref().expect("the simulators run");
    let (status, answer) = read(
        app.client
            .post(format!("{simulators}{path}"))
            .json(&body)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    answer
}

/// The keys of an object, for comparing shapes.
fn keys(value: &Value) -> HashSet<String> {
    value
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default()
}

async fn ready(client: &EsimAccessClient, order_no: &str) -> Vec<esim_reseller::supplier::Profile> {
    eventually(
        "the profiles are allocated",
        Duration::from_secs(10),
        || async {
            match client.query(order_no).await {
                Ok(Allocation::Ready(profiles)) => Some(profiles),
                _ => None,
            }
        },
    )
    .await
}

#[tokio::test]
async fn a_batch_order_is_found_again_under_its_transaction_id_and_every_profile_is_read() {
    // Allocation takes long enough that the first question is surely early.
    let app = spawn_app_with(&[("simulators.supplier_latency_ms", "3000")]).await;
    let supplier = client(&app, SECRET, 0);

    let order_no = supplier
        .place_order("so_test_1", "pl_fr_1gb_7d", 30)
        .await
        .unwrap()
        .order_no;
    // Still allocating: pending, not refused.
    assert_eq!(
        supplier.query(&order_no).await.unwrap(),
        Allocation::Pending
    );
    // The same transaction id is the same order.
    let again = supplier
        .place_order("so_test_1", "pl_fr_1gb_7d", 30)
        .await
        .unwrap()
        .order_no;
    assert_eq!(again, order_no);

    let profiles = ready(&supplier, &order_no).await;
    assert_eq!(profiles.len(), 30);
    let iccids: HashSet<_> = profiles.iter().map(|p| p.iccid.clone()).collect();
    assert_eq!(iccids.len(), 30, "every profile its own ICCID");
    assert!(profiles.iter().all(|p| p.esim_tran_no.is_some()));

    // Usage asked by esimTranNo.
    let first = &profiles[0];
    let usage = supplier
        .usage(&first.iccid, first.esim_tran_no.as_deref())
        .await
        .unwrap();
    assert_eq!(usage.data_total_mb, 3 * 1024);
    // A profile whose number was not kept is found by its ICCID first.
    let by_iccid = supplier.usage(&first.iccid, None).await.unwrap();
    assert_eq!(by_iccid, usage);

    let settings = sim_post(&app, "/sim/supplier/settings", json!({ "rate_limit": 8 })).await;
    assert_eq!(settings["rate_limit"], 8);
}

#[tokio::test]
async fn the_simulator_answers_the_documented_shapes_and_codes() {
    let app = spawn_app_with(&[("simulators.supplier_latency_ms", "0")]).await;
    let supplier = client(&app, SECRET, 0);

    // Unknown package, more profiles than one order carries, unknown order.
    let unknown = supplier
        .place_order("so_test_2", "NOPE", 1)
        .await
        .unwrap_err();
    assert!(
        matches!(&unknown, SupplierError::Refused(m) if m.contains("310243")),
        "{unknown}"
    );
    let too_many = supplier
        .place_order("so_test_3", "pl_fr_1gb_7d", 31)
        .await
        .unwrap_err();
    assert!(
        matches!(&too_many, SupplierError::Refused(m) if m.contains("200008")),
        "{too_many}"
    );
    let missing = supplier.query("B_NOT_AN_ORDER").await.unwrap_err();
    assert!(
        matches!(&missing, SupplierError::Refused(m) if m.contains("310272")),
        "{missing}"
    );
    // A wrong secret does not sign as the account does.
    let forged = client(&app, "not-the-secret", 0)
        .place_order("so_test_4", "pl_fr_1gb_7d", 1)
        .await
        .unwrap_err();
    assert!(
        matches!(&forged, SupplierError::Refused(m) if m.contains("101003")),
        "{forged}"
    );

    // The simulator's answers carry the fields of the recorded ones.
    let simulators = app.simulators.clone().unwrap();
    let raw = app
        .client
        .post(format!("{simulators}/api/v1/open/esim/order"))
        .header("RT-AccessCode", ACCESS_CODE)
        .header("RT-Timestamp", "1")
        .header("RT-RequestID", "r")
        .header("RT-Signature", "0")
        .json(&json!({}))
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    assert_eq!(
        keys(&raw),
        keys(&fixture("order_error_signature.json")),
        "{raw}"
    );
    assert_eq!(raw["errorCode"], "101003");

    let order_no = supplier
        .place_order("so_test_5", "pl_fr_1gb_7d", 2)
        .await
        .unwrap()
        .order_no;
    let profiles = ready(&supplier, &order_no).await;
    assert_eq!(profiles.len(), 2);
}

/// An app whose simulated supplier takes 4 requests a second.
async fn limited_app() -> TestApp {
    spawn_app_with(&[
        ("simulators.supplier_latency_ms", "0"),
        ("simulators.supplier_rate_limit", "4"),
    ])
    .await
}

#[tokio::test]
async fn past_the_rate_limit_the_simulator_answers_429() {
    let app = limited_app().await;
    let ungated = client(&app, SECRET, 0);
    let mut limited = 0;
    for n in 0..12 {
        match ungated.query(&format!("B{n}")).await {
            Err(SupplierError::SlowDown(m)) if m.contains("429") => limited += 1,
            _ => {}
        }
    }
    assert!(limited > 0, "a burst of 12 at 4/s meets the limit");
}

#[tokio::test]
async fn behind_the_gate_no_call_goes_over_the_rate_limit() {
    let app = limited_app().await;
    // One call a second under the limit: scheduling jitter on a loaded
    // machine cannot push a fifth call into one of the simulator's seconds.
    let gated = client(&app, SECRET, 3);
    for n in 0..10 {
        let answer = gated.query(&format!("B{n}")).await.unwrap_err();
        assert!(
            matches!(&answer, SupplierError::Refused(m) if m.contains("310272")),
            "call {n}: {answer}"
        );
    }
}

/// What the adapter got for each call of a drive: `(seconds into the drive,
/// refused with 429)`.
async fn drive_queries(
    client: Arc<EsimAccessClient>,
    tasks: usize,
    for_how_long: Duration,
) -> Vec<(f64, bool)> {
    let started = tokio::time::Instant::now();
    let drivers: Vec<_> = (0..tasks)
        .map(|task| {
            let client = client.clone();
            tokio::spawn(async move {
                let mut answers = Vec::new();
                let mut n = 0;
                while started.elapsed() < for_how_long {
                    n += 1;
                    let answer = client.query(&format!("B{task}-{n}")).await;
                    let limited =
                        matches!(&answer, Err(SupplierError::SlowDown(m)) if m.contains("429"));
                    answers.push((started.elapsed().as_secs_f64(), limited));
                }
                answers
            })
        })
        .collect();
    let mut answers = Vec::new();
    for driver in drivers {
        answers.extend(driver.await.unwrap());
    }
    answers
}

#[tokio::test]
async fn a_limit_nobody_configured_is_learnt_from_the_supplier_s_429s() {
    let app = limited_app().await;
    // The gate knows no limit; the supplier takes 4 calls a second.
    let gate = Arc::new(RateGate::new(0, None, "supplier-calls"));
    let supplier = Arc::new(client_behind(&app, SECRET, gate.clone()));

    // Twelve callers ask as fast as they are let for six seconds.
    let answers = drive_queries(supplier, 12, Duration::from_secs(6)).await;

    let answered = answers.iter().filter(|(_, limited)| !limited).count();
    let late_429s = answers
        .iter()
        .filter(|(at, limited)| *limited && *at >= 3.0)
        .count();
    // Pausing alone let every queued call out at once when the pause
    // ended: each second the supplier answered four and refused the rest.
    // Paced, the last three seconds meet the limit at most once or twice.
    assert!(
        late_429s <= 3,
        "{late_429s} refusals in the last 3 s: {answers:?}"
    );
    assert!(
        answered >= 12,
        "{answered} answered in 6 s at 4/s: {answers:?}"
    );
    // Near the limit: the pace probes a little above it between refusals.
    let learnt = gate.learnt_per_second().expect("a pace learnt");
    assert!(learnt > 0.0 && learnt <= 5.0, "{learnt}");
}

#[tokio::test]
async fn orders_settle_at_the_pace_learnt_from_a_supplier_that_limits_more_than_configured() {
    let app = spawn_app_with(&[
        ("simulators.supplier_latency_ms", "0"),
        ("simulators.supplier_rate_limit", "4"),
        ("supplier.requests_per_second", "0"),
        ("supplier.batch_size", "1"),
        ("supplier.poll_interval_ms", "100"),
        ("rate_limit.bands.bronze.write.limit", "100000"),
        ("rate_limit.bands.bronze.read.limit", "100000"),
    ])
    .await;
    let (partner_id, secret) = live_partner(&app).await;
    fund(&app, &partner_id, 100_000).await;

    // Twelve single-unit orders at once: a supplier order each, each a
    // placement and a question at least, at 4 calls a second.
    let orders = futures::future::join_all((0..12).map(|n| {
        let (app, secret) = (&app, &secret);
        async move {
            let (status, order) = post_order(
                app,
                secret,
                &format!("learnt-pace-order-{n:04}"),
                &json!({ "plan_id": "pl_fr_1gb_7d" }),
            )
            .await;
            assert_eq!(status, StatusCode::ACCEPTED, "{order}");
            order["id"].as_str().unwrap().to_owned()
        }
    }))
    .await;
    for id in &orders {
        eventually(
            &format!("order {id} completes"),
            Duration::from_secs(60),
            || async {
                let (_, order) = get(&app, &secret, &format!("/orders/{id}")).await;
                assert_ne!(order["status"], "failed", "{order}");
                (order["status"] == "completed")
                    .then(|| assert_eq!(order["refunded_cents"], 0, "{order}"))
            },
        )
        .await;
    }

    let (status, suppliers) = read(
        app.operator(reqwest::Method::GET, "/suppliers")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{suppliers}");
    let esim_access = &suppliers["data"][0];
    assert_eq!(esim_access["name"], "esim_access", "{suppliers}");
    assert!(
        esim_access["slow_downs"].as_u64().unwrap() >= 1,
        "{suppliers}"
    );
    let pace = esim_access["learnt_requests_per_second"]
        .as_f64()
        .expect("a pace learnt");
    assert!(pace > 0.0 && pace <= 5.0, "{suppliers}");
    // Its waits are a second's: no longer window is learnt.
    assert_eq!(
        esim_access["learnt_window_seconds"],
        Value::Null,
        "{suppliers}"
    );
    assert_eq!(
        esim_access["learnt_requests_per_window"],
        Value::Null,
        "{suppliers}"
    );
    // A slow-down is an answer: the supplier stayed in the route.
    assert_eq!(esim_access["times_taken_out"], 0, "{suppliers}");
    // The console's suppliers page says so too.
    let cookie = crate::console::sign_in(&app).await;
    let page = crate::console::open(&app, Some(&cookie), "/console/suppliers").await;
    assert_eq!(page.status, StatusCode::OK);
    let html = page.body;
    assert!(
        html.contains(&format!("(paced at {pace} after slow-downs)")),
        "{html}"
    );
    let metrics = app.metrics().await;
    assert!(
        metrics.contains("esim_supplier_pace_requests_per_second{supplier=\"esim_access\"}"),
        "the pace is published"
    );
}

/// An app whose supplier orders are asked about once a minute: an order
/// settles within a test's wait only if the ORDER_STATUS webhook wakes it.
async fn app_polling_once_a_minute(latency_ms: &str) -> TestApp {
    spawn_app_with(&[
        ("simulators.supplier_latency_ms", latency_ms),
        ("supplier.poll_interval_ms", "60000"),
        ("supplier.max_poll_interval_ms", "60000"),
        ("rate_limit.bands.bronze.read.limit", "100000"),
        ("rate_limit.bands.bronze.write.limit", "100000"),
    ])
    .await
}

/// Places an order of two units and waits (20 s at most) until it settled.
async fn place_and_settle(app: &TestApp, secret: &str, key: &str) -> Value {
    let (status, order) = post_order(
        app,
        secret,
        key,
        &json!({ "plan_id": "pl_fr_1gb_7d", "quantity": 2 }),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{order}");
    let id = order["id"].as_str().unwrap().to_owned();
    eventually("the order settles", Duration::from_secs(20), || {
        let id = &id;
        async move {
            let (status, order) = read(
                app.client
                    .get(format!("{}/partner/v1/orders/{id}", app.public))
                    .bearer_auth(secret)
                    .send()
                    .await
                    .unwrap(),
            )
            .await;
            (status == StatusCode::OK && order["status"] != "processing").then_some(order)
        }
    })
    .await
}

async fn supplier_stats(app: &TestApp) -> Value {
    let simulators = app.simulators.clone().unwrap();
    app.client
        .get(format!("{simulators}/sim/supplier/stats"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test]
async fn the_order_status_webhook_wakes_provisioning_long_before_a_poll() {
    let app = app_polling_once_a_minute("300").await;
    let (partner_id, secret) = live_partner(&app).await;
    fund(&app, &partner_id, 10_000).await;

    let settled = place_and_settle(&app, &secret, "webhook-wakes-the-order-1").await;

    assert_eq!(settled["status"], "completed", "{settled}");
    let stats = supplier_stats(&app).await;
    assert_eq!(stats["webhooks"], 1, "{stats}");
    assert_eq!(
        stats["queries"], 1,
        "one question, after the webhook: {stats}"
    );
}

#[tokio::test]
async fn a_webhook_that_comes_before_its_driver_waits_still_wakes_it() {
    // Allocation at once: the webhook races the placement's answer, and
    // often arrives before the supplier order's driver waits for it.
    let app = app_polling_once_a_minute("0").await;
    let (partner_id, secret) = live_partner(&app).await;
    fund(&app, &partner_id, 100_000).await;

    for n in 0..4 {
        let settled = place_and_settle(&app, &secret, &format!("early-webhook-order-{n}")).await;
        assert_eq!(settled["status"], "completed", "order {n}: {settled}");
    }

    let stats = supplier_stats(&app).await;
    assert_eq!(stats["webhooks"], 4, "{stats}");
    assert_eq!(
        stats["queries"], 4,
        "one question per order, after its webhook: {stats}"
    );
}

#[tokio::test]
async fn every_supplier_notification_is_acknowledged() {
    let app = spawn_app_with(&[]).await;
    for name in [
        "webhook_order_status.json",
        "webhook_check_health.json",
        "webhook_esim_status.json",
    ] {
        let (status, body) = read(
            app.client
                .post(format!("{}/callbacks/esim-access", app.public))
                .json(&fixture(name))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{name}: {body}");
    }
    let (status, body) = read(
        app.client
            .post(format!("{}/callbacks/esim-access", app.public))
            .header("content-type", "application/json")
            .body("not json")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["code"], "request.invalid", "{body}");
}

#[tokio::test]
async fn units_pending_at_the_upgrade_keep_their_own_id_as_their_transaction_id() {
    use migration::{Migrator, MigratorTrait};
    use sea_orm::{ActiveModelTrait, ConnectOptions, ConnectionTrait, Database, EntityTrait};

    // A database as it stood before supplier orders carried many units, with
    // one order whose unit may already have been placed under its own id.
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/upgrade.db?mode=rwc", dir.path().display());
    let mut options = ConnectOptions::new(url);
    options.max_connections(1).sqlx_logging(false);
    let db = Database::connect(options).await.unwrap();
    db.execute_unprepared("PRAGMA foreign_keys = OFF")
        .await
        .unwrap();
    Migrator::up(&db, Some(5)).await.unwrap();
    let now = chrono::Utc::now();
    entities::order::ActiveModel::from(entities::order::Model {
        id: "po_upgrade".into(),
        partner_id: "pt_upgrade".into(),
        mode: entities::states::Mode::Live,
        idempotency_key: "upgrade-key-0001".into(),
        plan_id: "pl_fr_1gb_7d".into(),
        quantity: 2,
        unit_price_cents: 332,
        total_cents: 664,
        list_unit_cents: 349,
        price_source: "tier:bronze".into(),
        metadata: json!({}),
        status: entities::states::OrderStatus::Processing,
        failure_code: None,
        refunded_cents: 0,
        attempts: 0,
        claimed_until: None,
        claimed_by: None,
        created_at: now,
        completed_at: None,
    })
    .insert(&db)
    .await
    .unwrap();
    for (n, status) in [(1, "delivered"), (2, "pending")] {
        db.execute_unprepared(&format!(
            "INSERT INTO order_units (id, order_id, unit_index, status, supplier_order_no, attempts, last_error, updated_at) \
             VALUES ('po_upgrade_{n}', 'po_upgrade', {n}, '{status}', NULL, 0, NULL, '{}')",
            now.to_rfc3339()
        ))
        .await
        .unwrap();
    }

    Migrator::up(&db, None).await.unwrap();

    let units = entities::order_unit::Entity::find().all(&db).await.unwrap();
    let pending = units.iter().find(|u| u.id == "po_upgrade_2").unwrap();
    assert_eq!(pending.supplier_txn_id.as_deref(), Some("po_upgrade_2"));
    let delivered = units.iter().find(|u| u.id == "po_upgrade_1").unwrap();
    assert_eq!(
        delivered.supplier_txn_id, None,
        "settled units are left alone"
    );
    let carriers = entities::supplier_order::Entity::find()
        .all(&db)
        .await
        .unwrap();
    assert_eq!(carriers.len(), 1, "{carriers:?}");
    assert_eq!(carriers[0].id, "po_upgrade_2");
    assert_eq!(carriers[0].unit_count, 1);
    assert_eq!(carriers[0].package_code, "pl_fr_1gb_7d");
    assert_eq!(carriers[0].mode.as_str(), "live");
    assert_eq!(carriers[0].status.as_str(), "placing");
}
