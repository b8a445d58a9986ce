//! Named operators. Only the SHA-256 of a token is stored.

use chrono::{DateTime, Utc};
use entities::operator;
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, ConnectionTrait, DbErr, EntityTrait,
    QueryFilter, QueryOrder,
};

use crate::domain::operators::Role;

/// An operator row to insert; the token itself is never passed here.
pub(crate) struct NewOperator {
    pub id: String,
    pub name: String,
    pub role: Role,
    pub token_hash: String,
    pub last4: String,
    pub created_by: String,
}

pub(crate) async fn insert<C: ConnectionTrait>(
    db: &C,
    new: NewOperator,
    now: DateTime<Utc>,
) -> Result<operator::Model, DbErr> {
    operator::ActiveModel {
        id: Set(new.id),
        name: Set(new.name),
        role: Set(new.role),
        token_hash: Set(new.token_hash),
        last4: Set(new.last4),
        created_by: Set(new.created_by),
        created_at: Set(now),
        rotated_at: Set(None),
        revoked_at: Set(None),
    }
    .insert(db)
    .await
}

/// The operator whose token hashes to `hash`, revoked or not.
pub(crate) async fn find_by_hash<C: ConnectionTrait>(
    db: &C,
    hash: &str,
) -> Result<Option<operator::Model>, DbErr> {
    operator::Entity::find()
        .filter(operator::Column::TokenHash.eq(hash))
        .one(db)
        .await
}

/// One operator by id.
pub(crate) async fn find<C: ConnectionTrait>(
    db: &C,
    id: &str,
) -> Result<Option<operator::Model>, DbErr> {
    operator::Entity::find_by_id(id.to_owned()).one(db).await
}

/// Every operator, oldest first.
pub async fn list<C: ConnectionTrait>(db: &C) -> Result<Vec<operator::Model>, DbErr> {
    operator::Entity::find()
        .order_by_asc(operator::Column::CreatedAt)
        .order_by_asc(operator::Column::Id)
        .all(db)
        .await
}

/// Replaces the token of a not-revoked operator; `None` if it was revoked
/// meanwhile.
pub(crate) async fn set_token<C: ConnectionTrait>(
    db: &C,
    id: &str,
    token_hash: String,
    last4: String,
    now: DateTime<Utc>,
) -> Result<Option<operator::Model>, DbErr> {
    let updated = operator::Entity::update_many()
        .col_expr(operator::Column::TokenHash, token_hash.into())
        .col_expr(operator::Column::Last4, last4.into())
        .col_expr(operator::Column::RotatedAt, Some(now).into())
        .filter(operator::Column::Id.eq(id))
        .filter(operator::Column::RevokedAt.is_null())
        .exec(db)
        .await?;
    match updated.rows_affected {
        1 => find(db, id).await,
        _ => Ok(None),
    }
}

/// Marks an operator revoked; `None` if it already was.
pub(crate) async fn revoke<C: ConnectionTrait>(
    db: &C,
    row: operator::Model,
    now: DateTime<Utc>,
) -> Result<Option<operator::Model>, DbErr> {
    if row.revoked_at.is_some() {
        return Ok(None);
    }
    let mut model: operator::ActiveModel = row.into();
    model.revoked_at = Set(Some(now));
    model.update(db).await.map(Some)
}
