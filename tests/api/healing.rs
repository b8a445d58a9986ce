//! Crash healing and production safety: a restarted node takes its claims
//! back at once, claims of a dead node are taken over without waiting out
//! their lease, a failed provisioning actor loses no order, a stopped node
//! says so, and outside development the service refuses the public
//! development secrets and guards `/metrics`.

use std::time::Duration;

use chrono::Utc;
use entities::{node, order};
use reqwest::{Method, StatusCode};
use sea_orm::{ActiveModelTrait, ColumnTrait, EntityTrait, QueryFilter, Set};
use serde_json::{Value, json};

use crate::helpers::{
    OPERATOR_TOKEN, ServeProcess, TestApp, eventually, fund, live_partner, read, spawn_app_with,
    spawn_node,
};

const PLAN: &str = "pl_fr_1gb_7d";

/// Places a one-unit order and returns its id.
async fn place(app: &TestApp, secret: &str, key: &str) -> String {
    let (status, body) = read(
        app.as_partner(secret, Method::POST, "/orders")
            .header("Idempotency-Key", key)
            .json(&json!({ "plan_id": PLAN }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    body["id"].as_str().unwrap().to_owned()
}

/// Waits until the order is completed (its profile delivered).
async fn completed(app: &TestApp, secret: &str, order_id: &str, within: Duration) {
    eventually(&format!("order {order_id} completes"), within, || async {
        let (_, body) = read(
            app.as_partner(secret, Method::GET, &format!("/orders/{order_id}"))
                .send()
                .await
                .unwrap(),
        )
        .await;
        (body["status"] == "completed").then_some(())
    })
    .await;
}

/// Marks an order as held by `holder` for an hour, as a node that died
/// while provisioning it leaves it.
async fn hold(app: &TestApp, order_id: &str, holder: &str) {
    let mut row: order::ActiveModel = order::Entity::find_by_id(order_id.to_owned())
        .one(&app.db)
        .await
        .unwrap()
        .expect("the order is stored")
        .into();
    row.claimed_by = Set(Some(holder.to_owned()));
    row.claimed_until = Set(Some(Utc::now() + chrono::Duration::hours(1)));
    row.update(&app.db).await.unwrap();
}

/// A node that accepts orders but does not provision them, with one
/// accepted order left `processing`: (node, secret, order id).
async fn one_order_left_processing() -> (TestApp, String, String) {
    let app = spawn_app_with(&[("provisioning.enabled", "false")]).await;
    let (partner_id, secret) = live_partner(&app).await;
    fund(&app, &partner_id, 100_000).await;
    let order_id = place(&app, &secret, "healing-order-0001").await;
    (app, secret, order_id)
}

#[tokio::test]
async fn a_restarted_node_takes_back_its_own_claims_at_once() {
    let (app, secret, order_id) = one_order_left_processing().await;
    hold(&app, &order_id, "node-b").await;
    // The same node comes back: its claim still has an hour to run and the
    // reconciler would not pass for an hour either.
    let node_b = spawn_node(
        &app.database_url,
        &[
            ("node.id", "node-b"),
            ("reconciler.interval_seconds", "3600"),
            ("simulators.supplier_latency_ms", "0"),
        ],
    )
    .await;
    completed(&node_b, &secret, &order_id, Duration::from_secs(30)).await;
}

#[tokio::test]
async fn claims_of_a_dead_node_are_taken_over_without_waiting_out_the_lease() {
    let (app, secret, order_id) = one_order_left_processing().await;
    hold(&app, &order_id, "node-dead").await;
    let long_ago = Utc::now() - chrono::Duration::minutes(10);
    node::ActiveModel::from(node::Model {
        id: "node-dead".into(),
        started_at: long_ago,
        heartbeat_at: long_ago,
        stopped_at: None,
    })
    .insert(&app.db)
    .await
    .unwrap();
    let other = spawn_node(
        &app.database_url,
        &[
            ("node.id", "node-other"),
            ("reconciler.interval_seconds", "1"),
            ("reconciler.grace_seconds", "0"),
            ("simulators.supplier_latency_ms", "0"),
        ],
    )
    .await;
    completed(&other, &secret, &order_id, Duration::from_secs(30)).await;
}

#[tokio::test]
async fn a_live_holder_keeps_its_claim_and_a_quiet_or_stopped_one_loses_it() {
    let (app, _secret, order_id) = one_order_left_processing().await;
    hold(&app, &order_id, "node-holder").await;
    let now = Utc::now();
    let alive_since = now - chrono::Duration::seconds(15);
    let claim = || {
        esim_reseller::store::orders::claim(
            &app.db,
            &order_id,
            "node-taker",
            now,
            now + chrono::Duration::seconds(30),
            alive_since,
        )
    };
    esim_reseller::store::nodes::beat(&app.db, "node-holder", now, now)
        .await
        .unwrap();
    assert!(!claim().await.unwrap(), "the holder beats: its claim holds");
    esim_reseller::store::nodes::stopped(&app.db, "node-holder", now)
        .await
        .unwrap();
    assert!(
        claim().await.unwrap(),
        "the holder stopped: its claim is free"
    );
    hold(&app, &order_id, "node-holder").await;
    let quiet = now - chrono::Duration::minutes(1);
    esim_reseller::store::nodes::beat(&app.db, "node-holder", quiet, quiet)
        .await
        .unwrap();
    assert!(claim().await.unwrap(), "the holder went quiet: taken over");
}

#[tokio::test]
async fn a_stopped_node_records_its_stop() {
    let mut app = spawn_app_with(&[("node.id", "node-stopping")]).await;
    let db = app.db.clone();
    let running = node::Entity::find_by_id("node-stopping".to_owned())
        .one(&db)
        .await
        .unwrap()
        .expect("a node records itself at start");
    assert!(running.stopped_at.is_none());
    app.stop().await.unwrap();
    // The service closed its own pool; read through a fresh one.
    let db = sea_orm::Database::connect(app.database_url.as_str())
        .await
        .unwrap();
    let stopped = node::Entity::find()
        .filter(node::Column::Id.eq("node-stopping"))
        .one(&db)
        .await
        .unwrap()
        .unwrap();
    assert!(stopped.stopped_at.is_some(), "{stopped:?}");
}

#[tokio::test]
async fn orders_survive_provisioning_failures_and_operators_see_each_restart() {
    const TOKEN: &str = "healing-operator-token";
    let serve = ServeProcess::start(&[
        ("ESIM__OPERATOR__TOKEN", TOKEN),
        ("ESIM__OPERATOR__FAULT_INJECTION", "true"),
        ("ESIM__LOG__LEVEL", "info"),
        ("ESIM__SIMULATORS__SUPPLIER_LATENCY_MS", "50"),
        ("ESIM__RECONCILER__INTERVAL_SECONDS", "3600"),
    ])
    .await;
    let client = reqwest::Client::new();
    let (partner, key) = serve.live_partner(TOKEN).await;
    let partner_id = partner["id"].as_str().unwrap();
    let secret = key["secret"].as_str().unwrap().to_owned();
    serve.fund(TOKEN, partner_id, 1_000_000).await;
    let mut order_ids = Vec::new();
    for round in 0..3 {
        // Three orders of three units a round: inside a bronze write window.
        for n in 0..3 {
            let answer: Value = client
                .post(format!("http://{}/partner/v1/orders", serve.public))
                .bearer_auth(&secret)
                .header(
                    "Idempotency-Key",
                    format!("healing-order-{round}-{n}-000000"),
                )
                .json(&json!({ "plan_id": PLAN, "quantity": 3 }))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let id = answer["id"].as_str();
            order_ids.push(
                id.unwrap_or_else(|| panic!("not accepted: {answer}"))
                    .to_owned(),
            );
        }
        let failed = serve
            .operator_call(TOKEN, Method::POST, "/actors/provisioning/fail", json!({}))
            .await;
        assert_eq!(failed["injected"], "failure", "{failed}");
        let restarts = round + 1;
        eventually("provisioning restarts", Duration::from_secs(20), || {
            let lines = serve.lines();
            async move {
                let seen = lines
                    .iter()
                    .filter(|l| l.contains("\"provisioning\"") && l.contains("\"restarted\""))
                    .count();
                (seen >= restarts).then_some(())
            }
        })
        .await;
    }
    for order_id in &order_ids {
        eventually(
            &format!("order {order_id} completes"),
            Duration::from_secs(60),
            || async {
                let body: Value = client
                    .get(format!(
                        "http://{}/partner/v1/orders/{order_id}",
                        serve.public
                    ))
                    .bearer_auth(&secret)
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                (body["status"] == "completed").then_some(())
            },
        )
        .await;
    }
    let lines = serve.terminate().await;
    let failure = lines
        .iter()
        .find(|l| l.contains("\"provisioning\"") && l.contains("\"failed\""))
        .expect("the failure is logged");
    assert!(
        failure.contains("failure injected by the operator"),
        "{failure}"
    );
}

#[tokio::test]
async fn serve_refuses_development_secrets_outside_development_and_names_each() {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_esim-reseller"))
        .args(["config", "check"])
        .env("ESIM__SIMULATORS__ENABLED", "false")
        .env("ESIM__SUPPLIER__BASE_URL", "https://supplier.example")
        .env("ESIM__PAYMENTS__BASE_URL", "https://btcpay.example")
        .env(
            "ESIM__CURSOR__SECRET",
            "a-cursor-secret-of-our-own-0123456789",
        )
        .env(
            "ESIM_CONFIG_DIR",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config"),
        )
        .output()
        .await
        .unwrap();
    let printed = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{printed}");
    for named in [
        "ESIM__OPERATOR__TOKEN",
        "ESIM__PAYMENTS__WEBHOOK_SECRET",
        "ESIM__PAYMENTS__API_KEY",
        "ESIM__SUPPLIER__SECRET",
        "ESIM__SUPPLIER__ACCESS_CODE",
    ] {
        assert!(printed.contains(named), "{named} missing from:\n{printed}");
    }
    assert!(
        !printed.contains("CURSOR"),
        "a changed secret is not named:\n{printed}"
    );
    let serve = tokio::process::Command::new(env!("CARGO_BIN_EXE_esim-reseller"))
        .arg("serve")
        .env("ESIM__SIMULATORS__ENABLED", "false")
        .env("ESIM__SUPPLIER__BASE_URL", "https://supplier.example")
        .env("ESIM__HTTP__PUBLIC_ADDR", "127.0.0.1:0")
        .env("ESIM__HTTP__OPERATOR_ADDR", "127.0.0.1:0")
        .env(
            "ESIM_CONFIG_DIR",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config"),
        )
        .output()
        .await
        .unwrap();
    let said = String::from_utf8_lossy(&serve.stderr);
    assert!(!serve.status.success(), "serve must refuse: {said}");
    assert!(said.contains("ESIM__OPERATOR__TOKEN"), "{said}");
    assert!(said.contains("the simulators are off"), "{said}");
    assert!(
        !said.contains("ESIM__AIRALO"),
        "Airalo is not used, its credentials are not asked for: {said}"
    );
}

#[tokio::test]
async fn serve_refuses_the_airalo_simulator_credentials_where_airalo_is_used() {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_esim-reseller"))
        .args(["config", "check"])
        .env("ESIM__SIMULATORS__ENABLED", "false")
        .env("ESIM__SUPPLIER__BASE_URL", "https://supplier.example")
        .env("ESIM__AIRALO__BASE_URL", "https://airalo.example/v2")
        .env("ESIM__SUPPLIERS__ROUTE", "esim_access,airalo")
        .env(
            "ESIM_CONFIG_DIR",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config"),
        )
        .output()
        .await
        .unwrap();
    let printed = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{printed}");
    for named in ["ESIM__AIRALO__CLIENT_ID", "ESIM__AIRALO__CLIENT_SECRET"] {
        assert!(printed.contains(named), "{named} missing from:\n{printed}");
    }
}

#[tokio::test]
async fn metrics_can_require_the_operator_token() {
    let app = spawn_app_with(&[("operator.metrics_require_token", "true")]).await;
    let bare = app
        .client
        .get(format!("{}/metrics", app.operator))
        .send()
        .await
        .unwrap();
    assert_eq!(bare.status(), StatusCode::UNAUTHORIZED);
    let with_token = app
        .client
        .get(format!("{}/metrics", app.operator))
        .bearer_auth(OPERATOR_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(with_token.status(), StatusCode::OK);
    let open = spawn_app_with(&[]).await;
    let development = open
        .client
        .get(format!("{}/metrics", open.operator))
        .send()
        .await
        .unwrap();
    assert_eq!(
        development.status(),
        StatusCode::OK,
        "development keeps /metrics open"
    );
}
