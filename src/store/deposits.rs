//! Deposits, reviews, provider deliveries, and ledger reads.

use chrono::{DateTime, Utc};
use entities::{deposit, ledger_entry, provider_delivery, review};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, Condition, ConnectionTrait, DbErr, EntityTrait, PaginatorTrait,
    QueryFilter, QueryOrder, QuerySelect, sea_query::Expr,
};

use super::orders::{LedgerRow, insert_ledger, move_money};
use crate::domain::{
    ids::DepositId,
    partner::Mode,
    states::{DepositStatus, LedgerKind, ReviewReason, ReviewStatus},
};

use DepositStatus::{Cancelled, Credited, Pending};

pub(crate) async fn insert<C: ConnectionTrait>(
    db: &C,
    row: deposit::Model,
) -> Result<deposit::Model, DbErr> {
    deposit::ActiveModel::from(row).insert(db).await
}

pub(crate) async fn get<C: ConnectionTrait>(
    db: &C,
    id: &str,
) -> Result<Option<deposit::Model>, DbErr> {
    deposit::Entity::find_by_id(id.to_owned()).one(db).await
}

/// The deposit of a provider invoice.
pub(crate) async fn by_invoice<C: ConnectionTrait>(
    db: &C,
    invoice_id: &str,
) -> Result<Option<deposit::Model>, DbErr> {
    deposit::Entity::find()
        .filter(deposit::Column::ProviderInvoiceId.eq(invoice_id))
        .one(db)
        .await
}

/// A partner's deposit.
pub(crate) async fn find<C: ConnectionTrait>(
    db: &C,
    partner_id: &str,
    id: &str,
) -> Result<Option<deposit::Model>, DbErr> {
    deposit::Entity::find_by_id(id.to_owned())
        .filter(deposit::Column::PartnerId.eq(partner_id))
        .one(db)
        .await
}

/// A page of a partner's deposits, newest first, after the keyset `before`.
pub(crate) async fn list<C: ConnectionTrait>(
    db: &C,
    partner_id: &str,
    status: Option<DepositStatus>,
    before: Option<(DateTime<Utc>, String)>,
    limit: u64,
) -> Result<Vec<deposit::Model>, DbErr> {
    let mut select = deposit::Entity::find().filter(deposit::Column::PartnerId.eq(partner_id));
    if let Some(status) = status {
        select = select.filter(deposit::Column::Status.eq(status));
    }
    if let Some((at, id)) = before {
        select = select.filter(
            Condition::any().add(deposit::Column::CreatedAt.lt(at)).add(
                Condition::all()
                    .add(deposit::Column::CreatedAt.eq(at))
                    .add(deposit::Column::Id.lt(id)),
            ),
        );
    }
    select
        .order_by_desc(deposit::Column::CreatedAt)
        .order_by_desc(deposit::Column::Id)
        .limit(limit)
        .all(db)
        .await
}

/// Crypto deposits still pending that the reconciler should ask about:
/// lapsed ones, and ones untouched since `stale_before`.
pub(crate) async fn needing_sync<C: ConnectionTrait>(
    db: &C,
    now: DateTime<Utc>,
    stale_before: DateTime<Utc>,
    limit: u64,
) -> Result<Vec<deposit::Model>, DbErr> {
    deposit::Entity::find()
        .filter(deposit::Column::Method.eq("crypto"))
        .filter(deposit::Column::Status.is_in([Pending, Cancelled]))
        .filter(
            Condition::any()
                .add(
                    Condition::all()
                        .add(deposit::Column::Status.eq(Pending))
                        .add(deposit::Column::ExpiresAt.lt(now)),
                )
                .add(
                    Condition::all()
                        .add(deposit::Column::Status.eq(Pending))
                        .add(deposit::Column::UpdatedAt.lt(stale_before)),
                )
                // A lapsed invoice is still watched by the provider for a
                // while (BTCPay's monitoring window, a day by default): money
                // paid late, or a partial payment still confirming, turns up
                // there and must not wait for a webhook that may be lost.
                .add(
                    Condition::all()
                        .add(deposit::Column::Status.eq(Cancelled))
                        .add(deposit::Column::CreatedAt.gt(now - chrono::Duration::days(2)))
                        .add(deposit::Column::UpdatedAt.lt(stale_before)),
                ),
        )
        .order_by_asc(deposit::Column::UpdatedAt)
        .limit(limit)
        .all(db)
        .await
}

/// Moves a deposit from one of `from` to `to` (no money); returns whether it moved.
pub(crate) async fn transition<C: ConnectionTrait>(
    db: &C,
    id: &str,
    from: &[DepositStatus],
    to: DepositStatus,
    now: DateTime<Utc>,
) -> Result<bool, DbErr> {
    let result = deposit::Entity::update_many()
        .col_expr(deposit::Column::Status, Expr::value(to))
        .col_expr(deposit::Column::UpdatedAt, Expr::value(now))
        .filter(deposit::Column::Id.eq(id))
        .filter(deposit::Column::Status.is_in(from.iter().copied()))
        .exec(db)
        .await?;
    Ok(result.rows_affected == 1)
}

