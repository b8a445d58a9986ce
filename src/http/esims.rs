//! `GET /esims`, `GET /esims/{iccid}`, `/install` and `/usage`.

use axum::{
    Extension, Json,
    extract::{Path, State},
};
use base64::{Engine, engine::general_purpose::STANDARD};
use chrono::{DateTime, Utc};
use entities::esim;
use serde::{Deserialize, Serialize};

use super::{
    auth::Caller,
    error::{ApiError, ErrorCode, Violations},
    extract::{NoQuery, StrictQuery},
    orders::time_id_keyset,
    pagination::{self, ListEnvelope},
};
use crate::{
    domain::{esim as rules, ids::OrderId, partner::Mode, states::EsimStatus},
    state::AppState,
    store::{self, esims::EsimQuery},
};

/// The eSIM profile resource.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct EsimView {
    pub object: &'static str,
    pub iccid: String,
    pub order_id: String,
    pub plan_id: String,
    pub mode: Mode,
    pub status: EsimStatus,
    pub activation_code: String,
    pub smdp_address: String,
    pub matching_id: String,
    #[serde(serialize_with = "super::instants::z")]
    pub created_at: DateTime<Utc>,
}

impl EsimView {
    pub fn new(row: esim::Model) -> Self {
        Self {
            object: "esim",
            iccid: row.iccid,
            order_id: row.order_id,
            plan_id: row.plan_id,
            mode: row.mode,
            status: row.status,
            activation_code: row.activation_code,
            smdp_address: row.smdp_address,
            matching_id: row.matching_id,
            created_at: row.created_at,
        }
    }
}

/// Query of `GET /esims`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EsimsQuery {
    /// Only profiles of this order.
    #[param(value_type = Option<String>, pattern = r"^po_[A-Za-z0-9_-]{1,64}$")]
    order_id: Option<String>,
    /// Only profiles in this state (`released`).
    #[param(value_type = Option<crate::domain::states::EsimStatus>)]
    status: Option<String>,
    /// Profiles created after this instant (exclusive).
    #[param(value_type = Option<String>, format = DateTime)]
    created_after: Option<String>,
    /// Page size, 1 to 200 (default 50).
    #[param(value_type = Option<i64>, minimum = 1, maximum = 200)]
    limit: Option<String>,
    /// Opaque; pass back `next_cursor` with the same filters.
    #[param(value_type = Option<String>, min_length = 1, max_length = 512)]
    cursor: Option<String>,
}

#[utoipa::path(
    get, path = "/esims", operation_id = "listEsims", tag = "esims", params(EsimsQuery),
    responses(
        (status = 200, description = "Profiles of the key's mode, newest first.", body = ListEnvelope<EsimView>),
        (status = 400, description = "`request.invalid`", body = crate::http::openapi::ErrorBody),
    )
)]
#[tracing::instrument(skip_all, fields(partner_id = %caller.partner_id()))]
pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    StrictQuery(query): StrictQuery<EsimsQuery>,
) -> Result<Json<ListEnvelope<EsimView>>, ApiError> {
    let mut v = Violations::default();
    if let Some(id) = &query.order_id {
        v.check(
            OrderId::parse(id).is_err(),
            "order_id",
            "must be an order id beginning `po_`",
        );
    }
    let status = pagination::parse_one_of::<EsimStatus>(query.status.as_deref(), "status", &mut v);
    let created_after =
        pagination::parse_datetime(query.created_after.as_deref(), "created_after", &mut v);
    let limit = pagination::parse_limit(query.limit.as_deref(), &mut v);
    pagination::check_cursor_length(query.cursor.as_deref(), &mut v);
    v.into_result()?;
    let scope = format!(
        "esims|{}|{:?}|{:?}|{:?}",
        caller.mode.as_str(),
        query.order_id,
        query.status,
        created_after.map(|t| t.timestamp_micros())
    );
    let before = pagination::decode_keyset(
        &state.cursors,
        &scope,
        query.cursor.as_deref(),
        time_id_keyset,
    )?;
    let rows = store::esims::list(
        &state.db,
        caller.partner_id(),
        caller.mode,
        &EsimQuery {
            order_id: query.order_id,
            status,
            created_after,
            before,
            limit: limit as u64 + 1,
        },
    )
    .await?;
    let (rows, has_more, next_cursor) =
        pagination::cut_page(rows, limit, &state.cursors, &scope, |e| {
            vec![
                e.created_at.timestamp_micros().into(),
                e.iccid.clone().into(),
            ]
        });
    Ok(Json(ListEnvelope {
        data: rows.into_iter().map(EsimView::new).collect(),
        has_more,
        next_cursor,
    }))
}

