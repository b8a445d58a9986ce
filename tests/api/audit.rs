//! The operators' audit trail: one row per change, written in the change's
//! own transaction (a failed change leaves no success row), naming the
//! operator, the request, the target, the amounts and what changed;
//! filtered and paged by `GET /audit`; and refused by the database itself
//! if anything tries to edit or delete a row.

use reqwest::{Method, StatusCode};
use sea_orm::ConnectionTrait;
use serde_json::{Value, json};

use crate::{
    deposits::live_float,
    helpers::{TestApp, assert_error, read, spawn_app},
};

async fn send(
    app: &TestApp,
    token: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value, String) {
    let mut request = app.as_operator(token, method, path);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let request_id = response.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let (status, body) = read(response).await;
    (status, body, request_id)
}

/// Every row of the trail matching `query`, walking every page.
async fn trail(app: &TestApp, query: &str) -> Vec<Value> {
    let mut rows = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("/audit?limit=2&{query}");
        if let Some(cursor) = &cursor {
            path.push_str(&format!("&cursor={cursor}"));
        }
        let (status, page) = read(app.operator(Method::GET, &path).send().await.unwrap()).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        rows.extend(page["data"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => {
                assert_eq!(page["has_more"], false);
                return rows;
            }
        }
    }
}

#[tokio::test]
async fn each_change_writes_one_row_naming_who_what_and_the_request() {
    let app = spawn_app().await;
    let (_, support) = app.create_operator("Sam Support", "support").await;
    let (_, finance) = app.create_operator("Fay Finance", "finance").await;

    let (status, partner, partner_request) = send(
        &app,
        &support,
        Method::POST,
        "/partners",
        Some(json!({ "name": "Acme", "tier": "bronze" })),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{partner}");
    let partner_id = partner["id"].as_str().unwrap().to_owned();
    let (status, key, _) = send(
        &app,
        &support,
        Method::POST,
        &format!("/partners/{partner_id}/keys"),
        Some(json!({ "mode": "live" })),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{key}");
    let (status, _, _) = send(
        &app,
        &support,
        Method::PATCH,
        &format!("/partners/{partner_id}"),
        Some(json!({ "status": "live" })),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, entry, movement_request) = send(
        &app,
        &finance,
        Method::POST,
        &format!("/partners/{partner_id}/movements"),
        Some(json!({ "kind": "adjustment", "amount_cents": 5_000, "description": "goodwill" })),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{entry}");
    let key_id = key["id"].as_str().unwrap();
    let (status, _, _) = send(
        &app,
        &support,
        Method::POST,
        &format!("/keys/{key_id}/revoke"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);

    let rows = trail(&app, &format!("partner_id={partner_id}")).await;
    let actions: Vec<&str> = rows.iter().map(|r| r["action"].as_str().unwrap()).collect();
    assert_eq!(
        actions,
        [
            "key.revoke",
            "movement.create",
            "partner.update",
            "key.issue",
            "partner.create"
        ]
    );
    let ids: Vec<i64> = rows.iter().map(|r| r["id"].as_i64().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] > w[1]), "newest first: {ids:?}");

    let created = &rows[4];
    assert_eq!(created["operator"]["name"], "Sam Support");
    assert_eq!(created["operator"]["role"], "support");
    assert_eq!(created["request_id"], partner_request.as_str());
    assert_eq!(created["after"]["status"], "pending");
    let updated = &rows[2];
    assert_eq!(updated["before"]["status"], "pending");
    assert_eq!(updated["after"]["status"], "live");
    let moved = &rows[1];
    assert_eq!(moved["operator"]["name"], "Fay Finance");
    assert_eq!(moved["request_id"], movement_request.as_str());
    assert_eq!(moved["amount_cents"], 5_000);
    assert_eq!(moved["note"], "goodwill");
    assert_eq!(moved["after"]["ledger_entry_id"], entry["id"]);
    assert_eq!(moved["after"]["balance_before_cents"], 0);
    assert_eq!(moved["after"]["balance_after_cents"], 5_000);
    assert_eq!(
        moved["target"],
        json!({ "kind": "partner", "id": partner_id })
    );
    let revoked = &rows[0];
    assert!(revoked["before"]["revoked_at"].is_null());
    assert!(revoked["after"]["revoked_at"].is_string());
    assert!(
        !rows
            .iter()
            .any(|r| r.to_string().contains(key["secret"].as_str().unwrap())),
        "no secret in the trail"
    );
}

#[tokio::test]
async fn a_failed_change_leaves_no_row_and_a_refused_one_is_marked_refused() {
    let app = spawn_app().await;
    let (_, finance) = app.create_operator("Fay Finance", "finance").await;
    let partner = app.create_partner(json!({})).await;
    let partner_id = partner["id"].as_str().unwrap();
    let movements = format!("/partners/{partner_id}/movements");

    // A payout the float cannot pay: 402, nothing moved, no row.
    let (status, body, payout_request) = send(
        &app,
        &finance,
        Method::POST,
        &movements,
        Some(json!({ "kind": "payout", "amount_cents": -100, "description": "too much" })),
    )
    .await;
    assert_error(status, &body, 402, "balance.insufficient");
    // A wire deposit whose reference is taken: the second is a 409, no row.
    let wires = format!("/partners/{partner_id}/wire-deposits");
    let wire = json!({ "amount_cents": 700, "reference": "WIRE-1" });
    let (status, _, _) = send(&app, &finance, Method::POST, &wires, Some(wire.clone())).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, body, duplicate_request) =
        send(&app, &finance, Method::POST, &wires, Some(wire)).await;
    assert_error(status, &body, 409, "conflict");

    let rows = trail(&app, &format!("partner_id={partner_id}")).await;
    let actions: Vec<&str> = rows.iter().map(|r| r["action"].as_str().unwrap()).collect();
    assert_eq!(actions, ["wire_deposit.create", "partner.create"]);
    for failed in [payout_request, duplicate_request] {
        assert!(rows.iter().all(|r| r["request_id"] != failed.as_str()));
    }
    assert_eq!(live_float(&app, partner_id).await, 700);

    // A viewer's attempt is refused, recorded as refused, and moves nothing.
    let (_, viewer) = app.create_operator("Vic Viewer", "viewer").await;
    let (status, body, refused_request) = send(
        &app,
        &viewer,
        Method::POST,
        &movements,
        Some(json!({ "kind": "adjustment", "amount_cents": 100, "description": "x" })),
    )
    .await;
    assert_error(status, &body, 403, "forbidden");
    let refused = trail(&app, "operator=Vic%20Viewer").await;
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["outcome"], "refused");
    assert_eq!(refused[0]["action"], "role.refuse");
    assert_eq!(refused[0]["request_id"], refused_request.as_str());
    assert_eq!(live_float(&app, partner_id).await, 700);
}

