//! A partner's orders and profiles, listed on SQLite through listing tables
//! rather than an index of each main table by partner.
//!
//! SQLite writes a whole page for every page a commit changes, and an index
//! keyed by partner keeps each partner's newest entries on a leaf of its
//! own: a commit carrying the orders of 30 partners rewrote 30 leaves of
//! each such index where one partner's commit rewrote one. So (migration
//! `m20261129_000011_partner_listings`) a trigger adds every new order and
//! profile to a recent table in arrival order, always on its last leaf, and
//! [`move_recent`] moves those rows every [`MOVE_EVERY`] (the node's loop
//! does), sorted by partner,
//! into the listing proper, keyed as the index was: a leaf per partner per
//! batch of thousands of rows. A page reads the listing and the recent rows
//! in one statement (one snapshot), so a row is always in exactly one of
//! them. PostgreSQL logs index entries rather than whole pages and keeps
//! its indexes: there the callers list as before ([`in_tables`]).

use std::time::Duration;

use sea_orm::{ConnectionTrait, DbBackend, DbErr, Statement, Value};

use super::{Db, begin_write};

/// How often the recent rows move into the listings: at 10,000 orders a
/// second about 2,500 at a time, a leaf per partner among them, while a
/// page's read of the recent rows stays a scan of a few thousand short rows.
pub const MOVE_EVERY: Duration = Duration::from_millis(250);

/// Rows of one table moved in one transaction at most, so that a backlog
/// (after a pause or a restart) never holds the turn to write for long.
const MOVED_AT_ONCE: i64 = 8_192;

/// One listed table and the two tables that list it.
pub(crate) struct Listing {
    /// The main table.
    table: &'static str,
    /// Its key column, the last column of the listing's order.
    key: &'static str,
    /// The listing proper, keyed (partner_id, mode, created_at, key).
    listing: &'static str,
    /// Rows not yet in the listing, in arrival order (`seq`).
    recent: &'static str,
}

/// A partner's orders.
pub(crate) const ORDERS: Listing = Listing {
    table: "orders",
    key: "id",
    listing: "order_listing",
    recent: "order_listing_recent",
};

/// A partner's profiles.
pub(crate) const ESIMS: Listing = Listing {
    table: "esims",
    key: "iccid",
    listing: "esim_listing",
    recent: "esim_listing_recent",
};

/// Whether `db` lists a partner's rows through the listing tables (SQLite);
/// PostgreSQL keeps its indexes by partner.
pub(crate) fn in_tables(db: &impl ConnectionTrait) -> bool {
    db.get_database_backend() == DbBackend::Sqlite
}

/// What one page of a listing asks for, besides the partner and the mode:
/// conditions on the main table's columns, newest first, at most `limit`.
pub(crate) struct Page {
    /// SQL conditions, `{l}` standing for the table that holds the listed
    /// columns (`created_at` and the key) and `{m}` for the main table.
    conditions: Vec<String>,
    /// The conditions' values, in order.
    values: Vec<Value>,
    /// Rows at most.
    limit: u64,
}

impl Page {
    /// Every row of the partner in the mode, at most `limit`.
    pub(crate) fn new(limit: u64) -> Self {
        Self {
            conditions: Vec::new(),
            values: Vec::new(),
            limit,
        }
    }

    /// Only rows whose main-table `column` equals `value`.
    pub(crate) fn row_equals(mut self, column: &str, value: impl Into<Value>) -> Self {
        self.conditions.push(format!("{{m}}.{column} = ?"));
        self.values.push(value.into());
        self
    }

    /// Only rows created after (`>`) or before (`<`) `at`: `op` is one of
    /// the two.
    pub(crate) fn created(mut self, op: Bound, at: impl Into<Value>) -> Self {
        self.conditions
            .push(format!("{{l}}.created_at {} ?", op.as_sql()));
        self.values.push(at.into());
        self
    }

    /// Only rows after the keyset `(at, key)` in newest-first order.
    pub(crate) fn before(mut self, key_column: &str, at: Value, key: Value) -> Self {
        // A row value, which SQLite seeks in the listing's key as a range
        // (an `OR` of the two comparisons would walk every newer entry).
        self.conditions
            .push(format!("({{l}}.created_at, {{l}}.{key_column}) < (?, ?)"));
        self.values.extend([at, key]);
        self
    }

    /// The conditions joined, with `listed` for `{l}` and `main` for `{m}`.
    fn sql(&self, listed: &str, main: &str) -> String {
        self.conditions
            .iter()
            .map(|condition| {
                let condition = condition.replace("{l}", listed).replace("{m}", main);
                format!(" AND {condition}")
            })
            .collect()
    }
}

