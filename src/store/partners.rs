//! Partners and their floats.

use chrono::{DateTime, Utc};
use entities::{float, partner};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, ConnectionTrait, DbErr, EntityTrait,
    PaginatorTrait, QueryFilter, QueryOrder, QuerySelect, TransactionSession, TransactionTrait,
};

use crate::domain::{
    ids::PartnerId,
    partner::{Mode, Status},
};

/// What the operator gives to open an account.
pub struct NewPartner {
    pub name: String,
    pub slug: String,
    pub status: Status,
    pub tier: String,
    pub discount_override_bps: Option<i32>,
    pub low_balance_threshold_cents: i64,
    pub sandbox_float_cents: i64,
}

/// A live gold partner with `sandbox_float_cents` in its sandbox float, for
/// tests that need any partner to write for: its id.
#[cfg(test)]
pub(crate) async fn gold_partner(db: &super::Db, slug: &str, sandbox_float_cents: i64) -> String {
    let new = NewPartner {
        name: slug.to_uppercase(),
        slug: slug.into(),
        status: Status::Live,
        tier: "gold".into(),
        discount_override_bps: None,
        low_balance_threshold_cents: 0,
        sandbox_float_cents,
    };
    create(db, new, Utc::now()).await.unwrap().partner.id
}

/// A partner with both floats.
#[derive(Debug, Clone)]
pub struct PartnerWithFloats {
    pub partner: partner::Model,
    pub live_cents: i64,
    pub sandbox_cents: i64,
}

/// Creates the partner and its two floats in one transaction.
#[tracing::instrument(skip_all, fields(slug = %new.slug))]
pub async fn create<C: TransactionTrait>(
    db: &C,
    new: NewPartner,
    now: DateTime<Utc>,
) -> Result<PartnerWithFloats, DbErr> {
    let id = PartnerId::generate();
    let txn = db.begin().await?;
    let model = partner::ActiveModel {
        id: Set(id.to_string()),
        name: Set(new.name),
        slug: Set(new.slug),
        status: Set(new.status),
        tier: Set(new.tier),
        discount_override_bps: Set(new.discount_override_bps),
        low_balance_threshold_cents: Set(new.low_balance_threshold_cents),
        created_at: Set(now),
        updated_at: Set(now),
    }
    .insert(&txn)
    .await?;
    for (mode, balance) in [(Mode::Live, 0), (Mode::Sandbox, new.sandbox_float_cents)] {
        float::ActiveModel {
            partner_id: Set(id.to_string()),
            mode: Set(mode),
            balance_cents: Set(balance),
            next_seq: Set(1),
            updated_at: Set(now),
        }
        .insert(&txn)
        .await?;
    }
    txn.commit().await?;
    Ok(PartnerWithFloats {
        partner: model,
        live_cents: 0,
        sandbox_cents: new.sandbox_float_cents,
    })
}

/// One partner, if it exists.
pub async fn find<C: ConnectionTrait>(db: &C, id: &str) -> Result<Option<partner::Model>, DbErr> {
    partner::Entity::find_by_id(id.to_owned()).one(db).await
}

/// One partner with its floats, if it exists.
pub async fn find_with_floats<C: ConnectionTrait>(
    db: &C,
    id: &str,
) -> Result<Option<PartnerWithFloats>, DbErr> {
    let Some(partner) = find(db, id).await? else {
        return Ok(None);
    };
    Ok(attach_floats(db, vec![partner]).await?.pop())
}

/// How many partners there are.
pub async fn count<C: ConnectionTrait>(db: &C) -> Result<u64, DbErr> {
    partner::Entity::find().count(db).await
}

/// Partners with both floats, by name, at most `limit` (two queries).
pub async fn list_with_floats<C: ConnectionTrait>(
    db: &C,
    limit: u64,
) -> Result<Vec<PartnerWithFloats>, DbErr> {
    let partners = partner::Entity::find()
        .order_by_asc(partner::Column::Name)
        .order_by_asc(partner::Column::Id)
        .limit(limit)
        .all(db)
        .await?;
    attach_floats(db, partners).await
}

/// `partners` with their floats, read in one query (a float missing reads as 0).
async fn attach_floats<C: ConnectionTrait>(
    db: &C,
    partners: Vec<partner::Model>,
) -> Result<Vec<PartnerWithFloats>, DbErr> {
    let ids: Vec<String> = partners.iter().map(|p| p.id.clone()).collect();
    let floats = float::Entity::find()
        .filter(float::Column::PartnerId.is_in(ids))
        .all(db)
        .await?;
    let balance = |id: &str, mode: Mode| {
        floats
            .iter()
            .find(|f| f.partner_id == id && f.mode == mode)
            .map_or(0, |f| f.balance_cents)
    };
    Ok(partners
        .into_iter()
        .map(|partner| PartnerWithFloats {
            live_cents: balance(&partner.id, Mode::Live),
            sandbox_cents: balance(&partner.id, Mode::Sandbox),
            partner,
        })
        .collect())
}

/// Changes to a partner's terms; `None` leaves a column as it is.
#[derive(Default)]
pub struct PartnerChanges {
    pub status: Option<Status>,
    pub tier: Option<String>,
    /// `Some(None)` clears the override.
    pub discount_override_bps: Option<Option<i32>>,
    pub low_balance_threshold_cents: Option<i64>,
}

