//! Supplier orders: one order placed with the supplier carries the units of
//! many of our orders. Each is written down, with the units it carries,
//! before the supplier is called.

use std::convert::Infallible;

use chrono::{DateTime, Utc};
use entities::{order_unit, supplier_order};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DbBackend, DbErr, EntityTrait, QueryFilter,
    QueryOrder, QuerySelect, QueryTrait, Statement, UpdateMany,
    sea_query::{Expr, ExprTrait},
};

use super::{
    WriterDb, bulk,
    inline_write::{self, InlineFailed, InlineWriter},
    orders, write_alone,
};
use crate::domain::states::{SupplierOrderStatus, UnitStatus};

use SupplierOrderStatus::{Placed, Placing};

/// Writes a supplier order down and gives it its units. Only units still
/// pending and carried by no supplier order are taken; `Ok(false)` (and the
/// caller rolls back) if any of them was not.
pub(crate) async fn open<C: ConnectionTrait>(
    txn: &C,
    row: supplier_order::Model,
    unit_ids: &[String],
) -> Result<bool, DbErr> {
    let take = take_units(
        txn.get_database_backend(),
        &row.id,
        row.created_at,
        unit_ids,
    )?;
    supplier_order::ActiveModel::from(row).insert(txn).await?;
    let taken = match take {
        Some(take) => txn.execute_raw(take).await?.rows_affected(),
        None => 0,
    };
    Ok(taken == unit_ids.len() as u64)
}

/// [`open`] in the inline writer's transaction (SQLite): `Refused` when a
/// unit was not taken (the transaction rolls back).
pub(crate) fn open_inline(
    connection: &rusqlite::Connection,
    row: &supplier_order::Model,
    unit_ids: &[String],
) -> Result<(), InlineFailed<()>> {
    inline_write::insert_rows::<supplier_order::Entity, _>(
        connection,
        std::slice::from_ref(row),
        &[],
    )?;
    // Row by row, as the inline writer inserts: the pool's one statement
    // packs the rows into JSON that SQLite unpacks column by column.
    let rows = taken_rows(&row.id, row.created_at, unit_ids).map_err(InlineFailed::Unavailable)?;
    let taken = inline_write::upsert_rows::<order_unit::Entity, _>(
        connection, &rows, &TAKE_KEY, &TAKE_SET, TAKE_GUARD,
    )?;
    match taken == unit_ids.len() {
        true => Ok(()),
        false => Err(InlineFailed::Refused(())),
    }
}

/// The statement that gives supplier order `supplier_order_id`, opened
/// `at`, its units: each unit of `unit_ids` is written down carried by it,
/// or, where its row exists already (a unit an earlier pass counted a
/// failed attempt on), taken if still pending and carried by no supplier
/// order. A unit's row is written when a supplier order takes it, not when
/// its order is accepted: until then the order's quantity says it is
/// pending.
fn take_units(
    backend: DbBackend,
    supplier_order_id: &str,
    at: DateTime<Utc>,
    unit_ids: &[String],
) -> Result<Option<Statement>, DbErr> {
    let rows = taken_rows(supplier_order_id, at, unit_ids)?;
    bulk::upsert_statement::<order_unit::Entity>(backend, &rows, &TAKE_KEY, &TAKE_SET, TAKE_GUARD)
}

/// A unit's row as a supplier order takes it: pending, carried by it.
fn taken_rows(
    supplier_order_id: &str,
    at: DateTime<Utc>,
    unit_ids: &[String],
) -> Result<Vec<order_unit::Model>, DbErr> {
    unit_ids
        .iter()
        .map(|id| {
            let (order_id, n) = orders::unit_of_id(id)
                .ok_or_else(|| DbErr::Custom(format!("not a unit id: {id}")))?;
            let carried = Some(supplier_order_id);
            Ok(orders::unit_row(
                order_id,
                n,
                UnitStatus::Pending,
                carried,
                at,
            ))
        })
        .collect()
}

