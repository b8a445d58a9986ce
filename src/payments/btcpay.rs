//! BTCPay Server Greenfield API adapter and webhook verification.
//!
//! What is called, and the shapes read (field names and meanings from
//! btcpayserver's own `BTCPayServer.Client/Models`; recorded payloads in
//! `tests/fixtures/btcpay/`):
//!
//! - `POST /api/v1/stores/{storeId}/invoices` `{amount, currency: "USD",
//!   metadata: {orderId: <deposit id>}, checkout: {expirationMinutes}}`
//!   → `InvoiceData` `{id, checkoutLink, expirationTime, ...}`.
//! - `GET /api/v1/stores/{storeId}/invoices/{id}` → `InvoiceData`: `status`,
//!   `additionalStatus`, and on current servers `paidAmount`, what arrived in
//!   the invoice currency.
//! - `GET /api/v1/stores/{storeId}/invoices/{id}/payment-methods` →
//!   `[InvoicePaymentMethodDataModel]`. Its amounts are in the method's own
//!   currency (BTC), `rate` converts to the invoice currency, and `totalPaid`
//!   is already the total over every method: the invoice-currency amount is
//!   one method's `totalPaid × rate`, never a sum across methods. Each
//!   method lists its `payments`, whose `status` (`Processing|Settled|Invalid`)
//!   says whether money is still confirming.
//! - `GET /api/v1/pull-payments/{pullPaymentId}` → `PullPaymentData`: a refund
//!   is a pull payment the store creates for an invoice (`POST
//!   .../invoices/{id}/refund`), announced by the `InvoiceRefund` webhook.
//! - Errors: 422 is an array of `{path, message}`, anything else `{code, message}`.
//! - Webhooks carry `BTCPay-Sig: sha256=<hex HMAC-SHA256(secret, raw body)>`.
//!
//! Amounts cross the wire as decimal strings and are converted to integer
//! cents exactly (decimal arithmetic, never floating point).

use std::{str::FromStr, time::Duration};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use rust_decimal::{Decimal, RoundingStrategy};
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Value, json};
use sha2::Sha256;

use super::{OpenedInvoice, PaymentError, PaymentProvider, RefundPullPayment};
use crate::domain::deposit::{AdditionalStatus, InvoiceReading, InvoiceStatus};

/// The Greenfield client.
pub struct BtcPayClient {
    base_url: String,
    store_id: String,
    api_key: SecretString,
    http: reqwest::Client,
}

impl BtcPayClient {
    pub fn new(
        base_url: &str,
        store_id: &str,
        api_key: SecretString,
        timeout: Duration,
    ) -> anyhow::Result<Self> {
        Ok(Self {
            base_url: base_url.trim_end_matches('/').to_owned(),
            store_id: store_id.to_owned(),
            api_key,
            http: reqwest::Client::builder().timeout(timeout).build()?,
        })
    }

