//! `serve --profile loadtest`: the real binary starts with every limit
//! lifted, says so in its log, and a load test against it is never refused
//! for a rate; production refuses the profile.

use std::{
    process::Stdio,
    sync::{Arc, Mutex},
    time::Duration,
};

use serde_json::Value;
use tokio::io::AsyncBufReadExt;

use crate::helpers::eventually;

const BIN: &str = env!("CARGO_BIN_EXE_esim-reseller");

/// The `listening` address of `listener` in JSON log lines.
fn listener(lines: &[String], listener: &str) -> Option<String> {
    lines.iter().find_map(|line| {
        let json: Value = serde_json::from_str(line).ok()?;
        (json["listener"] == listener)
            .then(|| json["addr"].as_str().map(str::to_owned))
            .flatten()
    })
}

#[tokio::test]
async fn the_loadtest_profile_lifts_every_limit_and_says_so() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut serve = tokio::process::Command::new(BIN)
        .args(["serve", "--profile", "loadtest"])
        .env(
            "ESIM__DATABASE__URL",
            format!("sqlite://{}/s.db?mode=rwc", dir.path().display()),
        )
        .env("ESIM__HTTP__PUBLIC_ADDR", "127.0.0.1:0")
        .env("ESIM__HTTP__OPERATOR_ADDR", "127.0.0.1:0")
        .env("ESIM__SIMULATORS__ADDR", "127.0.0.1:0")
        .env("ESIM__LOG__FORMAT", "json")
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start the binary");
    let mut stdout = tokio::io::BufReader::new(serve.stdout.take().expect("stdout")).lines();
    let log = Arc::new(Mutex::new(Vec::<String>::new()));
    let collector = {
        let log = log.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = stdout.next_line().await {
                log.lock().expect("log lock").push(line);
            }
        })
    };
    let lines = || log.lock().expect("log lock").clone();
    let public = eventually("the public listener", Duration::from_secs(60), || async {
        listener(&lines(), "public")
    })
    .await;
    let operator = eventually("the operator listener", Duration::from_secs(60), || async {
        listener(&lines(), "operator")
    })
    .await;

    let started = lines();
    let warning = started
        .iter()
        .find(|l| l.contains("\"WARN\"") && l.contains("PROFILE loadtest"))
        .unwrap_or_else(|| panic!("no profile warning in:\n{}", started.join("\n")));
    for lifted in [
        "rate_limit.bands.gold.write.limit",
        "rate_limit.bands.sandbox.read.limit",
        "simulators.supplier_rate_limit = 0",
        "simulators.airalo_rate_limit_per_minute = 0",
        "simulators.supplier_latency_ms = 0",
        "simulators.airalo_latency_ms = 0",
        "supplier.requests_per_second = 0",
        "airalo.requests_per_second = 0",
    ] {
        assert!(warning.contains(lifted), "{lifted} not named in {warning}");
    }
    let warned_at = started.iter().position(|l| l == warning);
    let bound_at = started.iter().position(|l| l.contains("\"listener\""));
    assert!(warned_at < bound_at, "the warning comes before binding");

    let output = tokio::process::Command::new(BIN)
        .args(["loadtest", "--partners", "4", "--duration", "5", "--json"])
        .args(["--public-url", &format!("http://{public}")])
        .args(["--operator-url", &format!("http://{operator}")])
        .args(["--settle-timeout", "300"])
        .stderr(Stdio::null())
        .output()
        .await
        .expect("run loadtest");
    let printed = String::from_utf8_lossy(&output.stdout);
    let report: Value = printed
        .lines()
        .rev()
        .find_map(|line| serde_json::from_str(line).ok())
        .unwrap_or_else(|| panic!("no JSON report in:\n{printed}"));
    let responses = report["responses"].as_object().expect("responses");
    assert!(
        responses.keys().all(|answer| !answer.starts_with("429")),
        "refused for a rate under the profile: {report}"
    );
    assert_eq!(report["verdict"], "PASS", "{report}");
    assert!(report["accepted_orders"].as_u64() > Some(0), "{report}");
    assert!(report["warning"].is_null(), "{report}");
    assert_eq!(output.status.code(), Some(0), "{printed}");

    let _ = serve.start_kill();
    let _ = tokio::time::timeout(Duration::from_secs(30), serve.wait()).await;
    collector.abort();
}

#[tokio::test]
async fn production_refuses_the_loadtest_profile_and_says_why() {
    let output = tokio::process::Command::new(BIN)
        .args(["serve", "--profile", "loadtest"])
        .env("ESIM__SIMULATORS__ENABLED", "false")
        .env("ESIM__SUPPLIER__BASE_URL", "https://supplier.example")
        .env("ESIM__HTTP__PUBLIC_ADDR", "127.0.0.1:0")
        .env("ESIM__HTTP__OPERATOR_ADDR", "127.0.0.1:0")
        .env(
            "ESIM_CONFIG_DIR",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config"),
        )
        .kill_on_drop(true)
        .output()
        .await
        .expect("run serve");
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "serve must refuse: {said}");
    assert!(said.contains("--profile loadtest"), "{said}");
    assert!(said.contains("the simulators are off"), "{said}");

    let output = tokio::process::Command::new(BIN)
        .args(["serve", "--profile", "fastest"])
        .env("ESIM__HTTP__PUBLIC_ADDR", "127.0.0.1:0")
        .env("ESIM__HTTP__OPERATOR_ADDR", "127.0.0.1:0")
        .env("ESIM__SIMULATORS__ADDR", "127.0.0.1:0")
        .kill_on_drop(true)
        .output()
        .await
        .expect("run serve");
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "serve must refuse: {said}");
    assert!(said.contains("known: loadtest"), "{said}");
}
