//! More than one supplier: each supplier order names the supplier it went to
//! (`supplier`), the plan it buys (`plan_id`, so a failover can find the next
//! supplier's package), the supplier order that took its units over when this
//! one will certainly not deliver (`successor_id`), what the supplier charged
//! per profile when its answer said (`unit_cost_cents`), and how many
//! placement calls were sent (`calls_sent`, counted before each call, so that
//! for a supplier without an idempotency key a lost answer is looked up before
//! anything is sent again). Plans name the package of every supplier that
//! sells them (`supplier_packages`, a JSON object; null means eSIM Access
//! under the plan's own id). One column per statement, because SQLite alters
//! a table one column at a time.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let columns = [
            string_len(SupplierOrders::Supplier, 32)
                .default("esim_access")
                .to_owned(),
            string_len_null(SupplierOrders::PlanId, 80),
            string_len_null(SupplierOrders::SuccessorId, 40),
            big_integer_null(SupplierOrders::UnitCostCents),
            integer(SupplierOrders::CallsSent).default(0).to_owned(),
        ];
        for column in columns {
            manager
                .alter_table(
                    Table::alter()
                        .table(SupplierOrders::Table)
                        .add_column(column)
                        .to_owned(),
                )
                .await?;
        }
        manager
            .alter_table(
                Table::alter()
                    .table(Plans::Table)
                    .add_column(json_null(Plans::SupplierPackages))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Plans::Table)
                    .drop_column(Plans::SupplierPackages)
                    .to_owned(),
            )
            .await?;
        for column in [
            SupplierOrders::CallsSent,
            SupplierOrders::UnitCostCents,
            SupplierOrders::SuccessorId,
            SupplierOrders::PlanId,
            SupplierOrders::Supplier,
        ] {
            manager
                .alter_table(
                    Table::alter()
                        .table(SupplierOrders::Table)
                        .drop_column(column)
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden)]
enum SupplierOrders {
    Table,
    Supplier,
    PlanId,
    SuccessorId,
    UnitCostCents,
    CallsSent,
}

#[derive(DeriveIden)]
enum Plans {
    Table,
    SupplierPackages,
}