/// Marks a deposit looked at, so the reconciler does not ask again at once.
pub(crate) async fn touch<C: ConnectionTrait>(
    db: &C,
    id: &str,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    deposit::Entity::update_many()
        .col_expr(deposit::Column::UpdatedAt, Expr::value(now))
        .filter(deposit::Column::Id.eq(id))
        .exec(db)
        .await
        .map(|_| ())
}

/// Credits a pending or cancelled crypto deposit with what arrived: the
/// deposit turns `credited`, the live float grows, one `deposit` ledger row is
/// written. Returns the balance after, or `None` if it was already credited
/// or is no longer creditable.
pub(crate) async fn credit<C: ConnectionTrait>(
    txn: &C,
    deposit: &deposit::Model,
    amount_cents: i64,
    now: DateTime<Utc>,
) -> Result<Option<(i64, ledger_entry::Model)>, DbErr> {
    let (balance_after, seq) =
        match move_money(txn, &deposit.partner_id, Mode::Live, amount_cents, now).await? {
            Some((balance, Some(seq))) => (balance, seq),
            _ => return Err(DbErr::RecordNotFound("live float".into())),
        };
    let entry = insert_ledger(
        txn,
        LedgerRow {
            partner_id: &deposit.partner_id,
            seq,
            kind: LedgerKind::Deposit,
            amount_cents,
            balance_after_cents: balance_after,
            description: format!("{} deposit {}", deposit.method, deposit.id),
            order_id: None,
            deposit_id: Some(&deposit.id),
            movement_key: Some(format!("{}:credit", deposit.id)),
            now,
        },
    )
    .await?;
    let moved = deposit::Entity::update_many()
        .col_expr(deposit::Column::Status, Expr::value(Credited))
        .col_expr(
            deposit::Column::CreditedCents,
            Expr::value(Some(amount_cents)),
        )
        .col_expr(deposit::Column::CreditedAt, Expr::value(Some(now)))
        .col_expr(
            deposit::Column::LedgerEntryId,
            Expr::value(Some(entry.id.clone())),
        )
        .col_expr(
            deposit::Column::Reference,
            Expr::value(
                deposit
                    .provider_invoice_id
                    .clone()
                    .or(deposit.reference.clone()),
            ),
        )
        .col_expr(deposit::Column::UpdatedAt, Expr::value(now))
        .filter(deposit::Column::Id.eq(deposit.id.as_str()))
        .filter(deposit::Column::Status.is_in([Pending, Cancelled]))
        .exec(txn)
        .await?;
    if moved.rows_affected != 1 {
        // Roll the caller's transaction back: nothing may move twice.
        return Ok(None);
    }
    Ok(Some((balance_after, entry)))
}

/// Records a wire deposit already credited, with its ledger row.
pub(crate) async fn record_wire<C: ConnectionTrait>(
    txn: &C,
    partner_id: &str,
    amount_cents: i64,
    reference: &str,
    now: DateTime<Utc>,
) -> Result<(deposit::Model, i64), DbErr> {
    let row = deposit::Model {
        id: DepositId::generate().into_string(),
        partner_id: partner_id.to_owned(),
        status: Pending,
        method: "wire".to_owned(),
        requested_cents: amount_cents,
        credited_cents: None,
        reference: Some(reference.to_owned()),
        provider_invoice_id: None,
        ledger_entry_id: None,
        payment_url: None,
        expires_at: None,
        created_at: now,
        credited_at: None,
        updated_at: now,
    };
    let inserted = insert(txn, row).await?;
    let (balance, _) = credit(txn, &inserted, amount_cents, now)
        .await?
        .ok_or_else(|| DbErr::Custom("wire deposit not creditable".into()))?;
    let stored = get(txn, &inserted.id)
        .await?
        .ok_or_else(|| DbErr::RecordNotFound(inserted.id.clone()))?;
    Ok((stored, balance))
}

/// Opens a review, once per deposit and reason.
pub(crate) async fn raise_review<C: ConnectionTrait>(
    db: &C,
    deposit: &deposit::Model,
    reason: ReviewReason,
    amount_cents: i64,
    detail: &str,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    let row = review::Model {
        id: format!("rev_{}", crate::domain::ids::new_suffix()),
        deposit_id: deposit.id.clone(),
        partner_id: deposit.partner_id.clone(),
        reason,
        detail: detail.chars().take(500).collect(),
        amount_cents,
        status: ReviewStatus::Open,
        resolution: None,
        created_at: now,
        resolved_at: None,
        ledger_entry_id: None,
    };
    match review::ActiveModel::from(row).insert(db).await {
        Ok(_) => {
            tracing::warn!(deposit_id = %deposit.id, partner_id = %deposit.partner_id, reason = reason.as_str(), "deposit review raised");
            Ok(())
        }
        Err(err) if super::is_unique_violation(&err) => Ok(()),
        Err(err) => Err(err),
    }
}

