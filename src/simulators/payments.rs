//! A simulated BTCPay Server: the Greenfield invoice routes `payments::btcpay`
//! calls, a hosted payment page, and a control route that changes an invoice
//! and sends the same signed webhook the real server would.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use axum::{
    Json, Router,
    extract::{Path, State},
    http::{HeaderMap, StatusCode},
    response::{Html, IntoResponse, Response},
    routing::{get, post},
};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::payments::btcpay::{cents_to_decimal, decimal_to_cents, signature};

#[derive(Debug, Clone)]
struct Invoice {
    id: String,
    order_id: String,
    amount_cents: i64,
    status: &'static str,
    additional_status: &'static str,
    paid_cents: i64,
    refunded: bool,
    expires_at: DateTime<Utc>,
}

/// Shared simulator state.
pub struct PaymentsSim {
    api_key: String,
    webhook_secret: String,
    /// Where webhooks go: the service's public `/callbacks/btcpay`.
    callback_url: Mutex<Option<String>>,
    invoices: Mutex<HashMap<String, Invoice>>,
    last_webhook: Mutex<HashMap<String, Value>>,
    http: reqwest::Client,
}

impl PaymentsSim {
    pub fn new(api_key: &str, webhook_secret: &str) -> Arc<Self> {
        Arc::new(Self {
            api_key: api_key.to_owned(),
            webhook_secret: webhook_secret.to_owned(),
            callback_url: Mutex::new(None),
            invoices: Mutex::new(HashMap::new()),
            last_webhook: Mutex::new(HashMap::new()),
            http: reqwest::Client::new(),
        })
    }

    /// Points webhooks at the service once its address is known.
    pub fn set_callback_url(&self, url: String) {
        *lock(&self.callback_url) = Some(url);
    }

