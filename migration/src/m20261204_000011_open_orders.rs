//! The order status index holds only the orders someone still looks for by
//! status: those `processing` (provisioning, claims, recovery, the backlog)
//! and those `failed` (what needs an operator's attention).
//!
//! Every settled order used to leave an entry behind: settling rewrote its
//! entry from `processing` to `completed`, one more index write an order on
//! both databases (on PostgreSQL a new entry, as the update is not heap-only
//! whatever the index holds), and the index grew with every order ever sold
//! while nothing reads the completed ones through it. Written as an `OR` of
//! the two statuses so that SQLite's planner sees `status = 'processing'`
//! (or `'failed'`) in a query imply it, as PostgreSQL's does.

use sea_orm_migration::{prelude::*, sea_orm::ConnectionTrait};

#[derive(DeriveMigrationName)]
pub struct Migration;

/// The index as it stands after this migration.
const OPEN_ORDERS: &str = "CREATE INDEX IF NOT EXISTS idx_orders_status \
     ON orders (status, created_at) \
     WHERE status = 'processing' OR status = 'failed'";

/// The index as the first migration made it.
const EVERY_ORDER: &str =
    "CREATE INDEX IF NOT EXISTS idx_orders_status ON orders (status, created_at)";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        replace_status_index(manager, OPEN_ORDERS).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        replace_status_index(manager, EVERY_ORDER).await
    }
}

/// Drops `idx_orders_status` and creates it again as `create` says; the
/// same statements on both databases.
async fn replace_status_index(manager: &SchemaManager<'_>, create: &str) -> Result<(), DbErr> {
    let db = manager.get_connection();
    db.execute_unprepared("DROP INDEX IF EXISTS idx_orders_status")
        .await?;
    db.execute_unprepared(create).await?;
    Ok(())
}
