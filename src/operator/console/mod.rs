//! The operator console at `/console` on the operator listener: server-
//! rendered pages whose forms work without JavaScript and that load nothing
//! from elsewhere.
//!
//! - [`session`]: signing in with an operator's own token; a signed, expiring
//!   session cookie and a CSRF token on every form.
//! - [`pages`]: the overview, partners with their floats, orders failed or
//!   past their deadline, deposit reviews with approve and reject for
//!   finance and admin operators (through [`super::reviews`], as the API and
//!   the CLI decide), and the live actors with recent supervision events.
//! - [`approvals`]: money held for a second operator, approved or rejected
//!   through [`super::approvals`].
//! - [`audit`]: the operators' audit trail, filtered and paged.
//! - [`supply`]: the suppliers, their state and the margins.
//! - [`trends`]: the overview's charts of the last hour and a partner's page
//!   with its float over time.
//! - [`sections`] and [`views`]: the HTML.

mod approvals;
mod audit;
mod pages;
mod sections;
mod session;
mod supply;
mod trends;
mod views;

use axum::{
    Router,
    extract::rejection::FormRejection,
    routing::{get, post},
};

use crate::state::AppState;

/// A submitted form, or why it could not be read (answered as a page).
type FormResult<T> = Result<axum::Form<T>, FormRejection>;

/// Routes under `/console`.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(pages::overview))
        .route("/login", get(session::login_page).post(session::login))
        .route("/logout", post(session::logout))
        .route("/partners", get(pages::partners))
        .route("/partners/{id}", get(trends::partner))
        .route("/orders", get(pages::orders))
        .route("/reviews", get(pages::reviews_page))
        .route("/reviews/{id}/approve", post(pages::approve))
        .route("/reviews/{id}/reject", post(pages::reject))
        .route("/approvals", get(approvals::page))
        .route("/approvals/{id}/approve", post(approvals::approve))
        .route("/approvals/{id}/reject", post(approvals::reject))
        .route("/audit", get(audit::page))
        .route("/actors", get(pages::actors))
        .route("/suppliers", get(supply::page))
}
