//! The request fingerprint an Idempotency-Key is bound to: SHA-256 of the whole
//! body in canonical JSON (object keys sorted at every depth, no insignificant
//! whitespace). Key order does not matter; any change of value does.

use serde::Serialize;
use serde_json::Value;

/// Shortest and longest Idempotency-Key, after trimming.
pub const MIN_KEY_LEN: usize = 16;
pub const MAX_KEY_LEN: usize = 255;

/// Lowercase hex fingerprint of a request body.
pub fn fingerprint(body: &Value) -> String {
    let mut canonical = Vec::with_capacity(128);
    write_canonical(body, &mut canonical);
    super::digest::sha256_hex(&canonical)
}

/// `value` in canonical JSON: objects' keys in byte order at every depth,
/// every key and scalar in the compact text `serde_json` writes for it.
fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            // A map's keys are distinct, so an unstable sort orders them
            // as a stable one would.
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_compact(key, out);
                out.push(b':');
                write_canonical(item, out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        scalar => write_compact(scalar, out),
    }
}

/// `value`'s compact JSON text (what its `Display` writes), written into
/// `out` without the formatting machinery. Writing into a `Vec` cannot
/// fail, and a string or a JSON scalar always serializes.
fn write_compact(value: &(impl Serialize + ?Sized), out: &mut Vec<u8>) {
    let _ = serde_json::to_writer(out, value);
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    #[test]
    fn key_order_and_whitespace_do_not_matter() {
        let a: Value = serde_json::from_str(
            r#"{"plan_id":"pl_x","quantity":2,"metadata":{"b":1,"a":[1,{"y":2,"x":1}]}}"#,
        )
        .unwrap();
        let b: Value = serde_json::from_str(r#"{ "metadata": {"a": [1, {"x": 1, "y": 2}], "b": 1}, "quantity": 2, "plan_id": "pl_x" }"#).unwrap();
        assert_eq!(fingerprint(&a), fingerprint(&b));
    }

    #[test]
    fn any_value_change_changes_it() {
        let base = json!({ "plan_id": "pl_x", "quantity": 2 });
        for other in [
            json!({ "plan_id": "pl_y", "quantity": 2 }),
            json!({ "plan_id": "pl_x", "quantity": 3 }),
            json!({ "plan_id": "pl_x", "quantity": 2, "metadata": {} }),
            json!({ "plan_id": "pl_x", "quantity": "2" }),
        ] {
            assert_ne!(fingerprint(&base), fingerprint(&other), "{other}");
        }
    }

    fn shuffled(entries: &[(String, i64)], rotate: usize) -> Value {
        let mut rotated = entries.to_vec();
        if !rotated.is_empty() {
            let by = rotate % rotated.len();
            rotated.rotate_left(by);
        }
        Value::Object(rotated.into_iter().map(|(k, v)| (k, json!(v))).collect())
    }

    /// The canonical text as it was first written (each key and scalar
    /// through `Value`'s `Display`): the fingerprints stored with the keys
    /// already bound were made from it.
    fn canonical_by_display(value: &Value, out: &mut String) {
        match value {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                out.push('{');
                for (i, key) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(key.clone()).to_string());
                    out.push(':');
                    canonical_by_display(&map[key], out);
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    canonical_by_display(item, out);
                }
                out.push(']');
            }
            scalar => out.push_str(&scalar.to_string()),
        }
    }

    /// Any JSON value: every kind of scalar (strings with quotes,
    /// backslashes, control characters and any Unicode), nested.
    fn any_json() -> impl Strategy<Value = Value> {
        let scalar = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<u64>().prop_map(|n| json!(n)),
            any::<f64>().prop_map(|x| json!(x)),
            any::<String>().prop_map(Value::String),
            "[\"\\\\\u{0}-\u{1f}a-z]{0,6}".prop_map(Value::String),
        ];
        scalar.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::vec((any::<String>(), inner), 0..6)
                    .prop_map(|entries| Value::Object(entries.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Written without the formatting machinery, the canonical text is
        /// byte for byte what it was, so every fingerprint already stored
        /// still matches its retry.
        #[test]
        fn the_canonical_text_is_the_one_display_wrote(value in any_json()) {
            let mut canonical = Vec::new();
            write_canonical(&value, &mut canonical);
            let mut by_display = String::new();
            canonical_by_display(&value, &mut by_display);
            prop_assert_eq!(String::from_utf8(canonical).unwrap(), by_display);
        }

        #[test]
        fn the_same_fields_in_any_order_give_the_same_fingerprint(
            entries in proptest::collection::btree_map("[a-z]{1,8}", any::<i64>(), 0..8),
            rotate in 0usize..8,
        ) {
            let entries: Vec<(String, i64)> = entries.into_iter().collect();
            prop_assert_eq!(fingerprint(&shuffled(&entries, 0)), fingerprint(&shuffled(&entries, rotate)));
        }

        #[test]
        fn a_changed_value_gives_another_fingerprint(
            entries in proptest::collection::btree_map("[a-z]{1,8}", any::<i64>(), 1..8),
            pick in 0usize..8,
            delta in 1i64..1000,
        ) {
            let mut changed: Vec<(String, i64)> = entries.clone().into_iter().collect();
            let index = pick % changed.len();
            changed[index].1 = changed[index].1.wrapping_add(delta);
            let original: Vec<(String, i64)> = entries.into_iter().collect();
            prop_assert_ne!(fingerprint(&shuffled(&original, 0)), fingerprint(&shuffled(&changed, 0)));
        }
    }
}
