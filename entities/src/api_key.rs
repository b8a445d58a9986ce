//! A partner API key. Only the SHA-256 of the secret is stored.

use sea_orm::entity::prelude::*;

use crate::states::Mode;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "api_keys")]
pub struct Model {
    /// `pk_` id.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    /// Owning partner.
    pub partner_id: String,
    /// `live` or `sandbox`.
    pub mode: Mode,
    /// Free text chosen by the operator.
    pub label: String,
    /// Lowercase hex SHA-256 of the whole secret.
    #[sea_orm(unique)]
    pub secret_hash: String,
    /// Last four characters of the secret, kept in clear for display.
    pub last4: String,
    /// JSON array of CIDR strings; null means any source address.
    pub allowed_cidrs: Option<Json>,
    /// After this instant the key answers `auth.key_expired`.
    pub expires_at: Option<DateTimeUtc>,
    /// Set when the key is revoked; a revoked key is `auth.invalid_key`.
    pub revoked_at: Option<DateTimeUtc>,
    /// When the key was issued.
    pub created_at: DateTimeUtc,
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
