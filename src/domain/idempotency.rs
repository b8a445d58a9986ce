//! The request fingerprint an Idempotency-Key is bound to: SHA-256 of the whole
//! body in canonical JSON (object keys sorted at every depth, no insignificant
//! whitespace). Key order does not matter; any change of value does.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// Shortest and longest Idempotency-Key, after trimming.
pub const MIN_KEY_LEN: usize = 16;
pub const MAX_KEY_LEN: usize = 255;

/// Lowercase hex fingerprint of a request body.
pub fn fingerprint(body: &Value) -> String {
    let mut canonical = String::new();
    write_canonical(body, &mut canonical);
    hex::encode(Sha256::digest(canonical.as_bytes()))
}

fn write_canonical(value: &Value, out: &mut String) {
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
                write_canonical(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
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

    proptest! {
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
