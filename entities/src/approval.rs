//! A money movement above the four-eyes limit, held until a second operator
//! approves it.

use sea_orm::entity::prelude::*;

use crate::states::{ApprovalKind, ApprovalStatus};

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "approvals")]
pub struct Model {
    /// `apr_` id.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    /// What would move.
    pub kind: ApprovalKind,
    /// Whose float.
    pub partner_id: String,
    /// The cents in question (negative for a debit).
    pub amount_cents: i64,
    /// The request as validated, carried out on approval.
    pub request: Json,
    /// Where it stands.
    pub status: ApprovalStatus,
    /// Who asked.
    pub requested_by_id: String,
    pub requested_by_name: String,
    pub requested_at: DateTimeUtc,
    /// After this instant it lapses, moving nothing.
    pub expires_at: DateTimeUtc,
    /// Who approved or rejected it.
    pub decided_by_id: Option<String>,
    pub decided_by_name: Option<String>,
    pub decided_at: Option<DateTimeUtc>,
    /// The decider's note.
    pub decision_note: Option<String>,
    /// What the approval made: a ledger entry, a deposit or a review id.
    pub result_id: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
