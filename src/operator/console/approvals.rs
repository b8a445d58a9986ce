//! The approvals page: money movements held for a second operator (four
//! eyes), with approve and reject for finance and admin operators on the
//! movements others asked for, and the ones recently decided or lapsed.
//! Decisions go through `operator::approvals`, as the API and the CLI take
//! them.

use axum::{
    extract::{Path, Query, State, rejection::QueryRejection},
    http::StatusCode,
    response::{IntoResponse, Redirect},
};
use entities::approval;
use maud::{Markup, html};
use serde::Deserialize;

use super::{
    FormResult,
    pages::{DecisionForm, Page, Unfit, checked_decision, failed, failed_api, refusal},
    session::Operator,
    trends::partner_link,
    views::{self, moment, usd},
};
use crate::{
    domain::{
        operators::Role,
        states::{ApprovalKind, ApprovalStatus},
    },
    operator::approvals,
    state::AppState,
    store,
};

/// Most decided or lapsed approvals the page shows.
const DECIDED_ROWS: usize = 100;

/// Partners' names by id, for the partners a page shows.
type Names = std::collections::HashMap<String, String>;

/// Query of `GET /console/approvals`.
#[derive(Debug, Default, Deserialize)]
pub(super) struct ApprovalsQuery {
    /// An approval a review decision on the console just held.
    held: Option<String>,
    /// An approval just decided on this page.
    decided: Option<String>,
}

/// What to say above the approvals.
enum Banner {
    /// This approval was just held for a second operator.
    Held(String),
    /// This approval was just approved or rejected.
    Decided(String),
    /// A decision was refused, and why.
    Refused(String),
}

/// `GET /console/approvals`.
pub(super) async fn page(
    operator: Operator,
    State(state): State<AppState>,
    query: Result<Query<ApprovalsQuery>, QueryRejection>,
) -> Page {
    let query = query.map(|Query(q)| q).unwrap_or_default();
    let banner = match (query.held, query.decided) {
        (Some(id), _) => Some(Banner::Held(id)),
        (None, Some(id)) => Some(Banner::Decided(id)),
        (None, None) => None,
    };
    shown_with(&operator, &state, StatusCode::OK, banner.as_ref()).await
}

/// `POST /console/approvals/{id}/approve`.
pub(super) async fn approve(
    operator: Operator,
    State(state): State<AppState>,
    Path(id): Path<String>,
    form: FormResult<DecisionForm>,
) -> Page {
    decide(operator, state, id, form, ApprovalStatus::Approved).await
}

/// `POST /console/approvals/{id}/reject`.
pub(super) async fn reject(
    operator: Operator,
    State(state): State<AppState>,
    Path(id): Path<String>,
    form: FormResult<DecisionForm>,
) -> Page {
    decide(operator, state, id, form, ApprovalStatus::Rejected).await
}

/// Takes a decision and shows the approvals again: after a redirect when it
/// was taken, with the API's reason and status when it was not.
async fn decide(
    operator: Operator,
    state: AppState,
    id: String,
    form: FormResult<DecisionForm>,
    decision: ApprovalStatus,
) -> Page {
    let what = format!("console: decide approval {id}");
    let note = match checked_decision(&operator, &state, form, &what).await {
        Ok(note) => note,
        Err(Unfit::Stale) => return Err(views::page(StatusCode::FORBIDDEN, views::stale_form())),
        Err(Unfit::Refused(status, why)) => {
            let refused = Banner::Refused(why);
            return shown_with(&operator, &state, status, Some(&refused)).await;
        }
    };
    let caller = &operator.caller;
    let taken = if decision == ApprovalStatus::Approved {
        approvals::approve(&state, caller, &id, &note)
            .await
            .map(|_| ())
    } else {
        approvals::reject(&state, caller, &id, &note)
            .await
            .map(|_| ())
    };
    match taken {
        // Taken, the id is a well-formed `apr_` id: safe in the query.
        Ok(()) => Ok(Redirect::to(&format!("/console/approvals?decided={id}")).into_response()),
        Err(error) => {
            let refused = Banner::Refused(refusal(&error));
            shown_with(&operator, &state, error.http_status(), Some(&refused)).await
        }
    }
}

/// The approvals page with `banner`, answered with `status`.
async fn shown_with(
    operator: &Operator,
    state: &AppState,
    status: StatusCode,
    banner: Option<&Banner>,
) -> Page {
    let rows = approvals::listed(state, None)
        .await
        .map_err(|error| failed_api(operator, &error))?;
    let ids = rows.iter().map(|row| row.partner_id.clone()).collect();
    let names = store::trends::partner_names(&state.db, ids)
        .await
        .map_err(|err| failed(operator, err))?;
    let (pending, decided): (Vec<_>, Vec<_>) = rows
        .into_iter()
        .partition(|row| row.status == ApprovalStatus::PendingApproval);
    let decided = &decided[..decided.len().min(DECIDED_ROWS)];
    let content = html! {
        (banner_shown(banner, &pending, decided))
        p.muted {
            "Money movements above the four-eyes limit wait here until a second finance or admin "
            "operator, not the one who asked, approves them; nothing moves before. "
            "An approval nobody decides lapses and moves nothing."
        }
        h2 { "Waiting for a second operator" }
        (pending_table(operator, &pending, &names))
        h2 { "Decided and lapsed" }
        (decided_table(decided, &names))
    };
    let body = views::layout("Approvals", "/console/approvals", Some(operator), content);
    Ok(views::page(status, body))
}

