//! Backups of the embedded SQLite database and their checks (which also run
//! in place on either database, [`in_one_snapshot`]): a consistent
//! online copy (`VACUUM INTO`, which reads one snapshot while writers carry
//! on in WAL mode), and the checks a copy must pass before it is trusted:
//! SQLite's own integrity check, then the money invariants.
//!
//! The invariants are the ones the service keeps on every write:
//! - every live float equals the sum of its ledger, and its last row's
//!   `balance_after_cents`; every row's balance follows from the one before;
//! - ledger `seq` runs 1, 2, 3, … per partner, without a gap;
//! - every order has `quantity` units; a live order's purchase row is minus
//!   its total and its refund rows add up to `refunded_cents`, which is the
//!   unit price times its refunded units; a completed order has every unit
//!   delivered;
//! - every order's partner and every unit's order exist (PostgreSQL does not
//!   check these references on every row; see migration
//!   `m20261205_000014_order_path_references`).

use sea_orm::{
    AccessMode, ConnectionTrait, Database, DatabaseConnection, DbBackend, DbErr, IsolationLevel,
    Statement, TransactionTrait,
};

/// One check: what it means when it finds a row, and the query that finds
/// the first offending row (its first column names it).
struct Check {
    broken: &'static str,
    sql: &'static str,
}

const CHECKS: &[Check] = &[
    Check {
        broken: "a live float differs from the sum of its ledger",
        sql: "SELECT f.partner_id FROM floats f \
              LEFT JOIN ledger_entries l ON l.partner_id = f.partner_id \
              WHERE f.mode = 'live' GROUP BY f.partner_id, f.balance_cents \
              HAVING f.balance_cents != COALESCE(SUM(l.amount_cents), 0) LIMIT 1",
    },
    Check {
        broken: "a live float differs from its last ledger row's balance",
        sql: "SELECT f.partner_id FROM floats f JOIN ledger_entries l \
              ON l.partner_id = f.partner_id AND l.seq = (SELECT MAX(seq) FROM ledger_entries \
              WHERE partner_id = f.partner_id) \
              WHERE f.mode = 'live' AND l.balance_after_cents != f.balance_cents LIMIT 1",
    },
    Check {
        broken: "a partner's ledger seq has a gap (it must run 1, 2, 3, ...)",
        sql: "SELECT partner_id FROM ledger_entries GROUP BY partner_id \
              HAVING MIN(seq) != 1 OR MAX(seq) != COUNT(*) OR COUNT(DISTINCT seq) != COUNT(*) \
              LIMIT 1",
    },
    Check {
        broken: "a ledger row's balance does not follow from the row before it",
        sql: "SELECT a.partner_id || ' seq ' || a.seq FROM ledger_entries a \
              LEFT JOIN ledger_entries b ON b.partner_id = a.partner_id AND b.seq = a.seq - 1 \
              WHERE a.balance_after_cents != COALESCE(b.balance_after_cents, 0) + a.amount_cents \
              LIMIT 1",
    },
    Check {
        broken: "an order's partner does not exist",
        sql: "SELECT o.id FROM orders o LEFT JOIN partners p ON p.id = o.partner_id \
              WHERE p.id IS NULL LIMIT 1",
    },
    Check {
        broken: "a unit's order does not exist",
        // Each unit looks its order up by key.
        sql: "SELECT u.id FROM order_units u LEFT JOIN orders o ON o.id = u.order_id \
              WHERE o.id IS NULL LIMIT 1",
    },
    Check {
        // A unit's row is written when a supplier order takes it (or it is
        // refunded): a processing order may have fewer, a settled one not.
        broken: "an order has more units than its quantity, or is settled with fewer",
        // Counted once and joined: the units have no index by order.
        sql: "SELECT o.id FROM orders o LEFT JOIN (SELECT order_id, COUNT(*) AS n \
              FROM order_units GROUP BY order_id) u ON u.order_id = o.id \
              WHERE COALESCE(u.n, 0) > o.quantity \
              OR (o.status != 'processing' AND COALESCE(u.n, 0) != o.quantity) LIMIT 1",
    },
    Check {
        broken: "a live order's purchase row is not minus its total",
        // Aggregated once and joined: the ledger has no index by order.
        sql: "SELECT o.id FROM orders o LEFT JOIN (SELECT order_id, SUM(amount_cents) AS s \
              FROM ledger_entries WHERE kind = 'purchase' AND order_id IS NOT NULL \
              GROUP BY order_id) p ON p.order_id = o.id \
              WHERE o.mode = 'live' AND o.total_cents != -COALESCE(p.s, 0) LIMIT 1",
    },
    Check {
        broken: "a live order's refund rows do not add up to its refunded_cents",
        sql: "SELECT o.id FROM orders o LEFT JOIN (SELECT order_id, SUM(amount_cents) AS s \
              FROM ledger_entries WHERE kind = 'refund' AND order_id IS NOT NULL \
              GROUP BY order_id) r ON r.order_id = o.id \
              WHERE o.mode = 'live' AND o.refunded_cents != COALESCE(r.s, 0) LIMIT 1",
    },
    Check {
        broken: "an order's refunded_cents is not its unit price times its refunded units",
        sql: "SELECT o.id FROM orders o LEFT JOIN (SELECT order_id, COUNT(*) AS n \
              FROM order_units WHERE status = 'refunded' GROUP BY order_id) r \
              ON r.order_id = o.id \
              WHERE o.refunded_cents != o.unit_price_cents * COALESCE(r.n, 0) LIMIT 1",
    },
    Check {
        broken: "a completed order has a unit that was not delivered",
        // Each unit not delivered looks its order up by key.
        sql: "SELECT o.id FROM order_units u JOIN orders o ON o.id = u.order_id \
              WHERE u.status != 'delivered' AND o.status = 'completed' LIMIT 1",
    },
];

