//! The operator console over plain HTTP: signing in with an operator token,
//! the signed and expiring session cookie, the CSRF token on every form,
//! what each page shows, a deposit review decided from its form once, the
//! forms each role is offered, approvals held for a second operator, the
//! audit trail, and a revoked operator signed out.
//! (`browser.rs` drives the same pages in headless Chromium.)

use std::time::Duration;

use hmac::{Hmac, Mac};
use reqwest::{Method, StatusCode, header};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::{
    deposits::UNTHROTTLED,
    helpers::{
        OPERATOR_TOKEN, TestApp, balance, eventually, fund, live_partner, post_order, read,
        sandbox_key, spawn_app_with,
    },
    reviews::paid_after_credit,
};

/// A page as the console answered it.
pub(crate) struct Answer {
    pub status: StatusCode,
    pub headers: header::HeaderMap,
    pub body: String,
}

impl Answer {
    fn location(&self) -> &str {
        self.headers
            .get(header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }

    /// The session's CSRF token, as the page's forms carry it.
    fn csrf(&self) -> String {
        let (_, rest) = self
            .body
            .split_once(r#"name="csrf" value=""#)
            .unwrap_or_else(|| panic!("no CSRF field in {}", self.body));
        rest.split('"').next().unwrap().to_owned()
    }
}

/// A URL-encoded form body, as a browser posts it.
trait WithForm {
    fn with_form(self, fields: &[(&str, &str)]) -> Self;
}

impl WithForm for reqwest::RequestBuilder {
    fn with_form(self, fields: &[(&str, &str)]) -> Self {
        self.header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(serde_urlencoded::to_string(fields).unwrap())
    }
}

/// A client that shows redirects instead of following them.
fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

async fn answer(request: reqwest::RequestBuilder) -> Answer {
    let response = request.send().await.unwrap();
    Answer {
        status: response.status(),
        headers: response.headers().clone(),
        body: response.text().await.unwrap(),
    }
}

/// `GET path` on the operator listener, with the session `cookie` if any.
pub(crate) async fn open(app: &TestApp, cookie: Option<&str>, path: &str) -> Answer {
    let mut request = client().get(format!("{}{path}", app.operator));
    if let Some(cookie) = cookie {
        request = request.header(header::COOKIE, cookie);
    }
    answer(request).await
}

async fn submit(app: &TestApp, cookie: &str, path: &str, form: &[(&str, &str)]) -> Answer {
    answer(
        client()
            .post(format!("{}{path}", app.operator))
            .header(header::COOKIE, cookie)
            .with_form(form),
    )
    .await
}

async fn try_sign_in(app: &TestApp, token: &str) -> Answer {
    answer(
        client()
            .post(format!("{}/console/login", app.operator))
            .with_form(&[("token", token)]),
    )
    .await
}

/// Signs in with the bootstrap token and returns the `Cookie` header value
/// of the session.
pub(crate) async fn sign_in(app: &TestApp) -> String {
    sign_in_as(app, OPERATOR_TOKEN).await
}

/// Signs in with an operator's `token` and returns the `Cookie` header value
/// of the session.
pub(crate) async fn sign_in_as(app: &TestApp, token: &str) -> String {
    let answer = try_sign_in(app, token).await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER, "{}", answer.body);
    let set = answer.headers[header::SET_COOKIE].to_str().unwrap();
    set.split(';').next().unwrap().to_owned()
}

/// A bootstrap session cookie signed with the operator token, expiring at
/// `expires`.
fn forged_session(expires: i64) -> String {
    let token_hash = hex::encode(Sha256::digest(OPERATOR_TOKEN.as_bytes()));
    let mut mac = Hmac::<Sha256>::new_from_slice(OPERATOR_TOKEN.as_bytes()).unwrap();
    mac.update(format!("session:{expires}:op_bootstrap:{token_hash}").as_bytes());
    format!(
        "esim_console={expires}.op_bootstrap.{}",
        hex::encode(mac.finalize().into_bytes())
    )
}

#[tokio::test]
async fn the_console_asks_for_the_operator_token_and_keeps_a_signed_expiring_session() {
    let app = spawn_app_with(&[]).await;

    let away = open(&app, None, "/console").await;
    assert_eq!(away.status, StatusCode::SEE_OTHER);
    assert_eq!(away.location(), "/console/login");
    let login = open(&app, None, "/console/login").await;
    assert_eq!(login.status, StatusCode::OK);
    assert!(login.body.contains(r#"name="token""#), "{}", login.body);

    let wrong = try_sign_in(&app, "not-the-token").await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    assert!(
        wrong.body.contains("not an operator token"),
        "{}",
        wrong.body
    );
    assert!(wrong.headers.get(header::SET_COOKIE).is_none());

    let right = try_sign_in(&app, OPERATOR_TOKEN).await;
    assert_eq!(right.status, StatusCode::SEE_OTHER);
    assert_eq!(right.location(), "/console");
    let set = right.headers[header::SET_COOKIE].to_str().unwrap();
    for attribute in [
        "HttpOnly",
        "SameSite=Strict",
        "Path=/console",
        "Max-Age=43200",
    ] {
        assert!(set.contains(attribute), "{attribute} missing from {set}");
    }
    let cookie = set.split(';').next().unwrap().to_owned();
    let overview = open(&app, Some(&cookie), "/console").await;
    assert_eq!(overview.status, StatusCode::OK, "{}", overview.body);
    assert!(
        overview.body.contains("<h1>Overview</h1>"),
        "{}",
        overview.body
    );
    assert!(
        overview
            .body
            .contains("Last good backup: periodic backups are off"),
        "{}",
        overview.body
    );
    let policy = overview.headers[header::CONTENT_SECURITY_POLICY]
        .to_str()
        .unwrap();
    assert!(policy.contains("default-src 'none'"), "{policy}");
    assert_eq!(overview.headers[header::CACHE_CONTROL], "no-store");

    // A cookie it did not sign, or one past its expiry, is no session.
    let mut tampered = cookie.clone();
    let last = tampered.pop().unwrap();
    tampered.push(if last == '0' { '1' } else { '0' });
    let now = chrono::Utc::now().timestamp();
    for cookie in [
        tampered,
        forged_session(now - 1),
        "esim_console=garbage".to_owned(),
    ] {
        let refused = open(&app, Some(&cookie), "/console/partners").await;
        assert_eq!(refused.status, StatusCode::SEE_OTHER, "{cookie}");
        assert_eq!(refused.location(), "/console/login");
    }
    assert_eq!(
        open(&app, Some(&forged_session(now + 60)), "/console")
            .await
            .status,
        StatusCode::OK
    );

    // Signing out needs the session's form token, and forgets the cookie.
    let stale = submit(&app, &cookie, "/console/logout", &[("csrf", "0")]).await;
    assert_eq!(stale.status, StatusCode::FORBIDDEN);
    let out = submit(
        &app,
        &cookie,
        "/console/logout",
        &[("csrf", &overview.csrf())],
    )
    .await;
    assert_eq!(out.status, StatusCode::SEE_OTHER);
    assert_eq!(out.location(), "/console/login");
    assert!(
        out.headers[header::SET_COOKIE]
            .to_str()
            .unwrap()
            .contains("Max-Age=0")
    );
}

#[tokio::test]
async fn behind_tls_the_session_cookie_is_marked_secure() {
    let plain = try_sign_in(&spawn_app_with(&[]).await, OPERATOR_TOKEN).await;
    assert!(
        !plain.headers[header::SET_COOKIE]
            .to_str()
            .unwrap()
            .contains("Secure")
    );
    let app = spawn_app_with(&[("operator.console_secure_cookie", "true")]).await;
    let secure = try_sign_in(&app, OPERATOR_TOKEN).await;
    let set = secure.headers[header::SET_COOKIE].to_str().unwrap();
    assert!(set.ends_with("; Secure"), "{set}");
}

#[tokio::test]
async fn failed_sign_ins_run_out_of_budget_for_the_address() {
    // A day-long window: the failures and the refused sign-in cannot fall
    // on both sides of a window's edge, as they could with a minute's.
    let app = spawn_app_with(&[
        ("rate_limit.failed_auth_limit", "3"),
        ("rate_limit.failed_auth_window_seconds", "86400"),
    ])
    .await;
    for _ in 0..3 {
        assert_eq!(
            try_sign_in(&app, "guess").await.status,
            StatusCode::UNAUTHORIZED
        );
    }
    let limited = try_sign_in(&app, OPERATOR_TOKEN).await;
    assert_eq!(
        limited.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        limited.body
    );
    assert!(
        limited.body.contains("Too many failed sign-ins"),
        "{}",
        limited.body
    );
}

#[tokio::test]
async fn each_page_shows_what_an_operator_looks_for() {
    let app = crate::deposits::deposits_app().await;
    let (partner_id, secret) = live_partner(&app).await;
    let (_, review) = paid_after_credit(&app, &secret).await;
    let review_id = review["id"].as_str().unwrap();
    // A sandbox order the supplier fails: it shows among the orders needing attention.
    let sandbox = sandbox_key(&app, &partner_id).await;
    let (status, order) = post_order(
        &app,
        &sandbox,
        &uuid::Uuid::new_v4().to_string(),
        &json!({ "plan_id": "pl_sandbox_supplier_error", "quantity": 1 }),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{order}");
    let order_id = order["id"].as_str().unwrap().to_owned();
    let cookie = sign_in(&app).await;

    let partners = open(&app, Some(&cookie), "/console/partners").await;
    assert!(partners.body.contains(&partner_id), "{}", partners.body);
    assert!(
        partners.body.contains("$200.00"),
        "the live float: {}",
        partners.body
    );

    let orders = eventually(
        "the failed order on the console",
        Duration::from_secs(10),
        || {
            let (app, cookie, order_id) = (&app, &cookie, &order_id);
            async move {
                let page = open(app, Some(cookie), "/console/orders").await;
                page.body.contains(order_id.as_str()).then_some(page)
            }
        },
    )
    .await;
    assert!(
        orders.body.contains("failed (supplier_error)"),
        "{}",
        orders.body
    );

    let reviews = open(&app, Some(&cookie), "/console/reviews").await;
    assert!(reviews.body.contains(review_id), "{}", reviews.body);
    assert!(
        reviews.body.contains("Approve: credit $300.00"),
        "{}",
        reviews.body
    );

    let actors = open(&app, Some(&cookie), "/console/actors").await;
    assert!(
        actors.body.contains(&partner_id),
        "its account actor runs: {}",
        actors.body
    );
    assert!(actors.body.contains("started"), "{}", actors.body);

    let overview = open(&app, Some(&cookie), "/console").await;
    assert!(
        overview.body.contains("deposits waiting for review"),
        "{}",
        overview.body
    );
}

#[tokio::test]
async fn a_review_is_approved_from_its_form_once_and_only_with_the_session_token() {
    let app = crate::deposits::deposits_app().await;
    let (_, secret) = live_partner(&app).await;
    let (_, review) = paid_after_credit(&app, &secret).await;
    let approve = format!(
        "/console/reviews/{}/approve",
        review["id"].as_str().unwrap()
    );
    let cookie = sign_in(&app).await;
    let csrf = open(&app, Some(&cookie), "/console/reviews").await.csrf();

    let forged = submit(
        &app,
        &cookie,
        &approve,
        &[("csrf", "forged"), ("note", "ok")],
    )
    .await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN);
    let unsigned = answer(
        client()
            .post(format!("{}{approve}", app.operator))
            .with_form(&[("csrf", csrf.as_str()), ("note", "ok")]),
    )
    .await;
    assert_eq!(
        unsigned.status,
        StatusCode::SEE_OTHER,
        "no session: to the sign-in page"
    );
    let blank = submit(&app, &cookie, &approve, &[("csrf", &csrf), ("note", " ")]).await;
    assert_eq!(blank.status, StatusCode::BAD_REQUEST);
    assert!(
        blank.body.contains("must be 1 to 500 characters (note)"),
        "{}",
        blank.body
    );
    assert_eq!(balance(&app, &secret).await, 20_000, "nothing moved yet");

    let approved = submit(
        &app,
        &cookie,
        &approve,
        &[("csrf", &csrf), ("note", "checked on chain")],
    )
    .await;
    assert_eq!(approved.status, StatusCode::SEE_OTHER, "{}", approved.body);
    let shown = open(&app, Some(&cookie), approved.location()).await;
    assert!(shown.body.contains("is approved"), "{}", shown.body);
    assert_eq!(balance(&app, &secret).await, 50_000);

    let again = submit(
        &app,
        &cookie,
        &approve,
        &[("csrf", &csrf), ("note", "twice")],
    )
    .await;
    assert_eq!(again.status, StatusCode::CONFLICT);
    assert!(again.body.contains("already approved"), "{}", again.body);
    assert_eq!(balance(&app, &secret).await, 50_000, "credited once");
}

#[tokio::test]
async fn a_long_table_says_it_shows_only_its_first_rows_and_the_overview_counts_them_all() {
    let app = spawn_app_with(&[]).await;
    for _ in 0..201 {
        app.create_partner(json!({})).await;
    }
    let cookie = sign_in(&app).await;

    let partners = open(&app, Some(&cookie), "/console/partners").await;
    assert!(
        partners
            .body
            .contains("Showing the first 200 of 201, by name."),
        "{}",
        partners.body
    );
    assert_eq!(partners.body.matches("<code>pt_").count(), 200);
    let overview = open(&app, Some(&cookie), "/console").await;
    assert!(
        overview.body.contains("<b>201</b>partners"),
        "{}",
        overview.body
    );
}

#[tokio::test]
async fn the_overview_charts_the_last_hour_and_a_partner_page_draws_its_float() {
    let app = spawn_app_with(&[
        ("simulators.supplier_latency_ms", "0"),
        ("supplier.poll_interval_ms", "20"),
        ("supplier.retry_backoff_ms", "10"),
    ])
    .await;
    let (partner, key) = app
        .partner_with_key(json!({ "name": "Globetrotter <Travel>" }), "live")
        .await;
    let partner_id = partner["id"].as_str().unwrap().to_owned();
    let secret = key["secret"].as_str().unwrap().to_owned();
    fund(&app, &partner_id, 10_000).await;
    for _ in 0..3 {
        let (status, order) = read(
            app.as_partner(&secret, Method::POST, "/orders")
                .header("Idempotency-Key", uuid::Uuid::new_v4().to_string())
                .json(&json!({ "plan_id": "pl_fr_1gb_7d", "quantity": 2 }))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{order}");
    }
    let cookie = sign_in(&app).await;

    let overview = eventually(
        "the delivered units charted",
        Duration::from_secs(30),
        || {
            let (app, cookie) = (&app, &cookie);
            async move {
                let page = open(app, Some(cookie), "/console").await;
                let delivered =
                    r#"Units delivered</strong> · <span class="muted">6 in the last hour"#;
                page.body.contains(delivered).then_some(page)
            }
        },
    )
    .await;
    let body = &overview.body;
    assert!(body.contains("deposits waiting for review"), "{body}");
    assert_eq!(body.matches("<svg").count(), 4, "{body}");
    for title in [
        r#"Orders accepted</strong> · <span class="muted">3 in the last hour"#,
        r#"Units refunded</strong> · <span class="muted">0 in the last hour"#,
        "<strong>Admission refusals</strong>",
    ] {
        assert!(body.contains(title), "{title} missing: {body}");
    }
    assert!(
        body.matches("<rect").count() >= 2,
        "orders and units: {body}"
    );
    assert!(!body.contains("NaN") && !body.contains("inf"), "{body}");

    let partners = open(&app, Some(&cookie), "/console/partners").await;
    let link = format!(r#"href="/console/partners/{partner_id}""#);
    assert!(partners.body.contains(&link), "{}", partners.body);
    let actors = open(&app, Some(&cookie), "/console/actors").await;
    assert!(
        actors.body.contains(&link) && actors.body.contains("Globetrotter &lt;Travel&gt;"),
        "the actor's partner by name: {}",
        actors.body
    );

    let page = open(
        &app,
        Some(&cookie),
        &format!("/console/partners/{partner_id}"),
    )
    .await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let body = &page.body;
    assert!(body.contains("Globetrotter &lt;Travel&gt;") && body.contains(&partner_id));
    assert!(body.contains(r#"<polyline class="float""#), "{body}");
    assert_eq!(
        body.matches("<circle").count(),
        4,
        "the funding and three purchases: {body}"
    );
    assert!(body.contains("$80.08"), "100 - 3 × 2 × 3.32 live: {body}");
    let unknown = open(&app, Some(&cookie), "/console/partners/pt_nobody").await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
}

/// Whether a page offers any form that decides money: a form or button
/// posting to an `approve` or `reject` route, or a note field.
fn offers_decisions(body: &str) -> bool {
    body.contains("/approve\"") || body.contains("/reject\"") || body.contains(r#"name="note""#)
}

#[tokio::test]
async fn a_viewer_sees_reviews_without_forms_and_a_finance_operator_decides_them() {
    let app = crate::deposits::deposits_app().await;
    let (_, secret) = live_partner(&app).await;
    let (_, review) = paid_after_credit(&app, &secret).await;
    let review_id = review["id"].as_str().unwrap();
    let approve = format!("/console/reviews/{review_id}/approve");
    let (_, viewer) = app.create_operator("Vera Viewer", "viewer").await;
    let (_, support) = app.create_operator("Sam Support", "support").await;
    let (_, finance) = app.create_operator("Fiona Finance", "finance").await;

    for (token, name, role) in [
        (&viewer, "Vera Viewer", "viewer"),
        (&support, "Sam Support", "support"),
    ] {
        let cookie = sign_in_as(&app, token).await;
        let page = open(&app, Some(&cookie), "/console/reviews").await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        let signed_in = format!("Signed in as <strong>{name}</strong> ({role})");
        assert!(page.body.contains(&signed_in), "{}", page.body);
        assert!(
            page.body.contains(review_id),
            "the review is listed: {}",
            page.body
        );
        assert!(
            page.body
                .contains("Decisions on deposit reviews need the finance role"),
            "{}",
            page.body
        );
        assert!(!offers_decisions(&page.body), "{role}: {}", page.body);

        // The route refuses it all the same, and nothing moves.
        let csrf = page.csrf();
        let refused = submit(&app, &cookie, &approve, &[("csrf", &csrf), ("note", "ok")]).await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.body);
        assert!(
            refused.body.contains("This needs the finance role"),
            "{}",
            refused.body
        );
        assert!(!offers_decisions(&refused.body), "{}", refused.body);
        assert_eq!(balance(&app, &secret).await, 20_000, "nothing moved");
    }

    let cookie = sign_in_as(&app, &finance).await;
    let page = open(&app, Some(&cookie), "/console/reviews").await;
    assert!(
        page.body.contains(&format!(r#"formaction="{approve}""#)),
        "{}",
        page.body
    );
    assert!(
        !page.body.contains("need the finance role"),
        "{}",
        page.body
    );
    let approved = submit(
        &app,
        &cookie,
        &approve,
        &[("csrf", &page.csrf()), ("note", "checked on chain")],
    )
    .await;
    assert_eq!(approved.status, StatusCode::SEE_OTHER, "{}", approved.body);
    let shown = open(&app, Some(&cookie), approved.location()).await;
    assert!(shown.body.contains("is approved"), "{}", shown.body);
    assert_eq!(balance(&app, &secret).await, 50_000);

    // The trail names who tried and who decided.
    let trail = open(&app, Some(&cookie), "/console/audit?action=role").await;
    assert_eq!(trail.status, StatusCode::OK, "{}", trail.body);
    for expected in ["Vera Viewer", "Sam Support", "role.refuse", "refused"] {
        assert!(trail.body.contains(expected), "{expected}: {}", trail.body);
    }
    let trail = open(&app, Some(&cookie), "/console/audit?operator=Fiona+Finance").await;
    assert!(trail.body.contains("review.approve"), "{}", trail.body);
    assert!(!trail.body.contains("Vera Viewer</td>"), "{}", trail.body);
}

/// A $5,000 adjustment `token` asks for, held for a second operator: its
/// approval id.
pub(crate) async fn held_adjustment(app: &TestApp, token: &str, partner_id: &str) -> String {
    let (status, held) = read(
        app.as_operator(
            token,
            Method::POST,
            &format!("/partners/{partner_id}/movements"),
        )
        .json(&json!({ "kind": "adjustment", "amount_cents": 500_000, "description": "wire received, bank ref 42" }))
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{held}");
    assert_eq!(held["status"], "pending_approval", "{held}");
    held["id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_second_finance_operator_approves_a_held_adjustment_on_the_console_once() {
    let app = spawn_app_with(&[("operator.four_eyes_cents", "100000")]).await;
    let (partner_id, secret) = live_partner(&app).await;
    let (_, fiona) = app.create_operator("Fiona Finance", "finance").await;
    let (_, frank) = app.create_operator("Frank Finance", "finance").await;
    let (_, vera) = app.create_operator("Vera Viewer", "viewer").await;
    let approval = held_adjustment(&app, &fiona, &partner_id).await;
    let approve = format!("/console/approvals/{approval}/approve");

    // Its requester sees it waiting, without forms; the route refuses her.
    let own = sign_in_as(&app, &fiona).await;
    let page = open(
        &app,
        Some(&own),
        &format!("/console/approvals?held={approval}"),
    )
    .await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    for expected in [
        "Held for a second operator's approval",
        approval.as_str(),
        "$5,000.00",
        "wire received, bank ref 42",
        "waiting for another operator",
    ] {
        assert!(page.body.contains(expected), "{expected}: {}", page.body);
    }
    assert!(!offers_decisions(&page.body), "{}", page.body);
    let csrf = page.csrf();
    let refused = submit(&app, &own, &approve, &[("csrf", &csrf), ("note", "mine")]).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.body);
    assert!(
        refused
            .body
            .contains("Another finance or admin operator must approve this"),
        "{}",
        refused.body
    );

    // A viewer sees it, without forms, and is refused.
    let viewer = sign_in_as(&app, &vera).await;
    let page = open(&app, Some(&viewer), "/console/approvals").await;
    assert!(page.body.contains(&approval), "{}", page.body);
    assert!(page.body.contains("need the finance role"), "{}", page.body);
    assert!(!offers_decisions(&page.body), "{}", page.body);
    let csrf = page.csrf();
    let refused = submit(&app, &viewer, &approve, &[("csrf", &csrf), ("note", "no")]).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.body);
    assert_eq!(balance(&app, &secret).await, 0, "nothing moved yet");

    // The second finance operator approves it from the form: it moves once.
    let second = sign_in_as(&app, &frank).await;
    let page = open(&app, Some(&second), "/console/approvals").await;
    assert!(
        page.body.contains(&format!(r#"formaction="{approve}""#)),
        "{}",
        page.body
    );
    let csrf = page.csrf();
    let forged = submit(
        &app,
        &second,
        &approve,
        &[("csrf", "forged"), ("note", "ok")],
    )
    .await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN);
    let blank = submit(&app, &second, &approve, &[("csrf", &csrf), ("note", "")]).await;
    assert_eq!(blank.status, StatusCode::BAD_REQUEST, "{}", blank.body);
    let approved = submit(
        &app,
        &second,
        &approve,
        &[("csrf", &csrf), ("note", "matches the bank statement")],
    )
    .await;
    assert_eq!(approved.status, StatusCode::SEE_OTHER, "{}", approved.body);
    assert_eq!(
        approved.location(),
        format!("/console/approvals?decided={approval}")
    );
    let shown = open(&app, Some(&second), approved.location()).await;
    assert!(
        shown
            .body
            .contains(&format!("Approval <code>{approval}</code> is approved.")),
        "{}",
        shown.body
    );
    assert!(
        shown.body.contains("Nothing waits for a second operator."),
        "{}",
        shown.body
    );
    assert!(
        shown.body.contains("matches the bank statement"),
        "{}",
        shown.body
    );
    assert_eq!(balance(&app, &secret).await, 500_000);
    let again = submit(
        &app,
        &second,
        &approve,
        &[("csrf", &csrf), ("note", "twice")],
    )
    .await;
    assert_eq!(again.status, StatusCode::CONFLICT, "{}", again.body);
    assert!(again.body.contains("already approved"), "{}", again.body);
    assert_eq!(balance(&app, &secret).await, 500_000, "moved once");

    audit_shows_the_steps(&app, &second, &approval, &partner_id).await;
}

/// The rows of a page's table (its `<tbody>`), or nothing without one.
fn rows_of(body: &str) -> &str {
    body.split_once("<tbody>").map_or("", |(_, rows)| rows)
}

/// The audit page of the held adjustment's story: each step with its
/// operator, filters, pages and bad filters answered with the API's words.
async fn audit_shows_the_steps(app: &TestApp, cookie: &str, approval: &str, partner_id: &str) {
    let trail = open(app, Some(cookie), "/console/audit").await;
    assert_eq!(trail.status, StatusCode::OK, "{}", trail.body);
    let rows = rows_of(&trail.body);
    for expected in [
        "movement.create",
        "pending_approval",
        "four_eyes.refuse",
        "role.refuse",
        "approval.approve",
        "console.sign_in",
        "Fiona Finance",
        "Frank Finance",
        "Vera Viewer",
        "$5,000.00",
        "matches the bank statement",
        approval,
    ] {
        assert!(rows.contains(expected), "{expected} missing: {rows}");
    }
    let newest_first =
        rows.find("approval.approve").unwrap() < rows.find("movement.create").unwrap();
    assert!(newest_first, "{rows}");

    // The form's empty fields filter nothing.
    let theirs = "/console/audit?operator=Fiona+Finance&partner_id=&action=";
    let theirs = open(app, Some(cookie), theirs).await;
    let rows = rows_of(&theirs.body);
    assert!(rows.contains("movement.create"), "{rows}");
    assert!(!rows.contains("Frank Finance"), "{rows}");
    assert!(
        theirs
            .body
            .contains(r#"name="operator" value="Fiona Finance""#),
        "the form keeps the filter: {}",
        theirs.body
    );
    let partner = format!("/console/audit?partner_id={partner_id}&action=approval");
    let partner = open(app, Some(cookie), &partner).await;
    let rows = rows_of(&partner.body);
    assert!(rows.contains("approval.approve"), "{rows}");
    assert!(!rows.contains("movement.create"), "{rows}");

    // Two rows a page: "Next page" leads on, to older rows.
    let first = open(app, Some(cookie), "/console/audit?limit=2").await;
    assert_eq!(rows_of(&first.body).matches("<tr>").count(), 2);
    let (_, rest) = first
        .body
        .split_once(r#"href="/console/audit?limit=2&amp;cursor="#)
        .unwrap_or_else(|| panic!("no next page: {}", first.body));
    let cursor = rest.split('"').next().unwrap();
    assert!(rest.contains("Next page"), "{rest}");
    let next = format!("/console/audit?limit=2&cursor={cursor}");
    let next = open(app, Some(cookie), &next).await;
    assert_eq!(next.status, StatusCode::OK, "{}", next.body);
    assert!(next.body.contains("Back to the newest"), "{}", next.body);
    assert_eq!(rows_of(&next.body).matches("<tr>").count(), 2);
    assert_ne!(rows_of(&first.body), rows_of(&next.body), "older rows");

    for (query, message) in [
        ("cursor=garbage".to_owned(), "cursor"),
        ("limit=0".to_owned(), "must be an integer from 1 to 200"),
        (
            format!("operator={}", "x".repeat(101)),
            "must be 1 to 100 characters",
        ),
    ] {
        let bad = open(app, Some(cookie), &format!("/console/audit?{query}")).await;
        assert_eq!(bad.status, StatusCode::BAD_REQUEST, "{query}: {}", bad.body);
        assert!(bad.body.contains(message), "{query}: {}", bad.body);
        assert!(
            bad.body.contains(r#"name="operator""#),
            "the form stays: {}",
            bad.body
        );
    }
}

#[tokio::test]
async fn a_review_approval_above_the_limit_is_held_and_shown_on_the_approvals_page() {
    let overrides: Vec<(&str, &str)> = UNTHROTTLED
        .iter()
        .copied()
        .chain([("operator.four_eyes_cents", "10000")])
        .collect();
    let app = spawn_app_with(&overrides).await;
    let (_, secret) = live_partner(&app).await;
    let (_, review) = paid_after_credit(&app, &secret).await;
    let review_id = review["id"].as_str().unwrap();
    let (_, finance) = app.create_operator("Fiona Finance", "finance").await;
    let cookie = sign_in_as(&app, &finance).await;
    let csrf = open(&app, Some(&cookie), "/console/reviews").await.csrf();

    let held = submit(
        &app,
        &cookie,
        &format!("/console/reviews/{review_id}/approve"),
        &[("csrf", &csrf), ("note", "paid late; checked")],
    )
    .await;
    assert_eq!(held.status, StatusCode::SEE_OTHER, "{}", held.body);
    assert!(
        held.location().starts_with("/console/approvals?held=apr_"),
        "{}",
        held.location()
    );
    let page = open(&app, Some(&cookie), held.location()).await;
    for expected in [
        "Held for a second operator's approval",
        "review approval",
        "$300.00",
        review_id,
        "paid late; checked",
        "waiting for another operator",
    ] {
        assert!(page.body.contains(expected), "{expected}: {}", page.body);
    }
    assert_eq!(balance(&app, &secret).await, 20_000, "nothing moved yet");
}

#[tokio::test]
async fn a_revoked_operator_is_signed_out_of_the_console_on_the_next_page() {
    let app = spawn_app_with(&[]).await;
    let (id, token) = app.create_operator("Sam Support", "support").await;
    let cookie = sign_in_as(&app, &token).await;
    let page = open(&app, Some(&cookie), "/console").await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(
        page.body
            .contains("Signed in as <strong>Sam Support</strong> (support)"),
        "{}",
        page.body
    );

    let (status, revoked) = read(
        app.operator(Method::POST, &format!("/operators/{id}/revoke"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{revoked}");
    for path in ["/console", "/console/approvals", "/console/audit"] {
        let away = open(&app, Some(&cookie), path).await;
        assert_eq!(away.status, StatusCode::SEE_OTHER, "{path}: {}", away.body);
        assert_eq!(away.location(), "/console/login", "{path}");
    }
    let again = try_sign_in(&app, &token).await;
    assert_eq!(again.status, StatusCode::UNAUTHORIZED, "{}", again.body);
}