/// The column by which a supplier order finds a unit's row that exists already.
const TAKE_KEY: [order_unit::Column; 1] = [order_unit::Column::Id];
/// What a supplier order writes over a unit's existing row: itself as the
/// carrier, and the time.
const TAKE_SET: [order_unit::Column; 2] = [
    order_unit::Column::SupplierTxnId,
    order_unit::Column::UpdatedAt,
];
/// A unit's existing row is taken only while it is pending and carried by no
/// supplier order.
const TAKE_GUARD: &str =
    "\"order_units\".\"supplier_txn_id\" IS NULL AND \"order_units\".\"status\" = 'pending'";

pub(crate) async fn get<C: ConnectionTrait>(
    db: &C,
    id: &str,
) -> Result<Option<supplier_order::Model>, DbErr> {
    supplier_order::Entity::find_by_id(id.to_owned())
        .one(db)
        .await
}

/// The ids of the units a supplier order carries, in the order profiles
/// are dealt to them (by unit id).
pub(crate) async fn unit_ids_of<C: ConnectionTrait>(
    db: &C,
    id: &str,
) -> Result<Vec<String>, DbErr> {
    // Only the ids: a delivery deals by them, and whole rows were decoded
    // (every column, its timestamps parsed) to be dropped.
    order_unit::Entity::find()
        .select_only()
        .column(order_unit::Column::Id)
        .filter(order_unit::Column::SupplierTxnId.eq(id))
        .order_by_asc(order_unit::Column::Id)
        .into_tuple()
        .all(db)
        .await
}

/// Records the supplier's order number (and its price per profile, when it
/// said): the order is placed.
pub(crate) async fn placed(
    db: &WriterDb,
    inline: Option<&InlineWriter>,
    id: &str,
    order_no: &str,
    unit_cost_cents: Option<i64>,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    let update = supplier_order::Entity::update_many()
        .col_expr(supplier_order::Column::OrderNo, Expr::value(Some(order_no)))
        .col_expr(
            supplier_order::Column::UnitCostCents,
            Expr::value(unit_cost_cents),
        )
        .col_expr(supplier_order::Column::Status, Expr::value(Placed))
        .col_expr(supplier_order::Column::UpdatedAt, Expr::value(now))
        .filter(supplier_order::Column::Id.eq(id))
        .filter(supplier_order::Column::Status.eq(Placing));
    update_one(db, inline, update).await
}

/// Moves a supplier order to a final status (`allocated` or `failed`).
pub(crate) async fn finish(
    db: &WriterDb,
    inline: Option<&InlineWriter>,
    id: &str,
    status: SupplierOrderStatus,
    error: Option<&str>,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    let error: Option<String> = error.map(|e| e.chars().take(500).collect());
    let mut update = supplier_order::Entity::update_many()
        .col_expr(supplier_order::Column::Status, Expr::value(status))
        .col_expr(supplier_order::Column::UpdatedAt, Expr::value(now));
    if let Some(error) = error {
        update = update.col_expr(supplier_order::Column::LastError, Expr::value(Some(error)));
    }
    let update = update
        .filter(supplier_order::Column::Id.eq(id))
        .filter(supplier_order::Column::Status.is_in([Placing, Placed]));
    update_one(db, inline, update).await
}

/// Counts a placement call that settled nothing; returns the attempts so far.
pub(crate) async fn failed_attempt(
    db: &WriterDb,
    id: &str,
    error: &str,
    now: DateTime<Utc>,
) -> Result<i32, DbErr> {
    let error: String = error.chars().take(500).collect();
    let update = supplier_order::Entity::update_many()
        .col_expr(
            supplier_order::Column::Attempts,
            Expr::col(supplier_order::Column::Attempts).add(1),
        )
        .col_expr(supplier_order::Column::LastError, Expr::value(Some(error)))
        .col_expr(supplier_order::Column::UpdatedAt, Expr::value(now))
        .filter(supplier_order::Column::Id.eq(id));
    update_returning(db, None, update, supplier_order::Column::Attempts).await
}

