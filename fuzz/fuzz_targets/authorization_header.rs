//! The `Authorization` header: `http::auth::bearer_secret` splits
//! `Bearer <secret>` and `domain::api_key::parse_form` checks the key form.
//!
//! - Neither panics on any header value the HTTP layer would accept.
//! - A secret taken from a header is a trimmed piece of that header.
//! - A secret `parse_form` accepts has exactly the spec's form
//!   (`svc_sk_live_` or `svc_sk_test_` and 43 ASCII letters or digits), its
//!   prefix names the mode returned, and it comes back unchanged through
//!   `Bearer <secret>`; its stored digest is 64 lowercase hex characters.
#![no_main]

use axum::http::HeaderValue;
use esim_reseller::{
    domain::{
        api_key::{self, SECRET_LEN, parse_form},
        partner::Mode,
    },
    http::auth::bearer_secret,
};
use libfuzzer_sys::fuzz_target;

fn check_form(presented: &str) {
    let Some(mode) = parse_form(presented) else {
        return;
    };
    let prefix = match mode {
        Mode::Live => "svc_sk_live_",
        Mode::Sandbox => "svc_sk_test_",
    };
    let rest = presented
        .strip_prefix(prefix)
        .unwrap_or_else(|| panic!("{presented:?} accepted as {mode:?}"));
    assert_eq!(rest.len(), SECRET_LEN);
    assert!(rest.bytes().all(|b| b.is_ascii_alphanumeric()));
    let digest = api_key::digest(presented);
    assert_eq!(digest.len(), 64);
    assert!(
        digest
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    );
    let header = HeaderValue::from_str(&format!("Bearer {presented}"))
        .expect("a key of the spec's form is a valid header value");
    assert_eq!(bearer_secret(&header), Some(presented));
}

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        check_form(text);
    }
    // What hyper would hand over: any bytes a header value may hold.
    let Ok(value) = HeaderValue::from_bytes(data) else {
        return;
    };
    if let Some(secret) = bearer_secret(&value) {
        let text = value.to_str().expect("a secret was read from it");
        assert!(text.contains(secret));
        assert_eq!(secret, secret.trim());
        assert!(text.starts_with("Bearer ") || text.starts_with("bearer "));
        check_form(secret);
    }
});
