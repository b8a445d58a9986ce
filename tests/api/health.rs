use reqwest::{Method, StatusCode};

use crate::helpers::{assert_error, read, spawn_app};

#[tokio::test]
async fn health_is_ok_without_a_key_and_without_rate_limit_headers() {
    let app = spawn_app().await;

    let response = app.partner(Method::GET, "/health").send().await.unwrap();

    assert!(response.headers().contains_key("x-request-id"));
    assert!(
        !response
            .headers()
            .keys()
            .any(|h| h.as_str().starts_with("x-ratelimit"))
    );
    let (status, body) = read(response).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["status"], "ok");
    assert_eq!(body["database"], "ok");
    assert!(body["uptime_seconds"].is_u64());
    assert!(body.get("object").is_none());
}

#[tokio::test]
async fn health_is_degraded_when_the_database_is_gone() {
    let app = spawn_app().await;
    app.db.close_by_ref().await.unwrap();

    let response = app.partner(Method::GET, "/health").send().await.unwrap();

    assert!(response.headers().contains_key("x-request-id"));
    let (status, body) = read(response).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body["status"], "degraded");
    assert_eq!(body["database"], "down");
    assert!(
        body.get("error").is_none(),
        "health keeps its own body: {body}"
    );
}

#[tokio::test]
async fn health_refuses_unknown_query_parameters() {
    let app = spawn_app().await;

    let response = app
        .partner(Method::GET, "/health?verbose=1")
        .send()
        .await
        .unwrap();

    let (status, body) = read(response).await;
    let error = assert_error(status, &body, 400, "request.invalid");
    assert_eq!(error["param"], "verbose");
}

#[tokio::test]
async fn a_database_failure_on_a_request_is_an_internal_error_envelope() {
    let app = spawn_app().await;
    app.db.close_by_ref().await.unwrap();

    let response = app
        .operator(Method::GET, "/partners/pt_0000000000000000000000")
        .send()
        .await
        .unwrap();

    let request_id = response.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let (status, body) = read(response).await;
    let error = assert_error(status, &body, 500, "internal_error");
    assert_eq!(error["type"], "api_error");
    assert_eq!(error["request_id"], request_id);
    assert!(
        !error["message"].as_str().unwrap().contains("pool"),
        "no internals leak: {error}"
    );
}

#[tokio::test]
async fn shutdown_drains_and_returns_cleanly() {
    let mut app = spawn_app().await;
    let response = app.partner(Method::GET, "/health").send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);

    app.stop().await.expect("the service stops without error");
}
