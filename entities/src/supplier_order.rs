//! One order placed with the supplier, carrying many units.

use sea_orm::entity::prelude::*;

use crate::states::{Mode, SupplierOrderStatus};

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "supplier_orders")]
pub struct Model {
    /// `so_…`; the supplier's `transactionId`, so a repeat is the same order.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    /// `live` or `sandbox`: which supplier it went to.
    pub mode: Mode,
    /// The supplier's package code (for eSIM Access, our plan id).
    pub package_code: String,
    /// Profiles bought.
    pub unit_count: i32,
    /// The supplier's `orderNo`, once it answered.
    pub order_no: Option<String>,
    /// `placing`, `placed`, `allocated` or `failed`.
    pub status: SupplierOrderStatus,
    /// Placement calls that failed without an answer that settles it.
    pub attempts: i32,
    pub last_error: Option<String>,
    /// The node that wrote it down.
    pub node_id: String,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
    /// Which supplier it went to: `esim_access` or `airalo`.
    pub supplier: String,
    /// The plan whose units it carries (null on rows written before there
    /// was more than one supplier).
    pub plan_id: Option<String>,
    /// The supplier order that took its units over when this one would
    /// certainly not deliver them (failover); set only on `failed` rows.
    pub successor_id: Option<String>,
    /// What the supplier charged per profile, in US cents, when it said.
    pub unit_cost_cents: Option<i64>,
    /// Placement calls sent, counted before each call.
    pub calls_sent: i32,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
