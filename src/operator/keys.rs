//! `POST /partners/{id}/keys`: issue a key; the secret is in this answer only.

use axum::{
    Json,
    extract::{Path, State},
    http::StatusCode,
};
use chrono::{DateTime, Utc};
use ipnet::IpNet;
use serde::Deserialize;

use super::{
    partners::{parse_partner_id, partner_not_found},
    views::OperatorKey,
};
use crate::{
    app::AppState,
    domain::{
        api_key,
        ids::KeyId,
        partner::{Mode, Status},
        time,
    },
    http::{
        error::{ApiError, ErrorCode, Violations},
        extract::StrictJson,
    },
    store::{self, keys::NewKey},
};

/// Body of `POST /partners/{id}/keys`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IssueKey {
    mode: String,
    label: Option<String>,
    expires_at: Option<DateTime<Utc>>,
    allowed_cidrs: Option<Vec<String>>,
}

#[tracing::instrument(skip_all, fields(partner_id = %id))]
pub async fn issue(
    State(state): State<AppState>,
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
    if Status::parse(&partner.status) == Some(Status::Closed) {
        return Err(ApiError::new(ErrorCode::Conflict)
            .with_message("The partner is closed; no key can be issued."));
    }

    let issued = api_key::issue(mode);
    let key = store::keys::insert(
        &state.db,
        NewKey {
            id: KeyId::generate().into_string(),
            partner_id: partner.id,
            mode: mode.as_str().to_owned(),
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
