//! eSIM profiles.

use chrono::{DateTime, Utc};
use entities::esim;
use sea_orm::{
    ColumnTrait, Condition, ConnectionTrait, DbBackend, DbErr, EntityTrait, IdenStatic,
    QueryFilter, QueryOrder, QuerySelect, Select,
    sea_query::{Expr, ExprTrait},
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
    list_select(db.get_database_backend(), partner_id, mode, query)
        .all(db)
        .await
}

/// The select of [`list`]. An order's profiles are found by its unit id
/// range ([`crate::store::orders::unit_id_range`]; the table has no index
/// by order), checked against the order's id too. SQLite's planner would
/// rather walk the partner's profiles by their listing index (it saves the
/// sort, and a young file has no statistics to say the range is smaller),
/// so there the partner's and mode's conditions are written as `+column`,
/// which no index serves; PostgreSQL plans by its statistics.
fn list_select(
    backend: DbBackend,
    partner_id: &str,
    mode: Mode,
    query: &EsimQuery,
) -> Select<esim::Entity> {
    let by_order = query.order_id.as_deref();
    let column = |column: esim::Column| match (backend, by_order) {
        (DbBackend::Sqlite, Some(_)) => Expr::cust(format!("+\"esims\".\"{}\"", column.as_str())),
        _ => Expr::col((esim::Entity, column)),
    };
    let mut select = esim::Entity::find()
        .filter(column(esim::Column::PartnerId).eq(partner_id))
        .filter(column(esim::Column::Mode).eq(mode.as_str()));
    if let Some(order_id) = by_order {
        let (from, until) = crate::store::orders::unit_id_range(order_id);
        select = select
            .filter(esim::Column::UnitId.gte(from))
            .filter(esim::Column::UnitId.lt(until))
            .filter(esim::Column::OrderId.eq(order_id));
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use sea_orm::QueryTrait;

    /// A partner's profiles of one order are found by the order's unit id
    /// range, never by walking the partner's profiles.
    #[tokio::test]
    async fn an_orders_profiles_are_found_by_its_unit_range_on_sqlite() {
        let query = EsimQuery {
            order_id: Some("po_0ABC".to_owned()),
            limit: 50,
            ..EsimQuery::default()
        };
        let select =
            list_select(DbBackend::Sqlite, "ptr_1", Mode::Live, &query).build(DbBackend::Sqlite);
        crate::store::tests::assert_planned_through(
            select,
            "USING INDEX sqlite_autoindex_esims_2 (unit_id>? AND unit_id<?)",
            "idx_esims_partner_created",
        )
        .await;
    }
}
