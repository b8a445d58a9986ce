//! What each supplier delivered and what it cost: the units of one order
//! with their supplier orders, and the margin per partner and supplier over
//! a period. A supplier order's `unit_cost_cents` is what the supplier's
//! answer said (Airalo's `net_price`); where it said nothing (eSIM Access's
//! order answer carries no price) the plan's cost floor stands in, and the
//! units priced that way are counted as estimated.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, DbErr, Value};
use serde::Serialize;

use crate::domain::states::UnitStatus;

/// One delivered or pending unit of an order and where it went.
#[derive(Debug, Clone, Serialize)]
pub struct UnitSupply {
    /// `po_…_n`.
    pub unit_id: String,
    /// `pending`, `delivered` or `refunded`.
    pub status: String,
    /// The supplier of its (last) supplier order, if it was carried.
    pub supplier: Option<String>,
    /// The supplier order (our transaction id) that carries it now.
    pub supplier_order_id: Option<String>,
    /// The supplier's own order number.
    pub supplier_order_no: Option<String>,
    /// What the supplier charged for it, when its answer said.
    pub unit_cost_cents: Option<i64>,
}

/// One partner's delivered units from one supplier over a period.
#[derive(Debug, Clone, Serialize)]
pub struct MarginRow {
    pub partner_id: String,
    pub supplier: String,
    /// Live units delivered.
    pub units: i64,
    /// What the partner paid for them.
    pub revenue_cents: i64,
    /// What they cost: the supplier's price, else the plan's cost floor.
    pub cost_cents: i64,
    /// `revenue_cents - cost_cents`.
    pub margin_cents: i64,
    /// Units whose cost is the cost floor (the supplier named no price).
    pub estimated_cost_units: i64,
}

/// The units of an order, in unit order, with their supplier orders; a
/// unit no supplier order has taken yet has no row and is listed pending.
pub(crate) async fn units_of_order<C: ConnectionTrait>(
    db: &C,
    order_id: &str,
) -> Result<Vec<UnitSupply>, DbErr> {
    let sql = "SELECT o.quantity AS quantity, u.unit_index AS unit_index, u.id AS unit_id, \
               u.status AS status, so.supplier AS supplier, \
               so.id AS supplier_order_id, so.order_no AS supplier_order_no, \
               so.unit_cost_cents AS unit_cost_cents \
               FROM orders o LEFT JOIN order_units u ON u.id >= $1 AND u.id < $2 \
               LEFT JOIN supplier_orders so ON so.id = u.supplier_txn_id \
               WHERE o.id = $3";
    let (from, until) = super::orders::unit_id_range(order_id);
    let values = vec![from.into(), until.into(), order_id.into()];
    let rows = db
        .query_all_raw(super::bulk::portable(db, sql, values))
        .await?;
    let mut quantity = 0;
    let mut written: BTreeMap<i32, UnitSupply> = BTreeMap::new();
    for row in &rows {
        quantity = row.try_get::<i32>("", "quantity")?;
        let Some(index) = row.try_get::<Option<i32>>("", "unit_index")? else {
            continue;
        };
        let unit = UnitSupply {
            unit_id: row.try_get("", "unit_id")?,
            status: row.try_get("", "status")?,
            supplier: row.try_get("", "supplier")?,
            supplier_order_id: row.try_get("", "supplier_order_id")?,
            supplier_order_no: row.try_get("", "supplier_order_no")?,
            unit_cost_cents: row.try_get("", "unit_cost_cents")?,
        };
        written.insert(index, unit);
    }
    Ok((1..=quantity)
        .map(|n| {
            written.remove(&n).unwrap_or_else(|| UnitSupply {
                unit_id: super::orders::unit_id(order_id, n),
                status: UnitStatus::Pending.as_str().to_owned(),
                supplier: None,
                supplier_order_id: None,
                supplier_order_no: None,
                unit_cost_cents: None,
            })
        })
        .collect())
}

