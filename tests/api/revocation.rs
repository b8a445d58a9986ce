//! Key and account changes reach every node at once (PostgreSQL): a key
//! revoked or an account suspended on one node is refused by the others
//! although their key caches would keep it for an hour, and a node whose
//! listening connection is cut still learns of changes made meanwhile.
//!
//! On SQLite (one node per file) there is nothing to announce to; these
//! tests run when `TEST_DATABASE_URL` points at PostgreSQL.

use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use sea_orm::{ConnectionTrait, Statement};
use serde_json::json;

use crate::helpers::{
    TestApp, assert_error, eventually, get, live_partner, spawn_app_with, spawn_node,
};

/// A key cache that, without announcements, would hide a change for an hour.
const LONG_CACHE: &[(&str, &str)] = &[("auth.key_cache_seconds", "3600")];

/// Three nodes on one PostgreSQL database, or `None` on SQLite.
async fn three_nodes() -> Option<(TestApp, TestApp, TestApp)> {
    let first = spawn_app_with(LONG_CACHE).await;
    if !first.database_url.starts_with("postgres") {
        eprintln!("skipped: announcements need PostgreSQL (TEST_DATABASE_URL)");
        return None;
    }
    let second = spawn_node(&first.database_url, LONG_CACHE).await;
    let third = spawn_node(&first.database_url, LONG_CACHE).await;
    Some((first, second, third))
}

/// Three nodes and a live partner whose key every node has cached:
/// (nodes, partner id, secret), or `None` on SQLite.
async fn a_key_cached_on_three_nodes() -> Option<([TestApp; 3], String, String)> {
    let (first, second, third) = three_nodes().await?;
    let (partner_id, secret) = live_partner(&first).await;
    cache_everywhere([&first, &second, &third], &secret).await;
    Some(([first, second, third], partner_id, secret))
}

/// Revokes a key through `node`'s operator API.
async fn revoke(node: &TestApp, key_id: &str) {
    let response = node
        .operator(Method::POST, &format!("/keys/{key_id}/revoke"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
}

/// Every node answers `/balance` with 200, so each has the key cached.
async fn cache_everywhere(nodes: [&TestApp; 3], secret: &str) {
    for node in nodes {
        let (status, body) = get(node, secret, "/balance").await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
}

/// Waits until `node` refuses `secret` with `status` and `code`; returns how
/// long it took from `since`.
async fn refused(
    node: &TestApp,
    secret: &str,
    status: u16,
    code: &str,
    since: Instant,
) -> Duration {
    eventually(
        &format!("{} to refuse the key with {code}", node.public),
        Duration::from_secs(5),
        || async {
            let (got, body) = get(node, secret, "/balance").await;
            (got.as_u16() == status).then(|| {
                assert_error(got, &body, status, code);
                since.elapsed()
            })
        },
    )
    .await
}

#[tokio::test]
async fn a_key_revoked_on_one_node_is_refused_by_every_node() {
    let Some((nodes, _, secret)) = a_key_cached_on_three_nodes().await else {
        return;
    };
    let key_id = key_id_of(&nodes[0], &secret).await;
    let revoked_at = Instant::now();
    revoke(&nodes[0], &key_id).await;
    for node in &nodes {
        let took = refused(node, &secret, 401, "auth.invalid_key", revoked_at).await;
        eprintln!("{} refused the revoked key after {took:?}", node.public);
    }
}

#[tokio::test]
async fn an_account_suspended_on_one_node_is_refused_by_every_node() {
    let Some((nodes, partner_id, secret)) = a_key_cached_on_three_nodes().await else {
        return;
    };
    let suspended_at = Instant::now();
    let response = nodes[1]
        .operator(Method::PATCH, &format!("/partners/{partner_id}"))
        .json(&json!({ "status": "suspended" }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    for node in &nodes {
        let took = refused(node, &secret, 403, "partner.suspended", suspended_at).await;
        eprintln!(
            "{} refused the suspended account after {took:?}",
            node.public
        );
    }
}

#[tokio::test]
async fn a_node_whose_listening_connection_was_cut_still_learns_of_changes() {
    let Some((nodes, _, secret)) = a_key_cached_on_three_nodes().await else {
        return;
    };
    let first = &nodes[0];
    let key_id = key_id_of(first, &secret).await;

    // Cut every node's listening connection, then revoke at once: the
    // announcement may be sent while nobody listens.
    let cut = first
        .db
        .execute_raw(Statement::from_string(
            first.db.get_database_backend(),
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = current_database() AND query LIKE 'LISTEN %'",
        ))
        .await
        .unwrap();
    assert!(
        cut.rows_affected() >= 3,
        "every node listens: {}",
        cut.rows_affected()
    );
    let revoked_at = Instant::now();
    revoke(first, &key_id).await;
    for node in &nodes {
        refused(node, &secret, 401, "auth.invalid_key", revoked_at).await;
    }
}

/// The id of the key whose secret is `secret`, from `GET /me`.
async fn key_id_of(app: &TestApp, secret: &str) -> String {
    let (status, me) = get(app, secret, "/me").await;
    assert_eq!(status, StatusCode::OK, "{me}");
    me["key"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("/me names the key: {me}"))
        .to_owned()
}
