//! Named operators with roles, the append-only audit trail of what they did,
//! and the approvals that hold a large money movement until a second
//! operator agrees (four eyes).
//!
//! The audit table refuses `UPDATE` and `DELETE` by trigger on both
//! databases, so not even a mistaken statement of the service can edit the
//! trail; only a person with the database's own credentials could.

use sea_orm_migration::{
    prelude::*,
    schema::*,
    sea_orm::{ConnectionTrait, DbBackend},
};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.create_table(operators()).await?;
        manager.create_table(audit_events()).await?;
        for (name, columns) in [
            (
                "idx_audit_operator",
                vec![AuditEvents::OperatorId, AuditEvents::Id],
            ),
            (
                "idx_audit_partner",
                vec![AuditEvents::PartnerId, AuditEvents::Id],
            ),
            (
                "idx_audit_action",
                vec![AuditEvents::Action, AuditEvents::Id],
            ),
            ("idx_audit_at", vec![AuditEvents::At]),
        ] {
            let mut index = Index::create();
            index.name(name).table(AuditEvents::Table).if_not_exists();
            for column in columns {
                index.col(column);
            }
            manager.create_index(index.to_owned()).await?;
        }
        manager.create_table(approvals()).await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_approvals_status")
                    .table(Approvals::Table)
                    .col(Approvals::Status)
                    .col(Approvals::Id)
                    .if_not_exists()
                    .to_owned(),
            )
            .await?;
        append_only(manager).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            Approvals::Table.into_iden(),
            AuditEvents::Table.into_iden(),
            Operators::Table.into_iden(),
        ] {
            manager
                .drop_table(Table::drop().table(table).if_exists().to_owned())
                .await?;
        }
        Ok(())
    }
}

fn operators() -> TableCreateStatement {
    Table::create()
        .table(Operators::Table)
        .if_not_exists()
        .col(string_len(Operators::Id, 40).primary_key())
        .col(string_len_uniq(Operators::Name, 100))
        .col(string_len(Operators::Role, 16))
        .col(string_len_uniq(Operators::TokenHash, 64))
        .col(string_len(Operators::Last4, 4))
        .col(string_len(Operators::CreatedBy, 100))
        .col(timestamp_with_time_zone(Operators::CreatedAt))
        .col(timestamp_with_time_zone_null(Operators::RotatedAt))
        .col(timestamp_with_time_zone_null(Operators::RevokedAt))
        .to_owned()
}

fn audit_events() -> TableCreateStatement {
    Table::create()
        .table(AuditEvents::Table)
        .if_not_exists()
        .col(big_pk_auto(AuditEvents::Id))
        .col(timestamp_with_time_zone(AuditEvents::At))
        .col(string_len(AuditEvents::OperatorId, 40))
        .col(string_len(AuditEvents::OperatorName, 100))
        .col(string_len(AuditEvents::Role, 16))
        .col(string_len(AuditEvents::Action, 40))
        .col(string_len(AuditEvents::Outcome, 16))
        .col(string_len(AuditEvents::TargetKind, 24))
        .col(string_len(AuditEvents::TargetId, 100))
        .col(string_len_null(AuditEvents::PartnerId, 40))
        .col(string_len_null(AuditEvents::RequestId, 40))
        .col(big_integer_null(AuditEvents::AmountCents))
        .col(json_null(AuditEvents::Before))
        .col(json_null(AuditEvents::After))
        .col(text_null(AuditEvents::Note))
        .to_owned()
}

fn approvals() -> TableCreateStatement {
    Table::create()
        .table(Approvals::Table)
        .if_not_exists()
        .col(string_len(Approvals::Id, 40).primary_key())
        .col(string_len(Approvals::Kind, 24))
        .col(string_len(Approvals::PartnerId, 40))
        .col(big_integer(Approvals::AmountCents))
        .col(json(Approvals::Request))
        .col(string_len(Approvals::Status, 16))
        .col(string_len(Approvals::RequestedById, 40))
        .col(string_len(Approvals::RequestedByName, 100))
        .col(timestamp_with_time_zone(Approvals::RequestedAt))
        .col(timestamp_with_time_zone(Approvals::ExpiresAt))
        .col(string_len_null(Approvals::DecidedById, 40))
        .col(string_len_null(Approvals::DecidedByName, 100))
        .col(timestamp_with_time_zone_null(Approvals::DecidedAt))
        .col(text_null(Approvals::DecisionNote))
        .col(string_len_null(Approvals::ResultId, 40))
        .to_owned()
}

/// Triggers that refuse any change to an audit row once written.
async fn append_only(manager: &SchemaManager<'_>) -> Result<(), DbErr> {
    let db = manager.get_connection();
    let statements: &[&str] = match manager.get_database_backend() {
        DbBackend::Sqlite => &[
            "CREATE TRIGGER IF NOT EXISTS audit_events_no_update BEFORE UPDATE ON audit_events \
             BEGIN SELECT RAISE(ABORT, 'audit_events is append-only'); END",
            "CREATE TRIGGER IF NOT EXISTS audit_events_no_delete BEFORE DELETE ON audit_events \
             BEGIN SELECT RAISE(ABORT, 'audit_events is append-only'); END",
        ],
        DbBackend::Postgres => &[
            "CREATE OR REPLACE FUNCTION audit_events_append_only() RETURNS trigger \
             LANGUAGE plpgsql AS $$ BEGIN \
             RAISE EXCEPTION 'audit_events is append-only'; END $$",
            "DROP TRIGGER IF EXISTS audit_events_append_only ON audit_events",
            "CREATE TRIGGER audit_events_append_only BEFORE UPDATE OR DELETE OR TRUNCATE \
             ON audit_events FOR EACH STATEMENT EXECUTE FUNCTION audit_events_append_only()",
        ],
        _ => &[],
    };
    for statement in statements {
        db.execute_unprepared(statement).await?;
    }
    Ok(())
}

#[derive(DeriveIden)]
enum Operators {
    Table,
    Id,
    Name,
    Role,
    TokenHash,
    Last4,
    CreatedBy,
    CreatedAt,
    RotatedAt,
    RevokedAt,
}

#[derive(DeriveIden)]
enum AuditEvents {
    Table,
    Id,
    At,
    OperatorId,
    OperatorName,
    Role,
    Action,
    Outcome,
    TargetKind,
    TargetId,
    PartnerId,
    RequestId,
    AmountCents,
    Before,
    After,
    Note,
}

#[derive(DeriveIden)]
enum Approvals {
    Table,
    Id,
    Kind,
    PartnerId,
    AmountCents,
    Request,
    Status,
    RequestedById,
    RequestedByName,
    RequestedAt,
    ExpiresAt,
    DecidedById,
    DecidedByName,
    DecidedAt,
    DecisionNote,
    ResultId,
}
