//! Object-level authorization: every route that takes an id answers only the
//! owning partner in the owning mode; everyone else gets the route's 404.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{TestApp, assert_error, eventually, read, spawn_app_with};

const FAST: &[(&str, &str)] = &[
    ("supplier.retry_backoff_ms", "10"),
    ("supplier.poll_interval_ms", "20"),
    ("simulators.supplier_latency_ms", "0"),
    ("rate_limit.bands.bronze.read.limit", "100000"),
    ("rate_limit.bands.bronze.write.limit", "100000"),
    ("rate_limit.bands.sandbox.read.limit", "100000"),
    ("rate_limit.bands.sandbox.write.limit", "100000"),
];

/// A partner's two keys.
struct Keys {
    live: String,
    sandbox: String,
}

async fn partner_with_both_keys(app: &TestApp) -> (String, Keys) {
    let (partner, live) = app.partner_with_key(json!({}), "live").await;
    let id = partner["id"].as_str().unwrap().to_owned();
    let sandbox = app.issue_key(&id, json!({ "mode": "sandbox" })).await;
    let (status, _) = read(
        app.operator(Method::POST, &format!("/partners/{id}/movements"))
            .json(&json!({ "kind": "adjustment", "amount_cents": 100_000, "description": "fund" }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let keys = Keys {
        live: live["secret"].as_str().unwrap().to_owned(),
        sandbox: sandbox["secret"].as_str().unwrap().to_owned(),
    };
    (id, keys)
}

/// Places an order and waits for it to complete; returns (order id, first ICCID).
async fn completed_order(app: &TestApp, key: &str) -> (String, String) {
    let response = app
        .as_partner(key, Method::POST, "/orders")
        .header(
            "idempotency-key",
            format!("authz-{}", uuid::Uuid::new_v4().simple()),
        )
        .json(&json!({ "plan_id": "pl_fr_1gb_7d", "quantity": 1 }))
        .send()
        .await
        .unwrap();
    let (status, order) = read(response).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{order}");
    let id = order["id"].as_str().unwrap().to_owned();
    let done: Value = eventually("the order to complete", Duration::from_secs(20), || async {
        let (_, body) = read(
            app.as_partner(key, Method::GET, &format!("/orders/{id}"))
                .send()
                .await
                .unwrap(),
        )
        .await;
        (body["status"] == "completed").then_some(body)
    })
    .await;
    (id, done["esims"][0]["iccid"].as_str().unwrap().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_id_taking_route_answers_only_its_owner_in_its_mode() {
    let app = spawn_app_with(FAST).await;
    let (_, owner) = partner_with_both_keys(&app).await;
    let (_, other) = partner_with_both_keys(&app).await;
    let (live_order, live_iccid) = completed_order(&app, &owner.live).await;
    let (sandbox_order, sandbox_iccid) = completed_order(&app, &owner.sandbox).await;
    let (status, deposit) = read(
        app.as_partner(&owner.live, Method::POST, "/deposits")
            .json(&json!({ "amount_cents": 10_000 }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{deposit}");
    let deposit_id = deposit["id"].as_str().unwrap().to_owned();

    // (path, owning key, the route's 404 code)
    let resources: Vec<(String, &str, &str)> = vec![
        (
            format!("/orders/{live_order}"),
            owner.live.as_str(),
            "order.not_found",
        ),
        (
            format!("/orders/{sandbox_order}"),
            owner.sandbox.as_str(),
            "order.not_found",
        ),
        (
            format!("/esims/{live_iccid}"),
            owner.live.as_str(),
            "esim.not_found",
        ),
        (
            format!("/esims/{live_iccid}/install"),
            owner.live.as_str(),
            "esim.not_found",
        ),
        (
            format!("/esims/{live_iccid}/usage"),
            owner.live.as_str(),
            "esim.not_found",
        ),
        (
            format!("/esims/{sandbox_iccid}"),
            owner.sandbox.as_str(),
            "esim.not_found",
        ),
        (
            format!("/esims/{sandbox_iccid}/install"),
            owner.sandbox.as_str(),
            "esim.not_found",
        ),
        (
            format!("/esims/{sandbox_iccid}/usage"),
            owner.sandbox.as_str(),
            "esim.not_found",
        ),
        (
            format!("/deposits/{deposit_id}"),
            owner.live.as_str(),
            "not_found",
        ),
    ];
    let callers = [
        ("own live", owner.live.as_str()),
        ("own sandbox", owner.sandbox.as_str()),
        ("other live", other.live.as_str()),
        ("other sandbox", other.sandbox.as_str()),
    ];
    for (path, owning_key, not_found) in &resources {
        for (who, key) in callers {
            let (status, body) =
                read(app.as_partner(key, Method::GET, path).send().await.unwrap()).await;
            if key == *owning_key {
                assert_eq!(status, StatusCode::OK, "{who} {path}: {body}");
            } else {
                assert_error(status, &body, 404, not_found);
            }
        }
    }

    // Lists never leak either: the other partner sees none of the owner's objects.
    for key in [other.live.as_str(), other.sandbox.as_str()] {
        for list in ["/orders", "/esims", "/deposits", "/ledger"] {
            let (status, body) =
                read(app.as_partner(key, Method::GET, list).send().await.unwrap()).await;
            assert_eq!(status, StatusCode::OK, "{list}");
            let ids: Vec<&Value> = body["data"].as_array().unwrap().iter().collect();
            assert!(
                ids.iter().all(|row| row["id"] != live_order.as_str()
                    && row["id"] != sandbox_order.as_str()
                    && row["iccid"] != live_iccid.as_str()
                    && row["id"] != deposit_id.as_str()),
                "{list} leaks the owner's objects: {body}"
            );
        }
    }
}
