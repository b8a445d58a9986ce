//! An order's units and profiles found through their unit ids, without an
//! index by order of their own.
//!
//! A unit's id is its order's id, `_` and its index, and so is the unit id
//! a profile carries: the units of an order are one range of the units'
//! primary key, and its profiles one range of the profiles' unique unit id.
//! Every read of them by order now asks for that range, so the two indexes
//! by order (`idx_units_order`, `idx_esims_order`) only cost their writes:
//! one entry for every unit a supplier order takes and one for every
//! profile delivered, each on the order path. They go. The range is taken
//! byte by byte, which SQLite's default comparison already does; on
//! PostgreSQL the two columns are compared under the `C` collation (a
//! database's default may sort `_` among letters, or skip it), and their
//! indexes are rebuilt once for it, while the tables' rows stay as written.

use sea_orm_migration::{
    prelude::*,
    sea_orm::{ConnectionTrait, DbBackend},
};

#[derive(DeriveMigrationName)]
pub struct Migration;

/// The indexes dropped, as the first orders migration made them.
const BY_ORDER: [(&str, &str); 2] = [
    (
        "idx_units_order",
        "CREATE UNIQUE INDEX IF NOT EXISTS idx_units_order ON order_units (order_id, unit_index)",
    ),
    (
        "idx_esims_order",
        "CREATE INDEX IF NOT EXISTS idx_esims_order ON esims (order_id)",
    ),
];

/// The columns holding unit ids, by table.
const UNIT_ID_COLUMNS: [(&str, &str); 2] = [("order_units", "id"), ("esims", "unit_id")];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        for (index, _) in BY_ORDER {
            db.execute_unprepared(&format!("DROP INDEX IF EXISTS {index}"))
                .await?;
        }
        compare_unit_ids_under(manager, "\"C\"").await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        compare_unit_ids_under(manager, "\"default\"").await?;
        let db = manager.get_connection();
        for (_, create) in BY_ORDER {
            db.execute_unprepared(create).await?;
        }
        Ok(())
    }
}

/// On PostgreSQL, sets the collation the unit id columns compare under
/// (their indexes are rebuilt; the columns keep their type); SQLite already
/// compares them byte by byte.
async fn compare_unit_ids_under(manager: &SchemaManager<'_>, collation: &str) -> Result<(), DbErr> {
    if manager.get_database_backend() != DbBackend::Postgres {
        return Ok(());
    }
    let db = manager.get_connection();
    for (table, column) in UNIT_ID_COLUMNS {
        db.execute_unprepared(&format!(
            "ALTER TABLE {table} ALTER COLUMN {column} TYPE varchar(48) COLLATE {collation}"
        ))
        .await?;
    }
    Ok(())
}
