//! Supplier orders: one order placed with the supplier carries the units of
//! many of our orders. Each is written down, with the units it carries,
//! before the supplier is called.

use chrono::{DateTime, Utc};
use entities::{order_unit, supplier_order};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QueryOrder,
    sea_query::{Expr, ExprTrait},
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
    let id = row.id.clone();
    let now = row.created_at;
    supplier_order::ActiveModel::from(row).insert(txn).await?;
    let taken = order_unit::Entity::update_many()
        .col_expr(order_unit::Column::SupplierTxnId, Expr::value(Some(id)))
        .col_expr(order_unit::Column::UpdatedAt, Expr::value(now))
        .filter(super::bulk::column_in(
            txn,
            order_unit::Column::Id,
            unit_ids.iter().map(String::as_str),
        ))
        .filter(order_unit::Column::SupplierTxnId.is_null())
        .filter(order_unit::Column::Status.eq(UnitStatus::Pending))
        .exec(txn)
        .await?;
    Ok(taken.rows_affected == unit_ids.len() as u64)
}

pub(crate) async fn get<C: ConnectionTrait>(
    db: &C,
    id: &str,
) -> Result<Option<supplier_order::Model>, DbErr> {
    supplier_order::Entity::find_by_id(id.to_owned())
        .one(db)
        .await
}

/// The units a supplier order carries, in the order profiles are dealt to
/// them (by unit id).
pub(crate) async fn units_of<C: ConnectionTrait>(
    db: &C,
    id: &str,
) -> Result<Vec<order_unit::Model>, DbErr> {
    order_unit::Entity::find()
        .filter(order_unit::Column::SupplierTxnId.eq(id))
        .order_by_asc(order_unit::Column::Id)
        .all(db)
        .await
}

/// Records the supplier's order number: the order is placed.
pub(crate) async fn placed<C: ConnectionTrait>(
    db: &C,
    id: &str,
    order_no: &str,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    supplier_order::Entity::update_many()
        .col_expr(supplier_order::Column::OrderNo, Expr::value(Some(order_no)))
        .col_expr(supplier_order::Column::Status, Expr::value(Placed))
        .col_expr(supplier_order::Column::UpdatedAt, Expr::value(now))
        .filter(supplier_order::Column::Id.eq(id))
        .filter(supplier_order::Column::Status.eq(Placing))
        .exec(db)
        .await
        .map(|_| ())
}

/// Moves a supplier order to a final status (`allocated` or `failed`).
pub(crate) async fn finish<C: ConnectionTrait>(
    db: &C,
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
    update
        .filter(supplier_order::Column::Id.eq(id))
        .filter(supplier_order::Column::Status.is_in([Placing, Placed]))
        .exec(db)
        .await
        .map(|_| ())
}

/// Counts a placement call that settled nothing; returns the attempts so far.
pub(crate) async fn failed_attempt<C: ConnectionTrait>(
    db: &C,
    id: &str,
    error: &str,
    now: DateTime<Utc>,
) -> Result<i32, DbErr> {
    let error: String = error.chars().take(500).collect();
    supplier_order::Entity::update_many()
        .col_expr(
            supplier_order::Column::Attempts,
            Expr::col(supplier_order::Column::Attempts).add(1),
        )
        .col_expr(supplier_order::Column::LastError, Expr::value(Some(error)))
        .col_expr(supplier_order::Column::UpdatedAt, Expr::value(now))
        .filter(supplier_order::Column::Id.eq(id))
        .exec(db)
        .await?;
    Ok(get(db, id).await?.map(|row| row.attempts).unwrap_or(0))
}
