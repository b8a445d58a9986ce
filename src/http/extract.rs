//! Strict extractors: unknown or repeated query parameters and unknown body
//! fields are refused with 400 `request.invalid` naming them, never ignored
//! (spec rule 9). Rejections speak the error envelope.

use std::collections::HashSet;

use axum::{
    body::Bytes,
    extract::{FromRequest, FromRequestParts, Request},
    http::{StatusCode, header, request::Parts},
};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::error::{ApiError, Violations};

/// The query of a route that takes no parameters: any parameter is refused.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoQuery {}

/// Query parameters deserialized into `T` after refusing unknown and repeated ones.
#[derive(Debug)]
pub struct StrictQuery<T>(pub T);

impl<S, T> FromRequestParts<S> for StrictQuery<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        parse_query(parts.uri.query().unwrap_or_default()).map(StrictQuery)
    }
}

/// Parses a raw query string into `T` strictly.
pub fn parse_query<T: DeserializeOwned>(raw: &str) -> Result<T, ApiError> {
    let allowed = field_names::<T>();
    let mut seen = HashSet::new();
    let mut violations = Violations::default();
    for (name, _) in form_urlencoded::parse(raw.as_bytes()) {
        if !allowed.contains(&name.as_ref()) {
            violations.add(name.as_ref(), "unknown query parameter");
        } else if !seen.insert(name.clone()) {
            violations.add(name.as_ref(), "query parameter given more than once");
        }
    }
    violations.into_result()?;
    let deserializer = serde_urlencoded::Deserializer::new(form_urlencoded::parse(raw.as_bytes()));
    serde_path_to_error::deserialize(deserializer).map_err(|err| {
        let param = err.path().to_string();
        ApiError::invalid(param, err.into_inner().to_string())
    })
}

/// A JSON object body deserialized into `T` after refusing unknown fields.
#[derive(Debug)]
pub struct StrictJson<T>(pub T);

impl<S, T> FromRequest<S> for StrictJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let value = read_json_body(request, state).await?;
        from_object(value).map(StrictJson)
    }
}

/// Reads a JSON body of any shape, refusing a wrong content type, a body over
/// the limit, an empty body and malformed JSON.
async fn read_json_body<S: Send + Sync>(request: Request, state: &S) -> Result<Value, ApiError> {
    if !is_json(request.headers().get(header::CONTENT_TYPE)) {
        return Err(ApiError::invalid_request(
            "Content-Type must be application/json.",
        ));
    }
    let bytes = Bytes::from_request(request, state)
        .await
        .map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::body_too_large()
            } else {
                ApiError::invalid_request("The request body could not be read.")
            }
        })?;
    parse_value(&bytes)
}

/// Reads a JSON body. An object that names one field twice is refused, as
/// a repeated query parameter is: parsers disagree on which one wins, so
/// such a body has no single meaning (nor a single idempotency fingerprint).
pub fn parse_value(bytes: &[u8]) -> Result<Value, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::invalid_request("A JSON body is required."));
    }
    serde_json::from_slice::<UniqueKeys>(bytes)
        .map(|unique| unique.0)
        .map_err(|err| ApiError::invalid_request(format!("The body is not valid JSON: {err}.")))
}

/// A JSON value in which no object repeats a key.
struct UniqueKeys(Value);

impl<'de> serde::Deserialize<'de> for UniqueKeys {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_any(UniqueKeysVisitor)
            .map(UniqueKeys)
    }
}

struct UniqueKeysVisitor;

impl<'de> serde::de::Visitor<'de> for UniqueKeysVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(v.into())
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(v.into())
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        // JSON has no NaN or infinity, so `from_f64` always has a number.
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(UniqueKeys(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let UniqueKeys(value) = map.next_value()?;
            if object.contains_key(&key) {
                return Err(serde::de::Error::custom(format_args!(
                    "the field `{key}` is given twice"
                )));
            }
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

/// A JSON array body whose elements are strict objects of `T`.
#[derive(Debug)]
pub struct StrictJsonArray<T>(pub Vec<T>);

impl<S, T> FromRequest<S> for StrictJsonArray<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let Value::Array(items) = read_json_body(request, state).await? else {
            return Err(ApiError::invalid_request("The body must be a JSON array."));
        };
        let allowed = field_names::<T>();
        let mut violations = Violations::default();
        let mut parsed = Vec::with_capacity(items.len());
        for (index, item) in items.into_iter().enumerate() {
            let Value::Object(object) = &item else {
                violations.add(format!("[{index}]"), "must be a JSON object");
                continue;
            };
            let unknown: Vec<String> = object
                .keys()
                .filter(|k| !allowed.contains(&k.as_str()))
                .cloned()
                .collect();
            for name in &unknown {
                violations.add(format!("[{index}].{name}"), "unknown field");
            }
            if !unknown.is_empty() {
                continue;
            }
            match serde_path_to_error::deserialize::<_, T>(item) {
                Ok(value) => parsed.push(value),
                Err(err) => {
                    let path = err.path().to_string();
                    violations.add(format!("[{index}].{path}"), err.into_inner().to_string());
                }
            }
        }
        violations.into_result()?;
        Ok(StrictJsonArray(parsed))
    }
}

