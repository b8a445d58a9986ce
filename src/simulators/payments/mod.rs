//! A simulated BTCPay Server: the Greenfield routes `payments::btcpay` calls,
//! answering the shapes of btcpayserver's own `BTCPayServer.Client/Models`
//! (recorded in `tests/fixtures/btcpay/`), a hosted payment page, and a control
//! route that pays, expires, marks or refunds an invoice and sends the signed
//! webhook the real server would.
//!
//! Invoices move as BTCPay's `InvoiceWatcher` moves them: enough paid turns
//! `New` into `Processing`, confirmed payments settle it, an invoice that
//! lapses stays `Expired` even when paid afterwards (`PaidLate`), and a store
//! marks an invoice `Settled` or `Invalid` by hand (`Marked`). Payments are
//! made in BTC, on chain (`BTC-CHAIN`) or over Lightning (`BTC-LN`), at one
//! fixed rate; both methods report the same `totalPaid`, the total over all
//! methods, as Greenfield does.

mod control;
mod invoice;

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
};

use axum::{
    Json, Router,
    extract::{Path, State},
    http::{HeaderMap, StatusCode},
    response::{Html, IntoResponse, Response},
    routing::{get, post},
};
use chrono::Utc;
use rust_decimal::Decimal;
use serde_json::{Value, json};

use crate::{
    payments::btcpay::{cents_to_decimal, decimal_to_cents},
    sync::lock,
};
use control::{event, settings};
use invoice::{Invoice, MONITORING_MINUTES, Payment, PaymentStatus, RATE, btc};

/// Shared simulator state.
pub(crate) struct PaymentsSim {
    api_key: String,
    webhook_secret: String,
    /// Where webhooks go: the service's public `/callbacks/btcpay`.
    callback_url: Mutex<Option<String>>,
    invoices: Mutex<HashMap<String, Invoice>>,
    /// The last webhook sent per deposit, and the id of its first delivery.
    last_webhook: Mutex<HashMap<String, Value>>,
    /// Whether invoices report `paidAmount` (servers before the field did not).
    report_paid_amount: AtomicBool,
    http: reqwest::Client,
}

impl PaymentsSim {
    pub(crate) fn new(api_key: &str, webhook_secret: &str) -> Arc<Self> {
        Arc::new(Self {
            api_key: api_key.to_owned(),
            webhook_secret: webhook_secret.to_owned(),
            callback_url: Mutex::new(None),
            invoices: Mutex::new(HashMap::new()),
            last_webhook: Mutex::new(HashMap::new()),
            report_paid_amount: AtomicBool::new(true),
            http: reqwest::Client::new(),
        })
    }

    /// Points webhooks at the service once its address is known.
    pub(crate) fn set_callback_url(&self, url: String) {
        *lock(&self.callback_url) = Some(url);
    }

    fn authorized(&self, headers: &HeaderMap) -> bool {
        headers.get("authorization").and_then(|v| v.to_str().ok())
            == Some(&format!("token {}", self.api_key))
    }
}

/// Routes of the simulated payment provider.
pub(crate) fn routes(sim: Arc<PaymentsSim>) -> Router {
    Router::new()
        .route("/api/v1/stores/{store}/invoices", post(create_invoice))
        .route("/api/v1/stores/{store}/invoices/{id}", get(get_invoice))
        .route(
            "/api/v1/stores/{store}/invoices/{id}/payment-methods",
            get(payment_methods),
        )
        .route("/api/v1/pull-payments/{id}", get(get_pull_payment))
        .route("/sim/payments/i/{id}", get(checkout_page))
        .route("/sim/payments/deposits/{dep_id}/events", post(event))
        .route("/sim/payments/settings", post(settings))
        .with_state(sim)
}

/// `GreenfieldAPIError`.
fn api_error(status: StatusCode, code: &str, message: &str) -> Response {
    (status, Json(json!({ "code": code, "message": message }))).into_response()
}

/// `GreenfieldValidationError[]`, answered with 422.
fn validation_error(path: &str, message: &str) -> Response {
    (
        StatusCode::UNPROCESSABLE_ENTITY,
        Json(json!([{ "path": path, "message": message }])),
    )
        .into_response()
}

fn unauthenticated() -> Response {
    api_error(
        StatusCode::UNAUTHORIZED,
        "unauthenticated",
        "Authentication is required for accessing this endpoint",
    )
}

fn host_of(headers: &HeaderMap) -> String {
    headers
        .get("host")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("127.0.0.1")
        .to_owned()
}

