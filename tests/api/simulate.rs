//! `esim-reseller simulate`: the simulators alone in their own process, and
//! a node buying from them there as it would from the real services.

use std::{process::Stdio, time::Duration};

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;

use crate::helpers::{eventually, fund, live_partner, post_order, read, spawn_app_with};

/// Starts `simulate` on a free port; answers the process and its base URL.
async fn simulate() -> (tokio::process::Child, String) {
    esim_reseller::install_tls_provider();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_esim-reseller"))
        .args(["simulate", "--callbacks-to", "http://127.0.0.1:9"])
        .env(
            "ESIM_CONFIG_DIR",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config"),
        )
        .env("ESIM__SIMULATORS__ADDR", "127.0.0.1:0")
        .env("ESIM__SIMULATORS__SUPPLIER_LATENCY_MS", "0")
        .env("ESIM__LOG__FORMAT", "json")
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start simulate");
    let mut lines = tokio::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    let addr = tokio::time::timeout(Duration::from_secs(30), async {
        while let Ok(Some(line)) = lines.next_line().await {
            let json: Value = serde_json::from_str(&line).unwrap_or_default();
            if json["message"] == "listening" && json["listener"] == "simulators" {
                return json["addr"].as_str().map(str::to_owned);
            }
        }
        None
    })
    .await
    .ok()
    .flatten()
    .expect("simulate says where it listens");
    (child, format!("http://{addr}"))
}

#[tokio::test]
async fn a_node_buys_from_the_simulators_running_in_their_own_process() {
    let (mut sims, base) = simulate().await;
    let (status, health) = read(reqwest::get(format!("{base}/sim/health")).await.unwrap()).await;
    assert_eq!(status, StatusCode::OK, "{health}");
    let app = spawn_app_with(&[("supplier.base_url", base.as_str())]).await;
    let (partner_id, secret) = live_partner(&app).await;
    fund(&app, &partner_id, 10_000).await;
    let (status, order) = post_order(
        &app,
        &secret,
        "simulate-process-order-1",
        &json!({ "plan_id": "pl_fr_1gb_7d", "quantity": 2 }),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{order}");
    let id = order["id"].as_str().unwrap().to_owned();
    eventually("the order completes", Duration::from_secs(30), || async {
        let (_, order) = read(
            app.as_partner(&secret, Method::GET, &format!("/orders/{id}"))
                .send()
                .await
                .unwrap(),
        )
        .await;
        (order["status"] == "completed").then_some(())
    })
    .await;
    let (_, stats) = read(
        reqwest::get(format!("{base}/sim/supplier/stats"))
            .await
            .unwrap(),
    )
    .await;
    assert!(
        stats["orders"].as_u64().unwrap() >= 1,
        "the outside simulator sold it: {stats}"
    );
    sims.start_kill().unwrap();
}
