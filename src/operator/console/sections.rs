//! The content of each console page: tables of what the handlers loaded.

use entities::{order, review};
use maud::{Markup, html};

use super::{
    trends::partner_link,
    views::{moment, usd, when},
};
use crate::{
    actors::{accounts::ActorInfo, events::SupervisionEvent},
    domain::states::{ReviewReason, ReviewStatus},
    store::partners::PartnerWithFloats,
};

/// Partners' names by id, for the partners a page shows.
type Names = std::collections::HashMap<String, String>;

/// The counts on the overview, each linking to its page.
pub(super) struct Counts {
    pub partners: u64,
    pub open_reviews: u64,
    pub orders_needing_attention: u64,
    pub live_actors: usize,
    pub restarts: u32,
    /// When this node last took a good periodic backup, and whether
    /// periodic backups are on.
    pub last_backup: Option<chrono::DateTime<chrono::Utc>>,
    pub backups_on: bool,
    /// With the Redis rate-limit backend: its state (`up`, `down`,
    /// `probing`) and since when.
    pub redis: Option<(&'static str, chrono::DateTime<chrono::Utc>)>,
}

pub(super) fn overview(
    counts: &Counts,
    events: &[SupervisionEvent],
    names: &Names,
    charts: Markup,
) -> Markup {
    html! {
        div.tiles {
            a.tile href="/console/reviews" { b { (counts.open_reviews) } "deposits waiting for review" }
            a.tile href="/console/orders" { b { (counts.orders_needing_attention) } "orders failed or past their deadline" }
            a.tile href="/console/partners" { b { (counts.partners) } "partners" }
            a.tile href="/console/actors" { b { (counts.live_actors) } "live account actors, " (counts.restarts) " restarts" }
        }
        (outside(counts))
        h2 { "Recent supervision events" }
        (events_table(&events[..events.len().min(10)], names))
        (charts)
    }
}

/// Backups and Redis, where they matter.
fn outside(counts: &Counts) -> Markup {
    html! {
        p {
            "Last good backup: "
            @match (counts.backups_on, counts.last_backup) {
                (false, _) => { "periodic backups are off (backup.every_minutes)" }
                (true, None) => { span.low { "none yet since this node started" } }
                (true, Some(at)) => { (when(at)) " (" (minutes_ago(at)) ")" }
            }
            @if let Some((state, since)) = counts.redis {
                ". Rate-limit Redis: "
                @if state == "up" { "up" } @else {
                    span.low { (state) ", counting in memory since " (when(since)) }
                }
            }
            "."
        }
    }
}

fn minutes_ago(at: chrono::DateTime<chrono::Utc>) -> String {
    let minutes = (chrono::Utc::now() - at).num_minutes().max(0);
    match minutes {
        0 => "less than a minute ago".to_owned(),
        1 => "1 minute ago".to_owned(),
        n => format!("{n} minutes ago"),
    }
}

pub(super) fn partners(rows: &[PartnerWithFloats], total: u64) -> Markup {
    html! {
        (first_of(rows.len(), total, "by name"))
        @if rows.is_empty() {
            p { "No partners yet: create one with " code { "admin partners create" } "." }
        } @else {
            table {
                thead { tr { th { "Partner" } th { "Id" } th { "Status" } th { "Tier" } th.num { "Live float" } th.num { "Sandbox float" } th.num { "Low-balance alert" } } }
                tbody {
                    @for row in rows {
                        @let low = row.live_cents < row.partner.low_balance_threshold_cents;
                        tr {
                            td { a href={ "/console/partners/" (row.partner.id) } { (row.partner.name) } }
                            td { code { (row.partner.id) } }
                            td { (row.partner.status) }
                            td { (row.partner.tier) }
                            td.num class=[low.then_some("low")] { (usd(row.live_cents)) }
                            td.num { (usd(row.sandbox_cents)) }
                            td.num { (usd(row.partner.low_balance_threshold_cents)) }
                        }
                    }
                }
            }
        }
    }
}

pub(super) fn orders(
    rows: &[order::Model],
    names: &Names,
    total: u64,
    deadline_seconds: i64,
) -> Markup {
    html! {
        p.muted { "Orders that failed, and orders still processing more than " (deadline_seconds) " seconds (the supplier's deadline) after they were accepted; newest first." }
        (first_of(rows.len(), total, "newest first"))
        @if rows.is_empty() {
            p { "Nothing needs attention." }
        } @else {
            table {
                thead { tr { th { "Order" } th { "Partner" } th { "Mode" } th { "Plan" } th.num { "Units" } th.num { "Total" } th { "Status" } th { "Accepted" } th.num { "Attempts" } } }
                tbody {
                    @for row in rows {
                        tr {
                            td { code { (row.id) } }
                            td { (partner_link(&row.partner_id, names)) }
                            td { (row.mode) }
                            td { (row.plan_id) }
                            td.num { (row.quantity) }
                            td.num { (usd(row.total_cents)) }
                            td {
                                (row.status)
                                @if let Some(code) = row.failure_code { " (" (code) ")" }
                            }
                            td { (moment(row.created_at)) }
                            td.num { (row.attempts) }
                        }
                    }
                }
            }
        }
    }
}

/// Says so when a table shows only the first rows of more.
fn first_of(shown: usize, total: u64, order: &str) -> Markup {
    html! {
        @if u64::try_from(shown).unwrap_or(u64::MAX) < total {
            p.notice { "Showing the first " (shown) " of " (total) ", " (order) "." }
        }
    }
}

/// What to say above the reviews: a decision taken, or why one was not.
pub(super) enum Banner {
    Decided(review::Model),
    Refused(String),
}

/// The reviews page. `decide` is the session's CSRF token when the signed-in
/// operator may decide reviews (finance or admin); without it the open
/// reviews are shown without forms.
pub(super) fn reviews(
    decide: Option<&str>,
    banner: Option<&Banner>,
    open: &[review::Model],
    decided: &[review::Model],
) -> Markup {
    html! {
        @match banner {
            Some(Banner::Decided(review)) => p.notice role="status" {
                "Review " code { (review.id) } " is " (review.status) "."
                @if let Some(entry) = &review.ledger_entry_id { " Ledger entry " code { (entry) } " written." }
            },
            Some(Banner::Refused(why)) => p.notice.error role="alert" { (why) },
            None => {},
        }
        h2 { "Waiting for a decision" }
        @if open.is_empty() {
            p { "No deposit waits for review." }
        } @else {
            @if decide.is_none() {
                p.muted { "Decisions on deposit reviews need the finance role." }
            }
            table {
                thead { tr {
                    th { "Review" } th { "Partner" } th { "Deposit" } th { "Reason" } th.num { "Amount" } th { "Raised" }
                    @if decide.is_some() { th { "Decision" } }
                } }
                tbody { @for review in open { (open_row(decide, review)) } }
            }
        }
        h2 { "Decided" }
        @if decided.is_empty() {
            p { "None yet." }
        } @else {
            table {
                thead { tr { th { "Review" } th { "Reason" } th.num { "Amount" } th { "Decision" } th { "Note" } th { "Ledger entry" } th { "When" } } }
                tbody {
                    @for review in decided {
                        tr {
                            td { code { (review.id) } }
                            td { (review.reason) }
                            td.num { (usd(review.amount_cents)) }
                            td { (review.status) }
                            td { (review.resolution.as_deref().unwrap_or("")) }
                            td { @if let Some(entry) = &review.ledger_entry_id { code { (entry) } } }
                            td { @if let Some(at) = review.resolved_at { (moment(at)) } }
                        }
                    }
                }
            }
        }
    }
}

/// One open review, with its note field and the two decisions when the
/// operator may decide (`decide` is then the session's CSRF token).
fn open_row(decide: Option<&str>, review: &review::Model) -> Markup {
    let form_id = format!("decide-{}", review.id);
    html! {
        tr {
            td { code { (review.id) } }
            td { code { (review.partner_id) } }
            td { code { (review.deposit_id) } }
            td { (review.reason) br; span.muted { (review.detail) } }
            td.num { (usd(review.amount_cents)) }
            td { (moment(review.created_at)) }
            @if let Some(csrf) = decide { td {
                form.decide id=(form_id) method="post" action={ "/console/reviews/" (review.id) "/reject" } {
                    input type="hidden" name="csrf" value=(csrf);
                    input type="text" name="note" required maxlength="500" placeholder="What you checked and decided" aria-label={ "Note for " (review.id) };
                    " "
                    // Reject comes first: it is the form's default button,
                    // the one Enter in the note field submits, and it moves no money.
                    button type="submit" { "Reject" }
                    @if let Some(label) = approve_label(review) {
                        " "
                        button type="submit" formaction={ "/console/reviews/" (review.id) "/approve" } { (label) }
                    }
                }
            } }
        }
    }
}

/// The approve button's words: what the approval would move; `None` where
/// no approval is possible whatever the deposit says.
fn approve_label(review: &review::Model) -> Option<String> {
    if review.status != ReviewStatus::Open || review.amount_cents <= 0 {
        return None;
    }
    match review.reason {
        ReviewReason::InvalidWithPayment | ReviewReason::PaidAfterCredit => {
            Some(format!("Approve: credit {}", usd(review.amount_cents)))
        }
        ReviewReason::RefundedAfterCredit => {
            Some(format!("Approve: take back {}", usd(review.amount_cents)))
        }
        ReviewReason::ZeroSettlement | ReviewReason::PaidOnClosedAccount => None,
    }
}

pub(super) fn actors(
    actors: &[ActorInfo],
    restarts: u32,
    provisioning: bool,
    events: &[SupervisionEvent],
    names: &Names,
) -> Markup {
    html! {
        p {
            "Provisioning: " (if provisioning { "runs on this node" } else { "does not run on this node" })
            ". Account actor restarts since start: " (restarts) "."
        }
        h2 { "Live account actors" }
        @if actors.is_empty() {
            p { "None running: an account actor starts with its partner's first request and stops when idle." }
        } @else {
            table {
                thead { tr { th { "Partner" } th.num { "Mailbox" } th.num { "Restarts" } th { "Started" } } }
                tbody {
                    @for actor in actors {
                        tr {
                            td {
                                @match &actor.partner_id {
                                    Some(id) => (partner_link(id, names)),
                                    None => code { (actor.kind) },
                                }
                            }
                            td.num { (actor.mailbox_len) }
                            td.num { (actor.restarts) }
                            td { (moment(actor.started_at)) }
                        }
                    }
                }
            }
        }
        h2 { "Recent supervision events" }
        (events_table(events, names))
    }
}

fn events_table(events: &[SupervisionEvent], names: &Names) -> Markup {
    html! {
        @if events.is_empty() {
            p { "None since this process started." }
        } @else {
            table {
                thead { tr { th { "When" } th { "Actor" } th { "Partner" } th { "Event" } th { "Reason" } } }
                tbody {
                    @for event in events {
                        tr {
                            td { (moment(event.at)) }
                            td { (event.actor) }
                            td { @if let Some(partner) = &event.partner_id { (partner_link(partner, names)) } }
                            td class=[(event.event == "failed").then_some("low")] { (event.event) }
                            td { (event.reason) }
                        }
                    }
                }
            }
        }
    }
}
