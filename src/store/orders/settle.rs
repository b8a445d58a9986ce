//! Settling units and orders: deliveries, refunds with their ledger rows, and
//! the final status of an order once no unit is pending.

use super::*;
use sea_orm::{
    DbBackend, QueryTrait, Statement, UpdateMany,
    sea_query::{Query, ReturningClause},
};

/// Counts a failed attempt on a unit, writing its row down if no supplier
/// order took it yet (its first attempt failed before any did).
pub async fn unit_failed_attempt<C: ConnectionTrait>(
    db: &C,
    unit_id: &str,
    error: &str,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    let Some((order_id, index)) = unit_of_id(unit_id) else {
        return Err(DbErr::Custom(format!("not a unit id: {unit_id}")));
    };
    let error: String = error.chars().take(255).collect();
    let sql = "INSERT INTO \"order_units\" \
               (\"id\", \"order_id\", \"unit_index\", \"status\", \"attempts\", \"last_error\", \"updated_at\") \
               VALUES ($1, $2, $3, $4, 1, $5, $6) \
               ON CONFLICT (\"id\") DO UPDATE SET \
               \"attempts\" = \"order_units\".\"attempts\" + 1, \
               \"last_error\" = excluded.\"last_error\", \"updated_at\" = excluded.\"updated_at\"";
    let values = vec![
        unit_id.into(),
        order_id.into(),
        index.into(),
        UnitStatus::Pending.as_str().into(),
        error.into(),
        now.into(),
    ];
    db.execute_raw(bulk::portable(db, sql, values))
        .await
        .map(|_| ())
}

/// Moves the units of `unit_ids` that are still `pending` to `to`, in one
/// statement; returns the ids this call moved, so a unit settles once
/// however many passes race for it.
async fn settle_pending<'a, C: ConnectionTrait>(
    txn: &C,
    unit_ids: impl IntoIterator<Item = &'a str>,
    to: UnitStatus,
    now: DateTime<Utc>,
) -> Result<Vec<String>, DbErr> {
    let backend = txn.get_database_backend();
    // Only the ids come back: the whole rows would be decoded to be dropped.
    let mut update = settle_pending_update(backend, unit_ids, to, now).into_query();
    update.returning_col(order_unit::Column::Id);
    ids_returned(txn, backend.build(&update)).await
}

/// The ids a statement's `RETURNING "id"` answers.
async fn ids_returned<C: ConnectionTrait>(
    txn: &C,
    statement: Statement,
) -> Result<Vec<String>, DbErr> {
    txn.query_all_raw(statement)
        .await?
        .iter()
        .map(|row| row.try_get_by_index(0))
        .collect()
}

/// The update [`settle_pending`] runs (without its RETURNING).
pub(super) fn settle_pending_update<'a>(
    backend: DbBackend,
    unit_ids: impl IntoIterator<Item = &'a str>,
    to: UnitStatus,
    now: DateTime<Utc>,
) -> UpdateMany<order_unit::Entity> {
    order_unit::Entity::update_many()
        .col_expr(order_unit::Column::Status, Expr::value(to))
        .col_expr(order_unit::Column::UpdatedAt, Expr::value(now))
        .filter(bulk::column_in_for(
            backend,
            order_unit::Column::Id,
            unit_ids,
        ))
        .filter(order_unit::Column::Status.eq(UnitStatus::Pending))
}

