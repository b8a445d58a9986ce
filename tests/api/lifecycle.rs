//! Supervision in the logs: the real binary's JSON log has one uniform line
//! per actor lifecycle event, for every kind of actor, from start through a
//! failure and restart to an orderly shutdown.

use std::collections::HashSet;

use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::ServeProcess;

const TOKEN: &str = "lifecycle-operator-token";
const KINDS: [&str; 5] = [
    "accounts_supervisor",
    "services_supervisor",
    "provisioning",
    "reconciler",
    "account",
];

#[tokio::test]
async fn every_actor_kind_logs_start_failure_restart_and_stop_in_one_shape() {
    let serve = ServeProcess::start(&[
        ("ESIM__OPERATOR__TOKEN", TOKEN),
        ("ESIM__OPERATOR__FAULT_INJECTION", "true"),
        ("ESIM__LOG__LEVEL", "info"),
        ("ESIM__SIMULATORS__SUPPLIER_LATENCY_MS", "0"),
    ])
    .await;
    let client = reqwest::Client::new();
    let (partner, key) = serve.live_partner(TOKEN).await;
    let partner_id = partner["id"].as_str().unwrap().to_owned();
    // First use starts the partner's account actor.
    let balance = client
        .get(format!("http://{}/partner/v1/balance", serve.public))
        .bearer_auth(key["secret"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(balance.status(), 200);
    let order = client
        .post(format!("http://{}/partner/v1/orders", serve.public))
        .bearer_auth(key["secret"].as_str().unwrap())
        .header("Idempotency-Key", "lifecycle-order-000001")
        .json(&json!({ "plan_id": "pl_fr_1gb_7d" }))
        .send()
        .await
        .unwrap();
    assert_eq!(
        order.status(),
        402,
        "no float: refused, but the actor decided"
    );
    let failed = serve
        .operator_call(
            TOKEN,
            Method::POST,
            &format!("/actors/{partner_id}/fail"),
            json!({}),
        )
        .await;
    assert!(failed.get("error").is_none(), "{failed}");
    let restarted = |lines: &[String]| {
        lines
            .iter()
            .any(|l| l.contains("\"restarted\"") && l.contains(&partner_id))
    };
    crate::helpers::eventually(
        "the account actor restarts",
        std::time::Duration::from_secs(30),
        || {
            let lines = serve.lines();
            async move { restarted(&lines).then_some(()) }
        },
    )
    .await;

    let lines = serve.terminate().await;
    let events: Vec<Value> = lines
        .iter()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|json| json.get("actor").is_some())
        .collect();
    let mut seen = HashSet::new();
    for event in &events {
        let kind = event["actor"].as_str().expect("actor is a string");
        let what = event["event"].as_str().expect("event is a string");
        assert!(KINDS.contains(&kind), "unknown actor kind: {event}");
        assert!(
            ["started", "stopped", "failed", "restarted", "passivating"].contains(&what),
            "unknown lifecycle event: {event}"
        );
        assert!(
            event["reason"].as_str().is_some_and(|r| !r.is_empty()),
            "{event}"
        );
        assert_eq!(event["message"], format!("actor {what}"), "{event}");
        let level = if what == "failed" { "ERROR" } else { "INFO" };
        assert_eq!(event["level"], level, "{event}");
        if kind == "account" {
            assert_eq!(event["partner_id"], partner_id.as_str(), "{event}");
        }
        seen.insert((kind.to_owned(), what.to_owned()));
    }
    for kind in KINDS {
        for what in ["started", "stopped"] {
            assert!(
                seen.contains(&(kind.to_owned(), what.to_owned())),
                "no `{what}` line for {kind}: {seen:?}"
            );
        }
    }
    for what in ["failed", "restarted"] {
        assert!(
            seen.contains(&("account".to_owned(), what.to_owned())),
            "{what}"
        );
    }
}
