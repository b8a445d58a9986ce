//! Orders and their child units, eSIM profiles, the ledger, and idempotency keys.
//!
//! The database guards what the account actors already ensure on one node:
//! an idempotency key is unique per partner; a money movement against an
//! order or a deposit is unique (`movement_key`); a ledger `seq` is unique per
//! partner; a unit delivers at most one profile and an ICCID is delivered once.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        create_orders(manager).await?;
        create_order_units(manager).await?;
        create_esims(manager).await?;
        create_ledger_entries(manager).await?;
        create_idempotency_keys(manager).await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            IdempotencyKeys::Table.into_iden(),
            LedgerEntries::Table.into_iden(),
            Esims::Table.into_iden(),
            OrderUnits::Table.into_iden(),
            Orders::Table.into_iden(),
        ] {
            manager
                .drop_table(Table::drop().table(table).to_owned())
                .await?;
        }
        Ok(())
    }
}

async fn create_orders(manager: &SchemaManager<'_>) -> Result<(), DbErr> {
    manager
        .create_table(
            Table::create()
                .table(Orders::Table)
                .if_not_exists()
                .col(string_len(Orders::Id, 40).primary_key())
                .col(string_len(Orders::PartnerId, 40))
                .col(string_len(Orders::Mode, 8))
                .col(string_len(Orders::IdempotencyKey, 255))
                .col(string_len(Orders::PlanId, 64))
                .col(integer(Orders::Quantity))
                .col(big_integer(Orders::UnitPriceCents))
                .col(big_integer(Orders::TotalCents))
                .col(big_integer(Orders::ListUnitCents))
                .col(string_len(Orders::PriceSource, 64))
                .col(json(Orders::Metadata))
                .col(string_len(Orders::Status, 24))
                .col(string_len_null(Orders::FailureCode, 32))
                .col(big_integer(Orders::RefundedCents).default(0))
                .col(integer(Orders::Attempts).default(0))
                .col(timestamp_with_time_zone_null(Orders::ClaimedUntil))
                .col(timestamp_with_time_zone(Orders::CreatedAt))
                .col(timestamp_with_time_zone_null(Orders::CompletedAt))
                .foreign_key(
                    ForeignKey::create()
                        .name("fk_orders_partner")
                        .from(Orders::Table, Orders::PartnerId)
                        .to(Partners::Table, Partners::Id),
                )
                .to_owned(),
        )
        .await?;
    for (name, cols) in [
        (
            "idx_orders_partner_created",
            vec![
                Orders::PartnerId,
                Orders::Mode,
                Orders::CreatedAt,
                Orders::Id,
            ],
        ),
        ("idx_orders_status", vec![Orders::Status, Orders::CreatedAt]),
    ] {
        let mut index = Index::create()
            .name(name)
            .table(Orders::Table)
            .if_not_exists()
            .to_owned();
        for col in cols {
            index.col(col);
        }
        manager.create_index(index).await?;
    }
    Ok(())
}

async fn create_order_units(manager: &SchemaManager<'_>) -> Result<(), DbErr> {
    manager
        .create_table(
            Table::create()
                .table(OrderUnits::Table)
                .if_not_exists()
                .col(string_len(OrderUnits::Id, 48).primary_key())
                .col(string_len(OrderUnits::OrderId, 40))
                .col(integer(OrderUnits::UnitIndex))
                .col(string_len(OrderUnits::Status, 16))
                .col(string_len_null(OrderUnits::SupplierOrderNo, 64))
                .col(integer(OrderUnits::Attempts).default(0))
                .col(string_len_null(OrderUnits::LastError, 255))
                .col(timestamp_with_time_zone(OrderUnits::UpdatedAt))
                .foreign_key(
                    ForeignKey::create()
                        .name("fk_units_order")
                        .from(OrderUnits::Table, OrderUnits::OrderId)
                        .to(Orders::Table, Orders::Id),
                )
                .to_owned(),
        )
        .await?;
    manager
        .create_index(
            Index::create()
                .name("idx_units_order")
                .table(OrderUnits::Table)
                .col(OrderUnits::OrderId)
                .col(OrderUnits::UnitIndex)
                .unique()
                .if_not_exists()
                .to_owned(),
        )
        .await?;
    Ok(())
}