/// Refunds the units of `unit_ids` of `order` still pending, in one
/// statement: each is written down refunded, or, where its row exists, moved
/// there from `pending`. Returns the ids this call refunded (a unit of
/// another order is not one of them).
async fn refund_pending<C: ConnectionTrait>(
    txn: &C,
    order: &order::Model,
    unit_ids: &[String],
    now: DateTime<Utc>,
) -> Result<Vec<String>, DbErr> {
    let rows: Vec<order_unit::Model> = unit_ids
        .iter()
        .filter_map(|id| match unit_of_id(id) {
            Some((order_id, n)) if order_id == order.id && n <= order.quantity => {
                Some(unit_row(order_id, n, UnitStatus::Refunded, None, now))
            }
            _ => None,
        })
        .collect();
    let upsert = bulk::upsert_statement::<order_unit::Entity>(
        txn.get_database_backend(),
        &rows,
        &[order_unit::Column::Id],
        &[order_unit::Column::Status, order_unit::Column::UpdatedAt],
        "\"order_units\".\"status\" = 'pending'",
    )?;
    match upsert {
        Some(mut upsert) => {
            upsert.sql.push_str(" RETURNING \"id\"");
            ids_returned(txn, upsert).await
        }
        None => Ok(Vec::new()),
    }
}

/// A profile to store, and the quantity of the order it is dealt to (what
/// its provisioning pass read with the order).
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The unit's eSIM row.
    pub profile: esim::Model,
    /// How many units the profile's order has.
    pub quantity: i32,
}

/// Stores delivered profiles and marks their units delivered, each once,
/// in a constant number of statements whatever their number: one update
/// that settles the units still pending (and says which), one insert of
/// their profiles. Returns, per profile, whether it was stored (false: its
/// unit was already settled, nothing written), and the ids of the units
/// this call settled.
pub async fn deliver_units<C: ConnectionTrait>(
    txn: &C,
    deliveries: &[Delivery],
    now: DateTime<Utc>,
) -> Result<(Vec<bool>, HashSet<String>), DbErr> {
    if deliveries.is_empty() {
        return Ok((Vec::new(), HashSet::new()));
    }
    let settled: HashSet<String> = settle_pending(
        txn,
        deliveries.iter().map(|d| d.profile.unit_id.as_str()),
        UnitStatus::Delivered,
        now,
    )
    .await?
    .into_iter()
    .collect();
    let (stored, rows) = profiles_to_store(deliveries, &settled);
    bulk::insert_models::<esim::Entity, _>(txn, &rows).await?;
    Ok((stored, settled))
}

/// [`deliver_units`] then [`finalize_many`] of their orders, in the
/// caller's transaction: per profile whether it was stored, and the orders
/// it settled.
pub async fn deliver_and_settle<C: ConnectionTrait>(
    txn: &C,
    deliveries: &[Delivery],
    now: DateTime<Utc>,
) -> Result<DeliveredAndSettled, DbErr> {
    let (stored, units) = deliver_units(txn, deliveries, now).await?;
    let (complete, to_count) = completed_by(deliveries, &units);
    let settled = finalize_many(txn, &to_count, &complete, now).await?;
    Ok((stored, settled))
}

/// What storing a batch of deliveries did: per profile whether it was
/// stored, and the orders it settled.
pub type DeliveredAndSettled = (Vec<bool>, Vec<(String, Settled)>);

/// The orders of a delivery that it completed, and the others (each once).
/// An order all of whose `quantity` units this delivery's update took from
/// pending to delivered (`units`) has none pending and none refunded: it is
/// complete without counting its units, as every single-unit order is.
/// Only the others are counted ([`unit_tally`]), each unit of theirs
/// perhaps settled before, or by another node.
pub(super) fn completed_by<'a>(
    deliveries: &'a [Delivery],
    units: &HashSet<String>,
) -> (Vec<&'a str>, Vec<String>) {
    let mut delivered_now: HashMap<&str, (HashSet<&str>, i32)> = HashMap::new();
    for delivery in deliveries {
        let profile = &delivery.profile;
        let entry = delivered_now
            .entry(profile.order_id.as_str())
            .or_insert_with(|| (HashSet::new(), delivery.quantity));
        if units.contains(&profile.unit_id) {
            entry.0.insert(profile.unit_id.as_str());
        }
    }
    let mut complete = Vec::new();
    let mut to_count = Vec::new();
    for (order_id, (units, quantity)) in delivered_now {
        if usize::try_from(quantity).is_ok_and(|q| q > 0 && units.len() == q) {
            complete.push(order_id);
        } else {
            to_count.push(order_id.to_owned());
        }
    }
    complete.sort_unstable();
    to_count.sort_unstable();
    (complete, to_count)
}

