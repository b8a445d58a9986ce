//! Backups of the embedded SQLite database: a copy taken under order load
//! verifies, a service started on it answers every order and balance it
//! holds, a damaged, truncated, foreign or inconsistent copy is refused by
//! name, periodic backups run, verify and show their age, and `verify`
//! without a file checks the serving database (SQLite or PostgreSQL) where
//! it stands.

use std::{path::Path, time::Duration};

use reqwest::StatusCode;
use sea_orm::{ConnectionTrait, Database, Statement};
use serde_json::{Value, json};

use crate::helpers::{
    OPERATOR_TOKEN, ServeProcess, eventually, fund, live_partner, post_order, read, spawn_app,
};

const PLAN: &str = "pl_fr_1gb_7d";
const BIN: &str = env!("CARGO_BIN_EXE_esim-reseller");

fn sqlite_url(path: &Path) -> String {
    format!("sqlite://{}?mode=rwc", path.display())
}

/// A node on the SQLite file `db`.
async fn node(db: &Path, extra: &[(&str, &str)]) -> ServeProcess {
    let url = sqlite_url(db);
    let mut envs = vec![
        ("ESIM__DATABASE__URL", url.as_str()),
        ("ESIM__OPERATOR__TOKEN", OPERATOR_TOKEN),
        ("ESIM__SIMULATORS__SUPPLIER_LATENCY_MS", "0"),
        ("ESIM__RATE_LIMIT__BANDS__GOLD__WRITE__LIMIT", "100000"),
        ("ESIM__RATE_LIMIT__BANDS__GOLD__READ__LIMIT", "100000"),
    ];
    envs.extend_from_slice(extra);
    ServeProcess::start(&envs).await
}

/// Runs the binary with the database at `db`: (exit code, stdout).
async fn command(db: &Path, args: &[&str]) -> (i32, String) {
    command_on(&sqlite_url(db), args).await
}

/// Runs the binary with the database at `url`: (exit code, stdout).
async fn command_on(url: &str, args: &[&str]) -> (i32, String) {
    let output = tokio::process::Command::new(BIN)
        .args(args)
        .env("ESIM__DATABASE__URL", url)
        .env(
            "ESIM_CONFIG_DIR",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config"),
        )
        .output()
        .await
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.code().unwrap_or(-1), said)
}

async fn verify(file: &Path) -> (i32, String) {
    command(file, &["verify", file.to_str().unwrap()]).await
}

/// A funded live partner of `node`: its secret.
async fn funded_partner(node: &ServeProcess) -> String {
    let (partner, key) = node.live_partner(OPERATOR_TOKEN).await;
    let id = partner["id"].as_str().unwrap();
    node.fund(OPERATOR_TOKEN, id, 10_000_000).await;
    key["secret"].as_str().unwrap().to_owned()
}

async fn partner_get(node: &ServeProcess, secret: &str, path: &str) -> (StatusCode, Value) {
    read(
        reqwest::Client::new()
            .get(format!("http://{}/partner/v1{path}", node.public))
            .bearer_auth(secret)
            .send()
            .await
            .unwrap(),
    )
    .await
}

/// Orders as fast as one connection allows until `stop` says so.
async fn order_until(
    public: String,
    secret: String,
    stop: tokio::sync::watch::Receiver<bool>,
) -> u64 {
    let client = reqwest::Client::new();
    let mut accepted = 0;
    while !*stop.borrow() {
        let response = client
            .post(format!("http://{public}/partner/v1/orders"))
            .bearer_auth(&secret)
            .header("idempotency-key", uuid::Uuid::new_v4().to_string())
            .json(&json!({ "plan_id": PLAN, "quantity": 1 }))
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success(), "{}", response.status());
        accepted += 1;
    }
    accepted
}

/// `(id, status)` of every order, and the live float, read from a copy.
async fn held(copy: &Path) -> (Vec<(String, String)>, i64) {
    let db = Database::connect(format!("sqlite://{}?mode=ro", copy.display()))
        .await
        .unwrap();
    let rows = db
        .query_all_raw(Statement::from_string(
            db.get_database_backend(),
            "SELECT id, status FROM orders ORDER BY id",
        ))
        .await
        .unwrap();
    let orders = rows
        .iter()
        .map(|r| {
            (
                r.try_get_by_index(0).unwrap(),
                r.try_get_by_index(1).unwrap(),
            )
        })
        .collect();
    let float = db
        .query_one_raw(Statement::from_string(
            db.get_database_backend(),
            "SELECT balance_cents FROM floats WHERE mode = 'live'",
        ))
        .await
        .unwrap()
        .unwrap()
        .try_get_by_index(0)
        .unwrap();
    db.close().await.unwrap();
    (orders, float)
}