/// The caller's profile with this ICCID, or the route's 400 or 404.
async fn owned(state: &AppState, caller: &Caller, iccid: &str) -> Result<esim::Model, ApiError> {
    let well_formed = (19..=20).contains(&iccid.len()) && iccid.bytes().all(|b| b.is_ascii_digit());
    if !well_formed {
        return Err(ApiError::invalid("iccid", "must be 19 or 20 digits"));
    }
    store::esims::find(&state.db, caller.partner_id(), caller.mode, iccid)
        .await?
        .ok_or_else(|| ApiError::new(ErrorCode::EsimNotFound))
}

#[utoipa::path(
    get, path = "/esims/{iccid}", operation_id = "getEsim", tag = "esims",
    params(("iccid" = String, Path, pattern = r"^[0-9]{19,20}$", description = "The profile's ICCID.")),
    responses(
        (status = 200, description = "The profile.", body = EsimView),
        (status = 400, description = "`request.invalid`: not an ICCID", body = crate::http::openapi::ErrorBody),
        (status = 404, description = "`esim.not_found`", body = crate::http::openapi::ErrorBody),
    )
)]
#[tracing::instrument(skip_all, fields(partner_id = %caller.partner_id(), iccid = %iccid))]
pub async fn show(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(iccid): Path<String>,
    StrictQuery(NoQuery {}): StrictQuery<NoQuery>,
) -> Result<Json<EsimView>, ApiError> {
    Ok(Json(EsimView::new(owned(&state, &caller, &iccid).await?)))
}

/// What a device needs to install a profile.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct InstallPayload {
    pub object: &'static str,
    pub iccid: String,
    pub activation_code: String,
    pub smdp_address: String,
    pub matching_id: String,
    pub apple_install_url: String,
    pub qr_code_svg: String,
    pub qr_code_png_base64: String,
}

#[utoipa::path(
    get, path = "/esims/{iccid}/install", operation_id = "getEsimInstall", tag = "esims",
    params(("iccid" = String, Path, pattern = r"^[0-9]{19,20}$", description = "The profile's ICCID.")),
    responses(
        (status = 200, description = "What a device needs to install the profile.", body = InstallPayload),
        (status = 400, description = "`request.invalid`: not an ICCID", body = crate::http::openapi::ErrorBody),
        (status = 404, description = "`esim.not_found`", body = crate::http::openapi::ErrorBody),
    )
)]
#[tracing::instrument(skip_all, fields(partner_id = %caller.partner_id(), iccid = %iccid))]
pub async fn install(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(iccid): Path<String>,
    StrictQuery(NoQuery {}): StrictQuery<NoQuery>,
) -> Result<Json<InstallPayload>, ApiError> {
    let row = owned(&state, &caller, &iccid).await?;
    let code = qrcode::QrCode::new(row.activation_code.as_bytes()).map_err(ApiError::internal)?;
    let svg = code
        .render::<qrcode::render::svg::Color>()
        .min_dimensions(256, 256)
        .build();
    let png = qr_png(&code).map_err(ApiError::internal)?;
    Ok(Json(InstallPayload {
        object: "install_payload",
        apple_install_url: rules::apple_install_url(&row.activation_code),
        iccid: row.iccid,
        activation_code: row.activation_code,
        smdp_address: row.smdp_address,
        matching_id: row.matching_id,
        qr_code_svg: svg,
        qr_code_png_base64: STANDARD.encode(png),
    }))
}