/// Per profile, whether its unit was `settled` by this call, and the
/// profiles to store (those), lent rather than copied.
pub(super) fn profiles_to_store<'a>(
    deliveries: &'a [Delivery],
    settled: &HashSet<String>,
) -> (Vec<bool>, Vec<&'a esim::Model>) {
    let stored: Vec<bool> = deliveries
        .iter()
        .map(|d| settled.contains(&d.profile.unit_id))
        .collect();
    let rows = deliveries
        .iter()
        .zip(&stored)
        .filter(|(_, stored)| **stored)
        .map(|(d, _)| &d.profile)
        .collect();
    (stored, rows)
}

/// Refunds the units of `unit_ids` still pending, in a constant number of
/// statements whatever their number: one that marks them refunded (writing
/// the rows of units no supplier order took, and saying which), one credit
/// of the float for all of them, one insert of their `refund` rows (live;
/// each with its own `seq`, `balance_after` and `movement_key`), one
/// addition to the order's `refunded_cents`. Returns the balance after, or
/// `None` when every unit was already settled.
pub async fn refund_units<C: ConnectionTrait>(
    txn: &C,
    order: &order::Model,
    unit_ids: &[String],
    failure: FailureCode,
    now: DateTime<Utc>,
) -> Result<Option<i64>, DbErr> {
    if unit_ids.is_empty() {
        return Ok(None);
    }
    let mut refunded = refund_pending(txn, order, unit_ids, now).await?;
    if refunded.is_empty() {
        return Ok(None);
    }
    refunded.sort_unstable();
    let mode = order.mode;
    let count = refunded.len() as i64;
    let total = order.unit_price_cents * count;
    let float = move_float(txn, &order.partner_id, mode, total, count, false, now)
        .await?
        .ok_or_else(|| DbErr::RecordNotFound("float".into()))?;
    if mode == Mode::Live {
        let mut balance = float.balance_cents - total;
        let rows: Vec<ledger_entry::Model> = (float.next_seq - count..)
            .zip(&refunded)
            .map(|(seq, unit_id)| {
                balance += order.unit_price_cents;
                ledger_entry::Model {
                    id: LedgerEntryId::generate().into_string(),
                    partner_id: order.partner_id.clone(),
                    seq,
                    kind: LedgerKind::Refund,
                    amount_cents: order.unit_price_cents,
                    balance_after_cents: balance,
                    description: format!(
                        "refund of undelivered unit {unit_id} ({})",
                        failure.as_str()
                    ),
                    order_id: Some(order.id.clone()),
                    deposit_id: None,
                    movement_key: Some(format!("{unit_id}:refund")),
                    created_at: now,
                }
            })
            .collect();
        bulk::insert_models::<ledger_entry::Entity, _>(txn, &rows).await?;
    }
    order::Entity::update_many()
        .col_expr(
            order::Column::RefundedCents,
            Expr::col(order::Column::RefundedCents).add(total),
        )
        .col_expr(order::Column::FailureCode, Expr::value(failure))
        .filter(order::Column::Id.eq(order.id.as_str()))
        .exec(txn)
        .await?;
    Ok(Some(float.balance_cents))
}

/// An order that [`finalize`] settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    /// The partner whose order it is.
    pub partner_id: String,
    /// The final status.
    pub status: OrderStatus,
    /// Live or sandbox.
    pub mode: Mode,
    /// Why it failed, when it did.
    pub failure_code: Option<FailureCode>,
    /// When it was accepted.
    pub created_at: DateTime<Utc>,
}

/// Settles the order once no unit is pending. Returns the settled order if
/// this call settled it.
pub async fn finalize<C: ConnectionTrait>(
    db: &C,
    order_id: &str,
    now: DateTime<Utc>,
) -> Result<Option<Settled>, DbErr> {
    let mut settled = finalize_many(db, &[order_id.to_owned()], &[], now).await?;
    Ok(settled.pop().map(|(_, settled)| settled))
}