#[tokio::test]
async fn a_backup_under_load_verifies_and_a_service_started_on_it_answers_what_it_holds() {
    let dir = tempfile::tempdir().unwrap();
    let live_db = dir.path().join("live.db");
    let serving = node(&live_db, &[]).await;
    let secret = funded_partner(&serving).await;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let load = tokio::spawn(order_until(serving.public.clone(), secret.clone(), stopped));
    eventually("orders to flow", Duration::from_secs(30), || async {
        let (_, page) = partner_get(&serving, &secret, "/orders?limit=5").await;
        (page["data"].as_array().is_some_and(|d| d.len() >= 5)).then_some(())
    })
    .await;

    let copy = dir.path().join("copy.db");
    let (code, said) = command(&live_db, &["backup", "--to", copy.to_str().unwrap()]).await;
    assert_eq!(code, 0, "{said}");
    assert!(
        said.contains("orders") && said.contains("verified"),
        "{said}"
    );
    stop.send_replace(true);
    let accepted = load.await.unwrap();
    assert!(accepted > 5, "the load ran: {accepted}");
    // A backup never overwrites a file.
    let (code, said) = command(&live_db, &["backup", "--to", copy.to_str().unwrap()]).await;
    assert_ne!(code, 0, "{said}");
    serving.terminate().await;

    let (code, said) = verify(&copy).await;
    assert_eq!(code, 0, "{said}");
    let (orders, float) = held(&copy).await;
    assert!(!orders.is_empty());

    // Restore: a service started on the copy answers every order and the
    // balance it holds.
    let restored_db = dir.path().join("restored.db");
    std::fs::copy(&copy, &restored_db).unwrap();
    let restored = node(&restored_db, &[]).await;
    let (status, balance) = partner_get(&restored, &secret, "/balance").await;
    assert_eq!(status, StatusCode::OK, "{balance}");
    assert_eq!(balance["balance_cents"], float, "{balance}");
    for (id, _) in &orders {
        let (status, order) = partner_get(&restored, &secret, &format!("/orders/{id}")).await;
        assert_eq!(status, StatusCode::OK, "{id}: {order}");
    }
    restored.terminate().await;
}

#[tokio::test]
async fn a_damaged_truncated_foreign_or_inconsistent_copy_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let live_db = dir.path().join("live.db");
    let serving = node(&live_db, &[]).await;
    let secret = funded_partner(&serving).await;
    let (status, _) = serving.order(&secret, PLAN, 2).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let copy = dir.path().join("good.db");
    let (code, said) = command(&live_db, &["backup", "--to", copy.to_str().unwrap()]).await;
    assert_eq!(code, 0, "{said}");
    serving.terminate().await;
    let bytes = std::fs::read(&copy).unwrap();

    let truncated = dir.path().join("truncated.db");
    std::fs::write(&truncated, &bytes[..10]).unwrap();
    let (code, said) = verify(&truncated).await;
    assert_eq!(code, 1, "{said}");
    assert!(said.contains("not a SQLite database"), "{said}");

    let foreign = dir.path().join("foreign.db");
    std::fs::write(&foreign, b"{\"not\": \"a database\"}").unwrap();
    let (code, said) = verify(&foreign).await;
    assert_eq!(code, 1, "{said}");
    assert!(said.contains("not a SQLite database"), "{said}");

    // Pages overwritten in the middle: SQLite's own check (or reading) fails.
    let damaged = dir.path().join("damaged.db");
    let mut broken = bytes.clone();
    let page = 4096;
    for byte in &mut broken[page * 2..(page * 4).min(bytes.len())] {
        *byte = 0x5a;
    }
    std::fs::write(&damaged, &broken).unwrap();
    let (code, said) = verify(&damaged).await;
    assert_eq!(code, 1, "{said}");
    assert!(said.contains("FAILED"), "{said}");

    // Intact file, broken money: a float moved without its ledger.
    let cooked = dir.path().join("cooked.db");
    std::fs::write(&cooked, &bytes).unwrap();
    let db = Database::connect(format!("sqlite://{}?mode=rw", cooked.display()))
        .await
        .unwrap();
    db.execute_unprepared(
        "UPDATE floats SET balance_cents = balance_cents + 1 WHERE mode = 'live'",
    )
    .await
    .unwrap();
    db.close().await.unwrap();
    let (code, said) = verify(&cooked).await;
    assert_eq!(code, 1, "{said}");
    assert!(
        said.contains("a live float differs from the sum of its ledger"),
        "{said}"
    );
}

