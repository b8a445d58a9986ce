//! Accepting a batch of orders: the idempotency bindings it reads first, the
//! units it opens and the one transaction that persists it.

use super::*;

/// An order ready to be written.
#[derive(Debug, Clone)]
pub struct NewOrder {
    pub order: order::Model,
    /// Fingerprint of the request body its key is bound to.
    pub fingerprint: String,
}

/// A refusal that binds its key, ready to be written.
#[derive(Debug, Clone)]
pub struct RefusalRow {
    pub key: String,
    pub mode: Mode,
    /// Fingerprint of the request body its key is bound to.
    pub fingerprint: String,
    pub refusal: Refusal,
}

/// What the keys of a partner are bound to, for those of `keys` that are,
/// in one query. A refusal stored in a form nobody can read is an error:
/// answering anything else would break the key's promise.
pub async fn find_bindings<C: ConnectionTrait>(
    db: &C,
    partner_id: &str,
    keys: &[String],
) -> Result<Vec<(String, Binding)>, DbErr> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let rows = idempotency_key::Entity::find()
        .filter(idempotency_key::Column::PartnerId.eq(partner_id))
        .filter(bulk::column_in(
            db,
            idempotency_key::Column::Key,
            keys.iter().map(String::as_str),
        ))
        .all(db)
        .await?;
    rows.into_iter()
        .map(|row| {
            let bound = match (&row.order_id, &row.error_body) {
                (Some(order_id), _) => Bound::Order(order_id.clone()),
                (None, Some(stored)) => {
                    Bound::Refusal(Refusal::from_stored(stored).ok_or_else(|| {
                        DbErr::Custom(format!(
                            "the refusal bound to key {} is unreadable",
                            row.key
                        ))
                    })?)
                }
                (None, None) => {
                    return Err(DbErr::Custom(format!(
                        "key {} is bound to nothing",
                        row.key
                    )));
                }
            };
            let mode = row.mode;
            Ok((
                row.key,
                Binding {
                    mode,
                    fingerprint: row.fingerprint,
                    bound,
                },
            ))
        })
        .collect()
}

/// What an Idempotency-Key of a partner is bound to, as stored.
pub async fn find_key<C: ConnectionTrait>(
    db: &C,
    partner_id: &str,
    key: &str,
) -> Result<Option<idempotency_key::Model>, DbErr> {
    idempotency_key::Entity::find_by_id((partner_id.to_owned(), key.to_owned()))
        .one(db)
        .await
}

/// Why an acceptance did not commit.
#[derive(Debug)]
pub enum AcceptError {
    /// The conditional debit found less money than expected (another node moved it).
    Insufficient,
    /// The database refused (a unique key lost a race, or it is down).
    Db(DbErr),
}

impl From<DbErr> for AcceptError {
    fn from(err: DbErr) -> Self {
        AcceptError::Db(err)
    }
}

/// The units an order is accepted with: one per quantity, pending.
pub fn pending_units(order: &order::Model, now: DateTime<Utc>) -> Vec<order_unit::Model> {
    (1..=order.quantity)
        .map(|n| order_unit::Model {
            id: unit_id(&order.id, n),
            order_id: order.id.clone(),
            unit_index: n,
            status: UnitStatus::Pending,
            supplier_order_no: None,
            supplier_txn_id: None,
            attempts: 0,
            last_error: None,
            updated_at: now,
        })
        .collect()
}

/// The id of an order's `n`-th unit (also the supplier transaction id).
pub fn unit_id(order_id: &str, n: i32) -> String {
    format!("{order_id}_{n}")
}

/// Persists a planned batch of one partner in the caller's transaction:
/// one conditional debit per mode for the batch's total, then every order,
/// unit, key binding and (live) purchase row, then the refusal bindings.
/// Orders are in acceptance order; each purchase row gets its own `seq` and
/// `balance_after`. Returns the balances after: (live, sandbox).
pub async fn accept_batch<C: ConnectionTrait>(
    txn: &C,
    partner_id: &str,
    orders: &[NewOrder],
    refusals: &[RefusalRow],
    now: DateTime<Utc>,
) -> Result<(Option<i64>, Option<i64>), AcceptError> {
    let mut after = (None, None);
    let mut ledger_rows = Vec::new();
    for mode in [Mode::Live, Mode::Sandbox] {
        let mine: Vec<&NewOrder> = orders.iter().filter(|o| o.order.mode == mode).collect();
        if mine.is_empty() {
            continue;
        }
        let total: i64 = mine.iter().map(|o| o.order.total_cents).sum();
        let count = mine.len() as i64;
        let Some(row) = move_float(txn, partner_id, mode, -total, count, false, now).await? else {
            return Err(AcceptError::Insufficient);
        };
        match mode {
            Mode::Live => {
                let mut balance = row.balance_cents + total;
                for (seq, new) in (row.next_seq - count..).zip(&mine) {
                    balance -= new.order.total_cents;
                    ledger_rows.push(ledger_entry::Model {
                        id: LedgerEntryId::generate().into_string(),
                        partner_id: partner_id.to_owned(),
                        seq,
                        kind: LedgerKind::Purchase,
                        amount_cents: -new.order.total_cents,
                        balance_after_cents: balance,
                        description: format!("{} × {}", new.order.quantity, new.order.plan_id),
                        order_id: Some(new.order.id.clone()),
                        deposit_id: None,
                        movement_key: Some(format!("{}:purchase", new.order.id)),
                        created_at: now,
                    });
                }
                after.0 = Some(row.balance_cents);
            }
            Mode::Sandbox => after.1 = Some(row.balance_cents),
        }
    }
    let order_rows: Vec<order::Model> = orders.iter().map(|o| o.order.clone()).collect();
    let unit_rows: Vec<order_unit::Model> = orders
        .iter()
        .flat_map(|o| pending_units(&o.order, now))
        .collect();
    let mut key_rows: Vec<idempotency_key::Model> = orders
        .iter()
        .map(|o| idempotency_key::Model {
            partner_id: o.order.partner_id.clone(),
            key: o.order.idempotency_key.clone(),
            mode: o.order.mode,
            fingerprint: o.fingerprint.clone(),
            order_id: Some(o.order.id.clone()),
            error_status: None,
            error_body: None,
            created_at: now,
        })
        .collect();
    key_rows.extend(refusals.iter().map(|r| idempotency_key::Model {
        partner_id: partner_id.to_owned(),
        key: r.key.clone(),
        mode: r.mode,
        fingerprint: r.fingerprint.clone(),
        order_id: None,
        error_status: None,
        error_body: Some(r.refusal.to_stored()),
        created_at: now,
    }));
    bulk::insert_models::<order::Entity, _>(txn, &order_rows).await?;
    bulk::insert_models::<order_unit::Entity, _>(txn, &unit_rows).await?;
    bulk::insert_models::<idempotency_key::Entity, _>(txn, &key_rows).await?;
    bulk::insert_models::<ledger_entry::Entity, _>(txn, &ledger_rows).await?;
    Ok(after)
}
