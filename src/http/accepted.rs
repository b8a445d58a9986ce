//! The `202 Accepted` answer to a new order, its body written straight from
//! the order the account actor accepted: exactly the bytes serde writes for
//! its [`OrderView`](super::orders::OrderView) with no eSIMs yet, without
//! copying the order into a view first and without serde escaping each of
//! the view's eighteen keys at run time (the keys and the fixed words are
//! written as they are, the order's strings and metadata through
//! `serde_json`). Every accepted order pays for this body; its copy and the
//! derived serializer were about 3% of an order's instructions. A property
//! test holds the bytes equal to serde's over any order.

use axum::{
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use entities::order;

use super::orders::poll_after_ms;
use crate::domain::{pricing::discount_from_prices, time};

/// The body's usual length, so that it is written without growing.
const USUAL_LEN: usize = 512;

/// The answer to a new order: `202 Accepted`, its body, and where to poll
/// the order (`Location`).
pub(crate) fn response(order: &order::Model) -> Response {
    let json = HeaderValue::from_static("application/json");
    let mut response = (
        StatusCode::ACCEPTED,
        [(header::CONTENT_TYPE, json)],
        body(order),
    )
        .into_response();
    let location = format!("/partner/v1/orders/{}", order.id);
    if let Ok(value) = HeaderValue::from_str(&location) {
        response.headers_mut().insert(header::LOCATION, value);
    }
    response
}

/// The JSON of `order` as its view with no eSIMs, byte for byte.
fn body(order: &order::Model) -> Vec<u8> {
    let mut out = Vec::with_capacity(USUAL_LEN);
    out.extend_from_slice(br#"{"object":"order","id":"#);
    string(&mut out, &order.id);
    out.extend_from_slice(br#","mode":"#);
    word(&mut out, order.mode.as_str());
    out.extend_from_slice(br#","status":"#);
    word(&mut out, order.status.as_str());
    out.extend_from_slice(br#","plan_id":"#);
    string(&mut out, &order.plan_id);
    out.extend_from_slice(br#","quantity":"#);
    integer(&mut out, order.quantity);
    out.extend_from_slice(br#","unit_price_cents":"#);
    integer(&mut out, order.unit_price_cents);
    out.extend_from_slice(br#","total_cents":"#);
    integer(&mut out, order.total_cents);
    out.extend_from_slice(br#","list_unit_cents":"#);
    integer(&mut out, order.list_unit_cents);
    out.extend_from_slice(br#","discount_bps":"#);
    integer(
        &mut out,
        discount_from_prices(order.list_unit_cents, order.unit_price_cents),
    );
    out.extend_from_slice(br#","price_source":"#);
    string(&mut out, &order.price_source);
    out.extend_from_slice(br#","currency":"USD","refunded_cents":"#);
    integer(&mut out, order.refunded_cents);
    out.extend_from_slice(br#","metadata":"#);
    // Writing a `Value` into a `Vec` cannot fail: its map keys are strings
    // and a `Vec` takes every byte.
    let _ = serde_json::to_writer(&mut out, &order.metadata);
    out.extend_from_slice(br#","esims":[],"failure_code":"#);
    match order.failure_code {
        Some(code) => word(&mut out, code.as_str()),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(br#","poll_after_ms":"#);
    match poll_after_ms(order.status) {
        Some(ms) => integer(&mut out, ms),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(br#","created_at":"#);
    word(&mut out, &time::rfc3339_z(&order.created_at));
    out.extend_from_slice(br#","completed_at":"#);
    match &order.completed_at {
        Some(at) => word(&mut out, &time::rfc3339_z(at)),
        None => out.extend_from_slice(b"null"),
    }
    out.push(b'}');
    out
}

/// A string of the partner's or the catalogue's, escaped as serde escapes it.
fn string(out: &mut Vec<u8>, text: &str) {
    // A `&str` into a `Vec` cannot fail.
    let _ = serde_json::to_writer(out, text);
}

/// A text that needs no escaping (a vocabulary's word, an instant's digits
/// and separators), quoted.
fn word(out: &mut Vec<u8>, text: &str) {
    out.push(b'"');
    out.extend_from_slice(text.as_bytes());
    out.push(b'"');
}

/// An integer, in the digits serde writes.
fn integer(out: &mut Vec<u8>, value: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

#[cfg(test)]
mod tests {
    use chrono::DateTime;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::*;
    use crate::{
        domain::{
            order::{FailureCode, OrderStatus, fixtures},
            partner::Mode,
            time::strategies::any_nanos,
        },
        http::orders::OrderView,
    };

    /// The bytes serde writes for the order's view with no eSIMs.
    fn by_serde(order: &order::Model) -> Vec<u8> {
        serde_json::to_vec(&OrderView::new(order.clone(), Vec::new())).unwrap()
    }

    fn accepted_order(text: &str, metadata: Value) -> order::Model {
        order::Model {
            mode: Mode::Live,
            plan_id: format!("pl_{text}"),
            quantity: 3,
            unit_price_cents: 450,
            list_unit_cents: 500,
            price_source: format!("tier:{text}"),
            metadata,
            created_at: DateTime::from_timestamp(1_764_000_000, 123_000_000).unwrap(),
            ..fixtures::accepted(&format!("po_{text}"), "pa_1", "k", 1350)
        }
    }

    #[test]
    fn an_accepted_order_reads_as_its_view() {
        let accepted = accepted_order(
            "fr_1gb_7d",
            json!({"ref": "a\"b\\c\u{1}é", "n": [1, 2.5, null]}),
        );
        let written = body(&accepted);
        assert_eq!(written, by_serde(&accepted));
        let read: Value = serde_json::from_slice(&written).unwrap();
        assert_eq!(read["object"], "order");
        assert_eq!(read["poll_after_ms"], 1000);
        assert_eq!(read["discount_bps"], 1000);
        assert_eq!(read["created_at"], "2025-11-24T16:00:00.123Z");
    }

    #[tokio::test]
    async fn the_answer_is_202_json_with_where_to_poll() {
        let accepted = accepted_order("fr_1gb_7d", json!({}));
        let answer = response(&accepted);
        assert_eq!(answer.status(), StatusCode::ACCEPTED);
        let headers = answer.headers();
        assert_eq!(headers[header::CONTENT_TYPE], "application/json");
        assert_eq!(headers[header::LOCATION], "/partner/v1/orders/po_fr_1gb_7d");
        let bytes = axum::body::to_bytes(answer.into_body(), usize::MAX)
            .await
            .unwrap();
        assert_eq!(bytes, by_serde(&accepted));
    }

    /// Any JSON value a partner may send as metadata.
    fn any_metadata() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            any::<String>().prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map(any::<String>(), inner, 0..6)
                    .prop_map(|map| Value::Object(map.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Any order, in any state, with any strings, numbers, metadata and
        /// instants: the same bytes as serde writes for its view.
        #[test]
        fn the_same_bytes_as_serde_writes(
            text in any::<String>(),
            metadata in any_metadata(),
            sandbox in any::<bool>(),
            status in prop::sample::select(OrderStatus::ALL),
            failure in prop::option::of(prop::sample::select(FailureCode::ALL)),
            numbers in any::<(i32, i64, i64, i64, i64)>(),
            seconds in -8_000_000_000_000i64..8_000_000_000_000i64,
            nanos in any_nanos(),
            completed in any::<bool>(),
        ) {
            let mut order = accepted_order(&text, metadata);
            order.id = text.clone();
            order.price_source = text.chars().rev().collect();
            order.mode = if sandbox { Mode::Sandbox } else { Mode::Live };
            order.status = status;
            order.failure_code = failure;
            (order.quantity, order.unit_price_cents, order.total_cents, order.list_unit_cents, order.refunded_cents) = numbers;
            // Prices as the catalogue makes them, so the discount does not overflow.
            order.list_unit_cents = order.list_unit_cents.rem_euclid(1 << 40);
            order.unit_price_cents = order.unit_price_cents.rem_euclid(1 << 40);
            let at = DateTime::from_timestamp(seconds, nanos).unwrap();
            order.created_at = at;
            order.completed_at = completed.then_some(at);
            prop_assert_eq!(body(&order), by_serde(&order));
        }
    }
}
