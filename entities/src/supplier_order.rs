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
    /// The supplier's package code (our plan id).
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
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
