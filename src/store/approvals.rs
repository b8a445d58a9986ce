//! Money movements held for a second operator. Every decision is a guarded
//! update (`status = 'pending_approval'` and not lapsed), so of any number
//! of racing decisions exactly one changes the row; the approval's is made
//! in the transaction that moves the money.

use chrono::{DateTime, Utc};
use entities::approval;
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, ConnectionTrait, DbErr, EntityTrait,
    QueryFilter, QueryOrder, QuerySelect,
};
use serde_json::Value;

use crate::domain::states::{ApprovalKind, ApprovalStatus};

/// An approval to insert.
pub(crate) struct NewApproval {
    pub id: String,
    pub kind: ApprovalKind,
    pub partner_id: String,
    pub amount_cents: i64,
    pub request: Value,
    pub requested_by_id: String,
    pub requested_by_name: String,
    pub expires_at: DateTime<Utc>,
}

pub(crate) async fn insert<C: ConnectionTrait>(
    db: &C,
    new: NewApproval,
    now: DateTime<Utc>,
) -> Result<approval::Model, DbErr> {
    approval::ActiveModel {
        id: Set(new.id),
        kind: Set(new.kind),
        partner_id: Set(new.partner_id),
        amount_cents: Set(new.amount_cents),
        request: Set(new.request),
        status: Set(ApprovalStatus::PendingApproval),
        requested_by_id: Set(new.requested_by_id),
        requested_by_name: Set(new.requested_by_name),
        requested_at: Set(now),
        expires_at: Set(new.expires_at),
        decided_by_id: Set(None),
        decided_by_name: Set(None),
        decided_at: Set(None),
        decision_note: Set(None),
        result_id: Set(None),
    }
    .insert(db)
    .await
}

/// One approval by id.
pub async fn find<C: ConnectionTrait>(db: &C, id: &str) -> Result<Option<approval::Model>, DbErr> {
    approval::Entity::find_by_id(id.to_owned()).one(db).await
}

/// Up to `limit` approvals, newest first, whatever their status: a lapsed
/// one may still be stored as pending, so callers filter on the effective
/// status (`domain::operators::effective_status`).
pub async fn list<C: ConnectionTrait>(db: &C, limit: u64) -> Result<Vec<approval::Model>, DbErr> {
    approval::Entity::find()
        .order_by_desc(approval::Column::Id)
        .limit(limit)
        .all(db)
        .await
}

/// A decision on a pending approval.
pub(crate) struct Decision<'a> {
    pub status: ApprovalStatus,
    pub by_id: &'a str,
    pub by_name: &'a str,
    pub note: Option<&'a str>,
    pub result_id: Option<&'a str>,
    pub now: DateTime<Utc>,
}

/// Records `decision` if the approval is still pending and, unless it is a
/// lapse, not past its time; whether it was.
pub(crate) async fn decide<C: ConnectionTrait>(
    db: &C,
    id: &str,
    decision: Decision<'_>,
) -> Result<bool, DbErr> {
    let mut update = approval::Entity::update_many()
        .col_expr(approval::Column::Status, decision.status.into())
        .col_expr(
            approval::Column::DecidedById,
            Some(decision.by_id.to_owned()).into(),
        )
        .col_expr(
            approval::Column::DecidedByName,
            Some(decision.by_name.to_owned()).into(),
        )
        .col_expr(approval::Column::DecidedAt, Some(decision.now).into())
        .col_expr(
            approval::Column::DecisionNote,
            decision.note.map(str::to_owned).into(),
        )
        .col_expr(
            approval::Column::ResultId,
            decision.result_id.map(str::to_owned).into(),
        )
        .filter(approval::Column::Id.eq(id))
        .filter(approval::Column::Status.eq(ApprovalStatus::PendingApproval));
    update = match decision.status {
        ApprovalStatus::Lapsed => update.filter(approval::Column::ExpiresAt.lte(decision.now)),
        _ => update.filter(approval::Column::ExpiresAt.gt(decision.now)),
    };
    Ok(update.exec(db).await?.rows_affected == 1)
}
