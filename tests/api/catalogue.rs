//! The catalogue: `GET /plans` (filters, validation, keyset paging),
//! `GET /plans/{id}`, `GET /plans/{id}/price`, `GET /destinations`, per-caller
//! pricing, and the operator catalogue routes.
//!
//! Expected lists are computed independently from the seed file
//! (`config/catalogue.json`) with the spec's pricing rule, then compared with
//! what the API serves.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    sync::LazyLock,
};

use chrono::{DateTime, Duration, SecondsFormat, Utc};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{TestApp, assert_error, get, read, spawn_app_with};

/// Rate limits lifted so that a test can page the whole catalogue.
const UNTHROTTLED: &[(&str, &str)] = &[
    ("rate_limit.bands.bronze.catalogue.limit", "100000"),
    ("rate_limit.bands.bronze.read.limit", "100000"),
    ("rate_limit.bands.gold.catalogue.limit", "100000"),
    ("rate_limit.bands.gold.read.limit", "100000"),
    ("rate_limit.bands.platinum.catalogue.limit", "100000"),
    ("rate_limit.bands.platinum.read.limit", "100000"),
    ("rate_limit.bands.sandbox.catalogue.limit", "100000"),
    ("rate_limit.bands.sandbox.read.limit", "100000"),
];

const BRONZE_BPS: i64 = 500;
const GOLD_BPS: i64 = 1500;
const PLATINUM_BPS: i64 = 2000;

const INACTIVE: [&str; 7] = [
    "pl_ar_unl_10d",
    "pl_br_20gb_30d",
    "pl_de_3gb_15d",
    "pl_global_1gb_7d",
    "pl_lb_5gb_30d",
    "pl_th_1gb_7d",
    "pl_ua_10gb_30d",
];
const FLOOR_ABOVE_LIST: [&str; 6] = [
    "pl_ao_5gb_30d",
    "pl_cn_10gb_30d",
    "pl_ht_10gb_30d",
    "pl_in_unl_10d",
    "pl_mv_10gb_30d",
    "pl_pg_5gb_30d",
];
const SANDBOX_FIXTURES: [&str; 4] = [
    "pl_sandbox_insufficient_balance",
    "pl_sandbox_partial",
    "pl_sandbox_slow",
    "pl_sandbox_supplier_error",
];

// ---------------------------------------------------------------- harness

async fn catalogue_app() -> TestApp {
    spawn_app_with(UNTHROTTLED).await
}

/// A partner with `fields` and a key of `mode`: (partner id, secret).
async fn partner(app: &TestApp, fields: Value, mode: &str) -> (String, String) {
    let (partner, key) = app.partner_with_key(fields, mode).await;
    (
        partner["id"].as_str().unwrap().to_owned(),
        key["secret"].as_str().unwrap().to_owned(),
    )
}

/// The secret of a live key of a new partner on `tier`.
async fn live_key(app: &TestApp, tier: &str) -> String {
    partner(app, json!({ "tier": tier }), "live").await.1
}

/// Pages `GET /plans?{query}` to the end with `limit`, checking the envelope
/// of every page, and returns every plan served in order.
async fn list_all(app: &TestApp, secret: &str, query: &str, limit: usize) -> Vec<Value> {
    let mut served = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("/plans?limit={limit}");
        if !query.is_empty() {
            path.push('&');
            path.push_str(query);
        }
        if let Some(cursor) = &cursor {
            path.push_str(&format!("&cursor={cursor}"));
        }
        let (status, page) = get(app, secret, &path).await;
        assert_eq!(status, StatusCode::OK, "{path}: {page}");
        let data = page["data"].as_array().unwrap();
        if page["has_more"] == true {
            assert_eq!(data.len(), limit, "a page with more after it is full");
            cursor = Some(page["next_cursor"].as_str().unwrap().to_owned());
            served.extend(data.iter().cloned());
        } else {
            assert_eq!(page["has_more"], false, "{page}");
            assert!(page["next_cursor"].is_null(), "last page: {page}");
            assert!(data.len() <= limit);
            served.extend(data.iter().cloned());
            return served;
        }
    }
}

fn ids(plans: &[Value]) -> Vec<String> {
    plans
        .iter()
        .map(|p| p["id"].as_str().unwrap().to_owned())
        .collect()
}

fn id_set(plans: &[Value]) -> HashSet<String> {
    ids(plans).into_iter().collect()
}

/// The spec's list order: country code (none first), data, duration, id.
fn sort_key(plan: &Value) -> (String, i64, i64, String) {
    (
        plan["country_code"].as_str().unwrap_or_default().to_owned(),
        plan["data_amount_mb"].as_i64().unwrap(),
        plan["duration_days"].as_i64().unwrap(),
        plan["id"].as_str().unwrap().to_owned(),
    )
}

fn assert_strictly_in_list_order(plans: &[Value]) {
    for pair in plans.windows(2) {
        assert!(
            sort_key(&pair[0]) < sort_key(&pair[1]),
            "out of order or repeated: {} then {}",
            pair[0]["id"],
            pair[1]["id"]
        );
    }
}

fn assert_no_duplicates(plans: &[Value]) {
    let ids = ids(plans);
    let unique: HashSet<&String> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len(), "a plan was served twice");
}

// ------------------------------------------------------ the seed oracle

/// The seed catalogue, parsed once: it is a megabyte of JSON, and a test
/// that looks up each of its plans would otherwise parse it once per plan.
static SEED: LazyLock<Value> = LazyLock::new(|| {
    serde_json::from_str(include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/catalogue.json"
    )))
    .unwrap()
});

/// The seed's plans by id.
static SEED_PLANS: LazyLock<HashMap<String, Value>> = LazyLock::new(|| {
    seed_plans()
        .into_iter()
        .map(|p| (p["id"].as_str().unwrap().to_owned(), p))
        .collect()
});

fn seed() -> &'static Value {
    &SEED
}

fn seed_plans() -> Vec<Value> {
    SEED["plans"].as_array().unwrap().clone()
}

