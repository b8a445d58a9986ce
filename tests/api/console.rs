//! The operator console over plain HTTP: signing in with the operator token,
//! the signed and expiring session cookie, the CSRF token on every form,
//! what each page shows, and a deposit review decided from its form once.
//! (`browser.rs` drives the same pages in headless Chromium.)

use std::time::Duration;

use hmac::{Hmac, Mac};
use reqwest::{Method, StatusCode, header};
use serde_json::json;
use sha2::Sha256;

use crate::{
    helpers::{
        OPERATOR_TOKEN, TestApp, balance, eventually, fund, live_partner, read, sandbox_key,
        spawn_app_with,
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

async fn open(app: &TestApp, cookie: Option<&str>, path: &str) -> Answer {
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

/// Signs in and returns the `Cookie` header value of the session.
pub(crate) async fn sign_in(app: &TestApp) -> String {
    let answer = try_sign_in(app, OPERATOR_TOKEN).await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER, "{}", answer.body);
    let set = answer.headers[header::SET_COOKIE].to_str().unwrap();
    set.split(';').next().unwrap().to_owned()
}

/// A session cookie signed with the operator token, expiring at `expires`.
fn forged_session(expires: i64) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(OPERATOR_TOKEN.as_bytes()).unwrap();
    mac.update(format!("session:{expires}").as_bytes());
    format!(
        "esim_console={expires}.{}",
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
        wrong.body.contains("not the operator token"),
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
    let app = spawn_app_with(&[("rate_limit.failed_auth_limit", "3")]).await;
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
    let (status, order) = read(
        app.as_partner(&sandbox, Method::POST, "/orders")
            .header("Idempotency-Key", uuid::Uuid::new_v4().to_string())
            .json(&json!({ "plan_id": "pl_sandbox_supplier_error", "quantity": 1 }))
            .send()
            .await
            .unwrap(),
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
