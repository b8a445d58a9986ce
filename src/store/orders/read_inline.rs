//! `GET /orders/{id}` on the caller's thread ([`crate::store::inline`]): the
//! order and its eSIMs, read in one read transaction by hand-written SQL over
//! the columns the entities name. The tests hold every field equal to what
//! the pool reads through sea-orm.

use entities::{esim, order};
use rusqlite::{Connection, OptionalExtension, Row};

use crate::{domain::partner::Mode, store::inline::columns};

/// The order by id, partner and mode: the columns of `order::Model`, in its
/// field order (a literal, so the statement cache is probed without building
/// the text on every read).
const ORDER_BY_ID: &str = "SELECT id, partner_id, mode, idempotency_key, plan_id, quantity, \
    unit_price_cents, total_cents, list_unit_cents, price_source, metadata, status, \
    failure_code, refunded_cents, attempts, claimed_until, claimed_by, created_at, completed_at \
    FROM orders WHERE id = ?1 AND partner_id = ?2 AND mode = ?3";

/// An order's eSIMs by unit: the columns of `esim::Model`, in its field
/// order, found by the order's [`super::unit_id_range`].
const ESIMS_OF_ORDER: &str = "SELECT iccid, partner_id, mode, order_id, unit_id, plan_id, status, \
    smdp_address, matching_id, activation_code, created_at, esim_tran_no \
    FROM esims WHERE unit_id >= ?1 AND unit_id < ?2 ORDER BY unit_id";