/// A comparison of `created_at` with a bound.
#[derive(Clone, Copy)]
pub(crate) enum Bound {
    /// Strictly after.
    After,
    /// Strictly before.
    Before,
}

impl Bound {
    fn as_sql(self) -> &'static str {
        match self {
            Bound::After => ">",
            Bound::Before => "<",
        }
    }
}

/// The statement reading one page of `listing` for a partner in a mode:
/// the listing's newest matching rows (found by its key, as the index found
/// them) and every matching recent row, merged, newest first. The rows are
/// the main table's, so the caller maps them as its entity.
pub(crate) fn page_statement(
    listing: &Listing,
    partner_id: &str,
    mode: &str,
    page: &Page,
) -> Statement {
    let Listing {
        table,
        key,
        listing: listed,
        recent,
    } = listing;
    let sql = format!(
        "SELECT * FROM (SELECT m.* FROM {listed} l JOIN {table} m ON m.{key} = l.{key} \
         WHERE l.partner_id = ? AND l.mode = ?{listed_conditions} \
         ORDER BY l.created_at DESC, l.{key} DESC LIMIT ?) \
         UNION ALL \
         SELECT * FROM (SELECT m.* FROM {recent} r JOIN {table} m ON m.{key} = r.{key} \
         WHERE r.partner_id = ? AND r.mode = ?{recent_conditions}) \
         ORDER BY created_at DESC, {key} DESC LIMIT ?",
        listed_conditions = page.sql("l", "m"),
        recent_conditions = page.sql("m", "m"),
    );
    let limit = Value::from(i64::try_from(page.limit).unwrap_or(i64::MAX));
    let mut values = vec![Value::from(partner_id), Value::from(mode)];
    values.extend(page.values.iter().cloned());
    values.push(limit.clone());
    values.extend([Value::from(partner_id), Value::from(mode)]);
    values.extend(page.values.iter().cloned());
    values.push(limit);
    Statement::from_sql_and_values(DbBackend::Sqlite, sql, values)
}

/// Rows waiting in the recent tables, summed over both listings; `None`
/// on PostgreSQL, which has none.
pub async fn waiting(db: &Db) -> Result<Option<u64>, DbErr> {
    if !in_tables(db) {
        return Ok(None);
    }
    let mut waiting = 0;
    for listing in [&ORDERS, &ESIMS] {
        let sql = format!("SELECT count(*) AS n FROM {}", listing.recent);
        let row = db
            .query_one_raw(Statement::from_string(DbBackend::Sqlite, sql))
            .await?;
        let n: i64 = row
            .map(|row| row.try_get("", "n"))
            .transpose()?
            .unwrap_or(0);
        waiting += u64::try_from(n).unwrap_or(0);
    }
    Ok(Some(waiting))
}

/// Moves every recent row of both listings into the listings proper, at
/// most [`MOVED_AT_ONCE`] rows of a table per transaction, each in this
/// process's turn to write. Returns the rows moved; nothing on PostgreSQL.
#[tracing::instrument(level = "debug", skip_all, err)]
pub async fn move_recent(db: &Db) -> Result<u64, DbErr> {
    if !in_tables(db) {
        return Ok(0);
    }
    let mut moved = 0;
    for listing in [&ORDERS, &ESIMS] {
        loop {
            let batch = move_batch(db, listing).await?;
            moved += batch;
            if batch < u64::try_from(MOVED_AT_ONCE).unwrap_or(u64::MAX) {
                break;
            }
        }
    }
    Ok(moved)
}