/// Applies `changes` and returns the updated row.
#[tracing::instrument(skip_all, fields(partner_id = %current.id))]
pub async fn update<C: ConnectionTrait>(
    db: &C,
    current: partner::Model,
    changes: PartnerChanges,
    now: DateTime<Utc>,
) -> Result<partner::Model, DbErr> {
    let mut model: partner::ActiveModel = current.into();
    if let Some(status) = changes.status {
        model.status = Set(status);
    }
    if let Some(tier) = changes.tier {
        model.tier = Set(tier);
    }
    if let Some(discount) = changes.discount_override_bps {
        model.discount_override_bps = Set(discount);
    }
    if let Some(threshold) = changes.low_balance_threshold_cents {
        model.low_balance_threshold_cents = Set(threshold);
    }
    model.updated_at = Set(now);
    model.update(db).await
}

/// What `GET /balance` shows of a float and its partner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FloatView {
    /// Spendable balance in US cents.
    pub balance_cents: i64,
    /// The partner's commercial tier.
    pub tier: String,
    /// The partner's own discount, if it overrides the tier's.
    pub discount_override_bps: Option<i32>,
    /// Balance under which the partner should top up, in cents.
    pub low_balance_threshold_cents: i64,
}

/// One float and its partner, read fresh: on the caller's thread for a
/// SQLite file ([`super::inline`]), else (or if that read fails) through
/// the pool, gathered with the reads asked at the same moment.
pub async fn float_view(
    gathered: &FloatReads,
    inline: Option<&super::inline::InlineReader>,
    partner_id: &str,
    mode: Mode,
) -> Result<Option<FloatView>, DbErr> {
    if let Some(found) = super::inline::read(inline, |c| float_view_inline(c, partner_id, mode)) {
        return Ok(found);
    }
    gathered.read((partner_id.to_owned(), mode)).await
}

/// Reads of floats through the pool, gathered into one query per round
/// (see [`super::gathered`]): what `GET /balance` uses where there is no
/// inline reader, or the inline read fell back.
pub type FloatReads = super::gathered::Gathered<(String, Mode), FloatView>;

/// Rounds of float reads that may run at once: one. Each round costs the
/// database a statement whatever it carries, so fewer rounds carry more
/// reads each: with one hot partner on PostgreSQL (wrk, 64 connections,
/// this 2-core machine) one round at a time answered 24,164 reads/s (19
/// per round), two 19,348 to 22,284 (11), four 17,739 (6), eight 12,489
/// (3). A read that arrives during a round waits for it to end (under a
/// millisecond there), then is read by the next.
const FLOAT_READ_ROUNDS: usize = 1;

/// Gathered float reads of `db`.
pub fn float_reads(db: &super::Db) -> FloatReads {
    let db = db.clone();
    super::gathered::Gathered::new(
        FLOAT_READ_ROUNDS,
        std::sync::Arc::new(move |keys| {
            let db = db.clone();
            Box::pin(async move { float_views(&db, &keys).await })
        }),
    )
}

/// The floats named by `keys` and their partners, in one query (the floats
/// of every partner named, the modes not asked for dropped here).
async fn float_views<C: ConnectionTrait>(
    db: &C,
    keys: &[(String, Mode)],
) -> Result<std::collections::HashMap<(String, Mode), FloatView>, DbErr> {
    let partners = keys.iter().map(|(partner, _)| partner.as_str());
    let rows = float::Entity::find()
        .find_also_related(partner::Entity)
        .filter(super::bulk::column_in(
            db,
            float::Column::PartnerId,
            partners,
        ))
        .all(db)
        .await?;
    let wanted: std::collections::HashSet<&(String, Mode)> = keys.iter().collect();
    Ok(rows
        .into_iter()
        .filter_map(|(float, partner)| {
            let key = (float.partner_id, float.mode);
            let partner = partner.filter(|_| wanted.contains(&key))?;
            Some((
                key,
                FloatView {
                    balance_cents: float.balance_cents,
                    tier: partner.tier,
                    discount_override_bps: partner.discount_override_bps,
                    low_balance_threshold_cents: partner.low_balance_threshold_cents,
                },
            ))
        })
        .collect())
}

pub(crate) fn float_view_inline(
    connection: &rusqlite::Connection,
    partner_id: &str,
    mode: Mode,
) -> rusqlite::Result<Option<FloatView>> {
    use rusqlite::OptionalExtension;
    connection
        .prepare_cached(
            "SELECT f.balance_cents, p.tier, p.discount_override_bps, p.low_balance_threshold_cents \
             FROM floats f JOIN partners p ON p.id = f.partner_id \
             WHERE f.partner_id = ?1 AND f.mode = ?2",
        )?
        .query_row((partner_id, mode.as_str()), |row| {
            Ok(FloatView {
                balance_cents: row.get(0)?,
                tier: row.get(1)?,
                discount_override_bps: row.get(2)?,
                low_balance_threshold_cents: row.get(3)?,
            })
        })
        .optional()
}

/// The balance of one float, read fresh.
pub async fn float_balance<C: ConnectionTrait>(
    db: &C,
    partner_id: &str,
    mode: Mode,
) -> Result<Option<i64>, DbErr> {
    Ok(float::Entity::find_by_id((partner_id.to_owned(), mode))
        .one(db)
        .await?
        .map(|f| f.balance_cents))
}
