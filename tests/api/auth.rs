//! Bearer keys, account gating, allowlists and the failed-authentication budget.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{TestApp, assert_error, read, spawn_app, spawn_app_with};

fn secret(key: &Value) -> &str {
    key["secret"].as_str().unwrap()
}

async fn me(app: &TestApp, key: &str) -> (StatusCode, Value) {
    read(
        app.as_partner(key, Method::GET, "/me")
            .send()
            .await
            .unwrap(),
    )
    .await
}

#[tokio::test]
async fn a_missing_header_is_auth_missing_with_a_request_id() {
    let app = spawn_app().await;
    let response = app.partner(Method::GET, "/me").send().await.unwrap();
    assert!(response.headers().contains_key("x-request-id"));
    assert!(!response.headers().contains_key("x-ratelimit-limit"));
    let (status, body) = read(response).await;
    assert_error(status, &body, 401, "auth.missing");
}

#[tokio::test]
async fn malformed_unknown_and_revoked_keys_get_one_code_and_one_message() {
    let app = spawn_app().await;
    let (_, key) = app.partner_with_key(json!({}), "live").await;
    let revoked = app
        .issue_key(
            key["partner_id"].as_str().unwrap(),
            json!({ "mode": "live" }),
        )
        .await;
    let (status, _) = read(
        app.operator(
            Method::POST,
            &format!("/keys/{}/revoke", revoked["id"].as_str().unwrap()),
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);

    let unknown = format!("svc_sk_live_{}", "A".repeat(43));
    let too_short = &secret(&key)[..50];
    let mut messages = Vec::new();
    for presented in [
        too_short,
        unknown.as_str(),
        secret(&revoked),
        "svc_sk_prod_abc",
        "",
    ] {
        let (status, body) = me(&app, presented).await;
        let error = assert_error(status, &body, 401, "auth.invalid_key");
        messages.push(error["message"].as_str().unwrap().to_owned());
    }
    let basic = app
        .partner(Method::GET, "/me")
        .header("authorization", format!("Basic {}", secret(&key)))
        .send()
        .await
        .unwrap();
    let (status, body) = read(basic).await;
    messages.push(
        assert_error(status, &body, 401, "auth.invalid_key")["message"]
            .as_str()
            .unwrap()
            .to_owned(),
    );
    messages.dedup();
    assert_eq!(messages.len(), 1, "one message for all: {messages:?}");

    let (status, _) = me(&app, secret(&key)).await;
    assert_eq!(status, StatusCode::OK, "the good key still works");
}

#[tokio::test]
async fn rotation_issues_a_replacement_at_once_and_expires_the_old_key() {
    let app = spawn_app().await;
    let (_, old) = app.partner_with_key(json!({}), "live").await;

    let response = app
        .operator(
            Method::POST,
            &format!("/keys/{}/rotate", old["id"].as_str().unwrap()),
        )
        .json(&json!({ "grace_seconds": 0 }))
        .send()
        .await
        .unwrap();
    let (status, new) = read(response).await;
    assert_eq!(status, StatusCode::CREATED, "{new}");
    assert_ne!(new["id"], old["id"]);
    assert_eq!(new["mode"], "live");

    let (status, body) = me(&app, secret(&old)).await;
    assert_error(status, &body, 401, "auth.key_expired");
    let (status, body) = me(&app, secret(&new)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["key"]["id"], new["id"]);
}

#[tokio::test]
async fn a_rotated_key_keeps_working_during_its_grace() {
    let app = spawn_app().await;
    let (_, old) = app.partner_with_key(json!({}), "sandbox").await;
    let (_, new) = read(
        app.operator(
            Method::POST,
            &format!("/keys/{}/rotate", old["id"].as_str().unwrap()),
        )
        .json(&json!({ "grace_seconds": 600 }))
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(me(&app, secret(&old)).await.0, StatusCode::OK);
    assert_eq!(me(&app, secret(&new)).await.0, StatusCode::OK);
}

#[tokio::test]
async fn mode_comes_from_the_key_alone() {
    let app = spawn_app().await;
    let (_, key) = app.partner_with_key(json!({}), "sandbox").await;

    let response = app
        .as_partner(secret(&key), Method::GET, "/me?mode=live")
        .send()
        .await
        .unwrap();
    let (status, body) = read(response).await;
    assert_eq!(
        assert_error(status, &body, 400, "request.invalid")["param"],
        "mode"
    );

    let response = app
        .as_partner(secret(&key), Method::GET, "/balance")
        .header("x-mode", "live")
        .send()
        .await
        .unwrap();
    let (status, body) = read(response).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["mode"], "sandbox");
}

#[tokio::test]
async fn the_gating_matrix_of_five_statuses_and_two_modes() {
    let app = spawn_app().await;
    let expectations = [
        ("sandbox", "live", Some("partner.not_live")),
        ("pending", "live", Some("partner.not_live")),
        ("live", "live", None),
        ("suspended", "live", Some("partner.suspended")),
        ("closed", "live", Some("partner.closed")),
        ("sandbox", "sandbox", None),
        ("pending", "sandbox", None),
        ("live", "sandbox", None),
        ("suspended", "sandbox", None),
        ("closed", "sandbox", Some("partner.closed")),
    ];
    for (status, mode, expected) in expectations {
        // Keys cannot be issued on a closed account: issue first, then close.
        let initial = if status == "closed" { "live" } else { status };
        let (partner, key) = app
            .partner_with_key(json!({ "status": initial }), mode)
            .await;
        if status == "closed" {
            let path = format!("/partners/{}", partner["id"].as_str().unwrap());
            let (code, _) = read(
                app.operator(Method::PATCH, &path)
                    .json(&json!({ "status": "closed" }))
                    .send()
                    .await
                    .unwrap(),
            )
            .await;
            assert_eq!(code, StatusCode::OK);
        }
        for path in ["/me", "/balance"] {
            let (got, body) = read(
                app.as_partner(secret(&key), Method::GET, path)
                    .send()
                    .await
                    .unwrap(),
            )
            .await;
            match expected {
                None => assert_eq!(got, StatusCode::OK, "{status} {mode} {path}: {body}"),
                Some(code) => {
                    let error = assert_error(got, &body, 403, code);
                    assert_eq!(error["type"], "permission_error", "{status} {mode}");
                }
            }
        }
    }
}

#[tokio::test]
async fn an_operator_status_change_takes_effect_on_the_next_request() {
    let app = spawn_app().await;
    let (partner, key) = app.partner_with_key(json!({}), "live").await;
    let path = format!("/partners/{}", partner["id"].as_str().unwrap());
    assert_eq!(me(&app, secret(&key)).await.0, StatusCode::OK);

    app.operator(Method::PATCH, &path)
        .json(&json!({ "status": "suspended" }))
        .send()
        .await
        .unwrap();
    let (status, body) = me(&app, secret(&key)).await;
    assert_error(status, &body, 403, "partner.suspended");

    app.operator(Method::PATCH, &path)
        .json(&json!({ "status": "live" }))
        .send()
        .await
        .unwrap();
    assert_eq!(me(&app, secret(&key)).await.0, StatusCode::OK);
}

async fn key_with_allowlist(app: &TestApp, cidrs: &[&str]) -> String {
    let partner = app.create_partner(json!({})).await;
    let key = app
        .issue_key(
            partner["id"].as_str().unwrap(),
            json!({ "mode": "live", "allowed_cidrs": cidrs }),
        )
        .await;
    secret(&key).to_owned()
}

#[tokio::test]
async fn allowlists_without_a_trusted_proxy_use_the_socket_peer() {
    let app = spawn_app().await;
    let inside = key_with_allowlist(&app, &["127.0.0.0/8"]).await;
    let outside = key_with_allowlist(&app, &["203.0.113.0/24"]).await;

    assert_eq!(me(&app, &inside).await.0, StatusCode::OK);
    let (status, body) = me(&app, &outside).await;
    assert_error(status, &body, 403, "auth.ip_not_allowed");

    // A spoofed header from an untrusted peer is ignored.
    let spoofed = app
        .as_partner(&outside, Method::GET, "/me")
        .header("x-forwarded-for", "203.0.113.9")
        .send()
        .await
        .unwrap();
    let (status, body) = read(spoofed).await;
    assert_error(status, &body, 403, "auth.ip_not_allowed");
}

#[tokio::test]
async fn allowlists_behind_a_trusted_proxy_use_the_forwarded_address() {
    let app = spawn_app_with(&[("http.trusted_proxies", "[\"127.0.0.1/32\"]")]).await;
    let key = key_with_allowlist(&app, &["203.0.113.0/24"]).await;
    let call = |xff: Option<&str>| {
        let mut request = app.as_partner(&key, Method::GET, "/me");
        if let Some(xff) = xff {
            request = request.header("x-forwarded-for", xff);
        }
        request.send()
    };

    let (status, _) = read(call(Some("198.51.100.1, 203.0.113.9")).await.unwrap()).await;
    assert_eq!(status, StatusCode::OK, "right-most untrusted hop is inside");

    let (status, outside) = read(call(Some("203.0.113.9, 198.51.100.1")).await.unwrap()).await;
    let outside = assert_error(status, &outside, 403, "auth.ip_not_allowed");
    let (status, missing) = read(call(None).await.unwrap()).await;
    let missing = assert_error(status, &missing, 403, "auth.ip_not_allowed");
    let (status, garbage) = read(call(Some("not-an-address")).await.unwrap()).await;
    let garbage = assert_error(status, &garbage, 403, "auth.ip_not_allowed");
    assert_eq!(
        outside["message"], missing["message"],
        "outside and undeterminable read the same"
    );
    assert_eq!(outside["message"], garbage["message"]);
}

#[tokio::test]
async fn the_operator_can_change_and_clear_an_allowlist() {
    let app = spawn_app().await;
    let partner = app.create_partner(json!({})).await;
    let key = app
        .issue_key(
            partner["id"].as_str().unwrap(),
            json!({ "mode": "live", "allowed_cidrs": ["203.0.113.0/24"] }),
        )
        .await;
    let path = format!("/keys/{}", key["id"].as_str().unwrap());
    assert_eq!(me(&app, secret(&key)).await.0, StatusCode::FORBIDDEN);

    let (status, body) = read(
        app.operator(Method::PATCH, &path)
            .json(&json!({ "allowed_cidrs": ["127.0.0.1"] }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["allowed_cidrs"], json!(["127.0.0.1/32"]));
    assert_eq!(me(&app, secret(&key)).await.0, StatusCode::OK);

    app.operator(Method::PATCH, &path)
        .json(&json!({ "allowed_cidrs": ["203.0.113.0/24"] }))
        .send()
        .await
        .unwrap();
    assert_eq!(me(&app, secret(&key)).await.0, StatusCode::FORBIDDEN);
    let (_, body) = read(
        app.operator(Method::PATCH, &path)
            .json(&json!({ "allowed_cidrs": null }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert!(body["allowed_cidrs"].is_null());
    assert_eq!(me(&app, secret(&key)).await.0, StatusCode::OK);
}

async fn fail_auth(
    app: &TestApp,
    xff: Option<&str>,
) -> (StatusCode, Value, reqwest::header::HeaderMap) {
    let mut request = app
        .partner(Method::GET, "/me")
        .bearer_auth("svc_sk_live_nope");
    if let Some(xff) = xff {
        request = request.header("x-forwarded-for", xff);
    }
    let response = request.send().await.unwrap();
    let headers = response.headers().clone();
    let (status, body) = read(response).await;
    (status, body, headers)
}

#[tokio::test]
async fn the_31st_failed_authentication_is_a_bare_429_and_successes_do_not_count() {
    let app = spawn_app_with(&[("rate_limit.bands.bronze.read.limit", "1000")]).await;
    let (_, key) = app.partner_with_key(json!({}), "live").await;

    for _ in 0..29 {
        assert_eq!(fail_auth(&app, None).await.0, StatusCode::UNAUTHORIZED);
    }
    for _ in 0..20 {
        assert_eq!(
            me(&app, secret(&key)).await.0,
            StatusCode::OK,
            "successes do not consume"
        );
    }
    assert_eq!(
        fail_auth(&app, None).await.0,
        StatusCode::UNAUTHORIZED,
        "the 30th failure"
    );

    let (status, body, headers) = fail_auth(&app, None).await;
    let error = assert_error(status, &body, 429, "rate_limit.exceeded");
    assert!(!headers.contains_key("retry-after"));
    assert!(
        !headers
            .keys()
            .any(|h| h.as_str().starts_with("x-ratelimit"))
    );
    assert!(error.get("rate_class").is_none() && error.get("retry_after_seconds").is_none());

    // Checked before any lookup: a good key from the same address is refused too.
    let (status, body) = me(&app, secret(&key)).await;
    assert_error(status, &body, 429, "rate_limit.exceeded");
    // A spoofed X-Forwarded-For from an untrusted peer does not dodge it.
    assert_eq!(
        fail_auth(&app, Some("198.51.100.77")).await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn failed_authentication_budgets_are_per_source_address() {
    let app = spawn_app_with(&[("http.trusted_proxies", "[\"127.0.0.1/32\"]")]).await;
    for _ in 0..30 {
        assert_eq!(
            fail_auth(&app, Some("198.51.100.1")).await.0,
            StatusCode::UNAUTHORIZED
        );
    }
    assert_eq!(
        fail_auth(&app, Some("198.51.100.1")).await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        fail_auth(&app, Some("198.51.100.2")).await.0,
        StatusCode::UNAUTHORIZED,
        "another address has its own budget"
    );
}