/// Settles every order of `order_ids` with no unit pending, and every order
/// of `complete` (known to have every unit delivered) as completed, in at
/// most four statements whatever their number: one count of the units of
/// `order_ids` by status (none when that list is empty), then one update per
/// final status (RETURNING, on SQLite and PostgreSQL alike; an order another
/// pass settled first is not returned). Returns the orders this call settled.
pub async fn finalize_many<C: ConnectionTrait>(
    db: &C,
    order_ids: &[String],
    complete: &[&str],
    now: DateTime<Utc>,
) -> Result<Vec<(String, Settled)>, DbErr> {
    let backend = db.get_database_backend();
    let counts = if order_ids.is_empty() {
        Vec::new()
    } else {
        db.query_all_raw(unit_tally(backend, order_ids))
            .await?
            .iter()
            .map(|row| row.try_get_many_by_index())
            .collect::<Result<Vec<TallyRow>, DbErr>>()?
    };
    let mut settled = Vec::new();
    for (status, ids) in settling(&counts, complete) {
        let mut update = settle_orders_update(backend, status, ids, now).into_query();
        update.returning(settled_returning());
        for row in db.query_all_raw(backend.build(&update)).await? {
            let (id, partner_id, mode, failure_code, created_at) = row.try_get_many_by_index()?;
            let settled_order = Settled {
                partner_id,
                status,
                mode,
                failure_code,
                created_at,
            };
            settled.push((id, settled_order));
        }
    }
    Ok(settled)
}

/// What a settling update returns: the columns [`Settled`] keeps (after the
/// order's id), in this order. The whole row would carry every order's
/// metadata back to be decoded and dropped.
pub(super) fn settled_returning() -> ReturningClause {
    Query::returning().columns([
        order::Column::Id,
        order::Column::PartnerId,
        order::Column::Mode,
        order::Column::FailureCode,
        order::Column::CreatedAt,
    ])
}

/// One row of a [`unit_tally`]: an order, a unit status, how many of the
/// order's unit rows are in it, and the order's quantity.
pub(super) type TallyRow = (String, UnitStatus, i64, i32);

/// Counts the unit rows of `order_ids` by order and status, each with its
/// order's quantity: (order, status, units, quantity), one probe of the
/// units' order index and one of the orders' key per order. A unit has a
/// row once a supplier order took it (or a pass refunded it); the units an
/// order has no row for are pending.
///
/// On PostgreSQL each order's units are counted, and its quantity read, in
/// lateral subqueries of their own; the quantity's `LIMIT 1` keeps it from
/// being flattened into a join, which was planned as a read of every order
/// for each batch (93 µs an order, against 12 for the count of units).
/// Matched as one list (`= ANY`, [`bulk::column_in_for`]), the count is
/// planned against a list of guessed size; while the table's statistics
/// still call it small (a young database, before autovacuum's
/// first analyses) PostgreSQL reads the whole table for it, and the prepared
/// statement keeps that plan as the table grows: every settled batch read
/// every unit, comparing each with every order of the batch. A lateral
/// subquery runs once per order, and a read of the table repeated for every
/// order is never the cheaper guess past a page or two, so the planner
/// probes. SQLite always probes for the list. An order's units are the
/// range of the units' key its id begins ([`unit_id_range`]).
pub(super) fn unit_tally(backend: DbBackend, order_ids: &[String]) -> Statement {
    let list = serde_json::Value::from(order_ids).to_string();
    if backend == DbBackend::Postgres {
        return Statement::from_sql_and_values(
            DbBackend::Postgres,
            format!(
                "SELECT l.order_id, u.status, u.units, o.quantity \
                 FROM (SELECT DISTINCT jsonb_array_elements_text($1::jsonb) AS order_id) AS l \
                 CROSS JOIN LATERAL (SELECT \"quantity\" AS quantity FROM \"orders\" \
                 WHERE \"id\" = l.order_id LIMIT 1) AS o \
                 CROSS JOIN LATERAL (SELECT \"status\", COUNT(\"id\") AS units \
                 FROM \"order_units\" WHERE {} GROUP BY \"status\") AS u",
                in_unit_id_range("\"id\"", "l.order_id")
            ),
            [list.into()],
        );
    }
    Statement::from_sql_and_values(
        DbBackend::Sqlite,
        format!(
            "SELECT l.order_id, u.\"status\", COUNT(u.\"id\") AS units, o.\"quantity\" \
             FROM {} JOIN \"orders\" o ON o.\"id\" = l.order_id \
             GROUP BY l.order_id, u.\"status\"",
            orders_joined_by_unit_range(DbBackend::Sqlite, "order_units", "u", "id")
        ),
        [list.into()],
    )
}

