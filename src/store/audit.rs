//! The operators' audit trail: append a row (inside the caller's
//! transaction, so the row exists exactly when the change does) and read
//! pages of it newest first. Nothing here updates or deletes a row, and the
//! database's triggers refuse it anyway.

use chrono::{DateTime, Utc};
use entities::audit_event;
use sea_orm::{
    ActiveModelTrait, ActiveValue::NotSet, ActiveValue::Set, ColumnTrait, ConnectionTrait, DbErr,
    EntityTrait, ExprTrait, QueryFilter, QueryOrder, QuerySelect,
};

use crate::domain::audit::Entry;

/// Appends `entry` on `db` (a transaction, where there is a change with it).
#[tracing::instrument(skip_all, fields(action = entry.action, operator = %entry.operator_name))]
pub(crate) async fn append<C: ConnectionTrait>(db: &C, entry: &Entry) -> Result<i64, DbErr> {
    let row = audit_event::ActiveModel {
        id: NotSet,
        at: Set(entry.at),
        operator_id: Set(entry.operator_id.clone()),
        operator_name: Set(entry.operator_name.clone()),
        role: Set(entry.role.to_owned()),
        action: Set(entry.action.to_owned()),
        outcome: Set(entry.outcome.as_str().to_owned()),
        target_kind: Set(entry.target_kind.to_owned()),
        target_id: Set(entry.target_id.clone()),
        partner_id: Set(entry.partner_id.clone()),
        request_id: Set(entry.request_id.clone()),
        amount_cents: Set(entry.amount_cents),
        before: Set(entry.before.clone()),
        after: Set(entry.after.clone()),
        note: Set(entry.note.clone()),
    }
    .insert(db)
    .await?;
    Ok(row.id)
}

/// Which rows a page of the trail holds.
#[derive(Debug, Default, Clone)]
pub struct AuditFilter {
    /// Only this operator's (`op_` id or name).
    pub operator: Option<String>,
    /// Only rows about this partner.
    pub partner_id: Option<String>,
    /// Only this action (`movement.create`), or every action of a noun
    /// (`movement`).
    pub action: Option<String>,
    /// At or after this instant.
    pub since: Option<DateTime<Utc>>,
    /// Before this instant.
    pub until: Option<DateTime<Utc>>,
    /// Only rows older than this id (the previous page's last).
    pub before_id: Option<i64>,
}

/// Up to `limit` rows matching `filter`, newest first.
pub async fn page<C: ConnectionTrait>(
    db: &C,
    filter: &AuditFilter,
    limit: u64,
) -> Result<Vec<audit_event::Model>, DbErr> {
    let mut query = audit_event::Entity::find();
    if let Some(operator) = &filter.operator {
        query = query.filter(
            audit_event::Column::OperatorId
                .eq(operator.as_str())
                .or(audit_event::Column::OperatorName.eq(operator.as_str())),
        );
    }
    if let Some(partner_id) = &filter.partner_id {
        query = query.filter(audit_event::Column::PartnerId.eq(partner_id.as_str()));
    }
    if let Some(action) = &filter.action {
        query = match action.contains('.') {
            true => query.filter(audit_event::Column::Action.eq(action.as_str())),
            false => query.filter(audit_event::Column::Action.starts_with(format!("{action}."))),
        };
    }
    if let Some(since) = filter.since {
        query = query.filter(audit_event::Column::At.gte(since));
    }
    if let Some(until) = filter.until {
        query = query.filter(audit_event::Column::At.lt(until));
    }
    if let Some(before_id) = filter.before_id {
        query = query.filter(audit_event::Column::Id.lt(before_id));
    }
    query
        .order_by_desc(audit_event::Column::Id)
        .limit(limit)
        .all(db)
        .await
}
