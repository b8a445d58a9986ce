//! Partners, their API keys and their two floats.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(Partners::Table)
                    .if_not_exists()
                    .col(string_len(Partners::Id, 40).primary_key())
                    .col(string_len(Partners::Name, 200))
                    .col(string_len(Partners::Slug, 100).unique_key())
                    .col(string_len(Partners::Status, 16))
                    .col(string_len(Partners::Tier, 32))
                    .col(integer_null(Partners::DiscountOverrideBps))
                    .col(big_integer(Partners::LowBalanceThresholdCents).default(0))
                    .col(timestamp_with_time_zone(Partners::CreatedAt))
                    .col(timestamp_with_time_zone(Partners::UpdatedAt))
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table(ApiKeys::Table)
                    .if_not_exists()
                    .col(string_len(ApiKeys::Id, 40).primary_key())
                    .col(string_len(ApiKeys::PartnerId, 40))
                    .col(string_len(ApiKeys::Mode, 8))
                    .col(string_len(ApiKeys::Label, 200))
                    .col(string_len(ApiKeys::SecretHash, 64).unique_key())
                    .col(string_len(ApiKeys::Last4, 4))
                    .col(json_null(ApiKeys::AllowedCidrs))
                    .col(timestamp_with_time_zone_null(ApiKeys::ExpiresAt))
                    .col(timestamp_with_time_zone_null(ApiKeys::RevokedAt))
                    .col(timestamp_with_time_zone(ApiKeys::CreatedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_api_keys_partner")
                            .from(ApiKeys::Table, ApiKeys::PartnerId)
                            .to(Partners::Table, Partners::Id),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_api_keys_partner")
                    .table(ApiKeys::Table)
                    .col(ApiKeys::PartnerId)
                    .if_not_exists()
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table(Floats::Table)
                    .if_not_exists()
                    .col(string_len(Floats::PartnerId, 40))
                    .col(string_len(Floats::Mode, 8))
                    .col(big_integer(Floats::BalanceCents))
                    .col(big_integer(Floats::NextSeq).default(1))
                    .col(timestamp_with_time_zone(Floats::UpdatedAt))
                    .primary_key(Index::create().col(Floats::PartnerId).col(Floats::Mode))
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_floats_partner")
                            .from(Floats::Table, Floats::PartnerId)
                            .to(Partners::Table, Partners::Id),
                    )
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(Floats::Table).to_owned())
            .await?;
        manager
            .drop_table(Table::drop().table(ApiKeys::Table).to_owned())
            .await?;
        manager
            .drop_table(Table::drop().table(Partners::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum Partners {
    Table,
    Id,
    Name,
    Slug,
    Status,
    Tier,
    DiscountOverrideBps,
    LowBalanceThresholdCents,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum ApiKeys {
    Table,
    Id,
    PartnerId,
    Mode,
    Label,
    SecretHash,
    Last4,
    AllowedCidrs,
    ExpiresAt,
    RevokedAt,
    CreatedAt,
}

#[derive(DeriveIden)]
enum Floats {
    Table,
    PartnerId,
    Mode,
    BalanceCents,
    NextSeq,
    UpdatedAt,
}
