//! The migration CLI (`cargo run -p migration --features cli -- up`).
//! `esim-reseller migrate` does the same `up` with the service's own configuration.

use sea_orm_migration::prelude::*;

#[tokio::main]
async fn main() {
    cli::run_cli(migration::Migrator).await;
}
