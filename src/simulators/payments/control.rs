//! The control route of the simulated BTCPay Server: what happens to an
//! invoice (paid, confirmed, lapsed, marked, refunded) and the signed webhook
//! the real server sends for it, delivered to the service's callback.

use std::sync::{Arc, atomic::Ordering};

use axum::{
    Json,
    extract::{Path, State},
    http::StatusCode,
    response::{IntoResponse, Response},
};
use chrono::Utc;
use serde::Deserialize;
use serde_json::{Value, json};

use super::invoice::{Invoice, Payment, PaymentStatus, PullPayment, btc};
use super::{PaymentsSim, lock};
use crate::payments::btcpay::signature;

/// Body of `POST /sim/payments/settings`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SimSettings {
    /// Whether invoices report `paidAmount`; `false` answers as a server
    /// older than that field, leaving only the payment methods to read.
    report_paid_amount: bool,
}

pub(super) async fn settings(
    State(sim): State<Arc<PaymentsSim>>,
    Json(body): Json<SimSettings>,
) -> Json<Value> {
    sim.report_paid_amount
        .store(body.report_paid_amount, Ordering::Relaxed);
    Json(json!({ "report_paid_amount": body.report_paid_amount }))
}

/// Body of the control route.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SimEvent {
    /// What happens to the invoice:
    /// - `partial`: a confirmed payment of `amount_cents`; the invoice stays open;
    /// - `paid`: a confirmed payment of `amount_cents` that makes the invoice
    ///   final: settled (over-paid if more than due), or, if it is still short,
    ///   marked settled by the store;
    /// - `unconfirmed`: a payment still confirming (settled by `confirm`);
    /// - `confirm`: every payment confirms;
    /// - `paid_late`: the invoice lapses (if it had not), then a confirmed
    ///   payment arrives (`Expired`/`PaidLate`, or `PaidPartial` if short);
    /// - `expire`: the invoice lapses;
    /// - `zero`: the store marks the invoice settled with nothing paid;
    /// - `invalid`: the payments failed to confirm in time;
    /// - `mark_invalid`: the store marks the invoice invalid;
    /// - `refund`: the store creates a refund pull payment of what was paid;
    /// - `redeliver`: the last webhook is delivered again.
    event: String,
    #[serde(default)]
    amount_cents: i64,
    /// `chain` (default) or `lightning`.
    #[serde(default)]
    method: Option<String>,
}

pub(super) async fn event(
    State(sim): State<Arc<PaymentsSim>>,
    Path(dep_id): Path<String>,
    Json(body): Json<SimEvent>,
) -> Response {
    if body.event == "redeliver" {
        return redeliver(&sim, &dep_id).await;
    }
    let method = match body.method.as_deref() {
        None | Some("chain") => "BTC-CHAIN",
        Some("lightning") => "BTC-LN",
        Some(_) => {
            return (
                StatusCode::BAD_REQUEST,
                Json(json!({ "message": "method is chain or lightning" })),
            )
                .into_response();
        }
    };
    let update = {
        let mut invoices = lock(&sim.invoices);
        let Some(invoice) = invoices.values_mut().find(|i| i.order_id == dep_id) else {
            return (
                StatusCode::NOT_FOUND,
                Json(json!({ "message": "no invoice for that deposit" })),
            )
                .into_response();
        };
        match apply_event(invoice, &body.event, body.amount_cents, method) {
            Some(payload) => payload,
            None => {
                return (
                    StatusCode::BAD_REQUEST,
                    Json(json!({ "message": "unknown event" })),
                )
                    .into_response();
            }
        }
    };
    lock(&sim.last_webhook).insert(dep_id, update.clone());
    deliver(&sim, update).await
}

/// Changes the invoice and builds the webhook BTCPay would send for it.
pub(super) fn apply_event(
    invoice: &mut Invoice,
    event: &str,
    cents: i64,
    method: &'static str,
) -> Option<Value> {
    let (kind, extra) = change(invoice, event, cents, method)?;
    Some(webhook(invoice, kind, extra))
}