fn is_json(content_type: Option<&header::HeaderValue>) -> bool {
    content_type
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("application/json"))
}

/// A JSON number that is a whole number, as JSON Schema's `integer` reads
/// it: `100` and `100.0` alike. Fractions, and floats too large to be exact
/// (beyond 2^53), are not.
pub fn whole_number(value: &Value) -> Option<i64> {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
    if let Some(n) = value.as_i64() {
        return Some(n);
    }
    let float = value.as_f64().filter(|_| value.is_f64())?;
    // Checked: finite, whole and within ±2^53, so the cast is exact.
    (float.is_finite() && float.fract() == 0.0 && float.abs() <= EXACT).then_some(float as i64)
}

/// Parses a JSON object body into `T` strictly.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    from_object(parse_value(bytes)?)
}

/// Deserializes a JSON object into `T`, naming unknown and mistyped fields.
pub fn from_object<T: DeserializeOwned>(value: Value) -> Result<T, ApiError> {
    let Value::Object(object) = &value else {
        return Err(ApiError::invalid_request("The body must be a JSON object."));
    };
    let allowed = field_names::<T>();
    let mut violations = Violations::default();
    for name in object.keys() {
        violations.check(!allowed.contains(&name.as_str()), name, "unknown field");
    }
    violations.into_result()?;
    serde_path_to_error::deserialize(value).map_err(|err| {
        let param = err.path().to_string();
        let message = err.into_inner().to_string();
        if param == "." {
            ApiError::invalid_request(message)
        } else {
            ApiError::invalid(param, message)
        }
    })
}

/// The field names a `#[derive(Deserialize)]` struct accepts (after renames),
/// read from the list serde hands to `deserialize_struct`.
pub fn field_names<T: DeserializeOwned>() -> &'static [&'static str] {
    let mut names: &'static [&'static str] = &[];
    // The capture always "fails" once it has the names; the error is expected.
    let _ = T::deserialize(introspect::FieldNames(&mut names));
    names
}

mod introspect {
    use serde::de::{self, Deserializer, Visitor};

    pub(super) struct FieldNames<'a>(pub &'a mut &'static [&'static str]);

    impl<'de> Deserializer<'de> for FieldNames<'_> {
        type Error = de::value::Error;

        fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Self::Error> {
            Err(de::Error::custom("not a struct"))
        }

        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _name: &'static str,
            fields: &'static [&'static str],
            _visitor: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = fields;
            Err(de::Error::custom("field names captured"))
        }

        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
            bytes byte_buf option unit unit_struct newtype_struct seq tuple
            tuple_struct map enum identifier ignored_any
        }
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Page {
        limit: Option<u32>,
        cursor: Option<String>,
    }

    #[test]
    fn field_names_follow_serde() {
        assert_eq!(field_names::<Page>(), &["limit", "cursor"]);
    }

    #[test]
    fn a_good_query_parses() {
        let page: Page = parse_query("limit=5&cursor=abc").unwrap();
        assert_eq!(
            page,
            Page {
                limit: Some(5),
                cursor: Some("abc".into())
            }
        );
        let empty: Page = parse_query("").unwrap();
        assert_eq!(
            empty,
            Page {
                limit: None,
                cursor: None
            }
        );
    }

    #[test]
    fn unknown_repeated_and_mistyped_parameters_are_named() {
        let err = parse_query::<Page>("limit=5&mode=live").unwrap_err();
        assert_eq!(err.param.as_deref(), Some("mode"));
        let err = parse_query::<Page>("limit=5&limit=6").unwrap_err();
        assert_eq!(err.param.as_deref(), Some("limit"));
        let err = parse_query::<Page>("limit=abc").unwrap_err();
        assert_eq!(err.param.as_deref(), Some("limit"));
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Body {
        amount_cents: i64,
        note: Option<String>,
    }

    #[test]
    fn bodies_are_strict() {
        assert!(parse_json::<Body>(br#"{"amount_cents": 100}"#).is_ok());
        let err = parse_json::<Body>(br#"{"amount_cents": 100, "extra": 1}"#).unwrap_err();
        assert_eq!(err.param.as_deref(), Some("extra"));
        let err = parse_json::<Body>(br#"{"amount_cents": "x"}"#).unwrap_err();
        assert_eq!(err.param.as_deref(), Some("amount_cents"));
        let err = parse_json::<Body>(br#"{"note": "x"}"#).unwrap_err();
        assert_eq!(err.code.as_str(), "request.invalid");
        assert!(parse_json::<Body>(b"{").is_err());
        assert!(parse_json::<Body>(b"[1]").is_err());
        assert!(parse_json::<Body>(b"").is_err());
        let err = parse_json::<Body>(br#"{"amount_cents": 100, "amount_cents": 200}"#).unwrap_err();
        assert!(err.message.contains("given twice"), "{}", err.message);
        let nested = parse_value(br#"{"a": [{"b": 1, "b": 1}]}"#).unwrap_err();
        assert!(nested.message.contains("`b`"), "{}", nested.message);
        assert_eq!(
            parse_value(br#"{"a": [1, 2.5, -3, "x", null, true, {"b": {}}]}"#).unwrap(),
            serde_json::json!({"a": [1, 2.5, -3, "x", null, true, {"b": {}}]})
        );
    }
}
