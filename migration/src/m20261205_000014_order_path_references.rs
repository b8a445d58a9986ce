//! On PostgreSQL, the order path's two references stop being checked by the
//! database on every row: an order's partner (`fk_orders_partner`) and a
//! unit's order (`fk_units_order`).
//!
//! PostgreSQL checks a reference with a trigger per inserted row that runs
//! a query of the referenced table and takes a lock on the row it finds
//! (`FOR KEY SHARE`, itself written to the WAL when the row was not locked
//! yet: an order's row for every unit a supplier order takes, a partner's
//! for every commit of its orders). Measured beside the build before on the
//! bench's drives, the two cost 6 to 11% of PostgreSQL's CPU an order.
//! Neither can fail on the order path: an order is written by the
//! actor of the partner whose key was just authenticated, a unit by the
//! supplier order that read its order, and no row of either table is ever
//! deleted. `esim-reseller verify` (the backup's checks, which also run in
//! place on PostgreSQL) and the crash tests look for an order without its
//! partner and a unit without its order instead.
//!
//! SQLite keeps both: its check is one probe of the parent's key in the
//! writer's own connection, already in the page cache, with no lock or
//! journal of its own, and dropping a constraint there rebuilds the table.

use sea_orm_migration::{
    prelude::*,
    sea_orm::{ConnectionTrait, DbBackend},
};

#[derive(DeriveMigrationName)]
pub struct Migration;

/// The references, as the first orders migration made them: table, name,
/// column, referenced table.
const REFERENCES: [(&str, &str, &str, &str); 2] = [
    ("orders", "fk_orders_partner", "partner_id", "partners"),
    ("order_units", "fk_units_order", "order_id", "orders"),
];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != DbBackend::Postgres {
            return Ok(());
        }
        let db = manager.get_connection();
        for (table, name, _, _) in REFERENCES {
            db.execute_unprepared(&format!(
                "ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {name}"
            ))
            .await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != DbBackend::Postgres {
            return Ok(());
        }
        let db = manager.get_connection();
        for (table, name, column, referenced) in REFERENCES {
            db.execute_unprepared(&format!(
                "ALTER TABLE {table} ADD CONSTRAINT {name} FOREIGN KEY ({column}) \
                 REFERENCES {referenced} (id)"
            ))
            .await?;
        }
        Ok(())
    }
}