/// Delivered live units of orders created in `[from, to)`, per partner and
/// supplier, with revenue, cost and margin; one partner when given.
pub(crate) async fn margins<C: ConnectionTrait>(
    db: &C,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    partner_id: Option<&str>,
) -> Result<Vec<MarginRow>, DbErr> {
    let mut sql = String::from(
        "SELECT o.partner_id AS partner_id, COALESCE(so.supplier, 'esim_access') AS supplier, \
         COUNT(*) AS units, CAST(SUM(o.unit_price_cents) AS BIGINT) AS revenue_cents, \
         CAST(SUM(COALESCE(so.unit_cost_cents, p.cost_floor_cents, 0)) AS BIGINT) AS cost_cents, \
         CAST(SUM(CASE WHEN so.unit_cost_cents IS NULL THEN 1 ELSE 0 END) AS BIGINT) \
         AS estimated_cost_units \
         FROM order_units u \
         JOIN orders o ON o.id = u.order_id \
         LEFT JOIN supplier_orders so ON so.id = u.supplier_txn_id \
         LEFT JOIN plans p ON p.id = o.plan_id \
         WHERE u.status = 'delivered' AND o.mode = 'live' \
         AND o.created_at >= $1 AND o.created_at < $2",
    );
    let mut values: Vec<Value> = vec![from.into(), to.into()];
    if let Some(partner) = partner_id {
        sql.push_str(" AND o.partner_id = $3");
        values.push(partner.into());
    }
    sql.push_str(
        " GROUP BY o.partner_id, COALESCE(so.supplier, 'esim_access') \
         ORDER BY o.partner_id, supplier",
    );
    let rows = db
        .query_all_raw(super::bulk::portable(db, &sql, values))
        .await?;
    rows.iter()
        .map(|row| {
            let revenue: i64 = sum(row, "revenue_cents")?;
            let cost: i64 = sum(row, "cost_cents")?;
            Ok(MarginRow {
                partner_id: row.try_get("", "partner_id")?,
                supplier: row.try_get("", "supplier")?,
                units: sum(row, "units")?,
                revenue_cents: revenue,
                cost_cents: cost,
                margin_cents: revenue - cost,
                estimated_cost_units: sum(row, "estimated_cost_units")?,
            })
        })
        .collect()
}

/// An aggregate column, cast to a bigint in the query (PostgreSQL's `SUM`
/// of a bigint is numeric otherwise).
fn sum(row: &sea_orm::QueryResult, column: &str) -> Result<i64, DbErr> {
    row.try_get::<Option<i64>>("", column)
        .map(|value| value.unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{migrate, tests::sqlite_file_db};

    /// An order's units list in unit order whether or not a supplier order
    /// wrote their rows yet: a unit without one is pending and carried by
    /// none.
    #[tokio::test]
    async fn units_without_a_row_are_listed_pending() {
        let (_dir, db) = sqlite_file_db("supply.db", 1).await;
        migrate(&db).await.unwrap();
        db.execute_unprepared(
            "INSERT INTO partners (id, name, slug, status, tier, created_at, updated_at) \
             VALUES ('ptr_1', 'P', 'p', 'live', 'gold', '2026-12-03T00:00:00Z', '2026-12-03T00:00:00Z'); \
             INSERT INTO orders (id, partner_id, mode, idempotency_key, plan_id, quantity, \
             unit_price_cents, total_cents, list_unit_cents, price_source, metadata, status, \
             refunded_cents, attempts, created_at) \
             VALUES ('ord_1', 'ptr_1', 'live', 'k', 'pl_x', 3, 100, 300, 100, 'list', '{}', \
             'processing', 0, 0, '2026-12-03T00:00:00Z'); \
             INSERT INTO order_units (id, order_id, unit_index, status, attempts, updated_at) \
             VALUES ('ord_1_2', 'ord_1', 2, 'delivered', 0, '2026-12-03T00:00:00Z')",
        )
        .await
        .unwrap();

        let units = units_of_order(&db, "ord_1").await.unwrap();
        let listed: Vec<(&str, &str)> = units
            .iter()
            .map(|u| (u.unit_id.as_str(), u.status.as_str()))
            .collect();
        assert_eq!(
            listed,
            [
                ("ord_1_1", "pending"),
                ("ord_1_2", "delivered"),
                ("ord_1_3", "pending")
            ]
        );
        assert!(units[0].supplier_order_id.is_none());
        assert!(units_of_order(&db, "ord_none").await.unwrap().is_empty());
    }
}
