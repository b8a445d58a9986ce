//! What the console charts: live orders accepted and live units delivered or
//! refunded per minute, a partner's live float after each ledger movement,
//! and partners' names by id. The per-minute counts are one query per
//! series, a `COUNT` per minute range (`SUM(CASE …)`), so no date function
//! differs between SQLite and PostgreSQL.

use std::collections::HashMap;

use chrono::{DateTime, Duration, Utc};
use entities::{ledger_entry, partner, states::UnitStatus};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QueryOrder, QuerySelect, Value,
};

/// One point of a float over time.
#[derive(Debug, Clone)]
pub struct FloatPoint {
    /// When the movement was written.
    pub at: DateTime<Utc>,
    /// The float's balance after it.
    pub balance_cents: i64,
}

/// Live orders created in each of `minutes` minutes from `from`, oldest first.
pub(crate) async fn live_orders_per_minute<C: ConnectionTrait>(
    db: &C,
    from: DateTime<Utc>,
    minutes: u32,
) -> Result<Vec<i64>, DbErr> {
    per_minute(
        db,
        "created_at",
        "FROM orders WHERE mode = 'live'",
        from,
        minutes,
    )
    .await
}

/// Live units moved to `status` (delivered, refunded) in each of `minutes`
/// minutes from `from`, by the unit's `updated_at`, oldest first.
pub(crate) async fn live_units_per_minute<C: ConnectionTrait>(
    db: &C,
    status: UnitStatus,
    from: DateTime<Utc>,
    minutes: u32,
) -> Result<Vec<i64>, DbErr> {
    // A word of the stored vocabulary, never outside input.
    let from_where = format!(
        "FROM order_units u JOIN orders o ON o.id = u.order_id \
         WHERE u.status = '{}' AND o.mode = 'live'",
        status.as_str()
    );
    per_minute(db, "u.updated_at", &from_where, from, minutes).await
}

/// Rows of `from_where` whose `column` falls in each minute from `from`:
/// one `SUM(CASE …)` column per minute, the whole range also bounding the
/// `WHERE`. Each placeholder gets its own value (SQLite's `?` are positional).
async fn per_minute<C: ConnectionTrait>(
    db: &C,
    column: &str,
    from_where: &str,
    from: DateTime<Utc>,
    minutes: u32,
) -> Result<Vec<i64>, DbErr> {
    let mut values: Vec<Value> = Vec::new();
    let mut bind = |at: DateTime<Utc>| {
        values.push(at.into());
        format!("${}", values.len())
    };
    let minute = |i: u32| from + Duration::minutes(i64::from(i));
    let mut sql = String::from("SELECT ");
    for i in 0..minutes {
        let (low, high) = (bind(minute(i)), bind(minute(i + 1)));
        sql.push_str(&format!(
            "{}CAST(SUM(CASE WHEN {column} >= {low} AND {column} < {high} THEN 1 ELSE 0 END) \
             AS BIGINT) AS m{i}",
            if i == 0 { "" } else { ", " }
        ));
    }
    let (low, high) = (bind(minute(0)), bind(minute(minutes)));
    sql.push_str(&format!(
        " {from_where} AND {column} >= {low} AND {column} < {high}"
    ));
    let row = db
        .query_one_raw(super::bulk::portable(db, &sql, values))
        .await?;
    (0..minutes)
        .map(|i| match &row {
            Some(row) => row
                .try_get::<Option<i64>>("", &format!("m{i}"))
                .map(|n| n.unwrap_or(0)),
            None => Ok(0),
        })
        .collect()
}

/// The partner's live float after each of its last `limit` ledger
/// movements, oldest first.
pub(crate) async fn float_line<C: ConnectionTrait>(
    db: &C,
    partner_id: &str,
    limit: u64,
) -> Result<Vec<FloatPoint>, DbErr> {
    let rows: Vec<(DateTime<Utc>, i64)> = ledger_entry::Entity::find()
        .select_only()
        .column(ledger_entry::Column::CreatedAt)
        .column(ledger_entry::Column::BalanceAfterCents)
        .filter(ledger_entry::Column::PartnerId.eq(partner_id))
        .order_by_desc(ledger_entry::Column::Seq)
        .limit(limit)
        .into_tuple()
        .all(db)
        .await?;
    Ok(rows
        .into_iter()
        .rev()
        .map(|(at, balance_cents)| FloatPoint { at, balance_cents })
        .collect())
}

/// The names of the partners `ids`, by id, in one query (unknown ids are left out).
pub(crate) async fn partner_names<C: ConnectionTrait>(
    db: &C,
    mut ids: Vec<String>,
) -> Result<HashMap<String, String>, DbErr> {
    ids.sort_unstable();
    ids.dedup();
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows: Vec<(String, String)> = partner::Entity::find()
        .select_only()
        .column(partner::Column::Id)
        .column(partner::Column::Name)
        .filter(partner::Column::Id.is_in(ids))
        .into_tuple()
        .all(db)
        .await?;
    Ok(rows.into_iter().collect())
}
