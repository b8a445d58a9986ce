//! Accepting a batch of orders: the idempotency bindings it reads first, the
//! units it opens and the one transaction that persists it.

use super::*;
use crate::store::inline_write::{self, InlineFailed};
use sea_orm::{DbBackend, Statement};

/// An order ready to be written.
#[derive(Debug, Clone)]
pub struct NewOrder {
    /// The order row, priced and with its id.
    pub order: order::Model,
    /// Fingerprint of the request body its key is bound to.
    pub fingerprint: String,
}

/// A refusal that binds its key, ready to be written.
#[derive(Debug, Clone)]
pub struct RefusalRow {
    /// The Idempotency-Key the refusal binds.
    pub key: String,
    /// The mode of the key that sent the request.
    pub mode: Mode,
    /// Fingerprint of the request body its key is bound to.
    pub fingerprint: String,
    /// What the request was refused for, replayed to every retry.
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
        .map(|row| Ok((row.key.clone(), binding_of(row)?)))
        .collect()
}

/// [`find_bindings`] for the keys of many partners at once, in one query
/// whose text does not depend on how many: (partner, key, binding) for each
/// pair that is bound.
pub async fn find_bindings_of_many<C: ConnectionTrait>(
    db: &C,
    wanted: &[(String, String)],
) -> Result<Vec<(String, String, Binding)>, DbErr> {
    if wanted.is_empty() {
        return Ok(Vec::new());
    }
    let pairs: Vec<serde_json::Value> = wanted
        .iter()
        .map(|(partner, key)| serde_json::json!({"p": partner, "k": key}))
        .collect();
    let pairs = serde_json::Value::from(pairs).to_string();
    let rows = match db.get_database_backend() {
        // One probe of the primary key per pair, whatever the statistics
        // say: a join against the pairs (or `IN` over them) is planned
        // against a set guessed at 100 rows, and while the table's
        // statistics still call it small (a new database, or between two
        // analyses) PostgreSQL reads the whole table for it, every batch.
        // `OFFSET 0` keeps the lateral subquery from being flattened into
        // such a join.
        sea_orm::DbBackend::Postgres => {
            idempotency_key::Entity::find()
                .from_raw_sql(Statement::from_sql_and_values(
                    sea_orm::DbBackend::Postgres,
                    "SELECT i.* FROM (SELECT DISTINCT p, k FROM jsonb_to_recordset($1::jsonb) AS r(p text, k text)) AS r \
                     CROSS JOIN LATERAL (SELECT * FROM \"idempotency_keys\" \
                     WHERE \"partner_id\" = r.p AND \"key\" = r.k OFFSET 0) AS i",
                    [pairs.into()],
                ))
                .all(db)
                .await?
        }
        _ => {
            let filter = sea_orm::sea_query::SimpleExpr::cust_with_values(
                "(\"partner_id\", \"key\") IN (SELECT value ->> 'p', value ->> 'k' FROM jsonb_each(?))",
                [pairs],
            );
            idempotency_key::Entity::find()
                .filter(filter)
                .all(db)
                .await?
        }
    };
    rows.into_iter()
        .map(|row| Ok((row.partner_id.clone(), row.key.clone(), binding_of(row)?)))
        .collect()
}