    fn authorized(&self, headers: &HeaderMap) -> bool {
        headers.get("authorization").and_then(|v| v.to_str().ok())
            == Some(&format!("token {}", self.api_key))
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// Routes of the simulated payment provider.
pub fn routes(sim: Arc<PaymentsSim>) -> Router {
    Router::new()
        .route("/api/v1/stores/{store}/invoices", post(create_invoice))
        .route("/api/v1/stores/{store}/invoices/{id}", get(get_invoice))
        .route(
            "/api/v1/stores/{store}/invoices/{id}/payment-methods",
            get(payment_methods),
        )
        .route("/sim/payments/i/{id}", get(checkout_page))
        .route("/sim/payments/deposits/{dep_id}/events", post(event))
        .with_state(sim)
}

async fn create_invoice(
    State(sim): State<Arc<PaymentsSim>>,
    Path(_store): Path<String>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    if !sim.authorized(&headers) {
        return (
            StatusCode::UNAUTHORIZED,
            Json(json!({ "code": "unauthenticated", "message": "bad API key" })),
        )
            .into_response();
    }
    let Some(amount_cents) = body["amount"].as_str().and_then(decimal_to_cents) else {
        return (
            StatusCode::UNPROCESSABLE_ENTITY,
            Json(json!({ "message": "amount is required" })),
        )
            .into_response();
    };
    let minutes = body["checkout"]["expirationMinutes"].as_i64().unwrap_or(60);
    let invoice = Invoice {
        id: format!("inv{}", uuid::Uuid::new_v4().simple()),
        order_id: body["metadata"]["orderId"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        amount_cents,
        status: "New",
        additional_status: "None",
        paid_cents: 0,
        refunded: false,
        expires_at: Utc::now() + chrono::Duration::minutes(minutes),
    };
    let host = headers
        .get("host")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("127.0.0.1")
        .to_owned();
    let answer = invoice_json(&invoice, &host);
    lock(&sim.invoices).insert(invoice.id.clone(), invoice);
    Json(answer).into_response()
}

fn invoice_json(invoice: &Invoice, host: &str) -> Value {
    json!({
        "id": invoice.id,
        "checkoutLink": format!("http://{host}/sim/payments/i/{}", invoice.id),
        "status": invoice.status,
        "additionalStatus": invoice.additional_status,
        "amount": cents_to_decimal(invoice.amount_cents),
        "currency": "USD",
        "metadata": { "orderId": invoice.order_id },
        "expirationTime": invoice.expires_at.timestamp(),
        "refunded": invoice.refunded,
    })
}

async fn get_invoice(
    State(sim): State<Arc<PaymentsSim>>,
    Path((_store, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    if !sim.authorized(&headers) {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let host = headers
        .get("host")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("127.0.0.1")
        .to_owned();
    match lock(&sim.invoices).get(&id) {
        Some(invoice) => Json(invoice_json(invoice, &host)).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            Json(json!({ "code": "invoice-not-found" })),
        )
            .into_response(),
    }
}

async fn payment_methods(
    State(sim): State<Arc<PaymentsSim>>,
    Path((_store, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    if !sim.authorized(&headers) {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    match lock(&sim.invoices).get(&id) {
        Some(invoice) => Json(json!([{ "paymentMethodId": "BTC-CHAIN", "totalPaid": cents_to_decimal(invoice.paid_cents), "amount": cents_to_decimal(invoice.amount_cents) }])).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn checkout_page(State(sim): State<Arc<PaymentsSim>>, Path(id): Path<String>) -> Response {
    match lock(&sim.invoices).get(&id) {
        Some(invoice) => Html(format!(
            "<!doctype html><html><head><meta charset=\"utf-8\"><title>Pay invoice {id}</title></head><body>\
             <h1>Simulated crypto checkout</h1><p>Invoice <code>{id}</code> for deposit <code>{order}</code>: ${amount} USD.</p>\
             <p>Status: {status}. Paid so far: ${paid}. Expires {expires}.</p></body></html>",
            id = invoice.id,
            order = invoice.order_id,
            amount = cents_to_decimal(invoice.amount_cents),
            status = invoice.status,
            paid = cents_to_decimal(invoice.paid_cents),
            expires = invoice.expires_at.to_rfc3339(),
        ))
        .into_response(),
        None => (StatusCode::NOT_FOUND, Html("<p>No such invoice.</p>".to_owned())).into_response(),
    }
}

/// Body of the control route.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimEvent {
    /// `paid`, `partial`, `zero`, `expire`, `paid_late`, `refund`, or `redeliver` (send the last webhook again).
    event: String,
    #[serde(default)]
    amount_cents: i64,
}

async fn event(
    State(sim): State<Arc<PaymentsSim>>,
    Path(dep_id): Path<String>,
    Json(body): Json<SimEvent>,
) -> Response {
    if body.event == "redeliver" {
        let last = lock(&sim.last_webhook).get(&dep_id).cloned();
        return match last {
            Some(mut payload) => {
                payload["isRedelivery"] = json!(true);
                deliver(&sim, payload).await
            }
            None => (
                StatusCode::NOT_FOUND,
                Json(json!({ "message": "nothing delivered yet" })),
            )
                .into_response(),
        };
    }
    let update = {
        let mut invoices = lock(&sim.invoices);
        let Some(invoice) = invoices.values_mut().find(|i| i.order_id == dep_id) else {
            return (
                StatusCode::NOT_FOUND,
                Json(json!({ "message": "no invoice for that deposit" })),
            )
                .into_response();
        };
        let kind = match body.event.as_str() {
            "partial" => {
                invoice.paid_cents += body.amount_cents;
                invoice.status = "Processing";
                invoice.additional_status = "PaidPartial";
                "InvoiceReceivedPayment"
            }
            "paid" | "paid_late" => {
                invoice.paid_cents += body.amount_cents;
                invoice.status = "Settled";
                invoice.additional_status = if body.event == "paid_late" {
                    "PaidLate"
                } else if invoice.paid_cents > invoice.amount_cents {
                    "PaidOver"
                } else {
                    "None"
                };
                "InvoiceSettled"
            }
            "zero" => {
                invoice.status = "Settled";
                "InvoiceSettled"
            }
            "expire" => {
                invoice.status = "Expired";
                "InvoiceExpired"
            }
            "refund" => {
                invoice.refunded = true;
                "InvoiceRefunded"
            }
            _ => {
                return (
                    StatusCode::BAD_REQUEST,
                    Json(json!({ "message": "unknown event" })),
                )
                    .into_response();
            }
        };
        json!({
            "deliveryId": format!("dlv{}", uuid::Uuid::new_v4().simple()),
            "webhookId": "sim-webhook",
            "originalDeliveryId": null,
            "isRedelivery": false,
            "type": kind,
            "timestamp": Utc::now().timestamp(),
            "storeId": "sim-store",
            "invoiceId": invoice.id,
            "metadata": { "orderId": invoice.order_id },
        })
    };
    lock(&sim.last_webhook).insert(dep_id, update.clone());
    deliver(&sim, update).await
}

/// Sends one signed webhook and reports what the service answered.
async fn deliver(sim: &PaymentsSim, payload: Value) -> Response {
    let Some(url) = lock(&sim.callback_url).clone() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "message": "no callback URL" })),
        )
            .into_response();
    };
    let body = payload.to_string();
    let sent = sim
        .http
        .post(url)
        .header("content-type", "application/json")
        .header(
            "BTCPay-Sig",
            signature(&sim.webhook_secret, body.as_bytes()),
        )
        .body(body)
        .send()
        .await;
    let callback_status = sent.map(|r| r.status().as_u16()).unwrap_or(0);
    Json(json!({ "delivered": payload, "callback_status": callback_status })).into_response()
}
