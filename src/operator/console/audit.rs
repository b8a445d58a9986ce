//! The audit page: the operators' trail, newest first, filtered by operator,
//! partner and action, a page at a time. It reads through
//! `operator::audit::page`, as `GET /operator/v1/audit` does, so a bad
//! filter is answered with the API's message.

use axum::{
    extract::{Query, State, rejection::QueryRejection},
    http::StatusCode,
};
use entities::audit_event;
use maud::{Markup, html};
use serde::Deserialize;

use super::{
    pages::{Page, failed, failed_api, refusal},
    session::Operator,
    trends::partner_link,
    views::{self, moment, usd},
};
use crate::{
    operator::audit::{self, AuditQuery},
    state::AppState,
    store,
};

/// Rows a page shows unless the query asks for another number.
const ROWS: &str = "100";

/// Partners' names by id, for the partners a page shows.
type Names = std::collections::HashMap<String, String>;

/// Query of `GET /console/audit`: the filter form, and the page to show.
/// A field left empty in the form filters nothing.
#[derive(Debug, Default, Deserialize)]
pub(super) struct AuditFilters {
    /// An operator's `op_` id or name.
    operator: Option<String>,
    /// A partner's `pt_` id.
    partner_id: Option<String>,
    /// An action (`movement.create`) or every action of a noun (`movement`).
    action: Option<String>,
    /// Rows a page shows (1 to 200; not in the form).
    limit: Option<String>,
    /// The `next_cursor` of the page before.
    cursor: Option<String>,
}

impl AuditFilters {
    /// The filters with empty fields dropped and the rest trimmed.
    fn cleaned(self) -> Self {
        let clean =
            |value: Option<String>| value.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        Self {
            operator: clean(self.operator),
            partner_id: clean(self.partner_id),
            action: clean(self.action),
            limit: clean(self.limit),
            cursor: clean(self.cursor),
        }
    }

    /// The filters as a query string, continuing at `cursor`.
    fn link(&self, cursor: &str) -> String {
        let mut query = form_urlencoded::Serializer::new(String::new());
        for (key, value) in [
            ("operator", &self.operator),
            ("partner_id", &self.partner_id),
            ("action", &self.action),
            ("limit", &self.limit),
        ] {
            if let Some(value) = value {
                query.append_pair(key, value);
            }
        }
        query.append_pair("cursor", cursor);
        format!("/console/audit?{}", query.finish())
    }
}

/// `GET /console/audit`.
pub(super) async fn page(
    operator: Operator,
    State(state): State<AppState>,
    query: Result<Query<AuditFilters>, QueryRejection>,
) -> Page {
    let filters = match query {
        Ok(Query(filters)) => filters.cleaned(),
        Err(rejection) => {
            let problem = format!("The filters were not understood: {}", rejection.body_text());
            let content = content(
                &AuditFilters::default(),
                Some(&problem),
                &[],
                None,
                &Names::new(),
            );
            return Ok(shown(&operator, StatusCode::BAD_REQUEST, content));
        }
    };
    let query = AuditQuery {
        operator: filters.operator.clone(),
        partner_id: filters.partner_id.clone(),
        action: filters.action.clone(),
        since: None,
        until: None,
        limit: Some(filters.limit.clone().unwrap_or_else(|| ROWS.to_owned())),
        cursor: filters.cursor.clone(),
    };
    let (rows, next) = match audit::page(&state, &query).await {
        Ok((rows, _, next)) => (rows, next),
        Err(error) if error.http_status().is_server_error() => {
            return Err(failed_api(&operator, &error));
        }
        Err(error) => {
            let problem = refusal(&error);
            let content = content(&filters, Some(&problem), &[], None, &Names::new());
            return Ok(shown(&operator, error.http_status(), content));
        }
    };
    let ids = rows
        .iter()
        .filter_map(|row| row.partner_id.clone())
        .collect();
    let names = store::trends::partner_names(&state.db, ids)
        .await
        .map_err(|err| failed(&operator, err))?;
    let next = next.map(|cursor| filters.link(&cursor));
    let content = content(&filters, None, &rows, next.as_deref(), &names);
    Ok(shown(&operator, StatusCode::OK, content))
}

/// The audit page around `content`, answered with `status`.
fn shown(operator: &Operator, status: StatusCode, content: Markup) -> axum::response::Response {
    let body = views::layout("Audit trail", "/console/audit", Some(operator), content);
    views::page(status, body)
}

/// The filter form, what was wrong with it, the rows and the next page.
fn content(
    filters: &AuditFilters,
    problem: Option<&str>,
    rows: &[audit_event::Model],
    next: Option<&str>,
    names: &Names,
) -> Markup {
    html! {
        p.muted {
            "Every change an operator made, every refused attempt and every console sign-in, "
            "newest first. The trail cannot be edited."
        }
        form.filters method="get" action="/console/audit" {
            label { "Operator " input type="text" name="operator" value=[filters.operator.as_deref()] placeholder="name or op_ id"; }
            label { "Partner " input type="text" name="partner_id" value=[filters.partner_id.as_deref()] placeholder="pt_ id"; }
            label { "Action " input type="text" name="action" value=[filters.action.as_deref()] placeholder="movement or movement.create"; }
            @if let Some(limit) = &filters.limit { input type="hidden" name="limit" value=(limit); }
            button type="submit" { "Filter" }
            " " a href="/console/audit" { "Clear" }
        }
        @if let Some(problem) = problem {
            p.notice.error role="alert" { (problem) }
        } @else if rows.is_empty() {
            p { "Nothing matches." }
        } @else {
            @if filters.cursor.is_some() {
                p { a href="/console/audit" { "Back to the newest" } }
            }
            (table(rows, names))
            @if let Some(next) = next {
                p { a href=(next) rel="next" { "Next page" } }
            }
        }
    }
}

/// The rows of the trail.
fn table(rows: &[audit_event::Model], names: &Names) -> Markup {
    html! {
        table.audit {
            thead { tr {
                th { "When" } th { "Operator" } th { "Action" } th { "Outcome" } th { "Target" }
                th { "Partner" } th.num { "Amount" } th { "Note" }
            } }
            tbody {
                @for row in rows {
                    tr {
                        td { (moment(row.at)) }
                        td { (row.operator_name) br; span.muted { (row.role) } }
                        td { code.nowrap { (row.action) } }
                        td class=[(row.outcome == "refused").then_some("low")] { (row.outcome) }
                        td { (row.target_kind) br; code.whole { (row.target_id) } }
                        td { @if let Some(partner) = &row.partner_id { (partner_link(partner, names)) } }
                        td.num { @if let Some(cents) = row.amount_cents { (usd(cents)) } }
                        td { (row.note.as_deref().unwrap_or("")) }
                    }
                }
            }
        }
    }
}
