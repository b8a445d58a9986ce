//! Four eyes on money: a movement above `operator.four_eyes_cents` is held
//! (202, `pending_approval`) and moves nothing until a *different* finance
//! or admin operator approves it; the requester cannot; racing approvals
//! move it once; a rejection or a lapse moves nothing; each step is in the
//! trail with its operator's name.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::{
    deposits::live_float,
    helpers::{TestApp, assert_error, eventually, read, spawn_app_with},
    operator::admin_as,
};

/// $1,000, the default.
const FOUR_EYES: (&str, &str) = ("operator.four_eyes_cents", "100000");

async fn send(
    app: &TestApp,
    token: &str,
    method: Method,
    path: &str,
    body: Value,
) -> (StatusCode, Value) {
    read(
        app.as_operator(token, method, path)
            .json(&body)
            .send()
            .await
            .unwrap(),
    )
    .await
}

async fn adjust(app: &TestApp, token: &str, partner_id: &str, cents: i64) -> (StatusCode, Value) {
    let body =
        json!({ "kind": "adjustment", "amount_cents": cents, "description": "float top-up" });
    send(
        app,
        token,
        Method::POST,
        &format!("/partners/{partner_id}/movements"),
        body,
    )
    .await
}

async fn decide(app: &TestApp, token: &str, approval_id: &str, verb: &str) -> (StatusCode, Value) {
    let path = format!("/approvals/{approval_id}/{verb}");
    send(
        app,
        token,
        Method::POST,
        &path,
        json!({ "note": "checked the bank statement" }),
    )
    .await
}

/// A partner and two finance operators: (partner id, first, second).
async fn setup(app: &TestApp) -> (String, String, String) {
    let partner = app.create_partner(json!({})).await;
    let (_, first) = app.create_operator("Fay Finance", "finance").await;
    let (_, second) = app.create_operator("Gil Finance", "finance").await;
    (partner["id"].as_str().unwrap().to_owned(), first, second)
}

