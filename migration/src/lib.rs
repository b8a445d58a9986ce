//! Migrations of esim-reseller. One set serves SQLite and PostgreSQL: tables are
//! built with the portable schema builder, money is `BIGINT` cents, and enum-like
//! values are short strings checked by the application.

pub use sea_orm_migration::prelude::*;

mod m20261122_000001_accounts;
mod m20261122_000002_catalogue;
mod m20261122_000003_orders;
mod m20261122_000004_deposits;
mod m20261122_000005_order_claims;
mod m20261125_000006_supplier_orders;
mod m20261125_000007_nodes;
mod m20261125_000008_review_amounts;
mod m20261125_000009_suppliers;
mod m20261126_000010_operators;
mod m20261204_000011_open_orders;
mod m20261205_000012_units_room;
mod m20261205_000013_units_by_unit_id;
mod m20261205_000014_order_path_references;

/// Every migration, oldest first.
pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(m20261122_000001_accounts::Migration),
            Box::new(m20261122_000002_catalogue::Migration),
            Box::new(m20261122_000003_orders::Migration),
            Box::new(m20261122_000004_deposits::Migration),
            Box::new(m20261122_000005_order_claims::Migration),
            Box::new(m20261125_000006_supplier_orders::Migration),
            Box::new(m20261125_000007_nodes::Migration),
            Box::new(m20261125_000008_review_amounts::Migration),
            Box::new(m20261125_000009_suppliers::Migration),
            Box::new(m20261126_000010_operators::Migration),
            Box::new(m20261204_000011_open_orders::Migration),
            Box::new(m20261205_000012_units_room::Migration),
            Box::new(m20261205_000013_units_by_unit_id::Migration),
            Box::new(m20261205_000014_order_path_references::Migration),
        ]
    }
}
