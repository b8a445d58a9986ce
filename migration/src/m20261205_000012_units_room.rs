//! On PostgreSQL, room on the units' pages for the delivery's new row
//! versions.
//!
//! A unit's row is inserted when a supplier order takes it and updated once
//! more when it is delivered (status and time; no indexed column). Packed
//! as inserted, its page has no room left for the new version, so the
//! update writes a new entry into each of the table's three indexes and
//! about twice the WAL a heap-only update does. A fillfactor of 60 leaves
//! two fifths of each page for those versions, so deliveries stay on their
//! page and touch no index. SQLite rewrites a row in place and has no such
//! setting: nothing is done there.

use sea_orm_migration::{
    prelude::*,
    sea_orm::{ConnectionTrait, DbBackend},
};

#[derive(DeriveMigrationName)]
pub struct Migration;

/// The share of a units' page an insert fills.
const UNITS_FILLFACTOR: u8 = 60;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        set_units_fillfactor(manager, Some(UNITS_FILLFACTOR)).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        set_units_fillfactor(manager, None).await
    }
}

/// Sets (or resets to PostgreSQL's default of 100) the units' fillfactor;
/// pages written before keep their rows as they are.
async fn set_units_fillfactor(manager: &SchemaManager<'_>, fill: Option<u8>) -> Result<(), DbErr> {
    if manager.get_database_backend() != DbBackend::Postgres {
        return Ok(());
    }
    let statement = match fill {
        Some(percent) => format!("ALTER TABLE order_units SET (fillfactor = {percent})"),
        None => "ALTER TABLE order_units RESET (fillfactor)".to_owned(),
    };
    manager
        .get_connection()
        .execute_unprepared(&statement)
        .await?;
    Ok(())
}