#[tokio::test]
async fn the_trail_filters_by_operator_action_partner_and_time_and_pages_without_gaps() {
    let app = spawn_app().await;
    let (ana_id, ana) = app.create_operator("Ana", "finance").await;
    let first = app.create_partner(json!({})).await;
    let second = app.create_partner(json!({})).await;
    let started = chrono::Utc::now();
    for partner in [&first, &second] {
        for cents in [100, 200, 300] {
            let path = format!("/partners/{}/movements", partner["id"].as_str().unwrap());
            let (status, _, _) = send(
                &app,
                &ana,
                Method::POST,
                &path,
                Some(json!({ "kind": "adjustment", "amount_cents": cents, "description": "d" })),
            )
            .await;
            assert_eq!(status, StatusCode::CREATED);
        }
    }
    let by_name = trail(&app, "operator=Ana").await;
    let by_id = trail(&app, &format!("operator={ana_id}")).await;
    assert_eq!(by_name.len(), 6);
    assert_eq!(by_name, by_id);
    let mut seen: Vec<i64> = by_name.iter().map(|r| r["id"].as_i64().unwrap()).collect();
    seen.dedup();
    assert_eq!(seen.len(), 6, "pages neither repeat nor skip");
    let first_id = first["id"].as_str().unwrap();
    assert_eq!(
        trail(&app, &format!("operator=Ana&partner_id={first_id}"))
            .await
            .len(),
        3
    );
    assert_eq!(trail(&app, "action=movement").await.len(), 6);
    assert_eq!(trail(&app, "action=movement.create").await.len(), 6);
    assert_eq!(trail(&app, "action=partner.create").await.len(), 2);
    let since = started
        .to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
        .replace('+', "%2B");
    assert_eq!(
        trail(&app, &format!("action=partner&since={since}"))
            .await
            .len(),
        0
    );
    assert_eq!(
        trail(&app, &format!("action=partner&until={since}"))
            .await
            .len(),
        2
    );

    for bad in [
        "since=yesterday",
        "limit=0",
        "limit=201",
        "cursor=forged",
        "unknown=1",
        "action=",
    ] {
        let (status, body) = read(
            app.operator(Method::GET, &format!("/audit?{bad}"))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_error(status, &body, 400, "request.invalid");
    }
    // A cursor continues only the list it came from.
    let (_, page) = read(
        app.operator(Method::GET, "/audit?limit=1&operator=Ana")
            .send()
            .await
            .unwrap(),
    )
    .await;
    let cursor = page["next_cursor"].as_str().unwrap();
    let (status, body) = read(
        app.operator(
            Method::GET,
            &format!("/audit?limit=1&operator=bootstrap&cursor={cursor}"),
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_error(status, &body, 400, "request.invalid");
}

#[tokio::test]
async fn the_database_refuses_to_edit_or_delete_a_row() {
    let app = spawn_app().await;
    app.create_partner(json!({})).await;
    for statement in [
        "UPDATE audit_events SET operator_name = 'someone else'",
        "DELETE FROM audit_events",
    ] {
        let result = app.db.execute_unprepared(statement).await;
        assert!(result.is_err(), "{statement} must be refused");
        assert!(result.unwrap_err().to_string().contains("append-only"));
    }
    let rows = trail(&app, "action=partner.create").await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["operator"]["name"], "bootstrap");
}