/// The orders of a [`unit_tally`] that no pending unit holds back, by the
/// final status each settles in. A unit without a row is pending: an order
/// settles once its delivered and refunded units make its quantity.
pub(super) fn final_statuses(counts: &[TallyRow]) -> HashMap<OrderStatus, Vec<&str>> {
    let mut tally: HashMap<&str, (usize, usize, usize)> = HashMap::new();
    for (order_id, status, units, quantity) in counts {
        let units = usize::try_from(*units).unwrap_or(0);
        let entry = tally.entry(order_id.as_str()).or_insert((
            0,
            0,
            usize::try_from(*quantity).unwrap_or(0),
        ));
        match status {
            UnitStatus::Delivered => entry.0 += units,
            UnitStatus::Refunded => entry.1 += units,
            UnitStatus::Pending => {}
        }
    }
    let mut by_status: HashMap<OrderStatus, Vec<&str>> = HashMap::new();
    for (order_id, (delivered, refunded, quantity)) in tally {
        let pending = quantity.saturating_sub(delivered + refunded);
        if let Some(status) = rules::settled_status(delivered, refunded, pending) {
            by_status.entry(status).or_default().push(order_id);
        }
    }
    by_status
}

/// The orders to settle by final status: those of a [`unit_tally`] that no
/// pending unit holds back, and `complete` as completed.
pub(super) fn settling<'a>(
    counts: &'a [TallyRow],
    complete: &[&'a str],
) -> HashMap<OrderStatus, Vec<&'a str>> {
    let mut by_status = final_statuses(counts);
    if !complete.is_empty() {
        by_status
            .entry(OrderStatus::Completed)
            .or_default()
            .extend_from_slice(complete);
    }
    by_status
}

