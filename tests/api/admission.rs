//! Admission: live orders beyond what the supplier can deliver in time are
//! refused at once with 502 `supplier_error` and `Retry-After`, uncharged and
//! with the key left usable; the room is shared equally among the partners
//! asking; every node counts the backlog of the others; sandbox orders are
//! not limited; operators see it all.
//!
//! The supplier here takes 2 calls per second and admission starts from one
//! unit per call, so with a 3-second horizon the backlog may hold 6 units.

use std::time::Duration;

use futures::future::join_all;
use reqwest::{Method, StatusCode, header};
use serde_json::{Value, json};

use crate::helpers::{TestApp, eventually, fund, read, spawn_app_with, spawn_node};

const PLAN: &str = "pl_fr_1gb_7d";
const ROOM: usize = 6;

/// A supplier of 2 calls per second; admission reads the backlog every 100 ms.
const SLOW_SUPPLIER: &[(&str, &str)] = &[
    ("supplier.requests_per_second", "2"),
    ("simulators.supplier_rate_limit", "2"),
    ("simulators.supplier_latency_ms", "0"),
    ("supplier.batch_size", "4"),
    ("supplier.poll_interval_ms", "100"),
    ("admission.horizon_seconds", "3"),
    ("admission.refresh_ms", "100"),
    ("rate_limit.bands.gold.write.limit", "100000"),
    ("rate_limit.bands.gold.read.limit", "100000"),
    ("rate_limit.bands.sandbox.write.limit", "100000"),
];

async fn slow_supplier() -> TestApp {
    spawn_app_with(SLOW_SUPPLIER).await
}

/// A funded gold partner with a live and a sandbox key: (id, live, sandbox).
async fn gold_partner(app: &TestApp) -> (String, String, String) {
    let (partner, live) = app
        .partner_with_key(json!({ "tier": "gold" }), "live")
        .await;
    let id = partner["id"].as_str().unwrap().to_owned();
    fund(app, &id, 1_000_000).await;
    let sandbox = app.issue_key(&id, json!({ "mode": "sandbox" })).await;
    (
        id,
        live["secret"].as_str().unwrap().to_owned(),
        sandbox["secret"].as_str().unwrap().to_owned(),
    )
}

