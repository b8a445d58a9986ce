//! Plans, destinations and the catalogue version.

use entities::{catalogue_version, destination, plan};
use sea_orm::{
    ActiveModelTrait,
    ActiveValue::Set,
    ColumnTrait, ConnectionTrait, DbErr, EntityTrait, PaginatorTrait, QueryFilter,
    sea_query::{Expr, ExprTrait, OnConflict},
};

/// Rows per multi-row insert: 24 columns stays well inside SQLite's and
/// PostgreSQL's bind-parameter limits.
const CHUNK: usize = 400;

/// Everything, for the in-memory catalogue.
pub(crate) struct CatalogueRows {
    pub plans: Vec<plan::Model>,
    pub destinations: Vec<destination::Model>,
    pub version: i64,
}

/// Reads the whole catalogue and its version.
#[tracing::instrument(skip_all)]
pub(crate) async fn load_all<C: ConnectionTrait>(db: &C) -> Result<CatalogueRows, DbErr> {
    Ok(CatalogueRows {
        version: version(db).await?,
        plans: plan::Entity::find().all(db).await?,
        destinations: destination::Entity::find().all(db).await?,
    })
}

/// The catalogue version: it changes whenever the catalogue does.
pub(crate) async fn version<C: ConnectionTrait>(db: &C) -> Result<i64, DbErr> {
    Ok(catalogue_version::Entity::find_by_id(1)
        .one(db)
        .await?
        .map_or(0, |row| row.version))
}

/// Whether no plan was ever loaded.
pub(crate) async fn is_empty<C: ConnectionTrait>(db: &C) -> Result<bool, DbErr> {
    Ok(plan::Entity::find().count(db).await? == 0)
}

/// Marks the catalogue changed (call inside the changing transaction).
pub(crate) async fn bump_version<C: ConnectionTrait>(db: &C) -> Result<(), DbErr> {
    catalogue_version::Entity::update_many()
        .col_expr(
            catalogue_version::Column::Version,
            Expr::col(catalogue_version::Column::Version).add(1),
        )
        .filter(catalogue_version::Column::Id.eq(1))
        .exec(db)
        .await?;
    Ok(())
}

/// Inserts or updates destinations by code (`withdrawn` is kept on update).
pub(crate) async fn upsert_destinations<C: ConnectionTrait>(
    db: &C,
    rows: Vec<destination::Model>,
) -> Result<(), DbErr> {
    for chunk in rows.chunks(CHUNK) {
        let models = chunk.iter().cloned().map(destination::ActiveModel::from);
        destination::Entity::insert_many(models)
            .on_conflict(
                OnConflict::column(destination::Column::Code)
                    .update_columns([
                        destination::Column::Name,
                        destination::Column::Region,
                        destination::Column::UpdatedAt,
                    ])
                    .to_owned(),
            )
            .exec(db)
            .await?;
    }
    Ok(())
}

/// Inserts or updates plans by id (`created_at` is kept on update).
pub(crate) async fn upsert_plans<C: ConnectionTrait>(
    db: &C,
    rows: Vec<plan::Model>,
) -> Result<(), DbErr> {
    use plan::Column as P;
    for chunk in rows.chunks(CHUNK) {
        let models = chunk.iter().cloned().map(plan::ActiveModel::from);
        plan::Entity::insert_many(models)
            .on_conflict(
                OnConflict::column(P::Id)
                    .update_columns([
                        P::Name,
                        P::CountryCode,
                        P::Region,
                        P::Global,
                        P::PlanType,
                        P::DataAmountMb,
                        P::DailyAllowanceMb,
                        P::FupSpeed,
                        P::Unlimited,
                        P::DurationDays,
                        P::VoiceMinutes,
                        P::SmsCount,
                        P::CoverageTypes,
                        P::Speed,
                        P::Networks,
                        P::RequiresKyc,
                        P::ListPriceCents,
                        P::CostFloorCents,
                        P::Active,
                        P::SandboxOnly,
                        P::SupplierPackages,
                        P::UpdatedAt,
                    ])
                    .to_owned(),
            )
            .exec(db)
            .await?;
    }
    Ok(())
}

/// Codes of every destination.
pub(crate) async fn destination_codes<C: ConnectionTrait>(db: &C) -> Result<Vec<String>, DbErr> {
    Ok(destination::Entity::find()
        .all(db)
        .await?
        .into_iter()
        .map(|d| d.code)
        .collect())
}

/// Lists or delists a plan; `None` when there is no such plan.
pub(crate) async fn set_plan_active<C: ConnectionTrait>(
    db: &C,
    id: &str,
    active: bool,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<Option<plan::Model>, DbErr> {
    let Some(row) = plan::Entity::find_by_id(id.to_owned()).one(db).await? else {
        return Ok(None);
    };
    let mut model: plan::ActiveModel = row.into();
    model.active = Set(active);
    model.updated_at = Set(now);
    model.update(db).await.map(Some)
}

/// Withdraws or restores a destination; `None` when there is no such code.
pub(crate) async fn set_destination_withdrawn<C: ConnectionTrait>(
    db: &C,
    code: &str,
    withdrawn: bool,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<Option<destination::Model>, DbErr> {
    let Some(row) = destination::Entity::find_by_id(code.to_owned())
        .one(db)
        .await?
    else {
        return Ok(None);
    };
    let mut model: destination::ActiveModel = row.into();
    model.withdrawn = Set(withdrawn);
    model.updated_at = Set(now);
    model.update(db).await.map(Some)
}
