//! Supplier orders that carry many units: one eSIM Access order
//! (`packageInfoList` with a `count`) buys the units of many of our orders at
//! once. Its `transactionId` is this table's id, written down, with the units
//! it carries (`order_units.supplier_txn_id`), before the supplier is called,
//! so a crash between the call and its answer is resolved by asking again
//! under the same id, never by buying twice. `esims.esim_tran_no` keeps the
//! supplier's profile number, which its usage query asks by.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(SupplierOrders::Table)
                    .if_not_exists()
                    .col(string_len(SupplierOrders::Id, 40).primary_key())
                    .col(string_len(SupplierOrders::Mode, 10))
                    .col(string_len(SupplierOrders::PackageCode, 64))
                    .col(integer(SupplierOrders::UnitCount))
                    .col(string_len_null(SupplierOrders::OrderNo, 64))
                    .col(string_len(SupplierOrders::Status, 16))
                    .col(integer(SupplierOrders::Attempts).default(0))
                    .col(text_null(SupplierOrders::LastError))
                    .col(string_len(SupplierOrders::NodeId, 40))
                    .col(timestamp_with_time_zone(SupplierOrders::CreatedAt))
                    .col(timestamp_with_time_zone(SupplierOrders::UpdatedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_supplier_orders_order_no")
                    .table(SupplierOrders::Table)
                    .col(SupplierOrders::OrderNo)
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(OrderUnits::Table)
                    .add_column(string_len_null(OrderUnits::SupplierTxnId, 40))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_order_units_supplier_txn_id")
                    .table(OrderUnits::Table)
                    .col(OrderUnits::SupplierTxnId)
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(Esims::Table)
                    .add_column(string_len_null(Esims::EsimTranNo, 64))
                    .to_owned(),
            )
            .await?;
        // Units pending at the upgrade were placed (if at all) one per
        // supplier order under their own id as the transaction id: each
        // becomes a supplier order of one unit under that same id, so its
        // driver asks again under it and never buys a second time.
        let db = manager.get_connection();
        db.execute_unprepared(
            "INSERT INTO supplier_orders (id, mode, package_code, unit_count, order_no, status, \
             attempts, last_error, node_id, created_at, updated_at) \
             SELECT u.id, o.mode, o.plan_id, 1, NULL, 'placing', 0, NULL, 'upgrade', \
             u.updated_at, u.updated_at \
             FROM order_units u JOIN orders o ON o.id = u.order_id \
             WHERE u.status = 'pending' AND u.supplier_txn_id IS NULL",
        )
        .await?;
        db.execute_unprepared(
            "UPDATE order_units SET supplier_txn_id = id \
             WHERE status = 'pending' AND supplier_txn_id IS NULL",
        )
        .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Esims::Table)
                    .drop_column(Esims::EsimTranNo)
                    .to_owned(),
            )
            .await?;
        manager
            .drop_index(
                Index::drop()
                    .name("idx_order_units_supplier_txn_id")
                    .table(OrderUnits::Table)
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(OrderUnits::Table)
                    .drop_column(OrderUnits::SupplierTxnId)
                    .to_owned(),
            )
            .await?;
        manager
            .drop_table(Table::drop().table(SupplierOrders::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum SupplierOrders {
    Table,
    Id,
    Mode,
    PackageCode,
    UnitCount,
    OrderNo,
    Status,
    Attempts,
    LastError,
    NodeId,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum OrderUnits {
    Table,
    SupplierTxnId,
}

#[derive(DeriveIden)]
enum Esims {
    Table,
    EsimTranNo,
}
