//! Which node works on an order: claims with a lease, their renewal and
//! release, orders stranded by a dead node, and the live backlog.

use super::*;
use sea_orm::{DbBackend, Select, UpdateMany};

/// Claims an order for provisioning by `node` until `until`: it succeeds
/// when nobody holds the order, the holder's claim has lapsed, the holder
/// is not alive (no heartbeat since `alive_since`, or it stopped), or `node`
/// holds it already (the claim made at acceptance, or one of its earlier
/// incarnation). Counts a pass.
pub async fn claim(
    db: &Db,
    order_id: &str,
    node: &str,
    now: DateTime<Utc>,
    until: DateTime<Utc>,
    alive_since: DateTime<Utc>,
) -> Result<bool, DbErr> {
    let result = order::Entity::update_many()
        .col_expr(order::Column::ClaimedUntil, Expr::value(Some(until)))
        .col_expr(order::Column::ClaimedBy, Expr::value(Some(node)))
        .col_expr(
            order::Column::Attempts,
            Expr::col(order::Column::Attempts).add(1),
        )
        .filter(order::Column::Id.eq(order_id))
        .filter(order::Column::Status.eq(OrderStatus::Processing))
        .filter(claim_is_free(now, alive_since).add(order::Column::ClaimedBy.eq(node)));
    let result = write_alone(db, result.exec(db)).await?;
    Ok(result.rows_affected == 1)
}

/// Extends `node`'s claim on an order to `until`, or says why it could not.
pub async fn renew(
    db: &Db,
    order_id: &str,
    node: &str,
    until: DateTime<Utc>,
) -> Result<Renewal, DbErr> {
    let ids = [order_id.to_owned()];
    let mut renewals = renew_many(db, &ids, node, until).await?;
    Ok(renewals.remove(order_id).unwrap_or(Renewal::Lost))
}

/// The update that extends `node`'s claims on the still-processing orders of
/// `order_ids` to `until`.
fn renew_update(
    backend: DbBackend,
    order_ids: &[String],
    node: &str,
    until: DateTime<Utc>,
) -> UpdateMany<order::Entity> {
    order::Entity::update_many()
        .col_expr(order::Column::ClaimedUntil, Expr::value(Some(until)))
        .filter(bulk::column_in_for(
            backend,
            order::Column::Id,
            order_ids.iter().map(String::as_str),
        ))
        .filter(bulk::checked_only(
            order::Column::Status.eq(OrderStatus::Processing),
        ))
        .filter(order::Column::ClaimedBy.eq(node))
}

/// Extends `node`'s claims on the orders of `order_ids` to `until` in one
/// statement whatever their number (and one read of the orders it did not
/// move, when there are any), and says for each order what it found: a node renews
/// every claim it works on together instead of one statement per order.
pub async fn renew_many(
    db: &Db,
    order_ids: &[String],
    node: &str,
    until: DateTime<Utc>,
) -> Result<HashMap<String, Renewal>, DbErr> {
    if order_ids.is_empty() {
        return Ok(HashMap::new());
    }
    let ids = || order_ids.iter().map(String::as_str);
    let mut renewals: HashMap<String, Renewal> =
        ids().map(|id| (id.to_owned(), Renewal::Renewed)).collect();
    let moved = renew_update(db.get_database_backend(), order_ids, node, until);
    let moved = write_alone(db, moved.exec(db)).await?;
    if moved.rows_affected as usize == renewals.len() {
        return Ok(renewals);
    }
    // Not renewed: final already (a pass settled it a moment ago), or
    // another node holds it (or nobody: released, or never there).
    let unmoved: Vec<(String, OrderStatus)> = order::Entity::find()
        .select_only()
        .column(order::Column::Id)
        .column(order::Column::Status)
        .filter(bulk::column_in(db, order::Column::Id, ids()))
        .filter(
            Condition::any()
                .add(order::Column::Status.ne(OrderStatus::Processing))
                .add(order::Column::ClaimedBy.is_null())
                .add(order::Column::ClaimedBy.ne(node)),
        )
        .into_tuple()
        .all(db)
        .await?;
    for (id, status) in unmoved {
        let found = if status == OrderStatus::Processing {
            Renewal::Lost
        } else {
            Renewal::Final
        };
        renewals.insert(id, found);
    }
    Ok(renewals)
}

/// What renewing a claim found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    /// The claim is this node's for another lease.
    Renewed,
    /// The order is settled: there is nothing left to hold.
    Final,
    /// Another node holds the order now.
    Lost,
}

/// Lets go of `node`'s claim after a pass; another node's claim is left alone.
pub async fn release(db: &Db, order_id: &str, node: &str) -> Result<(), DbErr> {
    let update = order::Entity::update_many()
        .col_expr(
            order::Column::ClaimedUntil,
            Expr::value(Option::<DateTime<Utc>>::None),
        )
        .col_expr(
            order::Column::ClaimedBy,
            Expr::value(Option::<String>::None),
        )
        .filter(order::Column::Id.eq(order_id))
        .filter(order::Column::ClaimedBy.eq(node));
    write_alone(db, update.exec(db)).await.map(|_| ())
}

