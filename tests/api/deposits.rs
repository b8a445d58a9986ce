//! Deposits and the ledger: `POST /deposits`, `GET /deposits`,
//! `GET /deposits/{id}`, `GET /ledger`, every row of the spec's deposit state
//! table driven through the simulated BTCPay Server and its real signed
//! webhooks, hostile callbacks, and the operator's money routes
//! (wire deposits, movements, the sandbox float, reviews).

use std::collections::HashSet;

use chrono::{DateTime, Duration, FixedOffset, SecondsFormat, Utc};
use entities::{deposit, ledger_entry, provider_delivery};
use esim_reseller::payments::btcpay::signature;
use rand::{Rng, SeedableRng, rngs::StdRng};
use reqwest::{Method, StatusCode};
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder};
use serde_json::{Value, json};

use crate::helpers::{
    TestApp, assert_error, balance, eventually, get, live_partner, read, sandbox_key,
    spawn_app_with,
};

/// The webhook secret the service and its simulator share by default.
const WEBHOOK_SECRET: &str = "sim-webhook-secret";

/// Rate limits lifted: these tests make many calls in a second.
pub(crate) const UNTHROTTLED: &[(&str, &str)] = &[
    ("rate_limit.bands.bronze.write.limit", "100000"),
    ("rate_limit.bands.bronze.read.limit", "100000"),
    ("rate_limit.bands.sandbox.write.limit", "100000"),
    ("rate_limit.bands.sandbox.read.limit", "100000"),
];

// ---------------------------------------------------------------- harness

pub(crate) async fn deposits_app() -> TestApp {
    spawn_app_with(UNTHROTTLED).await
}

/// `GET /ledger` with query pairs (values URL-encoded).
async fn ledger_page(app: &TestApp, secret: &str, query: &[(&str, String)]) -> (StatusCode, Value) {
    read(
        app.as_partner(secret, Method::GET, "/ledger")
            .query(query)
            .send()
            .await
            .unwrap(),
    )
    .await
}

/// `POST /deposits` with a raw JSON body.
async fn post_deposit(app: &TestApp, secret: &str, body: &str) -> (StatusCode, Value) {
    read(
        app.as_partner(secret, Method::POST, "/deposits")
            .header("content-type", "application/json")
            .body(body.to_owned())
            .send()
            .await
            .unwrap(),
    )
    .await
}

/// Opens a crypto deposit that must be accepted; returns the 201 body.
pub(crate) async fn open_deposit(app: &TestApp, secret: &str, amount_cents: i64) -> Value {
    let (status, body) = post_deposit(
        app,
        secret,
        &json!({ "amount_cents": amount_cents }).to_string(),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body
}

pub(crate) fn id_of(resource: &Value) -> String {
    resource["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no id in {resource}"))
        .to_owned()
}

