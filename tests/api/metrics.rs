//! `/metrics` on the operator listener: Prometheus text without a token, and
//! the series that an order, a 429, a failed authentication, deposits and an
//! actor restart move. The recorder is process-wide and other tests run at the
//! same time, so counters are compared before and after (at least the
//! increase this test caused), never to exact values.

use std::time::Duration;

use reqwest::{Method, StatusCode, header::CONTENT_TYPE};
use serde_json::{Value, json};

use crate::helpers::{
    TestApp, balance, eventually, fund, live_partner, read, spawn_app, spawn_app_with,
};

const PLAN: &str = "pl_fr_1gb_7d";
const WAIT: Duration = Duration::from_secs(30);

/// Fast provisioning; a catalogue window of one request per hour, so the
/// second `GET /plans` is a 429; fault injection for the restart.
const SETTINGS: &[(&str, &str)] = &[
    ("supplier.retry_backoff_ms", "10"),
    ("supplier.poll_interval_ms", "20"),
    ("simulators.supplier_latency_ms", "0"),
    ("rate_limit.bands.bronze.read.limit", "100000"),
    ("rate_limit.bands.bronze.write.limit", "100000"),
    ("rate_limit.bands.bronze.catalogue.limit", "1"),
    ("rate_limit.bands.bronze.catalogue.window_seconds", "3600"),
    ("operator.fault_injection", "true"),
];

/// `GET /metrics` on the operator listener, without a token.
async fn scrape(app: &TestApp) -> String {
    let response = app
        .client
        .get(format!("{}/metrics", app.operator))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let content_type = response.headers()[CONTENT_TYPE]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    response.text().await.unwrap()
}

/// The sum of the samples of `name` whose labels include every one of
/// `labels` (0 when there is none).
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (metric, rest) = series.split_once('{').unwrap_or((series, ""));
            let rest = format!(",{rest}");
            let matches = metric == name
                && labels
                    .iter()
                    .all(|(k, v)| rest.contains(&format!(",{k}=\"{v}\"")));
            matches.then(|| value.parse::<f64>().ok()).flatten()
        })
        .sum()
}

/// Whether any series of `name` has all of `labels`.
fn has(text: &str, name: &str, labels: &[(&str, &str)]) -> bool {
    text.lines().any(|line| {
        let rest = line
            .strip_prefix(name)
            .and_then(|r| match r.strip_prefix('{') {
                Some(labelled) => Some(format!(",{labelled}")),
                // A series without labels: the name, a space, the value.
                None => r.starts_with(' ').then(String::new),
            });
        rest.is_some_and(|rest| {
            labels
                .iter()
                .all(|(k, v)| rest.contains(&format!(",{k}=\"{v}\"")))
        })
    })
}

async fn operator_post(app: &TestApp, path: &str, body: Value) -> (StatusCode, Value) {
    read(
        app.operator(Method::POST, path)
            .json(&body)
            .send()
            .await
            .unwrap(),
    )
    .await
}

#[tokio::test]
async fn metrics_are_prometheus_text_on_the_operator_listener_without_a_token() {
    let app = spawn_app().await;
    let text = scrape(&app).await;
    assert!(
        has(&text, "esim_actors_live", &[("kind", "account")]),
        "{text}"
    );
    assert!(
        has(&text, "esim_db_pool_connections", &[("state", "idle")]),
        "{text}"
    );
    assert!(
        sample(&text, "esim_db_pool_max_connections", &[]) >= 1.0,
        "{text}"
    );
    assert!(text.contains("# TYPE esim_actors_live gauge"), "{text}");
    // Read from the log writer when scraped: nothing dropped while the
    // output keeps up (none at all when the tests log nowhere).
    assert_eq!(
        sample(&text, "esim_log_lines_dropped_total", &[]),
        0.0,
        "{text}"
    );
    assert!(
        text.contains("# TYPE esim_log_lines_dropped_total counter"),
        "{text}"
    );

    let public = app
        .client
        .get(format!("{}/metrics", app.public))
        .send()
        .await
        .unwrap();
    assert_eq!(
        public.status(),
        StatusCode::NOT_FOUND,
        "not on the public listener"
    );
    let text = scrape(&app).await;
    assert!(
        sample(
            &text,
            "esim_http_requests_total",
            &[
                ("listener", "public"),
                ("route", "unmatched"),
                ("status", "404")
            ],
        ) >= 1.0,
        "{text}"
    );
    assert!(
        sample(
            &text,
            "esim_http_requests_total",
            &[
                ("listener", "operator"),
                ("route", "/metrics"),
                ("method", "GET")
            ],
        ) >= 1.0,
        "{text}"
    );
}