/// Orders still `processing` that nobody holds, created before `older_than`:
/// unclaimed, their claim lapsed, or their holder is not alive (no heartbeat
/// since `alive_since`, or it stopped cleanly).
pub async fn stranded<C: ConnectionTrait>(
    db: &C,
    older_than: DateTime<Utc>,
    now: DateTime<Utc>,
    alive_since: DateTime<Utc>,
    limit: u64,
) -> Result<Vec<String>, DbErr> {
    stranded_select(older_than, now, alive_since, limit)
        .into_tuple()
        .all(db)
        .await
}

/// The ids [`stranded`] reads.
fn stranded_select(
    older_than: DateTime<Utc>,
    now: DateTime<Utc>,
    alive_since: DateTime<Utc>,
    limit: u64,
) -> Select<order::Entity> {
    order::Entity::find()
        .select_only()
        .column(order::Column::Id)
        .filter(status_is(OrderStatus::Processing))
        .filter(order::Column::CreatedAt.lt(older_than))
        .filter(claim_is_free(now, alive_since))
        .order_by_asc(order::Column::CreatedAt)
        .limit(limit)
}

/// An order's claim is free: never taken, lapsed, or its holder is not
/// alive (no heartbeat since `alive_since`, or it stopped cleanly).
fn claim_is_free(now: DateTime<Utc>, alive_since: DateTime<Utc>) -> Condition {
    Condition::any()
        .add(order::Column::ClaimedUntil.is_null())
        .add(order::Column::ClaimedUntil.lt(now))
        .add(order::Column::ClaimedBy.not_in_subquery(nodes::alive(alive_since)))
}

/// Orders still `processing` that `node` holds: at start, what an earlier
/// incarnation of the node was working on, taken back at once.
pub async fn held_by<C: ConnectionTrait>(db: &C, node: &str) -> Result<Vec<String>, DbErr> {
    held_by_select(node).into_tuple().all(db).await
}

/// The ids [`held_by`] reads.
fn held_by_select(node: &str) -> Select<order::Entity> {
    order::Entity::find()
        .select_only()
        .column(order::Column::Id)
        .filter(status_is(OrderStatus::Processing))
        .filter(order::Column::ClaimedBy.eq(node))
        .order_by_asc(order::Column::CreatedAt)
}

/// What one reading of the backlog for admission says: the units the
/// suppliers and this service have yet to deliver (every node's orders).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct LiveBacklog {
    /// Live units of orders still processing, per partner.
    pub by_partner: HashMap<String, u64>,
    /// Of those, the units of orders accepted before the time asked
    /// about: what is left of an earlier reading's backlog.
    pub accepted_before: u64,
}

/// Live units of orders still processing, per partner, and of them the
/// units of orders accepted before `before`, in one read of the processing
/// orders.
pub async fn live_backlog<C: ConnectionTrait>(
    db: &C,
    before: DateTime<Utc>,
) -> Result<LiveBacklog, DbErr> {
    let older = Expr::case(
        order::Column::CreatedAt.lt(before),
        Expr::col(order::Column::Quantity),
    )
    .finally(0);
    let rows: Vec<(String, Option<i64>, Option<i64>)> = live_units_select(order::Column::PartnerId)
        .column_as(SimpleExpr::from(Func::sum(older)), "older")
        .into_tuple()
        .all(db)
        .await?;
    let units = |sum: Option<i64>| u64::try_from(sum.unwrap_or(0)).unwrap_or(0);
    let mut backlog = LiveBacklog::default();
    for (partner, all, older) in rows {
        backlog.by_partner.insert(partner, units(all));
        backlog.accepted_before += units(older);
    }
    Ok(backlog)
}

/// Live units of orders still processing, per plan (every node's).
pub async fn live_backlog_by_plan<C: ConnectionTrait>(
    db: &C,
) -> Result<HashMap<String, u64>, DbErr> {
    live_units_by(db, order::Column::PlanId).await
}

/// Live units of orders still processing, summed per value of `column`.
async fn live_units_by<C: ConnectionTrait>(
    db: &C,
    column: order::Column,
) -> Result<HashMap<String, u64>, DbErr> {
    let rows: Vec<(String, Option<i64>)> = live_units_select(column).into_tuple().all(db).await?;
    Ok(rows
        .into_iter()
        .map(|(partner, units)| (partner, u64::try_from(units.unwrap_or(0)).unwrap_or(0)))
        .collect())
}