/// Opens a SQLite file read-only (nothing is created or changed).
pub async fn open_read_only(path: &str) -> Result<DatabaseConnection, DbErr> {
    Database::connect(format!("sqlite://{path}?mode=ro")).await
}

/// Writes a consistent copy of the whole database to `path` (which must not
/// exist), while the service keeps serving.
pub async fn vacuum_into<C: ConnectionTrait>(db: &C, path: &str) -> Result<(), DbErr> {
    if db.get_database_backend() != DbBackend::Sqlite {
        return Err(DbErr::Custom(
            "online backups are for the embedded SQLite database; back PostgreSQL up with its own tools (pg_basebackup, a standby)".into(),
        ));
    }
    db.execute_raw(Statement::from_sql_and_values(
        DbBackend::Sqlite,
        "VACUUM INTO ?",
        [path.into()],
    ))
    .await
    .map(|_| ())
}

/// SQLite's integrity check: `None` when it says `ok`, else its first line.
pub async fn integrity<C: ConnectionTrait>(db: &C) -> Result<Option<String>, DbErr> {
    let rows = db
        .query_all_raw(Statement::from_string(
            DbBackend::Sqlite,
            "PRAGMA integrity_check",
        ))
        .await?;
    let first: Option<String> = rows
        .first()
        .map(|row| row.try_get_by_index::<String>(0))
        .transpose()?;
    Ok(first.filter(|line| line != "ok"))
}

/// The first money invariant the database breaks, named with the row that
/// breaks it; `None` when every one holds.
pub async fn first_violation<C: ConnectionTrait>(db: &C) -> Result<Option<String>, DbErr> {
    for check in CHECKS {
        let row = db
            .query_one_raw(Statement::from_string(db.get_database_backend(), check.sql))
            .await?;
        if let Some(row) = row {
            let at: String = row.try_get_by_index(0)?;
            return Ok(Some(format!("{}: {at}", check.broken)));
        }
    }
    Ok(None)
}

