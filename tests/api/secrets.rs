//! Secrets never reach the logs or an error body: the real binary runs with
//! JSON logs captured, is exercised with issued keys, wrong keys and a wrong
//! operator token, and its whole log is searched for every secret.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::ServeProcess;

const TOKEN: &str = "secret-operator-token-never-logged-42";

#[tokio::test]
async fn secrets_never_appear_in_logs_or_error_bodies() {
    let serve = ServeProcess::start(&[
        ("ESIM__OPERATOR__TOKEN", TOKEN),
        ("ESIM__LOG__LEVEL", "debug"),
    ])
    .await;
    let (public, operator) = (serve.public.clone(), serve.operator.clone());
    let client = reqwest::Client::new();
    let op = |method: Method, path: &str| {
        client
            .request(method, format!("http://{operator}/operator/v1{path}"))
            .bearer_auth(TOKEN)
    };

    let (partner, key) = serve.live_partner(TOKEN).await;
    let id = partner["id"].as_str().unwrap();
    let secret = key["secret"].as_str().unwrap().to_owned();
    let rotated: Value = op(
        Method::POST,
        &format!("/keys/{}/rotate", key["id"].as_str().unwrap()),
    )
    .json(&json!({ "grace_seconds": 0 }))
    .send()
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let new_secret = rotated["secret"].as_str().unwrap().to_owned();

    let mut bodies = Vec::new();
    for presented in [
        secret.as_str(),
        new_secret.as_str(),
        "svc_sk_live_notarealkeynotarealkeynotarealkeynotareal",
    ] {
        let response = client
            .get(format!("http://{public}/partner/v1/me"))
            .bearer_auth(presented)
            .send()
            .await
            .unwrap();
        bodies.push(response.text().await.unwrap());
    }
    let wrong_token = client
        .get(format!("http://{operator}/operator/v1/partners/{id}"))
        .bearer_auth(format!("{TOKEN}-wrong"))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong_token.status(), StatusCode::UNAUTHORIZED);
    bodies.push(wrong_token.text().await.unwrap());
    let order = client
        .post(format!("http://{public}/partner/v1/orders"))
        .bearer_auth(&new_secret)
        .header("idempotency-key", "secrets-test-key-0001")
        .json(&json!({ "plan_id": "pl_fr_1gb_7d", "quantity": 1 }))
        .send()
        .await
        .unwrap();
    bodies.push(order.text().await.unwrap());

    let log = serve.kill().await.join("\n");
    assert!(log.contains("request finished"), "the log was captured");
    for needle in [
        secret.as_str(),
        new_secret.as_str(),
        TOKEN,
        "sim-webhook-secret",
        "sim-supplier-secret",
        "dev-cursor-secret",
    ] {
        assert!(!log.contains(needle), "a secret is in the log: {needle}");
        for body in &bodies {
            assert!(!body.contains(needle), "a secret is in an answer: {needle}");
        }
    }
}
