//! A money movement on a live float. Rows are never edited.

use sea_orm::entity::prelude::*;

use crate::states::LedgerKind;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "ledger_entries")]
pub struct Model {
    /// `led_` id.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub partner_id: String,
    /// Allocated with the movement from the float row; unique per partner.
    pub seq: i64,
    /// `deposit`, `purchase`, `refund`, `adjustment`, `payout`, `chargeback`.
    pub kind: LedgerKind,
    /// Signed: purchases are negative.
    pub amount_cents: i64,
    pub balance_after_cents: i64,
    pub description: String,
    pub order_id: Option<String>,
    pub deposit_id: Option<String>,
    /// Unique name of a movement against an order or deposit (`po_x:purchase`,
    /// `po_x_3:refund`), so no movement happens twice.
    pub movement_key: Option<String>,
    pub created_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
