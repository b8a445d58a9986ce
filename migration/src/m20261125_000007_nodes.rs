//! The nodes that run provisioning, with a heartbeat: a claim held by a node
//! whose heartbeat stopped is taken over without waiting out its lease, and
//! a node that stopped cleanly says so at once.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(Nodes::Table)
                    .if_not_exists()
                    .col(string_len(Nodes::Id, 40).primary_key())
                    .col(timestamp_with_time_zone(Nodes::StartedAt))
                    .col(timestamp_with_time_zone(Nodes::HeartbeatAt))
                    .col(timestamp_with_time_zone_null(Nodes::StoppedAt))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(Nodes::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum Nodes {
    Table,
    Id,
    StartedAt,
    HeartbeatAt,
    StoppedAt,
}
