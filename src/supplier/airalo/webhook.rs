//! Airalo's `airalo-signature` and the body of its async-order webhook
//! (recorded shapes: `tests/fixtures/airalo/webhook_async_order*.json`).
//!
//! The signature is hex HMAC-SHA512 keyed with the API client secret over
//! the JSON payload (REST API → Webhook definition; the official SDKs
//! construct their `Signature` helper with `client_secret`). What exactly
//! is hashed is not the raw body in the SDKs' own check: each one parses
//! the received text and re-encodes it compactly with every `/` written
//! `\/` (PHP's `json_encode` default; the Python and Node SDKs add the
//! escaping by hand), non-ASCII left as UTF-8 in Python and Node but
//! written `\uXXXX` by PHP. Airalo's sender is PHP and sends the same
//! encoding it signs, so the raw body normally matches too.
//! [`verify_signature`] accepts any of these three forms, compared in
//! constant time.
//!
//! The SDKs also send the header on their own requests (the token request
//! and every order), signing the payload the same way; the adapter does
//! the same with [`sign`] and [`canonical_json`].

use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha512;

use super::parse;
use crate::supplier::Profile;

/// The header that carries the signature.
pub const SIGNATURE_HEADER: &str = "airalo-signature";

/// Hex HMAC-SHA512 of `payload` keyed with `secret`.
pub fn sign(secret: &str, payload: &[u8]) -> String {
    match Hmac::<Sha512>::new_from_slice(secret.as_bytes()) {
        Ok(mut mac) => {
            mac.update(payload);
            hex::encode(mac.finalize().into_bytes())
        }
        // HMAC takes keys of any length.
        Err(_) => String::new(),
    }
}

/// The payload as the official SDKs sign it: compact JSON, keys in their
/// order, every `/` written `\/`, non-ASCII as UTF-8.
pub fn canonical_json(value: &Value) -> String {
    // `/` only ever occurs inside JSON strings, so escaping every one is
    // exactly PHP's default.
    value.to_string().replace('/', "\\/")
}

/// [`canonical_json`] with every non-ASCII character written `\uXXXX`, as
/// PHP's `json_encode` writes it by default.
fn php_json(value: &Value) -> String {
    let mut out = String::new();
    for ch in canonical_json(value).chars() {
        if ch.is_ascii() {
            out.push(ch);
        } else {
            let mut units = [0u16; 2];
            for unit in ch.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
    out
}

/// Whether `header` (the `airalo-signature` value) signs `raw_body` with
/// `secret` (the API client secret): over the raw body, or over the body
/// re-encoded as the SDKs re-encode it. Constant-time comparisons.
pub fn verify_signature(secret: &str, raw_body: &[u8], header: &str) -> bool {
    let Ok(expected) = hex::decode(header.trim().to_ascii_lowercase()) else {
        return false;
    };
    if expected.is_empty() {
        return false;
    }
    let matches = |payload: &[u8]| match Hmac::<Sha512>::new_from_slice(secret.as_bytes()) {
        Ok(mut mac) => {
            mac.update(payload);
            mac.verify_slice(&expected).is_ok()
        }
        Err(_) => false,
    };
    if matches(raw_body) {
        return true;
    }
    let Ok(value) = serde_json::from_slice::<Value>(raw_body) else {
        return false;
    };
    matches(canonical_json(&value).as_bytes()) || matches(php_json(&value).as_bytes())
}

/// What an async-order webhook says about the order it delivers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookOrder {
    /// The `request_id` that `POST /orders-async` answered.
    pub request_id: Option<String>,
    /// The order's `description`: our transaction id.
    pub description: Option<String>,
    /// Airalo's order id, when the order was created.
    pub order_id: Option<String>,
    /// The profiles the order carries.
    pub profiles: Vec<Profile>,
    /// The wholesale price of one unit in US cents, when the body says.
    pub unit_cost_cents: Option<i64>,
}

/// The order of an async-order webhook body: "the same as the response of
/// the regular order", plus `request_id` (read at the top level or inside
/// `data`). `None` for a body that names no order (a low-data or
/// credit-limit notification).
pub fn webhook_order(body: &Value) -> Option<WebhookOrder> {
    let order = if body["data"].is_object() {
        &body["data"]
    } else {
        body
    };
    let text = |value: &Value| value.as_str().filter(|s| !s.is_empty()).map(str::to_owned);
    let request_id = text(&body["request_id"]).or_else(|| text(&order["request_id"]));
    let description = text(&order["description"]);
    let order_id = parse::order_id(order);
    if request_id.is_none() && description.is_none() && order_id.is_none() {
        return None;
    }
    Some(WebhookOrder {
        request_id,
        description,
        order_id,
        profiles: parse::read_profiles(order),
        unit_cost_cents: parse::unit_cost_cents(order),
    })
}
