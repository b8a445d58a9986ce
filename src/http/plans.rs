//! `GET /plans`, `GET /plans/{id}`, `GET /plans/{id}/price`, `GET /destinations`.

use std::sync::Arc;

use axum::{
    Extension, Json,
    extract::{Path, State},
};
use entities::plan;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{
    auth::Caller,
    error::{ApiError, ErrorCode, Violations},
    extract::{NoQuery, StrictQuery},
    pagination::{self, ListEnvelope},
};
use crate::{
    catalogue::{DestinationView, Keyset, PlanFilter, Snapshot, Standing},
    domain::{
        ids::check_id,
        partner::Mode,
        pricing::{self, Rate, UnitPrice},
    },
    state::AppState,
    store,
};

/// The Plan resource as one caller sees it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct PlanView {
    pub object: &'static str,
    pub id: String,
    pub name: String,
    pub country_code: Option<String>,
    pub region: Option<String>,
    pub global: bool,
    #[schema(value_type = crate::http::openapi::PlanType)]
    pub plan_type: String,
    pub data_amount_mb: i64,
    pub daily_allowance_mb: Option<i64>,
    pub fup_speed: Option<String>,
    pub unlimited: bool,
    pub duration_days: i32,
    pub voice_minutes: Option<i32>,
    pub sms_count: Option<i32>,
    #[schema(value_type = Vec<String>)]
    pub coverage_types: Value,
    pub speed: String,
    #[schema(value_type = Option<Vec<String>>)]
    pub networks: Option<Value>,
    pub requires_kyc: Option<bool>,
    pub list_price_cents: i64,
    pub your_price_cents: i64,
    pub discount_bps: i64,
    pub price_source: String,
    pub tier: String,
    pub min_resale_price_cents: Option<i64>,
    pub available: bool,
}

impl PlanView {
    /// A plan priced for a caller. An unsellable or inactive plan reads
    /// `available: false` at its list price with no discount.
    pub fn new(plan: &plan::Model, rate: &Rate, tier: &str, standing: Standing) -> Self {
        let (price, available) = match standing {
            Standing::Sellable(price) => (price, true),
            Standing::Inactive | Standing::Unavailable(_) => (
                UnitPrice {
                    unit_cents: plan.list_price_cents,
                    discount_bps: 0,
                },
                false,
            ),
        };
        Self {
            object: "plan",
            id: plan.id.clone(),
            name: plan.name.clone(),
            country_code: (!plan.country_code.is_empty()).then(|| plan.country_code.clone()),
            region: plan.region.clone(),
            global: plan.global,
            plan_type: plan.plan_type.clone(),
            data_amount_mb: plan.data_amount_mb,
            daily_allowance_mb: plan.daily_allowance_mb,
            fup_speed: plan.fup_speed.clone(),
            unlimited: plan.unlimited,
            duration_days: plan.duration_days,
            voice_minutes: plan.voice_minutes,
            sms_count: plan.sms_count,
            coverage_types: plan.coverage_types.clone(),
            speed: plan.speed.clone(),
            networks: plan.networks.clone(),
            requires_kyc: plan.requires_kyc,
            list_price_cents: plan.list_price_cents,
            your_price_cents: price.unit_cents,
            discount_bps: price.discount_bps,
            price_source: rate.source.label(),
            tier: tier.to_owned(),
            min_resale_price_cents: None,
            available,
        }
    }
}

/// The caller's headline rate, from its account as authentication saw it.
pub fn caller_rate(state: &AppState, caller: &Caller) -> Rate {
    let partner = &caller.record.partner;
    let tier_bps = state
        .tiers
        .get(&partner.tier)
        .map_or(0, |t| i64::from(t.discount_bps));
    Rate::headline(
        partner.discount_override_bps.map(i64::from),
        &partner.tier,
        tier_bps,
    )
}

// Every value is read as text and checked by hand so that each failure
// names its parameter.
/// Query of `GET /plans`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct PlansQuery {
    /// ISO 3166-1 alpha-2, case-insensitive; one letter is valid and matches nothing.
    #[param(value_type = Option<String>, pattern = r"^[A-Za-z]{1,2}$")]
    country: Option<String>,
    /// A regional bundle's slug or a country's region.
    #[param(value_type = Option<String>, min_length = 1, max_length = 64)]
    region: Option<String>,
    /// `fixed` or `daily`.
    #[param(value_type = Option<crate::http::openapi::PlanType>)]
    r#type: Option<String>,
    /// Inclusive lower bound on `duration_days`.
    #[param(value_type = Option<i64>, minimum = 1)]
    min_days: Option<String>,
    /// Inclusive upper bound on `duration_days`.
    #[param(value_type = Option<i64>, minimum = 1)]
    max_days: Option<String>,
    /// Inclusive lower bound on `data_amount_mb`.
    #[param(value_type = Option<i64>, minimum = 0)]
    min_data_mb: Option<String>,
    /// Inclusive upper bound on `data_amount_mb`.
    #[param(value_type = Option<i64>, minimum = 0)]
    max_data_mb: Option<String>,
    /// `true` or `false`.
    #[param(value_type = Option<crate::http::openapi::Unlimited>)]
    unlimited: Option<String>,
    /// Plans changed after this instant (exclusive).
    #[param(value_type = Option<String>, format = DateTime)]
    updated_since: Option<String>,
    /// Page size, 1 to 200 (default 50).
    #[param(value_type = Option<i64>, minimum = 1, maximum = 200)]
    limit: Option<String>,
    /// Opaque; pass back `next_cursor` with the same filters.
    #[param(value_type = Option<String>, min_length = 1, max_length = 512)]
    cursor: Option<String>,
}

