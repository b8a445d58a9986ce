//! A named operator of the service. Only the SHA-256 of its token is stored.

use sea_orm::entity::prelude::*;

use crate::states::OperatorRole;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "operators")]
pub struct Model {
    /// `op_` id.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    /// Unique display name, shown in the audit trail and the console.
    #[sea_orm(unique)]
    pub name: String,
    /// What the operator may do.
    pub role: OperatorRole,
    /// Lowercase hex SHA-256 of the whole token.
    #[sea_orm(unique)]
    pub token_hash: String,
    /// Last four characters of the token, kept in clear for display.
    pub last4: String,
    /// The name of the operator who created this one.
    pub created_by: String,
    /// When the operator was created.
    pub created_at: DateTimeUtc,
    /// When the token was last replaced.
    pub rotated_at: Option<DateTimeUtc>,
    /// Set when revoked: the token is refused from then on.
    pub revoked_at: Option<DateTimeUtc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