fn seed_plan(id: &str) -> Value {
    SEED_PLANS
        .get(id)
        .cloned()
        .unwrap_or_else(|| panic!("{id} is not in the seed"))
}

/// (your price, per-plan discount) at `bps`, or `None` when unsellable.
fn price_at(plan: &Value, bps: i64) -> Option<(i64, i64)> {
    let list = plan["list_price_cents"].as_i64().unwrap();
    let floor = plan["cost_floor_cents"].as_i64().unwrap();
    if list <= 0 || floor < 0 {
        return None;
    }
    let discounted = (list * (10_000 - bps) + 9_999) / 10_000;
    let unit = discounted.max(floor);
    if unit > list {
        return None;
    }
    let discount = if unit == discounted {
        bps
    } else {
        (list - unit) * 10_000 / list
    };
    Some((unit, discount))
}

/// Seed plans a caller at `bps` can buy (live keys: no sandbox fixtures),
/// matching `filter`, in list order.
fn expected(bps: i64, sandbox: bool, filter: impl Fn(&Value) -> bool) -> Vec<Value> {
    let mut plans: Vec<Value> = seed_plans()
        .into_iter()
        .filter(|p| p["active"] == true)
        .filter(|p| sandbox || p["sandbox_only"] != true)
        .filter(|p| price_at(p, bps).is_some())
        .filter(|p| filter(p))
        .collect();
    plans.sort_by_key(sort_key);
    plans
}

fn expected_ids(bps: i64, filter: impl Fn(&Value) -> bool) -> Vec<String> {
    ids(&expected(bps, false, filter))
}

/// What `GET /destinations` should say at `bps`: every country with a plan
/// the caller can buy, by code.
fn expected_destinations(bps: i64) -> Vec<Value> {
    let seed = seed();
    let mut summary: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for plan in expected(bps, false, |p| p["country_code"].is_string()) {
        let (unit, _) = price_at(&plan, bps).unwrap();
        let entry = summary
            .entry(plan["country_code"].as_str().unwrap().to_owned())
            .or_insert((0, i64::MAX));
        entry.0 += 1;
        entry.1 = entry.1.min(unit);
    }
    summary
        .into_iter()
        .map(|(code, (count, from))| {
            let destination = seed["destinations"]
                .as_array()
                .unwrap()
                .iter()
                .find(|d| d["code"] == code.as_str())
                .unwrap();
            json!({
                "code": code,
                "name": destination["name"],
                "region": destination["region"],
                "plan_count": count,
                "from_price_cents": from,
            })
        })
        .collect()
}

// ------------------------------------------------------------- filters

#[tokio::test]
async fn the_country_filter_is_case_insensitive_and_lists_only_that_countrys_plans() {
    let app = catalogue_app().await;
    let key = live_key(&app, "bronze").await;

    let lower = list_all(&app, &key, "country=fr", 200).await;
    let upper = list_all(&app, &key, "country=FR", 200).await;

    assert_eq!(
        ids(&lower),
        expected_ids(BRONZE_BPS, |p| p["country_code"] == "FR")
    );
    assert_eq!(lower.len(), 11);
    assert_eq!(ids(&lower), ids(&upper));
}

#[tokio::test]
async fn a_one_letter_country_validates_and_returns_an_empty_page() {
    let app = catalogue_app().await;
    let key = live_key(&app, "bronze").await;

    let (status, page) = get(&app, &key, "/plans?country=f").await;

    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(
        page,
        json!({ "data": [], "has_more": false, "next_cursor": null })
    );
}

#[tokio::test]
async fn the_region_filter_matches_regional_bundles_and_the_countries_of_that_region() {
    let app = catalogue_app().await;
    let key = live_key(&app, "bronze").await;

    let europe = list_all(&app, &key, "region=europe", 200).await;

    assert_eq!(
        ids(&europe),
        expected_ids(BRONZE_BPS, |p| p["region"] == "europe")
    );
    let served = id_set(&europe);
    assert!(served.contains("pl_europe_1gb_7d"), "a regional bundle");
    assert!(served.contains("pl_fr_1gb_7d"), "a country of the region");
    assert!(!served.contains("pl_us_1gb_7d"));
    assert!(
        europe[0]["country_code"].is_null(),
        "bundles sort before countries"
    );
    let global = list_all(&app, &key, "region=global", 200).await;
    assert!(!global.is_empty());
    assert!(global.iter().all(|p| p["global"] == true));
}

#[tokio::test]
async fn the_type_filter_lists_only_daily_or_only_fixed_plans() {
    let app = catalogue_app().await;
    let key = live_key(&app, "bronze").await;

    let daily = list_all(&app, &key, "type=daily", 200).await;
    let fixed = list_all(&app, &key, "type=fixed", 200).await;

    assert_eq!(
        ids(&daily),
        expected_ids(BRONZE_BPS, |p| p["plan_type"] == "daily")
    );
    assert_eq!(
        ids(&fixed),
        expected_ids(BRONZE_BPS, |p| p["plan_type"] == "fixed")
    );
    assert!(!daily.is_empty() && !fixed.is_empty());
}

#[tokio::test]
async fn day_bounds_are_inclusive() {
    let app = catalogue_app().await;
    let key = live_key(&app, "bronze").await;

    let served = list_all(&app, &key, "min_days=10&max_days=15", 200).await;

    assert_eq!(
        ids(&served),
        expected_ids(BRONZE_BPS, |p| {
            (10..=15).contains(&p["duration_days"].as_i64().unwrap())
        })
    );
    let days: HashSet<i64> = served
        .iter()
        .map(|p| p["duration_days"].as_i64().unwrap())
        .collect();
    assert_eq!(days, HashSet::from([10, 15]), "both bounds are included");
    let at_least_60 = list_all(&app, &key, "min_days=60", 200).await;
    assert_eq!(
        ids(&at_least_60),
        expected_ids(BRONZE_BPS, |p| p["duration_days"].as_i64().unwrap() >= 60)
    );
    let at_most_5 = list_all(&app, &key, "max_days=5", 200).await;
    assert_eq!(
        ids(&at_most_5),
        expected_ids(BRONZE_BPS, |p| p["duration_days"].as_i64().unwrap() <= 5)
    );
}