/// The sums [`live_units_by`] reads.
fn live_units_select(column: order::Column) -> Select<order::Entity> {
    order::Entity::find()
        .select_only()
        .column(column)
        .column_as(Expr::col(order::Column::Quantity).sum(), "units")
        .filter(status_is(OrderStatus::Processing))
        .filter(order::Column::Mode.eq(Mode::Live))
        .group_by(column)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tests::assert_planned_through;
    use sea_orm::QueryTrait as _;

    /// Renewing claims finds the orders by primary key, not by walking
    /// every processing order through the status index.
    #[tokio::test]
    async fn renewals_find_their_orders_by_primary_key_not_by_status() {
        let ids = ["ord_a".to_owned(), "ord_b".to_owned()];
        let renew = renew_update(DbBackend::Sqlite, &ids, "node-a", Utc::now());
        assert_planned_through(
            DbBackend::Sqlite.build(&renew.into_query()),
            "orders USING INDEX sqlite_autoindex_orders_1 (id=?)",
            "idx_orders_status",
        )
        .await;
    }

    /// Everything that looks for orders by status (those stranded, those a
    /// node held, the live backlog, those needing attention) reads the
    /// status index, which holds only the open orders.
    #[tokio::test]
    async fn open_orders_are_found_through_the_status_index() {
        let now = Utc::now();
        for select in [
            stranded_select(now, now, now, 100),
            held_by_select("node-a"),
            live_units_select(order::Column::PartnerId),
            live_units_select(order::Column::PlanId),
            order::Entity::find().filter(needs_attention(now)),
        ] {
            assert_planned_through(
                select.build(DbBackend::Sqlite),
                "orders USING INDEX idx_orders_status (status=?",
                "SCAN orders",
            )
            .await;
        }
    }

    /// The status index's condition admits the open statuses and no settled
    /// one, on both databases: a settled order leaves the index.
    #[tokio::test]
    async fn the_status_index_holds_only_open_orders() {
        let (_dir, db) = crate::store::tests::sqlite_file_db("status.db", 1).await;
        crate::store::migrate(&db).await.unwrap();
        let sql = "SELECT sql FROM sqlite_master WHERE name = 'idx_orders_status'";
        assert_open_orders_only(&db, DbBackend::Sqlite, sql).await;
        crate::store::tests::on_own_postgres("esim_status", |db| async move {
            crate::store::migrate(&db).await.unwrap();
            let sql = "SELECT indexdef FROM pg_indexes WHERE indexname = 'idx_orders_status'";
            assert_open_orders_only(&db, DbBackend::Postgres, sql).await;
        })
        .await;
    }

    async fn assert_open_orders_only(db: &Db, backend: DbBackend, sql: &str) {
        let row = db
            .query_one_raw(sea_orm::Statement::from_string(backend, sql))
            .await
            .unwrap()
            .expect("the index exists");
        let definition: String = row.try_get_by_index(0).unwrap();
        let condition = definition.split_once("WHERE").map(|(_, c)| c).unwrap_or("");
        for open in ["'processing'", "'failed'"] {
            assert!(condition.contains(open), "{definition}");
        }
        for settled in ["'completed'", "'partially_completed'"] {
            assert!(!definition.contains(settled), "{definition}");
        }
    }

    /// One reading gives every partner's live processing units and, of
    /// them, those of orders accepted before the time asked about; sandbox
    /// and settled orders are not in the backlog.
    #[tokio::test]
    async fn the_backlog_says_what_is_left_of_orders_accepted_before_a_time() {
        let (_dir, db, partner) = crate::store::fixtures::funded_partner("backlog.db").await;
        let now = Utc::now();
        let orders = [
            ("po_old", Mode::Live, OrderStatus::Processing, 2, 10),
            ("po_older", Mode::Live, OrderStatus::Processing, 3, 5),
            ("po_new", Mode::Live, OrderStatus::Processing, 1, 0),
            ("po_sandbox", Mode::Sandbox, OrderStatus::Processing, 4, 10),
            ("po_done", Mode::Live, OrderStatus::Completed, 7, 10),
        ];
        for (id, mode, status, quantity, age) in orders {
            order::ActiveModel::from(order::Model {
                id: id.into(),
                partner_id: partner.clone(),
                mode,
                idempotency_key: id.into(),
                plan_id: "pl_x".into(),
                quantity,
                unit_price_cents: 100,
                total_cents: 100 * i64::from(quantity),
                list_unit_cents: 100,
                price_source: "tier:gold".into(),
                metadata: serde_json::json!({}),
                status,
                failure_code: None,
                refunded_cents: 0,
                attempts: 0,
                claimed_until: None,
                claimed_by: None,
                created_at: now - chrono::Duration::seconds(age),
                completed_at: None,
            })
            .reset_all()
            .insert(&db)
            .await
            .unwrap();
        }
        let read = live_backlog(&db, now - chrono::Duration::seconds(3))
            .await
            .unwrap();
        assert_eq!(read.by_partner, HashMap::from([(partner, 6)]));
        assert_eq!(read.accepted_before, 5);
    }
}