/// What a stored key binding says.
fn binding_of(row: idempotency_key::Model) -> Result<Binding, DbErr> {
    let bound = match (&row.order_id, &row.error_body) {
        (Some(order_id), _) => Bound::Order(order_id.clone()),
        (None, Some(stored)) => Bound::Refusal(Refusal::from_stored(stored).ok_or_else(|| {
            DbErr::Custom(format!(
                "the refusal bound to key {} is unreadable",
                row.key
            ))
        })?),
        (None, None) => {
            return Err(DbErr::Custom(format!(
                "key {} is bound to nothing",
                row.key
            )));
        }
    };
    Ok(Binding {
        mode: row.mode,
        fingerprint: row.fingerprint,
        bound,
    })
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

/// One partner's decided batch, as the shared writer hands it over.
#[derive(Debug, Clone)]
pub struct PartnerBatch {
    /// The partner whose floats the batch debits.
    pub partner_id: String,
    /// Orders to debit and write, in acceptance order.
    pub orders: Vec<NewOrder>,
    /// Refusals that bind their keys.
    pub refusals: Vec<RefusalRow>,
}

impl PartnerBatch {
    /// Orders and bound refusals the batch writes.
    pub fn written(&self) -> usize {
        self.orders.len() + self.refusals.len()
    }
}

/// Balances after a batch: (live, sandbox), `None` for a mode it did not touch.
pub type Balances = (Option<i64>, Option<i64>);

/// Why a shared commit of many batches did not go through.
#[derive(Debug)]
pub enum SharedError {
    /// The conditional debit found too little money for these batches (by
    /// index): nothing of the others is written either; roll back and commit
    /// them again without these.
    Fired(BTreeSet<usize>),
    /// The database refused (a unique key lost a race, or it is down).
    Db(DbErr),
}

impl From<DbErr> for SharedError {
    fn from(err: DbErr) -> Self {
        SharedError::Db(err)
    }
}

/// Persists a planned batch of one partner in the caller's transaction
/// (see [`accept_batches`]). Returns the balances after: (live, sandbox).
pub async fn accept_batch<C: ConnectionTrait>(
    txn: &C,
    batch: &PartnerBatch,
    now: DateTime<Utc>,
) -> Result<Balances, AcceptError> {
    match accept_batches(txn, &[batch], now).await {
        Ok(mut balances) => Ok(balances.pop().unwrap_or((None, None))),
        Err(SharedError::Fired(_)) => Err(AcceptError::Insufficient),
        Err(SharedError::Db(err)) => Err(AcceptError::Db(err)),
    }
}

/// Persists the planned batches of many partners (each partner at most once)
/// in the caller's transaction with the same statements whatever their
/// number: one conditional debit over every float they spend from (each
/// float debited by its batch's total for that mode), then one insert each of
/// orders, units, key bindings and (live) purchase rows. Orders are in
/// acceptance order; each purchase row gets its own `seq` and
/// `balance_after`. Returns each batch's balances after, in order.
pub async fn accept_batches<C: ConnectionTrait>(
    txn: &C,
    batches: &[&PartnerBatch],
    now: DateTime<Utc>,
) -> Result<Vec<Balances>, SharedError> {
    let backend = txn.get_database_backend();
    let debits = debits_of(batches);
    let mut floats = Vec::with_capacity(debits.len());
    if let Some(debit) = debit_statement(backend, &debits, now) {
        for row in txn.query_all_raw(debit).await? {
            floats.push((
                row.try_get("", "partner_id")?,
                row.try_get("", "mode")?,
                row.try_get("", "balance_cents")?,
                row.try_get("", "next_seq")?,
            ));
        }
    }
    let after = writes_after_debit(backend, batches, &debits, moved_floats(floats)?, now)?;
    for insert in after.inserts {
        txn.execute_raw(insert).await?;
    }
    Ok(after.balances)
}

/// [`accept_batches`] on the inline writer's connection (SQLite), in the
/// transaction it holds: the same statements, none handed to another thread.
/// A fired debit guard is `Refused` with the batches it fired for.
pub(crate) fn accept_batches_inline(
    connection: &rusqlite::Connection,
    batches: &[&PartnerBatch],
    now: DateTime<Utc>,
) -> Result<Vec<Balances>, InlineFailed<BTreeSet<usize>>> {
    let backend = DbBackend::Sqlite;
    let debits = debits_of(batches);
    let floats = match debit_statement(backend, &debits, now) {
        Some(debit) => inline_write::query(connection, &debit, |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
        })?,
        None => Vec::new(),
    };
    let moved = moved_floats(floats).map_err(InlineFailed::Unavailable)?;
    let after = match writes_after_debit(backend, batches, &debits, moved, now) {
        Ok(after) => after,
        Err(SharedError::Fired(fired)) => return Err(InlineFailed::Refused(fired)),
        Err(SharedError::Db(err)) => return Err(InlineFailed::Unavailable(err)),
    };
    for insert in &after.inserts {
        inline_write::execute(connection, insert)?;
    }
    Ok(after.balances)
}

