//! The docs are executable: the README's tour (the operator CLI, then the
//! partner API) and the partner quickstart run their shell blocks in order
//! against a fresh server and end with an installable eSIM; every
//! operation's samples (curl, Python, JavaScript), generated from the
//! OpenAPI examples, run against it and get the documented status and a
//! body that fits the documented schema; every page and internal link of
//! `/docs` answers.
//!
//! The tour and the quickstart need bash, curl and jq; the samples curl, Python with
//! `requests` and Node.js 18 or later. A machine without one of them skips
//! what needs it, unless `DOCS_SAMPLES_REQUIRED=1` (set by `.ci/run`, which
//! installs what is missing).

use std::{collections::BTreeSet, process::Stdio, time::Duration};

use esim_reseller::docs::{self, samples::Samples};
use reqwest::Method;
use serde_json::{Value, json};

use crate::{
    helpers::{
        OPERATOR_TOKEN, TestApp, eventually, fund, live_partner, read, sandbox_key, spawn_app,
        spawn_app_with,
    },
    openapi::validator_for,
};

/// The fenced blocks of a Markdown text in one language.
fn blocks<'a>(markdown: &'a str, language: &str) -> Vec<&'a str> {
    let fence = format!("```{language}\n");
    markdown
        .split(fence.as_str())
        .skip(1)
        .filter_map(|rest| rest.split("\n```").next())
        .collect()
}

/// Runs a program with the docs' environment; its exit status and output.
async fn run(program: &str, args: &[&str], env: &[(&str, String)]) -> (bool, String, String) {
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (name, value) in env {
        command.env(name, value);
    }
    let child = command.spawn().unwrap_or_else(|e| panic!("{program}: {e}"));
    let output = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{program} {args:?} ran over a minute"))
        .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test]
async fn the_quickstart_takes_a_sandbox_key_to_an_installable_esim() {
    if !available("the quickstart's", "jq", &["--version"]).await {
        return;
    }
    let app = spawn_app().await;
    let (partner_id, _) = live_partner(&app).await;
    let key = sandbox_key(&app, &partner_id).await;
    let script = format!(
        "set -euo pipefail\n{}",
        blocks(docs::QUICKSTART, "sh").join("\n")
    );
    let env = [
        ("ESIM_API", format!("{}/partner/v1", app.public)),
        ("ESIM_KEY", key),
    ];
    let (ok, stdout, stderr) = run("bash", &["-c", &script], &env).await;
    assert!(ok, "the quickstart failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("\"status\": \"completed\""), "{stdout}");
    assert!(
        stdout.contains("LPA:1$"),
        "no activation code at the end:\n{stdout}"
    );
    assert!(stdout.contains("https://esimsetup.apple.com/"), "{stdout}");
}