/// Counts a placement call about to be sent (`by` = 1), or takes one back
/// (`by` = -1) when it certainly never left; returns the count after.
pub(crate) async fn count_sent(
    db: &WriterDb,
    inline: Option<&InlineWriter>,
    id: &str,
    by: i32,
    now: DateTime<Utc>,
) -> Result<i32, DbErr> {
    let update = supplier_order::Entity::update_many()
        .col_expr(
            supplier_order::Column::CallsSent,
            Expr::col(supplier_order::Column::CallsSent).add(by),
        )
        .col_expr(supplier_order::Column::UpdatedAt, Expr::value(now))
        .filter(supplier_order::Column::Id.eq(id));
    update_returning(db, inline, update, supplier_order::Column::CallsSent).await
}

/// Runs `update` of one supplier order and returns `column` as the update
/// left it (0 when no row matched), read back by the statement itself
/// (`RETURNING`, on PostgreSQL and SQLite alike): on a SQLite file inline
/// as in [`update_one`], else (or if that failed, rolled back) alone through
/// the pool (on PostgreSQL a kept connection), one statement where a read
/// after the update made two.
async fn update_returning(
    db: &WriterDb,
    inline: Option<&InlineWriter>,
    update: UpdateMany<supplier_order::Entity>,
    column: supplier_order::Column,
) -> Result<i32, DbErr> {
    let mut query = update.into_query();
    query.returning_col(column);
    if let Some(inline) = inline {
        let statement = DbBackend::Sqlite.build(&query);
        let done = inline
            .transaction(move |c| {
                inline_write::query::<i32, Infallible>(c, &statement, |row| row.get(0))
            })
            .await;
        if let Ok(after) = done {
            return Ok(after.first().copied().unwrap_or(0));
        }
    }
    let statement = db.get_database_backend().build(&query);
    match write_alone(db.db(), db.query_one_raw(statement)).await? {
        Some(row) => row.try_get_by_index(0),
        None => Ok(0),
    }
}

/// Runs a bookkeeping update of one supplier order: on a SQLite file as a
/// write of its inline connection, committed with the order path's other
/// writes queued meanwhile (no commit and fsync of its own), else (or if
/// that failed, rolled back) alone through the pool (on PostgreSQL a kept
/// connection).
async fn update_one(
    db: &WriterDb,
    inline: Option<&InlineWriter>,
    update: UpdateMany<supplier_order::Entity>,
) -> Result<(), DbErr> {
    if let Some(inline) = inline {
        let statement = update.clone().build(DbBackend::Sqlite);
        let done = inline
            .transaction(move |c| inline_write::execute::<Infallible>(c, &statement))
            .await;
        if done.is_ok() {
            return Ok(());
        }
    }
    write_alone(db.db(), update.exec(db)).await.map(|_| ())
}

/// The supplier's own lookup proved it has no order under this id: nothing
/// sent so far was taken.
pub(crate) async fn none_taken(db: &WriterDb, id: &str, now: DateTime<Utc>) -> Result<(), DbErr> {
    let update = supplier_order::Entity::update_many()
        .col_expr(supplier_order::Column::CallsSent, Expr::value(0))
        .col_expr(supplier_order::Column::UpdatedAt, Expr::value(now))
        .filter(supplier_order::Column::Id.eq(id))
        .filter(supplier_order::Column::Status.eq(Placing));
    write_alone(db.db(), update.exec(db)).await.map(|_| ())
}

