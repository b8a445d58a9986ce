//! `POST /orders` and the order and eSIM reads: the order of checks and which
//! refusals bind the Idempotency-Key, replays, the 202 body and the money
//! already moved when it arrives, provisioning outcomes with exact refunds,
//! scoping by partner and mode, storms of concurrent orders on one float (one
//! node or two), a node that stops between the 202 and provisioning, and
//! supervision of the account actor.
//!
//! Money is checked through the API and in the database: the ledger rows of
//! an order, and every float against the running sum of its ledger.

use std::{
    collections::{HashMap, HashSet},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering},
    },
    time::Duration,
};

use base64::{Engine, engine::general_purpose::STANDARD};
use entities::{esim, float, idempotency_key, ledger_entry, order, order_unit, supplier_order};
use esim_reseller::domain::esim::is_valid_iccid;
use rand::seq::SliceRandom;
use reqwest::{Method, StatusCode};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder, Set,
    Statement,
};
use serde_json::{Value, json};

use crate::helpers::{
    TestApp, assert_error, balance, eventually, fund, get, live_partner, post_order, read,
    sandbox_key, spawn_app_with, spawn_node,
};

/// A cheap plan whose bronze price is not clamped by its cost floor.
const PLAN: &str = "pl_fr_1gb_7d";
const PLAN_LIST_CENTS: i64 = 349;
/// Bronze: 5% off 349 cents, rounded up to the cent.
const BRONZE_UNIT: i64 = 332;
/// Longest a test waits for an order to settle.
const SETTLE: Duration = Duration::from_secs(30);

/// Fast provisioning, a reconciler that re-drives at once, limits lifted.
const FAST: &[(&str, &str)] = &[
    ("supplier.retry_backoff_ms", "10"),
    ("supplier.poll_interval_ms", "20"),
    ("simulators.supplier_latency_ms", "0"),
    ("reconciler.interval_seconds", "1"),
    ("reconciler.grace_seconds", "0"),
    ("rate_limit.bands.bronze.write.limit", "100000"),
    ("rate_limit.bands.bronze.read.limit", "100000"),
    ("rate_limit.bands.sandbox.write.limit", "100000"),
    ("rate_limit.bands.sandbox.read.limit", "100000"),
];

// ---------------------------------------------------------------- harness

async fn order_app() -> TestApp {
    spawn_app_with(FAST).await
}

/// [`FAST`] with some values replaced or added.
fn fast_with<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut all: Vec<(&str, &str)> = FAST
        .iter()
        .filter(|(key, _)| extra.iter().all(|(k, _)| k != key))
        .copied()
        .collect();
    all.extend_from_slice(extra);
    all
}

async fn order_app_with(extra: &[(&str, &str)]) -> TestApp {
    spawn_app_with(&fast_with(extra)).await
}