async fn create_esims(manager: &SchemaManager<'_>) -> Result<(), DbErr> {
    manager
        .create_table(
            Table::create()
                .table(Esims::Table)
                .if_not_exists()
                .col(string_len(Esims::Iccid, 20).primary_key())
                .col(string_len(Esims::PartnerId, 40))
                .col(string_len(Esims::Mode, 8))
                .col(string_len(Esims::OrderId, 40))
                .col(string_len(Esims::UnitId, 48).unique_key())
                .col(string_len(Esims::PlanId, 64))
                .col(string_len(Esims::Status, 16))
                .col(string_len(Esims::SmdpAddress, 255))
                .col(string_len(Esims::MatchingId, 64))
                .col(string_len(Esims::ActivationCode, 400))
                .col(timestamp_with_time_zone(Esims::CreatedAt))
                .to_owned(),
        )
        .await?;
    manager
        .create_index(
            Index::create()
                .name("idx_esims_partner_created")
                .table(Esims::Table)
                .col(Esims::PartnerId)
                .col(Esims::Mode)
                .col(Esims::CreatedAt)
                .if_not_exists()
                .to_owned(),
        )
        .await?;
    manager
        .create_index(
            Index::create()
                .name("idx_esims_order")
                .table(Esims::Table)
                .col(Esims::OrderId)
                .if_not_exists()
                .to_owned(),
        )
        .await?;
    Ok(())
}

async fn create_ledger_entries(manager: &SchemaManager<'_>) -> Result<(), DbErr> {
    manager
        .create_table(
            Table::create()
                .table(LedgerEntries::Table)
                .if_not_exists()
                .col(string_len(LedgerEntries::Id, 40).primary_key())
                .col(string_len(LedgerEntries::PartnerId, 40))
                .col(big_integer(LedgerEntries::Seq))
                .col(string_len(LedgerEntries::Kind, 16))
                .col(big_integer(LedgerEntries::AmountCents))
                .col(big_integer(LedgerEntries::BalanceAfterCents))
                .col(string_len(LedgerEntries::Description, 255))
                .col(string_len_null(LedgerEntries::OrderId, 40))
                .col(string_len_null(LedgerEntries::DepositId, 40))
                .col(string_len_null(LedgerEntries::MovementKey, 100).unique_key())
                .col(timestamp_with_time_zone(LedgerEntries::CreatedAt))
                .to_owned(),
        )
        .await?;
    manager
        .create_index(
            Index::create()
                .name("idx_ledger_partner_seq")
                .table(LedgerEntries::Table)
                .col(LedgerEntries::PartnerId)
                .col(LedgerEntries::Seq)
                .unique()
                .if_not_exists()
                .to_owned(),
        )
        .await?;
    Ok(())
}

async fn create_idempotency_keys(manager: &SchemaManager<'_>) -> Result<(), DbErr> {
    manager
        .create_table(
            Table::create()
                .table(IdempotencyKeys::Table)
                .if_not_exists()
                .col(string_len(IdempotencyKeys::PartnerId, 40))
                .col(string_len(IdempotencyKeys::Key, 255))
                .col(string_len(IdempotencyKeys::Mode, 8))
                .col(string_len(IdempotencyKeys::Fingerprint, 64))
                .col(string_len_null(IdempotencyKeys::OrderId, 40))
                .col(integer_null(IdempotencyKeys::ErrorStatus))
                .col(json_null(IdempotencyKeys::ErrorBody))
                .col(timestamp_with_time_zone(IdempotencyKeys::CreatedAt))
                .primary_key(
                    Index::create()
                        .col(IdempotencyKeys::PartnerId)
                        .col(IdempotencyKeys::Key),
                )
                .to_owned(),
        )
        .await?;
    Ok(())
}

#[derive(DeriveIden)]
enum Partners {
    Table,
    Id,
}

#[derive(DeriveIden)]
enum Orders {
    Table,
    Id,
    PartnerId,
    Mode,
    IdempotencyKey,
    PlanId,
    Quantity,
    UnitPriceCents,
    TotalCents,
    ListUnitCents,
    PriceSource,
    Metadata,
    Status,
    FailureCode,
    RefundedCents,
    Attempts,
    ClaimedUntil,
    CreatedAt,
    CompletedAt,
}

#[derive(DeriveIden)]
enum OrderUnits {
    Table,
    Id,
    OrderId,
    UnitIndex,
    Status,
    SupplierOrderNo,
    Attempts,
    LastError,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum Esims {
    Table,
    Iccid,
    PartnerId,
    Mode,
    OrderId,
    UnitId,
    PlanId,
    Status,
    SmdpAddress,
    MatchingId,
    ActivationCode,
    CreatedAt,
}

#[derive(DeriveIden)]
enum LedgerEntries {
    Table,
    Id,
    PartnerId,
    Seq,
    Kind,
    AmountCents,
    BalanceAfterCents,
    Description,
    OrderId,
    DepositId,
    MovementKey,
    CreatedAt,
}

#[derive(DeriveIden)]
enum IdempotencyKeys {
    Table,
    PartnerId,
    Key,
    Mode,
    Fingerprint,
    OrderId,
    ErrorStatus,
    ErrorBody,
    CreatedAt,
}
