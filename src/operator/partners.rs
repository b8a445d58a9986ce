//! `POST /partners`, `GET /partners/{id}`, `PATCH /partners/{id}`.

use axum::{
    Extension, Json,
    extract::{Path, State},
    http::StatusCode,
};
use entities::partner;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{double_option, views::OperatorPartner};
use crate::{
    domain::{
        ids::PartnerId,
        operators::{Caller, Role},
        partner::{Status, is_valid_slug, may_become, slugify},
        time,
    },
    http::{
        error::{ApiError, ErrorCode, Violations},
        extract::StrictJson,
        pagination::parse_one_of,
    },
    state::AppState,
    store::{
        self,
        changes::Change,
        partners::{NewPartner, PartnerChanges},
    },
};

/// Body of `POST /partners`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CreatePartner {
    name: String,
    tier: String,
    slug: Option<String>,
    status: Option<String>,
    discount_override_bps: Option<i64>,
    low_balance_threshold_cents: Option<i64>,
}

#[tracing::instrument(skip_all)]
pub(super) async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    StrictJson(body): StrictJson<CreatePartner>,
) -> Result<(StatusCode, Json<OperatorPartner>), ApiError> {
    let mut v = Violations::default();
    let name = body.name.trim().to_owned();
    v.check(
        name.is_empty() || name.chars().count() > 200,
        "name",
        "must be 1 to 200 characters",
    );
    check_tier(&state, &mut v, &body.tier);
    let slug = body.slug.unwrap_or_else(|| slugify(&name));
    v.check(
        !is_valid_slug(&slug),
        "slug",
        "must be lowercase letters, digits and inner hyphens, at most 100 characters",
    );
    let status = match body.status.as_deref() {
        None => Some(Status::Pending),
        Some(s) => Status::parse(s),
    };
    v.check(
        status.is_none(),
        "status",
        "must be one of sandbox, pending, live, suspended, closed",
    );
    check_discount(&mut v, body.discount_override_bps);
    let threshold = body.low_balance_threshold_cents.unwrap_or(0);
    v.check(
        threshold < 0,
        "low_balance_threshold_cents",
        "must not be negative",
    );
    v.into_result()?;

    let new = NewPartner {
        name,
        slug,
        status: status.unwrap_or(Status::Pending),
        tier: body.tier,
        discount_override_bps: body.discount_override_bps.map(|d| d as i32),
        low_balance_threshold_cents: threshold,
        sandbox_float_cents: state.sandbox_initial_float_cents,
    };
    let now = time::now();
    let txn = store::begin_write(&state.db).await?;
    let created = store::partners::create(&*txn, new, now)
        .await
        .map_err(|err| {
            if store::is_unique_violation(&err) {
                ApiError::new(ErrorCode::Conflict)
                    .with_message("A partner with this slug exists.")
                    .with_param("slug")
            } else {
                err.into()
            }
        })?;
    let id = created.partner.id.clone();
    let entry = caller
        .audit("partner.create", "partner", &id, now)
        .partner(&id)
        .after(terms(&created.partner));
    store::audit::append(&txn, &entry).await?;
    txn.commit().await?;
    tracing::info!(partner_id = %created.partner.id, "partner created");
    Ok((StatusCode::CREATED, Json(OperatorPartner::new(created))))
}

#[tracing::instrument(skip_all, fields(partner_id = %id))]
pub(super) async fn show(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<OperatorPartner>, ApiError> {
    let id = parse_partner_id(&id)?;
    let found = store::partners::find_with_floats(&state.db, id.as_str())
        .await?
        .ok_or_else(partner_not_found)?;
    Ok(Json(OperatorPartner::new(found)))
}

/// Body of `PATCH /partners/{id}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct UpdatePartner {
    status: Option<String>,
    tier: Option<String>,
    #[serde(default, deserialize_with = "double_option")]
    discount_override_bps: Option<Option<i64>>,
    low_balance_threshold_cents: Option<i64>,
}

#[tracing::instrument(skip_all, fields(partner_id = %id))]
pub(super) async fn update(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    StrictJson(body): StrictJson<UpdatePartner>,
) -> Result<Json<OperatorPartner>, ApiError> {
    let id = parse_partner_id(&id)?;
    let reprices = body.tier.is_some() || body.discount_override_bps.is_some();
    if reprices && !caller.may(Role::Finance) {
        // A tier or a discount is what the partner pays: money, so finance's.
        let what = format!("PATCH /partners/{} (pricing)", id.as_str());
        return Err(super::auth::refuse(&state, &caller, Role::Finance, &what).await);
    }
    let current = store::partners::find(&state.db, id.as_str())
        .await?
        .ok_or_else(partner_not_found)?;

    let mut v = Violations::default();
    let next_status = parse_one_of::<Status>(body.status.as_deref(), "status", &mut v);
    if let Some(next) = next_status
        && !may_become(current.status, next)
    {
        v.add(
            "status",
            format!("cannot move from {} to {}", current.status, next),
        );
    }
    if let Some(tier) = &body.tier {
        check_tier(&state, &mut v, tier);
    }
    if let Some(discount) = body.discount_override_bps {
        check_discount(&mut v, discount);
    }
    v.check(
        body.low_balance_threshold_cents.is_some_and(|t| t < 0),
        "low_balance_threshold_cents",
        "must not be negative",
    );
    v.into_result()?;

    let changes = PartnerChanges {
        status: next_status,
        tier: body.tier,
        discount_override_bps: body.discount_override_bps.map(|d| d.map(|bps| bps as i32)),
        low_balance_threshold_cents: body.low_balance_threshold_cents,
    };
    let now = time::now();
    let before = terms(&current);
    let txn = store::begin_write(&state.db).await?;
    let changed = store::partners::update(&txn, current, changes, now).await?;
    let entry = caller
        .audit("partner.update", "partner", id.as_str(), now)
        .partner(id.as_str())
        .before(before)
        .after(terms(&changed));
    store::audit::append(&txn, &entry).await?;
    txn.commit().await?;
    state
        .keys
        .announce(Change::Partner(id.as_str().to_owned()))
        .await;
    let updated = store::partners::find_with_floats(&state.db, id.as_str())
        .await?
        .ok_or_else(partner_not_found)?;
    tracing::info!(status = %updated.partner.status, tier = %updated.partner.tier, "partner updated");
    Ok(Json(OperatorPartner::new(updated)))
}

/// What an operator may change of a partner, as the audit trail shows it.
fn terms(partner: &partner::Model) -> Value {
    json!({
        "name": partner.name, "slug": partner.slug, "status": partner.status,
        "tier": partner.tier, "discount_override_bps": partner.discount_override_bps,
        "low_balance_threshold_cents": partner.low_balance_threshold_cents,
    })
}

pub(super) fn parse_partner_id(id: &str) -> Result<PartnerId, ApiError> {
    PartnerId::parse(id).map_err(|e| ApiError::invalid("id", e.to_string()))
}

pub(super) fn partner_not_found() -> ApiError {
    ApiError::new(ErrorCode::NotFound).with_message("No such partner.")
}

fn check_tier(state: &AppState, v: &mut Violations, tier: &str) {
    if !state.tiers.contains_key(tier) {
        let known: Vec<&str> = state.tiers.keys().map(String::as_str).collect();
        v.add("tier", format!("must be one of {}", known.join(", ")));
    }
}

fn check_discount(v: &mut Violations, discount: Option<i64>) {
    v.check(
        discount.is_some_and(|d| !(0..=10_000).contains(&d)),
        "discount_override_bps",
        "must be from 0 to 10000",
    );
}
