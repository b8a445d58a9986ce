//! What an Airalo error answer means for the call that got it (recorded
//! shapes: `tests/fixtures/airalo/error_*.json`).
//!
//! - 422 with `{code, reason}`: a documented business code, classified in
//!   [`classify`].
//! - 422 with `{data: {field: message}, meta: {message}}`: Laravel-style
//!   validation; the request will not pass as sent, so refused.
//! - 401: the token (the transport refreshes it once and asks again; a
//!   second 401 is refused).
//! - 403: the account may not call from here (IP allowlist), refused.
//! - 404: no such order or eSIM, refused.
//! - 429 and 5xx: transient. Anything else: unknown, treated as transient
//!   and logged.

use reqwest::StatusCode;
use serde_json::Value;

use crate::supplier::SupplierError;

/// What an Airalo error code means for the call that got it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// Nothing was bought and the same call may succeed later.
    Transient,
    /// Airalo will certainly not do it: nothing was bought.
    Refused,
    /// Not a documented code, or one that says nothing certain: treated as
    /// transient (the caller asks `find_order` before placing again) and
    /// logged.
    Unknown,
}

/// The documented codes of a 422 `{code, reason}` answer (REST API → Error
/// handling), and code 89 of a 403 (IP not on the allowlist).
pub fn classify(code: i64) -> ErrorClass {
    match code {
        // Insufficient Airalo credit; operator under maintenance ("try
        // again later": nothing was taken, and another supplier may
        // deliver now); invalid checksum; top-up disabled by the operator;
        // insufficient stock; package invalid or out of stock; bad request;
        // eSIM recycled; IP not allowed.
        11 | 13 | 14 | 23 | 33 | 34 | 43 | 73 | 89 => ErrorClass::Refused,
        // 53 "Something unexpected happened", and any undocumented code.
        _ => ErrorClass::Unknown,
    }
}

/// A short name of a documented code, for error texts and logs.
pub fn label(code: i64) -> &'static str {
    match code {
        11 => "insufficient credit",
        13 => "operator maintenance",
        14 => "invalid checksum",
        23 => "top-up disabled",
        33 => "insufficient stock",
        34 => "package invalid or out of stock",
        43 => "bad request",
        53 => "unexpected error",
        73 => "eSIM recycled",
        89 => "IP not allowed",
        _ => "undocumented code",
    }
}

/// A documented code as the error of the call that got it: `"{path}: {code}
/// {label} ({reason})"`.
pub(crate) fn coded(path: &str, code: i64, reason: &str) -> SupplierError {
    let text = format!("{path}: {code} {} ({reason})", label(code));
    match classify(code) {
        ErrorClass::Refused => SupplierError::Refused(text),
        ErrorClass::Transient => SupplierError::Transient(text),
        ErrorClass::Unknown => {
            tracing::warn!(
                path,
                code,
                reason,
                "Airalo error code not known to be final; treated as transient"
            );
            SupplierError::Transient(text)
        }
    }
}

/// The error of a non-2xx answer other than 401 and 429 (which the
/// transport handles first).
pub(crate) fn from_answer(path: &str, status: StatusCode, body: &str) -> SupplierError {
    let json: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    let code = json["code"]
        .as_i64()
        .or_else(|| json["code"].as_str()?.trim().parse().ok());
    if let Some(code) = code {
        let reason = json["reason"].as_str().unwrap_or_default();
        return coded(path, code, reason);
    }
    let text = format!("{path}: HTTP {} {}", status.as_u16(), summary(&json));
    match status.as_u16() {
        422 if json["data"].is_object() => SupplierError::Refused(text),
        401 | 403 | 404 => SupplierError::Refused(text),
        500..=599 => SupplierError::Transient(text),
        _ => {
            tracing::warn!(
                path,
                status = status.as_u16(),
                body,
                "undocumented Airalo answer; treated as transient"
            );
            SupplierError::Transient(text)
        }
    }
}

/// The message and field errors of an error body, on one line.
fn summary(json: &Value) -> String {
    let mut text = json["meta"]["message"]
        .as_str()
        .or_else(|| json["message"].as_str())
        .or_else(|| json["reason"].as_str())
        .unwrap_or("")
        .to_owned();
    if let Some(fields) = json["data"].as_object() {
        for (field, message) in fields {
            let message = message
                .as_str()
                .map_or_else(|| message.to_string(), str::to_owned);
            text.push_str(&format!("; {field}: {message}"));
        }
    }
    text
}
