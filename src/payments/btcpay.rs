//! BTCPay Server Greenfield API adapter and webhook verification.
//!
//! - `POST /api/v1/stores/{storeId}/invoices` `{amount, currency: "USD",
//!   metadata: {orderId: <deposit id>}, checkout: {expirationMinutes}}`
//!   → `{id, checkoutLink, expirationTime, status}`
//! - `GET /api/v1/stores/{storeId}/invoices/{id}` → `{status, additionalStatus, ...}`
//! - `GET /api/v1/stores/{storeId}/invoices/{id}/payment-methods` → `[{totalPaid}]`
//!   (in the invoice currency)
//! - Webhooks carry `BTCPay-Sig: sha256=<hex HMAC-SHA256(secret, raw body)>`.
//!
//! Amounts cross the wire as decimal strings of dollars and are converted to
//! integer cents exactly (no floating point).

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Value, json};
use sha2::Sha256;

use super::{InvoiceState, InvoiceStatus, OpenedInvoice, PaymentError, PaymentProvider};

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
        let body: Value = response.json().await.unwrap_or(Value::Null);
        if status.is_success() {
            Ok(body)
        } else {
            Err(PaymentError::Refused {
                retryable: status.is_server_error() || status.as_u16() == 429,
                message: format!("HTTP {status}: {}", body["message"].as_str().unwrap_or("")),
            })
        }
    }
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

    async fn invoice_state(&self, invoice_id: &str) -> Result<InvoiceState, PaymentError> {
        let url = format!("{}/{invoice_id}", self.invoices_url());
        let invoice = self.send(self.http.get(&url)).await?;
        let methods = self
            .send(self.http.get(format!("{url}/payment-methods")))
            .await?;
        let paid_cents = methods
            .as_array()
            .map(|list| {
                list.iter()
                    .filter_map(|m| m["totalPaid"].as_str().and_then(decimal_to_cents))
                    .sum()
            })
            .unwrap_or(0);
        let status = match invoice["status"].as_str().unwrap_or("New") {
            "Processing" => InvoiceStatus::Processing,
            "Settled" => InvoiceStatus::Settled,
            "Expired" => InvoiceStatus::Expired,
            "Invalid" => InvoiceStatus::Invalid,
            _ => InvoiceStatus::New,
        };
        let additional = invoice["additionalStatus"].as_str().unwrap_or("None");
        Ok(InvoiceState {
            status,
            paid_cents,
            paid_late: additional == "PaidLate",
            refunded: invoice["refunded"].as_bool().unwrap_or(false) || additional == "Refunded",
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

    proptest! {
        #[test]
        fn cents_round_trip(cents in -10_000_000_000i64..10_000_000_000) {
            prop_assert_eq!(decimal_to_cents(&cents_to_decimal(cents)), Some(cents));
        }
    }
}