#[tokio::test]
async fn data_bounds_are_inclusive() {
    let app = catalogue_app().await;
    let key = live_key(&app, "bronze").await;

    let served = list_all(&app, &key, "min_data_mb=3072&max_data_mb=5120", 200).await;

    assert_eq!(
        ids(&served),
        expected_ids(BRONZE_BPS, |p| {
            (3072..=5120).contains(&p["data_amount_mb"].as_i64().unwrap())
        })
    );
    let sizes: HashSet<i64> = served
        .iter()
        .map(|p| p["data_amount_mb"].as_i64().unwrap())
        .collect();
    assert!(sizes.contains(&3072) && sizes.contains(&5120), "{sizes:?}");
    let up_to_500 = list_all(&app, &key, "min_data_mb=0&max_data_mb=500", 200).await;
    assert_eq!(
        ids(&up_to_500),
        expected_ids(BRONZE_BPS, |p| p["data_amount_mb"].as_i64().unwrap() <= 500)
    );
}

#[tokio::test]
async fn the_unlimited_filter_selects_unlimited_or_capped_plans() {
    let app = catalogue_app().await;
    let key = live_key(&app, "bronze").await;

    let unlimited = list_all(&app, &key, "unlimited=true", 200).await;
    let capped = list_all(&app, &key, "unlimited=false", 200).await;

    assert_eq!(
        ids(&unlimited),
        expected_ids(BRONZE_BPS, |p| p["unlimited"] == true)
    );
    assert_eq!(
        ids(&capped),
        expected_ids(BRONZE_BPS, |p| p["unlimited"] == false)
    );
    assert!(!unlimited.is_empty());
}