/// Moves the oldest recent rows of `listing`, at most [`MOVED_AT_ONCE`],
/// sorted by the listing's key so that each leaf is written once. Returns
/// how many moved.
async fn move_batch(db: &Db, listing: &Listing) -> Result<u64, DbErr> {
    let Listing {
        key,
        listing: listed,
        recent,
        ..
    } = listing;
    // A read first: most passes of an idle node find nothing, and need not
    // wait for the turn to write to learn it.
    let first = format!("SELECT seq FROM {recent} ORDER BY seq LIMIT 1");
    if db
        .query_one_raw(Statement::from_string(DbBackend::Sqlite, first))
        .await?
        .is_none()
    {
        return Ok(0);
    }
    let txn = begin_write(db).await?;
    let last = format!(
        "SELECT seq FROM (SELECT seq FROM {recent} ORDER BY seq LIMIT ?) ORDER BY seq DESC LIMIT 1"
    );
    let Some(last) = txn
        .query_one_raw(Statement::from_sql_and_values(
            DbBackend::Sqlite,
            last,
            [MOVED_AT_ONCE.into()],
        ))
        .await?
    else {
        txn.rollback().await?;
        return Ok(0);
    };
    let last: i64 = last.try_get("", "seq")?;
    let copy = format!(
        "INSERT INTO {listed} (partner_id, mode, created_at, {key}) \
         SELECT partner_id, mode, created_at, {key} FROM {recent} WHERE seq <= ? \
         ORDER BY partner_id, mode, created_at, {key}"
    );
    txn.execute_raw(Statement::from_sql_and_values(
        DbBackend::Sqlite,
        copy,
        [last.into()],
    ))
    .await?;
    let forget = format!("DELETE FROM {recent} WHERE seq <= ?");
    let moved = txn
        .execute_raw(Statement::from_sql_and_values(
            DbBackend::Sqlite,
            forget,
            [last.into()],
        ))
        .await?
        .rows_affected();
    txn.commit().await?;
    Ok(moved)
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, Duration as Span, TimeZone, Utc};
    use entities::{esim, order};
    use migration::{Migrator, MigratorTrait};
    use sea_orm::{EntityTrait, IntoActiveModel};

    use super::*;
    use crate::domain::{
        partner::Mode,
        states::{EsimStatus, OrderStatus},
    };
    use crate::store::{
        esims::{self, EsimQuery},
        orders::{OrderQuery, list_orders},
        partners::gold_partner,
        tests::sqlite_file_db,
    };

    fn at(second: i64) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 29, 0, 0, 0).unwrap() + Span::seconds(second)
    }

    fn order_row(
        n: usize,
        partner_id: &str,
        mode: Mode,
        created_at: DateTime<Utc>,
    ) -> order::Model {
        order::Model {
            id: format!("ord_{n:04}"),
            partner_id: partner_id.into(),
            mode,
            idempotency_key: format!("k{n}"),
            plan_id: "pl_x".into(),
            // No units and no money: the money checks hold, so that only
            // the listing's are tried.
            quantity: 0,
            unit_price_cents: 100,
            total_cents: 0,
            list_unit_cents: 100,
            price_source: "tier:gold".into(),
            metadata: serde_json::json!({}),
            status: match n % 3 {
                0 => OrderStatus::Completed,
                _ => OrderStatus::Processing,
            },
            failure_code: None,
            refunded_cents: 0,
            attempts: 0,
            claimed_until: None,
            claimed_by: None,
            created_at,
            completed_at: None,
        }
    }

    fn esim_row(n: usize, partner_id: &str, created_at: DateTime<Utc>) -> esim::Model {
        esim::Model {
            iccid: format!("8900000000{n:09}"),
            partner_id: partner_id.into(),
            mode: Mode::Live,
            order_id: format!("ord_{:04}", n % 4),
            unit_id: format!("unit_{n}"),
            plan_id: "pl_x".into(),
            status: EsimStatus::Released,
            smdp_address: "smdp.example".into(),
            matching_id: format!("m{n}"),
            activation_code: format!("LPA:1$smdp.example$m{n}"),
            created_at,
            esim_tran_no: None,
        }
    }

    /// The orders `query` should find among `stored`, as the index found
    /// them: newest first, ties by id.
    fn expected(
        stored: &[order::Model],
        partner: &str,
        mode: Mode,
        query: &OrderQuery,
    ) -> Vec<String> {
        let mut rows: Vec<&order::Model> = stored
            .iter()
            .filter(|o| o.partner_id == partner && o.mode == mode)
            .filter(|o| query.status.is_none_or(|s| o.status == s))
            .filter(|o| query.created_after.is_none_or(|t| o.created_at > t))
            .filter(|o| query.created_before.is_none_or(|t| o.created_at < t))
            .filter(|o| {
                query.before.as_ref().is_none_or(|(t, id)| {
                    o.created_at < *t || (o.created_at == *t && o.id.as_str() < id.as_str())
                })
            })
            .collect();
        rows.sort_by(|a, b| (b.created_at, &b.id).cmp(&(a.created_at, &a.id)));
        rows.into_iter()
            .take(usize::try_from(query.limit).unwrap())
            .map(|o| o.id.clone())
            .collect()
    }

    async fn listed(db: &Db, partner: &str, mode: Mode, query: &OrderQuery) -> Vec<String> {
        let rows = list_orders(db, partner, mode, query).await.unwrap();
        rows.into_iter().map(|o| o.id).collect()
    }

    /// Every filter, and every page walked by its cursor, the same as the
    /// index-ordered answer.
    async fn assert_lists_as_expected(db: &Db, stored: &[order::Model], partners: &[String]) {
        for partner in partners {
            for mode in [Mode::Live, Mode::Sandbox] {
                let queries = [
                    OrderQuery {
                        limit: 100,
                        ..Default::default()
                    },
                    OrderQuery {
                        status: Some(OrderStatus::Completed),
                        limit: 100,
                        ..Default::default()
                    },
                    OrderQuery {
                        created_after: Some(at(10)),
                        limit: 100,
                        ..Default::default()
                    },
                    OrderQuery {
                        created_before: Some(at(20)),
                        limit: 5,
                        ..Default::default()
                    },
                ];
                for query in &queries {
                    let want = expected(stored, partner, mode, query);
                    assert_eq!(listed(db, partner, mode, query).await, want, "{query:?}");
                }
                let mut walked = Vec::new();
                let mut query = OrderQuery {
                    limit: 7,
                    ..Default::default()
                };
                loop {
                    let page = list_orders(db, partner, mode, &query).await.unwrap();
                    let Some(last) = page.last() else { break };
                    query.before = Some((last.created_at, last.id.clone()));
                    walked.extend(page.into_iter().map(|o| o.id));
                }
                let all = OrderQuery {
                    limit: 1_000,
                    ..Default::default()
                };
                assert_eq!(walked, expected(stored, partner, mode, &all));
            }
        }
    }

    #[tokio::test]
    async fn a_page_reads_the_listing_and_the_recent_rows_as_one_list() {
        let (_dir, db) = sqlite_file_db("listing.db", 2).await;
        crate::store::migrate(&db).await.unwrap();
        let partners = [
            gold_partner(&db, "a", 0).await,
            gold_partner(&db, "b", 0).await,
        ];
        let mut stored = Vec::new();
        for n in 0..60 {
            // Two orders a second, so that ties on created_at are broken by id.
            let partner = &partners[n % 2];
            let mode = if n % 5 == 0 {
                Mode::Sandbox
            } else {
                Mode::Live
            };
            let row = order_row(n, partner, mode, at(i64::try_from(n / 4).unwrap()));
            order::Entity::insert(row.clone().into_active_model())
                .exec(&db)
                .await
                .unwrap();
            stored.push(row);
            if n == 25 {
                assert_eq!(move_recent(&db).await.unwrap(), 26);
                assert_eq!(waiting(&db).await.unwrap(), Some(0));
            }
            if n % 10 == 9 {
                assert_lists_as_expected(&db, &stored, &partners).await;
            }
        }
        assert_eq!(waiting(&db).await.unwrap(), Some(34));
        assert_eq!(move_recent(&db).await.unwrap(), 34);
        assert_eq!(waiting(&db).await.unwrap(), Some(0));
        assert_lists_as_expected(&db, &stored, &partners).await;
        assert_eq!(
            crate::store::verify::first_violation(&db).await.unwrap(),
            None
        );
    }

    #[tokio::test]
    async fn profiles_are_listed_before_and_after_their_move_across_batches() {
        let (_dir, db) = sqlite_file_db("esims.db", 2).await;
        crate::store::migrate(&db).await.unwrap();
        let rows: Vec<esim::Model> = (0..8_300)
            .map(|n| {
                esim_row(
                    n,
                    if n % 3 == 0 { "p_b" } else { "p_a" },
                    at(i64::try_from(n / 50).unwrap()),
                )
            })
            .collect();
        for chunk in rows.chunks(1_000) {
            let models = chunk
                .iter()
                .cloned()
                .map(IntoActiveModel::into_active_model);
            esim::Entity::insert_many(models).exec(&db).await.unwrap();
        }
        let query = EsimQuery {
            order_id: Some("ord_0001".into()),
            limit: 3,
            ..Default::default()
        };
        let before_move = esims::list(&db, "p_a", Mode::Live, &query).await.unwrap();
        assert_eq!(waiting(&db).await.unwrap(), Some(8_300));
        assert_eq!(
            move_recent(&db).await.unwrap(),
            8_300,
            "two batches, nothing left"
        );
        assert_eq!(waiting(&db).await.unwrap(), Some(0));
        let after_move = esims::list(&db, "p_a", Mode::Live, &query).await.unwrap();
        assert_eq!(before_move, after_move);
        let newest: Vec<&str> = after_move.iter().map(|e| e.iccid.as_str()).collect();
        // The newest of p_a's profiles of ord_0001 (n % 4 == 1, n % 3 != 0).
        assert_eq!(
            newest,
            [
                "8900000000000008297",
                "8900000000000008293",
                "8900000000000008285"
            ]
        );
        let mut cursor = EsimQuery {
            limit: 500,
            ..Default::default()
        };
        let mut walked = 0;
        loop {
            let page = esims::list(&db, "p_b", Mode::Live, &cursor).await.unwrap();
            let Some(last) = page.last() else { break };
            cursor.before = Some((last.created_at, last.iccid.clone()));
            walked += page.len();
        }
        assert_eq!(walked, 2_767, "every one of p_b's profiles, once");
        assert_eq!(
            crate::store::verify::first_violation(&db).await.unwrap(),
            None
        );
    }

    #[tokio::test]
    async fn the_migration_lists_the_rows_stored_before_it_and_drops_the_indexes() {
        let (_dir, db) = sqlite_file_db("before.db", 1).await;
        Migrator::up(&db, Some(10)).await.unwrap();
        let partner = gold_partner(&db, "a", 0).await;
        let stored: Vec<order::Model> = (0..5)
            .map(|n| order_row(n, &partner, Mode::Live, at(i64::try_from(n).unwrap())))
            .collect();
        for row in &stored {
            order::Entity::insert(row.clone().into_active_model())
                .exec(&db)
                .await
                .unwrap();
        }
        esim::Entity::insert(esim_row(1, &partner, at(3)).into_active_model())
            .exec(&db)
            .await
            .unwrap();
        Migrator::up(&db, None).await.unwrap();
        assert_eq!(
            waiting(&db).await.unwrap(),
            Some(0),
            "stored rows go straight into the listing"
        );
        let all = OrderQuery {
            limit: 10,
            ..Default::default()
        };
        assert_eq!(
            listed(&db, &partner, Mode::Live, &all).await,
            expected(&stored, &partner, Mode::Live, &all)
        );
        let profiles = esims::list(
            &db,
            &partner,
            Mode::Live,
            &EsimQuery {
                limit: 10,
                ..Default::default()
            },
        )
        .await
        .unwrap();
        assert_eq!(profiles.len(), 1);
        let indexes = db
            .query_all_raw(Statement::from_string(
                DbBackend::Sqlite,
                "SELECT name FROM sqlite_master \
                 WHERE name IN ('idx_orders_partner_created', 'idx_esims_partner_created')",
            ))
            .await
            .unwrap();
        assert!(
            indexes.is_empty(),
            "the listings replace the partner indexes"
        );
    }

    #[tokio::test]
    async fn the_listing_part_of_a_page_seeks_by_the_listing_s_key() {
        let page = Page::new(10).row_equals("status", "completed").before(
            "id",
            at(5).into(),
            "ord_1".into(),
        );
        let statement = page_statement(&ORDERS, "p", "live", &page);
        crate::store::tests::assert_planned_through(
            statement,
            "SEARCH l USING PRIMARY KEY (partner_id=? AND mode=? AND (created_at,id)<(?,?))",
            "SCAN m",
        )
        .await;
    }

    #[tokio::test]
    async fn a_listing_row_lost_or_doubled_is_named_by_the_checks() {
        let (_dir, db) = sqlite_file_db("checks.db", 1).await;
        crate::store::migrate(&db).await.unwrap();
        let partner = gold_partner(&db, "a", 0).await;
        for n in 0..3 {
            let row = order_row(n, &partner, Mode::Live, at(0));
            order::Entity::insert(row.into_active_model())
                .exec(&db)
                .await
                .unwrap();
        }
        move_recent(&db).await.unwrap();
        let run = |sql: &'static str| db.execute_unprepared(sql);
        run(
            "INSERT INTO order_listing_recent (partner_id, mode, created_at, id) \
             SELECT partner_id, mode, created_at, id FROM order_listing LIMIT 1",
        )
        .await
        .unwrap();
        let doubled = crate::store::verify::first_violation(&db)
            .await
            .unwrap()
            .unwrap();
        assert!(doubled.contains("hold more orders"), "{doubled}");
        run("DELETE FROM order_listing").await.unwrap();
        let lost = crate::store::verify::first_violation(&db)
            .await
            .unwrap()
            .unwrap();
        assert!(
            lost.contains("missing from its partner's listing: ord_000"),
            "{lost}"
        );
    }
}
