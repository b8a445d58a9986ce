//! Something about a deposit that a person must decide.

use sea_orm::entity::prelude::*;

use crate::states::{ReviewReason, ReviewStatus};

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "reviews")]
pub struct Model {
    /// `rev_` id.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub deposit_id: String,
    pub partner_id: String,
    /// Why a person must decide.
    pub reason: ReviewReason,
    pub detail: String,
    /// The cents in question, as raised (0 when nothing arrived).
    pub amount_cents: i64,
    /// `open` until an operator approves, rejects or resolves it.
    pub status: ReviewStatus,
    pub resolution: Option<String>,
    pub created_at: DateTimeUtc,
    pub resolved_at: Option<DateTimeUtc>,
    /// The ledger movement an approval wrote.
    pub ledger_entry_id: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
