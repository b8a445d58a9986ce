//! The console's pages and its two decisions. Each page loads what it shows
//! from the store and the actors' in-memory views; decisions go through
//! `operator::reviews`, the functions behind the operator API and the CLI.

use axum::{
    extract::{Path, Query, State, rejection::QueryRejection},
    http::StatusCode,
    response::{IntoResponse, Redirect, Response},
};
use maud::Markup;
use serde::Deserialize;

use super::{
    FormResult,
    sections::{self, Banner, Counts},
    session::Operator,
    trends, views,
};
use crate::{
    actors::events,
    domain::{operators::Role, states::ReviewStatus, time},
    http::error::ApiError,
    operator::{auth, reviews},
    state::AppState,
    store,
};

/// Most rows a table shows.
const ROWS: u64 = 200;

/// What a page handler answers: the page, or a failure page.
pub(super) type Page = Result<Response, Response>;

/// `GET /console`.
pub(super) async fn overview(operator: Operator, State(state): State<AppState>) -> Page {
    let db_failed = |err| failed(&operator, err);
    let since = time::now() - state.order_deadline;
    let counts = Counts {
        partners: store::partners::count(&state.db).await.map_err(db_failed)?,
        open_reviews: store::deposits::open_review_count(&state.db)
            .await
            .map_err(db_failed)?,
        orders_needing_attention: store::orders::needing_attention_count(&state.db, since)
            .await
            .map_err(db_failed)?,
        live_actors: state.accounts.load().live,
        restarts: state.accounts.total_restarts(),
        last_backup: state.last_backup.at(),
        backups_on: state.backups_on,
        redis: state
            .limiter
            .view()
            .redis
            .map(|redis| (redis.state, redis.since)),
    };
    let charts = trends::section(&trends::load(&state).await.map_err(db_failed)?);
    let events = events::recent();
    let ids = events.iter().filter_map(|e| e.partner_id.clone()).collect();
    let names = store::trends::partner_names(&state.db, ids)
        .await
        .map_err(db_failed)?;
    Ok(shown(
        &operator,
        "Overview",
        "/console",
        sections::overview(&counts, &events, &names, charts),
    ))
}

/// `GET /console/partners`.
pub(super) async fn partners(operator: Operator, State(state): State<AppState>) -> Page {
    let db_failed = |err| failed(&operator, err);
    let rows = store::partners::list_with_floats(&state.db, ROWS)
        .await
        .map_err(db_failed)?;
    let total = store::partners::count(&state.db).await.map_err(db_failed)?;
    let content = sections::partners(&rows, total);
    Ok(shown(&operator, "Partners", "/console/partners", content))
}

/// `GET /console/orders`.
pub(super) async fn orders(operator: Operator, State(state): State<AppState>) -> Page {
    let db_failed = |err| failed(&operator, err);
    let since = time::now() - state.order_deadline;
    let rows = store::orders::needing_attention(&state.db, since, ROWS)
        .await
        .map_err(db_failed)?;
    let total = store::orders::needing_attention_count(&state.db, since)
        .await
        .map_err(db_failed)?;
    let ids = rows.iter().map(|row| row.partner_id.clone()).collect();
    let names = store::trends::partner_names(&state.db, ids)
        .await
        .map_err(db_failed)?;
    let deadline = state.order_deadline.num_seconds();
    let content = sections::orders(&rows, &names, total, deadline);
    Ok(shown(
        &operator,
        "Orders needing attention",
        "/console/orders",
        content,
    ))
}

/// Query of `GET /console/reviews`: the review just decided, if any.
#[derive(Debug, Deserialize)]
pub(super) struct ReviewsQuery {
    decided: Option<String>,
}

/// `GET /console/reviews`.
pub(super) async fn reviews_page(
    operator: Operator,
    State(state): State<AppState>,
    query: Result<Query<ReviewsQuery>, QueryRejection>,
) -> Page {
    let decided = query.ok().and_then(|Query(q)| q.decided);
    let banner = match decided {
        Some(id) => store::deposits::review(&state.db, &id)
            .await
            .map_err(|err| failed(&operator, err))?
            .filter(|review| review.status != ReviewStatus::Open)
            .map(Banner::Decided),
        None => None,
    };
    reviews_with(&operator, &state, StatusCode::OK, banner.as_ref()).await
}

/// The form of a decision.
#[derive(Debug, Deserialize)]
pub(super) struct DecisionForm {
    /// The session's CSRF token.
    pub csrf: String,
    /// What the operator checked and decided.
    pub note: String,
}

/// Why a decision form is not acted on.
pub(super) enum Unfit {
    /// Its CSRF token is not this session's: answer the stale-form page.
    Stale,
    /// Show the page again with this status, saying why it was refused.
    Refused(StatusCode, String),
}

impl Unfit {
    fn refused(error: &ApiError) -> Self {
        Unfit::Refused(error.http_status(), refusal(error))
    }
}

/// The checks every decision form goes through, in order: the form is
/// understood, carries this session's CSRF token, comes from a finance or
/// admin operator (a refusal is recorded in the trail, naming `what`), and
/// has a note. Returns the checked note.
pub(super) async fn checked_decision(
    operator: &Operator,
    state: &AppState,
    form: FormResult<DecisionForm>,
    what: &str,
) -> Result<String, Unfit> {
    let Ok(axum::Form(form)) = form else {
        let why = "The form was not understood; write a note and choose again.";
        return Err(Unfit::Refused(StatusCode::BAD_REQUEST, why.into()));
    };
    if !operator.sent(&form.csrf) {
        return Err(Unfit::Stale);
    }
    if !operator.caller.may(Role::Finance) {
        let error = auth::refuse(state, &operator.caller, Role::Finance, what).await;
        return Err(Unfit::refused(&error));
    }
    reviews::checked_note("note", &form.note)
        .map(str::to_owned)
        .map_err(|error| Unfit::refused(&error))
}

