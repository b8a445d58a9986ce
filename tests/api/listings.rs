//! A partner's order and profile lists on the running service: orders
//! accepted before and after the node moved the recent rows into the
//! listings (SQLite) come back as one list, newest first, page by page.
//! On PostgreSQL the same lists come from its indexes.

use std::time::Duration;

use reqwest::StatusCode;
use sea_orm::{ConnectionTrait, DbBackend, Statement};
use serde_json::{Value, json};

use crate::helpers::{TestApp, eventually, fund, get, live_partner, post_order, spawn_app_with};

/// Fast provisioning, limits lifted.
const FAST: &[(&str, &str)] = &[
    ("supplier.retry_backoff_ms", "10"),
    ("supplier.poll_interval_ms", "20"),
    ("simulators.supplier_latency_ms", "0"),
    ("rate_limit.bands.bronze.write.limit", "100000"),
    ("rate_limit.bands.bronze.read.limit", "100000"),
];

/// Longest a test waits for an order to settle or rows to move.
const WAIT: Duration = Duration::from_secs(30);

/// Places an order of one unit and waits until it settles; returns it.
async fn settled_order(app: &TestApp, secret: &str, key: &str) -> Value {
    let body = json!({ "plan_id": "pl_fr_1gb_7d", "quantity": 1 });
    let (status, order) = post_order(app, secret, key, &body).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{order}");
    let path = format!("/orders/{}", order["id"].as_str().unwrap());
    eventually("the order to settle", WAIT, || async {
        let (_, order) = get(app, secret, &path).await;
        (order["status"] == "completed").then_some(order)
    })
    .await
}

/// Rows of `table` for `partner_id`, counted in the service's database.
async fn rows_of(app: &TestApp, table: &str, partner_id: &str) -> i64 {
    let row = app
        .db
        .query_one_raw(Statement::from_sql_and_values(
            DbBackend::Sqlite,
            format!("SELECT count(*) AS n FROM {table} WHERE partner_id = ?"),
            [partner_id.into()],
        ))
        .await
        .unwrap()
        .unwrap();
    row.try_get("", "n").unwrap()
}

/// Waits until the node has moved the partner's `orders` orders and
/// profiles from the recent tables into the listings (SQLite only).
async fn moved(app: &TestApp, partner_id: &str, orders: i64) {
    eventually(
        "the recent rows to move into the listings",
        WAIT,
        || async {
            let listed = rows_of(app, "order_listing", partner_id).await;
            let profiles = rows_of(app, "esim_listing", partner_id).await;
            let recent = rows_of(app, "order_listing_recent", partner_id).await
                + rows_of(app, "esim_listing_recent", partner_id).await;
            (listed == orders && profiles == orders && recent == 0).then_some(())
        },
    )
    .await;
}

/// Every page of `list` (`/orders` or `/esims`) two at a time, by cursor:
/// the value of `field` of each item, in order.
async fn walk(app: &TestApp, secret: &str, list: &str, field: &str) -> Vec<String> {
    let mut seen = Vec::new();
    let mut path = format!("{list}?limit=2");
    loop {
        let (status, page) = get(app, secret, &path).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        for item in page["data"].as_array().unwrap() {
            seen.push(item[field].as_str().unwrap().to_owned());
        }
        match page["next_cursor"].as_str() {
            Some(cursor) => path = format!("{list}?limit=2&cursor={cursor}"),
            None => return seen,
        }
    }
}

#[tokio::test]
async fn orders_and_profiles_accepted_before_and_after_a_move_list_as_one() {
    let app = spawn_app_with(FAST).await;
    let (partner_id, secret) = live_partner(&app).await;
    fund(&app, &partner_id, 100_000).await;
    let on_sqlite = app.database_url.starts_with("sqlite:");
    let mut orders = Vec::new();
    for n in 0..3 {
        orders.push(settled_order(&app, &secret, &format!("listed-order-key-{n}")).await);
    }
    if on_sqlite {
        moved(&app, &partner_id, 3).await;
    }
    for n in 3..5 {
        orders.push(settled_order(&app, &secret, &format!("listed-order-key-{n}")).await);
    }

    let newest_first: Vec<String> = orders
        .iter()
        .rev()
        .map(|o| o["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(walk(&app, &secret, "/orders", "id").await, newest_first);
    let profiles_newest_first: Vec<String> = orders
        .iter()
        .rev()
        .map(|o| o["esims"][0]["iccid"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        walk(&app, &secret, "/esims", "iccid").await,
        profiles_newest_first
    );
    let (_, one_order) = get(
        &app,
        &secret,
        &format!("/esims?order_id={}", newest_first[4]),
    )
    .await;
    assert_eq!(
        one_order["data"][0]["iccid"], profiles_newest_first[4],
        "{one_order}"
    );

    if on_sqlite {
        moved(&app, &partner_id, 5).await;
        assert_eq!(walk(&app, &secret, "/orders", "id").await, newest_first);
        assert_eq!(
            walk(&app, &secret, "/esims", "iccid").await,
            profiles_newest_first
        );
    }
}
