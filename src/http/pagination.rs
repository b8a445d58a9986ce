//! `limit` and `cursor`, and the list envelope.

use serde::Serialize;
use serde_json::Value;

use super::error::{ApiError, Violations};
use crate::domain::{
    cursor::{CursorCodec, MAX_LEN},
    states::Vocabulary,
};

/// A page cut from rows fetched with one row more than the limit: the rows,
/// whether more follow, and the cursor after the last row.
pub fn cut_page<T>(
    mut rows: Vec<T>,
    limit: usize,
    codec: &CursorCodec,
    scope: &str,
    keyset: impl Fn(&T) -> Vec<Value>,
) -> (Vec<T>, bool, Option<String>) {
    let has_more = rows.len() > limit;
    rows.truncate(limit);
    let next_cursor = if has_more {
        rows.last().map(|last| codec.encode(scope, keyset(last)))
    } else {
        None
    };
    (rows, has_more, next_cursor)
}

/// Default and largest page sizes.
pub const DEFAULT_LIMIT: usize = 50;
pub const MAX_LIMIT: usize = 200;

/// A page of a list; pass `next_cursor` back as `cursor`, with the same
/// filters, for the next page.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ListEnvelope<T> {
    pub data: Vec<T>,
    pub has_more: bool,
    pub next_cursor: Option<String>,
}

/// Parses `limit` (1 to 200, default 50), recording a violation if bad.
pub fn parse_limit(raw: Option<&str>, v: &mut Violations) -> usize {
    let Some(raw) = raw else {
        return DEFAULT_LIMIT;
    };
    match raw.parse::<usize>() {
        Ok(limit) if (1..=MAX_LIMIT).contains(&limit) => limit,
        _ => {
            v.add("limit", format!("must be an integer from 1 to {MAX_LIMIT}"));
            DEFAULT_LIMIT
        }
    }
}

/// Records a violation for an over-long cursor (checked with the other
/// parameters; the signature is checked once the filters are known).
pub fn check_cursor_length(raw: Option<&str>, v: &mut Violations) {
    v.check(
        raw.is_some_and(|c| c.len() > MAX_LEN || c.is_empty()),
        "cursor",
        "must be 1 to 512 characters",
    );
}

/// The keyset a cursor carries, if it verifies for `scope`.
pub fn decode_cursor(
    codec: &CursorCodec,
    scope: &str,
    raw: Option<&str>,
) -> Result<Option<Vec<Value>>, ApiError> {
    raw.map(|cursor| {
        codec
            .decode(scope, cursor)
            .map_err(|e| ApiError::invalid("cursor", e.to_string()))
    })
    .transpose()
}

/// The keyset a cursor carries, read by `read`, if the cursor verifies for
/// `scope` and holds a keyset of this list.
pub fn decode_keyset<K>(
    codec: &CursorCodec,
    scope: &str,
    raw: Option<&str>,
    read: impl FnOnce(&[Value]) -> Option<K>,
) -> Result<Option<K>, ApiError> {
    decode_cursor(codec, scope, raw)?
        .map(|values| {
            read(&values).ok_or_else(|| ApiError::invalid("cursor", "is not a cursor of this list"))
        })
        .transpose()
}

/// Parses an optional parameter that must be a word of a closed
/// vocabulary; any other word is a violation naming the allowed ones.
pub fn parse_one_of<T: Vocabulary>(
    raw: Option<&str>,
    param: &str,
    v: &mut Violations,
) -> Option<T> {
    let raw = raw?;
    let parsed = T::parse(raw);
    if parsed.is_none() {
        let words: Vec<&str> = T::ALL.iter().map(|value| value.as_str()).collect();
        v.add(param, format!("must be one of {}", words.join(", ")));
    }
    parsed
}

/// Parses an optional integer parameter with a lower bound.
pub fn parse_int_at_least(
    raw: Option<&str>,
    param: &str,
    min: i64,
    v: &mut Violations,
) -> Option<i64> {
    let raw = raw?;
    match raw.parse::<i64>() {
        Ok(value) if value >= min => Some(value),
        _ => {
            v.add(param, format!("must be an integer of at least {min}"));
            None
        }
    }
}

/// Parses an optional RFC 3339 date-time parameter.
pub fn parse_datetime(
    raw: Option<&str>,
    param: &str,
    v: &mut Violations,
) -> Option<chrono::DateTime<chrono::Utc>> {
    let raw = raw?;
    match chrono::DateTime::parse_from_rfc3339(raw) {
        Ok(at) => Some(at.with_timezone(&chrono::Utc)),
        Err(_) => {
            v.add(
                param,
                "must be an RFC 3339 date-time, e.g. 2026-01-31T12:00:00Z",
            );
            None
        }
    }
}

/// Rounds a bound up to the next whole microsecond. Rows are stored to the
/// microsecond and PostgreSQL truncates a finer bound, so `created_at >= t`
/// and `created_at < t` are only exact with the bound rounded up. (An
/// exclusive lower bound, `created_at > t`, is exact truncated.)
pub fn ceil_to_micros(at: chrono::DateTime<chrono::Utc>) -> chrono::DateTime<chrono::Utc> {
    use chrono::SubsecRound;
    let truncated = at.trunc_subsecs(6);
    if truncated == at {
        at
    } else {
        truncated + chrono::Duration::microseconds(1)
    }
}
