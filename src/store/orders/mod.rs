//! Orders, units, profiles, idempotency keys and the ledger rows they write.
//!
//! Every money movement here is guarded twice: the float update is
//! conditional (`balance >= amount` for a debit) and the ledger row carries a
//! unique `movement_key`; a unit moves out of `pending` only once.

use std::collections::{BTreeSet, HashMap, HashSet};

use chrono::{DateTime, Utc};
use entities::{esim, float, idempotency_key, ledger_entry, order, order_unit};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, Condition, ConnectionTrait, DbBackend, DbErr, EntityTrait,
    PaginatorTrait, QueryFilter, QueryOrder, QuerySelect, Statement,
    sea_query::{Expr, ExprTrait, Func, SimpleExpr},
};

use super::{Db, bulk, nodes, write_alone};
use crate::domain::{
    ids::LedgerEntryId,
    order::{self as rules, FailureCode, OrderStatus, UnitStatus},
    ordering::{Binding, Bound, Refusal},
    partner::Mode,
    states::LedgerKind,
};

mod accept;
mod bindings;
mod claims;
mod money;
mod read_inline;
mod settle;
mod settle_inline;

pub use accept::*;
pub use bindings::*;
pub use claims::*;
use money::move_float;
pub use money::*;
pub use settle::*;
pub(crate) use settle_inline::*;

/// Orders a person should look at, newest first, at most `limit`.
pub async fn needing_attention<C: ConnectionTrait>(
    db: &C,
    processing_since: DateTime<Utc>,
    limit: u64,
) -> Result<Vec<order::Model>, DbErr> {
    order::Entity::find()
        .filter(needs_attention(processing_since))
        .order_by_desc(order::Column::CreatedAt)
        .limit(limit)
        .all(db)
        .await
}

/// How many orders a person should look at.
pub async fn needing_attention_count<C: ConnectionTrait>(
    db: &C,
    processing_since: DateTime<Utc>,
) -> Result<u64, DbErr> {
    order::Entity::find()
        .filter(needs_attention(processing_since))
        .count(db)
        .await
}

/// Orders that failed, and those still `processing` that were accepted
/// before `processing_since` (past the supplier's deadline).
fn needs_attention(processing_since: DateTime<Utc>) -> Condition {
    let stuck = Condition::all()
        .add(status_is(OrderStatus::Processing))
        .add(order::Column::CreatedAt.lt(processing_since));
    Condition::any()
        .add(status_is(OrderStatus::Failed))
        .add(stuck)
}

/// `status = '<word>'` with the word written into the statement, not bound.
/// The status index holds only the open orders (`processing` and `failed`:
/// a partial index), and a planner takes a partial index only for a
/// condition it can read in the statement's text: SQLite, built with the
/// planner stability guarantee, never plans by a bound value, nor do
/// PostgreSQL's generic plans. The words are the vocabulary's own, plain
/// lowercase letters and underscores.
fn status_is(status: OrderStatus) -> SimpleExpr {
    Expr::col((order::Entity, order::Column::Status))
        .eq(SimpleExpr::Constant(status.as_str().into()))
}

/// Both floats of a partner: (live, sandbox).
pub async fn balances<C: ConnectionTrait>(db: &C, partner_id: &str) -> Result<(i64, i64), DbErr> {
    let rows = float::Entity::find()
        .filter(float::Column::PartnerId.eq(partner_id))
        .all(db)
        .await?;
    let of = |mode: Mode| {
        rows.iter()
            .find(|f| f.mode == mode)
            .map_or(0, |f| f.balance_cents)
    };
    Ok((of(Mode::Live), of(Mode::Sandbox)))
}

/// An order of a partner in a mode.
pub async fn find_order<C: ConnectionTrait>(
    db: &C,
    partner_id: &str,
    mode: Mode,
    id: &str,
) -> Result<Option<order::Model>, DbErr> {
    order::Entity::find_by_id(id.to_owned())
        .filter(order::Column::PartnerId.eq(partner_id))
        .filter(order::Column::Mode.eq(mode))
        .one(db)
        .await
}

