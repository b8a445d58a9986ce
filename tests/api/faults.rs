//! The database going away under a running node: health says so, orders are
//! refused with a 5xx and nothing is charged, and the node recovers by itself
//! once the database is back. The database is reached through a TCP proxy
//! the test can cut, so this runs on PostgreSQL (`TEST_DATABASE_URL`).

use std::{sync::Arc, time::Duration};

use reqwest::Method;
use serde_json::{Value, json};
use tokio::{
    net::{TcpListener, TcpStream},
    sync::watch,
    task::JoinSet,
};

use crate::helpers::{TestApp, balance, eventually, fund, read, spawn_app, spawn_node};

/// A TCP proxy to the database that can be cut (every connection closed,
/// new ones refused) and restored.
struct Proxy {
    addr: String,
    up: Arc<watch::Sender<bool>>,
}

impl Proxy {
    async fn start(upstream: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (up, _) = watch::channel(true);
        let up = Arc::new(up);
        let control = up.clone();
        tokio::spawn(async move {
            let mut connections = JoinSet::new();
            let mut state = control.subscribe();
            loop {
                tokio::select! {
                    accepted = listener.accept() => {
                        let Ok((mut client, _)) = accepted else { continue };
                        if !*control.borrow() {
                            drop(client); // down: refuse by closing at once
                            continue;
                        }
                        let upstream = upstream.clone();
                        connections.spawn(async move {
                            if let Ok(mut server) = TcpStream::connect(&upstream).await {
                                let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                            }
                        });
                    }
                    changed = state.changed() => {
                        if changed.is_err() { break; }
                        if !*state.borrow() {
                            connections.abort_all(); // cut every open connection
                        }
                    }
                }
            }
        });
        Self { addr, up }
    }

    fn cut(&self) {
        self.up.send_replace(false);
    }

    fn restore(&self) {
        self.up.send_replace(true);
    }
}

/// `host:port` of a `postgres://user@host:port/db` URL.
fn host_port(url: &str) -> String {
    let rest = url.split_once('@').map_or(url, |(_, rest)| rest);
    rest.split('/').next().unwrap().to_owned()
}

async fn health(node: &TestApp) -> (u16, Value) {
    let (status, body) = read(node.partner(Method::GET, "/health").send().await.unwrap()).await;
    (status.as_u16(), body)
}

async fn order(node: &TestApp, secret: &str, key: &str) -> (u16, Value) {
    let response = node
        .as_partner(secret, Method::POST, "/orders")
        .header("Idempotency-Key", key)
        .json(&json!({ "plan_id": "pl_fr_1gb_7d", "quantity": 1 }))
        .send()
        .await
        .unwrap();
    let (status, body) = read(response).await;
    (status.as_u16(), body)
}

#[tokio::test]
async fn a_lost_database_degrades_health_refuses_orders_uncharged_and_heals_without_a_restart() {
    if std::env::var("TEST_DATABASE_URL").map_or(true, |u| u.is_empty()) {
        eprintln!("skipped: needs PostgreSQL (TEST_DATABASE_URL)");
        return;
    }
    // The first node owns the fresh database; the node under test reaches
    // the same database through the proxy.
    let owner = spawn_app().await;
    let upstream = host_port(&owner.database_url);
    let proxy = Proxy::start(upstream.clone()).await;
    let proxied = owner.database_url.replacen(&upstream, &proxy.addr, 1);
    let node = spawn_node(
        &proxied,
        &[
            ("database.probe_timeout_ms", "500"),
            ("simulators.supplier_latency_ms", "0"),
            ("supplier.poll_interval_ms", "20"),
        ],
    )
    .await;

    let (partner, key) = node.partner_with_key(json!({}), "live").await;
    let secret = key["secret"].as_str().unwrap().to_owned();
    let partner_id = partner["id"].as_str().unwrap();
    fund(&node, partner_id, 100_000).await;
    let (status, first) = order(&node, &secret, "fault-order-0000000001").await;
    assert_eq!(status, 202, "{first}");
    let price = first["total_cents"].as_i64().unwrap();
    assert_eq!(balance(&node, &secret).await, 100_000 - price);

    proxy.cut();
    let down = eventually(
        "health reports the database down",
        Duration::from_secs(30),
        || async {
            let (status, body) = health(&node).await;
            (status == 503).then_some(body)
        },
    )
    .await;
    assert_eq!(down["status"], "degraded");
    assert_eq!(down["database"], "down");

    let (status, refused) = order(&node, &secret, "fault-order-0000000002").await;
    assert!(
        (500..600).contains(&status),
        "an order without a database must be a 5xx: {status} {refused}"
    );
    assert!(refused["error"]["code"].is_string(), "{refused}");

    proxy.restore();
    eventually("health recovers", Duration::from_secs(30), || async {
        (health(&node).await.0 == 200).then_some(())
    })
    .await;
    // The partner retries the refused order with the same key, as told to.
    let retried = eventually(
        "the retried order is accepted",
        Duration::from_secs(30),
        || async {
            let (status, body) = order(&node, &secret, "fault-order-0000000002").await;
            matches!(status, 200 | 202).then_some(body)
        },
    )
    .await;
    assert_eq!(retried["object"], "order", "{retried}");
    // Exactly two orders were charged, whatever happened during the outage.
    assert_eq!(balance(&node, &secret).await, 100_000 - 2 * price);
    assert_eq!(balance(&owner, &secret).await, 100_000 - 2 * price);
}
