//! `GET /me` and `GET /balance`: read fresh from storage on every call.

use axum::{Extension, Json, extract::State};
use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{
    auth::{Caller, band_for},
    error::ApiError,
    extract::{NoQuery, StrictQuery},
};
use crate::{
    domain::{
        rate::{Band, Window},
        states::{AccountStatus, Mode},
    },
    state::AppState,
    store,
};

/// The Partner resource.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct PartnerView {
    pub object: &'static str,
    pub id: String,
    pub name: String,
    pub slug: String,
    pub status: AccountStatus,
    pub mode: Mode,
    pub tier: String,
    /// The key that made this call; null only if its record could not be read.
    pub key: Option<KeyView>,
    /// The fixed windows that apply to your key, one per rate class.
    pub rate_limits: RateLimits,
    pub created_at: DateTime<Utc>,
}

/// The fixed windows of your rate-limit band, one per rate class.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct RateLimits {
    /// Every `GET` route but `GET /plans` (and `/health`, which has no limit).
    pub read: RateWindow,
    /// `POST /orders` and `POST /deposits`.
    pub write: RateWindow,
    /// Reserved for routes that reach the supplier live; none today.
    pub supplier: RateWindow,
    /// `GET /plans`.
    pub catalogue: RateWindow,
}

/// One fixed window: at most `limit` requests per `window_seconds`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct RateWindow {
    /// Requests permitted per window.
    #[schema(minimum = 1)]
    pub limit: u32,
    /// Length of the window in seconds; windows start at multiples of it since the Unix epoch.
    #[schema(minimum = 1)]
    pub window_seconds: u32,
}

impl From<Window> for RateWindow {
    fn from(window: Window) -> Self {
        Self {
            limit: window.limit,
            window_seconds: window.window_seconds,
        }
    }
}

impl From<Band> for RateLimits {
    fn from(band: Band) -> Self {
        Self {
            read: band.read.into(),
            write: band.write.into(),
            supplier: band.supplier.into(),
            catalogue: band.catalogue.into(),
        }
    }
}

/// The calling key, nested in the Partner resource.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct KeyView {
    pub id: String,
    pub label: String,
    pub last4: String,
    pub mode: Mode,
    pub expires_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

#[utoipa::path(
    get, path = "/me", operation_id = "getMe", tag = "account",
    responses((status = 200, description = "The partner and the calling key, read fresh.", body = PartnerView))
)]
#[tracing::instrument(skip_all, fields(partner_id = %caller.partner_id()))]
pub(crate) async fn me(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    StrictQuery(NoQuery {}): StrictQuery<NoQuery>,
) -> Result<Json<PartnerView>, ApiError> {
    let partner = store::partners::find(&state.db, caller.partner_id())
        .await?
        .ok_or_else(|| ApiError::internal("authenticated partner vanished"))?;
    // The key row is a courtesy: if it cannot be read the call still succeeds.
    let key = match store::keys::find(&state.db, caller.key_id()).await {
        Ok(key) => key.map(|k| KeyView {
            id: k.id,
            label: k.label,
            last4: k.last4,
            mode: k.mode,
            expires_at: k.expires_at,
            created_at: k.created_at,
        }),
        Err(err) => {
            tracing::warn!(error = %err, "key row unreadable; answering with key null");
            None
        }
    };
    let rate_limits = RateLimits::from(*band_for(&state, &caller.record));
    Ok(Json(PartnerView {
        object: "partner",
        id: partner.id,
        name: partner.name,
        slug: partner.slug,
        status: partner.status,
        mode: caller.mode,
        tier: partner.tier,
        key,
        rate_limits,
        created_at: partner.created_at,
    }))
}

/// The Balance resource.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct BalanceView {
    pub object: &'static str,
    pub balance_cents: i64,
    pub currency: &'static str,
    pub tier: String,
    pub discount_bps: i64,
    pub low_balance_threshold_cents: i64,
    pub mode: Mode,
}

#[utoipa::path(
    get, path = "/balance", operation_id = "getBalance", tag = "account",
    responses((status = 200, description = "The float of the key's mode, read fresh.", body = BalanceView))
)]
#[tracing::instrument(skip_all, fields(partner_id = %caller.partner_id()))]
pub(crate) async fn balance(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    StrictQuery(NoQuery {}): StrictQuery<NoQuery>,
) -> Result<Json<BalanceView>, ApiError> {
    let view = store::partners::float_view(
        &state.float_reads,
        state.inline_reads.as_deref(),
        caller.partner_id(),
        caller.mode,
    )
    .await?
    .ok_or_else(|| ApiError::internal("the partner's float is missing"))?;
    let discount_bps = match view.discount_override_bps {
        Some(bps) => i64::from(bps),
        None => state
            .tiers
            .get(&view.tier)
            .map_or(0, |t| i64::from(t.discount_bps)),
    };
    Ok(Json(BalanceView {
        object: "balance",
        balance_cents: view.balance_cents,
        currency: "USD",
        tier: view.tier,
        discount_bps,
        low_balance_threshold_cents: view.low_balance_threshold_cents,
        mode: caller.mode,
    }))
}