/// What a shared commit writes once its floats are debited.
struct AfterDebit {
    /// Each batch's balances after, in order.
    balances: Vec<Balances>,
    /// The inserts of orders, units, key bindings and purchase rows.
    inserts: Vec<Statement>,
}

/// The batches' balances and inserts given the floats the debit moved, or
/// the batches whose float it did not move (their guard fired).
fn writes_after_debit(
    backend: DbBackend,
    batches: &[&PartnerBatch],
    debits: &[Debit],
    moved: Moved,
    now: DateTime<Utc>,
) -> Result<AfterDebit, SharedError> {
    let fired: BTreeSet<usize> = debits
        .iter()
        .filter(|d| !moved.contains_key(&(d.partner_id.clone(), d.mode)))
        .map(|d| d.batch)
        .collect();
    if !fired.is_empty() {
        return Err(SharedError::Fired(fired));
    }
    let mut balances = Vec::with_capacity(batches.len());
    let mut ledger_rows = Vec::new();
    for batch in batches {
        let live = moved.get(&(batch.partner_id.clone(), Mode::Live));
        let sandbox = moved.get(&(batch.partner_id.clone(), Mode::Sandbox));
        if let Some(&(balance, next_seq)) = live {
            ledger_rows.extend(purchase_rows(batch, balance, next_seq, now));
        }
        balances.push((live.map(|m| m.0), sandbox.map(|m| m.0)));
    }
    let order_rows: Vec<order::Model> = batches
        .iter()
        .flat_map(|b| b.orders.iter().map(|o| o.order.clone()))
        .collect();
    let unit_rows: Vec<order_unit::Model> = order_rows
        .iter()
        .flat_map(|o| pending_units(o, now))
        .collect();
    let key_rows = key_rows_in_lock_order(batches, now);
    let inserts = [
        bulk::insert_statement::<order::Entity>(backend, &order_rows)?,
        bulk::insert_statement::<order_unit::Entity>(backend, &unit_rows)?,
        bulk::insert_statement::<idempotency_key::Entity>(backend, &key_rows)?,
        bulk::insert_statement::<ledger_entry::Entity>(backend, &ledger_rows)?,
    ];
    Ok(AfterDebit {
        balances,
        inserts: inserts.into_iter().flatten().collect(),
    })
}

/// One float a shared commit debits: a batch's total in one mode.
struct Debit {
    /// Index of the batch in the shared commit.
    batch: usize,
    partner_id: String,
    mode: Mode,
    total: i64,
    /// Orders debited (ledger `seq`s taken on the live float).
    count: i64,
}

fn debits_of(batches: &[&PartnerBatch]) -> Vec<Debit> {
    let mut debits = Vec::new();
    for (index, batch) in batches.iter().enumerate() {
        for mode in [Mode::Live, Mode::Sandbox] {
            let mine = batch.orders.iter().filter(|o| o.order.mode == mode);
            let (total, count) = mine.fold((0, 0), |(t, n), o| (t + o.order.total_cents, n + 1));
            if count > 0 {
                debits.push(Debit {
                    batch: index,
                    partner_id: batch.partner_id.clone(),
                    mode,
                    total,
                    count,
                });
            }
        }
    }
    debits
}