#[tokio::test]
async fn updated_since_is_exclusive() {
    let app = catalogue_app().await;
    let key = live_key(&app, "bronze").await;
    let (status, patched) = read(
        app.operator(Method::PATCH, "/plans/pl_fr_1gb_7d")
            .json(&json!({ "active": true }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{patched}");
    let touched: DateTime<Utc> = patched["updated_at"].as_str().unwrap().parse().unwrap();
    let at = |t: DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::Micros, true);

    let at_the_instant = list_all(&app, &key, &format!("updated_since={}", at(touched)), 200).await;
    let just_before = list_all(
        &app,
        &key,
        &format!("updated_since={}", at(touched - Duration::microseconds(1))),
        200,
    )
    .await;

    assert!(at_the_instant.is_empty(), "exclusive: {at_the_instant:?}");
    assert_eq!(ids(&just_before), ["pl_fr_1gb_7d"]);
    let everything = list_all(&app, &key, "updated_since=2000-01-01T00:00:00Z", 200).await;
    assert_eq!(ids(&everything), expected_ids(BRONZE_BPS, |_| true));
}

// ---------------------------------------------------------- validation

/// Asserts a 400 `request.invalid` naming exactly `param`.
async fn assert_refused(app: &TestApp, key: &str, path: &str, param: &str) {
    let (status, body) = get(app, key, path).await;
    let error = assert_error(status, &body, 400, "request.invalid");
    assert_eq!(error["param"], param, "{path}: {body}");
}

#[tokio::test]
async fn each_invalid_filter_is_a_400_naming_its_parameter() {
    let app = catalogue_app().await;
    let key = live_key(&app, "bronze").await;
    let long_region = "e".repeat(65);
    let cases = [
        ("country=FRA".to_owned(), "country"),
        ("country=".to_owned(), "country"),
        ("country=F1".to_owned(), "country"),
        (format!("region={long_region}"), "region"),
        ("type=weekly".to_owned(), "type"),
        ("min_days=0".to_owned(), "min_days"),
        ("max_days=abc".to_owned(), "max_days"),
        ("min_data_mb=-1".to_owned(), "min_data_mb"),
        ("max_data_mb=1.5".to_owned(), "max_data_mb"),
        ("unlimited=yes".to_owned(), "unlimited"),
        ("unlimited=TRUE".to_owned(), "unlimited"),
        ("updated_since=yesterday".to_owned(), "updated_since"),
    ];

    for (query, param) in &cases {
        assert_refused(&app, &key, &format!("/plans?{query}"), param).await;
    }

    for region in ["e".repeat(64), "é".repeat(64)] {
        let (status, page) = get(&app, &key, &format!("/plans?region={region}")).await;
        assert_eq!(status, StatusCode::OK, "64 characters is allowed: {page}");
        assert_eq!(page["data"], json!([]));
    }
    assert_refused(
        &app,
        &key,
        &format!("/plans?region={}", "é".repeat(65)),
        "region",
    )
    .await;
}

#[tokio::test]
async fn bad_limits_and_cursors_are_a_400_naming_the_parameter() {
    let app = catalogue_app().await;
    let key = live_key(&app, "bronze").await;
    let cases = [
        ("limit=0".to_owned(), "limit"),
        ("limit=201".to_owned(), "limit"),
        ("limit=abc".to_owned(), "limit"),
        (format!("cursor={}", "a".repeat(513)), "cursor"),
        ("cursor=garbage".to_owned(), "cursor"),
        ("cursor=".to_owned(), "cursor"),
    ];

    for (query, param) in &cases {
        assert_refused(&app, &key, &format!("/plans?{query}"), param).await;
    }

    let (status, page) = get(&app, &key, "/plans?limit=200").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(page["data"].as_array().unwrap().len(), 200);
    let (_, page) = get(&app, &key, "/plans").await;
    assert_eq!(page["data"].as_array().unwrap().len(), 50, "default limit");
}

#[tokio::test]
async fn unknown_and_repeated_parameters_are_refused() {
    let app = catalogue_app().await;
    let key = live_key(&app, "bronze").await;

    assert_refused(&app, &key, "/plans?colour=blue", "colour").await;
    assert_refused(&app, &key, "/plans?country=FR&country=DE", "country").await;
    assert_refused(&app, &key, "/plans?limit=5&limit=5", "limit").await;
    assert_refused(&app, &key, "/plans/pl_fr_1gb_7d?verbose=1", "verbose").await;
    assert_refused(&app, &key, "/plans/pl_fr_1gb_7d/price?qty=2", "qty").await;
}

// -------------------------------------------------------------- paging

#[tokio::test]
async fn paging_one_plan_at_a_time_walks_a_country_in_list_order() {
    let app = catalogue_app().await;
    let key = live_key(&app, "bronze").await;

    let served = list_all(&app, &key, "country=US", 1).await;

    assert_eq!(
        ids(&served),
        expected_ids(BRONZE_BPS, |p| p["country_code"] == "US")
    );
    assert_eq!(served.len(), 11);
    assert_strictly_in_list_order(&served);
}

#[tokio::test]
async fn paging_the_whole_catalogue_at_any_page_size_gives_the_unpaged_order_without_duplicates_or_gaps()
 {
    let app = catalogue_app().await;
    let key = live_key(&app, "bronze").await;
    let all = expected_ids(BRONZE_BPS, |_| true);
    assert_eq!(
        all.len(),
        1254 - SANDBOX_FIXTURES.len() - INACTIVE.len() - FLOOR_ABOVE_LIST.len()
    );

    for limit in [7, 50, 200] {
        let served = list_all(&app, &key, "", limit).await;

        assert_no_duplicates(&served);
        assert_strictly_in_list_order(&served);
        assert_eq!(ids(&served), all, "limit {limit}");
    }
    let (_, first) = get(&app, &key, "/plans?limit=1").await;
    assert!(
        first["data"][0]["country_code"].is_null(),
        "regional and global bundles sort first: {first}"
    );
}

#[tokio::test]
async fn the_last_page_has_no_more_and_no_cursor_even_when_exactly_full() {
    let app = catalogue_app().await;
    let key = live_key(&app, "bronze").await;

    let (status, page) = get(&app, &key, "/plans?country=US&limit=11").await;

    assert_eq!(status, StatusCode::OK);
    assert_eq!(page["data"].as_array().unwrap().len(), 11);
    assert_eq!(page["has_more"], false);
    assert!(page["next_cursor"].is_null());
    let (_, page) = get(&app, &key, "/plans?country=US&limit=10").await;
    assert_eq!(page["has_more"], true);
    let cursor = page["next_cursor"].as_str().unwrap();
    let (_, last) = get(
        &app,
        &key,
        &format!("/plans?country=US&limit=10&cursor={cursor}"),
    )
    .await;
    assert_eq!(ids(last["data"].as_array().unwrap()), ["pl_us_unl_30d"]);
    assert_eq!(last["has_more"], false);
    assert!(last["next_cursor"].is_null());
}

#[tokio::test]
async fn a_plan_added_after_the_cursor_appears_and_a_plan_deactivated_between_pages_disappears() {
    let app = catalogue_app().await;
    let key = live_key(&app, "bronze").await;
    let (_, first) = get(&app, &key, "/plans?limit=50").await;
    let mut served: Vec<Value> = first["data"].as_array().unwrap().clone();
    let mut cursor = first["next_cursor"].as_str().unwrap().to_owned();
    let already_served = served[0]["id"].as_str().unwrap().to_owned();
    // One new plan sorts after the cursor, one before it.
    let mut after = seed_plan("pl_fr_1gb_7d");
    after["id"] = json!("pl_fr_1gb_7d_promo");
    let mut before = seed_plan("pl_europe_1gb_7d");
    before["id"] = json!("pl_aaa_early_bundle");
    before["data_amount_mb"] = json!(1);
    let (status, body) = read(
        app.operator(Method::POST, "/plans")
            .json(&json!([after, before]))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["upserted"], 2);
    for id in ["pl_us_1gb_7d", already_served.as_str()] {
        let (status, body) = read(
            app.operator(Method::PATCH, &format!("/plans/{id}"))
                .json(&json!({ "active": false }))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }

    loop {
        let (status, page) = get(&app, &key, &format!("/plans?limit=50&cursor={cursor}")).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        served.extend(page["data"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(next) => cursor = next.to_owned(),
            None => break,
        }
    }

    assert_no_duplicates(&served);
    assert_strictly_in_list_order(&served);
    let mut want = expected(BRONZE_BPS, false, |p| p["id"] != "pl_us_1gb_7d");
    want.push(after);
    want.sort_by_key(sort_key);
    assert_eq!(ids(&served), ids(&want));
    let served = id_set(&served);
    assert!(served.contains("pl_fr_1gb_7d_promo"));
    assert!(
        !served.contains("pl_aaa_early_bundle"),
        "sorts before the cursor"
    );
    assert!(!served.contains("pl_us_1gb_7d"));
    assert!(
        served.contains(&already_served),
        "served before it was delisted"
    );
}

// ------------------------------------------------------------- cursors

#[tokio::test]
async fn a_cursor_from_one_filter_set_is_refused_with_another() {
    let app = catalogue_app().await;
    let key = live_key(&app, "bronze").await;
    let (_, page) = get(&app, &key, "/plans?country=US&limit=2").await;
    let cursor = page["next_cursor"].as_str().unwrap().to_owned();

    for other in [
        "country=FR",
        "",
        "country=US&type=fixed",
        "country=US&min_days=1",
        "country=US&unlimited=false",
    ] {
        let path = format!("/plans?{other}&cursor={cursor}");
        assert_refused(&app, &key, &path, "cursor").await;
    }

    let (status, next) = get(
        &app,
        &key,
        &format!("/plans?country=us&limit=5&cursor={cursor}"),
    )
    .await;
    assert_eq!(
        status,
        StatusCode::OK,
        "same filters, other case and page size: {next}"
    );
    assert_eq!(
        ids(next["data"].as_array().unwrap()),
        expected_ids(BRONZE_BPS, |p| p["country_code"] == "US")[2..7]
    );
}

#[tokio::test]
async fn a_tampered_cursor_is_refused() {
    let app = catalogue_app().await;
    let key = live_key(&app, "bronze").await;
    let (_, page) = get(&app, &key, "/plans?limit=3").await;
    let cursor = page["next_cursor"].as_str().unwrap().to_owned();
    let flip = |s: &str, at: usize| {
        let mut bytes = s.as_bytes().to_vec();
        bytes[at] = if bytes[at] == b'A' { b'B' } else { b'A' };
        String::from_utf8(bytes).unwrap()
    };
    let last_dot = cursor.rfind('.').unwrap();

    let tampered = [
        flip(&cursor, 5),
        flip(&cursor, cursor.len() - 2),
        flip(&cursor, last_dot - 1),
        cursor[..cursor.len() - 1].to_owned(),
        format!("{cursor}A"),
        cursor.replacen("v1.", "v2.", 1),
    ];

    for bad in &tampered {
        assert_refused(
            &app,
            &key,
            &format!("/plans?limit=3&cursor={bad}"),
            "cursor",
        )
        .await;
    }
    let (status, _) = get(&app, &key, &format!("/plans?limit=3&cursor={cursor}")).await;
    assert_eq!(status, StatusCode::OK, "the untouched cursor still works");
}

// ----------------------------------------------------------- visibility

#[tokio::test]
async fn deactivated_and_unsellable_plans_are_absent_from_the_list() {
    let app = catalogue_app().await;
    let key = live_key(&app, "bronze").await;

    let served = id_set(&list_all(&app, &key, "", 200).await);

    for id in INACTIVE
        .iter()
        .chain(&FLOOR_ABOVE_LIST)
        .chain(&SANDBOX_FIXTURES)
    {
        assert!(!served.contains(*id), "{id} is listed");
    }
    assert!(served.contains("pl_ao_1gb_7d"));
}

#[tokio::test]
async fn an_inactive_plan_reads_with_available_false() {
    let app = catalogue_app().await;
    let key = live_key(&app, "bronze").await;

    let (status, plan) = get(&app, &key, "/plans/pl_de_3gb_15d").await;

    assert_eq!(status, StatusCode::OK, "{plan}");
    assert_eq!(plan["object"], "plan");
    assert_eq!(plan["id"], "pl_de_3gb_15d");
    assert_eq!(plan["available"], false);
    app.operator(Method::PATCH, "/plans/pl_fr_1gb_7d")
        .json(&json!({ "active": false }))
        .send()
        .await
        .unwrap();
    let (status, plan) = get(&app, &key, "/plans/pl_fr_1gb_7d").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(plan["available"], false, "delisted just now");
    let (_, page) = get(&app, &key, "/plans?country=FR").await;
    assert!(!id_set(page["data"].as_array().unwrap()).contains("pl_fr_1gb_7d"));
}

#[tokio::test]
async fn an_unsellable_plan_reads_with_available_false() {
    let app = catalogue_app().await;
    let key = live_key(&app, "bronze").await;

    let (status, plan) = get(&app, &key, "/plans/pl_ao_5gb_30d").await;

    assert_eq!(status, StatusCode::OK, "{plan}");
    assert_eq!(plan["available"], false);
    assert_eq!(plan["list_price_cents"], 2999);
}

#[tokio::test]
async fn a_plan_that_never_existed_is_404_plan_not_found() {
    let app = catalogue_app().await;
    let key = live_key(&app, "bronze").await;

    let (status, body) = get(&app, &key, "/plans/pl_atlantis_1gb_7d").await;

    assert_error(status, &body, 404, "plan.not_found");
}

#[tokio::test]
async fn a_plan_of_a_withdrawn_destination_is_404_and_leaves_the_list() {
    let app = catalogue_app().await;
    let key = live_key(&app, "bronze").await;
    let (status, body) = read(
        app.operator(Method::PATCH, "/destinations/fr")
            .json(&json!({ "withdrawn": true }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["withdrawn"], true);

    let (status, single) = get(&app, &key, "/plans/pl_fr_1gb_7d").await;
    let (quote_status, quote) = get(&app, &key, "/plans/pl_fr_1gb_7d/price").await;
    let (_, page) = get(&app, &key, "/plans?country=FR").await;

    assert_error(status, &single, 404, "plan.not_found");
    assert_error(quote_status, &quote, 404, "plan.not_found");
    assert_eq!(page["data"], json!([]));
    let (_, europe) = get(&app, &key, "/plans?region=europe&limit=200").await;
    let europe = europe["data"].as_array().unwrap();
    assert!(europe.iter().all(|p| p["country_code"] != "FR"));
    assert!(id_set(europe).contains("pl_europe_1gb_7d"), "bundles stay");

    app.operator(Method::PATCH, "/destinations/FR")
        .json(&json!({ "withdrawn": false }))
        .send()
        .await
        .unwrap();
    let (status, _) = get(&app, &key, "/plans/pl_fr_1gb_7d").await;
    assert_eq!(status, StatusCode::OK, "restored");
}

#[tokio::test]
async fn a_wrong_kind_id_is_a_400_naming_id() {
    let app = catalogue_app().await;
    let key = live_key(&app, "bronze").await;

    for path in [
        "/plans/pk_x",
        "/plans/pk_x/price",
        "/plans/pl_",
        "/plans/pl_a.b",
    ] {
        assert_refused(&app, &key, path, "id").await;
    }
}

// -------------------------------------------------------------- sandbox

#[tokio::test]
async fn sandbox_fixtures_are_visible_to_sandbox_keys() {
    let app = catalogue_app().await;
    let (_, sandbox) = partner(&app, json!({}), "sandbox").await;

    let (status, slow) = get(&app, &sandbox, "/plans/pl_sandbox_slow").await;
    let fixtures = list_all(&app, &sandbox, "region=sandbox", 200).await;

    assert_eq!(status, StatusCode::OK, "{slow}");
    assert_eq!(slow["available"], true);
    assert_eq!(ids(&fixtures), SANDBOX_FIXTURES);
    let everything = list_all(&app, &sandbox, "", 200).await;
    assert_eq!(ids(&everything), ids(&expected(BRONZE_BPS, true, |_| true)));
    let (status, quote) = get(&app, &sandbox, "/plans/pl_sandbox_slow/price").await;
    assert_eq!(status, StatusCode::OK, "{quote}");
    assert_eq!(quote["mode"], "sandbox");
}

#[tokio::test]
async fn sandbox_fixtures_are_invisible_to_live_keys() {
    let app = catalogue_app().await;
    let key = live_key(&app, "bronze").await;

    let (status, page) = get(&app, &key, "/plans?region=sandbox").await;

    assert_eq!(status, StatusCode::OK);
    assert_eq!(page["data"], json!([]));
    for id in SANDBOX_FIXTURES {
        let (status, body) = get(&app, &key, &format!("/plans/{id}")).await;
        assert_error(status, &body, 404, "plan.not_found");
        let (status, body) = get(&app, &key, &format!("/plans/{id}/price")).await;
        assert_error(status, &body, 404, "plan.not_found");
    }
}

// --------------------------------------------------------------- quotes

#[tokio::test]
async fn a_quote_defaults_to_one_unit_at_the_plans_price() {
    let app = catalogue_app().await;
    let key = live_key(&app, "bronze").await;
    let (_, plan) = get(&app, &key, "/plans/pl_fr_1gb_7d").await;

    let (status, quote) = get(&app, &key, "/plans/pl_fr_1gb_7d/price").await;

    assert_eq!(status, StatusCode::OK, "{quote}");
    assert!(quote.get("object").is_none());
    assert_eq!(quote["plan_id"], "pl_fr_1gb_7d");
    assert_eq!(quote["quantity"], 1);
    assert_eq!(quote["unit_price_cents"], plan["your_price_cents"]);
    assert_eq!(quote["unit_price_cents"], 332, "ceil(349 × 0.95)");
    assert_eq!(quote["total_cents"], 332);
    assert_eq!(quote["list_unit_cents"], 349);
    assert_eq!(quote["discount_bps"], 500);
    assert_eq!(quote["price_source"], "tier:bronze");
    assert_eq!(quote["tier"], "bronze");
}

#[tokio::test]
async fn a_quote_for_three_units_totals_three_times_the_plans_price() {
    let app = catalogue_app().await;
    let key = live_key(&app, "gold").await;
    let (_, plan) = get(&app, &key, "/plans/pl_fr_daily2gb_10d").await;

    let (status, quote) = get(&app, &key, "/plans/pl_fr_daily2gb_10d/price?quantity=3").await;

    assert_eq!(status, StatusCode::OK, "{quote}");
    assert_eq!(quote["quantity"], 3);
    let unit = quote["unit_price_cents"].as_i64().unwrap();
    assert_eq!(quote["total_cents"], unit * 3);
    assert_eq!(
        quote["total_cents"],
        plan["your_price_cents"].as_i64().unwrap() * 3
    );
    assert_eq!(quote["discount_bps"], plan["discount_bps"]);
    let (status, _) = get(&app, &key, "/plans/pl_fr_daily2gb_10d/price?quantity=50").await;
    assert_eq!(status, StatusCode::OK, "50 is the largest quantity");
}

#[tokio::test]
async fn a_quote_quantity_outside_1_to_50_is_a_400_naming_quantity() {
    let app = catalogue_app().await;
    let key = live_key(&app, "bronze").await;

    for quantity in ["0", "51", "abc", "-1", "2.5", ""] {
        let path = format!("/plans/pl_fr_1gb_7d/price?quantity={quantity}");
        assert_refused(&app, &key, &path, "quantity").await;
    }
}

#[tokio::test]
async fn a_live_quote_on_an_empty_float_is_insufficient_and_a_sandbox_quote_is_sufficient() {
    let app = catalogue_app().await;
    let (partner_id, live) = partner(&app, json!({ "tier": "bronze" }), "live").await;
    let sandbox = app
        .issue_key(&partner_id, json!({ "mode": "sandbox" }))
        .await["secret"]
        .as_str()
        .unwrap()
        .to_owned();

    let (_, live_quote) = get(&app, &live, "/plans/pl_fr_1gb_7d/price?quantity=2").await;
    let (_, sandbox_quote) = get(&app, &sandbox, "/plans/pl_fr_1gb_7d/price?quantity=2").await;

    assert_eq!(live_quote["mode"], "live");
    assert_eq!(live_quote["balance_cents"], 0);
    assert_eq!(live_quote["sufficient_balance"], false);
    assert_eq!(sandbox_quote["mode"], "sandbox");
    assert_eq!(sandbox_quote["balance_cents"], 10_000_000);
    assert_eq!(sandbox_quote["sufficient_balance"], true);
    assert_eq!(live_quote["total_cents"], sandbox_quote["total_cents"]);
}

#[tokio::test]
async fn a_quote_for_an_unknown_plan_is_404() {
    let app = catalogue_app().await;
    let key = live_key(&app, "bronze").await;

    let (status, body) = get(&app, &key, "/plans/pl_atlantis_1gb_7d/price").await;

    assert_error(status, &body, 404, "plan.not_found");
}

#[tokio::test]
async fn a_quote_for_an_unsellable_or_inactive_plan_is_422_plan_unavailable() {
    let app = catalogue_app().await;
    let key = live_key(&app, "platinum").await;

    for id in ["pl_ao_5gb_30d", "pl_de_3gb_15d"] {
        let (status, body) = get(&app, &key, &format!("/plans/{id}/price")).await;
        assert_error(status, &body, 422, "plan.unavailable");
    }
}

// -------------------------------------------------------------- pricing

#[tokio::test]
async fn a_gold_partner_sees_its_tier_discount_on_every_plan_unless_the_floor_clamps() {
    let app = catalogue_app().await;
    let key = live_key(&app, "gold").await;

    let served = list_all(&app, &key, "", 200).await;

    assert_eq!(ids(&served), expected_ids(GOLD_BPS, |_| true));
    let mut clamped = 0;
    for plan in &served {
        let seeded = seed_plan(plan["id"].as_str().unwrap());
        let list = seeded["list_price_cents"].as_i64().unwrap();
        let floor = seeded["cost_floor_cents"].as_i64().unwrap();
        let discounted = (list * (10_000 - GOLD_BPS) + 9_999) / 10_000;
        let (unit, discount) = price_at(&seeded, GOLD_BPS).unwrap();
        assert_eq!(plan["your_price_cents"], unit, "{}", plan["id"]);
        assert_eq!(plan["discount_bps"], discount, "{}", plan["id"]);
        assert_eq!(plan["list_price_cents"], list);
        assert_eq!(plan["price_source"], "tier:gold");
        assert_eq!(plan["tier"], "gold");
        assert_eq!(plan["available"], true);
        assert!(plan["min_resale_price_cents"].is_null());
        assert!(
            plan.get("cost_floor_cents").is_none(),
            "the floor is private"
        );
        if discounted < floor {
            clamped += 1;
            assert_eq!(plan["your_price_cents"], floor);
            assert!(plan["discount_bps"].as_i64().unwrap() < GOLD_BPS);
        } else {
            assert_eq!(plan["discount_bps"], GOLD_BPS);
        }
    }
    assert!(clamped > 0, "the seed has plans the floor clamps at gold");
    let (_, fr) = get(&app, &key, "/plans/pl_fr_1gb_7d").await;
    assert_eq!(fr["your_price_cents"], 297, "ceil(349 × 0.85)");
    let (_, clamped) = get(&app, &key, "/plans/pl_fr_20gb_30d").await;
    assert_eq!(clamped["your_price_cents"], 3064, "the floor");
    assert_eq!(
        clamped["discount_bps"], 712,
        "(3299 - 3064) / 3299, rounded down"
    );
}

#[tokio::test]
async fn a_discount_override_shows_as_the_price_source_on_the_next_list() {
    let app = catalogue_app().await;
    let (partner_id, key) = partner(&app, json!({ "tier": "gold" }), "live").await;
    let (_, before) = get(&app, &key, "/plans?country=FR").await;
    assert_eq!(before["data"][1]["id"], "pl_fr_1gb_7d");
    assert_eq!(before["data"][1]["your_price_cents"], 297);

    let (status, body) = read(
        app.operator(Method::PATCH, &format!("/partners/{partner_id}"))
            .json(&json!({ "discount_override_bps": 2500 }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let after = list_all(&app, &key, "country=FR", 200).await;

    assert_eq!(
        ids(&after),
        expected_ids(2500, |p| p["country_code"] == "FR")
    );
    for plan in &after {
        let (unit, discount) = price_at(&seed_plan(plan["id"].as_str().unwrap()), 2500).unwrap();
        assert_eq!(plan["your_price_cents"], unit);
        assert_eq!(plan["discount_bps"], discount);
        assert_eq!(plan["price_source"], "override");
        assert_eq!(plan["tier"], "gold");
    }
    assert_eq!(after[1]["your_price_cents"], 262, "ceil(349 × 0.75)");
    let (_, quote) = get(&app, &key, "/plans/pl_fr_1gb_7d/price").await;
    assert_eq!(quote["price_source"], "override");
    assert_eq!(quote["unit_price_cents"], 262);

    app.operator(Method::PATCH, &format!("/partners/{partner_id}"))
        .json(&json!({ "discount_override_bps": null }))
        .send()
        .await
        .unwrap();
    let (_, cleared) = get(&app, &key, "/plans/pl_fr_1gb_7d").await;
    assert_eq!(cleared["price_source"], "tier:gold");
    assert_eq!(cleared["your_price_cents"], 297);
}

// --------------------------------------------------------- destinations

#[tokio::test]
async fn destinations_take_no_parameters() {
    let app = catalogue_app().await;
    let key = live_key(&app, "bronze").await;

    assert_refused(&app, &key, "/destinations?limit=10", "limit").await;
    assert_refused(&app, &key, "/destinations?cursor=abc", "cursor").await;
    assert_refused(&app, &key, "/destinations?region=europe", "region").await;
}

#[tokio::test]
async fn destinations_are_one_page_of_countries_without_bundles() {
    let app = catalogue_app().await;
    let key = live_key(&app, "bronze").await;

    let (status, body) = get(&app, &key, "/destinations").await;

    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["has_more"], false);
    assert!(body["next_cursor"].is_null());
    let data = body["data"].as_array().unwrap();
    assert!(data.len() > 100);
    let countries: HashSet<String> = seed()["destinations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["code"].as_str().unwrap().to_owned())
        .collect();
    let codes: Vec<&str> = data.iter().map(|d| d["code"].as_str().unwrap()).collect();
    assert!(codes.windows(2).all(|w| w[0] < w[1]), "sorted by code");
    for destination in data {
        assert!(destination.get("object").is_none());
        let code = destination["code"].as_str().unwrap();
        assert!(countries.contains(code), "{code} is not a country");
    }
    assert!(
        !data
            .iter()
            .any(|d| d["code"] == "" || d["region"] == "sandbox")
    );
}

#[tokio::test]
async fn destinations_count_sellable_plans_and_start_at_the_callers_cheapest_price() {
    let app = catalogue_app().await;
    let bronze = live_key(&app, "bronze").await;
    let platinum = live_key(&app, "platinum").await;

    let (_, for_bronze) = get(&app, &bronze, "/destinations").await;
    let (_, for_platinum) = get(&app, &platinum, "/destinations").await;

    assert_eq!(for_bronze["data"], json!(expected_destinations(BRONZE_BPS)));
    assert_eq!(
        for_platinum["data"],
        json!(expected_destinations(PLATINUM_BPS))
    );
    let find = |body: &Value, code: &str| {
        body["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["code"] == code)
            .cloned()
            .unwrap()
    };
    // France: the cheapest plan lists at 249 and the floor (185) does not clamp.
    assert_eq!(find(&for_bronze, "FR")["from_price_cents"], 237);
    assert_eq!(find(&for_platinum, "FR")["from_price_cents"], 200);
    assert_eq!(find(&for_bronze, "FR")["plan_count"], 11);
    // Angola has four plans, one with its floor above list; Germany one inactive.
    assert_eq!(find(&for_bronze, "AO")["plan_count"], 3);
    assert_eq!(find(&for_platinum, "AO")["plan_count"], 3);
    assert_eq!(find(&for_bronze, "DE")["plan_count"], 10);
}

#[tokio::test]
async fn destinations_follow_a_discount_override() {
    let app = catalogue_app().await;
    let (partner_id, key) = partner(&app, json!({ "tier": "bronze" }), "live").await;
    app.operator(Method::PATCH, &format!("/partners/{partner_id}"))
        .json(&json!({ "discount_override_bps": 2500 }))
        .send()
        .await
        .unwrap();

    let (status, body) = get(&app, &key, "/destinations").await;

    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"], json!(expected_destinations(2500)));
    let fr = body["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["code"] == "FR")
        .unwrap();
    assert_eq!(fr["from_price_cents"], 187, "ceil(249 × 0.75)");
}

// ------------------------------------------------------------- operator

async fn upload(app: &TestApp, plans: Value) -> (StatusCode, Value) {
    read(
        app.operator(Method::POST, "/plans")
            .json(&plans)
            .send()
            .await
            .unwrap(),
    )
    .await
}

#[tokio::test]
async fn an_operator_plan_upload_refuses_unknown_fields_bad_types_and_unknown_countries() {
    let app = catalogue_app().await;
    let key = live_key(&app, "bronze").await;
    let mut base = seed_plan("pl_fr_1gb_7d");
    base["id"] = json!("pl_fr_new_plan");
    let with = |field: &str, value: Value| {
        let mut plan = base.clone();
        plan[field] = value;
        plan
    };

    let (status, unknown) = upload(&app, json!([with("bogus", json!(1))])).await;
    let (bad_type_status, bad_type) =
        upload(&app, json!([with("plan_type", json!("weekly"))])).await;
    let (country_status, country) = upload(&app, json!([with("country_code", json!("XX"))])).await;

    assert_eq!(
        assert_error(status, &unknown, 400, "request.invalid")["param"],
        "[0].bogus"
    );
    assert_eq!(
        assert_error(bad_type_status, &bad_type, 400, "request.invalid")["param"],
        "[0].plan_type"
    );
    assert_eq!(
        assert_error(country_status, &country, 400, "request.invalid")["param"],
        "[0].country_code"
    );
    let mut bad = with("plan_type", json!("weekly"));
    bad["id"] = json!("pl_fr_other_new_plan");
    let (status, batch) = upload(&app, json!([base.clone(), bad])).await;
    assert_eq!(
        assert_error(status, &batch, 400, "request.invalid")["param"],
        "[1].plan_type"
    );
    let (status, body) = get(&app, &key, "/plans/pl_fr_new_plan").await;
    assert_error(status, &body, 404, "plan.not_found");
}

#[tokio::test]
async fn a_price_change_uploaded_by_the_operator_shows_on_the_next_read() {
    let app = catalogue_app().await;
    let key = live_key(&app, "bronze").await;
    let (_, before) = get(&app, &key, "/plans/pl_fr_1gb_7d").await;
    assert_eq!(before["your_price_cents"], 332);
    let mut plan = seed_plan("pl_fr_1gb_7d");
    plan["list_price_cents"] = json!(399);

    let (status, body) = upload(&app, json!([plan])).await;

    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, json!({ "upserted": 1 }));
    let (_, after) = get(&app, &key, "/plans/pl_fr_1gb_7d").await;
    assert_eq!(after["list_price_cents"], 399);
    assert_eq!(after["your_price_cents"], 380, "ceil(399 × 0.95)");
    let (_, quote) = get(&app, &key, "/plans/pl_fr_1gb_7d/price").await;
    assert_eq!(quote["unit_price_cents"], 380);
    let (_, page) = get(&app, &key, "/plans?country=FR").await;
    assert_eq!(page["data"][1]["your_price_cents"], 380);
}

#[tokio::test]
async fn an_operator_plan_upload_refuses_prices_too_large_to_price_safely() {
    let app = catalogue_app().await;
    let key = live_key(&app, "bronze").await;
    let mut huge_list = seed_plan("pl_fr_1gb_7d");
    huge_list["list_price_cents"] = json!(i64::MAX);
    let mut huge_floor = seed_plan("pl_us_1gb_7d");
    huge_floor["cost_floor_cents"] = json!(100_000_001);

    let (list_status, list) = upload(&app, json!([huge_list])).await;
    let (floor_status, floor) = upload(&app, json!([huge_floor])).await;

    assert_eq!(
        assert_error(list_status, &list, 400, "request.invalid")["param"],
        "[0].list_price_cents"
    );
    assert_eq!(
        assert_error(floor_status, &floor, 400, "request.invalid")["param"],
        "[0].cost_floor_cents"
    );
    let (status, page) = get(&app, &key, "/plans?country=FR").await;
    assert_eq!(status, StatusCode::OK, "the list still prices: {page}");
    assert_eq!(
        page["data"][1]["list_price_cents"], 349,
        "nothing was stored"
    );
    let mut largest = seed_plan("pl_fr_1gb_7d");
    largest["list_price_cents"] = json!(100_000_000);
    let (status, body) = upload(&app, json!([largest])).await;
    assert_eq!(status, StatusCode::OK, "$1,000,000 is allowed: {body}");
    let (_, quote) = get(&app, &key, "/plans/pl_fr_1gb_7d/price?quantity=50").await;
    assert_eq!(quote["unit_price_cents"], 95_000_000);
    assert_eq!(quote["total_cents"], 4_750_000_000_i64);
}