/// Hands the units of a supplier order that will certainly not deliver to
/// a new one at the next supplier, in one transaction: the new order is
/// written down, the units move to it, and the old one ends `failed` naming
/// its successor. `Ok(false)` (and the caller rolls back) when the old one
/// was no longer being placed (another node settled it first).
pub(crate) async fn hand_over<C: ConnectionTrait>(
    txn: &C,
    from: &str,
    reason: &str,
    successor: supplier_order::Model,
) -> Result<bool, DbErr> {
    let now = successor.updated_at;
    let to = successor.id.clone();
    let reason: String = reason.chars().take(500).collect();
    let ended = supplier_order::Entity::update_many()
        .col_expr(
            supplier_order::Column::Status,
            Expr::value(SupplierOrderStatus::Failed),
        )
        .col_expr(
            supplier_order::Column::SuccessorId,
            Expr::value(Some(to.clone())),
        )
        .col_expr(supplier_order::Column::LastError, Expr::value(Some(reason)))
        .col_expr(supplier_order::Column::UpdatedAt, Expr::value(now))
        .filter(supplier_order::Column::Id.eq(from))
        .filter(supplier_order::Column::Status.eq(Placing))
        .exec(txn)
        .await?;
    if ended.rows_affected != 1 {
        return Ok(false);
    }
    supplier_order::ActiveModel::from(successor)
        .insert(txn)
        .await?;
    order_unit::Entity::update_many()
        .col_expr(order_unit::Column::SupplierTxnId, Expr::value(Some(to)))
        .col_expr(order_unit::Column::UpdatedAt, Expr::value(now))
        .filter(order_unit::Column::SupplierTxnId.eq(from))
        .exec(txn)
        .await?;
    Ok(true)
}

/// The supplier of the supplier order that carried a unit.
pub(crate) async fn supplier_of_unit<C: ConnectionTrait>(
    db: &C,
    unit_id: &str,
) -> Result<Option<String>, DbErr> {
    let Some(unit) = order_unit::Entity::find_by_id(unit_id.to_owned())
        .one(db)
        .await?
    else {
        return Ok(None);
    };
    let Some(txn) = unit.supplier_txn_id else {
        return Ok(None);
    };
    Ok(get(db, &txn).await?.map(|row| row.supplier))
}

#[cfg(test)]
mod tests {
    use chrono::Utc;
    use entities::supplier_order;
    use sea_orm::{ActiveModelTrait, IntoActiveModel};

    use super::{count_sent, failed_attempt, get};
    use crate::store::{Db, WriterDb, fixtures::supplier_row, tests};

    /// Through the pool (no inline writer; on PostgreSQL the connections a
    /// writer keeps), the call counts and attempts are the values the update
    /// itself left, and 0 for a supplier order that does not exist.
    async fn assert_counts_read_back_by_the_update(pool: &Db) {
        supplier_row("K1", 1)
            .into_active_model()
            .insert(pool)
            .await
            .unwrap();
        let db = &WriterDb::new(pool, 2);
        let now = Utc::now();
        assert_eq!(count_sent(db, None, "K1", 1, now).await.unwrap(), 1);
        assert_eq!(count_sent(db, None, "K1", 1, now).await.unwrap(), 2);
        assert_eq!(count_sent(db, None, "K1", -1, now).await.unwrap(), 1);
        assert_eq!(count_sent(db, None, "none", 1, now).await.unwrap(), 0);
        assert_eq!(failed_attempt(db, "K1", "timed out", now).await.unwrap(), 1);
        assert_eq!(failed_attempt(db, "K1", "refused", now).await.unwrap(), 2);
        assert_eq!(failed_attempt(db, "none", "x", now).await.unwrap(), 0);
        let row: supplier_order::Model = get(db, "K1").await.unwrap().unwrap();
        assert_eq!((row.calls_sent, row.attempts), (1, 2));
        assert_eq!(row.last_error.as_deref(), Some("refused"));
    }

    #[tokio::test]
    async fn counts_read_back_by_the_update_on_sqlite() {
        let (_dir, db) = tests::sqlite_file_db("counts.db", 2).await;
        crate::store::migrate(&db).await.unwrap();
        assert_counts_read_back_by_the_update(&db).await;
    }

    #[tokio::test]
    async fn counts_read_back_by_the_update_on_postgres() {
        tests::on_own_postgres("esim_counts", |db| async move {
            assert_counts_read_back_by_the_update(&db).await
        })
        .await;
    }
}
