//! Storing delivered profiles and settling their orders on the caller's
//! thread ([`crate::store::inline_write`]): the statements of
//! [`deliver_units`] and [`finalize_many`], built by the same functions for
//! SQLite, run over the inline writer's connection.

use rusqlite::Connection;
use sea_orm::{DbBackend, QueryTrait, Statement};

use super::settle::{
    TallyRow, completed_by, profiles_to_store, settle_orders_update, settle_pending_update,
    settled_returning, settling, unit_tally,
};
use super::*;
use crate::store::{
    inline::columns,
    inline_write::{self, InlineFailed},
};

/// [`deliver_and_settle`] in the inline writer's transaction.
pub(crate) fn deliver_and_settle_inline<E>(
    connection: &Connection,
    deliveries: &[Delivery],
    now: DateTime<Utc>,
) -> Result<DeliveredAndSettled, InlineFailed<E>> {
    if deliveries.is_empty() {
        return Ok((Vec::new(), Vec::new()));
    }
    let units = deliveries.iter().map(|d| d.profile.unit_id.as_str());
    let mut update =
        settle_pending_update(DbBackend::Sqlite, units, UnitStatus::Delivered, now).into_query();
    update.returning_col(order_unit::Column::Id);
    let settled: HashSet<String> =
        inline_write::query(connection, &sqlite(&update), |row| row.get(0))?
            .into_iter()
            .collect();
    let (stored, rows) = profiles_to_store(deliveries, &settled);
    inline_write::insert_rows::<esim::Entity, _>(connection, &rows, &[])?;
    let (complete, to_count) = completed_by(deliveries, &settled);
    Ok((
        stored,
        finalize_many_inline(connection, &to_count, &complete, now)?,
    ))
}

/// [`finalize_many`] on the inline writer's connection.
fn finalize_many_inline<E>(
    connection: &Connection,
    order_ids: &[String],
    complete: &[&str],
    now: DateTime<Utc>,
) -> Result<Vec<(String, Settled)>, InlineFailed<E>> {
    let counts: Vec<TallyRow> = if order_ids.is_empty() {
        Vec::new()
    } else {
        let tally = unit_tally(DbBackend::Sqlite, order_ids);
        inline_write::query(connection, &tally, |row| {
            Ok((
                row.get(0)?,
                columns::word(row, 1)?,
                row.get(2)?,
                row.get(3)?,
            ))
        })?
    };
    let mut settled = Vec::new();
    for (status, ids) in settling(&counts, complete) {
        let mut update = settle_orders_update(DbBackend::Sqlite, status, ids, now).into_query();
        update.returning(settled_returning());
        let rows = inline_write::query(connection, &sqlite(&update), |row| {
            Ok((
                row.get(0)?,
                Settled {
                    partner_id: row.get(1)?,
                    status,
                    mode: columns::word(row, 2)?,
                    failure_code: columns::optional_word(row, 3)?,
                    created_at: columns::time(row, 4)?,
                },
            ))
        })?;
        settled.extend(rows);
    }
    Ok(settled)
}

/// A sea-query statement as SQLite text and values.
fn sqlite(statement: &sea_orm::sea_query::UpdateStatement) -> Statement {
    DbBackend::Sqlite.build(statement)
}
