//! An order: one plan, a quantity, a price snapshot, a status.

use sea_orm::entity::prelude::*;

use crate::states::{FailureCode, Mode, OrderStatus};

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "orders")]
pub struct Model {
    /// `po_` id.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub partner_id: String,
    /// `live` or `sandbox`.
    pub mode: Mode,
    /// The partner's Idempotency-Key (trimmed).
    pub idempotency_key: String,
    pub plan_id: String,
    pub quantity: i32,
    /// Price snapshot at acceptance: it binds whatever the catalogue says later.
    pub unit_price_cents: i64,
    pub total_cents: i64,
    pub list_unit_cents: i64,
    /// `tier:<tier>` or `override`.
    pub price_source: String,
    /// The partner's metadata, echoed verbatim.
    pub metadata: Json,
    /// `processing`, `completed`, `partially_completed` or `failed`.
    pub status: OrderStatus,
    pub failure_code: Option<FailureCode>,
    /// Money returned for undelivered units.
    pub refunded_cents: i64,
    /// Provisioning passes started.
    pub attempts: i32,
    /// A provisioning worker holds the order until then (several nodes).
    pub claimed_until: Option<DateTimeUtc>,
    /// The node holding the claim (its `nd_` id), while one does.
    pub claimed_by: Option<String>,
    pub created_at: DateTimeUtc,
    pub completed_at: Option<DateTimeUtc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
