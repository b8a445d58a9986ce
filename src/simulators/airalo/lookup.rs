//! Get order list, Get order, Get usage and Get packages.

use std::{
    collections::HashMap,
    sync::{Arc, atomic::Ordering},
};

use axum::{
    Json,
    extract::{Path, Query, State},
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};

use super::{
    AiraloSim,
    api::{authorized, count, invalid, too_many, window_start},
    lock,
    orders::{self, SimOrder},
};

/// Usage requests a minute per ICCID while limits are on.
const USAGE_LIMIT_PER_MINUTE: u32 = 10;
/// Orders a page of the order list when `limit` is not given.
const DEFAULT_PAGE_SIZE: usize = 25;

/// A positive integer query parameter, or its documented 422 message.
fn positive(
    query: &HashMap<String, String>,
    key: &'static str,
    default: usize,
    errors: &mut Vec<(&'static str, String)>,
) -> usize {
    match query.get(key).map(|v| v.parse::<usize>()) {
        None => default,
        Some(Ok(n)) if n > 0 => n,
        _ => {
            errors.push((key, format!("The {key} must be an integer.")));
            default
        }
    }
}

pub(super) async fn order_list(
    State(sim): State<Arc<AiraloSim>>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    if let Err(answer) = authorized(&sim, &headers) {
        return *answer;
    }
    sim.stats.lookups.fetch_add(1, Ordering::Relaxed);
    let mut errors = Vec::new();
    let limit = positive(&query, "limit", DEFAULT_PAGE_SIZE, &mut errors);
    let page = positive(&query, "page", 1, &mut errors);
    if !errors.is_empty() {
        return invalid(errors);
    }
    // Each filter is a `LIKE '%…%'` search.
    let like = |key: &str, value: &str| {
        query
            .get(key)
            .is_none_or(|wanted| value.contains(wanted.as_str()))
    };
    let matching: Vec<Arc<SimOrder>> = lock(&sim.orders)
        .iter()
        .rev()
        .filter(|o| {
            like(
                "filter[description]",
                o.description.as_deref().unwrap_or_default(),
            ) && like("filter[code]", &o.code())
                && (!query.contains_key("filter[iccid]")
                    || o.profiles.iter().any(|p| like("filter[iccid]", &p.iccid)))
        })
        .cloned()
        .collect();
    let (sims, status) = includes(&query);
    let total = matching.len();
    let last_page = total.div_ceil(limit).max(1);
    let data: Vec<Value> = matching
        .iter()
        .skip((page - 1).saturating_mul(limit))
        .take(limit)
        .map(|o| o.json(sims, status))
        .collect();
    let link = |n: usize| format!("/v2/orders?limit={limit}&page={n}");
    let from = (!data.is_empty()).then(|| (page - 1) * limit + 1);
    Json(json!({
        "data": data,
        "links": {
            "first": link(1),
            "last": link(last_page),
            "prev": (page > 1).then(|| link(page - 1)),
            "next": (page < last_page).then(|| link(page + 1)),
        },
        "meta": {
            "message": "success",
            "current_page": page,
            "from": from,
            "last_page": last_page,
            "path": "/v2/orders",
            "per_page": limit.to_string(),
            "to": from.map(|f| f + data.len() - 1),
            "total": total,
        },
    }))
    .into_response()
}

/// Whether `include` names `sims` and `status`.
fn includes(query: &HashMap<String, String>) -> (bool, bool) {
    let include = query.get("include").map(String::as_str).unwrap_or_default();
    let has = |name: &str| include.split(',').any(|i| i.trim() == name);
    (has("sims"), has("status"))
}

fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(json!({ "data": [], "meta": { "message": "messages.resource_not_found" } })),
    )
        .into_response()
}

pub(super) async fn order_get(
    State(sim): State<Arc<AiraloSim>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    if let Err(answer) = authorized(&sim, &headers) {
        return *answer;
    }
    sim.stats.lookups.fetch_add(1, Ordering::Relaxed);
    let order = id
        .parse::<u64>()
        .ok()
        .and_then(|id| lock(&sim.orders).iter().find(|o| o.id == id).cloned());
    let Some(order) = order else {
        return not_found();
    };
    let (sims, status) = includes(&query);
    Json(json!({ "data": order.json(sims, status), "meta": { "message": "success" } }))
        .into_response()
}

pub(super) async fn usage(
    State(sim): State<Arc<AiraloSim>>,
    headers: HeaderMap,
    Path(iccid): Path<String>,
) -> Response {
    if let Err(answer) = authorized(&sim, &headers) {
        return *answer;
    }
    sim.stats.usage_calls.fetch_add(1, Ordering::Relaxed);
    if sim.rate_limit_per_minute > 0 {
        let counted = {
            let mut windows = lock(&sim.usage_windows);
            if windows.len() > 10_000 {
                let start = window_start();
                windows.retain(|_, w| w.0 == start);
            }
            count(
                windows.entry(iccid.clone()).or_insert((0, 0)),
                USAGE_LIMIT_PER_MINUTE,
            )
        };
        if let Err(reset) = counted {
            return too_many(&sim, USAGE_LIMIT_PER_MINUTE, reset);
        }
    }
    let order = lock(&sim.by_iccid).get(&iccid).cloned();
    let Some(order) = order else {
        return not_found();
    };
    Json(json!({ "data": order.usage(&iccid), "meta": { "message": "api.succes" } }))
        .into_response()
}

pub(super) async fn packages(State(sim): State<Arc<AiraloSim>>, headers: HeaderMap) -> Response {
    if let Err(answer) = authorized(&sim, &headers) {
        return *answer;
    }
    Json(orders::packages()).into_response()
}
