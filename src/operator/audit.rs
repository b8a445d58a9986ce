//! `GET /audit`: the operators' trail, newest first, filtered by operator
//! (id or name), partner, action (`movement.create`, or `movement` for
//! every action of that noun) and time range, in keyset pages. Read-only:
//! there is no route that edits or deletes a row.

use axum::{Json, extract::State};
use chrono::{DateTime, Utc};
use entities::audit_event;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{
    http::{
        error::{ApiError, Violations},
        extract::StrictQuery,
        pagination::{check_cursor_length, cut_page, decode_keyset, parse_limit},
    },
    state::AppState,
    store::{self, audit::AuditFilter},
};

/// Query of `GET /audit`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AuditQuery {
    pub operator: Option<String>,
    pub partner_id: Option<String>,
    pub action: Option<String>,
    pub since: Option<String>,
    pub until: Option<String>,
    pub limit: Option<String>,
    pub cursor: Option<String>,
}

pub(super) async fn list(
    State(state): State<AppState>,
    StrictQuery(query): StrictQuery<AuditQuery>,
) -> Result<Json<Value>, ApiError> {
    let (rows, has_more, next_cursor) = page(&state, &query).await?;
    let data: Vec<Value> = rows.into_iter().map(view).collect();
    Ok(Json(json!({
        "object": "list", "data": data, "has_more": has_more, "next_cursor": next_cursor,
    })))
}

/// One page of the trail for `query`: rows, whether more follow, and the
/// cursor of the next page.
pub(crate) async fn page(
    state: &AppState,
    query: &AuditQuery,
) -> Result<(Vec<audit_event::Model>, bool, Option<String>), ApiError> {
    let mut v = Violations::default();
    let limit = parse_limit(query.limit.as_deref(), &mut v);
    check_cursor_length(query.cursor.as_deref(), &mut v);
    let since = parse_instant(query.since.as_deref(), "since", &mut v);
    let until = parse_instant(query.until.as_deref(), "until", &mut v);
    for (param, value) in [
        ("operator", &query.operator),
        ("partner_id", &query.partner_id),
        ("action", &query.action),
    ] {
        v.check(
            value
                .as_ref()
                .is_some_and(|s| s.is_empty() || s.len() > 100),
            param,
            "must be 1 to 100 characters",
        );
    }
    v.into_result()?;
    let mut filter = AuditFilter {
        operator: query.operator.clone(),
        partner_id: query.partner_id.clone(),
        action: query.action.clone(),
        since,
        until,
        before_id: None,
    };
    // The cursor is signed over the filters, so it only continues this list.
    let scope = format!(
        "audit:{:?}:{:?}:{:?}:{:?}:{:?}",
        filter.operator, filter.partner_id, filter.action, filter.since, filter.until
    );
    filter.before_id = decode_keyset(&state.cursors, &scope, query.cursor.as_deref(), |values| {
        values.first().and_then(Value::as_i64)
    })?;
    let rows = store::audit::page(&state.db, &filter, limit as u64 + 1).await?;
    Ok(cut_page(rows, limit, &state.cursors, &scope, |row| {
        vec![row.id.into()]
    }))
}

/// An RFC 3339 instant, or a violation naming `param`.
fn parse_instant(raw: Option<&str>, param: &str, v: &mut Violations) -> Option<DateTime<Utc>> {
    let raw = raw?;
    match DateTime::parse_from_rfc3339(raw) {
        Ok(at) => Some(at.with_timezone(&Utc)),
        Err(_) => {
            v.add(
                param,
                "must be an RFC 3339 date-time, e.g. 2026-11-26T10:00:00Z",
            );
            None
        }
    }
}

/// An audit row as the API shows it.
pub(crate) fn view(row: audit_event::Model) -> Value {
    json!({
        "object": "audit_event", "id": row.id, "at": row.at,
        "operator": { "id": row.operator_id, "name": row.operator_name, "role": row.role },
        "action": row.action, "outcome": row.outcome,
        "target": { "kind": row.target_kind, "id": row.target_id },
        "partner_id": row.partner_id, "request_id": row.request_id,
        "amount_cents": row.amount_cents, "before": row.before, "after": row.after,
        "note": row.note,
    })
}