/// The partner's order of `mode` with its eSIMs (by unit), read fresh: on
/// the caller's thread in one snapshot for a SQLite file
/// ([`super::inline`]), else (or if that read fails) through the pool.
pub async fn find_order_with_esims(
    db: &super::Db,
    inline: Option<&super::inline::InlineReader>,
    partner_id: &str,
    mode: Mode,
    id: &str,
) -> Result<Option<(order::Model, Vec<esim::Model>)>, DbErr> {
    let read = |c: &rusqlite::Connection| read_inline::order_with_esims(c, partner_id, mode, id);
    if let Some(found) = super::inline::read(inline, read) {
        return Ok(found);
    }
    let Some(order) = find_order(db, partner_id, mode, id).await? else {
        return Ok(None);
    };
    let esims = esims_of(db, std::slice::from_ref(&order.id)).await?;
    Ok(Some((order, esims)))
}

/// One order by id, whoever owns it (internal use).
pub async fn get_order<C: ConnectionTrait>(
    db: &C,
    id: &str,
) -> Result<Option<order::Model>, DbErr> {
    order::Entity::find_by_id(id.to_owned()).one(db).await
}

/// Several orders by id, in one query (internal use).
pub async fn get_orders<C: ConnectionTrait>(
    db: &C,
    ids: &[String],
) -> Result<Vec<order::Model>, DbErr> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    order::Entity::find()
        .filter(bulk::column_in(
            db,
            order::Column::Id,
            ids.iter().map(String::as_str),
        ))
        .all(db)
        .await
}

/// Filters of the order list.
#[derive(Debug, Default)]
pub struct OrderQuery {
    pub status: Option<OrderStatus>,
    pub created_after: Option<DateTime<Utc>>,
    pub created_before: Option<DateTime<Utc>>,
    /// Keyset of the last row served: (created_at, id), newest first.
    pub before: Option<(DateTime<Utc>, String)>,
    pub limit: u64,
}

/// A page of a partner's orders in one mode, newest first.
pub async fn list_orders<C: ConnectionTrait>(
    db: &C,
    partner_id: &str,
    mode: Mode,
    query: &OrderQuery,
) -> Result<Vec<order::Model>, DbErr> {
    let mut select = order::Entity::find()
        .filter(order::Column::PartnerId.eq(partner_id))
        .filter(order::Column::Mode.eq(mode));
    if let Some(status) = &query.status {
        select = select.filter(order::Column::Status.eq(*status));
    }
    if let Some(after) = query.created_after {
        select = select.filter(order::Column::CreatedAt.gt(after));
    }
    if let Some(before) = query.created_before {
        select = select.filter(order::Column::CreatedAt.lt(before));
    }
    if let Some((at, id)) = &query.before {
        select = select.filter(
            Condition::any().add(order::Column::CreatedAt.lt(*at)).add(
                Condition::all()
                    .add(order::Column::CreatedAt.eq(*at))
                    .add(order::Column::Id.lt(id.as_str())),
            ),
        );
    }
    select
        .order_by_desc(order::Column::CreatedAt)
        .order_by_desc(order::Column::Id)
        .limit(query.limit)
        .all(db)
        .await
}

/// The units of an order, in order: those with a row as stored, and those
/// without one (no supplier order has taken them yet) pending, as
/// [`pending_units`] makes them.
pub async fn units_of<C: ConnectionTrait>(
    db: &C,
    order: &order::Model,
) -> Result<Vec<order_unit::Model>, DbErr> {
    let (from, until) = unit_id_range(&order.id);
    let rows = order_unit::Entity::find()
        .filter(order_unit::Column::Id.gte(from))
        .filter(order_unit::Column::Id.lt(until))
        .order_by_asc(order_unit::Column::UnitIndex)
        .all(db)
        .await?;
    Ok(with_unwritten_units(order, rows))
}

/// An order's unit `rows` with the units it has no row for, pending, in
/// unit order.
fn with_unwritten_units(
    order: &order::Model,
    rows: Vec<order_unit::Model>,
) -> Vec<order_unit::Model> {
    let written: HashSet<i32> = rows.iter().map(|u| u.unit_index).collect();
    let mut units = rows;
    units.extend(
        pending_units(order, order.created_at)
            .into_iter()
            .filter(|u| !written.contains(&u.unit_index)),
    );
    units.sort_by_key(|u| u.unit_index);
    units
}

/// The profiles delivered for some orders.
pub async fn esims_of<C: ConnectionTrait>(
    db: &C,
    order_ids: &[String],
) -> Result<Vec<esim::Model>, DbErr> {
    if order_ids.is_empty() {
        return Ok(Vec::new());
    }
    esim::Entity::find()
        .from_raw_sql(esims_of_statement(db.get_database_backend(), order_ids))
        .all(db)
        .await
}