impl PlansQuery {
    fn into_filter(self, v: &mut Violations) -> (PlanFilter, usize, Option<String>) {
        let country = self.country.map(|c| {
            let valid = !c.is_empty() && c.len() <= 2 && c.bytes().all(|b| b.is_ascii_alphabetic());
            v.check(
                !valid,
                "country",
                "must be an ISO 3166-1 alpha-2 code (at most 2 letters)",
            );
            c.to_ascii_uppercase()
        });
        v.check(
            self.region
                .as_ref()
                .is_some_and(|r| r.is_empty() || r.chars().count() > 64),
            "region",
            "must be 1 to 64 characters",
        );
        v.check(
            self.r#type
                .as_ref()
                .is_some_and(|t| t != "fixed" && t != "daily"),
            "type",
            "must be fixed or daily",
        );
        let unlimited = match self.unlimited.as_deref() {
            None => None,
            Some("true") => Some(true),
            Some("false") => Some(false),
            Some(_) => {
                v.add("unlimited", "must be true or false");
                None
            }
        };
        let filter = PlanFilter {
            country,
            region: self.region,
            plan_type: self.r#type,
            min_days: pagination::parse_int_at_least(self.min_days.as_deref(), "min_days", 1, v),
            max_days: pagination::parse_int_at_least(self.max_days.as_deref(), "max_days", 1, v),
            min_data_mb: pagination::parse_int_at_least(
                self.min_data_mb.as_deref(),
                "min_data_mb",
                0,
                v,
            ),
            max_data_mb: pagination::parse_int_at_least(
                self.max_data_mb.as_deref(),
                "max_data_mb",
                0,
                v,
            ),
            unlimited,
            updated_since: pagination::parse_datetime(
                self.updated_since.as_deref(),
                "updated_since",
                v,
            ),
        };
        let limit = pagination::parse_limit(self.limit.as_deref(), v);
        pagination::check_cursor_length(self.cursor.as_deref(), v);
        (filter, limit, self.cursor)
    }
}

/// The list a cursor belongs to: the route and its filters (not the page size).
fn plans_scope(filter: &PlanFilter) -> String {
    format!(
        "plans|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}",
        filter.country,
        filter.region.as_ref().map(|r| r.to_ascii_lowercase()),
        filter.plan_type,
        filter.min_days,
        filter.max_days,
        filter.min_data_mb,
        filter.max_data_mb,
        filter.unlimited,
        filter.updated_since.map(|t| t.timestamp_micros()),
    )
}

#[utoipa::path(
    get, path = "/plans", operation_id = "listPlans", tag = "catalogue", params(PlansQuery),
    responses(
        (status = 200, description = "Plans on sale to the caller, by country, data, duration and id.", body = ListEnvelope<PlanView>),
        (status = 400, description = "`request.invalid`", body = crate::http::openapi::ErrorBody),
    )
)]
#[tracing::instrument(skip_all, fields(partner_id = %caller.partner_id()))]
pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    StrictQuery(query): StrictQuery<PlansQuery>,
) -> Result<Json<ListEnvelope<PlanView>>, ApiError> {
    let mut v = Violations::default();
    let (filter, limit, cursor) = query.into_filter(&mut v);
    v.into_result()?;
    let scope = plans_scope(&filter);
    let after = pagination::decode_keyset(
        &state.cursors,
        &scope,
        cursor.as_deref(),
        Keyset::from_values,
    )?;
    let rate = caller_rate(&state, &caller);
    let snapshot = state.catalogue.snapshot();
    let (page, has_more) = snapshot.page(&filter, caller.mode, &rate, after.as_ref(), limit);
    let next_cursor = has_more
        .then(|| {
            page.last()
                .map(|(plan, _)| state.cursors.encode(&scope, Keyset::of(plan).to_values()))
        })
        .flatten();
    let tier = &caller.record.partner.tier;
    let data = page
        .iter()
        .map(|(plan, price)| PlanView::new(plan, &rate, tier, Standing::Sellable(*price)))
        .collect();
    Ok(Json(ListEnvelope {
        data,
        has_more,
        next_cursor,
    }))
}

/// The plan a caller names, or the route's 400 or 404.
fn visible_plan(
    snapshot: &Snapshot,
    caller: &Caller,
    id: &str,
) -> Result<Arc<plan::Model>, ApiError> {
    check_id(id, "pl_").map_err(|e| ApiError::invalid("id", e.to_string()))?;
    snapshot
        .visible(id, caller.mode)
        .cloned()
        .ok_or_else(|| ApiError::new(ErrorCode::PlanNotFound))
}

