//! The published contract: the OpenAPI document, its committed copy, and the
//! reference pages rendered from it.

use serde_json::Value;

use crate::helpers::spawn_app;

const REGENERATE: &str = "cargo run -q -- openapi > openapi.json";

#[test]
fn the_committed_openapi_json_is_the_generated_document() {
    let committed = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.json"))
        .unwrap_or_else(|e| panic!("openapi.json is missing ({e}); run `{REGENERATE}`"));
    let generated = esim_reseller::http::openapi::to_json();
    assert!(
        committed == generated,
        "openapi.json differs from the document the code generates; run `{REGENERATE}` and commit it"
    );
}

#[tokio::test]
async fn the_document_is_served_without_a_key_and_names_its_server_relatively() {
    let app = spawn_app().await;
    let response = app
        .client
        .get(format!("{}/partner/v1/openapi.json", app.public))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json")
    );
    assert!(response.headers().get("x-ratelimit-limit").is_none());
    let doc: Value = response.json().await.unwrap();
    assert_eq!(doc, esim_reseller::http::openapi::to_value());
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(doc["servers"][0]["url"], "/partner/v1");
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
}

/// Every (method, path) of the document, as `"GET /plans/{id}"`.
fn operations(doc: &Value) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            out.push((format!("{} {path}", method.to_uppercase()), op.clone()));
        }
    }
    out
}

#[test]
fn every_partner_route_is_documented_with_its_headers_and_errors() {
    let doc = esim_reseller::http::openapi::to_value();
    let mut names: Vec<String> = operations(&doc).into_iter().map(|(n, _)| n).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "GET /balance",
            "GET /deposits",
            "GET /deposits/{id}",
            "GET /destinations",
            "GET /esims",
            "GET /esims/{iccid}",
            "GET /esims/{iccid}/install",
            "GET /esims/{iccid}/usage",
            "GET /health",
            "GET /ledger",
            "GET /me",
            "GET /orders",
            "GET /orders/{id}",
            "GET /plans",
            "GET /plans/{id}",
            "GET /plans/{id}/price",
            "POST /deposits",
            "POST /orders",
        ]
    );
    for (name, op) in operations(&doc) {
        let responses = op["responses"].as_object().unwrap();
        for (status, response) in responses {
            assert_eq!(
                response["headers"]["X-Request-Id"]["required"], true,
                "{name} {status}"
            );
            if !status.starts_with('2') && name != "GET /health" {
                assert_eq!(
                    response["content"]["application/json"]["schema"]["$ref"],
                    "#/components/schemas/Error",
                    "{name} {status}"
                );
            }
        }
        if name == "GET /health" {
            assert!(op.get("security").is_none());
            continue;
        }
        assert_eq!(op["security"][0]["bearer"], Value::Array(vec![]), "{name}");
        for status in ["401", "403", "429"] {
            assert!(responses.contains_key(status), "{name} lacks {status}");
        }
        assert!(
            responses["429"]["headers"].get("Retry-After").is_some(),
            "{name}"
        );
        let ok = responses
            .iter()
            .find(|(s, _)| s.starts_with('2'))
            .unwrap()
            .1;
        for header in [
            "X-RateLimit-Limit",
            "X-RateLimit-Remaining",
            "X-RateLimit-Reset",
        ] {
            assert_eq!(ok["headers"][header]["required"], true, "{name} {header}");
        }
    }
    let create = &doc["paths"]["/orders"]["post"];
    assert_eq!(create["parameters"][0]["name"], "Idempotency-Key");
    assert_eq!(create["parameters"][0]["required"], true);
    assert!(
        create["responses"]["200"]["headers"]
            .get("Idempotency-Replayed")
            .is_some()
    );
    for body in ["OrderBody", "NewDeposit"] {
        assert_eq!(
            doc["components"]["schemas"][body]["additionalProperties"], false,
            "{body}"
        );
    }
    for (query, path) in [("/plans", "get"), ("/orders", "get"), ("/ledger", "get")] {
        let params = doc["paths"][query][path]["parameters"].as_array().unwrap();
        assert!(params.iter().any(|p| p["name"] == "cursor"), "{query}");
    }
}

#[tokio::test]
async fn the_reference_pages_are_served_with_an_anchor_per_operation_and_nothing_remote() {
    let app = spawn_app().await;
    let get = |path: &str| {
        let url = format!("{}{path}", app.public);
        let path = path.to_owned();
        let client = app.client.clone();
        async move {
            let response = client.get(url).send().await.unwrap();
            assert_eq!(response.status(), 200, "{path}");
            assert!(
                response.headers()["content-type"]
                    .to_str()
                    .unwrap()
                    .starts_with("text/html")
            );
            response.text().await.unwrap()
        }
    };
    let index = get("/docs").await;
    for link in [
        "href=\"/docs/api\"",
        "href=\"/docs/errors\"",
        "/partner/v1/openapi.json",
    ] {
        assert!(index.contains(link), "index lacks {link}");
    }
    let api = get("/docs/api").await;
    let doc = esim_reseller::http::openapi::to_value();
    for (name, op) in operations(&doc) {
        let anchor = format!("id=\"{}\"", op["operationId"].as_str().unwrap());
        assert!(api.contains(&anchor), "{name}: no {anchor}");
    }
    for schema in doc["components"]["schemas"].as_object().unwrap().keys() {
        assert!(api.contains(&format!("id=\"schema-{schema}\"")), "{schema}");
    }
    for page in [&index, &api] {
        assert!(!page.contains("<script"), "pages carry no script");
        assert!(!page.contains("src=\"http"), "pages fetch nothing remote");
        assert!(!page.contains("href=\"http"), "pages link nothing remote");
    }
}
