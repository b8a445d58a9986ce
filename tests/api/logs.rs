//! What operators read in a node's log about partners and their orders: a
//! partner request's access line names the partner and key, and every order's end is
//! one `order settled` line of one shape, whether its profiles were delivered
//! or its units refunded (each refund one `units refunded` line before it).

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{ServeProcess, eventually, read};

const TOKEN: &str = "logs-bootstrap-token-0123";

/// `POST /orders` of one unit of `plan` with `secret`: the 202's order id.
async fn order(serve: &ServeProcess, secret: &str, plan: &str) -> String {
    let (status, body) = serve.order(secret, plan, 1).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    body["id"].as_str().unwrap().to_owned()
}

/// The `order settled` line of `order_id` once the node has written it.
async fn settled_line(serve: &ServeProcess, order_id: &str) -> Value {
    eventually(
        "the order's `order settled` line",
        Duration::from_secs(30),
        || async {
            serve
                .lines()
                .iter()
                .filter_map(|line| serde_json::from_str::<Value>(line).ok())
                .find(|line| line["message"] == "order settled" && line["order_id"] == order_id)
        },
    )
    .await
}

#[tokio::test]
async fn partner_requests_and_every_settled_order_name_the_partner() {
    let serve = ServeProcess::start(&[
        ("ESIM__OPERATOR__TOKEN", TOKEN),
        ("ESIM__LOG__LEVEL", "info"),
        ("ESIM__SIMULATORS__SUPPLIER_LATENCY_MS", "0"),
    ])
    .await;
    let (partner, live) = serve.live_partner(TOKEN).await;
    let partner_id = partner["id"].as_str().unwrap().to_owned();
    serve.fund(TOKEN, &partner_id, 100_000).await;
    let sandbox = serve
        .operator_call(
            TOKEN,
            Method::POST,
            &format!("/partners/{partner_id}/keys"),
            json!({ "mode": "sandbox" }),
        )
        .await;

    // Known, then refused: its source is outside the key's allowlist.
    let fenced = serve
        .operator_call(
            TOKEN,
            Method::POST,
            &format!("/partners/{partner_id}/keys"),
            json!({ "mode": "live", "allowed_cidrs": ["203.0.113.0/24"] }),
        )
        .await;
    let (status, refused) = read(
        reqwest::Client::new()
            .get(format!("http://{}/partner/v1/me", serve.public))
            .bearer_auth(fenced["secret"].as_str().unwrap())
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");

    // Delivered: its order settles where its profile is written.
    let delivered = order(&serve, live["secret"].as_str().unwrap(), "pl_fr_1gb_7d").await;
    // Refused by the supplier: it settles where its unit is refunded.
    let refunded = order(
        &serve,
        sandbox["secret"].as_str().unwrap(),
        "pl_sandbox_supplier_error",
    )
    .await;

    let completed = settled_line(&serve, &delivered).await;
    assert_eq!(completed["partner_id"], partner_id.as_str(), "{completed}");
    assert_eq!(completed["mode"], "live", "{completed}");
    assert_eq!(completed["status"], "completed", "{completed}");
    assert!(completed.get("failure_code").is_none(), "{completed}");
    assert!(completed["settled_after_ms"].is_u64(), "{completed}");
    let failed = settled_line(&serve, &refunded).await;
    assert_eq!(failed["partner_id"], partner_id.as_str(), "{failed}");
    assert_eq!(failed["mode"], "sandbox", "{failed}");
    assert_eq!(failed["status"], "failed", "{failed}");
    assert_eq!(failed["failure_code"], "supplier_error", "{failed}");

    let lines = serve.terminate().await;
    let parsed: Vec<Value> = lines
        .iter()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    // Its refund, the line before: the same names for the same things.
    let refund = parsed
        .iter()
        .find(|line| line["message"] == "units refunded" && line["order_id"] == refunded.as_str())
        .unwrap_or_else(|| panic!("no `units refunded` line of the order: {lines:?}"));
    assert_eq!(refund["partner_id"], partner_id.as_str(), "{refund}");
    assert_eq!(refund["units"], 1, "{refund}");
    assert_eq!(refund["failure_code"], "supplier_error", "{refund}");
    let accepted: Vec<&Value> = parsed
        .iter()
        .filter(|line| {
            line["message"] == "request finished" && line["span"]["route"] == "/partner/v1/orders"
        })
        .collect();
    assert_eq!(accepted.len(), 2, "one access line an order: {accepted:?}");
    for (line, key) in accepted.iter().zip([&live, &sandbox]) {
        assert_eq!(line["status"], 202, "{line}");
        assert_eq!(line["partner_id"], partner_id.as_str(), "{line}");
        assert_eq!(line["key_id"], key["id"], "{line}");
    }
    let refusal = parsed
        .iter()
        .find(|line| line["message"] == "request finished" && line["status"] == 403)
        .unwrap_or_else(|| panic!("no access line of the refusal: {lines:?}"));
    assert_eq!(refusal["partner_id"], partner_id.as_str(), "{refusal}");
    assert_eq!(refusal["key_id"], fenced["id"], "{refusal}");
}