/// What a database holds, read in one snapshot while it keeps serving: the
/// first money invariant or reference it breaks (`None` when all hold), and
/// how many orders and partners it has. On PostgreSQL one read-only
/// `REPEATABLE READ` transaction, on SQLite one read transaction of its
/// WAL, so that no check sees a write the others did not.
pub async fn in_one_snapshot(db: &DatabaseConnection) -> Result<(Option<String>, i64, i64), DbErr> {
    let snapshot = match db.get_database_backend() {
        DbBackend::Postgres => {
            db.begin_with_config(
                Some(IsolationLevel::RepeatableRead),
                Some(AccessMode::ReadOnly),
            )
            .await?
        }
        _ => db.begin().await?,
    };
    let violation = first_violation(&snapshot).await?;
    let (orders, partners) = counts(&snapshot).await?;
    snapshot.rollback().await?;
    Ok((violation, orders, partners))
}

/// How many orders and partners the database holds.
pub async fn counts<C: ConnectionTrait>(db: &C) -> Result<(i64, i64), DbErr> {
    let count = |table: &str| {
        Statement::from_string(
            db.get_database_backend(),
            format!("SELECT COUNT(*) FROM {table}"),
        )
    };
    let read = |row: Option<sea_orm::QueryResult>| -> Result<i64, DbErr> {
        row.map(|r| r.try_get_by_index::<i64>(0))
            .transpose()
            .map(|n| n.unwrap_or(0))
    };
    let orders = read(db.query_one_raw(count("orders")).await?)?;
    let partners = read(db.query_one_raw(count("partners")).await?)?;
    Ok((orders, partners))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{
        migrate,
        tests::{on_own_postgres, one_value, sqlite_file_db},
    };

    /// A unit whose order is not there, then an order whose partner is not
    /// there, each named by the checks; the database lets both in, as
    /// PostgreSQL does and SQLite does with its checks switched off.
    async fn orphans_are_named(db: DatabaseConnection) {
        assert_eq!(first_violation(&db).await.unwrap(), None);
        db.execute_unprepared(
            "INSERT INTO order_units (id, order_id, unit_index, status, attempts, updated_at) \
             VALUES ('ord_lost_1', 'ord_lost', 1, 'pending', 0, '2026-12-05T00:00:00Z')",
        )
        .await
        .unwrap();
        assert_eq!(
            first_violation(&db).await.unwrap().as_deref(),
            Some("a unit's order does not exist: ord_lost_1")
        );
        db.execute_unprepared(
            "INSERT INTO orders (id, partner_id, mode, idempotency_key, plan_id, quantity, \
             unit_price_cents, total_cents, list_unit_cents, price_source, metadata, status, \
             refunded_cents, attempts, created_at) \
             VALUES ('ord_stray', 'ptr_gone', 'sandbox', 'k1', 'pl_x', 1, 100, 100, 100, 'list', \
             '{}', 'processing', 0, 0, '2026-12-05T00:00:00Z')",
        )
        .await
        .unwrap();
        assert_eq!(
            first_violation(&db).await.unwrap().as_deref(),
            Some("an order's partner does not exist: ord_stray")
        );
    }

    #[tokio::test]
    async fn sqlite_keeps_the_references_and_the_checks_name_what_breaks_them() {
        let (_dir, db) = sqlite_file_db("refs.db", 1).await;
        migrate(&db).await.unwrap();
        for (table, expected) in [("orders", "partners"), ("order_units", "orders")] {
            let referenced = db
                .query_one_raw(Statement::from_string(
                    DbBackend::Sqlite,
                    format!("SELECT \"table\" FROM pragma_foreign_key_list('{table}')"),
                ))
                .await
                .unwrap()
                .map(|row| row.try_get_by_index::<String>(0).unwrap());
            assert_eq!(referenced.as_deref(), Some(expected), "{table}");
        }
        // The one connection, told not to check, as a file written
        // elsewhere may have been.
        db.execute_unprepared("PRAGMA foreign_keys = OFF")
            .await
            .unwrap();
        orphans_are_named(db).await;
    }

    #[tokio::test]
    async fn postgres_leaves_the_order_paths_references_to_the_checks() {
        on_own_postgres("esim_refs", |db| async move {
            let references: String = one_value(
                &db,
                "SELECT string_agg(conname, ',' ORDER BY conname) FROM pg_constraint \
                 WHERE contype = 'f'",
            )
            .await;
            assert_eq!(references, "fk_api_keys_partner,fk_floats_partner");
            orphans_are_named(db).await;
        })
        .await;
    }
}
