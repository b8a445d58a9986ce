//! A country that plans are sold for.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "destinations")]
pub struct Model {
    /// ISO 3166-1 alpha-2.
    #[sea_orm(primary_key, auto_increment = false)]
    pub code: String,
    pub name: String,
    /// Region slug, e.g. `europe`.
    pub region: String,
    /// A withdrawn destination's plans are not found.
    pub withdrawn: bool,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