/// A black-on-white grayscale PNG of the code, 8 pixels per module, 4-module quiet zone.
fn qr_png(code: &qrcode::QrCode) -> Result<Vec<u8>, png::EncodingError> {
    const SCALE: usize = 8;
    const QUIET: usize = 4;
    let modules = code.width();
    let side = (modules + 2 * QUIET) * SCALE;
    let colors = code.to_colors();
    let mut pixels = vec![255u8; side * side];
    for (index, color) in colors.iter().enumerate() {
        if *color == qrcode::Color::Dark {
            let (x, y) = (index % modules + QUIET, index / modules + QUIET);
            for dy in 0..SCALE {
                let row = (y * SCALE + dy) * side;
                pixels[row + x * SCALE..row + x * SCALE + SCALE].fill(0);
            }
        }
    }
    let mut out = Vec::new();
    {
        let mut encoder = png::Encoder::new(&mut out, side as u32, side as u32);
        encoder.set_color(png::ColorType::Grayscale);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header()?;
        writer.write_image_data(&pixels)?;
    }
    Ok(out)
}

/// Data use of a profile, as the supplier reports it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct UsageView {
    pub object: &'static str,
    pub iccid: String,
    pub status: EsimStatus,
    pub data_used_mb: i64,
    pub data_remaining_mb: Option<i64>,
    pub unlimited: bool,
    pub as_of: DateTime<Utc>,
}

/// The live supplier that delivered a unit (eSIM Access for profiles
/// delivered before there was a second one).
async fn live_supplier_of(
    state: &AppState,
    unit_id: &str,
) -> Result<std::sync::Arc<dyn crate::supplier::Supplier>, ApiError> {
    use crate::domain::supplier::SupplierName;
    let name = crate::store::supplier_orders::supplier_of_unit(&state.db, unit_id)
        .await
        .map_err(ApiError::from)?
        .and_then(|name| SupplierName::parse(&name))
        .unwrap_or(SupplierName::EsimAccess);
    state
        .suppliers
        .live
        .get(name)
        .map(|entry| entry.client.clone())
        .ok_or_else(|| {
            tracing::warn!(
                supplier = name.as_str(),
                "the supplier of this profile is not configured"
            );
            ApiError::new(ErrorCode::SupplierError)
        })
}

#[utoipa::path(
    get, path = "/esims/{iccid}/usage", operation_id = "getEsimUsage", tag = "esims",
    params(("iccid" = String, Path, pattern = r"^[0-9]{19,20}$", description = "The profile's ICCID.")),
    responses(
        (status = 200, description = "Data use as the supplier reports it.", body = UsageView),
        (status = 400, description = "`request.invalid`: not an ICCID", body = crate::http::openapi::ErrorBody),
        (status = 404, description = "`esim.not_found`", body = crate::http::openapi::ErrorBody),
        (status = 502, description = "`supplier_error`: the supplier did not answer", body = crate::http::openapi::ErrorBody),
    )
)]
#[tracing::instrument(skip_all, fields(partner_id = %caller.partner_id(), iccid = %iccid))]
pub async fn usage(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(iccid): Path<String>,
    StrictQuery(NoQuery {}): StrictQuery<NoQuery>,
) -> Result<Json<UsageView>, ApiError> {
    let row = owned(&state, &caller, &iccid).await?;
    let supplier = match caller.mode {
        Mode::Live => live_supplier_of(&state, &row.unit_id).await?,
        Mode::Sandbox => state.suppliers.sandbox.clone(),
    };
    let usage = supplier
        .usage(&row.iccid, row.esim_tran_no.as_deref())
        .await
        .map_err(|e| {
            tracing::warn!(error = %e, "usage query failed");
            ApiError::new(ErrorCode::SupplierError)
        })?;
    let plan = state
        .catalogue
        .snapshot()
        .visible(&row.plan_id, caller.mode)
        .cloned();
    let unlimited = plan.as_ref().is_some_and(|p| p.unlimited);
    let total = plan
        .as_ref()
        .map(|p| p.data_amount_mb)
        .filter(|t| *t > 0)
        .unwrap_or(usage.data_total_mb);
    Ok(Json(UsageView {
        object: "usage",
        iccid: row.iccid,
        status: row.status,
        data_used_mb: usage.data_used_mb,
        data_remaining_mb: (!unlimited).then(|| (total - usage.data_used_mb).max(0)),
        unlimited,
        as_of: crate::domain::time::now(),
    }))
}
