//! Pagination cursors (`domain::cursor`).
//!
//! - `decode` of any string, under any scope and secret, returns; it never panics.
//! - Round trip: `encode(scope, key)` then `decode(scope, _)` gives `key` back
//!   (or `TooLong` when the key made the cursor longer than 512 characters);
//!   under another scope it is `OtherList`; with one character changed it never
//!   yields a different key.
//! - A payload signed with the right secret but holding any bytes (what a
//!   leaked secret would allow) is refused or decoded, never a panic, and what
//!   decodes goes through the list routes' keyset readers without a panic.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use esim_reseller::{
    catalogue::Keyset,
    domain::cursor::{CursorCodec, CursorError, MAX_LEN},
    http::orders::time_id_keyset,
};
use hmac::{Hmac, Mac};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use sha2::Sha256;

/// The values a keyset can hold. Floats are left out: keysets carry integers
/// and strings only, and serde_json's default float parsing is not bit-exact.
#[derive(Arbitrary, Debug)]
enum Key {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Text(String),
    List(Vec<Key>),
}

/// Nesting kept under serde_json's recursion limit (128), which `decode`
/// inherits; real keysets are flat.
const MAX_DEPTH: usize = 8;

impl Key {
    fn to_value(&self, depth: usize) -> Value {
        match self {
            Key::Null => Value::Null,
            Key::Bool(b) => Value::Bool(*b),
            Key::Int(i) => Value::from(*i),
            Key::Uint(u) => Value::from(*u),
            Key::Text(s) => Value::from(s.as_str()),
            Key::List(items) if depth < MAX_DEPTH => {
                Value::Array(items.iter().map(|k| k.to_value(depth + 1)).collect())
            }
            Key::List(_) => Value::Null,
        }
    }
}

/// The input is newline-framed so a corpus can hold real cursors:
/// `secret \n scope \n other scope \n cursor \n signed payload \n tail`,
/// where the tail drives the round trip (a tamper position, a byte, a key).
struct Input<'a> {
    secret: &'a [u8],
    scope: String,
    other_scope: String,
    cursor: String,
    signed_payload: &'a [u8],
    tamper_at: usize,
    tamper_with: u8,
    key: Vec<Key>,
}

impl<'a> Input<'a> {
    fn parse(data: &'a [u8]) -> Self {
        let mut parts = data.splitn(6, |b| *b == b'\n');
        let mut next = || parts.next().unwrap_or_default();
        let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
        let secret = next();
        let scope = text(next());
        let other_scope = text(next());
        let cursor = text(next());
        let signed_payload = next();
        let mut tail = Unstructured::new(next());
        let tamper_at = tail.arbitrary().unwrap_or_default();
        let tamper_with = tail.arbitrary().unwrap_or_default();
        Self {
            secret,
            scope,
            other_scope,
            cursor,
            signed_payload,
            tamper_at,
            tamper_with,
            key: Vec::arbitrary_take_rest(tail).unwrap_or_default(),
        }
    }
}

fn consume(values: &[Value]) {
    let _ = Keyset::from_values(values);
    let _ = time_id_keyset(values);
    let _ = values.first().and_then(Value::as_i64);
}

fn sign(secret: &[u8], body: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(body.as_bytes());
    URL_SAFE_NO_PAD.encode(&mac.finalize().into_bytes()[..16])
}

fuzz_target!(|data: &[u8]| {
    let input = Input::parse(data);
    let codec = CursorCodec::new(input.secret);

    // Arbitrary cursors.
    match codec.decode(&input.scope, &input.cursor) {
        Ok(values) => consume(&values),
        Err(CursorError::TooLong) => assert!(input.cursor.len() > MAX_LEN),
        Err(_) => {}
    }

    // Round trip.
    let key: Vec<Value> = input.key.iter().map(|k| k.to_value(0)).collect();
    let cursor = codec.encode(&input.scope, key.clone());
    assert!(cursor.is_ascii());
    let decoded = codec.decode(&input.scope, &cursor);
    if cursor.len() > MAX_LEN {
        assert_eq!(decoded, Err(CursorError::TooLong));
        return;
    }
    assert_eq!(decoded.as_ref(), Ok(&key), "round trip of {cursor}");
    consume(&key);
    if input.other_scope != input.scope {
        assert_eq!(
            codec.decode(&input.other_scope, &cursor),
            Err(CursorError::OtherList)
        );
    }

    // One character changed: refused, or (if the change decodes to the same
    // bytes) the same key; never another key.
    let mut tampered = cursor.clone().into_bytes();
    let at = input.tamper_at % tampered.len();
    tampered[at] = input.tamper_with;
    if let Ok(tampered) = String::from_utf8(tampered)
        && tampered != cursor
        && let Ok(values) = codec.decode(&input.scope, &tampered)
    {
        assert_eq!(values, key, "{tampered} decoded to another key");
    }

    // A correctly signed payload of arbitrary bytes.
    let body = URL_SAFE_NO_PAD.encode(input.signed_payload);
    let forged = format!("v1.{body}.{}", sign(input.secret, &body));
    if let Ok(values) = codec.decode(&input.scope, &forged) {
        consume(&values);
    }
});