/// The live purchase rows of a batch, given the float after its debit.
fn purchase_rows(
    batch: &PartnerBatch,
    balance_after: i64,
    next_seq: i64,
    now: DateTime<Utc>,
) -> Vec<ledger_entry::Model> {
    let live: Vec<&NewOrder> = batch
        .orders
        .iter()
        .filter(|o| o.order.mode == Mode::Live)
        .collect();
    let total: i64 = live.iter().map(|o| o.order.total_cents).sum();
    let mut balance = balance_after + total;
    let first_seq = next_seq - live.len() as i64;
    (first_seq..)
        .zip(live)
        .map(|(seq, new)| {
            balance -= new.order.total_cents;
            ledger_entry::Model {
                id: LedgerEntryId::generate().into_string(),
                partner_id: batch.partner_id.clone(),
                seq,
                kind: LedgerKind::Purchase,
                amount_cents: -new.order.total_cents,
                balance_after_cents: balance,
                description: format!("{} × {}", new.order.quantity, new.order.plan_id),
                order_id: Some(new.order.id.clone()),
                deposit_id: None,
                movement_key: Some(format!("{}:purchase", new.order.id)),
                created_at: now,
            }
        })
        .collect()
}

/// The key bindings of a batch: its orders', then its binding refusals'.
/// Takes the row locks of these partners' floats (both modes) in one
/// statement, in primary-key order, before the caller binds any key. A
/// transaction that goes on to commit batch after batch, each in its own
/// savepoint ([`accept_batch`]), then takes its locks as a shared commit
/// does: floats first, then keys in (partner, key) order when its batches
/// come in partner order. Otherwise it could hold one batch's keys while
/// waiting for the next batch's float, held by another node's commit that
/// waits for one of those keys. SQLite has one writer and no row locks:
/// there the statement only reads.
pub async fn lock_floats<C: ConnectionTrait>(txn: &C, partner_ids: &[&str]) -> Result<(), DbErr> {
    if partner_ids.is_empty() {
        return Ok(());
    }
    float::Entity::find()
        .select_only()
        .column(float::Column::PartnerId)
        .filter(bulk::column_in(
            txn,
            float::Column::PartnerId,
            partner_ids.iter().copied(),
        ))
        .order_by_asc(float::Column::PartnerId)
        .order_by_asc(float::Column::Mode)
        .lock_exclusive()
        .into_tuple::<String>()
        .all(txn)
        .await?;
    Ok(())
}

/// Every batch's key bindings sorted by (partner, key), the order their
/// unique index locks them in. Two nodes' transactions that bind some of the
/// same Idempotency-Keys (a key sent to both at once) then take them in the
/// same order, so one waits for the other; in any other order each could
/// hold a key the other waits for, and PostgreSQL's deadlock detector would
/// fail one of them with a 500. (The floats are debited in key order for the
/// same reason.)
fn key_rows_in_lock_order(
    batches: &[&PartnerBatch],
    now: DateTime<Utc>,
) -> Vec<idempotency_key::Model> {
    let mut rows: Vec<idempotency_key::Model> =
        batches.iter().flat_map(|b| key_rows(b, now)).collect();
    rows.sort_by(|a, b| (&a.partner_id, &a.key).cmp(&(&b.partner_id, &b.key)));
    rows
}

fn key_rows(batch: &PartnerBatch, now: DateTime<Utc>) -> Vec<idempotency_key::Model> {
    let orders = batch.orders.iter().map(|o| idempotency_key::Model {
        partner_id: o.order.partner_id.clone(),
        key: o.order.idempotency_key.clone(),
        mode: o.order.mode,
        fingerprint: o.fingerprint.clone(),
        order_id: Some(o.order.id.clone()),
        error_status: None,
        error_body: None,
        created_at: now,
    });
    let refusals = batch.refusals.iter().map(|r| idempotency_key::Model {
        partner_id: batch.partner_id.clone(),
        key: r.key.clone(),
        mode: r.mode,
        fingerprint: r.fingerprint.clone(),
        order_id: None,
        error_status: None,
        error_body: Some(r.refusal.to_stored()),
        created_at: now,
    });
    orders.chain(refusals).collect()
}

