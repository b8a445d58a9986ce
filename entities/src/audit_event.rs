//! One row of the operators' audit trail: append-only (a trigger refuses
//! any update or delete).

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "audit_events")]
pub struct Model {
    /// Increasing id; pages are keyed on it.
    #[sea_orm(primary_key)]
    pub id: i64,
    /// When it happened.
    pub at: DateTimeUtc,
    /// Who did it (`op_` id, or `op_bootstrap` for the configured token).
    pub operator_id: String,
    /// Their name at the time.
    pub operator_name: String,
    /// Their role at the time.
    pub role: String,
    /// What was done, e.g. `movement.create` or `approval.approve`.
    pub action: String,
    /// `ok`, `pending_approval` or `refused`.
    pub outcome: String,
    /// What it was done to: `partner`, `key`, `deposit`, `review`,
    /// `operator`, `approval`, `plan`, `destination`, `actor`.
    pub target_kind: String,
    /// The target's id.
    pub target_id: String,
    /// The partner concerned, if any.
    pub partner_id: Option<String>,
    /// The request that did it (`X-Request-Id`).
    pub request_id: Option<String>,
    /// The cents moved or asked for, if money.
    pub amount_cents: Option<i64>,
    /// What the target was before, where that is known.
    pub before: Option<Json>,
    /// What it became.
    pub after: Option<Json>,
    /// The operator's note, or why the attempt was refused.
    pub note: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
