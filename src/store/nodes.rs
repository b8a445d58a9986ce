//! The nodes that provision, and their heartbeats: who is alive decides
//! whose provisioning claims may be taken over before their lease lapses.

use chrono::{DateTime, Utc};
use entities::node;
use sea_orm::{
    ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter,
    sea_query::{Expr, OnConflict, Query, SelectStatement},
};

use super::{Db, write_alone};

/// Says that `id` is alive at `now` (and, on its first beat, that it
/// started at `started_at`, clearing a stop of an earlier incarnation).
pub async fn beat(
    db: &Db,
    id: &str,
    started_at: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    let insert = node::Entity::insert(node::ActiveModel::from(node::Model {
        id: id.to_owned(),
        started_at,
        heartbeat_at: now,
        stopped_at: None,
    }))
    .on_conflict(
        OnConflict::column(node::Column::Id)
            .update_columns([
                node::Column::StartedAt,
                node::Column::HeartbeatAt,
                node::Column::StoppedAt,
            ])
            .to_owned(),
    );
    write_alone(db, insert.exec_without_returning(db))
        .await
        .map(|_| ())
}

/// Says that `id` stopped cleanly: its claims are free for others at once.
pub async fn stopped<C: ConnectionTrait>(
    db: &C,
    id: &str,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    node::Entity::update_many()
        .col_expr(node::Column::StoppedAt, Expr::value(Some(now)))
        .filter(node::Column::Id.eq(id))
        .exec(db)
        .await
        .map(|_| ())
}

/// The ids of the nodes alive: a heartbeat since `since` and no clean stop.
/// A claim held by a node not in this set is taken over at once.
pub fn alive(since: DateTime<Utc>) -> SelectStatement {
    Query::select()
        .column(node::Column::Id)
        .from(node::Entity)
        .and_where(node::Column::HeartbeatAt.gte(since))
        .and_where(node::Column::StoppedAt.is_null())
        .to_owned()
}
