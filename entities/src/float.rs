//! A prepaid float: one row per partner and mode (`live`, `sandbox`).

use sea_orm::entity::prelude::*;

use crate::states::Mode;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "floats")]
pub struct Model {
    /// Owning partner.
    #[sea_orm(primary_key, auto_increment = false)]
    pub partner_id: String,
    /// `live` or `sandbox`.
    #[sea_orm(primary_key, auto_increment = false)]
    pub mode: Mode,
    /// Spendable balance in US cents.
    pub balance_cents: i64,
    /// The ledger `seq` the next money movement of this float takes.
    pub next_seq: i64,
    /// When the balance last moved.
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {
    #[sea_orm(
        belongs_to = "super::partner::Entity",
        from = "Column::PartnerId",
        to = "super::partner::Column::Id"
    )]
    Partner,
}

impl Related<super::partner::Entity> for Entity {
    fn to() -> RelationDef {
        Relation::Partner.def()
    }
}

impl ActiveModelBehavior for ActiveModel {}
