//! `POST /partners/{id}/keys`: issue a key; the secret is in this answer only.

use axum::{
    Extension, Json,
    extract::{Path, State},
    http::StatusCode,
};
use chrono::{DateTime, Utc};
use entities::api_key as key_row;
use ipnet::IpNet;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    partners::{parse_partner_id, partner_not_found},
    views::OperatorKey,
};
use crate::{
    domain::{
        api_key,
        ids::KeyId,
        operators::Caller,
        partner::{Mode, Status},
        time,
    },
    http::{
        error::{ApiError, ErrorCode, Violations},
        extract::StrictJson,
    },
    state::AppState,
    store::{self, changes::Change, keys::NewKey},
};

/// Body of `POST /partners/{id}/keys`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct IssueKey {
    mode: String,
    label: Option<String>,
    expires_at: Option<DateTime<Utc>>,
    allowed_cidrs: Option<Vec<String>>,
}

#[tracing::instrument(skip_all, fields(partner_id = %id))]
pub(super) async fn issue(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    StrictJson(body): StrictJson<IssueKey>,
) -> Result<(StatusCode, Json<OperatorKey>), ApiError> {
    let id = parse_partner_id(&id)?;
    let mut v = Violations::default();
    let mode = Mode::parse(&body.mode);
    v.check(mode.is_none(), "mode", "must be live or sandbox");
    let label = body.label.unwrap_or_default().trim().to_owned();
    v.check(
        label.chars().count() > 200,
        "label",
        "must be at most 200 characters",
    );
    let now = time::now();
    v.check(
        body.expires_at.is_some_and(|at| at <= now),
        "expires_at",
        "must be in the future",
    );
    let cidrs = body
        .allowed_cidrs
        .map(|list| normalize_cidrs(&list, &mut v));
    v.into_result()?;
    let mode = mode.unwrap_or(Mode::Sandbox);

    let partner = store::partners::find(&state.db, id.as_str())
        .await?
        .ok_or_else(partner_not_found)?;
    if partner.status == Status::Closed {
        return Err(ApiError::new(ErrorCode::Conflict)
            .with_message("The partner is closed; no key can be issued."));
    }

    let issued = api_key::issue(mode);
    let txn = store::begin_write(&state.db).await?;
    let key = store::keys::insert(
        &txn,
        NewKey {
            id: KeyId::generate().into_string(),
            partner_id: partner.id,
            mode,
            label: if label.is_empty() {
                format!("{} key", mode.as_str())
            } else {
                label
            },
            secret_hash: issued.hash,
            last4: issued.last4,
            allowed_cidrs: cidrs,
            expires_at: body.expires_at,
        },
        now,
    )
    .await?;
    let entry = caller
        .audit("key.issue", "key", &key.id, now)
        .partner(&key.partner_id)
        .after(shown(&key));
    store::audit::append(&txn, &entry).await?;
    txn.commit().await?;
    tracing::info!(key_id = %key.id, mode = %key.mode, "key issued");
    Ok((
        StatusCode::CREATED,
        Json(OperatorKey::new(key, Some(issued.secret))),
    ))
}

/// Parses each CIDR (a bare address means that one host) into canonical form.
fn normalize_cidrs(list: &[String], v: &mut Violations) -> Vec<String> {
    let mut out = Vec::with_capacity(list.len());
    for entry in list {
        let parsed = entry
            .parse::<IpNet>()
            .or_else(|_| entry.parse::<std::net::IpAddr>().map(IpNet::from));
        match parsed {
            Ok(net) => out.push(net.trunc().to_string()),
            Err(_) => v.add(
                "allowed_cidrs",
                format!("`{entry}` is not a CIDR or an IP address"),
            ),
        }
    }
    out
}

/// Body of `POST /keys/{id}/rotate`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RotateKey {
    /// How long the old key keeps working; default one hour.
    grace_seconds: Option<i64>,
}

/// How long a rotated key keeps working when the operator does not say.
const DEFAULT_GRACE_SECONDS: i64 = 3600;
/// The longest grace: thirty days.
const MAX_GRACE_SECONDS: i64 = 30 * 24 * 3600;

