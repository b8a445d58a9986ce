//! A reseller account.

use sea_orm::entity::prelude::*;

use crate::states::AccountStatus;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "partners")]
pub struct Model {
    /// `pt_` id.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    /// Display name.
    pub name: String,
    /// URL-safe unique handle.
    #[sea_orm(unique)]
    pub slug: String,
    /// `sandbox`, `pending`, `live`, `suspended` or `closed`.
    pub status: AccountStatus,
    /// Commercial tier name (a key of the `tiers` configuration).
    pub tier: String,
    /// Discount that supersedes the tier's, in basis points.
    pub discount_override_bps: Option<i32>,
    /// Balance under which the partner should top up, in cents.
    pub low_balance_threshold_cents: i64,
    /// When the account was created.
    pub created_at: DateTimeUtc,
    /// When any column last changed.
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {
    #[sea_orm(has_many = "super::api_key::Entity")]
    ApiKey,
    #[sea_orm(has_many = "super::float::Entity")]
    Float,
}

impl Related<super::api_key::Entity> for Entity {
    fn to() -> RelationDef {
        Relation::ApiKey.def()
    }
}

impl Related<super::float::Entity> for Entity {
    fn to() -> RelationDef {
        Relation::Float.def()
    }
}

impl ActiveModelBehavior for ActiveModel {}