async fn set_sandbox_float(app: &TestApp, partner_id: &str, cents: i64) {
    let (status, body) = read(
        app.operator(
            Method::PUT,
            &format!("/partners/{partner_id}/sandbox-float"),
        )
        .json(&json!({ "balance_cents": cents }))
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// Replaces the simulated supplier's whole fault set.
async fn set_faults(app: &TestApp, faults: Value) {
    let simulators = app.simulators.as_deref().expect("the simulators run");
    let response = app
        .client
        .post(format!("{simulators}/sim/supplier/faults"))
        .json(&faults)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
}

async fn set_partner_status(app: &TestApp, partner_id: &str, status: &str) {
    let (code, body) = read(
        app.operator(Method::PATCH, &format!("/partners/{partner_id}"))
            .json(&json!({ "status": status }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{body}");
}

fn new_key() -> String {
    format!("order-test-{}", uuid::Uuid::new_v4().simple())
}

fn order_body(quantity: i64) -> Value {
    json!({ "plan_id": PLAN, "quantity": quantity })
}

/// What `POST /orders` answered.
struct Answer {
    status: StatusCode,
    replayed: bool,
    location: Option<String>,
    body: Value,
}

impl Answer {
    fn order_id(&self) -> String {
        self.body["id"]
            .as_str()
            .unwrap_or_else(|| panic!("no order id in {}", self.body))
            .to_owned()
    }
}

/// `POST /orders` with a raw JSON body and an optional Idempotency-Key.
async fn post_raw(app: &TestApp, secret: &str, key: Option<&str>, body: String) -> Answer {
    let mut request = app
        .as_partner(secret, Method::POST, "/orders")
        .header("content-type", "application/json")
        .body(body);
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    let response = request.send().await.unwrap();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    let replayed = header("idempotency-replayed").is_some_and(|v| v == "true");
    let location = header("location");
    let (status, body) = read(response).await;
    Answer {
        status,
        replayed,
        location,
        body,
    }
}

async fn place(app: &TestApp, secret: &str, key: &str, body: &Value) -> Answer {
    post_raw(app, secret, Some(key), body.to_string()).await
}

/// Places an order that must be accepted; returns the 202 body.
async fn accepted(app: &TestApp, secret: &str, body: &Value) -> Value {
    let answer = place(app, secret, &new_key(), body).await;
    assert_eq!(answer.status, StatusCode::ACCEPTED, "{}", answer.body);
    answer.body
}

/// Polls the order until it leaves `processing`; returns it then.
async fn settled(app: &TestApp, secret: &str, id: &str) -> Value {
    eventually(&format!("order {id} to settle"), SETTLE, || async {
        let (status, order) = get(app, secret, &format!("/orders/{id}")).await;
        assert_eq!(status, StatusCode::OK, "{order}");
        (order["status"] != "processing").then_some(order)
    })
    .await
}

fn ids_of(page: &Value) -> Vec<String> {
    page["data"]
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {page}"))
        .iter()
        .map(|o| o["id"].as_str().unwrap().to_owned())
        .collect()
}

fn iccids_of(esims: &Value) -> Vec<String> {
    esims
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {esims}"))
        .iter()
        .map(|e| e["iccid"].as_str().unwrap().to_owned())
        .collect()
}

/// The partner's ledger, by `seq`.
async fn ledger_of(app: &TestApp, partner_id: &str) -> Vec<ledger_entry::Model> {
    ledger_entry::Entity::find()
        .filter(ledger_entry::Column::PartnerId.eq(partner_id))
        .order_by_asc(ledger_entry::Column::Seq)
        .all(&app.db)
        .await
        .unwrap()
}

fn rows_of<'a>(
    ledger: &'a [ledger_entry::Model],
    order_id: &str,
    kind: &str,
) -> Vec<&'a ledger_entry::Model> {
    ledger
        .iter()
        .filter(|r| r.order_id.as_deref() == Some(order_id) && r.kind.as_str() == kind)
        .collect()
}

async fn float_of(app: &TestApp, partner_id: &str, mode: &str) -> i64 {
    float::Entity::find_by_id((
        partner_id.to_owned(),
        entities::states::Mode::parse(mode).expect("a mode"),
    ))
    .one(&app.db)
    .await
    .unwrap()
    .expect("the float exists")
    .balance_cents
}

/// Every ledger row's `balance_after_cents` is the running sum of the rows up
/// to it, `seq` never repeats, and the live float equals the whole sum.
/// Returns the float.
async fn assert_ledger_matches_float(app: &TestApp, partner_id: &str) -> i64 {
    let ledger = ledger_of(app, partner_id).await;
    let mut running = 0;
    let mut seqs = HashSet::new();
    for row in &ledger {
        running += row.amount_cents;
        assert_eq!(row.balance_after_cents, running, "running sum at {row:?}");
        assert!(seqs.insert(row.seq), "seq {} repeated", row.seq);
    }
    let float = float_of(app, partner_id, "live").await;
    assert_eq!(float, running, "the float is the sum of the ledger");
    float
}

fn seed_plan(id: &str) -> Value {
    let seed: Value = serde_json::from_str(include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/catalogue.json"
    )))
    .unwrap();
    seed["plans"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == id)
        .unwrap_or_else(|| panic!("{id} is not in the seed"))
        .clone()
}

// ------------------------------------------------- validation and binding

#[tokio::test]
async fn a_missing_short_or_long_idempotency_key_is_refused_first_and_binds_nothing() {
    let app = order_app().await;
    let (partner_id, secret) = live_partner(&app).await;
    fund(&app, &partner_id, 10_000).await;
    let sixteen = "k".repeat(16);

    let missing = post_raw(&app, &secret, None, order_body(1).to_string()).await;
    let short = place(
        &app,
        &secret,
        &format!("  {}  ", "k".repeat(15)),
        &order_body(1),
    )
    .await;
    let long = place(&app, &secret, &"k".repeat(256), &order_body(1)).await;
    let missing_and_bad_body = post_raw(
        &app,
        &secret,
        None,
        json!({ "plan_id": "pk_x" }).to_string(),
    )
    .await;

    for answer in [&missing, &short, &long, &missing_and_bad_body] {
        let error = assert_error(answer.status, &answer.body, 400, "request.invalid");
        assert_eq!(error["param"], "Idempotency-Key", "{}", answer.body);
        assert!(!answer.replayed);
    }
    let padded = place(&app, &secret, &format!(" {sixteen} "), &order_body(1)).await;
    assert_eq!(padded.status, StatusCode::ACCEPTED, "{}", padded.body);
    let same_after_trim = place(&app, &secret, &sixteen, &order_body(1)).await;
    assert_eq!(
        same_after_trim.status,
        StatusCode::OK,
        "{}",
        same_after_trim.body
    );
    assert!(
        same_after_trim.replayed,
        "the key is compared after trimming"
    );
    assert_eq!(same_after_trim.body["id"], padded.body["id"]);
    let long_enough = place(&app, &secret, &"k".repeat(255), &order_body(1)).await;
    assert_eq!(
        long_enough.status,
        StatusCode::ACCEPTED,
        "{}",
        long_enough.body
    );
}

#[tokio::test]
async fn body_validation_failures_name_the_field_and_leave_the_key_usable() {
    let app = order_app().await;
    let (partner_id, secret) = live_partner(&app).await;
    fund(&app, &partner_id, 50 * BRONZE_UNIT).await;
    let key = new_key();
    let over_4096 = json!({ "note": "x".repeat(4086) });
    assert_eq!(over_4096.to_string().len(), 4097);
    let cases = [
        (json!({ "plan_id": "pk_x", "quantity": 1 }), "plan_id"),
        (
            json!({ "plan_id": format!("pl_{}", "a".repeat(62)), "quantity": 1 }),
            "plan_id",
        ),
        (json!({ "plan_id": 7, "quantity": 1 }), "plan_id"),
        (json!({ "quantity": 1 }), "plan_id"),
        (json!({ "plan_id": PLAN, "quantity": 0 }), "quantity"),
        (json!({ "plan_id": PLAN, "quantity": 51 }), "quantity"),
        (json!({ "plan_id": PLAN, "quantity": "2" }), "quantity"),
        (json!({ "plan_id": PLAN, "quantity": 1.5 }), "quantity"),
        (
            json!({ "plan_id": PLAN, "quantity": 1, "metadata": [1, 2] }),
            "metadata",
        ),
        (
            json!({ "plan_id": PLAN, "quantity": 1, "metadata": "a note" }),
            "metadata",
        ),
        (
            json!({ "plan_id": PLAN, "quantity": 1, "metadata": over_4096 }),
            "metadata",
        ),
        (
            json!({ "plan_id": PLAN, "quantity": 1, "colour": "red" }),
            "colour",
        ),
        // The body is checked before the plan is looked up.
        (
            json!({ "plan_id": "pl_does_not_exist", "quantity": 0 }),
            "quantity",
        ),
    ];

    for (body, param) in &cases {
        let answer = place(&app, &secret, &key, body).await;
        let error = assert_error(answer.status, &answer.body, 400, "request.invalid");
        assert_eq!(error["param"], *param, "{body} -> {}", answer.body);
        assert!(error["details"].is_array(), "{}", answer.body);
        assert!(!answer.replayed);
    }
    let not_json = post_raw(&app, &secret, Some(&key), "{\"plan_id\":".into()).await;
    assert_error(not_json.status, &not_json.body, 400, "request.invalid");

    let exactly_4096 = json!({ "note": "x".repeat(4085) });
    assert_eq!(exactly_4096.to_string().len(), 4096);
    let body = json!({ "plan_id": PLAN, "quantity": 50, "metadata": exactly_4096 });
    let answer = place(&app, &secret, &key, &body).await;
    assert_eq!(answer.status, StatusCode::ACCEPTED, "{}", answer.body);
    assert!(!answer.replayed);
    assert_eq!(answer.body["metadata"], exactly_4096);
    assert_eq!(answer.body["quantity"], 50);
}

#[tokio::test]
async fn a_body_naming_a_field_twice_is_refused_and_leaves_the_key_usable() {
    let app = order_app().await;
    let (partner_id, secret) = live_partner(&app).await;
    fund(&app, &partner_id, 10_000).await;
    let key = new_key();
    let twice = format!(r#"{{"plan_id": "{PLAN}", "quantity": 1, "quantity": 2}}"#);
    let answer = post_raw(&app, &secret, Some(&key), twice).await;
    let error = assert_error(answer.status, &answer.body, 400, "request.invalid");
    assert!(
        error["message"].as_str().unwrap().contains("`quantity`"),
        "{error}"
    );
    assert_eq!(balance(&app, &secret).await, 10_000);
    let answer = place(&app, &secret, &key, &order_body(1)).await;
    assert_eq!(answer.status, StatusCode::ACCEPTED, "{}", answer.body);
}

#[tokio::test]
async fn plan_refusals_leave_the_key_usable() {
    let app = order_app().await;
    let (partner_id, secret) = live_partner(&app).await;
    fund(&app, &partner_id, 10_000).await;
    let key = new_key();
    let plan = |id: &str| json!({ "plan_id": id, "quantity": 1 });

    let unknown = place(&app, &secret, &key, &plan("pl_does_not_exist")).await;
    let fixture = place(&app, &secret, &key, &plan("pl_sandbox_partial")).await;
    let inactive = place(&app, &secret, &key, &plan("pl_de_3gb_15d")).await;
    let unsellable = place(&app, &secret, &key, &plan("pl_cn_10gb_30d")).await;

    assert_error(unknown.status, &unknown.body, 404, "plan.not_found");
    let error = assert_error(fixture.status, &fixture.body, 404, "plan.not_found");
    assert_eq!(error["param"], "plan_id");
    assert_error(inactive.status, &inactive.body, 400, "plan.inactive");
    let error = assert_error(unsellable.status, &unsellable.body, 422, "plan.unavailable");
    assert!(!error["message"].as_str().unwrap().is_empty());
    let answer = place(&app, &secret, &key, &order_body(1)).await;
    assert_eq!(answer.status, StatusCode::ACCEPTED, "{}", answer.body);
    assert!(!answer.replayed);
    assert_eq!(balance(&app, &secret).await, 10_000 - BRONZE_UNIT);
}

#[tokio::test]
async fn an_insufficient_balance_binds_the_key_and_a_top_up_needs_a_new_key() {
    let app = order_app().await;
    let (partner_id, secret) = live_partner(&app).await;
    fund(&app, &partner_id, 300).await;
    let key = new_key();

    let refused = place(&app, &secret, &key, &order_body(1)).await;
    fund(&app, &partner_id, 1_000).await;
    let replayed = place(&app, &secret, &key, &order_body(1)).await;
    let other_body = place(&app, &secret, &key, &order_body(2)).await;
    let fresh = place(&app, &secret, &new_key(), &order_body(1)).await;

    let error = assert_error(refused.status, &refused.body, 402, "balance.insufficient");
    assert_eq!(error["type"], "insufficient_balance");
    assert_eq!(error["balance_cents"], 300);
    assert_eq!(error["required_cents"], BRONZE_UNIT);
    assert!(error.get("mode").is_none(), "mode only in sandbox: {error}");
    assert!(!refused.replayed);
    let error = assert_error(replayed.status, &replayed.body, 402, "balance.insufficient");
    assert!(replayed.replayed, "a bound 402 replays with the header");
    assert_eq!(error["balance_cents"], 300, "the bound refusal, as it was");
    assert_eq!(error["required_cents"], BRONZE_UNIT);
    let error = assert_error(
        other_body.status,
        &other_body.body,
        409,
        "idempotency.key_reused",
    );
    assert_eq!(error["param"], "Idempotency-Key");
    assert_eq!(fresh.status, StatusCode::ACCEPTED, "{}", fresh.body);
    assert_eq!(balance(&app, &secret).await, 1_300 - BRONZE_UNIT);
    let ledger = ledger_of(&app, &partner_id).await;
    assert_eq!(
        ledger
            .iter()
            .filter(|r| r.kind.as_str() == "purchase")
            .count(),
        1,
        "only the new key was charged"
    );
}

#[tokio::test]
async fn a_suspended_account_binds_the_key_and_reactivation_needs_a_new_key() {
    let app = order_app().await;
    let (partner_id, secret) = live_partner(&app).await;
    fund(&app, &partner_id, 10_000).await;
    let sandbox = sandbox_key(&app, &partner_id).await;
    let key = new_key();

    set_partner_status(&app, &partner_id, "suspended").await;
    let refused = place(&app, &secret, &key, &order_body(1)).await;
    let sandbox_order = place(&app, &sandbox, &new_key(), &order_body(1)).await;
    set_partner_status(&app, &partner_id, "live").await;
    let replayed = place(&app, &secret, &key, &order_body(1)).await;
    let fresh = place(&app, &secret, &new_key(), &order_body(1)).await;

    assert_error(refused.status, &refused.body, 403, "partner.suspended");
    assert!(!refused.replayed);
    assert_error(replayed.status, &replayed.body, 403, "partner.suspended");
    assert!(replayed.replayed, "a bound 403 replays with the header");
    assert_eq!(
        sandbox_order.status,
        StatusCode::ACCEPTED,
        "sandbox keys keep working: {}",
        sandbox_order.body
    );
    assert_eq!(fresh.status, StatusCode::ACCEPTED, "{}", fresh.body);
    assert_eq!(balance(&app, &secret).await, 10_000 - BRONZE_UNIT);
}

#[tokio::test]
async fn sandbox_refusals_for_balance_say_mode_sandbox() {
    let app = order_app().await;
    let (partner_id, _) = live_partner(&app).await;
    let secret = sandbox_key(&app, &partner_id).await;
    set_sandbox_float(&app, &partner_id, 100).await;

    let fixture = place(
        &app,
        &secret,
        &new_key(),
        &json!({ "plan_id": "pl_sandbox_insufficient_balance", "quantity": 1 }),
    )
    .await;
    let too_poor = place(&app, &secret, &new_key(), &order_body(1)).await;
    set_sandbox_float(&app, &partner_id, 1_000_000).await;
    let rich_fixture_key = new_key();
    let rich_fixture = place(
        &app,
        &secret,
        &rich_fixture_key,
        &json!({ "plan_id": "pl_sandbox_insufficient_balance", "quantity": 1 }),
    )
    .await;
    let rich_replay = place(
        &app,
        &secret,
        &rich_fixture_key,
        &json!({ "plan_id": "pl_sandbox_insufficient_balance", "quantity": 1 }),
    )
    .await;

    let error = assert_error(fixture.status, &fixture.body, 402, "balance.insufficient");
    assert_eq!(error["mode"], "sandbox");
    assert_eq!(error["balance_cents"], 100);
    let error = assert_error(too_poor.status, &too_poor.body, 402, "balance.insufficient");
    assert_eq!(error["mode"], "sandbox");
    assert_eq!(error["balance_cents"], 100);
    assert_eq!(error["required_cents"], BRONZE_UNIT);
    let error = assert_error(
        rich_fixture.status,
        &rich_fixture.body,
        402,
        "balance.insufficient",
    );
    assert_eq!(error["mode"], "sandbox", "the fixture ignores the balance");
    assert_eq!(error["balance_cents"], 1_000_000);
    assert!(rich_replay.replayed);
    assert_error(
        rich_replay.status,
        &rich_replay.body,
        402,
        "balance.insufficient",
    );
    assert_eq!(balance(&app, &secret).await, 1_000_000);
}

// ------------------------------------------------------------ idempotency

#[tokio::test]
async fn a_replayed_success_is_200_with_the_header_and_the_order_as_it_is_now() {
    let app = order_app().await;
    let (partner_id, secret) = live_partner(&app).await;
    fund(&app, &partner_id, 10_000).await;
    let key = new_key();
    let first = place(&app, &secret, &key, &order_body(2)).await;
    assert_eq!(first.status, StatusCode::ACCEPTED, "{}", first.body);
    let id = first.order_id();
    settled(&app, &secret, &id).await;

    let replay = place(&app, &secret, &key, &order_body(2)).await;

    assert_eq!(replay.status, StatusCode::OK, "{}", replay.body);
    assert!(replay.replayed);
    assert!(!first.replayed);
    assert_eq!(replay.body["id"], id.as_str());
    assert_eq!(replay.body["status"], "completed", "as it is now");
    assert_eq!(replay.body["esims"].as_array().unwrap().len(), 2);
    assert!(replay.body["poll_after_ms"].is_null());
    assert_eq!(balance(&app, &secret).await, 10_000 - 2 * BRONZE_UNIT);
    let ledger = ledger_of(&app, &partner_id).await;
    assert_eq!(rows_of(&ledger, &id, "purchase").len(), 1);
}

/// An account keeps only its recent keys in memory and takes the others for
/// new without reading them; the commit finds a key bound before. A retry
/// reaching an account that forgot its key (the actor was passivated and
/// started again) replays the order and charges nothing more, beside a new
/// order of the same moment, and still does after the plan went off sale
/// (a refusal that binds nothing never outranks the key's binding).
#[tokio::test]
async fn a_retry_after_the_account_forgot_its_key_replays_the_order_and_charges_once() {
    let app = order_app_with(&[("accounts.idle_seconds", "1")]).await;
    let (partner_id, secret) = live_partner(&app).await;
    fund(&app, &partner_id, 10_000).await;
    let key = new_key();
    let body = order_body(1);
    let first = place(&app, &secret, &key, &body).await;
    assert_eq!(first.status, StatusCode::ACCEPTED, "{}", first.body);
    passivated(&app, &partner_id).await;

    let other_key = new_key();
    let (again, other) = tokio::join!(
        place(&app, &secret, &key, &body),
        place(&app, &secret, &other_key, &body)
    );

    assert_eq!(again.status, StatusCode::OK, "{}", again.body);
    assert!(again.replayed);
    assert_eq!(again.order_id(), first.order_id());
    assert_eq!(other.status, StatusCode::ACCEPTED, "{}", other.body);
    assert!(!other.replayed);
    assert_eq!(balance(&app, &secret).await, 10_000 - 2 * BRONZE_UNIT);
    assert_eq!(
        assert_ledger_matches_float(&app, &partner_id).await,
        10_000 - 2 * BRONZE_UNIT
    );

    let (code, _) = read(
        app.operator(Method::PATCH, &format!("/plans/{PLAN}"))
            .json(&json!({ "active": false }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(code, StatusCode::OK);
    passivated(&app, &partner_id).await;
    let late = place(&app, &secret, &key, &body).await;
    assert_eq!(late.status, StatusCode::OK, "{}", late.body);
    assert!(late.replayed);
    assert_eq!(late.order_id(), first.order_id());
    assert_eq!(balance(&app, &secret).await, 10_000 - 2 * BRONZE_UNIT);
}

#[tokio::test]
async fn the_order_of_keys_in_the_json_body_does_not_matter_to_a_replay() {
    let app = order_app().await;
    let (partner_id, secret) = live_partner(&app).await;
    fund(&app, &partner_id, 10_000).await;
    let key = new_key();
    let first = format!(
        r#"{{"plan_id":"{PLAN}","quantity":1,"metadata":{{"a":1,"b":{{"x":[1,2],"y":"z"}}}}}}"#
    );
    let reordered = format!(
        r#"{{ "metadata": {{ "b": {{ "y": "z", "x": [1, 2] }}, "a": 1 }},
            "quantity": 1, "plan_id": "{PLAN}" }}"#
    );

    let accepted = post_raw(&app, &secret, Some(&key), first).await;
    let replayed = post_raw(&app, &secret, Some(&key), reordered).await;

    assert_eq!(accepted.status, StatusCode::ACCEPTED, "{}", accepted.body);
    assert_eq!(replayed.status, StatusCode::OK, "{}", replayed.body);
    assert!(replayed.replayed);
    assert_eq!(replayed.body["id"], accepted.body["id"]);
}

#[tokio::test]
async fn the_same_key_with_another_body_is_key_reused() {
    let app = order_app().await;
    let (partner_id, secret) = live_partner(&app).await;
    fund(&app, &partner_id, 10_000).await;
    let key = new_key();
    let first = place(&app, &secret, &key, &order_body(1)).await;
    assert_eq!(first.status, StatusCode::ACCEPTED, "{}", first.body);

    let others = [
        order_body(2),
        json!({ "plan_id": PLAN, "quantity": 1, "metadata": { "ref": "x" } }),
        json!({ "plan_id": "pl_fr_3gb_15d", "quantity": 1 }),
    ];
    for body in &others {
        let answer = place(&app, &secret, &key, body).await;
        let error = assert_error(answer.status, &answer.body, 409, "idempotency.key_reused");
        assert_eq!(error["type"], "idempotency_error");
        assert_eq!(error["param"], "Idempotency-Key");
    }
    assert_eq!(balance(&app, &secret).await, 10_000 - BRONZE_UNIT);
}

#[tokio::test]
async fn a_key_used_in_live_mode_is_refused_to_a_sandbox_key_of_the_same_partner() {
    let app = order_app().await;
    let (partner_id, live) = live_partner(&app).await;
    fund(&app, &partner_id, 10_000).await;
    let sandbox = sandbox_key(&app, &partner_id).await;
    let key = new_key();
    let first = place(&app, &live, &key, &order_body(1)).await;
    assert_eq!(first.status, StatusCode::ACCEPTED, "{}", first.body);

    let other_mode = place(&app, &sandbox, &key, &order_body(1)).await;

    let error = assert_error(
        other_mode.status,
        &other_mode.body,
        409,
        "idempotency.key_reused",
    );
    assert_eq!(error["param"], "Idempotency-Key");
    let (status, page) = get(&app, &sandbox, "/orders").await;
    assert_eq!(status, StatusCode::OK);
    assert!(ids_of(&page).is_empty(), "no sandbox order: {page}");
}

#[tokio::test]
async fn two_partners_may_use_the_same_key() {
    let app = order_app().await;
    let (first_id, first) = live_partner(&app).await;
    let (second_id, second) = live_partner(&app).await;
    fund(&app, &first_id, 10_000).await;
    fund(&app, &second_id, 10_000).await;
    let key = new_key();

    let a = place(&app, &first, &key, &order_body(1)).await;
    let b = place(&app, &second, &key, &order_body(1)).await;

    assert_eq!(a.status, StatusCode::ACCEPTED, "{}", a.body);
    assert_eq!(b.status, StatusCode::ACCEPTED, "{}", b.body);
    assert!(!b.replayed);
    assert_ne!(a.body["id"], b.body["id"]);
}

// ------------------------------------------------------------ the 202

#[tokio::test]
async fn the_202_snapshots_the_price_and_the_money_is_already_debited() {
    let app = order_app().await;
    let (partner_id, secret) = live_partner(&app).await;
    fund(&app, &partner_id, 10_000).await;
    let (status, quote) = get(&app, &secret, &format!("/plans/{PLAN}/price?quantity=3")).await;
    assert_eq!(status, StatusCode::OK, "{quote}");
    let metadata =
        json!({ "customer": { "ref": "A-1", "tags": ["x", 1, null] }, "z": true, "n": 1.25 });

    let answer = place(
        &app,
        &secret,
        &new_key(),
        &json!({ "plan_id": PLAN, "quantity": 3, "metadata": metadata }),
    )
    .await;

    let ledger = ledger_of(&app, &partner_id).await;
    assert_eq!(answer.status, StatusCode::ACCEPTED, "{}", answer.body);
    let order = &answer.body;
    let id = answer.order_id();
    assert!(id.starts_with("po_"), "{id}");
    assert_eq!(
        answer.location.as_deref(),
        Some(format!("/partner/v1/orders/{id}").as_str())
    );
    assert_eq!(order["object"], "order");
    assert_eq!(order["mode"], "live");
    assert_eq!(order["status"], "processing");
    assert_eq!(order["esims"], json!([]));
    assert!(order["completed_at"].is_null());
    assert!(order["failure_code"].is_null());
    assert!(
        order["poll_after_ms"].as_u64().is_some_and(|ms| ms > 0),
        "{order}"
    );
    assert!(order["created_at"].is_string());
    assert_eq!(order["plan_id"], PLAN);
    assert_eq!(order["quantity"], 3);
    assert_eq!(order["unit_price_cents"], BRONZE_UNIT);
    assert_eq!(order["unit_price_cents"], quote["unit_price_cents"]);
    assert_eq!(order["total_cents"], 3 * BRONZE_UNIT);
    assert_eq!(order["total_cents"], quote["total_cents"]);
    assert_eq!(order["list_unit_cents"], PLAN_LIST_CENTS);
    assert_eq!(
        order["discount_bps"],
        (PLAN_LIST_CENTS - BRONZE_UNIT) * 10_000 / PLAN_LIST_CENTS,
        "recomputed from the two prices"
    );
    assert_eq!(order["price_source"], "tier:bronze");
    assert_eq!(order["price_source"], quote["price_source"]);
    assert_eq!(order["currency"], "USD");
    assert_eq!(order["refunded_cents"], 0);
    assert_eq!(order["metadata"], metadata);

    let purchases = rows_of(&ledger, &id, "purchase");
    assert_eq!(purchases.len(), 1, "the purchase row exists at the 202");
    assert_eq!(purchases[0].amount_cents, -3 * BRONZE_UNIT);
    assert_eq!(purchases[0].balance_after_cents, 10_000 - 3 * BRONZE_UNIT);
    let units = order_unit::Entity::find()
        .filter(order_unit::Column::OrderId.eq(id.as_str()))
        .all(&app.db)
        .await
        .unwrap();
    // A unit's row is written when a supplier order takes it, not at the 202.
    assert!(units.len() <= 3, "{units:?}");
    assert!(
        units.iter().all(|u| u.supplier_txn_id.is_some()),
        "{units:?}"
    );
    assert_eq!(balance(&app, &secret).await, 10_000 - 3 * BRONZE_UNIT);
    assert_ledger_matches_float(&app, &partner_id).await;
}

#[tokio::test]
async fn a_sandbox_order_spends_the_sandbox_float_and_writes_no_ledger_row() {
    let app = order_app().await;
    let (partner_id, live) = live_partner(&app).await;
    let secret = sandbox_key(&app, &partner_id).await;
    set_sandbox_float(&app, &partner_id, 5_000).await;

    let answer = place(&app, &secret, &new_key(), &order_body(2)).await;

    assert_eq!(answer.status, StatusCode::ACCEPTED, "{}", answer.body);
    assert_eq!(answer.body["mode"], "sandbox");
    let total = answer.body["total_cents"].as_i64().unwrap();
    assert_eq!(balance(&app, &secret).await, 5_000 - total);
    assert_eq!(balance(&app, &live).await, 0, "the live float is untouched");
    assert!(ledger_of(&app, &partner_id).await.is_empty());
    let order = settled(&app, &secret, &answer.order_id()).await;
    assert_eq!(order["status"], "completed", "{order}");
    for esim in order["esims"].as_array().unwrap() {
        assert_eq!(esim["mode"], "sandbox");
    }
    assert!(ledger_of(&app, &partner_id).await.is_empty());
    assert_eq!(balance(&app, &secret).await, 5_000 - total);
}

// ------------------------------------------------- completion and reads

#[tokio::test]
async fn a_polled_live_order_completes_with_valid_profiles() {
    let app = order_app().await;
    let (partner_id, secret) = live_partner(&app).await;
    fund(&app, &partner_id, 10_000).await;
    let id = accepted(&app, &secret, &order_body(3)).await["id"]
        .as_str()
        .unwrap()
        .to_owned();

    let order = settled(&app, &secret, &id).await;

    assert_eq!(order["status"], "completed", "{order}");
    assert!(order["poll_after_ms"].is_null());
    assert!(order["completed_at"].is_string());
    assert!(order["failure_code"].is_null());
    assert_eq!(order["refunded_cents"], 0);
    let esims = order["esims"].as_array().unwrap();
    assert_eq!(esims.len(), 3);
    let iccids: HashSet<String> = iccids_of(&order["esims"]).into_iter().collect();
    assert_eq!(iccids.len(), 3, "one profile per unit");
    for esim in esims {
        let iccid = esim["iccid"].as_str().unwrap();
        assert!(is_valid_iccid(iccid), "{iccid}");
        assert_eq!(esim["object"], "esim");
        assert_eq!(esim["order_id"], id.as_str());
        assert_eq!(esim["plan_id"], PLAN);
        assert_eq!(esim["mode"], "live");
        assert!(esim["status"].is_string());
        assert!(esim["created_at"].is_string());
        let smdp = esim["smdp_address"].as_str().unwrap();
        let matching = esim["matching_id"].as_str().unwrap();
        assert!(!smdp.is_empty() && !matching.is_empty(), "{esim}");
        assert_eq!(esim["activation_code"], format!("LPA:1${smdp}${matching}"));
    }
    assert_eq!(balance(&app, &secret).await, 10_000 - 3 * BRONZE_UNIT);
    let ledger = ledger_of(&app, &partner_id).await;
    assert!(rows_of(&ledger, &id, "refund").is_empty());
}

#[tokio::test]
async fn esim_reads_serve_the_profile_its_install_payload_and_its_usage() {
    let app = order_app().await;
    let (partner_id, secret) = live_partner(&app).await;
    fund(&app, &partner_id, 10_000).await;
    let first = accepted(&app, &secret, &order_body(2)).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let second = accepted(&app, &secret, &order_body(1)).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let order = settled(&app, &secret, &first).await;
    settled(&app, &secret, &second).await;
    let esim = order["esims"][0].clone();
    let iccid = esim["iccid"].as_str().unwrap();

    let (status, by_order) = get(&app, &secret, &format!("/esims?order_id={first}")).await;
    let (all_status, all) = get(&app, &secret, "/esims").await;
    let (one_status, one) = get(&app, &secret, &format!("/esims/{iccid}")).await;
    let (install_status, install) = get(&app, &secret, &format!("/esims/{iccid}/install")).await;
    let (usage_status, usage) = get(&app, &secret, &format!("/esims/{iccid}/usage")).await;

    assert_eq!(status, StatusCode::OK, "{by_order}");
    let mut listed = iccids_of(&by_order["data"]);
    listed.sort();
    let mut expected = iccids_of(&order["esims"]);
    expected.sort();
    assert_eq!(listed, expected, "the order_id filter");
    assert_eq!(all_status, StatusCode::OK, "{all}");
    assert_eq!(all["data"].as_array().unwrap().len(), 3);
    assert_eq!(all["has_more"], false);
    assert_eq!(one_status, StatusCode::OK, "{one}");
    assert_eq!(one, esim);

    assert_eq!(install_status, StatusCode::OK, "{install}");
    assert_eq!(install["object"], "install_payload");
    assert_eq!(install["iccid"], iccid);
    assert_eq!(install["activation_code"], esim["activation_code"]);
    assert_eq!(install["smdp_address"], esim["smdp_address"]);
    assert_eq!(install["matching_id"], esim["matching_id"]);
    let apple = install["apple_install_url"].as_str().unwrap();
    assert!(
        apple.starts_with("https://esimsetup.apple.com/esim_qrcode_provisioning?carddata="),
        "{apple}"
    );
    let card_data: String = url_decode(apple.split_once("carddata=").unwrap().1);
    assert_eq!(card_data, esim["activation_code"].as_str().unwrap());
    let svg = install["qr_code_svg"].as_str().unwrap();
    assert!(svg.starts_with("<?xml") || svg.contains("<svg"), "{svg}");
    let png = STANDARD
        .decode(install["qr_code_png_base64"].as_str().unwrap())
        .expect("base64");
    assert!(
        png.starts_with(&[0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A]),
        "PNG signature"
    );

    assert_eq!(usage_status, StatusCode::OK, "{usage}");
    assert_eq!(usage["object"], "usage");
    assert_eq!(usage["iccid"], iccid);
    assert_eq!(usage["unlimited"], false);
    assert!(usage["as_of"].is_string());
    let used = usage["data_used_mb"].as_i64().unwrap();
    assert!(used >= 0);
    assert_eq!(
        usage["data_remaining_mb"].as_i64().unwrap(),
        (1024 - used).max(0),
        "{usage}"
    );
}

fn url_decode(encoded: &str) -> String {
    form_urlencoded::parse(format!("x={encoded}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_malformed_iccid_is_400_and_an_unknown_one_is_esim_not_found() {
    let app = order_app().await;
    let (_, secret) = live_partner(&app).await;

    for malformed in ["12345", "89abcdefghijklmnopq", "891234567890123456789"] {
        for suffix in ["", "/install", "/usage"] {
            let (status, body) = get(&app, &secret, &format!("/esims/{malformed}{suffix}")).await;
            let error = assert_error(status, &body, 400, "request.invalid");
            assert_eq!(error["param"], "iccid", "{malformed}{suffix}");
        }
    }
    for suffix in ["", "/install", "/usage"] {
        let (status, body) = get(
            &app,
            &secret,
            &format!("/esims/8999000000000000000{suffix}"),
        )
        .await;
        assert_error(status, &body, 404, "esim.not_found");
    }
    let (status, body) = get(&app, &secret, "/esims?order_id=pl_x").await;
    let error = assert_error(status, &body, 400, "request.invalid");
    assert_eq!(error["param"], "order_id");
}

#[tokio::test]
async fn the_order_list_is_newest_first_filters_by_status_and_time_and_pages_with_a_cursor() {
    let app = order_app().await;
    let (partner_id, secret) = live_partner(&app).await;
    fund(&app, &partner_id, 10_000).await;
    let mut orders = Vec::new();
    for n in 0..5 {
        if n == 2 {
            set_faults(&app, json!({ "reject_next": 1 })).await;
        }
        let id = accepted(&app, &secret, &order_body(1)).await["id"]
            .as_str()
            .unwrap()
            .to_owned();
        orders.push(settled(&app, &secret, &id).await);
    }
    let ids: Vec<String> = orders
        .iter()
        .map(|o| o["id"].as_str().unwrap().to_owned())
        .collect();
    let newest_first: Vec<String> = ids.iter().rev().cloned().collect();
    let middle_at = orders[2]["created_at"].as_str().unwrap().to_owned();
    let page = |query: Vec<(&'static str, String)>| {
        let app = &app;
        let secret = &secret;
        async move {
            let response = app
                .as_partner(secret, Method::GET, "/orders")
                .query(&query)
                .send()
                .await
                .unwrap();
            let (status, body) = read(response).await;
            assert_eq!(status, StatusCode::OK, "{query:?}: {body}");
            body
        }
    };

    let all = page(vec![]).await;
    let failed = page(vec![("status", "failed".into())]).await;
    let completed = page(vec![("status", "completed".into())]).await;
    let after = page(vec![("created_after", middle_at.clone())]).await;
    let before = page(vec![("created_before", middle_at.clone())]).await;
    let between = page(vec![
        (
            "created_after",
            orders[1]["created_at"].as_str().unwrap().into(),
        ),
        (
            "created_before",
            orders[3]["created_at"].as_str().unwrap().into(),
        ),
    ])
    .await;

    assert_eq!(orders[2]["status"], "failed", "{}", orders[2]);
    assert_eq!(ids_of(&all), newest_first);
    assert_eq!(all["has_more"], false);
    assert!(all["next_cursor"].is_null());
    assert_eq!(all["data"][0], orders[4], "list items are whole orders");
    assert_eq!(ids_of(&failed), vec![ids[2].clone()]);
    assert_eq!(
        ids_of(&completed),
        vec![
            ids[4].clone(),
            ids[3].clone(),
            ids[1].clone(),
            ids[0].clone()
        ]
    );
    assert_eq!(
        ids_of(&after),
        vec![ids[4].clone(), ids[3].clone()],
        "created_after is exclusive"
    );
    assert_eq!(
        ids_of(&before),
        vec![ids[1].clone(), ids[0].clone()],
        "created_before is exclusive"
    );
    assert_eq!(ids_of(&between), vec![ids[2].clone()]);

    let mut paged = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut query = vec![("limit", "2".to_owned())];
        if let Some(cursor) = &cursor {
            query.push(("cursor", cursor.clone()));
        }
        let body = page(query).await;
        pages += 1;
        paged.extend(ids_of(&body));
        match body["next_cursor"].as_str() {
            Some(next) => {
                assert_eq!(body["has_more"], true);
                assert_eq!(body["data"].as_array().unwrap().len(), 2);
                cursor = Some(next.to_owned());
            }
            None => {
                assert_eq!(body["has_more"], false);
                break;
            }
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(paged, newest_first);

    let (status, body) = get(&app, &secret, "/orders?status=shipped").await;
    assert_eq!(
        assert_error(status, &body, 400, "request.invalid")["param"],
        "status"
    );
    let (status, body) = get(&app, &secret, "/orders?cursor=not-a-cursor").await;
    assert_eq!(
        assert_error(status, &body, 400, "request.invalid")["param"],
        "cursor"
    );
    let (status, body) = get(&app, &secret, "/orders?colour=red").await;
    assert_error(status, &body, 400, "request.invalid");
}

// -------------------------------------------- failures and exact refunds

#[tokio::test]
async fn a_partial_sandbox_delivery_refunds_exactly_the_undelivered_units() {
    let app = order_app().await;
    let (partner_id, _) = live_partner(&app).await;
    let secret = sandbox_key(&app, &partner_id).await;
    set_sandbox_float(&app, &partner_id, 100_000).await;

    let answer = place(
        &app,
        &secret,
        &new_key(),
        &json!({ "plan_id": "pl_sandbox_partial", "quantity": 4 }),
    )
    .await;
    assert_eq!(answer.status, StatusCode::ACCEPTED, "{}", answer.body);
    let unit = answer.body["unit_price_cents"].as_i64().unwrap();
    assert_eq!(answer.body["total_cents"], 4 * unit);
    // (The balance is not read here: the sandbox supplier is fast enough to
    // refund the failed units before a read; the debit shows in the end.)
    let id = answer.order_id();

    let order = settled(&app, &secret, &id).await;

    assert_eq!(order["status"], "partially_completed", "{order}");
    assert_eq!(order["failure_code"], "supplier_error");
    assert_eq!(order["refunded_cents"], 2 * unit);
    assert_eq!(order["esims"].as_array().unwrap().len(), 2);
    assert!(order["poll_after_ms"].is_null());
    assert!(order["completed_at"].is_string());
    assert_eq!(balance(&app, &secret).await, 100_000 - 2 * unit);
    let units = order_unit::Entity::find()
        .filter(order_unit::Column::OrderId.eq(id.as_str()))
        .order_by_asc(order_unit::Column::UnitIndex)
        .all(&app.db)
        .await
        .unwrap();
    let statuses: Vec<&str> = units.iter().map(|u| u.status.as_str()).collect();
    assert_eq!(
        statuses,
        ["delivered", "refunded", "delivered", "refunded"],
        "every even unit fails"
    );
    assert!(ledger_of(&app, &partner_id).await.is_empty());
}

#[tokio::test]
async fn the_sandbox_supplier_error_fixture_refunds_the_whole_order_to_the_play_float() {
    let app = order_app().await;
    let (partner_id, _) = live_partner(&app).await;
    let secret = sandbox_key(&app, &partner_id).await;
    set_sandbox_float(&app, &partner_id, 100_000).await;

    let body = accepted(
        &app,
        &secret,
        &json!({ "plan_id": "pl_sandbox_supplier_error", "quantity": 3 }),
    )
    .await;
    let order = settled(&app, &secret, body["id"].as_str().unwrap()).await;

    assert_eq!(order["status"], "failed", "{order}");
    assert_eq!(order["failure_code"], "supplier_error");
    assert_eq!(order["refunded_cents"], order["total_cents"]);
    assert_eq!(order["esims"], json!([]));
    assert_eq!(balance(&app, &secret).await, 100_000);
    assert!(ledger_of(&app, &partner_id).await.is_empty());
}

#[tokio::test]
async fn a_supplier_refusing_every_unit_fails_the_order_with_one_refund_row_per_unit() {
    let app = order_app().await;
    let (partner_id, secret) = live_partner(&app).await;
    fund(&app, &partner_id, 10_000).await;
    set_faults(&app, json!({ "reject_next": 3 })).await;

    let body = accepted(&app, &secret, &order_body(3)).await;
    let id = body["id"].as_str().unwrap().to_owned();
    let order = settled(&app, &secret, &id).await;

    assert_eq!(order["status"], "failed", "{order}");
    assert_eq!(order["failure_code"], "supplier_error");
    assert_eq!(order["refunded_cents"], 3 * BRONZE_UNIT);
    assert_eq!(order["esims"], json!([]));
    assert!(order["poll_after_ms"].is_null());
    let ledger = ledger_of(&app, &partner_id).await;
    let refunds = rows_of(&ledger, &id, "refund");
    assert_eq!(refunds.len(), 3, "one refund row per unit");
    assert!(refunds.iter().all(|r| r.amount_cents == BRONZE_UNIT));
    assert_eq!(rows_of(&ledger, &id, "purchase").len(), 1);
    assert_eq!(
        rows_of(&ledger, &id, "purchase")[0].amount_cents,
        -3 * BRONZE_UNIT,
        "the purchase row is never edited"
    );
    assert_eq!(balance(&app, &secret).await, 10_000);
    assert_eq!(assert_ledger_matches_float(&app, &partner_id).await, 10_000);
}

#[tokio::test]
async fn a_catalogue_price_change_after_acceptance_does_not_change_the_refund() {
    // Allocation never finishes, so both units are refunded at the deadline.
    let app = order_app_with(&[
        ("simulators.supplier_latency_ms", "600000"),
        ("supplier.deadline_seconds", "2"),
    ])
    .await;
    let (partner_id, secret) = live_partner(&app).await;
    fund(&app, &partner_id, 10_000).await;
    let id = accepted(&app, &secret, &order_body(2)).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut dearer = seed_plan(PLAN);
    dearer["list_price_cents"] = json!(999);
    let (status, body) = read(
        app.operator(Method::POST, "/plans")
            .json(&json!([dearer]))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, quote) = get(&app, &secret, &format!("/plans/{PLAN}/price")).await;
    assert_eq!(
        quote["unit_price_cents"], 950,
        "the new price is live: {quote}"
    );
    let (_, before) = get(&app, &secret, &format!("/orders/{id}")).await;
    assert_eq!(
        before["status"], "processing",
        "the change lands before the refund"
    );

    let order = settled(&app, &secret, &id).await;

    assert_eq!(order["status"], "failed", "{order}");
    assert_eq!(order["failure_code"], "supplier_error");
    assert_eq!(order["unit_price_cents"], BRONZE_UNIT);
    assert_eq!(order["refunded_cents"], 2 * BRONZE_UNIT);
    let ledger = ledger_of(&app, &partner_id).await;
    let refunds = rows_of(&ledger, &id, "refund");
    assert_eq!(refunds.len(), 2);
    assert!(refunds.iter().all(|r| r.amount_cents == BRONZE_UNIT));
    assert_eq!(balance(&app, &secret).await, 10_000);
    assert_ledger_matches_float(&app, &partner_id).await;
}

/// The supplier orders that carried an order's units, and what the
/// simulated supplier saw.
async fn supplier_orders_of(app: &TestApp, order_id: &str) -> Vec<supplier_order::Model> {
    let units = order_unit::Entity::find()
        .filter(order_unit::Column::OrderId.eq(order_id))
        .all(&app.db)
        .await
        .unwrap();
    let ids: HashSet<String> = units
        .iter()
        .filter_map(|u| u.supplier_txn_id.clone())
        .collect();
    supplier_order::Entity::find()
        .filter(supplier_order::Column::Id.is_in(ids))
        .all(&app.db)
        .await
        .unwrap()
}

async fn supplier_stats(app: &TestApp) -> Value {
    let simulators = app.simulators.as_deref().expect("the simulators run");
    let (status, body) = read(
        app.client
            .get(format!("{simulators}/sim/supplier/stats"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    body
}

/// A funded live partner orders `quantity` units; returns the partner, its
/// key, the order id and the order once settled.
async fn order_settled(app: &TestApp, quantity: i64) -> (String, String, String, Value) {
    let (partner_id, secret) = live_partner(app).await;
    fund(app, &partner_id, 10_000).await;
    let id = accepted(app, &secret, &order_body(quantity)).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let order = settled(app, &secret, &id).await;
    (partner_id, secret, id, order)
}

#[tokio::test]
async fn a_supplier_failing_until_the_deadline_refunds_the_units_as_supplier_error() {
    // Every placement fails until the deadline leaves only the time to
    // place and allocate: transient failures are retried until then.
    let app = order_app_with(&[("supplier.deadline_seconds", "4")]).await;
    // Both units travel in one supplier order; every placement fails.
    set_faults(&app, json!({ "fail_rate": 1.0 })).await;

    let (partner_id, secret, id, order) = order_settled(&app, 2).await;

    assert_eq!(order["status"], "failed", "{order}");
    assert_eq!(order["failure_code"], "supplier_error");
    assert_eq!(order["refunded_cents"], order["total_cents"]);
    assert_eq!(order["esims"], json!([]));
    assert_eq!(
        balance(&app, &secret).await,
        10_000,
        "nothing charged in the end"
    );
    let ledger = ledger_of(&app, &partner_id).await;
    let net: i64 = ledger
        .iter()
        .filter(|r| r.order_id.as_deref() == Some(id.as_str()))
        .map(|r| r.amount_cents)
        .sum();
    assert_eq!(net, 0);
    assert_eq!(rows_of(&ledger, &id, "refund").len(), 2);
    let carriers = supplier_orders_of(&app, &id).await;
    assert_eq!(carriers.len(), 1, "{carriers:?}");
    assert_eq!(carriers[0].unit_count, 2);
    assert!(carriers[0].attempts >= 2, "retried: {carriers:?}");
    assert_eq!(carriers[0].status.as_str(), "failed");
    assert_eq!(
        supplier_stats(&app).await["orders"],
        0,
        "nothing was bought"
    );
    assert_ledger_matches_float(&app, &partner_id).await;
}

#[tokio::test]
async fn a_supplier_answer_later_than_the_time_out_is_retried_without_placing_twice() {
    let app = order_app_with(&[
        ("supplier.timeout_ms", "300"),
        ("supplier.retry_backoff_ms", "10"),
    ])
    .await;
    let (partner_id, secret) = live_partner(&app).await;
    fund(&app, &partner_id, 10_000).await;
    // The first placements take effect at the supplier but answer after the
    // time-out: the retries must find the same placement (same transaction id).
    set_faults(&app, json!({ "slow_next": 2, "slow_ms": 1500 })).await;

    let id = accepted(&app, &secret, &order_body(2)).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let order = settled(&app, &secret, &id).await;

    assert_eq!(order["status"], "completed", "{order}");
    let iccids = iccids_of(&order["esims"]);
    assert_eq!(iccids.len(), 2, "{order}");
    assert_ne!(iccids[0], iccids[1]);
    assert_eq!(order["refunded_cents"], 0);
    assert_eq!(balance(&app, &secret).await, 10_000 - 2 * BRONZE_UNIT);
    let carriers = supplier_orders_of(&app, &id).await;
    assert_eq!(carriers.len(), 1, "{carriers:?}");
    assert!(
        carriers[0].attempts >= 1 && carriers[0].last_error.is_some(),
        "the first placement timed out: {carriers:?}"
    );
    let stats = supplier_stats(&app).await;
    assert_eq!(
        stats["orders"], 1,
        "one supplier order, asked again: {stats}"
    );
    assert_eq!(stats["profiles"], 2, "{stats}");
    assert_ledger_matches_float(&app, &partner_id).await;
}

#[tokio::test]
async fn a_busy_answer_after_the_supplier_took_the_order_is_asked_again_under_the_same_id() {
    let app = order_app().await;
    // 900001 "system busy" after the order was taken: refunding would lose
    // the profiles bought; asking again under the same id finds them.
    set_faults(&app, json!({ "busy_next": 1 })).await;

    let (partner_id, secret, _, order) = order_settled(&app, 1).await;

    assert_eq!(order["status"], "completed", "{order}");
    assert_eq!(iccids_of(&order["esims"]).len(), 1);
    let stats = supplier_stats(&app).await;
    assert_eq!(stats["orders"], 1, "{stats}");
    assert_eq!(balance(&app, &secret).await, 10_000 - BRONZE_UNIT);
    assert_ledger_matches_float(&app, &partner_id).await;
}

#[tokio::test]
async fn a_refusal_for_insufficient_supplier_balance_refunds_at_once() {
    let app = order_app().await;
    set_faults(&app, json!({ "reject_next": 1, "reject_code": "200007" })).await;

    let (partner_id, secret, id, order) = order_settled(&app, 2).await;

    assert_eq!(order["status"], "failed", "{order}");
    assert_eq!(order["failure_code"], "supplier_error");
    assert_eq!(order["refunded_cents"], 2 * BRONZE_UNIT);
    let carriers = supplier_orders_of(&app, &id).await;
    assert_eq!(carriers[0].attempts, 0, "a refusal is not retried");
    assert!(
        carriers[0]
            .last_error
            .as_deref()
            .unwrap_or("")
            .contains("200007"),
        "{carriers:?}"
    );
    assert_eq!(balance(&app, &secret).await, 10_000);
    assert_ledger_matches_float(&app, &partner_id).await;
}

#[tokio::test]
async fn units_of_concurrent_orders_of_several_partners_share_supplier_orders() {
    // A window long enough for all three orders to reach the placer, even
    // on a loaded machine.
    let app = order_app_with(&[("supplier.batch_window_ms", "2000")]).await;
    let mut partners = Vec::new();
    for _ in 0..3 {
        let (partner_id, secret) = live_partner(&app).await;
        fund(&app, &partner_id, 10_000).await;
        partners.push((partner_id, secret));
    }
    let orders = futures::future::join_all(partners.iter().map(|(_, secret)| {
        let app = &app;
        async move {
            accepted(app, secret, &order_body(3)).await["id"]
                .as_str()
                .unwrap()
                .to_owned()
        }
    }))
    .await;
    let mut iccids = HashSet::new();
    for ((_, secret), id) in partners.iter().zip(&orders) {
        let order = settled(&app, secret, id).await;
        assert_eq!(order["status"], "completed", "{order}");
        iccids.extend(iccids_of(&order["esims"]));
    }
    assert_eq!(iccids.len(), 9, "every unit its own profile");
    let carriers: HashSet<String> = {
        let mut all = HashSet::new();
        for id in &orders {
            all.extend(supplier_orders_of(&app, id).await.into_iter().map(|c| c.id));
        }
        all
    };
    let stats = supplier_stats(&app).await;
    assert!(
        carriers.len() < 3,
        "nine units of three partners in fewer supplier orders than orders: {carriers:?}"
    );
    assert_eq!(
        stats["orders"].as_u64(),
        Some(carriers.len() as u64),
        "{stats}"
    );
    for (partner_id, _) in &partners {
        assert_ledger_matches_float(&app, partner_id).await;
    }
}

#[tokio::test]
async fn garbage_and_errors_from_the_supplier_are_retried_and_the_order_completes() {
    let app = order_app_with(&[("supplier.retry_backoff_ms", "10")]).await;
    let (partner_id, secret) = live_partner(&app).await;
    fund(&app, &partner_id, 10_000).await;
    set_faults(&app, json!({ "garbage_next": 2, "fail_next": 2 })).await;

    let id = accepted(&app, &secret, &order_body(1)).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let order = settled(&app, &secret, &id).await;

    assert_eq!(order["status"], "completed", "{order}");
    assert_eq!(iccids_of(&order["esims"]).len(), 1);
    assert_eq!(balance(&app, &secret).await, 10_000 - BRONZE_UNIT);
    assert_ledger_matches_float(&app, &partner_id).await;
}

#[tokio::test]
async fn a_provisioning_claim_is_held_renewed_and_released_only_by_its_node() {
    use esim_reseller::store::orders::{Renewal, claim, release, renew};
    // This node accepts but does not provision, so the order starts unclaimed.
    let app = order_app_with(&[("provisioning.enabled", "false")]).await;
    let (partner_id, secret) = live_partner(&app).await;
    fund(&app, &partner_id, 10_000).await;
    let id = accepted(&app, &secret, &order_body(1)).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let now = chrono::Utc::now();
    let lease = chrono::Duration::seconds(60);
    // Both nodes beat: only the lease decides between them here.
    let alive_since = now - chrono::Duration::seconds(15);
    for node in ["nd_a", "nd_b"] {
        esim_reseller::store::nodes::beat(&app.db, node, now, now)
            .await
            .unwrap();
    }
    let claimed_by = |app: &TestApp, id: &str| {
        let (db, id) = (app.db.clone(), id.to_owned());
        async move {
            order::Entity::find_by_id(id)
                .one(&db)
                .await
                .unwrap()
                .unwrap()
                .claimed_by
        }
    };

    assert!(
        claim(&app.db, &id, "nd_a", now, now + lease, alive_since)
            .await
            .unwrap()
    );
    assert!(
        !claim(&app.db, &id, "nd_b", now, now + lease, alive_since)
            .await
            .unwrap(),
        "held by a"
    );
    assert!(
        claim(&app.db, &id, "nd_a", now, now + lease, alive_since)
            .await
            .unwrap(),
        "a again: its own"
    );
    assert_eq!(
        renew(&app.db, &id, "nd_a", now + lease).await.unwrap(),
        Renewal::Renewed
    );
    assert_eq!(
        renew(&app.db, &id, "nd_b", now + lease).await.unwrap(),
        Renewal::Lost,
        "b holds nothing"
    );
    release(&app.db, &id, "nd_b").await.unwrap();
    assert_eq!(
        claimed_by(&app, &id).await.as_deref(),
        Some("nd_a"),
        "b cannot release a's claim"
    );

    // a stalls past its lease: b may take over, and a's renewal then fails.
    let later = now + lease + chrono::Duration::seconds(1);
    assert!(
        claim(&app.db, &id, "nd_b", later, later + lease, alive_since)
            .await
            .unwrap()
    );
    assert_eq!(
        renew(&app.db, &id, "nd_a", later + lease).await.unwrap(),
        Renewal::Lost,
        "a lost it"
    );
    release(&app.db, &id, "nd_a").await.unwrap();
    assert_eq!(claimed_by(&app, &id).await.as_deref(), Some("nd_b"));
    release(&app.db, &id, "nd_b").await.unwrap();
    assert_eq!(claimed_by(&app, &id).await, None);

    // Settled while a renewal was due: nothing is lost, nothing to hold.
    let mut settled: order::ActiveModel = order::Entity::find_by_id(id.clone())
        .one(&app.db)
        .await
        .unwrap()
        .unwrap()
        .into();
    settled.status = Set(entities::states::OrderStatus::Completed);
    settled.update(&app.db).await.unwrap();
    assert_eq!(
        renew(&app.db, &id, "nd_b", later + lease).await.unwrap(),
        Renewal::Final
    );
}

/// Places `count` orders of the slow sandbox plan (its supplier order takes
/// `sandbox.slow_provisioning_ms`) for a new partner and waits until every
/// unit is in a supplier order; returns the sandbox key and the order ids.
async fn slow_sandbox_orders(app: &TestApp, count: usize) -> (String, Vec<String>) {
    let (partner_id, _) = live_partner(app).await;
    let sandbox = sandbox_key(app, &partner_id).await;
    set_sandbox_float(app, &partner_id, 1_000_000).await;
    let mut ids = Vec::new();
    for _ in 0..count {
        let body = json!({ "plan_id": "pl_sandbox_slow", "quantity": 1 });
        let placed = place(app, &sandbox, &new_key(), &body).await;
        assert_eq!(placed.status, StatusCode::ACCEPTED, "{}", placed.body);
        ids.push(placed.order_id());
    }
    eventually("every unit in a supplier order", SETTLE, || async {
        let units = order_unit::Entity::find()
            .filter(order_unit::Column::OrderId.is_in(ids.clone()))
            .all(&app.db)
            .await
            .unwrap();
        (units.len() == count && units.iter().all(|u| u.supplier_txn_id.is_some())).then_some(())
    })
    .await;
    (sandbox, ids)
}

#[tokio::test]
async fn a_node_renews_all_its_claims_together_and_leaves_another_nodes_alone() {
    // A lease of 3 s: the node renews its claims every second.
    let app = order_app_with(&[
        ("provisioning.lease_seconds", "3"),
        ("sandbox.slow_provisioning_ms", "600000"),
    ])
    .await;
    let (_, ids) = slow_sandbox_orders(&app, 3).await;
    let orders = |ids: Vec<String>| {
        let db = app.db.clone();
        async move {
            let mut found = Vec::new();
            for id in ids {
                found.push(
                    order::Entity::find_by_id(id)
                        .one(&db)
                        .await
                        .unwrap()
                        .unwrap(),
                );
            }
            found
        }
    };
    let before = orders(ids.clone()).await;
    let node = before[0].claimed_by.clone().expect("claimed at acceptance");
    // Another node (alive) holds the third order now: this one stalled, say.
    let now = chrono::Utc::now();
    esim_reseller::store::nodes::beat(&app.db, "nd_other", now, now)
        .await
        .unwrap();
    // Whole seconds: PostgreSQL keeps microseconds, not nanoseconds.
    let theirs = chrono::SubsecRound::trunc_subsecs(now + chrono::Duration::hours(1), 0);
    let mut taken: order::ActiveModel = before[2].clone().into();
    taken.claimed_by = Set(Some("nd_other".into()));
    taken.claimed_until = Set(Some(theirs));
    taken.update(&app.db).await.unwrap();

    // One renewal statement for both: they end with the very same lease.
    let renewed = eventually("both claims renewed by one statement", SETTLE, || async {
        let now = orders(ids[..2].to_vec()).await;
        let moved = now
            .iter()
            .zip(&before)
            .all(|(now, was)| now.claimed_until > was.claimed_until);
        (moved && now[0].claimed_until == now[1].claimed_until).then_some(now)
    })
    .await;
    let other = orders(vec![ids[2].clone()]).await.remove(0);

    for order in &renewed {
        assert_eq!(order.claimed_by.as_deref(), Some(node.as_str()));
        assert_eq!(order.status, entities::states::OrderStatus::Processing);
    }
    assert_eq!(
        other.claimed_by.as_deref(),
        Some("nd_other"),
        "not taken back"
    );
    assert_eq!(other.claimed_until, Some(theirs), "their lease untouched");

    // That node's lease lapses (it died): this node's reconciler takes the
    // order back, which it can only do once the pass that found its claim
    // lost let go of the order.
    let mut lapsed: order::ActiveModel = other.clone().into();
    lapsed.claimed_until = Set(Some(now - chrono::Duration::minutes(1)));
    lapsed.update(&app.db).await.unwrap();
    let back = eventually("the order taken back by this node", SETTLE, || async {
        let order = orders(vec![ids[2].clone()]).await.remove(0);
        (order.claimed_by.as_deref() == Some(node.as_str())).then_some(order)
    })
    .await;
    assert!(
        back.attempts > other.attempts,
        "a new pass claimed it: {back:?}"
    );
}

// -------------------------------------------------------------- scoping

#[tokio::test]
async fn orders_and_esims_are_scoped_to_partner_and_mode() {
    let app = order_app().await;
    let (partner_id, live) = live_partner(&app).await;
    fund(&app, &partner_id, 10_000).await;
    let sandbox = sandbox_key(&app, &partner_id).await;
    let (_, stranger) = live_partner(&app).await;
    let live_id = accepted(&app, &live, &order_body(1)).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let sandbox_id = accepted(&app, &sandbox, &order_body(1)).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let live_iccid = settled(&app, &live, &live_id).await["esims"][0]["iccid"]
        .as_str()
        .unwrap()
        .to_owned();
    let sandbox_iccid = settled(&app, &sandbox, &sandbox_id).await["esims"][0]["iccid"]
        .as_str()
        .unwrap()
        .to_owned();

    for (secret, id) in [
        (&live, &sandbox_id),
        (&sandbox, &live_id),
        (&stranger, &live_id),
        (&stranger, &sandbox_id),
    ] {
        let (status, body) = get(&app, secret, &format!("/orders/{id}")).await;
        assert_error(status, &body, 404, "order.not_found");
    }
    for (secret, iccid) in [
        (&live, &sandbox_iccid),
        (&sandbox, &live_iccid),
        (&stranger, &live_iccid),
    ] {
        for suffix in ["", "/install", "/usage"] {
            let (status, body) = get(&app, secret, &format!("/esims/{iccid}{suffix}")).await;
            assert_error(status, &body, 404, "esim.not_found");
        }
    }
    for (secret, orders, esims) in [
        (&live, vec![live_id.clone()], vec![live_iccid.clone()]),
        (
            &sandbox,
            vec![sandbox_id.clone()],
            vec![sandbox_iccid.clone()],
        ),
        (&stranger, vec![], vec![]),
    ] {
        let (_, order_page) = get(&app, secret, "/orders").await;
        let (_, esim_page) = get(&app, secret, "/esims").await;
        assert_eq!(ids_of(&order_page), orders);
        assert_eq!(iccids_of(&esim_page["data"]), esims);
    }
    let (status, page) = get(&app, &stranger, &format!("/esims?order_id={live_id}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(page["data"], json!([]));
    let (status, body) = get(&app, &live, "/orders/pl_x").await;
    assert_eq!(
        assert_error(status, &body, 400, "request.invalid")["param"],
        "id"
    );
}

// ---------------------------------------------------------- concurrency

/// One answer seen by a storm task.
#[derive(Debug, Clone)]
struct Seen {
    status: u16,
    replayed: bool,
    order_id: Option<String>,
}

async fn send_order(client: &reqwest::Client, url: &str, secret: &str, key: &str) -> Seen {
    let response = client
        .post(url)
        .bearer_auth(secret)
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body(order_body(1).to_string())
        .send()
        .await
        .unwrap();
    let replayed = response
        .headers()
        .get("idempotency-replayed")
        .is_some_and(|v| v == "true");
    let (status, body) = read(response).await;
    Seen {
        status: status.as_u16(),
        replayed,
        order_id: body["id"].as_str().map(str::to_owned),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_storm_of_concurrent_orders_spends_the_float_exactly_and_charges_each_key_once() {
    storm("batch", 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_storm_with_one_commit_per_order_spends_the_float_exactly_too() {
    storm("per_request", 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_storm_spread_over_two_nodes_on_one_database_spends_the_float_exactly() {
    storm("batch", 2).await;
}

/// One live partner funded for exactly `K` orders; `4K` unique keys sent at
/// once, some raced by several senders with the same key and body, some
/// retried after their answer, while `GET /balance` is polled. With two
/// nodes each request goes to either, so same-key races cross nodes and each
/// node's account actor sees money the other moved.
async fn storm(commit_mode: &str, nodes: usize) {
    const K: usize = 10;
    let overrides = fast_with(&[("store.commit_mode", commit_mode)]);
    let app = spawn_app_with(&overrides).await;
    let mut others = Vec::new();
    for _ in 1..nodes {
        others.push(spawn_node(&app.database_url, &overrides).await);
    }
    let (partner_id, secret) = live_partner(&app).await;
    let funding = BRONZE_UNIT * K as i64;
    fund(&app, &partner_id, funding).await;
    let keys: Vec<String> = (0..4 * K).map(|_| new_key()).collect();
    // Every key once; every fifth key raced by three more senders at once; every
    // seventh sender retries once after its answer.
    let mut sends: Vec<String> = keys.clone();
    for key in keys.iter().step_by(5) {
        sends.extend(std::iter::repeat_n(key.clone(), 3));
    }
    sends.shuffle(&mut rand::rng());
    let urls: Vec<String> = std::iter::once(&app)
        .chain(&others)
        .map(|node| format!("{}/partner/v1/orders", node.public))
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let lowest = Arc::new(AtomicI64::new(i64::MAX));
    let polls = Arc::new(AtomicUsize::new(0));
    let watcher = tokio::spawn({
        let (client, url, secret) = (
            app.client.clone(),
            format!("{}/partner/v1/balance", app.public),
            secret.clone(),
        );
        let (stop, lowest, polls) = (stop.clone(), lowest.clone(), polls.clone());
        async move {
            while !stop.load(Ordering::SeqCst) {
                let response = client.get(&url).bearer_auth(&secret).send().await.unwrap();
                let (status, body) = read(response).await;
                assert_eq!(status, StatusCode::OK, "{body}");
                lowest.fetch_min(body["balance_cents"].as_i64().unwrap(), Ordering::SeqCst);
                polls.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    let barrier = Arc::new(tokio::sync::Barrier::new(sends.len()));

    let tasks: Vec<_> = sends
        .into_iter()
        .enumerate()
        .map(|(n, key)| {
            let (client, url, secret, barrier) = (
                app.client.clone(),
                urls[n % urls.len()].clone(),
                secret.clone(),
                barrier.clone(),
            );
            tokio::spawn(async move {
                barrier.wait().await;
                let mut seen = vec![send_order(&client, &url, &secret, &key).await];
                if n % 7 == 0 {
                    seen.push(send_order(&client, &url, &secret, &key).await);
                }
                (key, seen)
            })
        })
        .collect();
    let mut by_key: HashMap<String, Vec<Seen>> = HashMap::new();
    for task in futures::future::join_all(tasks).await {
        let (key, seen) = task.unwrap();
        by_key.entry(key).or_default().extend(seen);
    }
    stop.store(true, Ordering::SeqCst);
    watcher.await.unwrap();

    assert!(polls.load(Ordering::SeqCst) > 0);
    assert!(
        lowest.load(Ordering::SeqCst) >= 0,
        "the balance went negative"
    );
    assert_eq!(by_key.len(), 4 * K);
    let mut accepted: HashSet<String> = HashSet::new();
    let mut refused = 0;
    for (key, seen) in &by_key {
        let firsts: Vec<&Seen> = seen.iter().filter(|s| !s.replayed).collect();
        assert_eq!(firsts.len(), 1, "one first answer per key {key}: {seen:?}");
        match firsts[0].status {
            202 => {
                let id = firsts[0].order_id.clone().unwrap();
                for replay in seen.iter().filter(|s| s.replayed) {
                    assert_eq!(replay.status, 200, "{key}: {seen:?}");
                    assert_eq!(replay.order_id.as_deref(), Some(id.as_str()));
                }
                assert!(accepted.insert(id), "one order per key");
            }
            402 => {
                assert!(seen.iter().all(|s| s.status == 402), "{key}: {seen:?}");
                refused += 1;
            }
            other => panic!("unexpected {other} for {key}: {seen:?}"),
        }
    }
    assert_eq!(accepted.len(), K, "exactly K orders fit the float");
    assert_eq!(refused, 3 * K, "every other key was refused for balance");

    let ledger = ledger_of(&app, &partner_id).await;
    let purchases: Vec<&ledger_entry::Model> = ledger
        .iter()
        .filter(|r| r.kind.as_str() == "purchase")
        .collect();
    let charged: HashSet<String> = purchases
        .iter()
        .map(|r| r.order_id.clone().unwrap())
        .collect();
    assert_eq!(purchases.len(), K, "each accepted order charged once");
    assert_eq!(charged, accepted);
    assert!(purchases.iter().all(|r| r.amount_cents == -BRONZE_UNIT));
    let bindings = idempotency_key::Entity::find()
        .filter(idempotency_key::Column::PartnerId.eq(partner_id.as_str()))
        .all(&app.db)
        .await
        .unwrap();
    assert_eq!(bindings.len(), 4 * K);
    assert_eq!(bindings.iter().filter(|b| b.order_id.is_some()).count(), K);
    assert_eq!(
        bindings
            .iter()
            .filter(|b| b
                .error_body
                .as_ref()
                .is_some_and(|e| e["code"] == "balance.insufficient"))
            .count(),
        3 * K
    );
    let stored = order::Entity::find()
        .filter(order::Column::PartnerId.eq(partner_id.as_str()))
        .all(&app.db)
        .await
        .unwrap();
    assert_eq!(stored.len(), K);
    assert_eq!(assert_ledger_matches_float(&app, &partner_id).await, 0);
    assert_eq!(balance(&app, &secret).await, 0);
    let moved_by_orders: i64 = ledger
        .iter()
        .filter(|r| r.kind.as_str() != "adjustment")
        .map(|r| r.amount_cents)
        .sum();
    assert_eq!(funding + moved_by_orders, 0, "funding plus the order rows");

    eventually("every accepted order to complete", SETTLE, || async {
        let done = order::Entity::find()
            .filter(order::Column::PartnerId.eq(partner_id.as_str()))
            .filter(order::Column::Status.eq("completed"))
            .all(&app.db)
            .await
            .unwrap();
        (done.len() == K).then_some(())
    })
    .await;
    assert_eq!(assert_ledger_matches_float(&app, &partner_id).await, 0);
}

/// A key that loses its race at every attempt (a trigger fails its binding
/// as a unique violation, as when another node binds it first each time)
/// costs only its own request a `409 conflict`: the requests that shared its
/// batch are decided again one by one and accepted, and charged once each.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_key_outraced_at_every_attempt_costs_only_its_own_request_a_409() {
    const PLAIN: usize = 31;
    let app = spawn_app_with(FAST).await;
    let (partner_id, secret) = live_partner(&app).await;
    let funding = BRONZE_UNIT * (PLAIN as i64 + 1);
    fund(&app, &partner_id, funding).await;
    let raced = new_key();
    bind_always_fails(&app, &raced).await;
    let keys: Vec<String> = (0..PLAIN).map(|_| new_key()).collect();
    // All at once, so that the raced key shares its batch with others.
    let barrier = Arc::new(tokio::sync::Barrier::new(PLAIN + 1));
    let sends = keys.iter().chain(std::iter::once(&raced)).map(|key| {
        let (app, secret, barrier) = (&app, secret.as_str(), barrier.clone());
        async move {
            barrier.wait().await;
            post_order(app, secret, key, &order_body(1)).await
        }
    });
    let answers = futures::future::join_all(sends).await;

    let (raced_answer, plain_answers) = answers.split_last().unwrap();
    for (status, body) in plain_answers {
        assert_eq!(*status, StatusCode::ACCEPTED, "{body}");
    }
    assert_error(raced_answer.0, &raced_answer.1, 409, "conflict");
    let purchases = ledger_of(&app, &partner_id)
        .await
        .into_iter()
        .filter(|r| r.kind.as_str() == "purchase")
        .count();
    assert_eq!(purchases, PLAIN, "each accepted order charged once");
    assert_eq!(balance(&app, &secret).await, BRONZE_UNIT);
    assert_eq!(
        assert_ledger_matches_float(&app, &partner_id).await,
        BRONZE_UNIT
    );
}

/// Makes binding `key` fail as a unique violation every time: a trigger on
/// the key bindings inserts a value that is already taken.
async fn bind_always_fails(app: &TestApp, key: &str) {
    let backend = app.db.get_database_backend();
    let mut statements = vec![
        "CREATE TABLE taken (k TEXT UNIQUE)".to_owned(),
        "INSERT INTO taken VALUES ('x')".to_owned(),
    ];
    match backend {
        sea_orm::DbBackend::Postgres => statements.extend([
            format!(
                "CREATE FUNCTION bind_always_fails() RETURNS trigger LANGUAGE plpgsql AS $$ \
                 BEGIN IF NEW.key = '{key}' THEN INSERT INTO taken VALUES ('x'); END IF; \
                 RETURN NEW; END $$"
            ),
            "CREATE TRIGGER bind_always_fails BEFORE INSERT ON idempotency_keys \
             FOR EACH ROW EXECUTE FUNCTION bind_always_fails()"
                .to_owned(),
        ]),
        _ => statements.push(format!(
            "CREATE TRIGGER bind_always_fails BEFORE INSERT ON idempotency_keys \
             WHEN NEW.key = '{key}' BEGIN INSERT INTO taken VALUES ('x'); END"
        )),
    }
    for sql in statements {
        app.db
            .execute_raw(Statement::from_string(backend, sql))
            .await
            .unwrap();
    }
}

/// Many partners at once through two nodes on one database: each node's
/// shared writer commits many partners' batches in one transaction, and the
/// two nodes race on every float, so debit guards fire under merged commits.
/// Each partner is funded for exactly `K` orders and sends `3K` keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_storm_over_many_partners_on_two_nodes_spends_every_float_exactly() {
    const PARTNERS: usize = 8;
    const K: usize = 5;
    let app = spawn_app_with(FAST).await;
    let other = spawn_node(&app.database_url, FAST).await;
    let mut partners = Vec::new();
    for _ in 0..PARTNERS {
        let (partner_id, secret) = live_partner(&app).await;
        fund(&app, &partner_id, BRONZE_UNIT * K as i64).await;
        partners.push((partner_id, secret));
    }
    let urls = [
        format!("{}/partner/v1/orders", app.public),
        format!("{}/partner/v1/orders", other.public),
    ];
    let sends: Vec<(usize, String)> = (0..PARTNERS)
        .flat_map(|p| (0..3 * K).map(move |_| (p, new_key())))
        .collect();
    let barrier = Arc::new(tokio::sync::Barrier::new(sends.len()));
    let tasks: Vec<_> = sends
        .into_iter()
        .enumerate()
        .map(|(n, (p, key))| {
            let (client, url, secret, barrier) = (
                app.client.clone(),
                urls[n % 2].clone(),
                partners[p].1.clone(),
                barrier.clone(),
            );
            tokio::spawn(async move {
                barrier.wait().await;
                (p, send_order(&client, &url, &secret, &key).await)
            })
        })
        .collect();
    let mut accepted: Vec<HashSet<String>> = vec![HashSet::new(); PARTNERS];
    for task in futures::future::join_all(tasks).await {
        let (p, seen) = task.unwrap();
        match seen.status {
            202 => assert!(accepted[p].insert(seen.order_id.unwrap())),
            402 => {}
            other => panic!("unexpected {other}: {seen:?}"),
        }
    }

    for (p, (partner_id, secret)) in partners.iter().enumerate() {
        assert_eq!(accepted[p].len(), K, "partner {p}: exactly K orders fit");
        let ledger = ledger_of(&app, partner_id).await;
        let charged: HashSet<String> = ledger
            .iter()
            .filter(|r| r.kind.as_str() == "purchase")
            .map(|r| r.order_id.clone().unwrap())
            .collect();
        assert_eq!(charged, accepted[p], "partner {p}: each order charged once");
        assert_eq!(assert_ledger_matches_float(&app, partner_id).await, 0);
        assert_eq!(balance(&app, secret).await, 0);
    }
}

/// A pass gives up its provisioning slot once its units are in a supplier
/// order: with one slot, an order whose supplier order takes ten minutes
/// does not hold back the next order, which completes while the first waits.
#[tokio::test]
async fn an_order_waiting_for_its_profiles_holds_no_provisioning_slot() {
    let app = order_app_with(&[
        ("provisioning.concurrency", "1"),
        ("sandbox.slow_provisioning_ms", "600000"),
    ])
    .await;
    let (sandbox, slow) = slow_sandbox_orders(&app, 1).await;
    let slow_id = &slow[0];

    let quick = place(&app, &sandbox, &new_key(), &order_body(1)).await;
    assert_eq!(quick.status, StatusCode::ACCEPTED, "{}", quick.body);
    let done = settled(&app, &sandbox, &quick.order_id()).await;
    let (_, still) = get(&app, &sandbox, &format!("/orders/{slow_id}")).await;

    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(still["status"], "processing", "{still}");
}

// -------------------------------------------------- restart and supervision

#[tokio::test]
async fn an_order_accepted_by_a_node_that_stopped_is_provisioned_exactly_once_by_another() {
    let mut first = order_app_with(&[("provisioning.enabled", "false")]).await;
    let (partner_id, secret) = live_partner(&first).await;
    fund(&first, &partner_id, 10_000).await;
    let key = new_key();
    let answer = place(&first, &secret, &key, &order_body(3)).await;
    assert_eq!(answer.status, StatusCode::ACCEPTED, "{}", answer.body);
    let id = answer.order_id();
    first.stop().await.expect("the first node stops cleanly");

    let second = spawn_node(&first.database_url, FAST).await;
    let order = settled(&second, &secret, &id).await;
    let replay = place(&second, &secret, &key, &order_body(3)).await;

    assert_eq!(order["status"], "completed", "{order}");
    assert_eq!(order["esims"].as_array().unwrap().len(), 3);
    assert_eq!(replay.status, StatusCode::OK, "{}", replay.body);
    assert_eq!(replay.body["id"], id.as_str());
    let ledger = ledger_of(&second, &partner_id).await;
    assert_eq!(rows_of(&ledger, &id, "purchase").len(), 1);
    assert!(rows_of(&ledger, &id, "refund").is_empty());
    assert_eq!(ledger.len(), 2, "the funding and one purchase");
    let profiles = esim::Entity::find()
        .filter(esim::Column::OrderId.eq(id.as_str()))
        .all(&second.db)
        .await
        .unwrap();
    assert_eq!(profiles.len(), 3);
    let units: HashSet<&str> = profiles.iter().map(|p| p.unit_id.as_str()).collect();
    assert_eq!(units.len(), 3, "one profile per unit");
    assert_eq!(balance(&second, &secret).await, 10_000 - 3 * BRONZE_UNIT);
    assert_eq!(
        assert_ledger_matches_float(&second, &partner_id).await,
        10_000 - 3 * BRONZE_UNIT
    );
}

#[tokio::test]
async fn a_failed_account_actor_is_restarted_and_the_next_order_succeeds() {
    let app = order_app_with(&[("operator.fault_injection", "true")]).await;
    let (partner_id, secret) = live_partner(&app).await;
    fund(&app, &partner_id, 10_000).await;
    let key = new_key();

    let (status, body) = read(
        app.operator(Method::POST, &format!("/actors/{partner_id}/fail"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let answer = eventually("an order after the restart", SETTLE, || async {
        let answer = place(&app, &secret, &key, &order_body(1)).await;
        assert!(
            [200, 202, 500].contains(&answer.status.as_u16()),
            "{}",
            answer.body
        );
        answer.status.is_success().then_some(answer)
    })
    .await;

    let order = settled(&app, &secret, &answer.order_id()).await;
    assert_eq!(order["status"], "completed", "{order}");
    assert_eq!(balance(&app, &secret).await, 10_000 - BRONZE_UNIT);
    let restarts = eventually("the restart to be counted", SETTLE, || async {
        restarts_of(&app, &partner_id).await.filter(|r| *r >= 1)
    })
    .await;
    assert!(restarts >= 1);
    assert_ledger_matches_float(&app, &partner_id).await;
}

/// The `restarts` of the partner's account actor in `GET /operator/v1/actors`.
async fn restarts_of(app: &TestApp, partner_id: &str) -> Option<u64> {
    let (status, actors) = read(app.operator(Method::GET, "/actors").send().await.unwrap()).await;
    assert_eq!(status, StatusCode::OK, "{actors}");
    actors["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["partner_id"] == partner_id)
        .and_then(|a| a["restarts"].as_u64())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn orders_racing_actor_failures_are_accepted_or_safely_retried_and_every_restart_counts() {
    const ROUNDS: u64 = 10;
    const PER_ROUND: usize = 5;
    let app = order_app_with(&[("operator.fault_injection", "true")]).await;
    let (partner_id, secret) = live_partner(&app).await;
    fund(&app, &partner_id, 1_000_000).await;
    let mut keys = Vec::new();
    let body = order_body(1);

    for round in 1..=ROUNDS {
        let round_keys: Vec<String> = (0..PER_ROUND).map(|_| new_key()).collect();
        let fail = app
            .operator(Method::POST, &format!("/actors/{partner_id}/fail"))
            .send();
        let orders = futures::future::join_all(
            round_keys
                .iter()
                .map(|key| place(&app, &secret, key, &body)),
        );
        let (failed, answers) = tokio::join!(fail, orders);
        assert_eq!(failed.unwrap().status(), StatusCode::OK);
        for answer in &answers {
            assert!(
                [202, 500].contains(&answer.status.as_u16()),
                "{}",
                answer.body
            );
        }
        keys.extend(round_keys);
        eventually(
            &format!("restart {round} to be counted"),
            SETTLE,
            || async { (restarts_of(&app, &partner_id).await == Some(round)).then_some(()) },
        )
        .await;
    }

    let mut ids = HashSet::new();
    for key in &keys {
        let retry = place(&app, &secret, key, &order_body(1)).await;
        assert!(
            retry.status == StatusCode::OK && retry.replayed
                || retry.status == StatusCode::ACCEPTED,
            "{}",
            retry.body
        );
        assert!(ids.insert(retry.order_id()), "one order per key");
    }
    let spent = BRONZE_UNIT * keys.len() as i64;
    assert_eq!(balance(&app, &secret).await, 1_000_000 - spent);
    let ledger = ledger_of(&app, &partner_id).await;
    assert_eq!(
        ledger
            .iter()
            .filter(|r| r.kind.as_str() == "purchase")
            .count(),
        keys.len()
    );
    assert_eq!(
        assert_ledger_matches_float(&app, &partner_id).await,
        1_000_000 - spent
    );
}

async fn account_actor_listed(app: &TestApp, partner_id: &str) -> bool {
    let (_, body) = read(app.operator(Method::GET, "/actors").send().await.unwrap()).await;
    body["data"]
        .as_array()
        .unwrap()
        .iter()
        .any(|row| row["partner_id"] == partner_id)
}

/// Waits until the partner's idle account actor was passivated (stopped,
/// its memory gone).
async fn passivated(app: &TestApp, partner_id: &str) {
    eventually(
        "the idle actor to be passivated",
        Duration::from_secs(10),
        || async { (!account_actor_listed(app, partner_id).await).then_some(()) },
    )
    .await;
}

#[tokio::test]
async fn an_idle_account_actor_is_passivated_and_the_next_order_starts_it_again() {
    let app = order_app_with(&[("accounts.idle_seconds", "1")]).await;
    let (partner_id, secret) = live_partner(&app).await;
    fund(&app, &partner_id, 10_000).await;
    accepted(&app, &secret, &order_body(1)).await;
    assert!(account_actor_listed(&app, &partner_id).await);

    passivated(&app, &partner_id).await;

    let order = accepted(&app, &secret, &order_body(1)).await;
    assert_eq!(order["status"], "processing");
    assert!(
        account_actor_listed(&app, &partner_id).await,
        "started again on use"
    );
    assert_eq!(
        balance(&app, &secret).await,
        10_000 - 2 * BRONZE_UNIT,
        "state reloaded from the database"
    );
}

#[tokio::test]
async fn a_stored_status_outside_the_vocabulary_is_an_internal_error_never_a_default() {
    let app = spawn_app_with(&[]).await;
    let (partner, _) = live_partner(&app).await;
    let secret = sandbox_key(&app, &partner).await;
    let order = accepted(&app, &secret, &order_body(1)).await;
    let id = order["id"].as_str().unwrap().to_owned();
    settled(&app, &secret, &id).await;

    // A word this version does not know, as a bad migration or a hand edit
    // would leave it.
    order::Entity::update_many()
        .col_expr(
            order::Column::Status,
            sea_orm::sea_query::Expr::value("shipped"),
        )
        .filter(order::Column::Id.eq(id.as_str()))
        .exec(&app.db)
        .await
        .unwrap();

    let (status, body) = get(&app, &secret, &format!("/orders/{id}")).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    assert_eq!(body["error"]["code"], "internal_error", "{body}");
    let (status, body) = get(&app, &secret, "/orders").await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
}

/// What a savepoint commit takes first: the floats' row locks. Another
/// writer's debit of the same float waits until the transaction ends (on
/// PostgreSQL by the row lock; on SQLite every writer waits for the one in
/// progress), then goes through.
#[tokio::test]
async fn a_transaction_that_locked_the_floats_holds_other_debits_until_it_ends() {
    use sea_orm::{
        TransactionTrait,
        sea_query::{Expr, ExprTrait},
    };
    let app = crate::helpers::spawn_app().await;
    let (partner_id, _) = live_partner(&app).await;
    fund(&app, &partner_id, 1_000).await;
    let txn = esim_reseller::store::begin_write(&app.db).await.unwrap();
    esim_reseller::store::orders::lock_floats(&txn, &[partner_id.as_str()])
        .await
        .unwrap();

    let mut debit = tokio::spawn({
        let (db, partner_id) = (app.db.clone(), partner_id.clone());
        async move {
            let other = db.begin().await.unwrap();
            float::Entity::update_many()
                .col_expr(
                    float::Column::BalanceCents,
                    Expr::col(float::Column::BalanceCents).sub(1),
                )
                .filter(float::Column::PartnerId.eq(partner_id))
                .filter(float::Column::Mode.eq(entities::states::Mode::Live))
                .exec(&other)
                .await
                .unwrap();
            other.commit().await.unwrap();
        }
    });
    let waited = tokio::time::timeout(Duration::from_millis(300), &mut debit).await;
    assert!(
        waited.is_err(),
        "the debit waits while the floats are locked"
    );
    txn.commit().await.unwrap();
    tokio::time::timeout(SETTLE, debit).await.unwrap().unwrap();
    let float = float::Entity::find()
        .filter(float::Column::PartnerId.eq(partner_id.as_str()))
        .filter(float::Column::Mode.eq(entities::states::Mode::Live))
        .one(&app.db)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(float.balance_cents, 999, "then it went through");
}

/// On PostgreSQL the Idempotency-Keys of a batch are looked up by the
/// table's key, never by reading the whole table: a lookup planned as a join
/// against a set of guessed size reads every row while the table's
/// statistics still call it small, and then reads it again for every batch
/// (the cost grows with the table). Replays find their binding through the
/// same lookup. SQLite plans the same lookup by index of its own accord.
#[tokio::test]
async fn on_postgres_a_batch_s_idempotency_keys_are_probed_by_index_never_scanned() {
    use sea_orm::{ConnectionTrait, Statement};
    let app = order_app_with(&[("accounts.idle_seconds", "1")]).await;
    if !app.database_url.starts_with("postgres") {
        return;
    }
    let (partner, secret) = live_partner(&app).await;
    fund(&app, &partner, 1_000_000).await;
    let keys: Vec<String> = (0..40).map(|_| new_key()).collect();
    let body = order_body(1);
    let mut placed = Vec::new();
    // In waves, so that later batches look up keys in a table holding rows.
    for wave in keys.chunks(10) {
        let answers =
            futures::future::join_all(wave.iter().map(|key| place(&app, &secret, key, &body)))
                .await;
        assert!(answers.iter().all(|a| a.status == StatusCode::ACCEPTED));
        placed.extend(answers);
    }
    // New keys are taken for new without a read; a key the account forgot
    // (its actor passivated) is read when its retry finds it bound.
    passivated(&app, &partner).await;
    for (key, first) in keys.iter().zip(&placed).take(10) {
        let again = place(&app, &secret, key, &body).await;
        assert!(again.replayed, "{}", again.body);
        assert_eq!(again.order_id(), first.order_id());
    }

    // (scans, rows they read, index probes) of the table so far.
    let scans = || async {
        let row = app
            .db
            .query_one_raw(Statement::from_string(
                app.db.get_database_backend(),
                "SELECT seq_scan, seq_tup_read, COALESCE(idx_scan, 0) AS idx_scan \
                 FROM pg_stat_user_tables WHERE relname = 'idempotency_keys'",
            ))
            .await
            .unwrap()
            .expect("the table has statistics");
        let count = |column: &str| row.try_get::<i64>("", column).unwrap();
        (count("seq_scan"), count("seq_tup_read"), count("idx_scan"))
    };
    // A backend reports its counts when idle, within about a second; a
    // scan counts once per batch, a probe once per key: ten retries read
    // one by one make at least four of either.
    let (read, probed) = eventually("the lookups to be counted", SETTLE, || async {
        let (scanned, read, probed) = scans().await;
        (scanned + probed >= 4).then_some((read, probed))
    })
    .await;
    assert_eq!(
        read, 0,
        "{read} rows read by scanning the table ({probed} probes)"
    );
}

/// On PostgreSQL the units of the orders a delivery settles are counted by
/// probing the units' key once per order (its range of unit ids), even on a young
/// database: a count planned against a list of guessed size reads the
/// whole table while its statistics still call it small (a young database,
/// before autovacuum's analyses), and its prepared statement keeps that plan
/// as the table grows, so every settled batch read every unit.
#[tokio::test]
async fn on_postgres_settling_orders_counts_their_units_by_probing_their_key() {
    // Each unit in a supplier order of its own, two units an order: each
    // delivery leaves the order's other unit to be counted (an order whose
    // every unit one delivery settles, as one supplier order's profiles for
    // it are handed over together, completes without a count).
    let app = order_app_with(&[("supplier.batch_size", "1")]).await;
    if !app.database_url.starts_with("postgres") {
        return;
    }
    let (partner, secret) = live_partner(&app).await;
    fund(&app, &partner, 1_000_000).await;
    // In waves, each settled before the next, so that later counts run
    // against a table holding the units of the waves before.
    let body = order_body(2);
    for _ in 0..4 {
        let wave = futures::future::join_all((0..10).map(|_| accepted(&app, &secret, &body))).await;
        for order in wave {
            let id = order["id"].as_str().expect("an order id");
            assert_eq!(settled(&app, &secret, id).await["status"], "completed");
        }
    }
    // Each order's count is one probe of the units' key for the order's
    // range (a count matched as one list reads the table instead), beside
    // the probe each unit's take makes as its upsert checks the key (the
    // deliveries of a table this small read it). So at least 80 probes for
    // the takes and 40 for the counts; a backend reports its counts when
    // idle, within seconds.
    eventually("a probe of the units' key per order", SETTLE, || async {
        (units_key_probes(&app).await >= 80 + 40).then_some(())
    })
    .await;
}

/// How many times the units' key was probed so far, on PostgreSQL.
async fn units_key_probes(app: &TestApp) -> i64 {
    use sea_orm::{ConnectionTrait, Statement};
    let row = app
        .db
        .query_one_raw(Statement::from_string(
            app.db.get_database_backend(),
            "SELECT COALESCE(idx_scan, 0) AS probes FROM pg_stat_user_indexes \
             WHERE indexrelname = 'order_units_pkey'",
        ))
        .await
        .unwrap()
        .expect("the key has statistics");
    row.try_get::<i64>("", "probes").unwrap()
}