/// Issues the replacement now (same partner, mode, label and allowlist) and
/// lets the old key expire after the grace period.
#[tracing::instrument(skip_all, fields(key_id = %id))]
pub(super) async fn rotate(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    StrictJson(body): StrictJson<RotateKey>,
) -> Result<(StatusCode, Json<OperatorKey>), ApiError> {
    let grace = body.grace_seconds.unwrap_or(DEFAULT_GRACE_SECONDS);
    if !(0..=MAX_GRACE_SECONDS).contains(&grace) {
        return Err(ApiError::invalid(
            "grace_seconds",
            format!("must be from 0 to {MAX_GRACE_SECONDS}"),
        ));
    }
    let old = find_key(&state, &id).await?;
    if old.revoked_at.is_some() {
        return Err(ApiError::new(ErrorCode::Conflict)
            .with_message("The key is revoked; issue a new key instead."));
    }
    let mode = old.mode;
    let now = time::now();
    let issued = api_key::issue(mode);
    let cidrs = old
        .allowed_cidrs
        .as_ref()
        .and_then(|v| serde_json::from_value::<Vec<String>>(v.clone()).ok());
    let before = shown(&old);
    let txn = store::begin_write(&state.db).await?;
    let replacement = store::keys::insert(
        &txn,
        NewKey {
            id: KeyId::generate().into_string(),
            partner_id: old.partner_id.clone(),
            mode: old.mode,
            label: old.label.clone(),
            secret_hash: issued.hash,
            last4: issued.last4,
            allowed_cidrs: cidrs,
            expires_at: None,
        },
        now,
    )
    .await?;
    let old_expiry = now + chrono::Duration::seconds(grace);
    let keep = old.expires_at.filter(|at| *at < old_expiry);
    let old = store::keys::set_expiry(&txn, old, Some(keep.unwrap_or(old_expiry))).await?;
    let entry = caller
        .audit("key.rotate", "key", &old.id, now)
        .partner(&old.partner_id)
        .before(before)
        .after(json!({ "old": shown(&old), "replacement": shown(&replacement) }));
    store::audit::append(&txn, &entry).await?;
    txn.commit().await?;
    state.keys.announce(Change::Key(old.id.clone())).await;
    tracing::info!(old_key_id = %old.id, new_key_id = %replacement.id, grace, "key rotated");
    Ok((
        StatusCode::CREATED,
        Json(OperatorKey::new(replacement, Some(issued.secret))),
    ))
}

/// `POST /keys/{id}/revoke`: the key is refused from the next request on.
#[tracing::instrument(skip_all, fields(key_id = %id))]
pub(super) async fn revoke(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<OperatorKey>, ApiError> {
    let key = find_key(&state, &id).await?;
    let key = match key.revoked_at {
        // Revoking again changes nothing, so it writes no row.
        Some(_) => key,
        None => {
            let now = time::now();
            let before = shown(&key);
            let txn = store::begin_write(&state.db).await?;
            let key = store::keys::revoke(&txn, key, now).await?;
            let entry = caller
                .audit("key.revoke", "key", &key.id, now)
                .partner(&key.partner_id)
                .before(before)
                .after(shown(&key));
            store::audit::append(&txn, &entry).await?;
            txn.commit().await?;
            key
        }
    };
    state.keys.announce(Change::Key(key.id.clone())).await;
    tracing::info!("key revoked");
    Ok(Json(OperatorKey::new(key, None)))
}

/// Body of `PATCH /keys/{id}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct UpdateKey {
    /// `null` clears the allowlist (any source).
    #[serde(default, deserialize_with = "super::double_option")]
    allowed_cidrs: Option<Option<Vec<String>>>,
}

#[tracing::instrument(skip_all, fields(key_id = %id))]
pub(super) async fn update(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    StrictJson(body): StrictJson<UpdateKey>,
) -> Result<Json<OperatorKey>, ApiError> {
    let Some(requested) = body.allowed_cidrs else {
        return Err(ApiError::invalid(
            "allowed_cidrs",
            "is required (null clears the allowlist)",
        ));
    };
    let mut v = Violations::default();
    let cidrs = requested.map(|list| normalize_cidrs(&list, &mut v));
    v.into_result()?;
    let key = find_key(&state, &id).await?;
    let now = time::now();
    let before = shown(&key);
    let txn = store::begin_write(&state.db).await?;
    let key = store::keys::set_allowlist(&txn, key, cidrs).await?;
    let entry = caller
        .audit("key.update", "key", &key.id, now)
        .partner(&key.partner_id)
        .before(before)
        .after(shown(&key));
    store::audit::append(&txn, &entry).await?;
    txn.commit().await?;
    state.keys.announce(Change::Key(key.id.clone())).await;
    tracing::info!(allowed_cidrs = ?key.allowed_cidrs, "key allowlist changed");
    Ok(Json(OperatorKey::new(key, None)))
}

/// What the audit trail shows of a key (never its secret or its hash).
fn shown(key: &key_row::Model) -> Value {
    json!({
        "mode": key.mode, "label": key.label, "last4": key.last4,
        "allowed_cidrs": key.allowed_cidrs, "expires_at": key.expires_at,
        "revoked_at": key.revoked_at,
    })
}

async fn find_key(state: &AppState, id: &str) -> Result<entities::api_key::Model, ApiError> {
    KeyId::parse(id).map_err(|e| ApiError::invalid("id", e.to_string()))?;
    store::keys::find(&state.db, id)
        .await?
        .ok_or_else(|| ApiError::new(ErrorCode::NotFound).with_message("No such key."))
}
