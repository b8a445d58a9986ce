//! JSON shapes of the operator API.

use chrono::{DateTime, Utc};
use entities::{api_key, partner};
use serde::Serialize;

use crate::{
    domain::partner::{Mode, Status},
    store::partners::PartnerWithFloats,
};

/// A partner as operators see it: terms and both floats.
#[derive(Debug, Serialize)]
pub(super) struct OperatorPartner {
    pub object: &'static str,
    pub id: String,
    pub name: String,
    pub slug: String,
    pub status: Status,
    pub tier: String,
    pub discount_override_bps: Option<i32>,
    pub low_balance_threshold_cents: i64,
    pub balances: Balances,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Both floats of a partner, in cents.
#[derive(Debug, Serialize)]
pub(super) struct Balances {
    pub live_cents: i64,
    pub sandbox_cents: i64,
}

impl OperatorPartner {
    pub(super) fn new(p: PartnerWithFloats) -> Self {
        let partner::Model {
            id,
            name,
            slug,
            status,
            tier,
            discount_override_bps,
            low_balance_threshold_cents,
            created_at,
            updated_at,
        } = p.partner;
        Self {
            object: "partner",
            id,
            name,
            slug,
            status,
            tier,
            discount_override_bps,
            low_balance_threshold_cents,
            balances: Balances {
                live_cents: p.live_cents,
                sandbox_cents: p.sandbox_cents,
            },
            created_at,
            updated_at,
        }
    }
}

/// A key as operators see it; `secret` only in the answer that issues it.
#[derive(Debug, Serialize)]
pub(super) struct OperatorKey {
    pub object: &'static str,
    pub id: String,
    pub partner_id: String,
    pub mode: Mode,
    pub label: String,
    pub last4: String,
    pub allowed_cidrs: Option<serde_json::Value>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

impl OperatorKey {
    pub(super) fn new(key: api_key::Model, secret: Option<String>) -> Self {
        Self {
            object: "key",
            id: key.id,
            partner_id: key.partner_id,
            mode: key.mode,
            label: key.label,
            last4: key.last4,
            allowed_cidrs: key.allowed_cidrs,
            expires_at: key.expires_at,
            revoked_at: key.revoked_at,
            created_at: key.created_at,
            secret,
        }
    }
}
