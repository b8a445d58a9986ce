//! API keys.

use chrono::{DateTime, Utc};
use entities::{api_key, partner};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, ConnectionTrait, DbErr, EntityTrait,
    QueryFilter,
};

use crate::domain::partner::Mode;

/// A key row to insert; the secret itself is never passed here.
pub(crate) struct NewKey {
    pub id: String,
    pub partner_id: String,
    pub mode: Mode,
    pub label: String,
    pub secret_hash: String,
    pub last4: String,
    pub allowed_cidrs: Option<Vec<String>>,
    pub expires_at: Option<DateTime<Utc>>,
}

#[tracing::instrument(skip_all, fields(partner_id = %new.partner_id, key_id = %new.id))]
pub(crate) async fn insert<C: ConnectionTrait>(
    db: &C,
    new: NewKey,
    now: DateTime<Utc>,
) -> Result<api_key::Model, DbErr> {
    api_key::ActiveModel {
        id: Set(new.id),
        partner_id: Set(new.partner_id),
        mode: Set(new.mode),
        label: Set(new.label),
        secret_hash: Set(new.secret_hash),
        last4: Set(new.last4),
        allowed_cidrs: Set(new.allowed_cidrs.map(|c| serde_json::json!(c))),
        expires_at: Set(new.expires_at),
        revoked_at: Set(None),
        created_at: Set(now),
    }
    .insert(db)
    .await
}

/// The key whose secret hashes to `hash`, with its partner, in one query
/// (a key without its partner row is none: the reference forbids it).
pub(crate) async fn find_by_hash<C: ConnectionTrait>(
    db: &C,
    hash: &str,
) -> Result<Option<(api_key::Model, partner::Model)>, DbErr> {
    let found = api_key::Entity::find()
        .filter(api_key::Column::SecretHash.eq(hash))
        .find_also_related(partner::Entity)
        .one(db)
        .await?;
    Ok(found.and_then(|(key, partner)| partner.map(|partner| (key, partner))))
}

/// One key by id.
pub(crate) async fn find<C: ConnectionTrait>(
    db: &C,
    id: &str,
) -> Result<Option<api_key::Model>, DbErr> {
    api_key::Entity::find_by_id(id.to_owned()).one(db).await
}

/// Sets or clears a key's expiry.
pub(crate) async fn set_expiry<C: ConnectionTrait>(
    db: &C,
    key: api_key::Model,
    expires_at: Option<DateTime<Utc>>,
) -> Result<api_key::Model, DbErr> {
    let mut model: api_key::ActiveModel = key.into();
    model.expires_at = Set(expires_at);
    model.update(db).await
}

/// Marks a key revoked.
pub(crate) async fn revoke<C: ConnectionTrait>(
    db: &C,
    key: api_key::Model,
    at: DateTime<Utc>,
) -> Result<api_key::Model, DbErr> {
    let mut model: api_key::ActiveModel = key.into();
    model.revoked_at = Set(Some(at));
    model.update(db).await
}

/// Replaces (or clears, with `None`) a key's allowlist.
pub(crate) async fn set_allowlist<C: ConnectionTrait>(
    db: &C,
    key: api_key::Model,
    cidrs: Option<Vec<String>>,
) -> Result<api_key::Model, DbErr> {
    let mut model: api_key::ActiveModel = key.into();
    model.allowed_cidrs = Set(cidrs.map(|c| serde_json::json!(c)));
    model.update(db).await
}
