//! What an Idempotency-Key is bound to: an order, or a binding refusal.

use sea_orm::entity::prelude::*;

use crate::states::Mode;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "idempotency_keys")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub partner_id: String,
    /// The trimmed key.
    #[sea_orm(primary_key, auto_increment = false)]
    pub key: String,
    /// The mode that used it first.
    pub mode: Mode,
    /// SHA-256 of the canonical request body.
    pub fingerprint: String,
    /// Set when the key made an order.
    pub order_id: Option<String>,
    /// The HTTP status of a bound refusal, as versions before refusals were
    /// stored as such wrote it; no longer written or read.
    pub error_status: Option<i32>,
    /// Set when the key is bound to a refusal: the refusal itself
    /// (`{"code": "balance.insufficient", ...}`), read back by
    /// `domain::ordering::Refusal::from_stored`.
    pub error_body: Option<Json>,
    pub created_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