/// The banner, for an approval the page lists (an unknown id, or one no
/// longer in the state the banner would tell, shows none).
fn banner_shown(
    banner: Option<&Banner>,
    pending: &[approval::Model],
    decided: &[approval::Model],
) -> Markup {
    let find = |id: &str| pending.iter().chain(decided).find(|row| row.id == id);
    html! {
        @match banner {
            Some(Banner::Held(id)) => {
                @if let Some(row) = find(id).filter(|row| row.status == ApprovalStatus::PendingApproval) {
                    p.notice role="status" {
                        strong { "Held for a second operator's approval: " }
                        "the " (kind_label(row)) " of " (usd(row.amount_cents)) " (approval " code { (row.id) }
                        ") moves nothing until another finance or admin operator approves it."
                    }
                }
            },
            Some(Banner::Decided(id)) => {
                @if let Some(row) = find(id).filter(|row| row.decided_at.is_some()) {
                    p.notice role="status" {
                        "Approval " code { (row.id) } " is " (row.status) "."
                        @if let Some(result) = &row.result_id { " It made " code { (result) } "." }
                        @if row.status == ApprovalStatus::Rejected { " Nothing moved." }
                    }
                }
            },
            Some(Banner::Refused(why)) => p.notice.error role="alert" { (why) },
            None => {},
        }
    }
}

/// The pending approvals; the decision column only for finance and admin.
fn pending_table(operator: &Operator, pending: &[approval::Model], names: &Names) -> Markup {
    let decides = operator.caller.may(Role::Finance);
    html! {
        @if pending.is_empty() {
            p { "Nothing waits for a second operator." }
        } @else {
            @if !decides {
                p.muted { "Approving and rejecting held movements need the finance role." }
            }
            table {
                thead { tr {
                    th { "Approval" } th { "Partner" } th { "What" } th.num { "Amount" } th { "Requested" }
                    @if decides { th { "Decision" } }
                } }
                tbody {
                    @for row in pending {
                        tr {
                            td { code.whole { (row.id) } }
                            td { (partner_link(&row.partner_id, names)) }
                            td { (what(row)) }
                            td.num { (usd(row.amount_cents)) }
                            td {
                                (row.requested_by_name) br; (moment(row.requested_at)) br;
                                span.muted { "expires " (moment(row.expires_at)) }
                            }
                            @if decides { td { (decision(operator, row)) } }
                        }
                    }
                }
            }
        }
    }
}

/// The forms of one pending approval, or why there are none: its requester
/// may not approve it.
fn decision(operator: &Operator, row: &approval::Model) -> Markup {
    if row.requested_by_id == operator.caller.id {
        return html! { span.muted { "Your request: waiting for another operator." } };
    }
    html! {
        form.decide id={ "decide-" (row.id) } method="post" action={ "/console/approvals/" (row.id) "/reject" } {
            input type="hidden" name="csrf" value=(operator.csrf);
            input type="text" name="note" required maxlength="500" placeholder="What you checked" aria-label={ "Note for " (row.id) };
            " "
            // Reject first: the default button, the one Enter submits, moves nothing.
            button type="submit" { "Reject" }
            " "
            button type="submit" formaction={ "/console/approvals/" (row.id) "/approve" } {
                "Approve " (usd(row.amount_cents))
            }
        }
    }
}

/// The approvals decided or lapsed, newest first.
fn decided_table(decided: &[approval::Model], names: &Names) -> Markup {
    html! {
        @if decided.is_empty() {
            p { "None yet." }
        } @else {
            table {
                thead { tr {
                    th { "Approval" } th { "Partner" } th { "What" } th.num { "Amount" } th { "Requested" }
                    th { "Outcome" } th { "Result" }
                } }
                tbody {
                    @for row in decided {
                        tr {
                            td { code.whole { (row.id) } }
                            td { (partner_link(&row.partner_id, names)) }
                            td { (what(row)) }
                            td.num { (usd(row.amount_cents)) }
                            td { (row.requested_by_name) br; (moment(row.requested_at)) }
                            td { (outcome(row)) }
                            td { @if let Some(result) = &row.result_id { code.whole { (result) } } }
                        }
                    }
                }
            }
        }
    }
}

/// How a decided or lapsed approval ended: by whom, when, with the note.
fn outcome(row: &approval::Model) -> Markup {
    html! {
        strong { (row.status) }
        @if let Some(by) = &row.decided_by_name { " by " (by) }
        br; (moment(row.decided_at.unwrap_or(row.expires_at)))
        @if let Some(note) = &row.decision_note { br; span.muted { (note) } }
    }
}

/// What a held request would do: its kind, and its description, wire
/// reference or review with the requester's note.
fn what(row: &approval::Model) -> Markup {
    let text = |field: &str| row.request[field].as_str().unwrap_or_default().to_owned();
    html! {
        (kind_label(row)) br;
        span.muted {
            @match row.kind {
                ApprovalKind::Movement => { (text("description")) },
                ApprovalKind::WireDeposit => { "reference " code { (text("reference")) } },
                ApprovalKind::Review => {
                    "review " code { (text("review_id")) }
                    @let note = text("note");
                    @if !note.is_empty() { ": " (note) }
                },
            }
        }
    }
}

/// The kind of a held request in words: `adjustment`, `payout` or
/// `chargeback` for a movement.
fn kind_label(row: &approval::Model) -> String {
    match row.kind {
        ApprovalKind::Movement => match row.request["kind"].as_str() {
            Some(kind) if !kind.is_empty() => kind.to_owned(),
            _ => "movement".to_owned(),
        },
        ApprovalKind::WireDeposit => "wire deposit".to_owned(),
        ApprovalKind::Review => "review approval".to_owned(),
    }
}