/// The latest decided reviews (any status but `open`), at most `limit`.
pub(crate) async fn decided_reviews<C: ConnectionTrait>(
    db: &C,
    limit: u64,
) -> Result<Vec<review::Model>, DbErr> {
    review::Entity::find()
        .filter(review::Column::Status.ne(ReviewStatus::Open))
        .order_by_desc(review::Column::ResolvedAt)
        .limit(limit)
        .all(db)
        .await
}

/// How many reviews wait for an operator.
pub(crate) async fn open_review_count<C: ConnectionTrait>(db: &C) -> Result<u64, DbErr> {
    review::Entity::find()
        .filter(review::Column::Status.eq(ReviewStatus::Open))
        .count(db)
        .await
}

pub(crate) async fn reviews<C: ConnectionTrait>(
    db: &C,
    status: Option<ReviewStatus>,
) -> Result<Vec<review::Model>, DbErr> {
    let mut select = review::Entity::find();
    if let Some(status) = status {
        select = select.filter(review::Column::Status.eq(status));
    }
    select
        .order_by_desc(review::Column::CreatedAt)
        .limit(500)
        .all(db)
        .await
}

/// One review.
pub(crate) async fn review<C: ConnectionTrait>(
    db: &C,
    id: &str,
) -> Result<Option<review::Model>, DbErr> {
    review::Entity::find_by_id(id.to_owned()).one(db).await
}

/// An operator's decision on a review.
pub(crate) struct Decision<'a> {
    /// `approved`, `rejected` or `resolved`.
    pub status: ReviewStatus,
    /// What the operator wrote.
    pub note: &'a str,
    /// The movement an approval wrote.
    pub ledger_entry_id: Option<String>,
    pub now: DateTime<Utc>,
}

/// Closes a review that is still open; `false` if it was not (someone
/// decided first), so the caller's transaction rolls back whatever it moved.
pub(crate) async fn decide_review<C: ConnectionTrait>(
    db: &C,
    id: &str,
    decision: Decision<'_>,
) -> Result<bool, DbErr> {
    let result = review::Entity::update_many()
        .col_expr(review::Column::Status, Expr::value(decision.status))
        .col_expr(
            review::Column::Resolution,
            Expr::value(Some(decision.note.to_owned())),
        )
        .col_expr(review::Column::ResolvedAt, Expr::value(Some(decision.now)))
        .col_expr(
            review::Column::LedgerEntryId,
            Expr::value(decision.ledger_entry_id),
        )
        .filter(review::Column::Id.eq(id))
        .filter(review::Column::Status.eq(ReviewStatus::Open))
        .exec(db)
        .await?;
    Ok(result.rows_affected == 1)
}

/// Whether a provider delivery was already processed.
pub(crate) async fn delivery_seen<C: ConnectionTrait>(
    db: &C,
    delivery_id: &str,
) -> Result<bool, DbErr> {
    Ok(
        provider_delivery::Entity::find_by_id(delivery_id.to_owned())
            .one(db)
            .await?
            .is_some(),
    )
}

/// Remembers a processed delivery.
pub(crate) async fn record_delivery<C: ConnectionTrait>(
    db: &C,
    delivery_id: &str,
    invoice_id: &str,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    let row = provider_delivery::Model {
        delivery_id: delivery_id.to_owned(),
        invoice_id: invoice_id.to_owned(),
        received_at: now,
    };
    match provider_delivery::ActiveModel::from(row).insert(db).await {
        Ok(_) => Ok(()),
        Err(err) if super::is_unique_violation(&err) => Ok(()),
        Err(err) => Err(err),
    }
}

/// Filters of the ledger.
#[derive(Debug, Default)]
pub(crate) struct LedgerQuery {
    pub kind: Option<LedgerKind>,
    /// Inclusive.
    pub created_after: Option<DateTime<Utc>>,
    /// Exclusive.
    pub created_before: Option<DateTime<Utc>>,
    /// Only rows with a smaller `seq` (the keyset).
    pub before_seq: Option<i64>,
    pub limit: u64,
}

/// A page of a partner's ledger, `seq` descending.
pub(crate) async fn ledger<C: ConnectionTrait>(
    db: &C,
    partner_id: &str,
    query: &LedgerQuery,
) -> Result<Vec<ledger_entry::Model>, DbErr> {
    let mut select =
        ledger_entry::Entity::find().filter(ledger_entry::Column::PartnerId.eq(partner_id));
    if let Some(kind) = &query.kind {
        select = select.filter(ledger_entry::Column::Kind.eq(*kind));
    }
    if let Some(after) = query.created_after {
        select = select.filter(ledger_entry::Column::CreatedAt.gte(after));
    }
    if let Some(before) = query.created_before {
        select = select.filter(ledger_entry::Column::CreatedAt.lt(before));
    }
    if let Some(seq) = query.before_seq {
        select = select.filter(ledger_entry::Column::Seq.lt(seq));
    }
    select
        .order_by_desc(ledger_entry::Column::Seq)
        .limit(query.limit)
        .all(db)
        .await
}
