//! The BTCPay webhook: `payments::btcpay::verify` of the `BTCPay-Sig` header,
//! the reading of the callback body that follows it (`deposits::Deposits::
//! on_callback`), and the dollar/cent conversions of the adapter.
//!
//! The input is newline-framed so a corpus can hold real callbacks:
//! `secret \n header \n decimal \n body`, a header of `-` meaning none.
//!
//! - `verify` never panics; the signature `signature` makes verifies (also
//!   with surrounding whitespace); a header that verifies carries exactly that
//!   MAC; one more byte of body no longer verifies.
//! - The callback body's fields are read as the route reads them, without a
//!   panic on any JSON.
//! - `decimal_to_cents` never panics, and what it reads prints back and reads
//!   again to the same cents; `cents_to_decimal` of any `i64` reads back to
//!   the same value.
#![no_main]

use esim_reseller::payments::btcpay::{cents_to_decimal, decimal_to_cents, signature, verify};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fn callback_fields(body: &[u8]) {
    // As `Deposits::on_callback` reads a verified body.
    let Ok(event) = serde_json::from_slice::<Value>(body) else {
        return;
    };
    let _delivery_id = event["deliveryId"].as_str().unwrap_or_default().to_owned();
    let _invoice_id = event["invoiceId"].as_str().unwrap_or_default().to_owned();
    let _order_id = event["metadata"]["orderId"].as_str();
    let _kind = event["type"].as_str().unwrap_or("");
}

fn round_trip(cents: i64) {
    let text = cents_to_decimal(cents);
    assert_eq!(
        decimal_to_cents(&text),
        Some(cents),
        "{cents} printed as {text}"
    );
}

fuzz_target!(|data: &[u8]| {
    let mut parts = data.splitn(4, |b| *b == b'\n');
    let mut next = || parts.next().unwrap_or_default();
    let secret = String::from_utf8_lossy(next()).into_owned();
    let header = String::from_utf8_lossy(next()).into_owned();
    let decimal_raw = next();
    let decimal = String::from_utf8_lossy(decimal_raw).into_owned();
    let body = next();

    let header = (header != "-").then_some(header.as_str());
    let good = signature(&secret, body);
    if verify(&secret, body, header) {
        let presented = header
            .and_then(|h| h.trim().strip_prefix("sha256="))
            .expect("a verified header has the sha256= form");
        assert_eq!(format!("sha256={}", presented.to_ascii_lowercase()), good);
        callback_fields(body);
    }
    assert!(verify(&secret, body, Some(&good)));
    assert!(verify(&secret, body, Some(&format!(" {good}\t"))));
    let mut longer = body.to_vec();
    longer.push(b'x');
    assert!(!verify(&secret, &longer, Some(&good)));
    callback_fields(body);

    if let Some(cents) = decimal_to_cents(&decimal) {
        round_trip(cents);
    }
    if let Ok(cents) = decimal.trim().parse::<i64>() {
        round_trip(cents);
    }
    let mut raw = [0u8; 8];
    for (slot, byte) in raw.iter_mut().zip(decimal_raw) {
        *slot = *byte;
    }
    round_trip(i64::from_le_bytes(raw));
});