/// The README's tour, from the operator CLI to an installed eSIM, as its
/// reader runs it: its shell blocks in order, against a fresh server, with
/// only the service's address and the way to run the binary put in.
#[tokio::test]
async fn the_readme_tour_takes_a_new_partner_to_an_installed_esim() {
    const RUN_THE_CLI: &str = "esim() { cargo run -q -- \"$@\"; }";
    if !available("the README tour's", "jq", &["--version"]).await {
        return;
    }
    let readme = include_str!("../../README.md");
    let tour = readme
        .split("\n## A five-minute tour\n")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("the README has a five-minute tour");
    let script = blocks(tour, "sh").join("\n");
    assert!(
        script.contains(RUN_THE_CLI),
        "the tour runs the CLI through cargo:\n{script}"
    );
    let app = spawn_app().await;
    let dir = tempfile::tempdir().unwrap();
    let script = format!(
        "set -euo pipefail\ncd \"$TOUR_DIR\"\n{}",
        script
            .replace(RUN_THE_CLI, "esim() { \"$ESIM_BIN\" \"$@\"; }")
            .replace("localhost:8080", &app_address(&app.public))
    );
    let env = [
        ("TOUR_DIR", dir.path().display().to_string()),
        ("ESIM_BIN", env!("CARGO_BIN_EXE_esim-reseller").to_owned()),
        ("ESIM_OPERATOR_URL", app.operator.clone()),
        ("ESIM_OPERATOR_TOKEN", OPERATOR_TOKEN.to_owned()),
    ];
    let (ok, stdout, stderr) = run("bash", &["-c", &script], &env).await;
    assert!(ok, "the tour failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("\"discount_bps\":1500"), "{stdout}");
    assert!(
        stdout.contains("{\"status\":\"completed\",\"esims\":[\"8"),
        "{stdout}"
    );
    assert!(stdout.contains("https://esimsetup.apple.com/"), "{stdout}");
    // The answers end without a newline: the balance is the output's end.
    assert!(
        stdout.trim_end().ends_with("}49406"),
        "the balance the tour ends with:\n{stdout}"
    );
    let png = std::fs::read(dir.path().join("esim.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "esim.png is a PNG");
}

/// `host:port` of a listener's `http://host:port`.
fn app_address(url: &str) -> String {
    url.trim_start_matches("http://").to_owned()
}

/// What the samples read, set up as a partner would have it: a funded live
/// key, a delivered order, a deposit.
async fn sample_environment(app: &TestApp) -> Vec<(&'static str, String)> {
    let (partner_id, key) = live_partner(app).await;
    fund(app, &partner_id, 500_000).await;
    let (status, order) = read(
        app.as_partner(&key, Method::POST, "/orders")
            .header("Idempotency-Key", "docs-samples-setup-0001")
            .json(&json!({ "plan_id": "pl_fr_1gb_7d" }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 202, "{order}");
    let order_id = order["id"].as_str().unwrap().to_owned();
    let iccid = eventually("the setup order completes", Duration::from_secs(30), || {
        let path = format!("/orders/{order_id}");
        let key = key.clone();
        async move {
            let (_, order) =
                read(app.as_partner(&key, Method::GET, &path).send().await.ok()?).await;
            order["esims"][0]["iccid"].as_str().map(str::to_owned)
        }
    })
    .await;
    let (status, deposit) = read(
        app.as_partner(&key, Method::POST, "/deposits")
            .json(&json!({ "amount_cents": 25000 }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 201, "{deposit}");
    vec![
        ("ESIM_API", format!("{}/partner/v1", app.public)),
        ("ESIM_KEY", key),
        ("ORDER_ID", order_id),
        ("PLAN_ID", "pl_fr_1gb_7d".to_owned()),
        ("DEPOSIT_ID", deposit["id"].as_str().unwrap().to_owned()),
        ("ICCID", iccid),
    ]
}

/// Whether a language's runtime is here; required under `DOCS_SAMPLES_REQUIRED=1`.
async fn available(language: &str, program: &str, probe: &[&str]) -> bool {
    let present = probe_ok(program, probe).await;
    let required = std::env::var("DOCS_SAMPLES_REQUIRED").is_ok_and(|v| v == "1");
    assert!(
        present || !required,
        "{language} samples are required but `{program} {probe:?}` failed"
    );
    if !present {
        eprintln!("skipping the {language} samples: `{program} {probe:?}` failed");
    }
    present
}

/// Whether a program runs and succeeds (`false` when it is not installed).
async fn probe_ok(program: &str, args: &[&str]) -> bool {
    tokio::process::Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await
        .is_ok_and(|status| status.success())
}

/// The status and body a sample printed: curl through a wrapper that writes
/// the status last, Python and JavaScript as `<status> <body>`.
fn answer_of(language: &str, stdout: &str) -> (u16, Value) {
    let (status, body) = match language {
        "curl" => {
            let (body, status) = stdout.trim_end().rsplit_once('\n').unwrap_or(("", stdout));
            (status.trim().to_owned(), body.to_owned())
        }
        _ => {
            let (status, body) = stdout.trim().split_once(' ').unwrap_or((stdout, ""));
            (status.to_owned(), body.to_owned())
        }
    };
    let status = status
        .parse()
        .unwrap_or_else(|_| panic!("no status in {stdout:?}"));
    let body = serde_json::from_str(&body).unwrap_or_else(|_| json!(body));
    (status, body)
}

/// The program that runs a sample, printing status and JSON body.
fn command_for(language: &str, sample: &Samples) -> (&'static str, Vec<String>) {
    match language {
        // curl answers its body, then the status on a line of its own.
        "curl" => (
            "bash",
            vec![
                "-c".into(),
                format!(
                    "set -euo pipefail\ncurl() {{ command curl -w '\\n%{{http_code}}' \"$@\"; }}\n{}",
                    sample.curl
                ),
            ],
        ),
        // The sample prints a Python dict; print the body as JSON instead.
        "python" => (
            "python3",
            vec![
                "-c".into(),
                sample.python.replace(
                    "print(response.status_code, response.json())",
                    "import json\nprint(response.status_code, json.dumps(response.json()))",
                ),
            ],
        ),
        _ => (
            "node",
            vec![
                "--input-type=module".into(),
                "-e".into(),
                sample.javascript.replace(
                    "console.log(response.status, await response.json());",
                    "console.log(response.status, JSON.stringify(await response.json()));",
                ),
            ],
        ),
    }
}

#[tokio::test]
async fn every_sample_of_the_reference_gets_its_documented_answer() {
    // The samples run back to back, faster than a bronze key may read.
    let app = spawn_app_with(&[("rate_limit.bands.bronze.read.limit", "1000")]).await;
    let env = sample_environment(&app).await;
    let doc = esim_reseller::http::openapi::to_value();
    if !available("curl", "curl", &["--version"]).await {
        return;
    }
    let python = available("Python", "python3", &["-c", "import requests"]).await;
    let javascript = available("JavaScript", "node", &["-e", "fetch"]).await;
    let mut ran = 0;
    for sample in docs::samples::all(&doc) {
        let op = &doc["paths"][&sample.path][sample.method.to_ascii_lowercase()];
        let schema = &op["responses"][sample.success_status.to_string()]["content"]["application/json"]
            ["schema"];
        for language in ["curl", "python", "javascript"] {
            if (language == "python" && !python) || (language == "javascript" && !javascript) {
                continue;
            }
            let (program, args) = command_for(language, &sample);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let (ok, stdout, stderr) = run(program, &args, &env).await;
            let at = format!("{} {} ({language})", sample.method, sample.path);
            assert!(ok, "{at} failed:\n{stdout}\n{stderr}");
            let (status, body) = answer_of(language, &stdout);
            assert_eq!(
                status, sample.success_status,
                "{at} answered {status}: {body}"
            );
            let problems: Vec<String> = validator_for(&doc, schema)
                .iter_errors(&body)
                .map(|e| format!("{e} at {}", e.instance_path()))
                .collect();
            assert!(
                problems.is_empty(),
                "{at}: the answer does not fit its schema: {problems:?}\n{body}"
            );
            ran += 1;
        }
    }
    assert!(ran >= 18, "only {ran} samples ran");
}

#[tokio::test]
async fn every_docs_page_and_internal_link_answers() {
    let app = spawn_app().await;
    let mut pages = vec!["/docs".to_owned(), "/docs/changelog".to_owned()];
    let mut seen = BTreeSet::new();
    while let Some(page) = pages.pop() {
        if !seen.insert(page.clone()) {
            continue;
        }
        let response = app
            .client
            .get(format!("{}{page}", app.public))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{page}");
        let html = response.text().await.unwrap();
        assert!(
            !html.contains("src=\"http"),
            "{page} loads something remote"
        );
        for link in html
            .split("href=\"")
            .skip(1)
            .filter_map(|rest| rest.split('"').next())
        {
            let target = link.split('#').next().unwrap_or_default();
            if target.starts_with("/docs") {
                pages.push(target.to_owned());
            } else if target.starts_with('/') {
                let response = app
                    .client
                    .get(format!("{}{target}", app.public))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(response.status(), 200, "{page} links to {target}");
            }
        }
    }
    for expected in [
        "/docs/quickstart",
        "/docs/api",
        "/docs/errors",
        "/docs/guides/idempotency",
        "/docs/guides/sandbox",
    ] {
        assert!(
            seen.contains(expected),
            "no link reaches {expected}: {seen:?}"
        );
    }
    assert!(seen.len() >= 10, "{seen:?}");
}
