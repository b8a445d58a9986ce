//! eSIM profiles.

use chrono::{DateTime, Utc};
use entities::esim;
use sea_orm::{
    ColumnTrait, Condition, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect,
};

use crate::domain::{partner::Mode, states::EsimStatus};

/// A profile of a partner in a mode.
pub(crate) async fn find<C: ConnectionTrait>(
    db: &C,
    partner_id: &str,
    mode: Mode,
    iccid: &str,
) -> Result<Option<esim::Model>, DbErr> {
    esim::Entity::find_by_id(iccid.to_owned())
        .filter(esim::Column::PartnerId.eq(partner_id))
        .filter(esim::Column::Mode.eq(mode.as_str()))
        .one(db)
        .await
}

/// Filters of the profile list.
#[derive(Debug, Default)]
pub(crate) struct EsimQuery {
    pub order_id: Option<String>,
    pub status: Option<EsimStatus>,
    /// Exclusive.
    pub created_after: Option<DateTime<Utc>>,
    /// Keyset of the last row served: (created_at, iccid), newest first.
    pub before: Option<(DateTime<Utc>, String)>,
    pub limit: u64,
}

/// A page of a partner's profiles in one mode, newest first.
pub(crate) async fn list<C: ConnectionTrait>(
    db: &C,
    partner_id: &str,
    mode: Mode,
    query: &EsimQuery,
) -> Result<Vec<esim::Model>, DbErr> {
    let mut select = esim::Entity::find()
        .filter(esim::Column::PartnerId.eq(partner_id))
        .filter(esim::Column::Mode.eq(mode.as_str()));
    if let Some(order_id) = &query.order_id {
        select = select.filter(esim::Column::OrderId.eq(order_id.as_str()));
    }
    if let Some(status) = &query.status {
        select = select.filter(esim::Column::Status.eq(*status));
    }
    if let Some(after) = query.created_after {
        select = select.filter(esim::Column::CreatedAt.gt(after));
    }
    if let Some((at, iccid)) = &query.before {
        select = select.filter(
            Condition::any().add(esim::Column::CreatedAt.lt(*at)).add(
                Condition::all()
                    .add(esim::Column::CreatedAt.eq(*at))
                    .add(esim::Column::Iccid.lt(iccid.as_str())),
            ),
        );
    }
    select
        .order_by_desc(esim::Column::CreatedAt)
        .order_by_desc(esim::Column::Iccid)
        .limit(query.limit)
        .all(db)
        .await
}