#[tokio::test]
async fn periodic_backups_run_verify_keep_the_newest_and_show_their_age() {
    let dir = tempfile::tempdir().unwrap();
    let backups = dir.path().join("backups");
    let backups_dir = backups.to_str().unwrap().to_owned();
    let serving = node(
        &dir.path().join("live.db"),
        &[
            ("ESIM__BACKUP__EVERY_MINUTES", "0.02"),
            ("ESIM__BACKUP__DIR", &backups_dir),
            ("ESIM__BACKUP__KEEP", "2"),
        ],
    )
    .await;
    let copies = || {
        std::fs::read_dir(&backups)
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .map(|e| e.file_name().into_string().unwrap())
                    .filter(|n| n.ends_with(".db"))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    // Three intervals: three copies taken, the oldest removed.
    eventually(
        "three periodic backups",
        Duration::from_secs(60),
        || async {
            let logged = serving
                .lines()
                .iter()
                .filter(|l| l.contains("backup taken and verified"))
                .count();
            (logged >= 3).then_some(())
        },
    )
    .await;
    let metrics = reqwest::Client::new()
        .get(format!("http://{}/metrics", serving.operator))
        .bearer_auth(OPERATOR_TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("esim_backup_age_seconds"), "{metrics}");
    assert!(
        metrics.contains("esim_backup_last_success_timestamp_seconds"),
        "{metrics}"
    );
    // Stopped before the copies are read: a running schedule would take
    // the next one and prune the oldest while it is being verified.
    serving.terminate().await;
    let kept = copies();
    assert!(kept.len() <= 2 && !kept.is_empty(), "{kept:?}");
    for name in &kept {
        let (code, said) = verify(&backups.join(name)).await;
        assert_eq!(code, 0, "{name}: {said}");
    }
}

#[tokio::test]
async fn verify_without_a_file_checks_the_serving_database_where_it_stands() {
    let app = spawn_app().await;
    let on_postgres = app.database_url.starts_with("postgres");
    let which = if on_postgres { "PostgreSQL" } else { "SQLite" };
    let (partner_id, secret) = live_partner(&app).await;
    fund(&app, &partner_id, 100_000).await;
    let order = json!({ "plan_id": PLAN, "quantity": 2 });
    let (status, body) = post_order(&app, &secret, "verify-in-place-0001", &order).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");

    let (code, said) = command_on(&app.database_url, &["verify"]).await;
    assert_eq!(code, 0, "{said}");
    assert!(
        said.contains(&format!(
            "ok: the configured {which} database holds every money invariant and reference (1 orders, 1 partners)"
        )),
        "{said}"
    );

    // What breaks: on PostgreSQL a unit without its order, which it lets
    // in; on SQLite, which refuses that, a float moved without its ledger.
    let (sabotage, named) = if on_postgres {
        (
            "INSERT INTO order_units (id, order_id, unit_index, status, attempts, updated_at) \
             VALUES ('ord_lost_1', 'ord_lost', 1, 'pending', 0, now())",
            "a unit's order does not exist: ord_lost_1",
        )
    } else {
        (
            "UPDATE floats SET balance_cents = balance_cents + 1 WHERE mode = 'live'",
            "a live float differs from the sum of its ledger",
        )
    };
    app.db.execute_unprepared(sabotage).await.unwrap();
    let (code, said) = command_on(&app.database_url, &["verify"]).await;
    assert_eq!(code, 1, "{said}");
    assert!(
        said.contains(&format!(
            "FAILED: the configured {which} database: money invariant broken: {named}"
        )),
        "{said}"
    );
}
