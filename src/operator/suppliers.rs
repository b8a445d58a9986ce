//! `GET /suppliers` (each supplier's state on this node), `GET
//! /orders/{id}/supply` (which supplier carried each unit of an order, at
//! what cost, and the order's margin) and `GET /margins` (per partner and
//! supplier over a period).

use axum::{
    Json,
    extract::{Path, State},
};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{
    domain::time,
    http::{
        error::{ApiError, ErrorCode},
        extract::StrictQuery,
    },
    state::AppState,
    store,
};

/// `GET /suppliers`: the route and every supplier this node can reach, with
/// its breaker's state and its calls, units and refusals since start.
pub(super) async fn list(State(state): State<AppState>) -> Json<Value> {
    let live = &state.suppliers.live;
    let route: Vec<&str> = live
        .route()
        .suppliers()
        .iter()
        .map(|s| s.as_str())
        .collect();
    Json(json!({
        "object": "list",
        "route": route,
        "data": live.view(),
    }))
}

/// `GET /orders/{id}/supply`: each unit's supplier order, supplier and cost,
/// and the order's revenue, known cost and margin.
pub(super) async fn order_supply(
    State(state): State<AppState>,
    Path(order_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    crate::domain::ids::OrderId::parse(&order_id)
        .map_err(|e| ApiError::invalid("id", e.to_string()))?;
    let Some(order) = store::orders::get_order(&state.db, &order_id).await? else {
        return Err(ApiError::new(ErrorCode::OrderNotFound));
    };
    let units = store::supply::units_of_order(&state.db, &order_id).await?;
    let delivered: Vec<_> = units.iter().filter(|u| u.status == "delivered").collect();
    let revenue = order.unit_price_cents * delivered.len() as i64;
    let known_cost: i64 = delivered.iter().filter_map(|u| u.unit_cost_cents).sum();
    let priced = delivered
        .iter()
        .filter(|u| u.unit_cost_cents.is_some())
        .count();
    Ok(Json(json!({
        "object": "order_supply",
        "order_id": order.id,
        "partner_id": order.partner_id,
        "plan_id": order.plan_id,
        "unit_price_cents": order.unit_price_cents,
        "units": units,
        "delivered_units": delivered.len(),
        "revenue_cents": revenue,
        // Only when every delivered unit's supplier named its price.
        "cost_cents": (priced == delivered.len()).then_some(known_cost),
        "margin_cents": (priced == delivered.len()).then_some(revenue - known_cost),
    })))
}

/// Query of `GET /margins`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MarginsQuery {
    /// Orders created at or after this (RFC 3339); default: 30 days ago.
    from: Option<String>,
    /// Orders created before this (RFC 3339); default: now.
    to: Option<String>,
    partner_id: Option<String>,
}

/// `GET /margins`: delivered live units per partner and supplier of orders
/// created in `[from, to)`, with revenue, cost and margin.
pub(super) async fn margins(
    State(state): State<AppState>,
    StrictQuery(query): StrictQuery<MarginsQuery>,
) -> Result<Json<Value>, ApiError> {
    let now = time::now();
    let from = instant(query.from.as_deref(), "from")?.unwrap_or(now - chrono::Duration::days(30));
    let to = instant(query.to.as_deref(), "to")?.unwrap_or(now);
    if from >= to {
        return Err(ApiError::invalid("from", "must be before `to`"));
    }
    if let Some(partner) = &query.partner_id {
        crate::domain::ids::PartnerId::parse(partner)
            .map_err(|e| ApiError::invalid("partner_id", e.to_string()))?;
    }
    let rows = store::supply::margins(&state.db, from, to, query.partner_id.as_deref()).await?;
    let total = |f: fn(&store::supply::MarginRow) -> i64| rows.iter().map(f).sum::<i64>();
    Ok(Json(json!({
        "object": "margins",
        "from": from,
        "to": to,
        "units": total(|r| r.units),
        "revenue_cents": total(|r| r.revenue_cents),
        "cost_cents": total(|r| r.cost_cents),
        "margin_cents": total(|r| r.margin_cents),
        "estimated_cost_units": total(|r| r.estimated_cost_units),
        "data": rows,
    })))
}

fn instant(text: Option<&str>, param: &str) -> Result<Option<DateTime<Utc>>, ApiError> {
    text.map(|t| {
        DateTime::parse_from_rfc3339(t)
            .map(|at| at.with_timezone(&Utc))
            .map_err(|_| ApiError::invalid(param, "must be an RFC 3339 time"))
    })
    .transpose()
}