/// `POST /console/reviews/{id}/approve`.
pub(super) async fn approve(
    operator: Operator,
    State(state): State<AppState>,
    Path(id): Path<String>,
    form: FormResult<DecisionForm>,
) -> Page {
    decide(operator, state, id, form, ReviewStatus::Approved).await
}

/// `POST /console/reviews/{id}/reject`.
pub(super) async fn reject(
    operator: Operator,
    State(state): State<AppState>,
    Path(id): Path<String>,
    form: FormResult<DecisionForm>,
) -> Page {
    decide(operator, state, id, form, ReviewStatus::Rejected).await
}

/// Takes a decision and shows the reviews again: after a redirect when it
/// was taken (so reloading the page does not submit it twice), with the
/// reason and the API's status when it was not.
async fn decide(
    operator: Operator,
    state: AppState,
    id: String,
    form: FormResult<DecisionForm>,
    decision: ReviewStatus,
) -> Page {
    let what = format!("console: decide review {id}");
    let note = match checked_decision(&operator, &state, form, &what).await {
        Ok(note) => note,
        Err(Unfit::Stale) => return Err(views::page(StatusCode::FORBIDDEN, views::stale_form())),
        Err(Unfit::Refused(status, why)) => {
            let refused = Banner::Refused(why);
            return reviews_with(&operator, &state, status, Some(&refused)).await;
        }
    };
    let caller = &operator.caller;
    let taken = if decision == ReviewStatus::Approved {
        reviews::approve(&state, caller, &id, &note).await
    } else {
        reviews::close(&state, caller, &id, decision, &note)
            .await
            .map(reviews::Decided::Done)
    };
    match taken {
        Ok(reviews::Decided::Done(review)) => {
            Ok(Redirect::to(&format!("/console/reviews?decided={}", review.id)).into_response())
        }
        Ok(reviews::Decided::Held(approval)) => {
            Ok(Redirect::to(&format!("/console/approvals?held={}", approval.id)).into_response())
        }
        Err(error) => {
            let refused = Banner::Refused(refusal(&error));
            reviews_with(&operator, &state, error.http_status(), Some(&refused)).await
        }
    }
}

/// `GET /console/actors`.
pub(super) async fn actors(operator: Operator, State(state): State<AppState>) -> Page {
    let (actors, events) = (state.accounts.list(), events::recent());
    let ids = actors
        .iter()
        .filter_map(|a| a.partner_id.clone())
        .chain(events.iter().filter_map(|e| e.partner_id.clone()))
        .collect();
    let names = store::trends::partner_names(&state.db, ids)
        .await
        .map_err(|err| failed(&operator, err))?;
    let content = sections::actors(
        &actors,
        state.accounts.total_restarts(),
        state.accounts.provisioning().is_some(),
        &events,
        &names,
    );
    Ok(shown(&operator, "Actors", "/console/actors", content))
}

/// The reviews page with `banner`, answered with `status`.
async fn reviews_with(
    operator: &Operator,
    state: &AppState,
    status: StatusCode,
    banner: Option<&Banner>,
) -> Page {
    // Two queries, so that no number of decided reviews pushes an open one off the page.
    let db_failed = |err| failed(operator, err);
    let open = store::deposits::reviews(&state.db, Some(ReviewStatus::Open))
        .await
        .map_err(db_failed)?;
    let decided = store::deposits::decided_reviews(&state.db, ROWS)
        .await
        .map_err(db_failed)?;
    let decide = operator
        .caller
        .may(Role::Finance)
        .then_some(operator.csrf.as_str());
    let content = sections::reviews(decide, banner, &open, &decided);
    let body = views::layout(
        "Deposit reviews",
        "/console/reviews",
        Some(operator),
        content,
    );
    Ok(views::page(status, body))
}

/// A page of the console, signed in, with `here` marked in the navigation.
pub(super) fn shown(operator: &Operator, title: &str, here: &str, content: Markup) -> Response {
    views::page(
        StatusCode::OK,
        views::layout(title, here, Some(operator), content),
    )
}

/// The failure page for a database error (logged with its cause).
pub(super) fn failed(operator: &Operator, err: sea_orm::DbErr) -> Response {
    tracing::error!(error = %err, "console page failed");
    let message = "The database did not answer; the page could not be loaded. Try again shortly.";
    views::page(
        StatusCode::SERVICE_UNAVAILABLE,
        views::failure(operator, message),
    )
}

/// The failure page for an error the API would answer with: ours (logged
/// where it was raised) in plain words, anything else with its message.
pub(super) fn failed_api(operator: &Operator, error: &ApiError) -> Response {
    let status = error.http_status();
    let message = if status.is_server_error() {
        "Something failed on our side; the page could not be loaded. Try again shortly.".to_owned()
    } else {
        refusal(error)
    };
    views::page(status, views::failure(operator, &message))
}

/// What to tell the operator about a decision refused: the API's message,
/// and the field when one was wrong.
pub(super) fn refusal(error: &ApiError) -> String {
    match &error.param {
        Some(param) => format!("{} ({param})", error.message),
        None => error.message.clone(),
    }
}