/// The select of [`esims_of`]: each order's profiles by its unit id range
/// (the table has no index by order), in unit id order.
fn esims_of_statement(backend: DbBackend, order_ids: &[String]) -> Statement {
    let sql = format!(
        "SELECT e.* FROM {} ORDER BY e.\"unit_id\"",
        orders_joined_by_unit_range(backend, "esims", "e", "unit_id")
    );
    let list = serde_json::Value::from(order_ids).to_string();
    Statement::from_sql_and_values(backend, sql, [list.into()])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tests::{
        assert_planned_through, on_own_postgres, one_value, postgres_plan, processing_orders,
    };

    /// SQLite finds each listed order's profiles by a range of their unit
    /// ids' index, never by reading the table.
    #[tokio::test]
    async fn profiles_of_orders_are_ranges_of_their_unit_ids_on_sqlite() {
        let ids = ["po_1".to_owned(), "po_2".to_owned()];
        assert_planned_through(
            esims_of_statement(DbBackend::Sqlite, &ids),
            "e USING INDEX sqlite_autoindex_esims_2 (unit_id>? AND unit_id<?)",
            "SCAN e",
        )
        .await;
    }

    /// On PostgreSQL the unit id columns compare byte by byte whatever the
    /// database's collation, so an order's range holds its units and
    /// profiles only (`ord_1`'s, not `ord_10`'s), found through the
    /// columns' own indexes; the indexes by order are gone.
    #[tokio::test]
    async fn units_and_profiles_are_ranges_of_their_unit_ids_on_postgres() {
        on_own_postgres("esim_unit_ranges", |db| async move {
            let collations = db
                .query_all_raw(Statement::from_string(
                    DbBackend::Postgres,
                    "SELECT table_name, collation_name FROM information_schema.columns \
                     WHERE (table_name, column_name) IN (('order_units', 'id'), ('esims', 'unit_id')) \
                     ORDER BY table_name",
                ))
                .await
                .unwrap();
            let named: Vec<(String, String)> = collations
                .iter()
                .map(|row| row.try_get_many_by_index().unwrap())
                .collect();
            assert_eq!(
                named,
                [("esims".into(), "C".into()), ("order_units".into(), "C".into())]
            );
            let by_order: i64 = one_value(
                &db,
                "SELECT COUNT(*) FROM pg_indexes \
                 WHERE indexname IN ('idx_units_order', 'idx_esims_order')",
            )
            .await;
            assert_eq!(by_order, 0);

            processing_orders(&db, 2000, 2).await;
            db.execute_unprepared(
                "INSERT INTO order_units (id, order_id, unit_index, status, attempts, updated_at) \
                 SELECT 'ord_' || n || '_' || u, 'ord_' || n, u, 'delivered', 0, now() \
                 FROM generate_series(1, 2000) AS n, generate_series(1, 2) AS u; \
                 INSERT INTO esims (iccid, partner_id, mode, order_id, unit_id, plan_id, status, \
                 smdp_address, matching_id, activation_code, created_at) \
                 SELECT '8900' || n || u, 'ptr_1', 'live', 'ord_' || n, 'ord_' || n || '_' || u, \
                 'plan', 'released', 'smdp', 'm', 'LPA:1$smdp$m', now() \
                 FROM generate_series(1, 2000) AS n, generate_series(1, 2) AS u",
            )
            .await
            .unwrap();
            let ids = ["ord_1".to_owned(), "ord_20".to_owned()];
            let statement = esims_of_statement(DbBackend::Postgres, &ids);
            let plan = postgres_plan(&db, &statement).await;
            assert!(plan.contains("esims_unit_id_key"), "{plan}");
            assert!(!plan.contains("Seq Scan on esims"), "{plan}");
            let units: Vec<String> = esims_of(&db, &ids)
                .await
                .unwrap()
                .into_iter()
                .map(|e| e.unit_id)
                .collect();
            assert_eq!(units, ["ord_1_1", "ord_1_2", "ord_20_1", "ord_20_2"]);

            let order = order::Entity::find_by_id("ord_10".to_owned())
                .one(&db)
                .await
                .unwrap()
                .unwrap();
            let indexes: Vec<i32> = units_of(&db, &order)
                .await
                .unwrap()
                .iter()
                .map(|u| u.unit_index)
                .collect();
            assert_eq!(indexes, [1, 2]);
        })
        .await;
    }
}
