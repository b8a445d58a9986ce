//! Named operators and their roles: every operator route against every
//! role (a call outside the role is a 403 naming the missing role, and is
//! written to the audit trail as refused), the bootstrap token as an admin,
//! tokens shown once and stored hashed, rotation and revocation, and a
//! revocation holding on every node from the next request on.

use reqwest::{Method, StatusCode};
use sea_orm::{ConnectionTrait, Statement};
use serde_json::{Value, json};

use crate::{
    helpers::{OPERATOR_TOKEN, TestApp, assert_error, read, spawn_app, spawn_node},
    operator::admin_as,
};

/// Every operator route: method, a concrete path, a body, and the least
/// role that may call it. Ids name nothing, so an allowed call changes
/// nothing (it is answered 400, 404 or 409, never 403).
const ROUTES: &[(&str, &str, &str)] = &[
    ("GET", "/me", "viewer"),
    ("GET", "/operators", "viewer"),
    ("GET", "/audit", "viewer"),
    ("GET", "/approvals", "viewer"),
    ("GET", "/approvals/apr_nothing", "viewer"),
    ("GET", "/partners/pt_nothing", "viewer"),
    ("GET", "/reviews", "viewer"),
    ("GET", "/actors", "viewer"),
    ("GET", "/admission", "viewer"),
    ("GET", "/rate-limits", "viewer"),
    ("GET", "/suppliers", "viewer"),
    ("GET", "/orders/po_nothing/supply", "viewer"),
    ("GET", "/margins", "viewer"),
    ("POST", "/partners", "support"),
    ("PATCH", "/partners/pt_nothing", "support"),
    ("POST", "/partners/pt_nothing/keys", "support"),
    ("PUT", "/partners/pt_nothing/sandbox-float", "support"),
    ("PATCH", "/keys/pk_nothing", "support"),
    ("POST", "/keys/pk_nothing/rotate", "support"),
    ("POST", "/keys/pk_nothing/revoke", "support"),
    ("POST", "/partners/pt_nothing/movements", "finance"),
    ("POST", "/partners/pt_nothing/wire-deposits", "finance"),
    ("POST", "/reviews/rev_nothing/approve", "finance"),
    ("POST", "/reviews/rev_nothing/reject", "finance"),
    ("POST", "/reviews/rev_nothing/resolve", "finance"),
    ("POST", "/approvals/apr_nothing/approve", "finance"),
    ("POST", "/approvals/apr_nothing/reject", "finance"),
    ("POST", "/operators", "admin"),
    ("POST", "/operators/op_nothing/rotate", "admin"),
    ("POST", "/operators/op_nothing/revoke", "admin"),
    ("POST", "/plans", "admin"),
    ("PATCH", "/plans/nothing", "admin"),
    ("POST", "/destinations", "admin"),
    ("PATCH", "/destinations/ZZ", "admin"),
    ("POST", "/actors/pt_nothing/fail", "admin"),
    ("POST", "/actors/provisioning/fail", "admin"),
];

const ROLES: [&str; 4] = ["viewer", "support", "finance", "admin"];

fn rank(role: &str) -> usize {
    ROLES.iter().position(|r| *r == role).expect("a role")
}

/// Calls `method path` as `token` with a harmless body.
async fn call(app: &TestApp, token: &str, method: &str, path: &str) -> (StatusCode, Value) {
    let method = Method::from_bytes(method.as_bytes()).unwrap();
    let mut request = app.as_operator(token, method.clone(), path);
    if method != Method::GET {
        // An array where the catalogue routes take one; an object elsewhere.
        let body = match path {
            "/plans" | "/destinations" => json!([]),
            _ => json!({}),
        };
        request = request.json(&body);
    }
    read(request.send().await.unwrap()).await
}