/// Moves the invoice as the event says; the webhook's type and the fields
/// particular to that type, or `None` for an unknown event.
fn change(
    invoice: &mut Invoice,
    event: &str,
    cents: i64,
    method: &'static str,
) -> Option<(&'static str, Value)> {
    let answer = match event {
        "partial" | "unconfirmed" => {
            let payment = invoice.pay(cents, method, event == "partial");
            received_payment(invoice, &payment, false)
        }
        "paid" => {
            invoice.pay(cents, method, true);
            if invoice.status == "New" {
                // Still short: the store settles it by hand.
                invoice.status = "Settled";
                invoice.additional_status = "Marked";
                (
                    "InvoiceSettled",
                    json!({ "manuallyMarked": true, "overPaid": false }),
                )
            } else {
                settled(invoice)
            }
        }
        "confirm" => {
            for payment in &mut invoice.payments {
                payment.status = PaymentStatus::Settled;
            }
            invoice.update();
            if invoice.status == "Settled" {
                settled(invoice)
            } else {
                (
                    "InvoicePaymentSettled",
                    json!({ "afterExpiration": invoice.status == "Expired", "paymentMethodId": method }),
                )
            }
        }
        "paid_late" => {
            invoice.expire();
            let payment = invoice.pay(cents, method, true);
            received_payment(invoice, &payment, true)
        }
        "expire" => {
            invoice.expire();
            let partially = invoice.additional_status == "PaidPartial";
            ("InvoiceExpired", json!({ "partiallyPaid": partially }))
        }
        "zero" => {
            invoice.status = "Settled";
            invoice.additional_status = "Marked";
            (
                "InvoiceSettled",
                json!({ "manuallyMarked": true, "overPaid": false }),
            )
        }
        "invalid" | "mark_invalid" => {
            invoice.status = "Invalid";
            let marked = event == "mark_invalid";
            if marked {
                invoice.additional_status = "Marked";
            }
            ("InvoiceInvalid", json!({ "manuallyMarked": marked }))
        }
        "refund" => {
            let refund = PullPayment {
                id: uuid::Uuid::new_v4().simple().to_string()[..22].to_owned(),
                amount: invoice.paid_btc(),
                created: Utc::now(),
            };
            let id = refund.id.clone();
            invoice.refunds.push(refund);
            ("InvoiceRefund", json!({ "pullPaymentId": id }))
        }
        _ => return None,
    };
    Some(answer)
}

/// The webhook BTCPay sends: the fields every event carries, then `extra`.
fn webhook(invoice: &Invoice, kind: &'static str, extra: Value) -> Value {
    let delivery_id = uuid::Uuid::new_v4().simple().to_string()[..22].to_owned();
    let mut payload = json!({
        "deliveryId": delivery_id,
        "webhookId": "sim-webhook",
        "originalDeliveryId": delivery_id,
        "isRedelivery": false,
        "type": kind,
        "timestamp": Utc::now().timestamp(),
        "storeId": "sim-store",
        "invoiceId": invoice.id,
        "metadata": { "orderId": invoice.order_id },
    });
    if let (Some(target), Value::Object(extra)) = (payload.as_object_mut(), extra) {
        target.extend(extra);
    }
    payload
}

fn settled(invoice: &Invoice) -> (&'static str, Value) {
    if invoice.status == "Settled" {
        (
            "InvoiceSettled",
            json!({ "manuallyMarked": false, "overPaid": invoice.additional_status == "PaidOver" }),
        )
    } else {
        (
            "InvoiceProcessing",
            json!({ "overPaid": invoice.additional_status == "PaidOver" }),
        )
    }
}

fn received_payment(invoice: &Invoice, payment: &Payment, late: bool) -> (&'static str, Value) {
    (
        "InvoiceReceivedPayment",
        json!({
            "afterExpiration": late || invoice.status == "Expired",
            "paymentMethodId": payment.method,
            "payment": {
                "id": payment.id,
                "receivedDate": payment.received.timestamp(),
                "value": btc(payment.value),
                "fee": "0.00000000",
                "status": match payment.status { PaymentStatus::Processing => "Processing", PaymentStatus::Settled => "Settled" },
                "destination": "",
            },
        }),
    )
}

/// Sends the last webhook of a deposit again as BTCPay redelivers: a new
/// `deliveryId`, the first delivery's `originalDeliveryId`, `isRedelivery`.
async fn redeliver(sim: &PaymentsSim, dep_id: &str) -> Response {
    let last = lock(&sim.last_webhook).get(dep_id).cloned();
    match last {
        Some(mut payload) => {
            payload["deliveryId"] =
                json!(uuid::Uuid::new_v4().simple().to_string()[..22].to_owned());
            payload["isRedelivery"] = json!(true);
            deliver(sim, payload).await
        }
        None => (
            StatusCode::NOT_FOUND,
            Json(json!({ "message": "nothing delivered yet" })),
        )
            .into_response(),
    }
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
