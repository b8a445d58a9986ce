//! On SQLite, a partner's orders and profiles are listed through tables of
//! their own instead of an index of each main table by partner.
//!
//! SQLite writes a whole page for every page a commit changes. An index
//! keyed by partner has its newest entries at a different leaf for each
//! partner, so a commit carrying the orders of 30 partners rewrote 30 leaves
//! of each such index where one partner's commit rewrote one. Instead, a
//! trigger adds each new order (and profile) to a small table in arrival
//! order (`*_listing_recent`, its newest rows always on the last leaf), and
//! the service moves that table's rows in batches, sorted by partner, into
//! the listing proper (`*_listing`, keyed as the index was): one leaf per
//! partner per batch of thousands of orders instead of one per commit. A
//! listing reads both; the trigger puts a row in the recent table in the
//! same statement that inserts it, whichever writer does, so no row is ever
//! missing from both. Nothing depends on rowids (which `VACUUM` may
//! renumber): the move takes the recent table's rows by its own key.
//!
//! PostgreSQL writes a row's index entries to its WAL, not whole pages, and
//! keeps its indexes: nothing changes there.

use sea_orm_migration::{
    prelude::*,
    sea_orm::{ConnectionTrait, DbBackend},
};

#[derive(DeriveMigrationName)]
pub struct Migration;

/// Builds the listing tables, fills them with the rows already stored, and
/// drops the indexes they replace.
const UP: &[&str] = &[
    "CREATE TABLE order_listing (partner_id TEXT NOT NULL, mode TEXT NOT NULL, \
     created_at TEXT NOT NULL, id TEXT NOT NULL, \
     PRIMARY KEY (partner_id, mode, created_at, id)) WITHOUT ROWID",
    "CREATE TABLE order_listing_recent (seq INTEGER PRIMARY KEY, partner_id TEXT NOT NULL, \
     mode TEXT NOT NULL, created_at TEXT NOT NULL, id TEXT NOT NULL)",
    "CREATE TRIGGER order_listed AFTER INSERT ON orders BEGIN \
     INSERT INTO order_listing_recent (partner_id, mode, created_at, id) \
     VALUES (new.partner_id, new.mode, new.created_at, new.id); END",
    "INSERT INTO order_listing (partner_id, mode, created_at, id) \
     SELECT partner_id, mode, created_at, id FROM orders",
    "DROP INDEX IF EXISTS idx_orders_partner_created",
    "CREATE TABLE esim_listing (partner_id TEXT NOT NULL, mode TEXT NOT NULL, \
     created_at TEXT NOT NULL, iccid TEXT NOT NULL, \
     PRIMARY KEY (partner_id, mode, created_at, iccid)) WITHOUT ROWID",
    "CREATE TABLE esim_listing_recent (seq INTEGER PRIMARY KEY, partner_id TEXT NOT NULL, \
     mode TEXT NOT NULL, created_at TEXT NOT NULL, iccid TEXT NOT NULL)",
    "CREATE TRIGGER esim_listed AFTER INSERT ON esims BEGIN \
     INSERT INTO esim_listing_recent (partner_id, mode, created_at, iccid) \
     VALUES (new.partner_id, new.mode, new.created_at, new.iccid); END",
    "INSERT INTO esim_listing (partner_id, mode, created_at, iccid) \
     SELECT partner_id, mode, created_at, iccid FROM esims",
    "DROP INDEX IF EXISTS idx_esims_partner_created",
];

/// Puts the indexes back and drops the listing tables.
const DOWN: &[&str] = &[
    "CREATE INDEX IF NOT EXISTS idx_orders_partner_created \
     ON orders (partner_id, mode, created_at, id)",
    "DROP TRIGGER IF EXISTS order_listed",
    "DROP TABLE IF EXISTS order_listing_recent",
    "DROP TABLE IF EXISTS order_listing",
    "CREATE INDEX IF NOT EXISTS idx_esims_partner_created \
     ON esims (partner_id, mode, created_at)",
    "DROP TRIGGER IF EXISTS esim_listed",
    "DROP TABLE IF EXISTS esim_listing_recent",
    "DROP TABLE IF EXISTS esim_listing",
];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        run_on_sqlite(manager, UP).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        run_on_sqlite(manager, DOWN).await
    }
}

/// Runs `statements` in order on SQLite; nothing on PostgreSQL.
async fn run_on_sqlite(manager: &SchemaManager<'_>, statements: &[&str]) -> Result<(), DbErr> {
    if manager.get_database_backend() != DbBackend::Sqlite {
        return Ok(());
    }
    let db = manager.get_connection();
    for statement in statements {
        db.execute_unprepared(statement).await?;
    }
    Ok(())
}