    fn invoices_url(&self) -> String {
        format!("{}/api/v1/stores/{}/invoices", self.base_url, self.store_id)
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Result<Value, PaymentError> {
        let response = request
            .header(
                "Authorization",
                format!("token {}", self.api_key.expose_secret()),
            )
            .send()
            .await
            .map_err(|e| PaymentError::Refused {
                retryable: true,
                message: e.to_string(),
            })?;
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if status.is_success() {
            return Ok(body);
        }
        Err(PaymentError::Refused {
            retryable: status.is_server_error() || status.as_u16() == 429,
            message: format!("HTTP {}: {}", status.as_u16(), describe_error(&body)),
        })
    }
}

/// Names a Greenfield error body: a validation array of `{path, message}`
/// or an API error `{code, message}`.
pub fn describe_error(body: &Value) -> String {
    match body {
        Value::Array(problems) => {
            let named: Vec<String> = problems
                .iter()
                .map(|p| {
                    format!(
                        "{}: {}",
                        p["path"].as_str().unwrap_or("?"),
                        p["message"].as_str().unwrap_or("")
                    )
                })
                .collect();
            format!("validation failed ({})", named.join("; "))
        }
        Value::Object(_) => format!(
            "{} ({})",
            body["code"].as_str().unwrap_or("generic-error"),
            body["message"].as_str().unwrap_or("")
        ),
        _ => "no readable error body".to_owned(),
    }
}

/// Reads an invoice and its payment methods into what the state table needs.
pub fn read_invoice(invoice: &Value, methods: &Value) -> Result<InvoiceReading, String> {
    let status = invoice["status"]
        .as_str()
        .and_then(InvoiceStatus::parse)
        .ok_or_else(|| format!("unknown invoice status {}", invoice["status"]))?;
    let additional = match invoice["additionalStatus"].as_str() {
        None => AdditionalStatus::None,
        Some(text) => AdditionalStatus::parse(text)
            .ok_or_else(|| format!("unknown additionalStatus {text}"))?,
    };
    let methods = methods.as_array().map(Vec::as_slice).unwrap_or_default();
    let received_cents = match invoice["paidAmount"].as_str() {
        Some(paid) => {
            decimal_to_cents_rounded(paid).ok_or_else(|| format!("unreadable paidAmount {paid}"))?
        }
        None => received_from_methods(methods)?,
    };
    let confirming = methods.iter().any(|method| {
        method["payments"]
            .as_array()
            .is_some_and(|payments| payments.iter().any(|p| p["status"] == "Processing"))
    });
    Ok(InvoiceReading {
        status,
        additional,
        received_cents,
        confirming,
    })
}

/// What arrived, in the invoice currency, from the payment methods: one
/// method's `totalPaid` (already the total over all methods) times its
/// `rate`. Methods not activated, or without a rate, cannot convert.
fn received_from_methods(methods: &[Value]) -> Result<i64, String> {
    let Some(method) = methods.iter().find(|m| {
        m["rate"]
            .as_str()
            .and_then(|r| Decimal::from_str(r).ok())
            .is_some_and(|r| r > Decimal::ZERO)
    }) else {
        return Ok(0);
    };
    let read = |field: &str| {
        method[field]
            .as_str()
            .and_then(|t| Decimal::from_str(t.trim()).ok())
            .ok_or_else(|| format!("unreadable {field} {}", method[field]))
    };
    let paid = read("totalPaid")?.checked_mul(read("rate")?);
    paid.and_then(decimal_cents)
        .ok_or_else(|| "paid amount out of range".to_owned())
}

/// A decimal amount of dollars to cents, rounded half to even as the
/// provider rounds its own `paidAmount`.
fn decimal_to_cents_rounded(text: &str) -> Option<i64> {
    Decimal::from_str(text.trim()).ok().and_then(decimal_cents)
}

fn decimal_cents(amount: Decimal) -> Option<i64> {
    let cents = amount
        .round_dp_with_strategy(2, RoundingStrategy::MidpointNearestEven)
        .checked_mul(Decimal::ONE_HUNDRED)?;
    i64::try_from(cents.trunc()).ok()
}

/// Reads a refund pull payment.
pub fn read_pull_payment(body: &Value) -> Result<RefundPullPayment, String> {
    let id = body["id"].as_str().ok_or("pull payment without id")?;
    let currency = body["currency"].as_str().unwrap_or("").to_owned();
    let amount = body["amount"].as_str().unwrap_or("0").to_owned();
    let usd_cents = if currency == "USD" {
        decimal_to_cents_rounded(&amount)
    } else {
        None
    };
    Ok(RefundPullPayment {
        id: id.to_owned(),
        amount,
        currency,
        usd_cents,
    })
}

#[async_trait]
impl PaymentProvider for BtcPayClient {
    async fn open_invoice(
        &self,
        deposit_id: &str,
        amount_cents: i64,
        minutes: u32,
    ) -> Result<OpenedInvoice, PaymentError> {
        let body = json!({
            "amount": cents_to_decimal(amount_cents),
            "currency": "USD",
            "metadata": { "orderId": deposit_id },
            "checkout": { "expirationMinutes": minutes },
        });
        let answer = self
            .send(self.http.post(self.invoices_url()).json(&body))
            .await?;
        let malformed = || PaymentError::Refused {
            retryable: true,
            message: "malformed invoice answer".into(),
        };
        let invoice_id = answer["id"].as_str().ok_or_else(malformed)?.to_owned();
        let checkout_url = answer["checkoutLink"]
            .as_str()
            .ok_or_else(malformed)?
            .to_owned();
        let expires_at = answer["expirationTime"]
            .as_i64()
            .and_then(|t| DateTime::<Utc>::from_timestamp(t, 0))
            .ok_or_else(malformed)?;
        Ok(OpenedInvoice {
            invoice_id,
            checkout_url,
            expires_at,
        })
    }

