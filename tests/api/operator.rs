//! The operator API skeleton and the `admin` CLI.

use entities::api_key;
use reqwest::{Method, StatusCode};
use sea_orm::EntityTrait;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::helpers::{OPERATOR_TOKEN, assert_error, read, spawn_app};

#[tokio::test]
async fn a_new_partner_is_pending_with_a_derived_slug_and_play_money() {
    let app = spawn_app().await;

    let response = app
        .operator(Method::POST, "/partners")
        .json(&json!({ "name": "Acme Travel, Inc.", "tier": "silver" }))
        .send()
        .await
        .unwrap();

    let (status, partner) = read(response).await;
    assert_eq!(status, StatusCode::CREATED, "{partner}");
    assert_eq!(partner["object"], "partner");
    assert!(partner["id"].as_str().unwrap().starts_with("pt_"));
    assert_eq!(partner["status"], "pending");
    assert_eq!(partner["slug"], "acme-travel-inc");
    assert_eq!(partner["tier"], "silver");
    assert_eq!(partner["balances"]["live_cents"], 0);
    assert_eq!(partner["balances"]["sandbox_cents"], 10_000_000);

    let id = partner["id"].as_str().unwrap();
    let (status, shown) = read(
        app.operator(Method::GET, &format!("/partners/{id}"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(shown, partner);
}

#[tokio::test]
async fn partner_validation_reports_every_problem() {
    let app = spawn_app().await;
    let response = app
        .operator(Method::POST, "/partners")
        .json(&json!({ "name": "", "tier": "diamond", "discount_override_bps": 10001 }))
        .send()
        .await
        .unwrap();
    let (status, body) = read(response).await;
    let error = assert_error(status, &body, 400, "request.invalid");
    let params: Vec<&str> = error["details"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["param"].as_str().unwrap())
        .collect();
    assert!(
        params.contains(&"name")
            && params.contains(&"tier")
            && params.contains(&"discount_override_bps"),
        "{params:?}"
    );
    assert!(error["param"].is_null(), "several fields were wrong");
}

#[tokio::test]
async fn a_duplicate_slug_is_a_conflict_naming_slug() {
    let app = spawn_app().await;
    app.create_partner(json!({ "slug": "acme" })).await;
    let response = app
        .operator(Method::POST, "/partners")
        .json(&json!({ "name": "Other", "tier": "gold", "slug": "acme" }))
        .send()
        .await
        .unwrap();
    let (status, body) = read(response).await;
    let error = assert_error(status, &body, 409, "conflict");
    assert_eq!(error["param"], "slug");
}

#[tokio::test]
async fn unknown_and_malformed_partner_ids() {
    let app = spawn_app().await;
    let (status, body) = read(
        app.operator(Method::GET, "/partners/pt_doesnotexist")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_error(status, &body, 404, "not_found");
    let (status, body) = read(
        app.operator(Method::GET, "/partners/pk_wrongkind")
            .send()
            .await
            .unwrap(),
    )
    .await;
    let error = assert_error(status, &body, 400, "request.invalid");
    assert_eq!(error["param"], "id");
}

#[tokio::test]
async fn patch_sets_and_clears_the_discount_and_guards_status_transitions() {
    let app = spawn_app().await;
    let partner = app.create_partner(json!({})).await;
    let path = format!("/partners/{}", partner["id"].as_str().unwrap());

    let (status, body) = read(
        app.operator(Method::PATCH, &path)
            .json(&json!({ "discount_override_bps": 2500, "tier": "gold" }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["discount_override_bps"], 2500);
    assert_eq!(body["tier"], "gold");

    let (_, body) = read(
        app.operator(Method::PATCH, &path)
            .json(&json!({ "low_balance_threshold_cents": 5000 }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        body["discount_override_bps"], 2500,
        "absent leaves it as it is"
    );
    assert_eq!(body["low_balance_threshold_cents"], 5000);

    let (_, body) = read(
        app.operator(Method::PATCH, &path)
            .json(&json!({ "discount_override_bps": null }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert!(body["discount_override_bps"].is_null(), "null clears");

    let (status, body) = read(
        app.operator(Method::PATCH, &path)
            .json(&json!({ "status": "closed" }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = read(
        app.operator(Method::PATCH, &path)
            .json(&json!({ "status": "live" }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let error = assert_error(status, &body, 400, "request.invalid");
    assert_eq!(error["param"], "status");
}

#[tokio::test]
async fn issued_keys_have_the_spec_form_and_only_their_hash_is_stored() {
    let app = spawn_app().await;
    let partner = app.create_partner(json!({})).await;
    let partner_id = partner["id"].as_str().unwrap();

    let live = app
        .issue_key(partner_id, json!({ "mode": "live", "label": "prod" }))
        .await;
    let sandbox = app
        .issue_key(
            partner_id,
            json!({ "mode": "sandbox", "allowed_cidrs": ["10.1.2.3/8", "192.0.2.7"] }),
        )
        .await;

    let live_secret = live["secret"].as_str().unwrap();
    let sandbox_secret = sandbox["secret"].as_str().unwrap();
    assert!(
        live_secret.starts_with("svc_sk_live_") && live_secret.len() == 12 + 43,
        "{live_secret}"
    );
    assert!(sandbox_secret.starts_with("svc_sk_test_") && sandbox_secret.len() == 12 + 43);
    assert!(live_secret[12..].bytes().all(|b| b.is_ascii_alphanumeric()));
    assert_eq!(live["last4"], &live_secret[live_secret.len() - 4..]);
    assert!(live["id"].as_str().unwrap().starts_with("pk_"));
    assert_eq!(live["mode"], "live");
    assert_eq!(
        sandbox["allowed_cidrs"],
        json!(["10.0.0.0/8", "192.0.2.7/32"])
    );

    let rows = api_key::Entity::find().all(&app.db).await.unwrap();
    assert_eq!(rows.len(), 2);
    for row in rows {
        let dump = format!("{row:?}");
        assert!(
            !dump.contains(live_secret) && !dump.contains(sandbox_secret),
            "a secret is stored in clear"
        );
        let secret = if row.mode.as_str() == "live" {
            live_secret
        } else {
            sandbox_secret
        };
        assert_eq!(
            row.secret_hash,
            hex::encode(Sha256::digest(secret.as_bytes()))
        );
    }
}

#[tokio::test]
async fn key_issue_validation() {
    let app = spawn_app().await;
    let partner = app.create_partner(json!({})).await;
    let path = format!("/partners/{}/keys", partner["id"].as_str().unwrap());
    let (status, body) = read(app.operator(Method::POST, &path).json(&json!({ "mode": "prod", "allowed_cidrs": ["nope"], "expires_at": "2001-01-01T00:00:00Z" })).send().await.unwrap()).await;
    let error = assert_error(status, &body, 400, "request.invalid");
    assert_eq!(error["details"].as_array().unwrap().len(), 3, "{error}");

    let (status, body) = read(
        app.operator(Method::POST, "/partners/pt_missing/keys")
            .json(&json!({ "mode": "live" }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_error(status, &body, 404, "not_found");
}

/// Runs `esim-reseller admin ...` against the test app (asynchronously, so
/// the app keeps serving on this runtime meanwhile).
pub(crate) async fn admin(app: &crate::helpers::TestApp, args: &[&str]) -> (bool, Value) {
    admin_as(app, OPERATOR_TOKEN, args).await
}

/// Runs `esim-reseller admin ...` with a named operator's `token`.
pub(crate) async fn admin_as(
    app: &crate::helpers::TestApp,
    token: &str,
    args: &[&str],
) -> (bool, Value) {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_esim-reseller"))
        .args(["admin", "--operator-url", &app.operator, "--token", token])
        .args(args)
        .output()
        .await
        .expect("run admin");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let json = serde_json::from_str(&stdout).unwrap_or_else(|_| {
        panic!(
            "not JSON: {stdout} {}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (output.status.success(), json)
}

#[tokio::test]
async fn the_admin_cli_creates_shows_updates_partners_and_issues_keys() {
    let app = spawn_app().await;

    let (ok, created) = admin(
        &app,
        &[
            "partner",
            "create",
            "--name",
            "Globe Roam",
            "--tier",
            "gold",
            "--status",
            "live",
        ],
    )
    .await;
    assert!(ok, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    assert_eq!(created["status"], "live");

    let (ok, shown) = admin(&app, &["partner", "show", &id]).await;
    assert!(ok);
    assert_eq!(shown["slug"], "globe-roam");

    let (ok, updated) = admin(
        &app,
        &["partner", "update", &id, "--discount-override-bps", "1750"],
    )
    .await;
    assert!(ok);
    assert_eq!(updated["discount_override_bps"], 1750);

    let (ok, suspended) = admin(&app, &["partner", "status", &id, "suspended"]).await;
    assert!(ok);
    assert_eq!(suspended["status"], "suspended");

    let (ok, key) = admin(
        &app,
        &[
            "key",
            "issue",
            &id,
            "--mode",
            "live",
            "--allow",
            "127.0.0.1/32",
        ],
    )
    .await;
    assert!(ok, "{key}");
    assert!(key["secret"].as_str().unwrap().starts_with("svc_sk_live_"));

    let (ok, refused) = admin(&app, &["partner", "show", "pt_nobody"]).await;
    assert!(!ok, "a 404 exits non-zero");
    assert_eq!(refused["error"]["code"], "not_found");
}

#[tokio::test]
async fn the_admin_cli_shows_admission() {
    let app = spawn_app().await;
    let (ok, view) = admin(&app, &["admission"]).await;
    assert!(ok, "{view}");
    assert_eq!(view["enabled"], true, "{view}");
    // The shipped limit (8 calls/s), one unit per call until it learns more,
    // over the 40-second horizon.
    assert_eq!(view["supplier_calls_per_second"], 8, "{view}");
    assert_eq!(view["room_units"], 320, "{view}");
    assert_eq!(view["backlog_units"], 0, "{view}");
}
