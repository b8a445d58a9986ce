//! A child order: one unit of an order, provisioned on its own.

use sea_orm::entity::prelude::*;

use crate::states::UnitStatus;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "order_units")]
pub struct Model {
    /// `<order id>_<n>`; also the supplier transaction id, so a retry never buys twice.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub order_id: String,
    /// 1-based.
    pub unit_index: i32,
    /// `pending`, `delivered` or `refunded`.
    pub status: UnitStatus,
    /// The supplier's order number once placed (one unit per supplier
    /// order, before supplier orders carried many units).
    pub supplier_order_no: Option<String>,
    /// The supplier order (`supplier_orders.id`, its `transactionId`) that
    /// carries this unit, written down before the supplier is called.
    pub supplier_txn_id: Option<String>,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