    async fn invoice_state(&self, invoice_id: &str) -> Result<InvoiceReading, PaymentError> {
        let url = format!("{}/{invoice_id}", self.invoices_url());
        let invoice = self.send(self.http.get(&url)).await?;
        let methods = self
            .send(self.http.get(format!("{url}/payment-methods")))
            .await?;
        read_invoice(&invoice, &methods).map_err(|message| PaymentError::Refused {
            retryable: true,
            message: format!("invoice {invoice_id}: {message}"),
        })
    }

    async fn refund(&self, pull_payment_id: &str) -> Result<RefundPullPayment, PaymentError> {
        let url = format!("{}/api/v1/pull-payments/{pull_payment_id}", self.base_url);
        let body = self.send(self.http.get(url)).await?;
        read_pull_payment(&body).map_err(|message| PaymentError::Refused {
            retryable: true,
            message,
        })
    }
}

/// `12345` → `"123.45"`.
pub fn cents_to_decimal(cents: i64) -> String {
    let sign = if cents < 0 { "-" } else { "" };
    // Unsigned: `i64::MIN` has no positive `i64`.
    let magnitude = cents.unsigned_abs();
    format!("{sign}{}.{:02}", magnitude / 100, magnitude % 100)
}

/// `"123.45"` → `12345`; more than two decimals are truncated toward zero.
pub fn decimal_to_cents(text: &str) -> Option<i64> {
    let text = text.trim();
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    if whole.is_empty()
        || !whole.bytes().all(|b| b.is_ascii_digit())
        || !fraction.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let cents_part: String = fraction
        .chars()
        .chain(std::iter::repeat('0'))
        .take(2)
        .collect();
    let whole = whole.parse::<i64>().ok()?.checked_mul(100)?;
    let cents = cents_part.parse::<i64>().ok()?;
    // Built toward its sign so that `i64::MIN`, which has no positive
    // counterpart, reads back too.
    if negative {
        whole.checked_neg()?.checked_sub(cents)
    } else {
        whole.checked_add(cents)
    }
}

/// The `BTCPay-Sig` header of a body.
pub fn signature(secret: &str, body: &[u8]) -> String {
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret.as_bytes()) {
        Ok(mac) => mac,
        Err(_) => return String::new(),
    };
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// Whether `header` is the right signature of `body`, compared in constant time.
pub fn verify(secret: &str, body: &[u8], header: Option<&str>) -> bool {
    let Some(presented) = header.and_then(|h| h.trim().strip_prefix("sha256=")) else {
        return false;
    };
    let Ok(presented) = hex::decode(presented) else {
        return false;
    };
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret.as_bytes()) else {
        return false;
    };
    mac.update(body);
    mac.verify_slice(&presented).is_ok()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn decimals_convert_exactly() {
        assert_eq!(cents_to_decimal(10_000), "100.00");
        assert_eq!(cents_to_decimal(5), "0.05");
        assert_eq!(decimal_to_cents("100.00"), Some(10_000));
        assert_eq!(decimal_to_cents("0.1"), Some(10));
        assert_eq!(decimal_to_cents("12"), Some(1200));
        assert_eq!(decimal_to_cents("1.239"), Some(123));
        assert_eq!(decimal_to_cents("abc"), None);
        assert_eq!(decimal_to_cents(".5"), None);
    }

