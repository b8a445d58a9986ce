//! Fixed-window rate limits per key and class.

use reqwest::{Method, Response, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{
    TestApp, assert_error, eventually, read, spawn_app, spawn_app_with, spawn_node,
};

fn header_u64(response: &Response, name: &str) -> u64 {
    response.headers()[name].to_str().unwrap().parse().unwrap()
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Sends `limit + 1` requests inside one window and returns the last answer.
/// If a window boundary falls among them, it starts again in the next window.
async fn exceed(apps: &[&TestApp], key: &str, path: &str, limit: u64) -> Response {
    for _ in 0..3 {
        let mut resets = Vec::new();
        let mut last = None;
        for i in 0..=limit {
            let app = apps[i as usize % apps.len()];
            let response = app.as_partner(key, Method::GET, path).send().await.unwrap();
            resets.push(header_u64(&response, "x-ratelimit-reset"));
            if resets.first() != resets.last() {
                break; // the window turned mid-way: counts restart, try again
            }
            if i < limit {
                assert_eq!(
                    response.status(),
                    StatusCode::OK,
                    "request {i} of the window"
                );
                assert_eq!(
                    header_u64(&response, "x-ratelimit-remaining"),
                    limit - i - 1
                );
            }
            last = Some(response);
        }
        resets.dedup();
        if resets.len() == 1 {
            return last.unwrap();
        }
        // The window turned mid-way: wait for the next one to start cleanly.
        let next = *resets.last().unwrap();
        eventually(
            "the next window",
            std::time::Duration::from_secs(65),
            || async move { (unix_now() >= next).then_some(()) },
        )
        .await;
    }
    panic!("could not fit {limit} requests in one window");
}

#[tokio::test]
async fn success_and_error_responses_carry_the_window_headers() {
    let app = spawn_app().await;
    let (_, key) = app
        .partner_with_key(json!({ "tier": "silver" }), "live")
        .await;
    let secret = key["secret"].as_str().unwrap();

    let ok = app
        .as_partner(secret, Method::GET, "/me")
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
    assert_eq!(header_u64(&ok, "x-ratelimit-limit"), 20, "silver read band");
    assert!(header_u64(&ok, "x-ratelimit-remaining") < 20);
    let reset = header_u64(&ok, "x-ratelimit-reset");
    assert!(
        reset > unix_now().saturating_sub(1) && reset <= unix_now() + 1,
        "a one-second window"
    );
    assert!(!ok.headers().contains_key("retry-after"));

    let bad = app
        .as_partner(secret, Method::GET, "/balance?x=1")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    assert!(
        bad.headers().contains_key("x-ratelimit-limit"),
        "errors carry the headers too"
    );
    assert!(bad.headers().contains_key("x-ratelimit-remaining"));
    assert!(bad.headers().contains_key("x-ratelimit-reset"));
}

#[tokio::test]
async fn the_window_429_has_retry_after_and_names_its_class_then_the_window_resets() {
    let app = spawn_app_with(&[("rate_limit.bands.bronze.read.window_seconds", "2")]).await;
    let (_, key) = app.partner_with_key(json!({}), "live").await;
    let secret = key["secret"].as_str().unwrap();

    let response = exceed(&[&app], secret, "/me", 10).await;
    let retry_after = header_u64(&response, "retry-after");
    let reset = header_u64(&response, "x-ratelimit-reset");
    assert_eq!(header_u64(&response, "x-ratelimit-remaining"), 0);
    assert_eq!(header_u64(&response, "x-ratelimit-limit"), 10);
    let (status, body) = read(response).await;
    let error = assert_error(status, &body, 429, "rate_limit.exceeded");
    assert_eq!(error["type"], "rate_limit_error");
    assert_eq!(error["rate_class"], "read");
    assert_eq!(error["retry_after_seconds"], retry_after);
    assert!(
        (1..=2).contains(&retry_after),
        "whole seconds, never 0: {retry_after}"
    );

    let renewed = eventually(
        "the window to reset",
        std::time::Duration::from_secs(5),
        || async {
            let response = app
                .as_partner(secret, Method::GET, "/me")
                .send()
                .await
                .unwrap();
            (response.status() == StatusCode::OK).then_some(response)
        },
    )
    .await;
    assert!(header_u64(&renewed, "x-ratelimit-reset") > reset);
}

#[tokio::test]
async fn two_keys_have_independent_buckets() {
    let app = spawn_app_with(&[("rate_limit.bands.bronze.read.window_seconds", "60")]).await;
    let (partner, first) = app.partner_with_key(json!({}), "live").await;
    let second = app
        .issue_key(partner["id"].as_str().unwrap(), json!({ "mode": "live" }))
        .await;

    let response = exceed(&[&app], first["secret"].as_str().unwrap(), "/balance", 10).await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let other = app
        .as_partner(second["secret"].as_str().unwrap(), Method::GET, "/balance")
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), StatusCode::OK);
    assert_eq!(header_u64(&other, "x-ratelimit-remaining"), 9);
}

#[tokio::test]
async fn sandbox_keys_use_the_sandbox_band() {
    let app = spawn_app().await;
    let (_, key) = app
        .partner_with_key(json!({ "tier": "gold" }), "sandbox")
        .await;
    let response = app
        .as_partner(key["secret"].as_str().unwrap(), Method::GET, "/me")
        .send()
        .await
        .unwrap();
    assert_eq!(header_u64(&response, "x-ratelimit-limit"), 10);
    let (_, body) = read(response).await;
    assert_eq!(
        body["rate_limits"]["read"],
        json!({ "limit": 10, "window_seconds": 1 })
    );
}

#[tokio::test]
async fn health_has_no_rate_limit() {
    let app = spawn_app().await;
    for _ in 0..30 {
        let response = app.partner(Method::GET, "/health").send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert!(!response.headers().contains_key("x-ratelimit-limit"));
    }
}

#[tokio::test]
async fn with_redis_two_nodes_share_one_window() {
    let Ok(redis_url) = std::env::var("TEST_REDIS_URL") else {
        eprintln!("TEST_REDIS_URL not set; the shared-window test needs Redis");
        return;
    };
    let overrides = [
        ("rate_limit.backend", "redis"),
        ("rate_limit.redis_url", redis_url.as_str()),
        ("rate_limit.bands.bronze.read.limit", "6"),
        ("rate_limit.bands.bronze.read.window_seconds", "60"),
    ];
    let first = spawn_app_with(&overrides).await;
    let second = spawn_node(&first.database_url, &overrides).await;
    let (_, key): (Value, Value) = first.partner_with_key(json!({}), "live").await;

    let response = exceed(
        &[&first, &second],
        key["secret"].as_str().unwrap(),
        "/me",
        6,
    )
    .await;
    let (status, body) = read(response).await;
    let error = assert_error(status, &body, 429, "rate_limit.exceeded");
    assert_eq!(error["rate_class"], "read");
}