/// Tells the simulated provider what happened to a deposit's invoice; it
/// sends the signed webhook before answering. Returns its answer, whatever
/// the service said to the webhook.
async fn sim_event_unchecked(
    app: &TestApp,
    deposit_id: &str,
    event: &str,
    amount_cents: i64,
) -> Value {
    let simulators = app.simulators.as_deref().expect("the simulators run");
    let (status, answer) = read(
        app.client
            .post(format!(
                "{simulators}/sim/payments/deposits/{deposit_id}/events"
            ))
            .json(&json!({ "event": event, "amount_cents": amount_cents }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{event}: {answer}");
    answer
}

/// [`sim_event_unchecked`], asserting that the service took the webhook.
pub(crate) async fn sim_event(
    app: &TestApp,
    deposit_id: &str,
    event: &str,
    amount_cents: i64,
) -> Value {
    let answer = sim_event_unchecked(app, deposit_id, event, amount_cents).await;
    assert_eq!(
        answer["callback_status"], 200,
        "the service acknowledged the {event} webhook: {answer}"
    );
    answer
}

pub(crate) async fn show_deposit(app: &TestApp, secret: &str, id: &str) -> Value {
    let (status, body) = get(app, secret, &format!("/deposits/{id}")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

/// The live float as the operator sees it (works on closed accounts too).
pub(crate) async fn live_float(app: &TestApp, partner_id: &str) -> i64 {
    let (status, partner) = read(
        app.operator(Method::GET, &format!("/partners/{partner_id}"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{partner}");
    partner["balances"]["live_cents"].as_i64().unwrap()
}

/// Every ledger row of the partner as stored, by `seq`.
async fn stored_ledger(app: &TestApp, partner_id: &str) -> Vec<ledger_entry::Model> {
    ledger_entry::Entity::find()
        .filter(ledger_entry::Column::PartnerId.eq(partner_id))
        .order_by_asc(ledger_entry::Column::Seq)
        .all(&app.db)
        .await
        .unwrap()
}

async fn stored_deposit(app: &TestApp, id: &str) -> deposit::Model {
    deposit::Entity::find_by_id(id.to_owned())
        .one(&app.db)
        .await
        .unwrap()
        .expect("the deposit is stored")
}

/// Every page of `GET /ledger` (unfiltered) at `limit`, concatenated.
pub(crate) async fn whole_ledger(app: &TestApp, secret: &str) -> Vec<Value> {
    let mut rows = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut query = vec![("limit", "200".to_owned())];
        if let Some(cursor) = &cursor {
            query.push(("cursor", cursor.clone()));
        }
        let (status, page) = ledger_page(app, secret, &query).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        rows.extend(page["data"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return rows,
        }
    }
}

/// Reviews of one deposit (any status).
pub(crate) async fn reviews_of(app: &TestApp, deposit_id: &str) -> Vec<Value> {
    let (status, body) = read(app.operator(Method::GET, "/reviews").send().await.unwrap()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["deposit_id"] == deposit_id)
        .cloned()
        .collect()
}

/// The single review of a deposit; asserts its reason and that it is open.
pub(crate) async fn the_review_of(app: &TestApp, deposit_id: &str, reason: &str) -> Value {
    let reviews = reviews_of(app, deposit_id).await;
    assert_eq!(reviews.len(), 1, "one review for {deposit_id}: {reviews:?}");
    let review = reviews.into_iter().next().unwrap();
    assert_eq!(review["reason"], reason, "{review}");
    assert_eq!(review["status"], "open", "{review}");
    assert!(
        review["id"].as_str().unwrap().starts_with("rev_"),
        "{review}"
    );
    review
}

async fn movement(
    app: &TestApp,
    partner_id: &str,
    kind: &str,
    amount_cents: i64,
) -> (StatusCode, Value) {
    read(
        app.operator(Method::POST, &format!("/partners/{partner_id}/movements"))
            .json(&json!({ "kind": kind, "amount_cents": amount_cents, "description": format!("test {kind}") }))
            .send()
            .await
            .unwrap(),
    )
    .await
}

async fn wire(
    app: &TestApp,
    partner_id: &str,
    amount_cents: i64,
    reference: &str,
) -> (StatusCode, Value) {
    read(
        app.operator(
            Method::POST,
            &format!("/partners/{partner_id}/wire-deposits"),
        )
        .json(&json!({ "amount_cents": amount_cents, "reference": reference }))
        .send()
        .await
        .unwrap(),
    )
    .await
}

/// Records a wire deposit that must be accepted; returns the deposit.
async fn wired(app: &TestApp, partner_id: &str, amount_cents: i64, reference: &str) -> Value {
    let (status, body) = wire(app, partner_id, amount_cents, reference).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body
}

pub(crate) async fn set_partner_status(app: &TestApp, partner_id: &str, status: &str) {
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

/// Posts a webhook straight to the service's callback route.
async fn post_callback(app: &TestApp, body: &str, signature: Option<&str>) -> StatusCode {
    let mut request = app
        .client
        .post(format!("{}/callbacks/btcpay", app.public))
        .header("content-type", "application/json")
        .body(body.to_owned());
    if let Some(signature) = signature {
        request = request.header("BTCPay-Sig", signature);
    }
    request.send().await.unwrap().status()
}

/// A webhook body in BTCPay's shape.
fn webhook(delivery_id: &str, kind: &str, invoice_id: &str, order_id: &str) -> String {
    json!({
        "deliveryId": delivery_id,
        "webhookId": "sim-webhook",
        "originalDeliveryId": null,
        "isRedelivery": false,
        "type": kind,
        "timestamp": Utc::now().timestamp(),
        "storeId": "sim-store",
        "invoiceId": invoice_id,
        "metadata": { "orderId": order_id },
    })
    .to_string()
}

async fn delivery_recorded(app: &TestApp, delivery_id: &str) -> bool {
    provider_delivery::Entity::find_by_id(delivery_id.to_owned())
        .one(&app.db)
        .await
        .unwrap()
        .is_some()
}

fn ids_of(page: &Value) -> Vec<String> {
    page["data"]
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {page}"))
        .iter()
        .map(id_of)
        .collect()
}

fn timestamp(value: &Value) -> DateTime<Utc> {
    value
        .as_str()
        .unwrap_or_else(|| panic!("not a timestamp: {value}"))
        .parse()
        .unwrap()
}

fn rfc3339(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// Asserts a credited crypto deposit and its one `deposit` ledger row.
async fn assert_credited(app: &TestApp, secret: &str, id: &str, requested: i64, credited: i64) {
    let deposit = show_deposit(app, secret, id).await;
    assert_eq!(deposit["status"], "credited", "{deposit}");
    assert_eq!(deposit["method"], "crypto", "{deposit}");
    assert_eq!(deposit["requested_cents"], requested, "{deposit}");
    assert_eq!(deposit["credited_cents"], credited, "{deposit}");
    assert!(deposit["credited_at"].is_string(), "{deposit}");
    assert!(deposit["reference"].is_string(), "{deposit}");
    let entry_id = deposit["ledger_entry_id"].as_str().expect("a ledger row");
    let rows: Vec<Value> = whole_ledger(app, secret)
        .await
        .into_iter()
        .filter(|r| r["deposit_id"] == id)
        .collect();
    assert_eq!(rows.len(), 1, "one ledger row for {id}: {rows:?}");
    assert_eq!(rows[0]["id"], entry_id);
    assert_eq!(rows[0]["kind"], "deposit");
    assert_eq!(rows[0]["amount_cents"], credited);
    assert_eq!(rows[0]["object"], "ledger_entry");
}

/// Asserts a deposit that moved no money: its status, nothing credited, no ledger row.
async fn assert_uncredited(app: &TestApp, secret: &str, id: &str, status: &str) {
    let deposit = show_deposit(app, secret, id).await;
    assert_eq!(deposit["status"], status, "{deposit}");
    assert!(deposit["credited_cents"].is_null(), "{deposit}");
    assert!(deposit["ledger_entry_id"].is_null(), "{deposit}");
    assert!(deposit["credited_at"].is_null(), "{deposit}");
    let rows: Vec<Value> = whole_ledger(app, secret)
        .await
        .into_iter()
        .filter(|r| r["deposit_id"] == id)
        .collect();
    assert!(rows.is_empty(), "no ledger row for {id}: {rows:?}");
}

// ------------------------------------------------------- opening invoices

#[tokio::test]
async fn a_new_deposit_is_a_pending_crypto_invoice_with_a_hosted_payment_page() {
    let app = deposits_app().await;
    let (_, secret) = live_partner(&app).await;

    let deposit = open_deposit(&app, &secret, 25_000).await;

    assert_eq!(deposit["object"], "deposit");
    assert!(id_of(&deposit).starts_with("dep_"), "{deposit}");
    assert_eq!(deposit["status"], "pending");
    assert_eq!(deposit["method"], "crypto");
    assert_eq!(deposit["requested_cents"], 25_000);
    assert_eq!(deposit["currency"], "USD");
    for field in [
        "credited_cents",
        "reference",
        "ledger_entry_id",
        "credited_at",
    ] {
        assert!(deposit[field].is_null(), "{field}: {deposit}");
    }
    let expires_at = timestamp(&deposit["expires_at"]);
    let created_at = timestamp(&deposit["created_at"]);
    assert!(
        expires_at > created_at + Duration::minutes(55)
            && expires_at <= created_at + Duration::minutes(61),
        "a 60-minute invoice: {deposit}"
    );
    assert_eq!(balance(&app, &secret).await, 0, "the float is untouched");
    assert_eq!(
        show_deposit(&app, &secret, &id_of(&deposit)).await,
        deposit,
        "GET /deposits/{{id}} serves the same deposit"
    );

    let page = app
        .client
        .get(deposit["payment_url"].as_str().expect("a payment_url"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    assert!(
        page.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html"),
        "{:?}",
        page.headers()
    );
    let html = page.text().await.unwrap();
    assert!(html.contains(&id_of(&deposit)), "{html}");
    assert!(html.contains("250.00"), "{html}");
}

#[tokio::test]
async fn each_call_mints_a_new_invoice() {
    let app = deposits_app().await;
    let (_, secret) = live_partner(&app).await;

    let first = open_deposit(&app, &secret, 10_000).await;
    let second = open_deposit(&app, &secret, 10_000).await;

    assert_ne!(first["id"], second["id"]);
    assert_ne!(first["payment_url"], second["payment_url"]);
}

#[tokio::test]
async fn a_whole_amount_is_an_integer_however_it_is_spelled() {
    let app = deposits_app().await;
    let (_, secret) = live_partner(&app).await;
    for body in [r#"{"amount_cents": 10000.0}"#, r#"{"amount_cents": 1e4}"#] {
        let response = app
            .as_partner(&secret, Method::POST, "/deposits")
            .header("Content-Type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let (status, deposit) = read(response).await;
        assert_eq!(status, 201, "{body}: {deposit}");
        assert_eq!(deposit["requested_cents"], 10000, "{body}");
    }
}

#[tokio::test]
async fn every_invalid_amount_is_refused_naming_amount_cents() {
    let app = deposits_app().await;
    let (_, secret) = live_partner(&app).await;

    for body in [
        r#"{"amount_cents": "10000"}"#,
        r#"{"amount_cents": 10000.5}"#,
        r#"{"amount_cents": 1.00005e4}"#,
        r#"{"amount_cents": null}"#,
        r#"{"amount_cents": true}"#,
        r#"{"amount_cents": [10000]}"#,
        r#"{"amount_cents": 9900}"#,
        r#"{"amount_cents": 0}"#,
        r#"{"amount_cents": -10000}"#,
        r#"{"amount_cents": 1000100}"#,
        r#"{"amount_cents": 10050}"#,
        r#"{"amount_cents": 99999999999999999999}"#,
        r#"{}"#,
    ] {
        let (status, error) = post_deposit(&app, &secret, body).await;
        let error = assert_error(status, &error, 400, "request.invalid");
        assert_eq!(error["param"], "amount_cents", "{body}: {error}");
    }

    let (status, error) = post_deposit(
        &app,
        &secret,
        r#"{"amount_cents": 10000, "currency": "EUR"}"#,
    )
    .await;
    let error = assert_error(status, &error, 400, "request.invalid");
    assert_eq!(
        error["param"], "currency",
        "the unknown field is named: {error}"
    );

    let (status, error) = post_deposit(&app, &secret, r#"{"amount": 10000}"#).await;
    let error = assert_error(status, &error, 400, "request.invalid");
    assert_eq!(error["param"], "amount", "{error}");

    for body in ["[10000]", "10000", "not json", ""] {
        let (status, error) = post_deposit(&app, &secret, body).await;
        assert_error(status, &error, 400, "request.invalid");
    }

    let (status, page) = get(&app, &secret, "/deposits").await;
    assert_eq!(status, StatusCode::OK);
    assert!(ids_of(&page).is_empty(), "nothing was opened: {page}");

    // The bounds themselves are accepted.
    for amount in [10_000, 10_100, 1_000_000] {
        open_deposit(&app, &secret, amount).await;
    }
}

#[tokio::test]
async fn a_sandbox_key_cannot_open_a_deposit() {
    let app = deposits_app().await;
    let (partner_id, _) = live_partner(&app).await;
    let sandbox = sandbox_key(&app, &partner_id).await;

    let (status, body) = post_deposit(&app, &sandbox, r#"{"amount_cents": 10000}"#).await;

    assert_error(status, &body, 403, "forbidden");
    assert_eq!(body["error"]["mode"], "sandbox", "{body}");
    assert_eq!(
        stored_ledger(&app, &partner_id).await.len(),
        0,
        "nothing moved"
    );
    let stored = deposit::Entity::find()
        .filter(deposit::Column::PartnerId.eq(partner_id.as_str()))
        .all(&app.db)
        .await
        .unwrap();
    assert!(stored.is_empty(), "no invoice was opened: {stored:?}");
}

// ---------------------------------------------- the deposit state table

#[tokio::test]
async fn a_final_payment_of_the_requested_amount_credits_it_with_one_ledger_row() {
    let app = deposits_app().await;
    let (_, secret) = live_partner(&app).await;
    let deposit = open_deposit(&app, &secret, 10_000).await;
    let id = id_of(&deposit);

    let answer = sim_event(&app, &id, "paid", 10_000).await;

    assert_eq!(answer["delivered"]["type"], "InvoiceSettled");
    assert_credited(&app, &secret, &id, 10_000, 10_000).await;
    assert_eq!(balance(&app, &secret).await, 10_000);
    let shown = show_deposit(&app, &secret, &id).await;
    assert_eq!(
        shown["reference"], answer["delivered"]["invoiceId"],
        "the reference is the provider's invoice id"
    );
    let row = &whole_ledger(&app, &secret).await[0];
    assert_eq!(row["balance_after_cents"], 10_000);
    assert_eq!(row["deposit_id"], id.as_str());
    assert!(row["order_id"].is_null());
    assert!(row["id"].as_str().unwrap().starts_with("led_"));
    assert!(timestamp(&shown["credited_at"]) >= timestamp(&shown["created_at"]));
}

#[tokio::test]
async fn an_overpayment_is_credited_in_full() {
    let app = deposits_app().await;
    let (_, secret) = live_partner(&app).await;
    let id = id_of(&open_deposit(&app, &secret, 10_000).await);

    sim_event(&app, &id, "paid", 12_345).await;

    assert_credited(&app, &secret, &id, 10_000, 12_345).await;
    assert_eq!(balance(&app, &secret).await, 12_345);
}

#[tokio::test]
async fn an_underpayment_is_credited_at_what_arrived() {
    let app = deposits_app().await;
    let (_, secret) = live_partner(&app).await;
    let id = id_of(&open_deposit(&app, &secret, 50_000).await);

    sim_event(&app, &id, "paid", 7_001).await;

    assert_credited(&app, &secret, &id, 50_000, 7_001).await;
    assert_eq!(balance(&app, &secret).await, 7_001);
}

#[tokio::test]
async fn partial_payments_credit_nothing_until_final_and_then_their_sum_is_credited() {
    let app = deposits_app().await;
    let (_, secret) = live_partner(&app).await;
    let id = id_of(&open_deposit(&app, &secret, 30_000).await);

    sim_event(&app, &id, "partial", 10_000).await;
    assert_uncredited(&app, &secret, &id, "pending").await;
    sim_event(&app, &id, "partial", 5_000).await;
    assert_uncredited(&app, &secret, &id, "pending").await;
    assert_eq!(balance(&app, &secret).await, 0);

    sim_event(&app, &id, "paid", 15_000).await;

    assert_credited(&app, &secret, &id, 30_000, 30_000).await;
    assert_eq!(balance(&app, &secret).await, 30_000);
}

#[tokio::test]
async fn a_settlement_of_zero_stays_pending_credits_nothing_and_raises_a_review() {
    let app = deposits_app().await;
    let (_, secret) = live_partner(&app).await;
    let id = id_of(&open_deposit(&app, &secret, 10_000).await);

    sim_event(&app, &id, "zero", 0).await;

    assert_uncredited(&app, &secret, &id, "pending").await;
    assert_eq!(balance(&app, &secret).await, 0);
    let review = the_review_of(&app, &id, "zero_settlement").await;

    // A redelivery raises no second review.
    sim_event(&app, &id, "redeliver", 0).await;
    the_review_of(&app, &id, "zero_settlement").await;

    // The operator resolves it; it leaves the open list.
    let review_id = review["id"].as_str().unwrap();
    let (status, resolved) = read(
        app.operator(Method::POST, &format!("/reviews/{review_id}/resolve"))
            .json(&json!({ "resolution": "customer sent nothing; closed" }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{resolved}");
    assert_eq!(resolved["status"], "resolved");
    assert_eq!(resolved["resolution"], "customer sent nothing; closed");
    assert!(resolved["resolved_at"].is_string(), "{resolved}");
    let (status, open) = read(
        app.operator(Method::GET, "/reviews?status=open")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{open}");
    assert!(
        !ids_of(&open).contains(&review_id.to_owned()),
        "resolved reviews are not open: {open}"
    );
    let (status, error) = read(
        app.operator(Method::GET, "/reviews?status=bogus")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        assert_error(status, &error, 400, "request.invalid")["param"],
        "status"
    );
    let (status, error) = read(
        app.operator(Method::POST, "/reviews/rev_nonexistent/resolve")
            .json(&json!({ "resolution": "x" }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_error(status, &error, 404, "not_found");
    assert_uncredited(&app, &secret, &id, "pending").await;
}

#[tokio::test]
async fn a_lapsed_invoice_cancels_the_deposit_without_moving_money() {
    let app = deposits_app().await;
    let (_, secret) = live_partner(&app).await;
    let id = id_of(&open_deposit(&app, &secret, 10_000).await);

    let answer = sim_event(&app, &id, "expire", 0).await;

    assert_eq!(answer["delivered"]["type"], "InvoiceExpired");
    assert_uncredited(&app, &secret, &id, "cancelled").await;
    assert_eq!(balance(&app, &secret).await, 0);
    assert!(reviews_of(&app, &id).await.is_empty());
}

#[tokio::test]
async fn a_cancelled_deposit_paid_late_is_credited_with_what_arrived() {
    let app = deposits_app().await;
    let (_, secret) = live_partner(&app).await;
    let id = id_of(&open_deposit(&app, &secret, 20_000).await);
    sim_event(&app, &id, "expire", 0).await;
    assert_uncredited(&app, &secret, &id, "cancelled").await;

    sim_event(&app, &id, "paid_late", 19_900).await;

    assert_credited(&app, &secret, &id, 20_000, 19_900).await;
    assert_eq!(balance(&app, &secret).await, 19_900);
    // A late redelivery of the lapse does not walk it back.
    sim_event(&app, &id, "redeliver", 0).await;
    assert_credited(&app, &secret, &id, 20_000, 19_900).await;
}

#[tokio::test]
async fn a_refund_before_credit_makes_the_deposit_refunded_for_good() {
    let app = deposits_app().await;
    let (_, secret) = live_partner(&app).await;
    let id = id_of(&open_deposit(&app, &secret, 10_000).await);
    sim_event(&app, &id, "partial", 4_000).await;

    sim_event(&app, &id, "refund", 0).await;

    assert_uncredited(&app, &secret, &id, "refunded").await;

    // Terminal: a later final payment is never credited.
    sim_event(&app, &id, "paid", 10_000).await;
    sim_event(&app, &id, "paid_late", 10_000).await;
    sim_event(&app, &id, "expire", 0).await;
    assert_uncredited(&app, &secret, &id, "refunded").await;
    assert_eq!(balance(&app, &secret).await, 0);
}

#[tokio::test]
async fn a_refund_after_credit_stays_credited_leaves_the_float_and_raises_a_review() {
    let app = deposits_app().await;
    let (_, secret) = live_partner(&app).await;
    let id = id_of(&open_deposit(&app, &secret, 10_000).await);
    sim_event(&app, &id, "paid", 10_000).await;
    let ledger_before = whole_ledger(&app, &secret).await;

    sim_event(&app, &id, "refund", 0).await;

    assert_credited(&app, &secret, &id, 10_000, 10_000).await;
    assert_eq!(balance(&app, &secret).await, 10_000, "not taken back");
    assert_eq!(
        whole_ledger(&app, &secret).await,
        ledger_before,
        "no row written, none edited"
    );
    the_review_of(&app, &id, "refunded_after_credit").await;
    sim_event(&app, &id, "redeliver", 0).await;
    the_review_of(&app, &id, "refunded_after_credit").await;
}

#[tokio::test]
async fn a_payment_on_a_closed_account_is_never_credited_and_raises_a_review() {
    let app = deposits_app().await;
    let (partner_id, secret) = live_partner(&app).await;
    let sandbox = sandbox_key(&app, &partner_id).await;
    let pending = id_of(&open_deposit(&app, &secret, 10_000).await);
    let lapsed = id_of(&open_deposit(&app, &secret, 20_000).await);
    sim_event(&app, &lapsed, "expire", 0).await;
    set_partner_status(&app, &partner_id, "closed").await;

    sim_event(&app, &pending, "paid", 10_000).await;
    sim_event(&app, &pending, "redeliver", 0).await;
    sim_event(&app, &lapsed, "paid_late", 20_000).await;

    assert_eq!(live_float(&app, &partner_id).await, 0);
    assert!(stored_ledger(&app, &partner_id).await.is_empty());
    for (id, status) in [(&pending, "pending"), (&lapsed, "cancelled")] {
        let stored = stored_deposit(&app, id).await;
        assert_eq!(stored.status.as_str(), status, "unchanged: {stored:?}");
        assert_eq!(stored.credited_cents, None);
        assert_eq!(stored.ledger_entry_id, None);
        assert_eq!(stored.credited_at, None);
        the_review_of(&app, id, "paid_on_closed_account").await;
    }

    // The partner cannot read them: both modes answer partner.closed.
    for key in [&secret, &sandbox] {
        let (status, error) = get(&app, key, &format!("/deposits/{pending}")).await;
        assert_error(status, &error, 403, "partner.closed");
    }
}

#[tokio::test]
async fn a_wire_deposit_cannot_be_recorded_on_a_closed_account() {
    let app = deposits_app().await;
    let (partner_id, _) = live_partner(&app).await;
    set_partner_status(&app, &partner_id, "closed").await;

    let (status, error) = wire(&app, &partner_id, 10_000, "WIRE-CLOSED").await;

    assert_error(status, &error, 409, "conflict");
    assert_eq!(live_float(&app, &partner_id).await, 0);
}

#[tokio::test]
async fn a_payment_whose_callback_was_lost_is_credited_by_the_reconciler() {
    let overrides: Vec<(&str, &str)> = UNTHROTTLED
        .iter()
        .copied()
        .chain([("reconciler.interval_seconds", "1")])
        .collect();
    let app = spawn_app_with(&overrides).await;
    let (_, secret) = live_partner(&app).await;
    let id = id_of(&open_deposit(&app, &secret, 10_000).await);

    // Sabotage: the service cannot take the webhook, so the callback is lost.
    app.db
        .execute_unprepared("ALTER TABLE provider_deliveries RENAME TO provider_deliveries_away")
        .await
        .unwrap();
    let answer = sim_event_unchecked(&app, &id, "paid", 10_000).await;
    assert_eq!(answer["callback_status"], 500, "{answer}");
    assert_uncredited(&app, &secret, &id, "pending").await;
    app.db
        .execute_unprepared("ALTER TABLE provider_deliveries_away RENAME TO provider_deliveries")
        .await
        .unwrap();

    // The reconciler asks the provider about the quiet invoice and credits it.
    eventually(
        "the reconciler to credit the deposit",
        std::time::Duration::from_secs(15),
        || async {
            let deposit = show_deposit(&app, &secret, &id).await;
            (deposit["status"] == "credited").then_some(())
        },
    )
    .await;
    assert_credited(&app, &secret, &id, 10_000, 10_000).await;
    assert_eq!(balance(&app, &secret).await, 10_000);
}

// ------------------------------------------------------ hostile callbacks

#[tokio::test]
async fn a_callback_with_a_forged_or_missing_signature_is_refused_and_changes_nothing() {
    let app = deposits_app().await;
    let (_, secret) = live_partner(&app).await;
    let id = id_of(&open_deposit(&app, &secret, 10_000).await);
    // Paid in full, still confirming: nothing may be credited yet.
    let invoice = sim_event(&app, &id, "unconfirmed", 10_000).await["delivered"]["invoiceId"]
        .as_str()
        .unwrap()
        .to_owned();
    let body = webhook("dlv-forged", "InvoiceSettled", &invoice, &id);
    let good = signature(WEBHOOK_SECRET, body.as_bytes());

    for forged in [
        None,
        Some(signature("not-the-secret", body.as_bytes())),
        Some(good.trim_start_matches("sha256=").to_owned()),
        Some("sha256=".to_owned()),
        Some("sha256=zz".to_owned()),
        Some(format!("{}00", good)),
        Some(good.replace("sha256=", "sha1=")),
    ] {
        let status = post_callback(&app, &body, forged.as_deref()).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{forged:?}");
    }

    assert_uncredited(&app, &secret, &id, "pending").await;
    assert!(
        !delivery_recorded(&app, "dlv-forged").await,
        "a refused delivery is not remembered, so it cannot shadow a genuine one"
    );
    // The genuine confirmation still goes through, once.
    sim_event(&app, &id, "confirm", 0).await;
    assert_credited(&app, &secret, &id, 10_000, 10_000).await;
}

#[tokio::test]
async fn a_tampered_callback_is_refused_even_with_the_signature_of_the_original_body() {
    let app = deposits_app().await;
    let (_, secret) = live_partner(&app).await;
    let paid = id_of(&open_deposit(&app, &secret, 10_000).await);
    let pending = id_of(&open_deposit(&app, &secret, 10_000).await);
    let delivered = sim_event(&app, &paid, "paid", 10_000).await["delivered"].clone();
    let other_invoice = sim_event(&app, &pending, "partial", 100).await["delivered"]["invoiceId"]
        .as_str()
        .unwrap()
        .to_owned();
    let original = delivered.to_string();
    let signed = signature(WEBHOOK_SECRET, original.as_bytes());

    let mut retargeted = delivered.clone();
    retargeted["invoiceId"] = json!(other_invoice);
    retargeted["metadata"]["orderId"] = json!(pending);
    retargeted["deliveryId"] = json!("dlv-tampered");
    for tampered in [
        retargeted.to_string(),
        original.replace("InvoiceSettled", "InvoiceRefunded"),
        format!("{original} "),
    ] {
        assert_ne!(tampered, original);
        let status = post_callback(&app, &tampered, Some(&signed)).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{tampered}");
    }

    assert_credited(&app, &secret, &paid, 10_000, 10_000).await;
    assert_uncredited(&app, &secret, &pending, "pending").await;
    assert!(reviews_of(&app, &paid).await.is_empty());
    assert!(!delivery_recorded(&app, "dlv-tampered").await);
    assert_eq!(balance(&app, &secret).await, 10_000);
}

#[tokio::test]
async fn replayed_and_redelivered_callbacks_credit_nothing_twice() {
    let app = deposits_app().await;
    let (partner_id, secret) = live_partner(&app).await;
    let id = id_of(&open_deposit(&app, &secret, 10_000).await);
    let delivered = sim_event(&app, &id, "paid", 10_000).await["delivered"].clone();
    let original = delivered.to_string();
    let ledger_before = whole_ledger(&app, &secret).await;

    // The same signed body again, several times.
    for _ in 0..3 {
        let status = post_callback(
            &app,
            &original,
            Some(&signature(WEBHOOK_SECRET, original.as_bytes())),
        )
        .await;
        assert!(status.is_success(), "{status}");
    }
    // The provider's own redelivery.
    let redelivered = sim_event(&app, &id, "redeliver", 0).await;
    // As BTCPay redelivers: a new delivery id, the first one's as the original.
    assert_eq!(redelivered["delivered"]["isRedelivery"], true);
    assert_ne!(
        redelivered["delivered"]["deliveryId"],
        delivered["deliveryId"]
    );
    assert_eq!(
        redelivered["delivered"]["originalDeliveryId"],
        delivered["deliveryId"]
    );
    // Fresh deliveries saying the same thing (deduplication by deposit, not only by delivery).
    for n in 0..3 {
        let mut again = delivered.clone();
        again["deliveryId"] = json!(format!("dlv-again-{n}"));
        let body = again.to_string();
        let status = post_callback(
            &app,
            &body,
            Some(&signature(WEBHOOK_SECRET, body.as_bytes())),
        )
        .await;
        assert!(status.is_success(), "{status}");
    }

    assert_credited(&app, &secret, &id, 10_000, 10_000).await;
    assert_eq!(balance(&app, &secret).await, 10_000);
    assert_eq!(whole_ledger(&app, &secret).await, ledger_before);
    assert_eq!(stored_ledger(&app, &partner_id).await.len(), 1);
}

#[tokio::test]
async fn callbacks_arriving_out_of_order_after_the_credit_change_nothing() {
    let app = deposits_app().await;
    let (partner_id, secret) = live_partner(&app).await;
    let id = id_of(&open_deposit(&app, &secret, 10_000).await);
    let partial = sim_event(&app, &id, "partial", 4_000).await["delivered"].clone();
    let paid = sim_event(&app, &id, "paid", 6_000).await["delivered"].clone();
    assert_credited(&app, &secret, &id, 10_000, 10_000).await;
    let ledger_before = whole_ledger(&app, &secret).await;

    // The earlier event arrives late, then the final one again, each under a
    // fresh delivery id: the state is read back from the provider, so order
    // does not matter.
    for (n, event) in [partial, paid].iter().enumerate() {
        let mut late = event.clone();
        late["deliveryId"] = json!(format!("dlv-late-{n}"));
        let body = late.to_string();
        let status = post_callback(
            &app,
            &body,
            Some(&signature(WEBHOOK_SECRET, body.as_bytes())),
        )
        .await;
        assert!(status.is_success(), "{status}");
    }

    assert_credited(&app, &secret, &id, 10_000, 10_000).await;
    assert_eq!(whole_ledger(&app, &secret).await, ledger_before);
    assert_eq!(stored_ledger(&app, &partner_id).await.len(), 1);
}

#[tokio::test]
async fn concurrent_callbacks_for_one_payment_credit_it_once() {
    let app = deposits_app().await;
    let (partner_id, secret) = live_partner(&app).await;
    let id = id_of(&open_deposit(&app, &secret, 10_000).await);
    let invoice = sim_event(&app, &id, "partial", 100).await["delivered"]["invoiceId"]
        .as_str()
        .unwrap()
        .to_owned();

    let bodies: Vec<String> = (0..8)
        .map(|n| webhook(&format!("dlv-race-{n}"), "InvoiceSettled", &invoice, &id))
        .collect();
    let signatures: Vec<String> = bodies
        .iter()
        .map(|body| signature(WEBHOOK_SECRET, body.as_bytes()))
        .collect();
    let callbacks = bodies
        .iter()
        .zip(&signatures)
        .map(|(body, signed)| post_callback(&app, body, Some(signed)));
    let (paid, statuses) = tokio::join!(
        sim_event(&app, &id, "paid", 9_900),
        futures::future::join_all(callbacks)
    );
    assert_eq!(paid["callback_status"], 200);
    for status in statuses {
        assert!(status.is_success(), "{status}");
    }

    assert_credited(&app, &secret, &id, 10_000, 10_000).await;
    assert_eq!(balance(&app, &secret).await, 10_000);
    assert_eq!(stored_ledger(&app, &partner_id).await.len(), 1);
}

#[tokio::test]
async fn a_callback_for_an_unknown_invoice_is_acknowledged_and_changes_nothing() {
    let app = deposits_app().await;
    let (_, secret) = live_partner(&app).await;
    let id = id_of(&open_deposit(&app, &secret, 10_000).await);
    sim_event(&app, &id, "unconfirmed", 10_000).await;

    for body in [
        webhook(
            "dlv-unknown-1",
            "InvoiceSettled",
            "invnonexistent",
            "dep_nonexistent",
        ),
        // Names a real deposit but an invoice that is not its own.
        webhook("dlv-unknown-2", "InvoiceSettled", "invnonexistent", &id),
        webhook("dlv-unknown-3", "InvoiceSettled", "", ""),
    ] {
        let status = post_callback(
            &app,
            &body,
            Some(&signature(WEBHOOK_SECRET, body.as_bytes())),
        )
        .await;
        assert!(status.is_success(), "{status}: {body}");
    }

    assert_uncredited(&app, &secret, &id, "pending").await;
    assert!(reviews_of(&app, &id).await.is_empty());
    assert_eq!(balance(&app, &secret).await, 0);
}

// ----------------------------------------------------------- deposit reads

#[tokio::test]
async fn deposits_are_listed_newest_first_across_methods_and_filtered_by_a_valid_status() {
    let app = deposits_app().await;
    let (partner_id, secret) = live_partner(&app).await;
    let (_, other) = live_partner(&app).await;
    open_deposit(&app, &other, 10_000).await;

    let wire_one = wired(&app, &partner_id, 123_456, "WIRE 2026-01 ACME").await;
    let pending = open_deposit(&app, &secret, 10_000).await;
    let wire_two = wired(&app, &partner_id, 5_000, "WIRE 2026-02 ACME").await;
    let credited = open_deposit(&app, &secret, 20_000).await;
    sim_event(&app, &id_of(&credited), "paid", 20_000).await;
    let cancelled = open_deposit(&app, &secret, 30_000).await;
    sim_event(&app, &id_of(&cancelled), "expire", 0).await;
    let refunded = open_deposit(&app, &secret, 40_000).await;
    sim_event(&app, &id_of(&refunded), "refund", 0).await;

    let newest_first: Vec<String> = [
        &refunded, &cancelled, &credited, &wire_two, &pending, &wire_one,
    ]
    .iter()
    .map(|d| id_of(d))
    .collect();
    let (status, page) = get(&app, &secret, "/deposits").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(ids_of(&page), newest_first);
    assert_eq!(page["has_more"], false);
    assert!(page["next_cursor"].is_null());
    let methods: Vec<&str> = page["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["method"].as_str().unwrap())
        .collect();
    assert_eq!(
        methods,
        ["crypto", "crypto", "crypto", "wire", "crypto", "wire"]
    );

    let wire_shown = &page["data"][5];
    assert_eq!(wire_shown["status"], "credited");
    assert_eq!(wire_shown["requested_cents"], 123_456);
    assert_eq!(wire_shown["credited_cents"], 123_456);
    assert_eq!(wire_shown["reference"], "WIRE 2026-01 ACME");
    assert!(wire_shown["payment_url"].is_null());
    assert!(wire_shown["expires_at"].is_null());
    assert!(wire_shown["ledger_entry_id"].is_string());
    assert_eq!(wire_shown, &wire_one);

    for (status_filter, expected) in [
        ("credited", vec![&credited, &wire_two, &wire_one]),
        ("pending", vec![&pending]),
        ("cancelled", vec![&cancelled]),
        ("refunded", vec![&refunded]),
        ("reversed", vec![]),
    ] {
        let (status, page) = get(&app, &secret, &format!("/deposits?status={status_filter}")).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        let expected: Vec<String> = expected.iter().map(|d| id_of(d)).collect();
        assert_eq!(ids_of(&page), expected, "status={status_filter}");
    }

    // Paging two at a time serves the same list.
    let mut paged = Vec::new();
    let mut path = "/deposits?limit=2".to_owned();
    loop {
        let (status, page) = get(&app, &secret, &path).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        paged.extend(ids_of(&page));
        match page["next_cursor"].as_str() {
            Some(cursor) => {
                assert_eq!(page["has_more"], true);
                assert_eq!(ids_of(&page).len(), 2);
                path = format!("/deposits?limit=2&cursor={cursor}");
            }
            None => break,
        }
    }
    assert_eq!(paged, newest_first);

    // A cursor only fits the list it came from.
    let (_, first) = get(&app, &secret, "/deposits?limit=1").await;
    let cursor = first["next_cursor"].as_str().unwrap();
    let (status, error) = get(
        &app,
        &secret,
        &format!("/deposits?limit=1&status=credited&cursor={cursor}"),
    )
    .await;
    assert_eq!(
        assert_error(status, &error, 400, "request.invalid")["param"],
        "cursor"
    );

    for (query, param) in [
        ("status=bogus", "status"),
        ("status=CREDITED", "status"),
        ("limit=0", "limit"),
        ("limit=201", "limit"),
        ("cursor=garbage", "cursor"),
        ("method=wire", "method"),
    ] {
        let (status, error) = get(&app, &secret, &format!("/deposits?{query}")).await;
        let error = assert_error(status, &error, 400, "request.invalid");
        assert_eq!(error["param"], param, "{query}: {error}");
    }
}

#[tokio::test]
async fn a_deposit_id_is_checked_for_its_kind_and_scoped_to_the_callers_account() {
    let app = deposits_app().await;
    let (_, secret) = live_partner(&app).await;
    let (_, other) = live_partner(&app).await;
    let theirs = id_of(&open_deposit(&app, &other, 10_000).await);

    for id in ["po_123", "pl_x", "dep_", "DEP_123", "dep_a%20b"] {
        let (status, error) = get(&app, &secret, &format!("/deposits/{id}")).await;
        let error = assert_error(status, &error, 400, "request.invalid");
        assert_eq!(error["param"], "id", "{id}: {error}");
    }
    for id in [theirs.as_str(), "dep_nonexistent"] {
        let (status, error) = get(&app, &secret, &format!("/deposits/{id}")).await;
        assert_error(status, &error, 404, "not_found");
    }
}

#[tokio::test]
async fn a_sandbox_key_sees_no_deposits_no_ledger_and_no_deposit_by_id() {
    let app = deposits_app().await;
    let (partner_id, secret) = live_partner(&app).await;
    let sandbox = sandbox_key(&app, &partner_id).await;
    let crypto = open_deposit(&app, &secret, 10_000).await;
    sim_event(&app, &id_of(&crypto), "paid", 10_000).await;
    let wire_deposit = wired(&app, &partner_id, 10_000, "WIRE-SANDBOX-TEST").await;
    assert_eq!(whole_ledger(&app, &secret).await.len(), 2);

    for path in [
        "/deposits",
        "/deposits?status=credited",
        "/ledger",
        "/ledger?kind=deposit",
    ] {
        let (status, page) = get(&app, &sandbox, path).await;
        assert_eq!(status, StatusCode::OK, "{path}: {page}");
        assert_eq!(page["data"], json!([]), "{path}");
        assert_eq!(page["has_more"], false);
        assert!(page["next_cursor"].is_null());
    }
    for id in [
        id_of(&crypto),
        id_of(&wire_deposit),
        "dep_nonexistent".into(),
    ] {
        let (status, error) = get(&app, &sandbox, &format!("/deposits/{id}")).await;
        assert_error(status, &error, 404, "not_found");
    }
    // The kind is checked before the mode.
    let (status, error) = get(&app, &sandbox, "/deposits/po_123").await;
    assert_eq!(
        assert_error(status, &error, 400, "request.invalid")["param"],
        "id"
    );
    // Filters are still validated for a sandbox key.
    let (status, error) = get(&app, &sandbox, "/deposits?status=bogus").await;
    assert_eq!(
        assert_error(status, &error, 400, "request.invalid")["param"],
        "status"
    );
    let (status, error) = get(&app, &sandbox, "/ledger?kind=bogus").await;
    assert_eq!(
        assert_error(status, &error, 400, "request.invalid")["param"],
        "kind"
    );
}

// ------------------------------------------------------------------ ledger

/// Query pairs of `GET /ledger` and the ids it must serve.
type FilterCase<'a> = (Vec<(&'static str, String)>, Vec<&'a String>);

#[tokio::test]
async fn the_ledger_date_filters_include_created_after_and_exclude_created_before_at_the_exact_row()
{
    let app = deposits_app().await;
    let (partner_id, secret) = live_partner(&app).await;
    for (n, amount) in [1_000, 2_000, 3_000, 4_000].iter().enumerate() {
        wired(&app, &partner_id, *amount, &format!("WIRE-{n}")).await;
    }
    let rows = whole_ledger(&app, &secret).await;
    assert_eq!(rows.len(), 4);
    let at: Vec<DateTime<Utc>> = rows.iter().map(|r| timestamp(&r["created_at"])).collect();
    assert!(
        at.windows(2).all(|w| w[0] > w[1]),
        "distinct times, newest first: {at:?}"
    );
    let ids: Vec<String> = rows.iter().map(id_of).collect();
    // rows[0] is the newest (4), rows[3] the oldest (1).
    let (newest, third, second, oldest) = (at[0], at[1], at[2], at[3]);
    let micro = Duration::microseconds(1);
    let cases: Vec<FilterCase> = vec![
        (
            vec![("created_after", rfc3339(second))],
            vec![&ids[0], &ids[1], &ids[2]],
        ),
        (
            vec![("created_after", rfc3339(second + micro))],
            vec![&ids[0], &ids[1]],
        ),
        (vec![("created_before", rfc3339(second))], vec![&ids[3]]),
        (
            vec![("created_before", rfc3339(second + micro))],
            vec![&ids[2], &ids[3]],
        ),
        (
            vec![
                ("created_after", rfc3339(second)),
                ("created_before", rfc3339(newest)),
            ],
            vec![&ids[1], &ids[2]],
        ),
        (
            vec![
                ("created_after", rfc3339(third)),
                ("created_before", rfc3339(third)),
            ],
            vec![],
        ),
        (
            vec![
                ("created_after", rfc3339(oldest)),
                ("created_before", rfc3339(newest + micro)),
            ],
            vec![&ids[0], &ids[1], &ids[2], &ids[3]],
        ),
        // The exact value as the API printed it.
        (
            vec![(
                "created_after",
                rows[2]["created_at"].as_str().unwrap().to_owned(),
            )],
            vec![&ids[0], &ids[1], &ids[2]],
        ),
        (
            vec![(
                "created_before",
                rows[2]["created_at"].as_str().unwrap().to_owned(),
            )],
            vec![&ids[3]],
        ),
        // Below the microsecond the rows are stored at.
        (
            vec![(
                "created_after",
                (second + Duration::nanoseconds(1)).to_rfc3339_opts(SecondsFormat::Nanos, true),
            )],
            vec![&ids[0], &ids[1]],
        ),
        (
            vec![(
                "created_before",
                (second + Duration::nanoseconds(1)).to_rfc3339_opts(SecondsFormat::Nanos, true),
            )],
            vec![&ids[2], &ids[3]],
        ),
        (
            vec![(
                "created_before",
                (second - Duration::nanoseconds(1)).to_rfc3339_opts(SecondsFormat::Nanos, true),
            )],
            vec![&ids[3]],
        ),
        (
            vec![(
                "created_after",
                (second - Duration::nanoseconds(1)).to_rfc3339_opts(SecondsFormat::Nanos, true),
            )],
            vec![&ids[0], &ids[1], &ids[2]],
        ),
        // The same instant written in another offset.
        (
            vec![(
                "created_after",
                second
                    .with_timezone(&FixedOffset::east_opt(2 * 3600).unwrap())
                    .to_rfc3339_opts(SecondsFormat::Micros, false),
            )],
            vec![&ids[0], &ids[1], &ids[2]],
        ),
        (
            vec![(
                "created_before",
                second
                    .with_timezone(&FixedOffset::west_opt(5 * 3600).unwrap())
                    .to_rfc3339_opts(SecondsFormat::Micros, false),
            )],
            vec![&ids[3]],
        ),
    ];
    for (query, expected) in cases {
        let (status, page) = ledger_page(&app, &secret, &query).await;
        assert_eq!(status, StatusCode::OK, "{query:?}: {page}");
        let expected: Vec<String> = expected.into_iter().cloned().collect();
        assert_eq!(ids_of(&page), expected, "{query:?}");
    }

    // Paging keeps the filter: one row a page, same rows.
    let mut query = vec![
        ("created_after", rfc3339(second)),
        ("limit", "1".to_owned()),
    ];
    let mut paged = Vec::new();
    loop {
        let (status, page) = ledger_page(&app, &secret, &query).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        paged.extend(ids_of(&page));
        let Some(cursor) = page["next_cursor"].as_str() else {
            break;
        };
        query.retain(|(k, _)| *k != "cursor");
        query.push(("cursor", cursor.to_owned()));
    }
    assert_eq!(paged, ids[..3].to_vec());
}

#[tokio::test]
async fn the_ledger_filters_by_kind_and_validates_every_parameter() {
    let app = deposits_app().await;
    let (partner_id, secret) = live_partner(&app).await;
    wired(&app, &partner_id, 50_000, "WIRE-KINDS").await;
    let crypto = open_deposit(&app, &secret, 10_000).await;
    sim_event(&app, &id_of(&crypto), "paid", 10_000).await;
    for (kind, amount) in [
        ("adjustment", 500),
        ("adjustment", -200),
        ("payout", -1_000),
        ("chargeback", -300),
    ] {
        let (status, body) = movement(&app, &partner_id, kind, amount).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }

    for (kind, expected) in [
        ("deposit", vec![10_000, 50_000]),
        ("adjustment", vec![-200, 500]),
        ("payout", vec![-1_000]),
        ("chargeback", vec![-300]),
        ("purchase", vec![]),
        ("refund", vec![]),
    ] {
        let (status, page) = ledger_page(&app, &secret, &[("kind", kind.to_owned())]).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        let amounts: Vec<i64> = page["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                assert_eq!(r["kind"], kind);
                r["amount_cents"].as_i64().unwrap()
            })
            .collect();
        assert_eq!(amounts, expected, "kind={kind}");
    }

    for (query, param) in [
        ("kind=bogus", "kind"),
        ("kind=DEPOSIT", "kind"),
        ("created_after=yesterday", "created_after"),
        ("created_after=2026-01-01", "created_after"),
        ("created_before=2026-13-01T00:00:00Z", "created_before"),
        ("limit=0", "limit"),
        ("limit=201", "limit"),
        ("limit=ten", "limit"),
        ("cursor=garbage", "cursor"),
        ("order_id=po_1", "order_id"),
    ] {
        let (status, error) = get(&app, &secret, &format!("/ledger?{query}")).await;
        let error = assert_error(status, &error, 400, "request.invalid");
        assert_eq!(error["param"], param, "{query}: {error}");
    }
    let long_cursor = "a".repeat(513);
    let (status, error) = get(&app, &secret, &format!("/ledger?cursor={long_cursor}")).await;
    assert_eq!(
        assert_error(status, &error, 400, "request.invalid")["param"],
        "cursor"
    );
    // A cursor of one filter does not fit another.
    let (_, page) = get(&app, &secret, "/ledger?limit=1").await;
    let cursor = page["next_cursor"].as_str().unwrap();
    let (status, error) = get(
        &app,
        &secret,
        &format!("/ledger?kind=deposit&cursor={cursor}"),
    )
    .await;
    assert_eq!(
        assert_error(status, &error, 400, "request.invalid")["param"],
        "cursor"
    );
}

/// One random step of a history; returns the rows it should have written.
async fn random_step(
    app: &TestApp,
    rng: &mut StdRng,
    partner_id: &str,
    secret: &str,
    balance: &mut i64,
    step: usize,
) -> usize {
    let expect = |status: StatusCode, body: &Value, ok: bool| {
        if ok {
            assert_eq!(status, StatusCode::CREATED, "{body}");
        } else {
            assert_error(status, body, 402, "balance.insufficient");
        }
    };
    match rng.random_range(0..6) {
        0 => {
            let amount = rng.random_range(1..=300_000);
            wired(app, partner_id, amount, &format!("WIRE-{step}")).await;
            *balance += amount;
            1
        }
        1 => {
            let mut amount = rng.random_range(-100_000..=150_000);
            if amount == 0 {
                amount = 1;
            }
            let (status, body) = movement(app, partner_id, "adjustment", amount).await;
            // A credit is always taken, even onto a float a chargeback left below zero.
            let ok = amount > 0 || *balance + amount >= 0;
            expect(status, &body, ok);
            if ok {
                *balance += amount;
            }
            usize::from(ok)
        }
        2 => {
            let amount = -rng.random_range(1..=100_000);
            let (status, body) = movement(app, partner_id, "payout", amount).await;
            let ok = *balance + amount >= 0;
            expect(status, &body, ok);
            if ok {
                *balance += amount;
            }
            usize::from(ok)
        }
        3 => {
            let amount = -rng.random_range(1..=80_000);
            let (status, body) = movement(app, partner_id, "chargeback", amount).await;
            expect(status, &body, true);
            *balance += amount;
            1
        }
        4 => {
            let requested = rng.random_range(100..=300) * 100;
            let paid = rng.random_range(1..=requested * 2);
            let id = id_of(&open_deposit(app, secret, requested).await);
            sim_event(app, &id, "paid", paid).await;
            *balance += paid;
            1
        }
        _ => {
            // A deposit that never lands.
            let id = id_of(&open_deposit(app, secret, 10_000).await);
            sim_event(app, &id, "expire", 0).await;
            0
        }
    }
}

#[tokio::test]
async fn every_ledger_page_sums_to_the_difference_of_the_balances_at_its_ends_over_random_histories()
 {
    let app = deposits_app().await;
    let mut rng = StdRng::seed_from_u64(0x5eed_1ed9);
    for history in 0..5 {
        let (partner_id, secret) = live_partner(&app).await;
        let mut expected_balance = 0;
        let mut expected_rows = 0;
        for step in 0..rng.random_range(4..=24) {
            expected_rows += random_step(
                &app,
                &mut rng,
                &partner_id,
                &secret,
                &mut expected_balance,
                step,
            )
            .await;
        }
        assert_eq!(balance(&app, &secret).await, expected_balance);

        for pass in 0..3 {
            let mut served: Vec<Value> = Vec::new();
            let mut cursor: Option<String> = None;
            loop {
                let limit = rng.random_range(1..=8usize);
                let mut query = vec![("limit", limit.to_string())];
                if let Some(cursor) = &cursor {
                    query.push(("cursor", cursor.clone()));
                }
                let (status, page) = ledger_page(&app, &secret, &query).await;
                assert_eq!(status, StatusCode::OK, "{page}");
                let rows = page["data"].as_array().unwrap();
                let context = format!("history {history}, pass {pass}, limit {limit}");
                let amount = |r: &Value| r["amount_cents"].as_i64().unwrap();
                let after = |r: &Value| r["balance_after_cents"].as_i64().unwrap();
                if let (Some(first), Some(last)) = (rows.first(), rows.last()) {
                    let sum: i64 = rows.iter().map(amount).sum();
                    assert_eq!(
                        sum,
                        after(first) - (after(last) - amount(last)),
                        "page sum, {context}: {page}"
                    );
                    // Pages join: this page starts where the previous one ended.
                    if let Some(previous) = served.last() {
                        assert_eq!(
                            after(first),
                            after(previous) - amount(previous),
                            "page join, {context}"
                        );
                    }
                }
                assert!(rows.len() <= limit);
                served.extend(rows.iter().cloned());
                match page["next_cursor"].as_str() {
                    Some(next) => {
                        assert_eq!(page["has_more"], true);
                        assert_eq!(rows.len(), limit, "a page with more after it is full");
                        cursor = Some(next.to_owned());
                    }
                    None => {
                        assert_eq!(page["has_more"], false);
                        break;
                    }
                }
            }
            assert_eq!(served.len(), expected_rows, "history {history}");
            let seqs: Vec<i64> = served.iter().map(|r| r["seq"].as_i64().unwrap()).collect();
            assert!(
                seqs.windows(2).all(|w| w[0] > w[1]),
                "seq strictly descending: {seqs:?}"
            );
            let ids: HashSet<String> = served.iter().map(id_of).collect();
            assert_eq!(ids.len(), served.len(), "no row twice");
            if let (Some(newest), Some(oldest)) = (served.first(), served.last()) {
                assert_eq!(newest["balance_after_cents"], expected_balance);
                assert_eq!(
                    oldest["balance_after_cents"].as_i64().unwrap()
                        - oldest["amount_cents"].as_i64().unwrap(),
                    0,
                    "the float started at zero"
                );
            }
        }
    }
}

// ---------------------------------------------------------- operator money

#[tokio::test]
async fn adjustments_move_the_float_either_way_but_never_below_zero() {
    let app = deposits_app().await;
    let (partner_id, secret) = live_partner(&app).await;

    let (status, credit) = movement(&app, &partner_id, "adjustment", 5_000).await;
    assert_eq!(status, StatusCode::CREATED, "{credit}");
    assert_eq!(credit["object"], "ledger_entry");
    assert_eq!(credit["kind"], "adjustment");
    assert_eq!(credit["amount_cents"], 5_000);
    assert_eq!(credit["balance_after_cents"], 5_000);
    assert_eq!(credit["description"], "test adjustment");
    assert!(credit["order_id"].is_null() && credit["deposit_id"].is_null());

    let (status, debit) = movement(&app, &partner_id, "adjustment", -2_000).await;
    assert_eq!(status, StatusCode::CREATED, "{debit}");
    assert_eq!(debit["balance_after_cents"], 3_000);
    assert!(debit["seq"].as_i64() > credit["seq"].as_i64());

    let (status, error) = movement(&app, &partner_id, "adjustment", -3_001).await;
    assert_error(status, &error, 402, "balance.insufficient");
    assert_eq!(error["error"]["balance_cents"], 3_000, "{error}");
    assert_eq!(error["error"]["required_cents"], 3_001, "{error}");

    let (status, to_zero) = movement(&app, &partner_id, "adjustment", -3_000).await;
    assert_eq!(status, StatusCode::CREATED, "{to_zero}");
    assert_eq!(to_zero["balance_after_cents"], 0);

    assert_eq!(balance(&app, &secret).await, 0);
    let ledger = whole_ledger(&app, &secret).await;
    assert_eq!(
        ledger,
        vec![to_zero, debit, credit],
        "the ledger serves what was answered"
    );
}

#[tokio::test]
async fn a_payout_is_negative_and_cannot_take_the_float_below_zero() {
    let app = deposits_app().await;
    let (partner_id, secret) = live_partner(&app).await;
    wired(&app, &partner_id, 10_000, "WIRE-PAYOUT").await;

    let (status, error) = movement(&app, &partner_id, "payout", -10_001).await;
    assert_error(status, &error, 402, "balance.insufficient");
    assert_eq!(balance(&app, &secret).await, 10_000);

    let (status, payout) = movement(&app, &partner_id, "payout", -10_000).await;
    assert_eq!(status, StatusCode::CREATED, "{payout}");
    assert_eq!(payout["kind"], "payout");
    assert_eq!(payout["amount_cents"], -10_000);
    assert_eq!(payout["balance_after_cents"], 0);

    let (status, error) = movement(&app, &partner_id, "payout", -1).await;
    assert_error(status, &error, 402, "balance.insufficient");
    assert_eq!(balance(&app, &secret).await, 0);
    assert_eq!(whole_ledger(&app, &secret).await.len(), 2);
}

#[tokio::test]
async fn a_chargeback_may_take_the_float_below_zero() {
    let app = deposits_app().await;
    let (partner_id, secret) = live_partner(&app).await;
    wired(&app, &partner_id, 5_000, "WIRE-CHARGEBACK").await;

    let (status, chargeback) = movement(&app, &partner_id, "chargeback", -8_000).await;

    assert_eq!(status, StatusCode::CREATED, "{chargeback}");
    assert_eq!(chargeback["kind"], "chargeback");
    assert_eq!(chargeback["balance_after_cents"], -3_000);
    assert_eq!(balance(&app, &secret).await, -3_000);
    assert_eq!(live_float(&app, &partner_id).await, -3_000);

    // Below zero, nothing else may debit; a credit brings it back.
    let (status, error) = movement(&app, &partner_id, "payout", -1).await;
    assert_error(status, &error, 402, "balance.insufficient");
    let (status, error) = movement(&app, &partner_id, "adjustment", -1).await;
    assert_error(status, &error, 402, "balance.insufficient");
    let (status, credit) = movement(&app, &partner_id, "adjustment", 4_000).await;
    assert_eq!(status, StatusCode::CREATED, "{credit}");
    assert_eq!(credit["balance_after_cents"], 1_000);
    assert_eq!(balance(&app, &secret).await, 1_000);
}

#[tokio::test]
async fn movements_with_an_unknown_kind_or_the_wrong_sign_are_refused() {
    let app = deposits_app().await;
    let (partner_id, secret) = live_partner(&app).await;
    wired(&app, &partner_id, 10_000, "WIRE-SIGNS").await;

    for (kind, amount, param) in [
        ("payout", 100, "amount_cents"),
        ("payout", 0, "amount_cents"),
        ("chargeback", 100, "amount_cents"),
        ("chargeback", 0, "amount_cents"),
        ("adjustment", 0, "amount_cents"),
        ("adjustment", 1_000_000_001, "amount_cents"),
        ("adjustment", -1_000_000_001, "amount_cents"),
        // No positive counterpart: refused, never overflowing into a 500.
        ("adjustment", i64::MIN, "amount_cents"),
        ("payout", i64::MIN, "amount_cents"),
        ("chargeback", i64::MIN, "amount_cents"),
        ("adjustment", i64::MAX, "amount_cents"),
        ("deposit", 100, "kind"),
        ("purchase", -100, "kind"),
        ("refund", 100, "kind"),
        ("bogus", 100, "kind"),
        ("", 100, "kind"),
    ] {
        let (status, error) = movement(&app, &partner_id, kind, amount).await;
        let error = assert_error(status, &error, 400, "request.invalid");
        assert_eq!(error["param"], param, "{kind} {amount}: {error}");
    }
    for body in [
        json!({ "kind": "adjustment", "amount_cents": 100 }),
        json!({ "kind": "adjustment", "amount_cents": 100, "description": "  " }),
        json!({ "kind": "adjustment", "amount_cents": "100", "description": "x" }),
        json!({ "kind": "adjustment", "amount_cents": 100, "description": "x", "extra": 1 }),
    ] {
        let (status, error) = read(
            app.operator(Method::POST, &format!("/partners/{partner_id}/movements"))
                .json(&body)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_error(status, &error, 400, "request.invalid");
    }
    let (status, error) = movement(&app, "pt_nonexistent", "adjustment", 100).await;
    assert_error(status, &error, 404, "not_found");

    assert_eq!(balance(&app, &secret).await, 10_000);
    assert_eq!(whole_ledger(&app, &secret).await.len(), 1);
}

#[tokio::test]
async fn a_wire_deposit_is_credited_at_once_and_its_reference_is_unique_per_partner() {
    let app = deposits_app().await;
    let (partner_id, secret) = live_partner(&app).await;
    let (other_id, other_secret) = live_partner(&app).await;

    let deposit = wired(&app, &partner_id, 250_000, "BANK REF 0042").await;

    assert_eq!(deposit["object"], "deposit");
    assert!(id_of(&deposit).starts_with("dep_"));
    assert_eq!(deposit["method"], "wire");
    assert_eq!(deposit["status"], "credited");
    assert_eq!(deposit["requested_cents"], 250_000);
    assert_eq!(deposit["credited_cents"], 250_000);
    assert_eq!(deposit["reference"], "BANK REF 0042");
    assert!(deposit["payment_url"].is_null() && deposit["expires_at"].is_null());
    assert!(deposit["credited_at"].is_string());
    assert_eq!(balance(&app, &secret).await, 250_000);
    let ledger = whole_ledger(&app, &secret).await;
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0]["id"], deposit["ledger_entry_id"]);
    assert_eq!(ledger[0]["kind"], "deposit");
    assert_eq!(ledger[0]["deposit_id"], deposit["id"]);
    assert_eq!(show_deposit(&app, &secret, &id_of(&deposit)).await, deposit);

    let (status, error) = wire(&app, &partner_id, 1_000, "BANK REF 0042").await;
    let error = assert_error(status, &error, 409, "conflict");
    assert_eq!(error["param"], "reference", "{error}");
    let (status, error) = wire(&app, &partner_id, 1_000, "  BANK REF 0042  ").await;
    assert_error(status, &error, 409, "conflict");
    assert_eq!(balance(&app, &secret).await, 250_000, "nothing moved");
    assert_eq!(whole_ledger(&app, &secret).await.len(), 1);

    // Another partner may use the same bank text.
    wired(&app, &other_id, 1_000, "BANK REF 0042").await;
    assert_eq!(balance(&app, &other_secret).await, 1_000);

    for (amount, reference, param) in [
        (0, "REF-A", "amount_cents"),
        (-5, "REF-B", "amount_cents"),
        (1_000, "", "reference"),
        (1_000, "   ", "reference"),
    ] {
        let (status, error) = wire(&app, &partner_id, amount, reference).await;
        let error = assert_error(status, &error, 400, "request.invalid");
        assert_eq!(error["param"], param, "{amount} {reference:?}: {error}");
    }
    let (status, error) = wire(&app, "pt_nonexistent", 1_000, "REF-C").await;
    assert_error(status, &error, 404, "not_found");
    assert_eq!(balance(&app, &secret).await, 250_000);
}

#[tokio::test]
async fn the_sandbox_float_is_reset_by_the_operator_without_a_ledger_row() {
    let app = deposits_app().await;
    let (partner_id, secret) = live_partner(&app).await;
    let sandbox = sandbox_key(&app, &partner_id).await;
    wired(&app, &partner_id, 7_000, "WIRE-LIVE").await;
    assert_eq!(
        balance(&app, &sandbox).await,
        10_000_000,
        "the initial play money"
    );

    for cents in [123_456, 0, 1_000_000_000] {
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
        assert_eq!(body["balance_cents"], cents);
        assert_eq!(balance(&app, &sandbox).await, cents);
    }
    assert_eq!(
        balance(&app, &secret).await,
        7_000,
        "the live float is apart"
    );
    assert_eq!(stored_ledger(&app, &partner_id).await.len(), 1);

    for body in [
        json!({ "balance_cents": -1 }),
        json!({ "balance_cents": 1_000_000_001 }),
        json!({ "balance_cents": "5" }),
        json!({}),
        json!({ "balance_cents": 5, "mode": "live" }),
    ] {
        let (status, error) = read(
            app.operator(
                Method::PUT,
                &format!("/partners/{partner_id}/sandbox-float"),
            )
            .json(&body)
            .send()
            .await
            .unwrap(),
        )
        .await;
        assert_error(status, &error, 400, "request.invalid");
    }
    assert_eq!(balance(&app, &sandbox).await, 1_000_000_000);
}

#[tokio::test]
async fn an_unreachable_provider_is_a_retryable_503_and_stores_nothing() {
    // A port nothing listens on: the provider cannot be reached at all.
    let app = spawn_app_with(&[("payments.base_url", "http://127.0.0.1:9")]).await;
    let (_, secret) = live_partner(&app).await;

    let (status, body) = post_deposit(&app, &secret, r#"{"amount_cents": 10000}"#).await;

    let error = assert_error(status, &body, 503, "service_unavailable");
    assert_eq!(error["retryable"], true);
    let stored = deposit::Entity::find().all(&app.db).await.unwrap();
    assert!(
        stored.is_empty(),
        "no pending deposit was stored: {stored:?}"
    );
    let (_, page) = get(&app, &secret, "/deposits").await;
    assert_eq!(page["data"], json!([]));
}

#[tokio::test]
async fn without_a_provider_deposits_are_unavailable_and_not_retryable() {
    // Outside development: every shipped secret replaced, as serve demands.
    let app = spawn_app_with(&[
        ("simulators.enabled", "false"),
        ("supplier.base_url", "http://127.0.0.1:9"),
        ("supplier.access_code", "test-access-code"),
        ("supplier.secret", "test-supplier-secret"),
        ("payments.api_key", "test-payments-api-key"),
        ("payments.webhook_secret", "test-webhook-secret"),
        ("cursor.secret", "test-cursor-secret-0123456789abcdef"),
    ])
    .await;
    let (_, secret) = live_partner(&app).await;

    let (status, body) = post_deposit(&app, &secret, r#"{"amount_cents": 10000}"#).await;

    let error = assert_error(status, &body, 503, "service_unavailable");
    assert!(error.get("retryable").is_none(), "{error}");
    assert!(
        deposit::Entity::find()
            .all(&app.db)
            .await
            .unwrap()
            .is_empty()
    );
}

// ------------------------------------------- Greenfield's real invoice states

/// Tells the simulated provider about a payment over one method.
pub(crate) async fn sim_pay(
    app: &TestApp,
    deposit_id: &str,
    event: &str,
    cents: i64,
    method: &str,
) -> Value {
    let simulators = app.simulators.as_deref().expect("the simulators run");
    let (status, answer) = read(
        app.client
            .post(format!(
                "{simulators}/sim/payments/deposits/{deposit_id}/events"
            ))
            .json(&json!({ "event": event, "amount_cents": cents, "method": method }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{event}: {answer}");
    assert_eq!(answer["callback_status"], 200, "{answer}");
    answer["delivered"].clone()
}

/// The invoice as the simulated provider reports it through Greenfield.
async fn provider_invoice(app: &TestApp, invoice_id: &str) -> Value {
    let simulators = app.simulators.as_deref().expect("the simulators run");
    let (status, body) = read(
        app.client
            .get(format!(
                "{simulators}/api/v1/stores/sim-store/invoices/{invoice_id}"
            ))
            .header("Authorization", "token sim-payments-api-key")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

async fn invoice_states(app: &TestApp, invoice_id: &str) -> (String, String) {
    let invoice = provider_invoice(app, invoice_id).await;
    (
        invoice["status"].as_str().unwrap().to_owned(),
        invoice["additionalStatus"].as_str().unwrap().to_owned(),
    )
}

async fn provider_reports_paid_amount(app: &TestApp, on: bool) {
    let simulators = app.simulators.as_deref().expect("the simulators run");
    let (status, body) = read(
        app.client
            .post(format!("{simulators}/sim/payments/settings"))
            .json(&json!({ "report_paid_amount": on }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test]
async fn a_payment_split_over_chain_and_lightning_is_credited_once_at_its_dollar_value() {
    for report_paid_amount in [true, false] {
        let app = deposits_app().await;
        provider_reports_paid_amount(&app, report_paid_amount).await;
        let (_, secret) = live_partner(&app).await;
        let id = id_of(&open_deposit(&app, &secret, 50_000).await);

        let first = sim_pay(&app, &id, "partial", 20_000, "chain").await;
        let invoice = first["invoiceId"].as_str().unwrap().to_owned();
        assert_eq!(
            invoice_states(&app, &invoice).await,
            ("New".into(), "PaidPartial".into())
        );
        assert_uncredited(&app, &secret, &id, "pending").await;
        sim_pay(&app, &id, "paid", 30_000, "lightning").await;

        assert_eq!(
            invoice_states(&app, &invoice).await,
            ("Settled".into(), "None".into())
        );
        // Greenfield reports the same BTC `totalPaid` on both methods: read
        // once and converted at the rate, 500.00 USD; summed, 1000.00.
        assert_credited(&app, &secret, &id, 50_000, 50_000).await;
        assert_eq!(
            balance(&app, &secret).await,
            50_000,
            "paidAmount reported: {report_paid_amount}"
        );
    }
}

#[tokio::test]
async fn an_overpayment_over_lightning_is_settled_paid_over_and_credited_in_full() {
    let app = deposits_app().await;
    let (_, secret) = live_partner(&app).await;
    let id = id_of(&open_deposit(&app, &secret, 50_000).await);
    let delivered = sim_pay(&app, &id, "paid", 51_234, "lightning").await;
    let invoice = delivered["invoiceId"].as_str().unwrap();
    assert_eq!(delivered["overPaid"], true);
    assert_eq!(
        invoice_states(&app, invoice).await,
        ("Settled".into(), "PaidOver".into())
    );
    assert_credited(&app, &secret, &id, 50_000, 51_234).await;
}

#[tokio::test]
async fn a_full_payment_still_confirming_waits_and_is_credited_when_it_confirms() {
    let app = deposits_app().await;
    let (_, secret) = live_partner(&app).await;
    let id = id_of(&open_deposit(&app, &secret, 50_000).await);
    let delivered = sim_pay(&app, &id, "unconfirmed", 50_000, "chain").await;
    let invoice = delivered["invoiceId"].as_str().unwrap();
    assert_eq!(
        invoice_states(&app, invoice).await,
        ("Processing".into(), "None".into())
    );
    assert_uncredited(&app, &secret, &id, "pending").await;

    sim_pay(&app, &id, "confirm", 0, "chain").await;
    assert_credited(&app, &secret, &id, 50_000, 50_000).await;
}

#[tokio::test]
async fn an_expired_partial_payment_is_cancelled_then_credited_with_what_arrived_once_confirmed() {
    let app = deposits_app().await;
    let (_, secret) = live_partner(&app).await;
    let id = id_of(&open_deposit(&app, &secret, 50_000).await);
    let delivered = sim_pay(&app, &id, "unconfirmed", 20_000, "chain").await;
    let invoice = delivered["invoiceId"].as_str().unwrap().to_owned();
    sim_pay(&app, &id, "expire", 0, "chain").await;
    assert_eq!(
        invoice_states(&app, &invoice).await,
        ("Expired".into(), "PaidPartial".into())
    );
    assert_uncredited(&app, &secret, &id, "cancelled").await;

    // The money that arrived is not dropped: once confirmed, it is credited.
    sim_pay(&app, &id, "confirm", 0, "chain").await;
    assert_credited(&app, &secret, &id, 50_000, 20_000).await;
    assert_eq!(balance(&app, &secret).await, 20_000);
}

#[tokio::test]
async fn a_full_payment_after_the_lapse_is_expired_paid_late_and_credited() {
    let app = deposits_app().await;
    let (_, secret) = live_partner(&app).await;
    let id = id_of(&open_deposit(&app, &secret, 50_000).await);
    let delivered = sim_pay(&app, &id, "paid_late", 50_000, "chain").await;
    assert_eq!(delivered["type"], "InvoiceReceivedPayment");
    assert_eq!(delivered["afterExpiration"], true);
    let invoice = delivered["invoiceId"].as_str().unwrap();
    // BTCPay never settles a lapsed invoice: the money sits on an Expired one.
    assert_eq!(
        invoice_states(&app, invoice).await,
        ("Expired".into(), "PaidLate".into())
    );
    assert_credited(&app, &secret, &id, 50_000, 50_000).await;
}

#[tokio::test]
async fn money_arriving_after_a_partial_credit_is_raised_for_review_not_dropped() {
    let app = deposits_app().await;
    let (_, secret) = live_partner(&app).await;
    let id = id_of(&open_deposit(&app, &secret, 50_000).await);
    sim_pay(&app, &id, "partial", 20_000, "chain").await;
    sim_pay(&app, &id, "expire", 0, "chain").await;
    assert_credited(&app, &secret, &id, 50_000, 20_000).await;

    sim_pay(&app, &id, "paid_late", 30_000, "lightning").await;

    assert_credited(&app, &secret, &id, 50_000, 20_000).await;
    assert_eq!(balance(&app, &secret).await, 20_000, "credited once");
    let review = the_review_of(&app, &id, "paid_after_credit").await;
    assert!(
        review["detail"].as_str().unwrap().contains("30000 cents"),
        "{review}"
    );
}

#[tokio::test]
async fn a_short_invoice_marked_settled_by_the_store_is_credited_with_what_arrived() {
    let app = deposits_app().await;
    let (_, secret) = live_partner(&app).await;
    let id = id_of(&open_deposit(&app, &secret, 50_000).await);
    sim_pay(&app, &id, "partial", 15_000, "lightning").await;
    let delivered = sim_pay(&app, &id, "paid", 0, "chain").await;
    assert_eq!(delivered["manuallyMarked"], true);
    let invoice = delivered["invoiceId"].as_str().unwrap();
    assert_eq!(
        invoice_states(&app, invoice).await,
        ("Settled".into(), "Marked".into())
    );
    assert_credited(&app, &secret, &id, 50_000, 15_000).await;
}

#[tokio::test]
async fn an_invoice_whose_payment_failed_to_confirm_is_cancelled_and_raised_for_review() {
    let app = deposits_app().await;
    let (_, secret) = live_partner(&app).await;
    let id = id_of(&open_deposit(&app, &secret, 50_000).await);
    sim_pay(&app, &id, "unconfirmed", 50_000, "chain").await;
    sim_pay(&app, &id, "invalid", 0, "chain").await;
    assert_uncredited(&app, &secret, &id, "cancelled").await;
    the_review_of(&app, &id, "invalid_with_payment").await;

    // Marked invalid with nothing paid: cancelled, nobody to ask.
    let quiet = id_of(&open_deposit(&app, &secret, 10_000).await);
    sim_pay(&app, &quiet, "mark_invalid", 0, "chain").await;
    assert_uncredited(&app, &secret, &quiet, "cancelled").await;
    assert!(reviews_of(&app, &quiet).await.is_empty());
}

#[tokio::test]
async fn a_redelivery_is_recognised_by_its_original_delivery_id() {
    let app = deposits_app().await;
    let (_, secret) = live_partner(&app).await;
    let id = id_of(&open_deposit(&app, &secret, 10_000).await);
    let first = sim_pay(&app, &id, "paid", 10_000, "chain").await;
    let first_id = first["deliveryId"].as_str().unwrap().to_owned();
    assert!(delivery_recorded(&app, &first_id).await);

    let again = sim_event(&app, &id, "redeliver", 0).await["delivered"].clone();
    let again_id = again["deliveryId"].as_str().unwrap();
    assert_ne!(again_id, first_id);
    assert_eq!(again["originalDeliveryId"], first_id.as_str());
    assert!(
        !delivery_recorded(&app, again_id).await,
        "deduplicated on the original delivery, not recorded again"
    );
    assert_credited(&app, &secret, &id, 10_000, 10_000).await;
}
