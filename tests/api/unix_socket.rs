//! A node on PostgreSQL's own host reaches it through its Unix socket
//! (`?host=<folder>` in `database.url`, docs/configuration.md), and the
//! order path runs over it.
//!
//! Runs when `TEST_DATABASE_URL` points at PostgreSQL and `TEST_PG_SOCKET`
//! names the folder of its socket (`.ci/run` sets it when one answers there
//! with the same user).

use std::time::Duration;

use reqwest::StatusCode;
use sea_orm::{ConnectionTrait, DbBackend, Statement};
use serde_json::json;

use crate::helpers::{
    balance, eventually, fund, get, live_partner, post_order, spawn_app, spawn_node,
};

/// The folder of PostgreSQL's Unix socket, when this run is to use it.
fn socket_folder() -> Option<String> {
    let on_postgres = std::env::var("TEST_DATABASE_URL").is_ok_and(|url| !url.is_empty());
    let folder = std::env::var("TEST_PG_SOCKET")
        .ok()
        .filter(|f| !f.is_empty())?;
    on_postgres.then_some(folder)
}

#[tokio::test]
async fn a_node_on_the_database_host_orders_through_its_unix_socket() {
    let Some(folder) = socket_folder() else {
        eprintln!("skipped: needs PostgreSQL and its socket folder (TEST_PG_SOCKET)");
        return;
    };
    // The first node makes the database over TCP and owns it; the second
    // names the same database and the socket's folder.
    let first = spawn_app().await;
    let url = format!("{}?host={folder}", first.database_url);
    let node = spawn_node(&url, &[]).await;

    // PostgreSQL shows no client port (-1) for a connection over its socket.
    let row = node
        .db
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT client_port FROM pg_stat_activity WHERE pid = pg_backend_pid()",
        ))
        .await
        .unwrap()
        .unwrap();
    let port: i32 = row.try_get_by_index(0).unwrap();
    assert_eq!(port, -1, "the node's pool connects over the socket");

    let (partner_id, secret) = live_partner(&node).await;
    fund(&node, &partner_id, 10_000).await;
    let body = json!({ "plan_id": "pl_fr_1gb_7d", "quantity": 1 });
    let (status, order) = post_order(&node, &secret, "unix-socket-order-0001", &body).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{order}");
    let path = format!("/orders/{}", order["id"].as_str().unwrap());
    let done = eventually("the order completes", Duration::from_secs(30), || async {
        let (_, order) = get(&node, &secret, &path).await;
        (order["status"] == "completed").then_some(order)
    })
    .await;
    assert_eq!(done["esims"].as_array().map(Vec::len), Some(1), "{done}");
    assert_eq!(
        balance(&node, &secret).await,
        10_000 - done["total_cents"].as_i64().unwrap()
    );
}
