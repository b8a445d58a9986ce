//! What a review is about in money, so an operator's approval moves exactly
//! that: `amount_cents` (the cents in question, as raised) and
//! `ledger_entry_id` (the movement an approval wrote). One column per
//! statement, because SQLite alters a table one column at a time.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Reviews::Table)
                    .add_column(big_integer(Reviews::AmountCents).default(0))
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(Reviews::Table)
                    .add_column(string_len_null(Reviews::LedgerEntryId, 40))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for column in [Reviews::LedgerEntryId, Reviews::AmountCents] {
            manager
                .alter_table(
                    Table::alter()
                        .table(Reviews::Table)
                        .drop_column(column)
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden)]
enum Reviews {
    Table,
    AmountCents,
    LedgerEntryId,
}