/// One order answer: status, `Retry-After` and body.
async fn order(app: &TestApp, secret: &str, key: &str) -> (StatusCode, Option<u32>, Value) {
    let response = app
        .as_partner(secret, Method::POST, "/orders")
        .header("Idempotency-Key", key)
        .json(&json!({ "plan_id": PLAN }))
        .send()
        .await
        .unwrap();
    let retry_after = response
        .headers()
        .get(header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    let (status, body) = read(response).await;
    (status, retry_after, body)
}

/// Waits until each of `orders` completed, none failed or refunded.
async fn delivered_in_full(app: &TestApp, secret: &str, orders: &[String], within: Duration) {
    for id in orders {
        eventually(&format!("order {id} completes"), within, || async {
            let (_, body) = read(
                app.as_partner(secret, Method::GET, &format!("/orders/{id}"))
                    .send()
                    .await
                    .unwrap(),
            )
            .await;
            assert_ne!(body["status"], "failed", "{body}");
            (body["status"] == "completed").then(|| assert_eq!(body["refunded_cents"], 0, "{body}"))
        })
        .await;
    }
}

/// What `GET /operator/v1/admission` answers.
async fn admission_view(app: &TestApp) -> (StatusCode, Value) {
    read(
        app.operator(Method::GET, "/admission")
            .send()
            .await
            .unwrap(),
    )
    .await
}

async fn live_balance(app: &TestApp, secret: &str) -> i64 {
    let (_, body) = read(
        app.as_partner(secret, Method::GET, "/balance")
            .send()
            .await
            .unwrap(),
    )
    .await;
    body["balance_cents"].as_i64().unwrap()
}

#[tokio::test]
async fn a_burst_beyond_capacity_is_refused_at_once_uncharged_and_retried_with_the_same_key() {
    // The supplier allocates 2 s after a placement, so no unit of the burst
    // is delivered (freeing room) before the whole burst is answered, however
    // slowly the machine answers it.
    let held: Vec<(&str, &str)> = SLOW_SUPPLIER
        .iter()
        .copied()
        .filter(|(key, _)| *key != "simulators.supplier_latency_ms")
        .chain([("simulators.supplier_latency_ms", "2000")])
        .collect();
    let app = spawn_app_with(&held).await;
    let (_, live, sandbox) = gold_partner(&app).await;
    let before = live_balance(&app, &live).await;

    let keys: Vec<String> = (0..12).map(|n| format!("admission-burst-{n:04}")).collect();
    let answers = join_all(keys.iter().map(|key| order(&app, &live, key))).await;
    let mut accepted = Vec::new();
    let mut refused = Vec::new();
    let mut charged = 0;
    for (key, (status, retry_after, body)) in keys.iter().zip(answers) {
        match status {
            StatusCode::ACCEPTED => {
                charged += body["total_cents"].as_i64().unwrap();
                accepted.push(body["id"].as_str().unwrap().to_owned());
            }
            StatusCode::BAD_GATEWAY => {
                assert_eq!(body["error"]["code"], "supplier_error", "{body}");
                let seconds = retry_after.expect("a refusal says when to retry");
                assert!((1..=3).contains(&seconds), "Retry-After {seconds}");
                assert_eq!(body["error"]["retry_after_seconds"], seconds, "{body}");
                refused.push(key.clone());
            }
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert_eq!(accepted.len(), ROOM, "the room holds {ROOM} units");
    assert_eq!(refused.len(), 12 - ROOM);
    assert_eq!(
        live_balance(&app, &live).await,
        before - charged,
        "refusals are not charged"
    );

    // Sandbox orders do not reach the supplier: never limited.
    let sandbox_answers = join_all((0..12).map(|n| {
        let key = format!("admission-sandbox-{n:04}");
        let app = &app;
        let sandbox = sandbox.as_str();
        async move { order(app, sandbox, &key).await.0 }
    }))
    .await;
    assert!(
        sandbox_answers.iter().all(|s| *s == StatusCode::ACCEPTED),
        "{sandbox_answers:?}"
    );

    // The refused keys are not bound: each one is accepted once the backlog drains.
    for key in &refused {
        let id = eventually(
            &format!("{key} admitted on retry"),
            Duration::from_secs(60),
            || async {
                let (status, _, body) = order(&app, &live, key).await;
                (status == StatusCode::ACCEPTED).then(|| body["id"].as_str().unwrap().to_owned())
            },
        )
        .await;
        accepted.push(id);
    }
    // Every accepted order is delivered in full: nothing refunded.
    delivered_in_full(&app, &live, &accepted, Duration::from_secs(60)).await;

    // Operators see the refusals, in the view and in the metrics.
    let (status, view) = admission_view(&app).await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!(view["enabled"], true, "{view}");
    assert_eq!(view["supplier_calls_per_second"], 2, "{view}");
    let refusals: u64 = view["refusals"]
        .as_object()
        .unwrap()
        .values()
        .map(|n| n.as_u64().unwrap())
        .sum();
    assert!(refusals >= (12 - ROOM) as u64, "{view}");
    let metrics = app.metrics().await;
    assert!(
        metrics.contains("esim_admission_refusals_total{reason="),
        "{metrics}"
    );
    assert!(metrics.contains("esim_admission_capacity_units_per_second"));
}

#[tokio::test]
async fn equal_partners_asking_in_turn_share_the_room() {
    let app = slow_supplier().await;
    let (a_id, a, _) = gold_partner(&app).await;
    let (b_id, b, _) = gold_partner(&app).await;
    let mut held = [0usize; 2];
    for n in 0..8 {
        for (p, secret) in [&a, &b].into_iter().enumerate() {
            let (status, _, body) =
                order(&app, secret, &format!("admission-share-{p}-{n:04}")).await;
            match status {
                StatusCode::ACCEPTED => held[p] += 1,
                StatusCode::BAD_GATEWAY => {}
                other => panic!("unexpected {other}: {body}"),
            }
        }
    }
    assert!(held[0].abs_diff(held[1]) <= 1, "equal shares: {held:?}");
    assert!(
        held.iter().all(|h| *h >= ROOM / 2 - 1),
        "each got about half: {held:?}"
    );

    let view = admission_view(&app).await.1;
    let partners = view["partners"].as_array().unwrap();
    for id in [&a_id, &b_id] {
        let row = partners
            .iter()
            .find(|p| p["partner_id"] == id.as_str())
            .unwrap_or_else(|| panic!("{id} is listed: {view}"));
        assert_eq!(row["share_units"], (ROOM / 2) as u64, "{view}");
    }
}

#[tokio::test]
async fn every_node_counts_the_backlog_of_the_others() {
    // Node one provisions nothing, so its orders stay in the backlog.
    let mut overrides: Vec<(&str, &str)> = SLOW_SUPPLIER.to_vec();
    overrides.push(("provisioning.enabled", "false"));
    let one = spawn_app_with(&overrides).await;
    let two = spawn_node(&one.database_url, &overrides).await;
    let (_, secret, _) = gold_partner(&one).await;
    let keys: Vec<String> = (0..ROOM)
        .map(|n| format!("admission-node-one-{n:04}"))
        .collect();
    for (status, _, body) in join_all(keys.iter().map(|key| order(&one, &secret, key))).await {
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    }
    // Node two reads the backlog from the database: the room is full there too.
    eventually(
        "node two sees node one's backlog",
        Duration::from_secs(10),
        || async {
            let view = admission_view(&two).await.1;
            (view["backlog_units"] == ROOM as u64).then_some(())
        },
    )
    .await;
    let (status, retry_after, body) = order(&two, &secret, "admission-node-two-0001").await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{body}");
    assert!(retry_after.is_some(), "{body}");
}

/// A supplier with no limit that takes two seconds to answer each order
/// (Airalo answers with the profiles): with one unit an order and at most
/// 64 placements at a time, this service settles about 32 units a second.
/// No supplier limit bounds the backlog; only what it settles can.
const SLOW_ANSWERS: &[(&str, &str)] = &[
    ("suppliers.route", "airalo"),
    ("airalo.requests_per_second", "0"),
    ("airalo.timeout_ms", "10000"),
    ("simulators.airalo_rate_limit_per_minute", "0"),
    ("simulators.airalo_latency_ms", "2000"),
    ("supplier.batch_size", "1"),
    ("admission.horizon_seconds", "3"),
    ("admission.refresh_ms", "100"),
    ("rate_limit.bands.gold.write.limit", "100000"),
    ("rate_limit.bands.gold.read.limit", "100000"),
];

/// Orders asked for faster than the fleet settles them are accepted until
/// it has been behind for a few seconds; then they are refused at once at
/// what it settles, naming provisioning, uncharged, while everything
/// accepted is delivered in full.
#[tokio::test]
async fn settling_that_falls_behind_refuses_at_acceptance_and_delivers_what_it_took() {
    let app = spawn_app_with(SLOW_ANSWERS).await;
    let (_, live, _) = gold_partner(&app).await;
    let mut accepted = Vec::new();
    let mut charged = 0;
    let before = live_balance(&app, &live).await;
    // 50 orders a second: more than it settles.
    let mut pace = tokio::time::interval(Duration::from_millis(20));
    let asked_until = tokio::time::Instant::now() + Duration::from_secs(60);
    let (retry_after, refusal) = loop {
        pace.tick().await;
        assert!(
            tokio::time::Instant::now() < asked_until,
            "no refusal after {} orders",
            accepted.len()
        );
        let key = format!("admission-settling-{:05}", accepted.len());
        let (status, retry_after, body) = order(&app, &live, &key).await;
        match status {
            StatusCode::ACCEPTED => {
                charged += body["total_cents"].as_i64().unwrap();
                accepted.push(body["id"].as_str().unwrap().to_owned());
            }
            StatusCode::BAD_GATEWAY => break (retry_after, body),
            other => panic!("unexpected {other}: {body}"),
        }
    };
    assert_eq!(refusal["error"]["code"], "supplier_error", "{refusal}");
    let message = refusal["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("Provisioning cannot deliver"),
        "{message}"
    );
    let seconds = retry_after.expect("a refusal says when to retry");
    assert!((1..=3).contains(&seconds), "Retry-After {seconds}");
    assert_eq!(live_balance(&app, &live).await, before - charged);

    let view = admission_view(&app).await.1;
    assert_eq!(view["bound_by"], "settling", "{view}");
    let settling = view["settling_units_per_second"].as_f64().unwrap();
    assert!(settling > 0.0 && settling < 50.0, "{view}");
    assert!(
        view["refusals"]["settling"].as_u64().unwrap() >= 1,
        "{view}"
    );

    // Everything accepted is delivered in full: nothing refunded.
    delivered_in_full(&app, &live, &accepted, Duration::from_secs(90)).await;
    let metrics = app.metrics().await;
    assert!(
        metrics.contains("esim_admission_refusals_total{reason=\"settling\"}"),
        "{metrics}"
    );
    assert!(metrics.contains("esim_admission_settling_units_per_second"));
}
