//! The plan catalogue: destinations, plans, and a version counter that lets
//! every node notice a catalogue change.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(Destinations::Table)
                    .if_not_exists()
                    .col(string_len(Destinations::Code, 2).primary_key())
                    .col(string_len(Destinations::Name, 100))
                    .col(string_len(Destinations::Region, 64))
                    .col(boolean(Destinations::Withdrawn).default(false))
                    .col(timestamp_with_time_zone(Destinations::UpdatedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(Plans::Table)
                    .if_not_exists()
                    .col(string_len(Plans::Id, 64).primary_key())
                    .col(string_len(Plans::Name, 200))
                    // "" for regional and global bundles, so the keyset has no nulls.
                    .col(string_len(Plans::CountryCode, 2))
                    .col(string_len_null(Plans::Region, 64))
                    .col(boolean(Plans::Global))
                    .col(string_len(Plans::PlanType, 8))
                    .col(big_integer(Plans::DataAmountMb))
                    .col(big_integer_null(Plans::DailyAllowanceMb))
                    .col(string_len_null(Plans::FupSpeed, 32))
                    .col(boolean(Plans::Unlimited))
                    .col(integer(Plans::DurationDays))
                    .col(integer_null(Plans::VoiceMinutes))
                    .col(integer_null(Plans::SmsCount))
                    .col(json(Plans::CoverageTypes))
                    .col(string_len(Plans::Speed, 32))
                    .col(json_null(Plans::Networks))
                    .col(boolean_null(Plans::RequiresKyc))
                    .col(big_integer(Plans::ListPriceCents))
                    .col(big_integer(Plans::CostFloorCents))
                    .col(boolean(Plans::Active))
                    .col(boolean(Plans::SandboxOnly).default(false))
                    .col(timestamp_with_time_zone(Plans::CreatedAt))
                    .col(timestamp_with_time_zone(Plans::UpdatedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_plans_keyset")
                    .table(Plans::Table)
                    .col(Plans::CountryCode)
                    .col(Plans::DataAmountMb)
                    .col(Plans::DurationDays)
                    .col(Plans::Id)
                    .if_not_exists()
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(CatalogueVersion::Table)
                    .if_not_exists()
                    .col(integer(CatalogueVersion::Id).primary_key())
                    .col(big_integer(CatalogueVersion::Version))
                    .to_owned(),
            )
            .await?;
        let seed = Query::insert()
            .into_table(CatalogueVersion::Table)
            .columns([CatalogueVersion::Id, CatalogueVersion::Version])
            .values_panic([1.into(), 0.into()])
            .to_owned();
        manager.exec_stmt(seed).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            CatalogueVersion::Table.into_iden(),
            Plans::Table.into_iden(),
            Destinations::Table.into_iden(),
        ] {
            manager
                .drop_table(Table::drop().table(table).to_owned())
                .await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden)]
enum Destinations {
    Table,
    Code,
    Name,
    Region,
    Withdrawn,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum Plans {
    Table,
    Id,
    Name,
    CountryCode,
    Region,
    Global,
    PlanType,
    DataAmountMb,
    DailyAllowanceMb,
    FupSpeed,
    Unlimited,
    DurationDays,
    VoiceMinutes,
    SmsCount,
    CoverageTypes,
    Speed,
    Networks,
    RequiresKyc,
    ListPriceCents,
    CostFloorCents,
    Active,
    SandboxOnly,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum CatalogueVersion {
    Table,
    Id,
    Version,
}
