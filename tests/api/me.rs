//! `GET /me` and `GET /balance`.

use std::sync::atomic::{AtomicBool, Ordering};

use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::helpers::{balance, post_order, read, spawn_app, spawn_app_with};

#[tokio::test]
async fn me_describes_the_account_the_calling_key_and_its_limits() {
    let app = spawn_app().await;
    let (partner, key) = app
        .partner_with_key(json!({ "name": "Roam Co", "tier": "gold" }), "live")
        .await;

    let (status, me) = read(
        app.as_partner(key["secret"].as_str().unwrap(), Method::GET, "/me")
            .send()
            .await
            .unwrap(),
    )
    .await;

    assert_eq!(status, StatusCode::OK, "{me}");
    assert_eq!(me["object"], "partner");
    assert_eq!(me["id"], partner["id"]);
    assert_eq!(me["name"], "Roam Co");
    assert_eq!(me["slug"], "roam-co");
    assert_eq!(me["status"], "live");
    assert_eq!(me["mode"], "live");
    assert_eq!(me["tier"], "gold");
    assert_eq!(me["created_at"], partner["created_at"]);
    assert_eq!(me["key"]["id"], key["id"]);
    assert_eq!(me["key"]["last4"], key["last4"]);
    assert_eq!(me["key"]["mode"], "live");
    assert_eq!(me["key"]["label"], key["label"]);
    assert!(me["key"]["expires_at"].is_null());
    assert!(me["key"].get("secret").is_none());
    assert_eq!(
        me["rate_limits"],
        json!({
            "read": { "limit": 40, "window_seconds": 1 },
            "write": { "limit": 50, "window_seconds": 5 },
            "supplier": { "limit": 4, "window_seconds": 1 },
            "catalogue": { "limit": 240, "window_seconds": 60 },
        })
    );
}

#[tokio::test]
async fn a_sandbox_key_on_a_live_account_reports_status_live_and_mode_sandbox() {
    let app = spawn_app().await;
    let (_, key) = app
        .partner_with_key(json!({ "tier": "platinum" }), "sandbox")
        .await;
    let (status, me) = read(
        app.as_partner(key["secret"].as_str().unwrap(), Method::GET, "/me")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(me["status"], "live");
    assert_eq!(me["mode"], "sandbox");
    assert_eq!(
        me["rate_limits"]["write"],
        json!({ "limit": 10, "window_seconds": 5 })
    );
}

#[tokio::test]
async fn me_is_read_fresh_after_operator_changes() {
    let app = spawn_app().await;
    let (partner, key) = app
        .partner_with_key(json!({ "tier": "bronze" }), "live")
        .await;
    app.operator(
        Method::PATCH,
        &format!("/partners/{}", partner["id"].as_str().unwrap()),
    )
    .json(&json!({ "tier": "silver" }))
    .send()
    .await
    .unwrap();
    let (_, me) = read(
        app.as_partner(key["secret"].as_str().unwrap(), Method::GET, "/me")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(me["tier"], "silver");
    assert_eq!(me["rate_limits"]["read"]["limit"], 20);
}

#[tokio::test]
async fn balance_shows_the_float_of_the_keys_mode_and_the_headline_discount() {
    let app = spawn_app().await;
    let (partner, live) = app
        .partner_with_key(
            json!({ "tier": "gold", "low_balance_threshold_cents": 2500 }),
            "live",
        )
        .await;
    let sandbox = app
        .issue_key(
            partner["id"].as_str().unwrap(),
            json!({ "mode": "sandbox" }),
        )
        .await;

    let (status, balance) = read(
        app.as_partner(live["secret"].as_str().unwrap(), Method::GET, "/balance")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        balance,
        json!({ "object": "balance", "balance_cents": 0, "currency": "USD", "tier": "gold",
                "discount_bps": 1500, "low_balance_threshold_cents": 2500, "mode": "live" })
    );

    let (_, balance) = read(
        app.as_partner(sandbox["secret"].as_str().unwrap(), Method::GET, "/balance")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(balance["balance_cents"], 10_000_000);
    assert_eq!(balance["mode"], "sandbox");

    app.operator(
        Method::PATCH,
        &format!("/partners/{}", partner["id"].as_str().unwrap()),
    )
    .json(&json!({ "discount_override_bps": 2200 }))
    .send()
    .await
    .unwrap();
    let (_, balance) = read(
        app.as_partner(live["secret"].as_str().unwrap(), Method::GET, "/balance")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        balance["discount_bps"], 2200,
        "the override supersedes the tier"
    );
}

/// Reads of the balance asked at the same moment share one query where
/// there is no inline reader (PostgreSQL): none may answer from a query that
/// began before its request, so each order's debit shows in the balance read
/// right after its 202, while other partners' reads keep the rounds busy.
#[tokio::test]
async fn a_balance_read_after_an_accepted_order_shows_its_debit_while_other_reads_crowd_it() {
    let app = spawn_app_with(&[
        ("rate_limit.bands.sandbox.read.limit", "1000000"),
        ("rate_limit.bands.sandbox.write.limit", "1000000"),
    ])
    .await;
    let stop = AtomicBool::new(false);
    let mut crowd = Vec::new();
    for name in ["Crowd A", "Crowd B", "Crowd C"] {
        let (_, key) = app
            .partner_with_key(json!({ "name": name }), "sandbox")
            .await;
        let secret = key["secret"].as_str().unwrap().to_owned();
        let expected = balance(&app, &secret).await;
        for _ in 0..4 {
            let (app, stop, secret) = (&app, &stop, secret.clone());
            crowd.push(async move {
                let mut reads = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    let seen = balance(app, &secret).await;
                    assert_eq!(seen, expected, "another partner's float");
                    reads += 1;
                }
                reads
            });
        }
    }

    let (_, key) = app
        .partner_with_key(json!({ "name": "Buyer" }), "sandbox")
        .await;
    let buyer = async {
        let secret = key["secret"].as_str().unwrap();
        let mut expected = balance(&app, secret).await;
        for n in 0..20 {
            let (status, order) = post_order(
                &app,
                secret,
                &format!("crowded-order-{n:04}"),
                &json!({ "plan_id": "pl_fr_1gb_7d", "quantity": 1 }),
            )
            .await;
            assert_eq!(status, StatusCode::ACCEPTED, "{order}");
            expected -= order["total_cents"].as_i64().unwrap();
            assert_eq!(
                balance(&app, secret).await,
                expected,
                "the debit of order {n}"
            );
        }

        stop.store(true, Ordering::Relaxed);
    };
    // One task: the crowd's requests and the buyer's interleave at the
    // server, which answers each in a task of its own.
    let ((), reads) = tokio::join!(buyer, futures::future::join_all(crowd));
    assert!(
        reads.iter().all(|&n| n > 0),
        "every crowd reader read: {reads:?}"
    );
}