/// The partner's order of `mode` with its eSIMs (by unit), as of one
/// snapshot; `None` when the partner has no such order.
pub(crate) fn order_with_esims(
    connection: &Connection,
    partner_id: &str,
    mode: Mode,
    id: &str,
) -> rusqlite::Result<Option<(order::Model, Vec<esim::Model>)>> {
    let snapshot = connection.unchecked_transaction()?;
    let found = snapshot
        .prepare_cached(ORDER_BY_ID)?
        .query_row((id, partner_id, mode.as_str()), order_row)
        .optional()?;
    let Some(found) = found else {
        return Ok(None);
    };
    let (from, until) = super::unit_id_range(id);
    let esims = snapshot
        .prepare_cached(ESIMS_OF_ORDER)?
        .query_map([from, until], esim_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    snapshot.finish()?;
    Ok(Some((found, esims)))
}

fn order_row(row: &Row<'_>) -> rusqlite::Result<order::Model> {
    Ok(order::Model {
        id: row.get(0)?,
        partner_id: row.get(1)?,
        mode: columns::word(row, 2)?,
        idempotency_key: row.get(3)?,
        plan_id: row.get(4)?,
        quantity: row.get(5)?,
        unit_price_cents: row.get(6)?,
        total_cents: row.get(7)?,
        list_unit_cents: row.get(8)?,
        price_source: row.get(9)?,
        metadata: columns::json(row, 10)?,
        status: columns::word(row, 11)?,
        failure_code: columns::optional_word(row, 12)?,
        refunded_cents: row.get(13)?,
        attempts: row.get(14)?,
        claimed_until: columns::optional_time(row, 15)?,
        claimed_by: row.get(16)?,
        created_at: columns::time(row, 17)?,
        completed_at: columns::optional_time(row, 18)?,
    })
}

fn esim_row(row: &Row<'_>) -> rusqlite::Result<esim::Model> {
    Ok(esim::Model {
        iccid: row.get(0)?,
        partner_id: row.get(1)?,
        mode: columns::word(row, 2)?,
        order_id: row.get(3)?,
        unit_id: row.get(4)?,
        plan_id: row.get(5)?,
        status: columns::word(row, 6)?,
        smdp_address: row.get(7)?,
        matching_id: row.get(8)?,
        activation_code: row.get(9)?,
        created_at: columns::time(row, 10)?,
        esim_tran_no: row.get(11)?,
    })
}

#[cfg(test)]
mod tests {
    use chrono::{Duration, Utc};
    use entities::states::{EsimStatus, FailureCode, OrderStatus};
    use sea_orm::{ActiveModelTrait, EntityTrait};
    use serde_json::json;

    use super::*;
    use crate::store::{
        self,
        inline::{InlineReader, read},
        orders::find_order_with_esims,
        partners,
        tests::sqlite_file_db,
    };

    /// An order with every nullable column filled.
    fn an_order(partner_id: &str) -> order::Model {
        let now = Utc::now();
        order::Model {
            id: "po_inline1".into(),
            partner_id: partner_id.into(),
            mode: Mode::Live,
            idempotency_key: "key-1".into(),
            plan_id: "pl_fr_1gb_7d".into(),
            quantity: 2,
            unit_price_cents: 297,
            total_cents: 594,
            list_unit_cents: 349,
            price_source: "tier:gold".into(),
            metadata: json!({"ref": "A-1", "n": [1, 2.5, null], "ok": true}),
            status: OrderStatus::PartiallyCompleted,
            failure_code: Some(FailureCode::SupplierError),
            refunded_cents: 297,
            attempts: 3,
            claimed_until: Some(now + Duration::seconds(30)),
            claimed_by: Some("nd_one".into()),
            created_at: now - Duration::seconds(5),
            completed_at: Some(now),
        }
    }

    fn an_esim(order: &order::Model, unit: usize, tran_no: Option<&str>) -> esim::Model {
        esim::Model {
            iccid: format!("8999970921972435801{unit}"),
            partner_id: order.partner_id.clone(),
            mode: order.mode,
            order_id: order.id.clone(),
            unit_id: format!("{}_{unit}", order.id),
            plan_id: order.plan_id.clone(),
            status: EsimStatus::Released,
            smdp_address: "smdp.example".into(),
            matching_id: format!("MATCH{unit}"),
            activation_code: format!("LPA:1$smdp.example$MATCH{unit}"),
            created_at: Utc::now(),
            esim_tran_no: tran_no.map(str::to_owned),
        }
    }

    #[tokio::test]
    async fn an_order_read_inline_is_the_one_the_pool_reads() {
        let (_dir, db) = sqlite_file_db("orders.db", 2).await;
        store::migrate(&db).await.unwrap();
        let partner = partners::gold_partner(&db, "orders", 0).await;
        let order = an_order(&partner);
        order::ActiveModel::from(order.clone())
            .reset_all()
            .insert(&db)
            .await
            .unwrap();
        // Inserted out of unit order: both reads sort by unit.
        let esims = [an_esim(&order, 2, None), an_esim(&order, 1, Some("T1"))];
        esim::Entity::insert_many(esims.map(|e| esim::ActiveModel::from(e).reset_all()))
            .exec(&db)
            .await
            .unwrap();
        let reader = InlineReader::for_db(&db).unwrap();

        let inline = read(Some(&reader), |c| {
            order_with_esims(c, &partner, Mode::Live, &order.id)
        })
        .expect("the inline read succeeds");
        let pooled = find_order_with_esims(&db, None, &partner, Mode::Live, &order.id)
            .await
            .unwrap();
        assert_eq!(inline, pooled);
        let (read_order, read_esims) = inline.expect("the order is found");
        assert_eq!(read_order, order);
        let units: Vec<&str> = read_esims.iter().map(|e| e.unit_id.as_str()).collect();
        assert_eq!(units, ["po_inline1_1", "po_inline1_2"]);

        let other_mode = read(Some(&reader), |c| {
            order_with_esims(c, &partner, Mode::Sandbox, &order.id)
        });
        assert_eq!(other_mode, Some(None), "another mode's key does not see it");
    }

    #[tokio::test]
    async fn a_row_with_an_unknown_word_falls_back_to_the_pool() {
        let (_dir, db) = sqlite_file_db("word.db", 2).await;
        store::migrate(&db).await.unwrap();
        let partner = partners::gold_partner(&db, "word", 0).await;
        let order = an_order(&partner);
        let mut active = order::ActiveModel::from(order.clone()).reset_all();
        active.failure_code = sea_orm::ActiveValue::Set(None);
        active.insert(&db).await.unwrap();
        let reader = InlineReader::for_db(&db).unwrap();
        rusqlite::Connection::open(_dir.path().join("word.db"))
            .unwrap()
            .execute("UPDATE orders SET status = 'lost'", [])
            .unwrap();
        let inline = read(Some(&reader), |c| {
            order_with_esims(c, &partner, Mode::Live, &order.id)
        });
        assert_eq!(
            inline, None,
            "a row the entity cannot hold is not read inline"
        );
        assert!(
            find_order_with_esims(&db, Some(&reader), &partner, Mode::Live, &order.id)
                .await
                .is_err(),
            "the pool answers the row's error"
        );
    }
}