#[tokio::test]
async fn an_order_a_429_a_failed_authentication_deposits_and_a_restart_move_their_series() {
    let app = spawn_app_with(SETTINGS).await;
    let (partner, key) = app.partner_with_key(json!({}), "live").await;
    let partner_id = partner["id"].as_str().unwrap().to_owned();
    let secret = key["secret"].as_str().unwrap().to_owned();
    let before = scrape(&app).await;

    // A wire deposit funds the float: none -> credited.
    let (status, body) = operator_post(
        &app,
        &format!("/partners/{partner_id}/wire-deposits"),
        json!({ "amount_cents": 10_000, "reference": format!("wire-{partner_id}") }),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    // A crypto invoice: none -> pending.
    let (status, body) = read(
        app.as_partner(&secret, Method::POST, "/deposits")
            .json(&json!({ "amount_cents": 25_000 }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");

    // One live order, driven to delivered through the supplier simulator.
    let (status, order) = read(
        app.as_partner(&secret, Method::POST, "/orders")
            .header("idempotency-key", format!("metrics-{partner_id}"))
            .json(&json!({ "plan_id": PLAN, "quantity": 1 }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{order}");
    let order_id = order["id"].as_str().unwrap().to_owned();
    let order = eventually("the order to settle", WAIT, || async {
        let (status, order) = read(
            app.as_partner(&secret, Method::GET, &format!("/orders/{order_id}"))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{order}");
        (order["status"] != "processing").then_some(order)
    })
    .await;
    assert_eq!(order["status"], "completed", "{order}");

    // A window 429: the catalogue class allows one request per hour. (Should
    // the hour turn between two requests, the third is refused.)
    let mut refused = false;
    for _ in 0..3 {
        let response = app
            .as_partner(&secret, Method::GET, "/plans?limit=1")
            .send()
            .await
            .unwrap();
        if response.status() == StatusCode::TOO_MANY_REQUESTS {
            refused = true;
            break;
        }
    }
    assert!(refused, "the catalogue window refuses");

    // A failed authentication.
    let response = app
        .as_partner("svc_sk_live_not-a-real-key", Method::GET, "/me")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);

    // An account actor failure, restarted by its supervisor.
    let (status, body) =
        operator_post(&app, &format!("/actors/{partner_id}/fail"), json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let increased = |after: &str, name: &str, labels: &[(&str, &str)]| {
        sample(after, name, labels) - sample(&before, name, labels)
    };
    // Settlement and restarts are counted just after they are visible
    // through the API: poll the scrape until both show.
    let after = eventually("settlement and restart in the metrics", WAIT, || async {
        let after = scrape(&app).await;
        let settled = increased(
            &after,
            "esim_orders_settled_total",
            &[
                ("mode", "live"),
                ("status", "completed"),
                ("failure_code", "none"),
            ],
        );
        let restarted = increased(&after, "esim_actor_restarts_total", &[("kind", "account")]);
        (settled >= 1.0 && restarted >= 1.0).then_some(after)
    })
    .await;

    let at_least_one: &[(&str, &[(&str, &str)])] = &[
        ("esim_orders_accepted_total", &[("mode", "live")]),
        (
            "esim_provisioning_duration_seconds_count",
            &[("mode", "live"), ("status", "completed")],
        ),
        (
            "esim_supplier_calls_total",
            &[("operation", "place_order"), ("outcome", "ok")],
        ),
        (
            "esim_supplier_calls_total",
            &[("operation", "query"), ("outcome", "ok")],
        ),
        (
            "esim_supplier_call_duration_seconds_count",
            &[("operation", "place_order")],
        ),
        (
            "esim_deposit_transitions_total",
            &[("from", "none"), ("to", "credited")],
        ),
        (
            "esim_deposit_transitions_total",
            &[("from", "none"), ("to", "pending")],
        ),
        (
            "esim_rate_limit_rejections_total",
            &[("class", "catalogue")],
        ),
        ("esim_auth_failures_total", &[("code", "auth.invalid_key")]),
        ("esim_auth_key_reads_total", &[]),
        (
            "esim_http_requests_total",
            &[
                ("listener", "public"),
                ("route", "/partner/v1/orders"),
                ("method", "POST"),
                ("status", "202"),
            ],
        ),
        (
            "esim_http_requests_total",
            &[
                ("listener", "public"),
                ("route", "/partner/v1/orders/{id}"),
                ("method", "GET"),
                ("status", "200"),
            ],
        ),
        (
            "esim_http_request_duration_seconds_count",
            &[("listener", "public"), ("route", "/partner/v1/orders/{id}")],
        ),
        (
            "esim_http_requests_total",
            &[("route", "/partner/v1/plans"), ("status", "429")],
        ),
        (
            "esim_http_requests_total",
            &[("route", "/partner/v1/me"), ("status", "401")],
        ),
        (
            "esim_http_requests_total",
            &[
                ("listener", "operator"),
                ("route", "/operator/v1/partners/{id}/wire-deposits"),
                ("status", "201"),
            ],
        ),
    ];
    for (name, labels) in at_least_one {
        assert!(
            increased(&after, name, labels) >= 1.0,
            "{name} {labels:?} did not increase:\n{after}"
        );
    }
    assert!(
        has(
            &after,
            "esim_http_request_duration_seconds_bucket",
            &[("route", "/partner/v1/orders/{id}"), ("le", "+Inf")],
        ),
        "a histogram, not a summary:\n{after}"
    );
    assert!(
        !after.contains(&order_id),
        "a request is labelled with its route template, never its id"
    );
    assert!(has(&after, "esim_actors_live", &[("kind", "account")]));
    assert!(has(
        &after,
        "esim_actor_mailbox_messages",
        &[("kind", "account")]
    ));
}

/// Orders placed at once by several partners are committed together by the
/// shared writer (`path="shared"`, several batches in one transaction); in
/// per-request mode every batch commits alone. Counted per transaction, with
/// the group's size as histograms.
#[tokio::test]
async fn committed_orders_are_counted_with_the_size_of_their_group() {
    const PARTNERS: usize = 3;
    const EACH: usize = 4;
    for (commit_mode, path) in [("batch", "shared"), ("per_request", "alone")] {
        let app = spawn_app_with(&[("store.commit_mode", commit_mode)]).await;
        let mut secrets = Vec::new();
        for _ in 0..PARTNERS {
            let (partner_id, secret) = live_partner(&app).await;
            fund(&app, &partner_id, 1_000_000).await;
            secrets.push(secret);
        }
        let before = scrape(&app).await;
        let mut placed = Vec::new();
        for secret in &secrets {
            for n in 0..EACH {
                let request = app
                    .as_partner(secret, Method::POST, "/orders")
                    .header(
                        "idempotency-key",
                        format!("commit-size-{commit_mode}-{n}-{secret}"),
                    )
                    .json(&json!({ "plan_id": PLAN, "quantity": 1 }));
                placed.push(async move { request.send().await.unwrap().status() });
            }
        }
        for status in futures::future::join_all(placed).await {
            assert_eq!(status, StatusCode::ACCEPTED);
        }
        let after = scrape(&app).await;
        let increased = |name: &str| {
            sample(&after, name, &[("path", path)]) - sample(&before, name, &[("path", path)])
        };
        let orders = (PARTNERS * EACH) as f64;
        assert!(
            increased("esim_order_commit_orders_sum") >= orders,
            "{path}:\n{after}"
        );
        assert!(
            increased("esim_order_commit_batches_sum") >= PARTNERS as f64,
            "{path}:\n{after}"
        );
        let commits = increased("esim_order_commits_total");
        assert!(commits >= 1.0, "{path}:\n{after}");
        assert!(
            increased("esim_order_commit_orders_count") >= 1.0,
            "{path}:\n{after}"
        );
        if path == "alone" {
            assert!(
                commits >= orders,
                "per request, each order commits alone:\n{after}"
            );
        }
        assert!(
            has(
                &after,
                "esim_order_commit_orders_bucket",
                &[("path", path), ("le", "+Inf")]
            ),
            "a histogram, not a summary:\n{after}"
        );
    }
}

#[test]
fn sample_sums_the_series_that_carry_the_labels() {
    let text = "# TYPE x counter\n\
                x{a=\"1\",b=\"2\"} 3\n\
                x{a=\"1\",b=\"3\"} 4\n\
                xy{a=\"1\"} 100\n\
                x{ba=\"1\"} 50\n\
                y 7\n";
    assert_eq!(sample(text, "x", &[("a", "1")]), 7.0);
    assert_eq!(sample(text, "x", &[("b", "2")]), 3.0);
    assert_eq!(sample(text, "x", &[("a", "2")]), 0.0);
    assert_eq!(sample(text, "y", &[]), 7.0);
    assert!(has(text, "x", &[("b", "3")]));
    assert!(has(text, "y", &[]), "a series without labels");
    assert!(!has(text, "x", &[("a", "2")]));
    assert!(!has(text, "z", &[]));
    assert!(!has(text, "x", &[("c", "1")]));
}

/// On a SQLite file `GET /balance` reads the float on the handler's thread;
/// on PostgreSQL through the pool, gathered into rounds; each read is fresh
/// either way: a credit made through the account actor is seen by the next
/// read.
#[tokio::test]
async fn balance_reads_are_answered_inline_on_a_sqlite_file_gathered_on_postgres_and_fresh() {
    let app = spawn_app().await;
    let (partner, secret) = live_partner(&app).await;
    fund(&app, &partner, 1_000).await;
    assert_eq!(balance(&app, &secret).await, 1_000);
    fund(&app, &partner, 500).await;
    assert_eq!(balance(&app, &secret).await, 1_500);
    let text = scrape(&app).await;
    if app.database_url.starts_with("sqlite:") {
        assert!(
            sample(
                &text,
                "esim_db_inline_reads_total",
                &[("outcome", "answered")]
            ) >= 2.0,
            "{text}"
        );
        assert!(has(
            &text,
            "esim_db_inline_reads_total",
            &[("outcome", "fell_back")]
        ));
        assert_eq!(sample(&text, "esim_db_gathered_reads_total", &[]), 0.0);
    } else {
        let reads = sample(&text, "esim_db_gathered_reads_total", &[]);
        let rounds = sample(&text, "esim_db_gathered_rounds_total", &[]);
        assert!(reads >= 2.0 && rounds >= 1.0 && rounds <= reads, "{text}");
        assert!(!has(&text, "esim_db_inline_reads_total", &[]), "{text}");
    }
}

/// On a SQLite file the order path's write transactions run on their
/// writers' own threads: accepting the order, writing its supplier order
/// down and storing its profile are each counted as committed inline, and
/// the WAL's pages after the last commit are shown. PostgreSQL has no
/// inline writer and no such series.
#[tokio::test]
async fn an_order_s_writes_to_a_sqlite_file_are_committed_inline() {
    let app = spawn_app_with(SETTINGS).await;
    let (partner_id, secret) = live_partner(&app).await;
    fund(&app, &partner_id, 10_000).await;
    let committed = |text: &str, writer: &str| {
        sample(
            text,
            "esim_db_inline_writes_total",
            &[("writer", writer), ("outcome", "committed")],
        )
    };
    let before = scrape(&app).await;

    let (status, order) = read(
        app.as_partner(&secret, Method::POST, "/orders")
            .header("idempotency-key", format!("inline-{partner_id}"))
            .json(&json!({ "plan_id": PLAN, "quantity": 2 }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{order}");
    let path = format!("/orders/{}", order["id"].as_str().unwrap());
    let settled = eventually("the order to settle", WAIT, || async {
        let (_, order) = read(
            app.as_partner(&secret, Method::GET, &path)
                .send()
                .await
                .unwrap(),
        )
        .await;
        (order["status"] != "processing").then_some(order)
    })
    .await;
    assert_eq!(settled["status"], "completed", "{settled}");
    assert_eq!(
        settled["esims"].as_array().map(Vec::len),
        Some(2),
        "{settled}"
    );
    assert_eq!(
        balance(&app, &secret).await,
        10_000 - settled["total_cents"].as_i64().unwrap()
    );

    let after = scrape(&app).await;
    let commits = |text: &str| sample(text, "esim_db_inline_commit_writes_count", &[]);
    let commit_times = |text: &str| sample(text, "esim_db_inline_commit_seconds_count", &[]);
    if app.database_url.starts_with("sqlite:") {
        for writer in ["orders", "deliveries"] {
            assert!(
                committed(&after, writer) >= committed(&before, writer) + 1.0,
                "{writer}:\n{after}"
            );
        }
        // Written down, the call counted before it is sent, the order number,
        // allocated: each a write of the inline connection, none a commit of its own.
        assert!(
            committed(&after, "supplier_orders") >= committed(&before, "supplier_orders") + 4.0,
            "{after}"
        );
        assert!(commits(&after) > commits(&before), "{after}");
        // Each commit is timed too, in the commit buckets (a histogram, not
        // a summary).
        assert!(commit_times(&after) > commit_times(&before), "{after}");
        assert!(
            has(
                &after,
                "esim_db_inline_commit_seconds_bucket",
                &[("le", "0.0005")]
            ),
            "{after}"
        );
        assert!(sample(&after, "esim_db_wal_pages", &[]) > 0.0, "{after}");
        // Set from the scraped application's gate; the test applications of
        // this process share the series, so only its presence is this one's.
        for name in [
            "esim_db_write_gate_turns_total",
            "esim_db_write_gate_held_microseconds_total",
        ] {
            assert!(sample(&after, name, &[]) > 0.0, "{name}:\n{after}");
        }
    } else {
        assert!(!has(&after, "esim_db_inline_writes_total", &[]), "{after}");
        assert!(!has(&after, "esim_db_wal_pages", &[]), "{after}");
        assert!(
            !has(&after, "esim_db_write_gate_turns_total", &[]),
            "{after}"
        );
        assert_eq!(commits(&after), 0.0, "{after}");
        assert!(
            !has(&after, "esim_db_inline_commit_seconds_count", &[]),
            "{after}"
        );
    }
}
