//! Strict query parsing (`http::extract::parse_query`) of the real query
//! structs of the list and quote routes, on any raw query string.
//!
//! - Parsing never panics, and an error renders (body, response, the stored
//!   form idempotency keeps) without a panic.
//! - A parameter the struct does not name, or one given twice, is always
//!   refused with `request.invalid`; a query that parses names only known
//!   parameters, each once.
//! - The per-parameter checks the handlers run next (`limit`, integer bounds,
//!   RFC 3339 date-times rounded to the microsecond, cursor length and
//!   signature) never panic on any value.
#![no_main]

use std::collections::HashSet;

use axum::response::IntoResponse;
use esim_reseller::{
    domain::cursor::CursorCodec,
    http::{
        deposits::{DepositsQuery, LedgerParams},
        error::{ApiError, Violations},
        esims::EsimsQuery,
        extract::{NoQuery, field_names, parse_query},
        orders::OrdersQuery,
        pagination,
        plans::{PlansQuery, PriceQuery},
    },
};
use libfuzzer_sys::fuzz_target;
use serde::de::DeserializeOwned;

fn check<T: DeserializeOwned>(raw: &str) {
    let allowed = field_names::<T>();
    let mut seen = HashSet::new();
    let mut clean = true;
    for (name, _) in form_urlencoded::parse(raw.as_bytes()) {
        if !allowed.contains(&name.as_ref()) || !seen.insert(name) {
            clean = false;
        }
    }
    match parse_query::<T>(raw) {
        Ok(_) => assert!(
            clean,
            "{raw:?} parsed despite an unknown or repeated parameter"
        ),
        Err(err) => {
            assert_eq!(err.code.as_str(), "request.invalid");
            render(err);
        }
    }
}

fn render(err: ApiError) {
    let body = err.body("req_fuzz", "https://example.invalid/docs");
    assert!(body.get("error").is_some());
    let stored = err.to_stored();
    let _ = ApiError::from_stored(&stored);
    let response = err.into_response();
    assert_eq!(response.status().as_u16(), 400);
}

fuzz_target!(|data: &[u8]| {
    // The router hands handlers the URI's query as text.
    let raw = String::from_utf8_lossy(data);
    check::<PlansQuery>(&raw);
    check::<PriceQuery>(&raw);
    check::<OrdersQuery>(&raw);
    check::<EsimsQuery>(&raw);
    check::<DepositsQuery>(&raw);
    check::<LedgerParams>(&raw);
    check::<NoQuery>(&raw);

    let codec = CursorCodec::new(b"fuzz-cursor-secret");
    let mut v = Violations::default();
    for (name, value) in form_urlencoded::parse(raw.as_bytes()) {
        let value = Some(value.as_ref());
        let limit = pagination::parse_limit(value, &mut v);
        assert!((1..=pagination::MAX_LIMIT).contains(&limit));
        let _ = pagination::parse_int_at_least(value, &name, 0, &mut v);
        let _ = pagination::parse_int_at_least(value, &name, 1, &mut v);
        if let Some(at) = pagination::parse_datetime(value, &name, &mut v) {
            let ceiled = pagination::ceil_to_micros(at);
            assert!(ceiled >= at);
            assert!(ceiled - at < chrono::TimeDelta::microseconds(1));
            let _ = ceiled.timestamp_micros();
        }
        pagination::check_cursor_length(value, &mut v);
        if let Err(err) = pagination::decode_cursor(&codec, &name, value) {
            render(err);
        }
    }
    if let Err(err) = v.into_result() {
        render(err);
    }
});