#[tokio::test]
async fn every_route_answers_each_role_by_the_role_table() {
    let app = spawn_app().await;
    let mut tokens = Vec::new();
    for role in ROLES {
        tokens.push((
            role,
            app.create_operator(&format!("{role} one"), role).await.1,
        ));
    }
    for (method, path, least) in ROUTES {
        for (role, token) in &tokens {
            let (status, body) = call(&app, token, method, path).await;
            if rank(role) >= rank(least) {
                assert!(
                    status != StatusCode::FORBIDDEN && status != StatusCode::UNAUTHORIZED,
                    "{role} may call {method} {path}: {status} {body}"
                );
                assert!(
                    status != StatusCode::INTERNAL_SERVER_ERROR,
                    "{method} {path}: {body}"
                );
            } else {
                let error = assert_error(status, &body, 403, "forbidden");
                assert_eq!(error["required_role"], *least, "{method} {path}");
                assert_eq!(error["role"], *role);
                assert!(
                    error["message"].as_str().unwrap().contains(least),
                    "{error}"
                );
            }
        }
    }
    // Each refusal is in the trail, named, with what was tried.
    let (status, trail) = read(
        app.operator(Method::GET, "/audit?action=role.refuse&limit=200")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{trail}");
    let refusals: usize = ROUTES.iter().map(|(_, _, least)| rank(least)).sum();
    let rows = trail["data"].as_array().unwrap();
    assert_eq!(rows.len(), refusals, "{trail}");
    assert!(rows.iter().all(|row| row["outcome"] == "refused"));
    assert!(
        rows.iter()
            .any(|row| row["operator"]["name"] == "viewer one"
                && row["target"]["id"] == "POST /operator/v1/partners/pt_nothing/movements")
    );
}

#[tokio::test]
async fn a_token_is_shown_once_stored_hashed_and_the_bootstrap_token_is_an_admin() {
    let app = spawn_app().await;
    let (status, me) = read(app.operator(Method::GET, "/me").send().await.unwrap()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(me["name"], "bootstrap");
    assert_eq!(me["role"], "admin");

    let (id, token) = app.create_operator("Ana Lima", "finance").await;
    assert!(token.starts_with("svc_op_"), "{token}");
    let (_, me) = read(
        app.as_operator(&token, Method::GET, "/me")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(me["id"], id.as_str());
    assert_eq!(me["role"], "finance");
    assert_eq!(me["may"]["money"], true);
    assert_eq!(me["may"]["operators"], false);

    let (_, list) = read(
        app.operator(Method::GET, "/operators")
            .send()
            .await
            .unwrap(),
    )
    .await;
    let listed = list.to_string();
    assert!(!listed.contains(&token), "a token is never listed again");
    assert!(listed.contains(&token[token.len() - 4..]));
    let stored = app
        .db
        .query_all_raw(Statement::from_string(
            app.db.get_database_backend(),
            "SELECT token_hash FROM operators".to_owned(),
        ))
        .await
        .unwrap();
    let hash: String = stored[0].try_get("", "token_hash").unwrap();
    assert_eq!(hash.len(), 64);
    assert_ne!(hash, token);

    // Names are unique, and the bootstrap's name is taken.
    let (status, body) = read(
        app.operator(Method::POST, "/operators")
            .json(&json!({ "name": "Ana Lima", "role": "viewer" }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_error(status, &body, 409, "conflict");
    for bad in [
        json!({ "name": "bootstrap", "role": "viewer" }),
        json!({ "name": "x", "role": "root" }),
        json!({ "name": "", "role": "viewer" }),
        json!({ "name": "ok", "role": "viewer", "extra": 1 }),
    ] {
        let (status, body) = read(
            app.operator(Method::POST, "/operators")
                .json(&bad)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_error(status, &body, 400, "request.invalid");
    }
    for wrong in [
        "",
        "svc_op_short",
        "svc_sk_live_0123456789012345678901234567890123456789012",
    ] {
        let (status, body) = read(
            app.as_operator(wrong, Method::GET, "/me")
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_error(status, &body, 401, "auth.invalid_key");
    }
}

#[tokio::test]
async fn rotation_and_revocation_hold_on_every_node_from_the_next_request() {
    let app = spawn_app().await;
    let other = spawn_node(&app.database_url, &[]).await;
    let (id, token) = app.create_operator("Rui", "support").await;
    let (status, _) = call(&other, &token, "GET", "/me").await;
    assert_eq!(
        status,
        StatusCode::OK,
        "the other node knows the operator at once"
    );

    let (status, rotated) = call(
        &app,
        OPERATOR_TOKEN,
        "POST",
        &format!("/operators/{id}/rotate"),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{rotated}");
    let fresh = rotated["token"].as_str().unwrap().to_owned();
    let (status, body) = call(&other, &token, "GET", "/me").await;
    assert_error(status, &body, 401, "auth.invalid_key");
    let (status, _) = call(&other, &fresh, "GET", "/me").await;
    assert_eq!(status, StatusCode::OK);

    let (status, revoked) = call(
        &app,
        OPERATOR_TOKEN,
        "POST",
        &format!("/operators/{id}/revoke"),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{revoked}");
    assert!(revoked["revoked_at"].is_string());
    for node in [&app, &other] {
        let (status, body) = call(node, &fresh, "GET", "/me").await;
        assert_error(status, &body, 401, "auth.invalid_key");
    }
    let (status, body) = call(
        &app,
        OPERATOR_TOKEN,
        "POST",
        &format!("/operators/{id}/rotate"),
    )
    .await;
    assert_error(status, &body, 409, "conflict");
    // Revoking again changes nothing and writes no second row.
    let (status, _) = call(
        &app,
        OPERATOR_TOKEN,
        "POST",
        &format!("/operators/{id}/revoke"),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (_, trail) = call(&app, OPERATOR_TOKEN, "GET", "/audit?action=operator").await;
    let actions: Vec<&str> = trail["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        ["operator.revoke", "operator.rotate", "operator.create"]
    );
}

#[tokio::test]
async fn the_cli_runs_as_the_operator_whose_token_it_is() {
    let app = spawn_app().await;
    let (ok, created) = admin_as(
        &app,
        OPERATOR_TOKEN,
        &["operators", "create", "--name", "Vi", "--role", "viewer"],
    )
    .await;
    assert!(ok, "{created}");
    let viewer = created["token"].as_str().unwrap().to_owned();
    let (ok, me) = admin_as(&app, &viewer, &["whoami"]).await;
    assert!(ok, "{me}");
    assert_eq!(me["name"], "Vi");
    let (ok, refused) = admin_as(
        &app,
        &viewer,
        &["partner", "create", "--name", "Acme", "--tier", "bronze"],
    )
    .await;
    assert!(!ok, "a 403 exits non-zero");
    assert_eq!(refused["error"]["code"], "forbidden");
    assert_eq!(refused["error"]["required_role"], "support");
    let (ok, listed) = admin_as(&app, &viewer, &["operators", "list"]).await;
    assert!(ok, "{listed}");
    assert_eq!(listed["data"][0]["name"], "Vi");
    let (ok, trail) = admin_as(&app, &viewer, &["audit", "--operator", "Vi"]).await;
    assert!(ok, "{trail}");
    assert_eq!(trail["data"][0]["action"], "role.refuse");
    let id = created["id"].as_str().unwrap();
    let (ok, revoked) = admin_as(&app, OPERATOR_TOKEN, &["operators", "revoke", id]).await;
    assert!(ok, "{revoked}");
    let (ok, _) = admin_as(&app, &viewer, &["whoami"]).await;
    assert!(!ok, "a revoked token is refused");
}

#[tokio::test]
async fn every_log_line_of_an_operator_request_names_the_operator() {
    const TOKEN: &str = "roles-bootstrap-token-0123";
    let serve = crate::helpers::ServeProcess::start(&[
        ("ESIM__OPERATOR__TOKEN", TOKEN),
        ("ESIM__LOG__LEVEL", "info"),
    ])
    .await;
    let created = serve
        .operator_call(
            TOKEN,
            Method::POST,
            "/operators",
            json!({ "name": "Sue Support", "role": "support" }),
        )
        .await;
    let token = created["token"].as_str().unwrap();
    let partner = serve
        .operator_call(
            token,
            Method::POST,
            "/partners",
            json!({ "name": "Logged", "tier": "gold" }),
        )
        .await;
    let partner_id = partner["id"].as_str().unwrap().to_owned();
    let lines = serve.terminate().await;
    let of_request: Vec<Value> = lines
        .iter()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| {
            line.to_string().contains("Sue Support")
                || line["message"] == "partner created" && line["partner_id"] == partner_id.as_str()
        })
        .collect();
    let created_line = of_request
        .iter()
        .find(|line| line["message"] == "partner created")
        .unwrap_or_else(|| panic!("no `partner created` line naming the operator: {lines:?}"));
    let spans = created_line["spans"]
        .as_array()
        .expect("the enclosing spans");
    assert!(
        spans
            .iter()
            .any(|span| span["operator"] == "Sue Support" && span["role"] == "support"),
        "{created_line}"
    );
    let finished = of_request
        .iter()
        .find(|line| {
            line["message"] == "request finished"
                && line["span"]["route"] == "/operator/v1/partners"
        })
        .unwrap_or_else(|| panic!("no access line naming the operator: {of_request:?}"));
    assert_eq!(finished["span"]["operator"], "Sue Support");
    // The latency is written to the microsecond: three decimals at most.
    let latency = finished["latency_ms"].to_string();
    let decimals = latency
        .split_once('.')
        .map_or(0, |(_, fraction)| fraction.len());
    assert!(decimals <= 3, "latency_ms {latency} in {finished}");
}
