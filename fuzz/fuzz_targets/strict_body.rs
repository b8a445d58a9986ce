//! Strict JSON bodies (`http::extract::parse_json` / `from_object`) of the
//! real request bodies, `POST /orders` and `POST /deposits`, on any bytes.
//!
//! - Parsing never panics; every refusal is a 400 `request.invalid` that
//!   renders without a panic.
//! - `parse_json` and `from_object` of the same JSON agree.
//! - The order route's own parser (`parse_order_body`, which also takes the
//!   idempotency fingerprint) never panics, and accepts nothing `from_object`
//!   refuses.
//! - The idempotency fingerprint of a JSON value does not depend on the order
//!   of object members.
#![no_main]

use axum::{body::Bytes, response::IntoResponse};
use esim_reseller::{
    domain::idempotency::fingerprint,
    http::{
        deposits::NewDeposit,
        error::ApiError,
        extract::{from_object, parse_json, parse_value},
        orders::{OrderBody, parse_order_body},
    },
};
use libfuzzer_sys::fuzz_target;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

fn render(err: ApiError) {
    assert_eq!(err.code.as_str(), "request.invalid");
    let _ = err.body("req_fuzz", "https://example.invalid/docs");
    let _ = ApiError::from_stored(&err.to_stored());
    assert_eq!(err.into_response().status().as_u16(), 400);
}

/// Parses with `parse_json`, checks `from_object` agrees; whether it parsed.
fn check<T: DeserializeOwned>(data: &[u8], value: Option<&Value>) -> bool {
    let parsed = parse_json::<T>(data);
    if let Some(value) = value {
        let again = from_object::<T>(value.clone());
        assert_eq!(parsed.is_ok(), again.is_ok());
        if let Err(err) = again {
            render(err);
        }
    }
    match parsed {
        Ok(_) => true,
        Err(err) => {
            render(err);
            false
        }
    }
}

/// The same value with every object's members in reverse order.
fn reversed(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut out = Map::new();
            for (k, v) in map.iter().rev() {
                out.insert(k.clone(), reversed(v));
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(reversed).collect()),
        other => other.clone(),
    }
}

fuzz_target!(|data: &[u8]| {
    // The body as the service reads it (an object naming a field twice is refused).
    let value: Option<Value> = parse_value(data).ok();
    let body_ok = check::<OrderBody>(data, value.as_ref());
    check::<NewDeposit>(data, value.as_ref());

    match parse_order_body(&Bytes::copy_from_slice(data)) {
        Ok(_) => assert!(
            body_ok,
            "parse_order_body accepted what from_object refuses"
        ),
        Err(err) => render(err),
    }

    if let Some(value) = &value {
        assert_eq!(fingerprint(value), fingerprint(&reversed(value)));
    }
});
