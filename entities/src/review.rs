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
    /// `zero_settlement`, `refunded_after_credit`, `paid_on_closed_account`.
    pub reason: ReviewReason,
    pub detail: String,
    /// `open` or `resolved`.
    pub status: ReviewStatus,
    pub resolution: Option<String>,
    pub created_at: DateTimeUtc,
    pub resolved_at: Option<DateTimeUtc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