/// The update that settles the still-processing orders of `ids` in `status`
/// (without its RETURNING).
pub(super) fn settle_orders_update(
    backend: DbBackend,
    status: OrderStatus,
    ids: Vec<&str>,
    now: DateTime<Utc>,
) -> UpdateMany<order::Entity> {
    order::Entity::update_many()
        .col_expr(order::Column::Status, Expr::value(status))
        .col_expr(order::Column::CompletedAt, Expr::value(Some(now)))
        .col_expr(
            order::Column::ClaimedUntil,
            Expr::value(Option::<DateTime<Utc>>::None),
        )
        .col_expr(
            order::Column::ClaimedBy,
            Expr::value(Option::<String>::None),
        )
        .filter(bulk::column_in_for(backend, order::Column::Id, ids))
        .filter(bulk::checked_only(
            order::Column::Status.eq(OrderStatus::Processing),
        ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tests::{assert_planned_through, one_value, processing_orders};
    use sea_orm::TransactionTrait;

    fn delivery(order_id: &str, n: i32, quantity: i32) -> Delivery {
        let order = crate::domain::order::fixtures::accepted(order_id, "prt_a", "k", 100);
        let profile = crate::store::fixtures::profile(&order, n);
        Delivery { profile, quantity }
    }

    fn settled_now(units: &[(&str, i32)]) -> HashSet<String> {
        units.iter().map(|(order, n)| unit_id(order, *n)).collect()
    }

    /// Only an order whose every unit this delivery settled is taken for
    /// complete; one a unit of which was settled before (or is still
    /// pending, or came twice in the batch) is counted.
    #[test]
    fn an_order_is_complete_without_a_count_only_when_this_delivery_settled_every_unit() {
        let deliveries = [
            delivery("ord_single", 1, 1),
            delivery("ord_pair", 2, 2),
            delivery("ord_pair", 1, 2),
            delivery("ord_half", 1, 2),
            delivery("ord_twice", 1, 2),
            delivery("ord_twice", 1, 2),
            delivery("ord_before", 1, 1),
        ];
        let units = settled_now(&[
            ("ord_single", 1),
            ("ord_pair", 1),
            ("ord_pair", 2),
            ("ord_half", 1),
            ("ord_twice", 1),
        ]);
        let (complete, to_count) = completed_by(&deliveries, &units);
        assert_eq!(complete, ["ord_pair", "ord_single"]);
        assert_eq!(to_count, ["ord_before", "ord_half", "ord_twice"]);
    }

    /// Orders known complete settle as completed beside those the count
    /// decides.
    #[test]
    fn orders_known_complete_join_the_completed_ones_of_the_count() {
        let counts: Vec<TallyRow> = vec![
            ("ord_a".into(), UnitStatus::Delivered, 1, 1),
            ("ord_b".into(), UnitStatus::Refunded, 1, 1),
        ];
        let mut by_status = settling(&counts, &["ord_c"]);
        for ids in by_status.values_mut() {
            ids.sort_unstable();
        }
        assert_eq!(by_status[&OrderStatus::Completed], ["ord_a", "ord_c"]);
        assert_eq!(by_status[&OrderStatus::Failed], ["ord_b"]);
        assert_eq!(settling(&[], &[]).len(), 0);
    }

    /// The count of units that decides which orders settle probes each
    /// order's units and its quantity by key: by status it would walk every
    /// pending unit, and through a scan every order.
    #[tokio::test]
    async fn the_unit_tally_probes_by_order() {
        let tally = unit_tally(DbBackend::Sqlite, &["ord_a".to_owned(), "ord_b".to_owned()]);
        assert_planned_through(
            tally.clone(),
            "u USING INDEX sqlite_autoindex_order_units_1 (id>? AND id<?)",
            "SCAN o",
        )
        .await;
        assert_planned_through(
            tally,
            "o USING INDEX sqlite_autoindex_orders_1 (id=?)",
            "SCAN u",
        )
        .await;
    }

    /// On PostgreSQL the units' pages keep room for the delivery's new row
    /// versions: a delivery on a page filled by inserts is heap-only (no
    /// index entry written), where a packed page sends it to another page
    /// and every index.
    #[tokio::test]
    async fn deliveries_stay_on_their_units_page_on_postgres() {
        crate::store::tests::on_own_postgres("esim_room", |db| async move {
            let options: String = one_value(
                &db,
                "SELECT array_to_string(reloptions, ',') FROM pg_class WHERE relname = 'order_units'",
            )
            .await;
            assert_eq!(options, "fillfactor=60");
            // Two hundred units taken by a supplier order, as many pages'
            // worth as a packed page holds and more.
            processing_orders(&db, 1, 200).await;
            db.execute_unprepared(
                "INSERT INTO order_units (id, order_id, unit_index, status, supplier_txn_id, \
                 attempts, updated_at) \
                 SELECT 'ord_1_' || i, 'ord_1', i, 'pending', 'sot_0Kq2xV3mZ8pL4nR6tY9wB1', 0, \
                 now() FROM generate_series(1, 200) AS i",
            )
            .await
            .unwrap();
            // The first ten delivered, as a delivery writes them.
            let ids: Vec<String> = (1..=10).map(|n| unit_id("ord_1", n)).collect();
            let txn = db.begin().await.unwrap();
            let update = settle_pending_update(
                DbBackend::Postgres,
                ids.iter().map(String::as_str),
                UnitStatus::Delivered,
                Utc::now(),
            );
            assert_eq!(update.exec(&txn).await.unwrap().rows_affected, 10);
            let heap_only: i64 = one_value(
                &txn,
                "SELECT pg_stat_get_xact_tuples_hot_updated('order_units'::regclass)",
            )
            .await;
            assert_eq!(heap_only, 10);
            txn.commit().await.unwrap();
        })
        .await;
    }

    /// On PostgreSQL the tally reads each listed order's quantity by key,
    /// not by reading all 10,000 orders (as a plain join to the list, guessed
    /// at 100 rows, it hashed the whole table), without the tables'
    /// statistics, and counts a unit without a row as pending.
    #[tokio::test]
    async fn the_tally_probes_each_order_by_key_on_postgres() {
        crate::store::tests::on_own_postgres("esim_tally", |db| async move {
            processing_orders(&db, 10_000, 2).await;
            db.execute_unprepared(
                "INSERT INTO order_units (id, order_id, unit_index, status, attempts, updated_at) \
                 VALUES ('ord_7_1', 'ord_7', 1, 'delivered', 0, now()), \
                 ('ord_8_1', 'ord_8', 1, 'delivered', 0, now()), \
                 ('ord_8_2', 'ord_8', 2, 'refunded', 0, now())",
            )
            .await
            .unwrap();
            let ids = ["ord_7".to_owned(), "ord_8".to_owned()];
            let tally = unit_tally(DbBackend::Postgres, &ids);

            let plan = crate::store::tests::postgres_plan(&db, &tally).await;
            assert!(plan.contains("orders_pkey"), "{plan}");
            assert!(!plan.contains("Seq Scan on orders"), "{plan}");
            assert!(plan.contains("order_units_pkey"), "{plan}");
            assert!(!plan.contains("Seq Scan on order_units"), "{plan}");

            let counts: Vec<TallyRow> = db
                .query_all_raw(tally)
                .await
                .unwrap()
                .iter()
                .map(|row| row.try_get_many_by_index().unwrap())
                .collect();
            let statuses = final_statuses(&counts);
            assert_eq!(
                statuses.get(&OrderStatus::PartiallyCompleted),
                Some(&vec!["ord_8"])
            );
            assert_eq!(
                statuses.len(),
                1,
                "ord_7's second unit is pending: {counts:?}"
            );
        })
        .await;
    }

    /// A unit without a row is pending: an order settles only once its
    /// delivered and refunded units make its quantity.
    #[test]
    fn an_order_settles_only_when_its_rows_make_its_quantity() {
        let row =
            |order: &str, status, units, quantity| (order.to_owned(), status, units, quantity);
        let counts = vec![
            row("ord_partly_written", UnitStatus::Delivered, 1, 2),
            row("ord_done", UnitStatus::Delivered, 1, 2),
            row("ord_done", UnitStatus::Refunded, 1, 2),
            row("ord_waiting", UnitStatus::Pending, 1, 1),
            row("ord_failed", UnitStatus::Refunded, 3, 3),
        ];
        let statuses = final_statuses(&counts);
        assert_eq!(
            statuses.get(&OrderStatus::PartiallyCompleted),
            Some(&vec!["ord_done"])
        );
        assert_eq!(
            statuses.get(&OrderStatus::Failed),
            Some(&vec!["ord_failed"])
        );
        assert_eq!(statuses.get(&OrderStatus::Completed), None);
        assert_eq!(statuses.len(), 2);
    }

    /// The settling update finds its orders by primary key: through the
    /// status index it walked every processing order (the whole backlog)
    /// for each batch it settled.
    #[tokio::test]
    async fn settling_finds_its_orders_by_primary_key_not_by_status() {
        let update = settle_orders_update(
            DbBackend::Sqlite,
            OrderStatus::Completed,
            vec!["ord_a", "ord_b"],
            Utc::now(),
        );
        assert_planned_through(
            DbBackend::Sqlite.build(&update.into_query()),
            "orders USING INDEX sqlite_autoindex_orders_1 (id=?)",
            "idx_orders_status",
        )
        .await;
    }
}
