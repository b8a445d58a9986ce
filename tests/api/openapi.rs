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

/// A validator for one schema of the document, `$ref`s resolved within it
/// (formats such as `date-time` asserted).
pub(crate) fn validator_for(doc: &Value, schema: &Value) -> jsonschema::Validator {
    let mut root = serde_json::json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "components": doc["components"].clone(),
    });
    for (key, value) in schema.as_object().unwrap() {
        root[key] = value.clone();
    }
    jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        .should_validate_formats(true)
        .build(&root)
        .unwrap_or_else(|e| panic!("not a valid schema: {e}"))
}

fn assert_valid(doc: &Value, at: &str, schema: &Value, example: &Value) {
    let validator = validator_for(doc, schema);
    let problems: Vec<String> = validator
        .iter_errors(example)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        problems.is_empty(),
        "the example of {at} does not fit its schema:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn every_schema_carries_an_example_that_fits_it() {
    let doc = esim_reseller::http::openapi::to_value();
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    for (name, schema) in schemas {
        let examples = schema["examples"]
            .as_array()
            .unwrap_or_else(|| panic!("schema {name} has no examples"));
        assert!(!examples.is_empty(), "schema {name} has no examples");
        for example in examples {
            let reference = serde_json::json!({ "$ref": format!("#/components/schemas/{name}") });
            assert_valid(&doc, name, &reference, example);
        }
    }
}

#[test]
fn every_request_body_and_success_answer_carries_an_example_that_fits_it() {
    let doc = esim_reseller::http::openapi::to_value();
    for (at, op) in operations(&doc) {
        let mut media = Vec::new();
        if let Some(body) = op["requestBody"]["content"]["application/json"].as_object() {
            media.push((format!("{at} request body"), body.clone()));
        }
        for (status, response) in op["responses"].as_object().unwrap() {
            if let Some(content) = response["content"]["application/json"].as_object()
                && status.starts_with('2')
            {
                media.push((format!("{at} {status}"), content.clone()));
            }
        }
        for (place, content) in media {
            let example = content
                .get("example")
                .unwrap_or_else(|| panic!("{place} has no example"));
            assert_valid(&doc, &place, &content["schema"], example);
        }
    }
}

/// The check above is worth something only if a wrong example fails it.
#[test]
fn an_example_that_breaks_its_schema_is_caught() {
    let doc = esim_reseller::http::openapi::to_value();
    let order = serde_json::json!({ "$ref": "#/components/schemas/OrderView" });
    let mut wrong = doc["components"]["schemas"]["OrderView"]["examples"][0].clone();
    wrong["status"] = serde_json::json!("shipped");
    assert!(!validator_for(&doc, &order).is_valid(&wrong));
    let mut wrong_id = doc["components"]["schemas"]["OrderView"]["examples"][0].clone();
    wrong_id["id"] = serde_json::json!("pl_not_an_order");
    assert!(!validator_for(&doc, &order).is_valid(&wrong_id));
    let mut missing = doc["components"]["schemas"]["OrderView"]["examples"][0].clone();
    missing.as_object_mut().unwrap().remove("completed_at");
    assert!(!validator_for(&doc, &order).is_valid(&missing));
}