#[utoipa::path(
    get, path = "/plans/{id}", operation_id = "getPlan", tag = "catalogue",
    params(("id" = String, Path, pattern = r"^pl_[A-Za-z0-9_-]{1,64}$", example = "pl_fr_1gb_7d", description = "A plan id.")),
    responses(
        (status = 200, description = "The plan; an inactive one has `available` false.", body = PlanView),
        (status = 400, description = "`request.invalid`: not a plan id", body = crate::http::openapi::ErrorBody),
        (status = 404, description = "`plan.not_found`", body = crate::http::openapi::ErrorBody),
    )
)]
#[tracing::instrument(skip_all, fields(partner_id = %caller.partner_id(), plan_id = %id))]
pub async fn show(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    StrictQuery(NoQuery {}): StrictQuery<NoQuery>,
) -> Result<Json<PlanView>, ApiError> {
    let plan = visible_plan(&state.catalogue.snapshot(), &caller, &id)?;
    let rate = caller_rate(&state, &caller);
    let standing = Snapshot::standing(&plan, &rate);
    Ok(Json(PlanView::new(
        &plan,
        &rate,
        &caller.record.partner.tier,
        standing,
    )))
}

/// Query of `GET /plans/{id}/price`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct PriceQuery {
    /// Units to price, 1 to 50 (default 1).
    #[param(value_type = Option<i64>, minimum = 1, maximum = 50)]
    quantity: Option<String>,
}

/// What a plan would cost you now, for a quantity; nothing is reserved.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Quote {
    pub plan_id: String,
    pub quantity: i64,
    pub unit_price_cents: i64,
    pub total_cents: i64,
    pub list_unit_cents: i64,
    pub discount_bps: i64,
    pub price_source: String,
    pub tier: String,
    pub balance_cents: i64,
    pub sufficient_balance: bool,
    pub mode: Mode,
}

/// Order and quote quantities.
pub const MAX_QUANTITY: i64 = 50;

#[utoipa::path(
    get, path = "/plans/{id}/price", operation_id = "getPlanPrice", tag = "catalogue",
    params(("id" = String, Path, pattern = r"^pl_[A-Za-z0-9_-]{1,64}$", example = "pl_fr_1gb_7d", description = "A plan id."), PriceQuery),
    responses(
        (status = 200, description = "A quote; nothing is reserved.", body = Quote),
        (status = 400, description = "`request.invalid`", body = crate::http::openapi::ErrorBody),
        (status = 404, description = "`plan.not_found`", body = crate::http::openapi::ErrorBody),
        (status = 422, description = "`plan.unavailable`", body = crate::http::openapi::ErrorBody),
    )
)]
#[tracing::instrument(skip_all, fields(partner_id = %caller.partner_id(), plan_id = %id))]
pub async fn price(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    StrictQuery(query): StrictQuery<PriceQuery>,
) -> Result<Json<Quote>, ApiError> {
    let quantity = match query.quantity.as_deref() {
        None => 1,
        Some(raw) => match raw.parse::<i64>() {
            Ok(q) if (1..=MAX_QUANTITY).contains(&q) => q,
            _ => {
                return Err(ApiError::invalid(
                    "quantity",
                    format!("must be an integer from 1 to {MAX_QUANTITY}"),
                ));
            }
        },
    };
    let plan = visible_plan(&state.catalogue.snapshot(), &caller, &id)?;
    let rate = caller_rate(&state, &caller);
    let Standing::Sellable(unit) = Snapshot::standing(&plan, &rate) else {
        return Err(ApiError::new(ErrorCode::PlanUnavailable));
    };
    let total = pricing::total(unit.unit_cents, quantity)
        .ok_or_else(|| ApiError::new(ErrorCode::PlanUnavailable))?;
    let balance_cents = store::partners::float_balance(&state.db, caller.partner_id(), caller.mode)
        .await?
        .ok_or_else(|| ApiError::internal("float missing"))?;
    Ok(Json(Quote {
        plan_id: plan.id.clone(),
        quantity,
        unit_price_cents: unit.unit_cents,
        total_cents: total,
        list_unit_cents: plan.list_price_cents,
        discount_bps: unit.discount_bps,
        price_source: rate.source.label(),
        tier: caller.record.partner.tier.clone(),
        balance_cents,
        sufficient_balance: balance_cents >= total,
        mode: caller.mode,
    }))
}

#[utoipa::path(
    get, path = "/destinations", operation_id = "listDestinations", tag = "catalogue",
    responses((status = 200, description = "Countries with plans the caller can buy; one page.", body = ListEnvelope<DestinationView>))
)]
#[tracing::instrument(skip_all, fields(partner_id = %caller.partner_id()))]
pub async fn destinations(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    StrictQuery(NoQuery {}): StrictQuery<NoQuery>,
) -> Json<ListEnvelope<DestinationView>> {
    let views = state
        .catalogue
        .destinations_for(&caller_rate(&state, &caller));
    Json(ListEnvelope {
        data: views.as_ref().clone(),
        has_more: false,
        next_cursor: None,
    })
}