/// The statement that debits every float of `debits` at once, guarded, and
/// returns the floats it moved: (partner, mode, balance after, next seq
/// after). A float missing from its answer would have gone below zero and
/// was not touched. `None` when nothing is debited.
fn debit_statement(backend: DbBackend, debits: &[Debit], now: DateTime<Utc>) -> Option<Statement> {
    if debits.is_empty() {
        return None;
    }
    // In key order, so that two nodes' shared commits lock the floats they
    // both touch in the same order rather than each waiting on the other.
    let mut ordered: Vec<&Debit> = debits.iter().collect();
    ordered.sort_by(|a, b| (&a.partner_id, a.mode.as_str()).cmp(&(&b.partner_id, b.mode.as_str())));
    let rows: Vec<serde_json::Value> = ordered
        .iter()
        .map(|d| serde_json::json!({"p": d.partner_id, "m": d.mode.as_str(), "t": d.total, "n": d.count}))
        .collect();
    let source = match backend {
        sea_orm::DbBackend::Postgres => {
            "jsonb_to_recordset($2::jsonb) AS d(p text, m text, t bigint, n bigint)"
        }
        _ => {
            "(SELECT value ->> 'p' AS p, value ->> 'm' AS m, value ->> 't' AS t, \
             value ->> 'n' AS n FROM jsonb_each($2)) AS d"
        }
    };
    let sql = format!(
        "UPDATE \"floats\" SET \"balance_cents\" = \"floats\".\"balance_cents\" - d.t, \
         \"next_seq\" = \"floats\".\"next_seq\" + CASE WHEN \"floats\".\"mode\" = 'live' THEN d.n ELSE 0 END, \
         \"updated_at\" = $1 FROM {source} \
         WHERE \"floats\".\"partner_id\" = d.p AND \"floats\".\"mode\" = d.m \
         AND \"floats\".\"balance_cents\" >= d.t \
         RETURNING \"floats\".\"partner_id\", \"floats\".\"mode\", \"floats\".\"balance_cents\", \"floats\".\"next_seq\""
    );
    let values = vec![now.into(), serde_json::Value::from(rows).to_string().into()];
    Some(bulk::portable_for(backend, &sql, values))
}

/// The floats a debit moved: (partner, mode) -> (balance after, next seq after).
type Moved = HashMap<(String, Mode), (i64, i64)>;

/// The debit's answer by float.
fn moved_floats(rows: Vec<(String, String, i64, i64)>) -> Result<Moved, DbErr> {
    rows.into_iter()
        .map(|(partner_id, mode, balance, next_seq)| {
            let mode = Mode::parse(&mode)
                .ok_or_else(|| DbErr::Custom(format!("a float of unknown mode {mode}")))?;
            Ok(((partner_id, mode), (balance, next_seq)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusals(partner_id: &str, keys: &[&str]) -> PartnerBatch {
        PartnerBatch {
            partner_id: partner_id.into(),
            orders: Vec::new(),
            refusals: keys
                .iter()
                .map(|key| RefusalRow {
                    key: (*key).into(),
                    mode: Mode::Live,
                    fingerprint: "f".into(),
                    refusal: Refusal::PlanNotFound,
                })
                .collect(),
        }
    }

    #[test]
    fn key_bindings_are_written_in_the_order_their_index_locks_them() {
        let (b, a) = (
            refusals("pt_b", &["k2", "k1"]),
            refusals("pt_a", &["z", "k3"]),
        );
        let rows = key_rows_in_lock_order(&[&b, &a], Utc::now());
        let order: Vec<(&str, &str)> = rows
            .iter()
            .map(|r| (r.partner_id.as_str(), r.key.as_str()))
            .collect();
        assert_eq!(
            order,
            [
                ("pt_a", "k3"),
                ("pt_a", "z"),
                ("pt_b", "k1"),
                ("pt_b", "k2")
            ],
            "whatever the batches' order and each batch's own"
        );
    }
}