async fn create_invoice(
    State(sim): State<Arc<PaymentsSim>>,
    Path(_store): Path<String>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    if !sim.authorized(&headers) {
        return unauthenticated();
    }
    let Some(amount_cents) = body["amount"].as_str().and_then(decimal_to_cents) else {
        return validation_error("amount", "The amount should be 0 or more.");
    };
    if amount_cents < 0 {
        return validation_error("amount", "The amount should be 0 or more.");
    }
    let minutes = body["checkout"]["expirationMinutes"].as_i64().unwrap_or(60);
    if minutes <= 0 {
        return validation_error(
            "checkout.expirationMinutes",
            "expirationMinutes must be greater than 0",
        );
    }
    let now = Utc::now();
    let invoice = Invoice {
        id: uuid::Uuid::new_v4().simple().to_string()[..22].to_owned(),
        order_id: body["metadata"]["orderId"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        amount_cents,
        status: "New",
        additional_status: "None",
        payments: Vec::new(),
        refunds: Vec::new(),
        created: now,
        expires_at: now + chrono::Duration::minutes(minutes),
    };
    let answer = invoice_json(&invoice, &host_of(&headers), true);
    lock(&sim.invoices).insert(invoice.id.clone(), invoice);
    Json(answer).into_response()
}

/// `InvoiceData`.
fn invoice_json(invoice: &Invoice, host: &str, with_paid_amount: bool) -> Value {
    let mut answer = json!({
        "id": invoice.id,
        "storeId": "sim-store",
        "amount": cents_to_decimal(invoice.amount_cents),
        "checkoutLink": format!("http://{host}/sim/payments/i/{}", invoice.id),
        "status": invoice.status,
        "additionalStatus": invoice.additional_status,
        "monitoringExpiration": (invoice.expires_at + chrono::Duration::minutes(MONITORING_MINUTES)).timestamp(),
        "expirationTime": invoice.expires_at.timestamp(),
        "createdTime": invoice.created.timestamp(),
        "availableStatusesForManualMarking": [],
        "archived": false,
        "type": "Standard",
        "currency": "USD",
        "metadata": { "orderId": invoice.order_id },
        "checkout": {
            "speedPolicy": "MediumSpeed",
            "paymentMethods": ["BTC-CHAIN", "BTC-LN"],
            "expirationMinutes": (invoice.expires_at - invoice.created).num_minutes(),
            "monitoringMinutes": MONITORING_MINUTES,
            "paymentTolerance": 0.0
        },
    });
    if with_paid_amount {
        answer["paidAmount"] = json!(cents_to_decimal(invoice.paid_cents()));
    }
    answer
}

/// `InvoicePaymentMethodDataModel[]`: amounts in BTC, `totalPaid` the total
/// over all methods, each method listing its own payments.
fn payment_methods_json(invoice: &Invoice) -> Value {
    let total_paid = invoice.paid_btc();
    let due = invoice.due_btc();
    let methods: Vec<Value> = ["BTC-CHAIN", "BTC-LN"]
        .into_iter()
        .map(|method| {
            let payments: Vec<&Payment> =
                invoice.payments.iter().filter(|p| p.method == method).collect();
            let method_paid: Decimal = payments.iter().map(|p| p.value).sum();
            json!({
                "activated": true,
                "destination": if method == "BTC-CHAIN" { "bcrt1qsimulatedaddress0000000000000000000" } else { "lnbcrt1simulatedinvoice" },
                "paymentLink": "",
                "rate": RATE,
                "paymentMethodPaid": btc(method_paid),
                "totalPaid": btc(total_paid),
                "due": btc(due - total_paid),
                "amount": btc(due),
                "paymentMethodFee": "0.00000000",
                "payments": payments.iter().map(|p| json!({
                    "id": p.id,
                    "receivedDate": p.received.timestamp(),
                    "value": btc(p.value),
                    "fee": "0.00000000",
                    "status": match p.status { PaymentStatus::Processing => "Processing", PaymentStatus::Settled => "Settled" },
                    "destination": "",
                })).collect::<Vec<_>>(),
                "paymentMethodId": method,
                "additionalData": {},
                "currency": "BTC",
            })
        })
        .collect();
    Value::Array(methods)
}

async fn get_invoice(
    State(sim): State<Arc<PaymentsSim>>,
    Path((_store, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    if !sim.authorized(&headers) {
        return unauthenticated();
    }
    let with_paid_amount = sim.report_paid_amount.load(Ordering::Relaxed);
    match lock(&sim.invoices).get(&id) {
        Some(invoice) => {
            Json(invoice_json(invoice, &host_of(&headers), with_paid_amount)).into_response()
        }
        None => invoice_not_found(),
    }
}

fn invoice_not_found() -> Response {
    api_error(
        StatusCode::NOT_FOUND,
        "invoice-not-found",
        "The invoice was not found",
    )
}

async fn payment_methods(
    State(sim): State<Arc<PaymentsSim>>,
    Path((_store, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    if !sim.authorized(&headers) {
        return unauthenticated();
    }
    match lock(&sim.invoices).get(&id) {
        Some(invoice) => Json(payment_methods_json(invoice)).into_response(),
        None => invoice_not_found(),
    }
}

async fn get_pull_payment(State(sim): State<Arc<PaymentsSim>>, Path(id): Path<String>) -> Response {
    let invoices = lock(&sim.invoices);
    let found = invoices
        .values()
        .flat_map(|i| i.refunds.iter().map(move |r| (i, r)))
        .find(|(_, r)| r.id == id);
    match found {
        Some((invoice, refund)) => Json(json!({
            "startsAt": refund.created.timestamp(),
            "expiresAt": null,
            "id": refund.id,
            "name": format!("Refund {}", invoice.id),
            "description": null,
            "currency": "BTC",
            "amount": btc(refund.amount),
            "BOLT11Expiration": 30,
            "archived": false,
            "viewLink": format!("/sim/payments/pull-payments/{}", refund.id),
            "autoApproveClaims": true,
        }))
        .into_response(),
        None => api_error(
            StatusCode::NOT_FOUND,
            "pullpayment-not-found",
            "The pull payment was not found",
        ),
    }
}

async fn checkout_page(State(sim): State<Arc<PaymentsSim>>, Path(id): Path<String>) -> Response {
    match lock(&sim.invoices).get(&id) {
        Some(invoice) => Html(format!(
            "<!doctype html><html><head><meta charset=\"utf-8\"><title>Pay invoice {id}</title></head><body>\
             <h1>Simulated crypto checkout</h1><p>Invoice <code>{id}</code> for deposit <code>{order}</code>: ${amount} USD ({due} BTC at {RATE}).</p>\
             <p>Status: {status}/{additional}. Paid so far: ${paid}. Expires {expires}.</p></body></html>",
            id = invoice.id,
            order = invoice.order_id,
            amount = cents_to_decimal(invoice.amount_cents),
            due = btc(invoice.due_btc()),
            status = invoice.status,
            additional = invoice.additional_status,
            paid = cents_to_decimal(invoice.paid_cents()),
            expires = invoice.expires_at.to_rfc3339(),
        ))
        .into_response(),
        None => (StatusCode::NOT_FOUND, Html("<p>No such invoice.</p>".to_owned())).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::control::apply_event;
    use super::invoice::{btc_to_cents, usd_cents_to_btc};
    use super::*;

    fn invoice(amount_cents: i64) -> Invoice {
        Invoice {
            id: "inv".into(),
            order_id: "dep_x".into(),
            amount_cents,
            status: "New",
            additional_status: "None",
            payments: vec![],
            refunds: vec![],
            created: Utc::now(),
            expires_at: Utc::now() + chrono::Duration::minutes(60),
        }
    }

    #[test]
    fn cents_survive_the_trip_through_bitcoin() {
        for cents in [1, 99, 10_000, 49_999, 50_000, 1_000_000] {
            assert_eq!(btc_to_cents(usd_cents_to_btc(cents)), cents, "{cents}");
        }
    }

    #[test]
    fn invoices_move_as_the_watcher_moves_them() {
        let mut i = invoice(50_000);
        i.pay(20_000, "BTC-CHAIN", true);
        assert_eq!((i.status, i.additional_status), ("New", "PaidPartial"));
        i.pay(40_000, "BTC-LN", false);
        assert_eq!((i.status, i.additional_status), ("Processing", "PaidOver"));
        apply_event(&mut i, "confirm", 0, "BTC-CHAIN");
        assert_eq!((i.status, i.additional_status), ("Settled", "PaidOver"));

        let mut late = invoice(50_000);
        apply_event(&mut late, "paid_late", 50_000, "BTC-CHAIN");
        assert_eq!(
            (late.status, late.additional_status),
            ("Expired", "PaidLate")
        );

        let mut short = invoice(50_000);
        short.pay(10_000, "BTC-CHAIN", true);
        short.expire();
        assert_eq!(
            (short.status, short.additional_status),
            ("Expired", "PaidPartial")
        );
    }

    #[test]
    fn both_methods_report_the_same_total_paid() {
        let mut i = invoice(50_000);
        i.pay(20_000, "BTC-CHAIN", true);
        i.pay(30_000, "BTC-LN", true);
        let methods = payment_methods_json(&i);
        assert_eq!(methods[0]["totalPaid"], methods[1]["totalPaid"]);
        assert_ne!(
            methods[0]["paymentMethodPaid"],
            methods[1]["paymentMethodPaid"]
        );
    }
}