#[tokio::test]
async fn a_large_adjustment_moves_nothing_until_another_operator_approves_it() {
    let app = spawn_app_with(&[FOUR_EYES]).await;
    let (partner_id, fay, gil) = setup(&app).await;

    // At the limit it moves at once; above it, it is held.
    let (status, _) = adjust(&app, &fay, &partner_id, 100_000).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, held) = adjust(&app, &fay, &partner_id, 500_000).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{held}");
    assert_eq!(held["object"], "approval");
    assert_eq!(held["status"], "pending_approval");
    assert_eq!(held["amount_cents"], 500_000);
    assert_eq!(held["requested_by"]["name"], "Fay Finance");
    let approval_id = held["id"].as_str().unwrap().to_owned();
    assert!(approval_id.starts_with("apr_"));
    assert_eq!(
        live_float(&app, &partner_id).await,
        100_000,
        "nothing moved yet"
    );

    // The requester cannot approve it, and the attempt is recorded.
    let (status, body) = decide(&app, &fay, &approval_id, "approve").await;
    let error = assert_error(status, &body, 403, "forbidden");
    assert_eq!(error["rule"], "four_eyes");
    // A viewer cannot either.
    let (_, viewer) = app.create_operator("Vic Viewer", "viewer").await;
    let (status, body) = decide(&app, &viewer, &approval_id, "approve").await;
    assert_eq!(
        assert_error(status, &body, 403, "forbidden")["required_role"],
        "finance"
    );
    assert_eq!(live_float(&app, &partner_id).await, 100_000);

    let (status, approved) = decide(&app, &gil, &approval_id, "approve").await;
    assert_eq!(status, StatusCode::OK, "{approved}");
    assert_eq!(approved["status"], "approved");
    assert_eq!(approved["decided_by"]["name"], "Gil Finance");
    assert_eq!(approved["result"]["amount_cents"], 500_000);
    assert_eq!(approved["result_id"], approved["result"]["id"]);
    assert_eq!(live_float(&app, &partner_id).await, 600_000);
    let (status, body) = decide(&app, &gil, &approval_id, "approve").await;
    assert_error(status, &body, 409, "conflict");
    assert_eq!(live_float(&app, &partner_id).await, 600_000);

    // Every step is in the trail, with names.
    let (_, trail) = read(
        app.operator(Method::GET, &format!("/audit?partner_id={partner_id}"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let steps: Vec<(String, String, String)> = trail["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["action"].as_str().unwrap().into(),
                r["outcome"].as_str().unwrap().into(),
                r["operator"]["name"].as_str().unwrap().into(),
            )
        })
        .collect();
    let step = |a: &str, o: &str, n: &str| (a.to_owned(), o.to_owned(), n.to_owned());
    assert_eq!(
        steps,
        [
            step("approval.approve", "ok", "Gil Finance"),
            step("movement.create", "pending_approval", "Fay Finance"),
            step("movement.create", "ok", "Fay Finance"),
            step("partner.create", "ok", "bootstrap"),
        ],
        "{trail}"
    );
    let (_, refusals) = read(
        app.operator(Method::GET, "/audit?action=four_eyes.refuse")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(refusals["data"][0]["operator"]["name"], "Fay Finance");
    assert_eq!(refusals["data"][0]["outcome"], "refused");
}

#[tokio::test]
async fn twelve_racing_approvals_move_the_money_once() {
    let app = spawn_app_with(&[FOUR_EYES]).await;
    let (partner_id, fay, gil) = setup(&app).await;
    let (_, admin) = app.create_operator("Ada Admin", "admin").await;
    let (status, held) = adjust(&app, &fay, &partner_id, 250_000).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let approval_id = held["id"].as_str().unwrap().to_owned();

    let racers = (0..12).map(|i| {
        let (app, token, id) = (
            &app,
            if i % 2 == 0 {
                gil.clone()
            } else {
                admin.clone()
            },
            approval_id.clone(),
        );
        async move { decide(app, &token, &id, "approve").await }
    });
    let answers = futures::future::join_all(racers).await;
    let won = answers.iter().filter(|(s, _)| *s == StatusCode::OK).count();
    let lost = answers
        .iter()
        .filter(|(s, b)| *s == StatusCode::CONFLICT && b["error"]["code"] == "conflict")
        .count();
    assert_eq!((won, lost), (1, 11), "{answers:?}");
    assert_eq!(live_float(&app, &partner_id).await, 250_000);
    let (_, approvals) = read(
        app.operator(Method::GET, "/audit?action=approval.approve")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        approvals["data"].as_array().unwrap().len(),
        1,
        "one approval row"
    );
}

#[tokio::test]
async fn a_rejection_moves_nothing_and_ends_the_approval() {
    let app = spawn_app_with(&[FOUR_EYES]).await;
    let (partner_id, fay, gil) = setup(&app).await;
    let (status, held) = adjust(&app, &fay, &partner_id, -200_000).await;
    assert_eq!(
        status,
        StatusCode::ACCEPTED,
        "a large debit is held too: {held}"
    );
    let id = held["id"].as_str().unwrap();
    let (status, rejected) = decide(&app, &gil, id, "reject").await;
    assert_eq!(status, StatusCode::OK, "{rejected}");
    assert_eq!(rejected["status"], "rejected");
    let (status, body) = decide(&app, &gil, id, "approve").await;
    assert_error(status, &body, 409, "conflict");
    assert_eq!(live_float(&app, &partner_id).await, 0);
    let (_, listed) = read(
        app.operator(Method::GET, "/approvals?status=rejected")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(listed["data"][0]["id"], id);
    let (status, body) = read(
        app.operator(Method::GET, "/approvals?status=maybe")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_error(status, &body, 400, "request.invalid");
}

#[tokio::test]
async fn an_approval_nobody_decides_lapses_and_moves_nothing() {
    let app = spawn_app_with(&[FOUR_EYES, ("operator.approval_lapse_seconds", "1")]).await;
    let (partner_id, fay, gil) = setup(&app).await;
    let (status, held) = adjust(&app, &fay, &partner_id, 300_000).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let id = held["id"].as_str().unwrap().to_owned();
    eventually("the approval lapses", Duration::from_secs(10), || async {
        let (_, shown) = read(
            app.operator(Method::GET, &format!("/approvals/{id}"))
                .send()
                .await
                .unwrap(),
        )
        .await;
        (shown["status"] == "lapsed").then_some(())
    })
    .await;
    let (status, body) = decide(&app, &gil, &id, "approve").await;
    let error = assert_error(status, &body, 409, "conflict");
    assert!(
        error["message"].as_str().unwrap().contains("lapsed"),
        "{error}"
    );
    assert_eq!(live_float(&app, &partner_id).await, 0);
    let (_, trail) = read(
        app.operator(Method::GET, "/audit?action=approval.lapse")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(trail["data"].as_array().unwrap().len(), 1, "{trail}");
    assert_eq!(trail["data"][0]["operator"]["name"], "system");
}

#[tokio::test]
async fn a_large_wire_deposit_is_held_and_the_cli_approves_it() {
    let app = spawn_app_with(&[FOUR_EYES]).await;
    let (partner_id, fay, gil) = setup(&app).await;
    let (ok, held) = admin_as(
        &app,
        &fay,
        &[
            "money",
            "wire",
            &partner_id,
            "--amount-cents",
            "150001",
            "--reference",
            "WIRE-77",
        ],
    )
    .await;
    assert!(ok, "{held}");
    assert_eq!(held["status"], "pending_approval");
    assert_eq!(held["kind"], "wire_deposit");
    let id = held["id"].as_str().unwrap();
    let (ok, pending) = admin_as(
        &app,
        &gil,
        &["approvals", "list", "--status", "pending_approval"],
    )
    .await;
    assert!(ok, "{pending}");
    assert_eq!(pending["data"][0]["id"], id);
    let (ok, own) = admin_as(&app, &fay, &["approvals", "approve", id, "--note", "mine"]).await;
    assert!(!ok, "{own}");
    assert_eq!(own["error"]["code"], "forbidden");
    let (ok, approved) = admin_as(
        &app,
        &gil,
        &["approvals", "approve", id, "--note", "statement matches"],
    )
    .await;
    assert!(ok, "{approved}");
    assert_eq!(approved["result"]["object"], "deposit");
    assert_eq!(live_float(&app, &partner_id).await, 150_001);
}

#[tokio::test]
async fn approving_a_large_review_is_held_and_moves_its_amount_once_when_approved() {
    let mut config = crate::deposits::UNTHROTTLED.to_vec();
    config.push(("operator.four_eyes_cents", "10000"));
    let app = spawn_app_with(&config).await;
    let (partner_id, secret) = crate::helpers::live_partner(&app).await;
    let (_, review) = crate::reviews::paid_after_credit(&app, &secret).await;
    let (_, fay) = app.create_operator("Fay Finance", "finance").await;
    let (_, gil) = app.create_operator("Gil Finance", "finance").await;
    let review_id = review["id"].as_str().unwrap();
    let before = live_float(&app, &partner_id).await;

    let path = format!("/reviews/{review_id}/approve");
    let (status, held) = send(
        &app,
        &fay,
        Method::POST,
        &path,
        json!({ "note": "late payment" }),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{held}");
    assert_eq!(held["kind"], "review");
    assert_eq!(held["amount_cents"], 30_000);
    assert_eq!(live_float(&app, &partner_id).await, before);
    let id = held["id"].as_str().unwrap();
    let (status, approved) = decide(&app, &gil, id, "approve").await;
    assert_eq!(status, StatusCode::OK, "{approved}");
    assert_eq!(approved["result"]["status"], "approved");
    assert_eq!(live_float(&app, &partner_id).await, before + 30_000);
    // The review is closed: approving it again is a conflict, not a second hold.
    let (status, body) = send(&app, &fay, Method::POST, &path, json!({ "note": "again" })).await;
    assert_error(status, &body, 409, "conflict");
}