    #[test]
    fn signatures_verify_and_forgeries_do_not() {
        let body = br#"{"deliveryId":"d1"}"#;
        let sig = signature("s3cret", body);
        assert!(verify("s3cret", body, Some(&sig)));
        assert!(!verify("other", body, Some(&sig)));
        assert!(!verify("s3cret", br#"{"deliveryId":"d2"}"#, Some(&sig)));
        assert!(!verify("s3cret", body, None));
        assert!(!verify("s3cret", body, Some("sha256=zz")));
        assert!(!verify("s3cret", body, Some(&sig.replace("sha256=", ""))));
    }

    #[test]
    fn the_extreme_cents_convert_both_ways() {
        // Found by the callback_verify fuzz target: `i64::MIN` overflowed
        // `abs()` when printed and could not be read back.
        assert_eq!(cents_to_decimal(i64::MIN), "-92233720368547758.08");
        assert_eq!(decimal_to_cents("-92233720368547758.08"), Some(i64::MIN));
        assert_eq!(cents_to_decimal(i64::MAX), "92233720368547758.07");
        assert_eq!(decimal_to_cents("92233720368547758.07"), Some(i64::MAX));
        assert_eq!(decimal_to_cents("92233720368547758.08"), None);
        assert_eq!(decimal_to_cents("-92233720368547758.09"), None);
        assert_eq!(decimal_to_cents("-0.05"), Some(-5));
        assert_eq!(decimal_to_cents("-0"), Some(0));
    }

    fn fixture(name: &str) -> Value {
        let path = format!(
            "{}/tests/fixtures/btcpay/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    #[test]
    fn a_paid_over_invoice_reads_the_invoice_level_paid_amount() {
        let reading = read_invoice(
            &fixture("invoice_settled_paid_over.json"),
            &fixture("payment_methods_chain_and_lightning.json"),
        )
        .unwrap();
        assert_eq!(reading.status, InvoiceStatus::Settled);
        assert_eq!(reading.additional, AdditionalStatus::PaidOver);
        assert_eq!(reading.received_cents, 51_234);
    }

    #[test]
    fn without_paid_amount_one_methods_total_times_its_rate_is_what_arrived() {
        // 0.00311154 BTC (on-chain 0.00207436 + Lightning 0.00103718, the
        // total each method reports) × 96414.37 USD/BTC = 299.997… → 300.00.
        // Summing `totalPaid` over both methods would read 600.00.
        let reading = read_invoice(
            &fixture("invoice_expired_paid_partial_no_paid_amount.json"),
            &fixture("payment_methods_chain_and_lightning.json"),
        )
        .unwrap();
        assert_eq!(reading.status, InvoiceStatus::Expired);
        assert_eq!(reading.additional, AdditionalStatus::PaidPartial);
        assert_eq!(reading.received_cents, 30_000);
        assert!(
            reading.confirming,
            "the Lightning payment is still Processing"
        );
    }

    #[test]
    fn an_invoice_with_an_unknown_status_is_not_guessed() {
        let mut invoice = fixture("invoice_settled_paid_over.json");
        invoice["status"] = json!("Complete");
        assert!(read_invoice(&invoice, &json!([])).is_err());
        let mut invoice = fixture("invoice_settled_paid_over.json");
        invoice["additionalStatus"] = json!("Refunded");
        assert!(read_invoice(&invoice, &json!([])).is_err());
    }

    #[test]
    fn both_error_shapes_are_named() {
        assert_eq!(
            describe_error(&fixture("error_validation_422.json")),
            "validation failed (amount: The amount should be 0 or more.; checkout.expirationMinutes: expirationMinutes must be greater than 0)"
        );
        assert_eq!(
            describe_error(&fixture("error_invoice_not_found_404.json")),
            "invoice-not-found (The invoice was not found)"
        );
        assert_eq!(describe_error(&Value::Null), "no readable error body");
    }

    #[test]
    fn a_refund_pull_payment_is_read_in_its_own_currency() {
        let refund = read_pull_payment(&fixture("pull_payment.json")).unwrap();
        assert_eq!(refund.id, "3vL8mN2bQ5rT7wY9zA1cE4");
        assert_eq!(refund.currency, "BTC");
        assert_eq!(refund.amount, "0.00531392");
        assert_eq!(refund.usd_cents, None);
    }

    #[test]
    fn recorded_webhooks_verify_under_their_signature() {
        for name in [
            "webhook_invoice_settled.json",
            "webhook_invoice_settled_redelivery.json",
            "webhook_invoice_received_payment_late.json",
            "webhook_invoice_refund.json",
        ] {
            let path = format!(
                "{}/tests/fixtures/btcpay/{name}",
                env!("CARGO_MANIFEST_DIR")
            );
            let body = std::fs::read(path).unwrap();
            let sig = signature("whsec", &body);
            assert!(verify("whsec", &body, Some(&sig)), "{name}");
        }
    }

    proptest! {
        #[test]
        fn cents_round_trip(cents in -10_000_000_000i64..10_000_000_000) {
            prop_assert_eq!(decimal_to_cents(&cents_to_decimal(cents)), Some(cents));
        }
    }
}
