//! Error envelope, request ids, bare statuses, strict parsing, CORS.

use reqwest::{Method, StatusCode, header};
use serde_json::json;

use crate::helpers::{OPERATOR_TOKEN, TestApp, assert_error, read, spawn_app, spawn_app_with};

async fn error_of(
    app: &TestApp,
    request: reqwest::RequestBuilder,
    status: u16,
    code: &str,
) -> serde_json::Value {
    let _ = app;
    let response = request.send().await.unwrap();
    let header_id = response
        .headers()
        .get("x-request-id")
        .expect("x-request-id on every response")
        .to_str()
        .unwrap()
        .to_owned();
    let content_type = response.headers()[header::CONTENT_TYPE]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(content_type, "application/json");
    let (got, body) = read(response).await;
    let error = assert_error(got, &body, status, code);
    assert_eq!(error["request_id"], header_id, "header and body agree");
    error
}

#[tokio::test]
async fn an_unknown_path_is_a_not_found_envelope() {
    let app = spawn_app().await;
    let error = error_of(&app, app.partner(Method::GET, "/nowhere"), 404, "not_found").await;
    assert_eq!(error["type"], "not_found_error");
    assert!(error["param"].is_null());
    error_of(
        &app,
        app.client.get(format!("{}/elsewhere", app.public)),
        404,
        "not_found",
    )
    .await;
}

#[tokio::test]
async fn a_wrong_method_is_a_405_envelope_with_allow() {
    let app = spawn_app().await;
    let response = app.partner(Method::DELETE, "/health").send().await.unwrap();
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert!(response.headers().contains_key(header::ALLOW));
    error_of(
        &app,
        app.partner(Method::PUT, "/health"),
        405,
        "request.invalid",
    )
    .await;
}

#[tokio::test]
async fn an_oversized_body_is_a_413_envelope() {
    let app = spawn_app_with(&[("http.operator_body_limit_bytes", "65536")]).await;
    let huge = "x".repeat(100 * 1024);
    let request = app
        .operator(Method::POST, "/partners")
        .header(header::CONTENT_TYPE, "application/json")
        .body(format!("{{\"name\":\"{huge}\",\"tier\":\"gold\"}}"));
    error_of(&app, request, 413, "request.invalid").await;
}

#[tokio::test]
async fn malformed_json_missing_body_and_wrong_content_type_are_request_invalid() {
    let app = spawn_app().await;
    let malformed = app
        .operator(Method::POST, "/partners")
        .header(header::CONTENT_TYPE, "application/json")
        .body("{\"name\": ");
    error_of(&app, malformed, 400, "request.invalid").await;

    let empty = app
        .operator(Method::POST, "/partners")
        .header(header::CONTENT_TYPE, "application/json");
    error_of(&app, empty, 400, "request.invalid").await;

    let form = app
        .operator(Method::POST, "/partners")
        .header(header::CONTENT_TYPE, "text/plain")
        .body(r#"{"name":"a","tier":"gold"}"#);
    error_of(&app, form, 400, "request.invalid").await;

    let not_object = app.operator(Method::POST, "/partners").json(&json!([1, 2]));
    error_of(&app, not_object, 400, "request.invalid").await;
}

#[tokio::test]
async fn an_unknown_body_field_is_named() {
    let app = spawn_app().await;
    let request = app
        .operator(Method::POST, "/partners")
        .json(&json!({ "name": "Acme", "tier": "gold", "currency": "EUR" }));
    let error = error_of(&app, request, 400, "request.invalid").await;
    assert_eq!(error["param"], "currency");
    assert_eq!(error["details"][0]["param"], "currency");
}

#[tokio::test]
async fn unknown_and_repeated_query_parameters_are_named() {
    let app = spawn_app().await;
    let error = error_of(
        &app,
        app.partner(Method::GET, "/health?mode=sandbox"),
        400,
        "request.invalid",
    )
    .await;
    assert_eq!(error["param"], "mode");
    let error = error_of(
        &app,
        app.partner(Method::GET, "/health?a=1&a=2"),
        400,
        "request.invalid",
    )
    .await;
    assert_eq!(error["param"], "a");
}

#[tokio::test]
async fn every_kind_of_response_carries_a_request_id() {
    let app = spawn_app_with(&[("http.operator_body_limit_bytes", "65536")]).await;
    let requests = vec![
        app.partner(Method::GET, "/health"),
        app.partner(Method::GET, "/missing"),
        app.partner(Method::POST, "/health"),
        app.client
            .get(format!("{}/operator/v1/partners/pt_x", app.operator)),
        app.operator(Method::POST, "/partners")
            .header(header::CONTENT_TYPE, "application/json")
            .body(vec![b' '; 70 * 1024]),
        app.client.get(format!("{}/docs/errors", app.public)),
    ];
    let mut ids = Vec::new();
    for request in requests {
        let response = request.send().await.unwrap();
        let id = response
            .headers()
            .get("x-request-id")
            .expect("x-request-id")
            .to_str()
            .unwrap()
            .to_owned();
        assert!(id.starts_with("req_"), "{id}");
        ids.push(id);
    }
    let mut unique = ids.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), ids.len(), "request ids are unique");
}

#[tokio::test]
async fn no_cors_headers_on_get_or_preflight() {
    let app = spawn_app().await;
    let get = app
        .partner(Method::GET, "/health")
        .header(header::ORIGIN, "https://evil.example")
        .send()
        .await
        .unwrap();
    let preflight = app
        .partner(Method::OPTIONS, "/health")
        .header(header::ORIGIN, "https://evil.example")
        .header("access-control-request-method", "GET")
        .send()
        .await
        .unwrap();
    for response in [get, preflight] {
        let cors: Vec<_> = response
            .headers()
            .keys()
            .filter(|h| h.as_str().starts_with("access-control-"))
            .collect();
        assert!(cors.is_empty(), "CORS headers present: {cors:?}");
    }
}

#[tokio::test]
async fn every_doc_url_resolves_to_an_anchor_on_the_errors_page() {
    let app = spawn_app().await;
    let response = app.partner(Method::GET, "/nowhere").send().await.unwrap();
    let (_, body) = read(response).await;
    let doc_url = body["error"]["doc_url"].as_str().unwrap().to_owned();
    let (page_url, anchor) = doc_url.split_once('#').unwrap();

    let page = app.client.get(page_url).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let html = page.text().await.unwrap();
    assert!(html.contains(&format!("id=\"{anchor}\"")));
    for code in esim_reseller::http::error::ErrorCode::ALL {
        assert!(
            html.contains(&format!("id=\"{}\"", code.anchor())),
            "{code}"
        );
    }
}

#[tokio::test]
async fn operator_errors_use_the_same_envelope() {
    let app = spawn_app().await;
    let missing = app
        .client
        .get(format!("{}/operator/v1/partners/pt_x", app.operator));
    error_of(&app, missing, 401, "auth.missing").await;
    let wrong = app
        .client
        .get(format!("{}/operator/v1/partners/pt_x", app.operator))
        .bearer_auth(format!("{OPERATOR_TOKEN}x"));
    error_of(&app, wrong, 401, "auth.invalid_key").await;
}
