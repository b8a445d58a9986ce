//! Deposits (crypto invoices and wire transfers), operator reviews, and the
//! provider deliveries already processed.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        create_deposits(manager).await?;
        create_reviews(manager).await?;
        create_provider_deliveries(manager).await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            ProviderDeliveries::Table.into_iden(),
            Reviews::Table.into_iden(),
            Deposits::Table.into_iden(),
        ] {
            manager
                .drop_table(Table::drop().table(table).to_owned())
                .await?;
        }
        Ok(())
    }
}

async fn create_deposits(manager: &SchemaManager<'_>) -> Result<(), DbErr> {
    manager
        .create_table(
            Table::create()
                .table(Deposits::Table)
                .if_not_exists()
                .col(string_len(Deposits::Id, 40).primary_key())
                .col(string_len(Deposits::PartnerId, 40))
                .col(string_len(Deposits::Status, 16))
                .col(string_len(Deposits::Method, 8))
                .col(big_integer(Deposits::RequestedCents))
                .col(big_integer_null(Deposits::CreditedCents))
                .col(string_len_null(Deposits::Reference, 200))
                .col(string_len_null(Deposits::ProviderInvoiceId, 100))
                .col(string_len_null(Deposits::LedgerEntryId, 40))
                .col(string_len_null(Deposits::PaymentUrl, 500))
                .col(timestamp_with_time_zone_null(Deposits::ExpiresAt))
                .col(timestamp_with_time_zone(Deposits::CreatedAt))
                .col(timestamp_with_time_zone_null(Deposits::CreditedAt))
                .col(timestamp_with_time_zone(Deposits::UpdatedAt))
                .to_owned(),
        )
        .await?;
    manager
        .create_index(
            Index::create()
                .name("idx_deposits_reference")
                .table(Deposits::Table)
                .col(Deposits::PartnerId)
                .col(Deposits::Reference)
                .unique()
                .if_not_exists()
                .to_owned(),
        )
        .await?;
    manager
        .create_index(
            Index::create()
                .name("idx_deposits_invoice")
                .table(Deposits::Table)
                .col(Deposits::ProviderInvoiceId)
                .if_not_exists()
                .to_owned(),
        )
        .await?;
    manager
        .create_index(
            Index::create()
                .name("idx_deposits_partner_created")
                .table(Deposits::Table)
                .col(Deposits::PartnerId)
                .col(Deposits::CreatedAt)
                .if_not_exists()
                .to_owned(),
        )
        .await?;
    manager
        .create_index(
            Index::create()
                .name("idx_deposits_status")
                .table(Deposits::Table)
                .col(Deposits::Status)
                .col(Deposits::ExpiresAt)
                .if_not_exists()
                .to_owned(),
        )
        .await?;
    Ok(())
}

async fn create_reviews(manager: &SchemaManager<'_>) -> Result<(), DbErr> {
    manager
        .create_table(
            Table::create()
                .table(Reviews::Table)
                .if_not_exists()
                .col(string_len(Reviews::Id, 40).primary_key())
                .col(string_len(Reviews::DepositId, 40))
                .col(string_len(Reviews::PartnerId, 40))
                .col(string_len(Reviews::Reason, 64))
                .col(string_len(Reviews::Detail, 500))
                .col(string_len(Reviews::Status, 16))
                .col(string_len_null(Reviews::Resolution, 500))
                .col(timestamp_with_time_zone(Reviews::CreatedAt))
                .col(timestamp_with_time_zone_null(Reviews::ResolvedAt))
                .to_owned(),
        )
        .await?;
    manager
        .create_index(
            Index::create()
                .name("idx_reviews_deposit_reason")
                .table(Reviews::Table)
                .col(Reviews::DepositId)
                .col(Reviews::Reason)
                .unique()
                .if_not_exists()
                .to_owned(),
        )
        .await?;
    Ok(())
}

async fn create_provider_deliveries(manager: &SchemaManager<'_>) -> Result<(), DbErr> {
    manager
        .create_table(
            Table::create()
                .table(ProviderDeliveries::Table)
                .if_not_exists()
                .col(string_len(ProviderDeliveries::DeliveryId, 100).primary_key())
                .col(string_len(ProviderDeliveries::InvoiceId, 100))
                .col(timestamp_with_time_zone(ProviderDeliveries::ReceivedAt))
                .to_owned(),
        )
        .await?;
    Ok(())
}

#[derive(DeriveIden)]
enum Deposits {
    Table,
    Id,
    PartnerId,
    Status,
    Method,
    RequestedCents,
    CreditedCents,
    Reference,
    ProviderInvoiceId,
    LedgerEntryId,
    PaymentUrl,
    ExpiresAt,
    CreatedAt,
    CreditedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum Reviews {
    Table,
    Id,
    DepositId,
    PartnerId,
    Reason,
    Detail,
    Status,
    Resolution,
    CreatedAt,
    ResolvedAt,
}

#[derive(DeriveIden)]
enum ProviderDeliveries {
    Table,
    DeliveryId,
    InvoiceId,
    ReceivedAt,
}
