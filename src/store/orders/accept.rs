//! Accepting a batch of orders: the one transaction that persists it (its
//! key bindings are in [`super::bindings`]). An order's units are not
//! written with it: a unit's row is written when a supplier order takes it
//! (or it is refunded), and until then the order's quantity says it is
//! pending ([`pending_units`]).

use super::*;
use crate::store::inline_write::{self, InlineFailed};
use sea_orm::{DbBackend, Statement};
use std::sync::Arc;

use super::bindings::{KEY_COLUMNS, KeyBindings, key_bindings};

/// An order ready to be written.
#[derive(Debug, Clone)]
pub struct NewOrder {
    /// The order row, priced and with its id (shared with the request it
    /// answers and the pass that provisions it).
    pub order: Arc<order::Model>,
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

/// Why an acceptance did not commit.
#[derive(Debug)]
pub enum AcceptError {
    /// The conditional debit found less money than expected (another node moved it).
    Insufficient,
    /// A key of the batch is bound already: by an earlier request the
    /// account no longer holds in memory, or by another node. Nothing was
    /// written; read the keys' bindings and decide again.
    KeyTaken,
    /// The database refused (a unique key lost a race, or it is down).
    Db(DbErr),
}

impl From<DbErr> for AcceptError {
    fn from(err: DbErr) -> Self {
        AcceptError::Db(err)
    }
}

/// The units an order is accepted with: one per quantity, pending (the
/// rows a supplier order writes down when it takes them).
pub fn pending_units(order: &order::Model, now: DateTime<Utc>) -> Vec<order_unit::Model> {
    (1..=order.quantity)
        .map(|n| unit_row(&order.id, n, UnitStatus::Pending, None, now))
        .collect()
}

/// The row of unit `n` of an order, in `status`, carried by
/// `supplier_txn_id` if given, with no attempt counted.
pub(crate) fn unit_row(
    order_id: &str,
    n: i32,
    status: UnitStatus,
    supplier_txn_id: Option<&str>,
    now: DateTime<Utc>,
) -> order_unit::Model {
    order_unit::Model {
        id: unit_id(order_id, n),
        order_id: order_id.to_owned(),
        unit_index: n,
        status,
        supplier_order_no: None,
        supplier_txn_id: supplier_txn_id.map(str::to_owned),
        attempts: 0,
        last_error: None,
        updated_at: now,
    }
}

/// The id of an order's `n`-th unit (also the supplier transaction id).
pub fn unit_id(order_id: &str, n: i32) -> String {
    [order_id, UNITS_FROM, itoa::Buffer::new().format(n)].concat()
}

/// The ids of an order's units and no other row's, as a range `[low,
/// high)` in byte order: the order's id and `_`, then the index's digits,
/// which sort below `:`. No other order's units fall in it, since an
/// order's id has no `_` past its kind's prefix (its random part is base
/// 62). The units' and the eSIMs' tables find an order's rows through this
/// range of their unit id's own unique index, so that neither keeps an
/// index by order (one entry less to write for every unit and profile);
/// PostgreSQL compares those columns under the `C` collation, byte by byte,
/// as SQLite's default does.
pub fn unit_id_range(order_id: &str) -> (String, String) {
    (
        [order_id, UNITS_FROM].concat(),
        [order_id, UNITS_UNTIL].concat(),
    )
}

/// What an order's id is followed by at the start of [`unit_id_range`].
const UNITS_FROM: &str = "_";
/// What an order's id is followed by at the end of [`unit_id_range`].
const UNITS_UNTIL: &str = "_:";

/// SQL joining each order id of a JSON list, `l.order_id` (the statement's
/// first parameter), to the rows of `table` (as `alias`) whose `column`
/// holds a unit id of that order ([`unit_id_range`]): one probe of the
/// column's index per order.
pub(crate) fn orders_joined_by_unit_range(
    backend: DbBackend,
    table: &str,
    alias: &str,
    column: &str,
) -> String {
    let list = match backend {
        DbBackend::Postgres => "(SELECT DISTINCT jsonb_array_elements_text($1::jsonb) AS order_id)",
        _ => "(SELECT DISTINCT value AS order_id FROM json_each(?1))",
    };
    let in_range = in_unit_id_range(&format!("{alias}.\"{column}\""), "l.order_id");
    format!("{list} AS l JOIN \"{table}\" {alias} ON {in_range}")
}

/// SQL holding that the unit id in `column` falls in the [`unit_id_range`]
/// of the order id `order_id` (both SQL expressions).
pub(crate) fn in_unit_id_range(column: &str, order_id: &str) -> String {
    format!("{column} >= {order_id} || '{UNITS_FROM}' AND {column} < {order_id} || '{UNITS_UNTIL}'")
}

/// The order and the index a unit's id names ([`unit_id`] read back; only
/// the form it writes, so the id made again from them is this one).
pub fn unit_of_id(unit_id: &str) -> Option<(&str, i32)> {
    let (order_id, n) = unit_id.rsplit_once('_')?;
    let canonical = n.bytes().all(|b| b.is_ascii_digit()) && !n.starts_with('0');
    Some((order_id, n.parse().ok().filter(|_| canonical)?))
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
    /// A guard turned some batches back: nothing of the others is written
    /// either; roll back and commit them again without these.
    Turned(Turned),
    /// The database refused (a unique key lost a race, or it is down).
    Db(DbErr),
}

/// The batches (by index) a shared commit's guards turned back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Turned {
    /// The conditional debit found too little money for these batches.
    Fired(BTreeSet<usize>),
    /// A key of each of these batches is bound already.
    Taken(BTreeSet<usize>),
}

impl Turned {
    /// The batches turned back.
    pub fn batches(&self) -> &BTreeSet<usize> {
        match self {
            Turned::Fired(batches) | Turned::Taken(batches) => batches,
        }
    }

    /// What each batch turned back is answered.
    pub fn error(&self) -> AcceptError {
        match self {
            Turned::Fired(_) => AcceptError::Insufficient,
            Turned::Taken(_) => AcceptError::KeyTaken,
        }
    }
}

/// On the inline writer a guard's turning back is the work refusing; the
/// database's refusal sends the commit to the pool.
impl From<SharedError> for InlineFailed<Turned> {
    fn from(err: SharedError) -> Self {
        match err {
            SharedError::Turned(turned) => InlineFailed::Refused(turned),
            SharedError::Db(err) => InlineFailed::Unavailable(err),
        }
    }
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
        Err(SharedError::Turned(turned)) => Err(turned.error()),
        Err(SharedError::Db(err)) => Err(AcceptError::Db(err)),
    }
}

/// Persists the planned batches of many partners (each partner at most once)
/// in the caller's transaction with the same statements whatever their
/// number: one conditional debit over every float they spend from (each
/// float debited by its batch's total for that mode), then one insert each of
/// key bindings, orders and (live) purchase rows. Orders are in
/// acceptance order; each purchase row gets its own `seq` and
/// `balance_after`. Returns each batch's balances after, in order.
///
/// A key bound already (an account's memory holds only its recent keys, so
/// it decides its other keys as new without reading them first) is not an
/// error of the statement: the bindings' insert skips it and answers the
/// keys it bound, and the batches whose key it skipped are turned back
/// ([`Turned::Taken`]) before anything else is written.
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
            floats.push(moved_row(&row)?);
        }
    }
    let after = writes_after_debit(batches, &debits, moved_floats(floats)?, now)?;
    if let Some(bind) = after.keys.insert(backend)? {
        let mut bound = Vec::new();
        for row in txn.query_all_raw(bind).await? {
            bound.push(row.try_get("", "partner_id")?);
        }
        after.keys.all_bound(bound)?;
    }
    for insert in after.rows.statements(backend)? {
        txn.execute_raw(insert).await?;
    }
    Ok(after.balances)
}

/// [`accept_batches`] on the inline writer's connection (SQLite), in the
/// transaction it holds: the same statements, none handed to another thread.
/// A guard that turns batches back is `Refused` with them.
pub(crate) fn accept_batches_inline(
    connection: &rusqlite::Connection,
    batches: &[&PartnerBatch],
    now: DateTime<Utc>,
) -> Result<Vec<Balances>, InlineFailed<Turned>> {
    let debits = debits_of(batches);
    let floats = debit_inline(connection, &debits, now)?;
    let moved = moved_floats(floats).map_err(InlineFailed::Unavailable)?;
    let after = writes_after_debit(batches, &debits, moved, now)?;
    let keys = after.keys.rows();
    let inserted =
        inline_write::insert_rows::<idempotency_key::Entity, _>(connection, keys, &KEY_COLUMNS)?;
    let bound = keys
        .iter()
        .zip(inserted)
        .filter(|(_, inserted)| *inserted)
        .map(|(row, _)| row.partner_id.clone())
        .collect();
    after.keys.all_bound(bound)?;
    let rows = &after.rows;
    inline_write::insert_rows::<order::Entity, _>(connection, &rows.orders, &[])?;
    inline_write::insert_rows::<ledger_entry::Entity, _>(connection, &rows.ledger, &[])?;
    Ok(after.balances)
}

/// What a shared commit writes once its floats are debited.
struct AfterDebit {
    /// Each batch's balances after, in order.
    balances: Vec<Balances>,
    /// The key bindings, written first.
    keys: KeyBindings,
    /// The orders and the purchase rows, written next.
    rows: NewRows,
}

/// The rows a shared commit inserts after its key bindings.
struct NewRows {
    /// The orders, in acceptance order.
    orders: Vec<Arc<order::Model>>,
    /// The purchase rows of the live orders.
    ledger: Vec<ledger_entry::Model>,
}

impl NewRows {
    /// One insert per table, whatever the rows (the pool's form).
    fn statements(&self, backend: DbBackend) -> Result<Vec<Statement>, DbErr> {
        let inserts = [
            bulk::insert_statement::<order::Entity>(backend, &self.orders)?,
            bulk::insert_statement::<ledger_entry::Entity>(backend, &self.ledger)?,
        ];
        Ok(inserts.into_iter().flatten().collect())
    }
}

/// The batches' balances and rows given the floats the debit moved, or the
/// batches whose float it did not move (their guard fired).
fn writes_after_debit(
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
        return Err(SharedError::Turned(Turned::Fired(fired)));
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
    let order_rows: Vec<Arc<order::Model>> = batches
        .iter()
        .flat_map(|b| b.orders.iter().map(|o| Arc::clone(&o.order)))
        .collect();
    Ok(AfterDebit {
        balances,
        keys: key_bindings(batches, now),
        rows: NewRows {
            orders: order_rows,
            ledger: ledger_rows,
        },
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
                description: purchase_description(new.order.quantity, &new.order.plan_id),
                order_id: Some(new.order.id.clone()),
                deposit_id: None,
                movement_key: Some([new.order.id.as_str(), ":purchase"].concat()),
                created_at: now,
            }
        })
        .collect()
}

/// A purchase's ledger description, `<quantity> × <plan>` (written without
/// `format!`: one for every live order).
fn purchase_description(quantity: i32, plan_id: &str) -> String {
    [itoa::Buffer::new().format(quantity), " × ", plan_id].concat()
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

/// The statement that debits every float of `debits` at once, guarded, and
/// returns the floats it moved: (partner, mode, balance after, next seq
/// after). A float missing from its answer would have gone below zero and
/// was not touched. `None` when nothing is debited.
fn debit_statement(backend: DbBackend, debits: &[Debit], now: DateTime<Utc>) -> Option<Statement> {
    if debits.is_empty() {
        return None;
    }
    let ordered = in_key_order(debits);
    let rows: Vec<serde_json::Value> = ordered
        .iter()
        .map(|d| serde_json::json!({"p": d.partner_id, "m": d.mode.as_str(), "t": d.total, "n": d.count}))
        .collect();
    let (source, same_float) = match backend {
        // With the rows' number bounded in the text (rounded up to a power
        // of two, so that a handful of texts covers every batch): PostgreSQL
        // guesses a record set at 100 rows, against which reading every
        // float into a hash looks cheaper than probing. Even told the size,
        // by its costs a few thousand floats are cheaper to read than thirty
        // probes, and they are not: three times the probes' time with 1,000
        // partners (benchmarks.md, sixty-fourth run). So a float is matched
        // by its key bounded on both sides, which under a database's
        // collation (deterministic, as its own always is) is the key equal
        // byte for byte, and a bound is no equality to hash or merge on: the
        // planner is left with nested loops, of which probing is cheapest,
        // in the floats' key order. The bound never cuts a row.
        sea_orm::DbBackend::Postgres => (
            format!(
                "(SELECT * FROM jsonb_to_recordset($2::jsonb) AS r(p text, m text, t bigint, n bigint) \
                 LIMIT {}) AS d",
                ordered.len().next_power_of_two()
            ),
            "\"floats\".\"partner_id\" >= d.p AND \"floats\".\"partner_id\" <= d.p \
             AND \"floats\".\"mode\" >= d.m AND \"floats\".\"mode\" <= d.m",
        ),
        _ => (
            String::from(
                "(SELECT value ->> 'p' AS p, value ->> 'm' AS m, value ->> 't' AS t, \
                 value ->> 'n' AS n FROM jsonb_each($2)) AS d",
            ),
            "\"floats\".\"partner_id\" = d.p AND \"floats\".\"mode\" = d.m",
        ),
    };
    let sql = format!(
        "UPDATE \"floats\" SET \"balance_cents\" = \"floats\".\"balance_cents\" - d.t, \
         \"next_seq\" = \"floats\".\"next_seq\" + CASE WHEN \"floats\".\"mode\" = 'live' THEN d.n ELSE 0 END, \
         \"updated_at\" = $1 FROM {source} \
         WHERE {same_float} AND \"floats\".\"balance_cents\" >= d.t \
         RETURNING \"floats\".\"partner_id\", \"floats\".\"mode\", \"floats\".\"balance_cents\", \"floats\".\"next_seq\""
    );
    let values = vec![now.into(), serde_json::Value::from(rows).to_string().into()];
    Some(bulk::portable_for(backend, &sql, values))
}

/// The debits in their floats' key order, so that two nodes' shared
/// commits lock the floats they both touch in the same order rather than
/// each waiting on the other.
fn in_key_order(debits: &[Debit]) -> Vec<&Debit> {
    let mut ordered: Vec<&Debit> = debits.iter().collect();
    ordered.sort_by(|a, b| (&a.partner_id, a.mode.as_str()).cmp(&(&b.partner_id, b.mode.as_str())));
    ordered
}

/// One float's debit, guarded, as [`debit_statement`] debits each of its
/// floats: (total, orders, time, partner, mode).
const DEBIT_ONE_FLOAT: &str = "UPDATE \"floats\" SET \"balance_cents\" = \"balance_cents\" - ?1, \
     \"next_seq\" = \"next_seq\" + CASE WHEN \"mode\" = 'live' THEN ?2 ELSE 0 END, \
     \"updated_at\" = ?3 \
     WHERE \"partner_id\" = ?4 AND \"mode\" = ?5 AND \"balance_cents\" >= ?1 \
     RETURNING \"partner_id\", \"mode\", \"balance_cents\", \"next_seq\"";

/// [`debit_statement`]'s debit on the inline writer's connection (SQLite):
/// one cached statement, prepared and its time written once, run per float
/// in key order with its values bound, where the shared statement has
/// SQLite read four fields a float out of JSON (with many partners, a float
/// or more an order). The same answer: the floats moved, a float whose
/// guard fired missing from it.
fn debit_inline(
    connection: &rusqlite::Connection,
    debits: &[Debit],
    now: DateTime<Utc>,
) -> Result<Vec<MovedRow>, InlineFailed<Turned>> {
    let mut debit = connection
        .prepare_cached(DEBIT_ONE_FLOAT)
        .map_err(inline_write::unavailable)?;
    let at = bulk::timestamp(&now);
    let mut moved = Vec::with_capacity(debits.len());
    for one in in_key_order(debits) {
        let values = rusqlite::params![one.total, one.count, at, one.partner_id, one.mode.as_str()];
        let rows = debit
            .query_map(values, |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
            })
            .map_err(inline_write::unavailable)?;
        for row in rows {
            moved.push(row.map_err(inline_write::unavailable)?);
        }
    }
    Ok(moved)
}

/// One row of the debit's answer: (partner, mode, balance after, next seq after).
type MovedRow = (String, String, i64, i64);

/// A [`MovedRow`] as the pool reads it.
fn moved_row(row: &sea_orm::QueryResult) -> Result<MovedRow, DbErr> {
    Ok((
        row.try_get("", "partner_id")?,
        row.try_get("", "mode")?,
        row.try_get("", "balance_cents")?,
        row.try_get("", "next_seq")?,
    ))
}

/// The floats a debit moved: (partner, mode) -> (balance after, next seq after).
type Moved = HashMap<(String, Mode), (i64, i64)>;

/// The debit's answer by float.
fn moved_floats(rows: Vec<MovedRow>) -> Result<Moved, DbErr> {
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

    /// A unit's id names its order and index, read back as made, and
    /// nothing else reads as one.
    #[test]
    fn a_unit_id_reads_back_as_its_order_and_index() {
        let id = unit_id("ord_7Kq2x", 12);
        assert_eq!(unit_of_id(&id), Some(("ord_7Kq2x", 12)));
        for not_a_unit in [
            "ord_7Kq2x",
            "ord_7Kq2x_",
            "ord_7Kq2x_0",
            "ord_7Kq2x_-1",
            "ord_7Kq2x_01",
            "ord_7Kq2x_+1",
            "7",
        ] {
            assert_eq!(unit_of_id(not_a_unit), None, "{not_a_unit}");
        }
    }

    proptest::proptest! {
        /// The ids and ledger texts written without `format!` are the ones
        /// it wrote (stored rows and other nodes' ids stay comparable).
        #[test]
        fn unit_ids_and_purchase_texts_are_as_formatted(n in proptest::prelude::any::<i32>(), order in "ord_[0-9A-Za-z]{1,22}", plan in "[a-z0-9-]{1,40}") {
            proptest::prop_assert_eq!(unit_id(&order, n), format!("{order}_{n}"));
            proptest::prop_assert_eq!(purchase_description(n, &plan), format!("{n} × {plan}"));
        }

        /// An order's unit id range holds every unit of that order and none
        /// of another's, whatever the two ids share.
        #[test]
        fn an_orders_unit_range_holds_its_units_only(
            order in "po_[0-9A-Za-z]{22}",
            other in "po_[0-9A-Za-z]{22}",
            shared in 0usize..=25,
            n in 1i32..=i32::MAX,
        ) {
            let other = format!("{}{}", &order[..shared], &other[shared..]);
            let (low, high) = unit_id_range(&order);
            let inside = |id: &str| low.as_str() <= id && id < high.as_str();
            proptest::prop_assert!(inside(&unit_id(&order, n)));
            proptest::prop_assert_eq!(inside(&unit_id(&other, n)), other == order);
            proptest::prop_assert!(!inside(&order));
        }
    }

    fn debit(batch: usize, partner: usize, mode: Mode, total: i64) -> Debit {
        Debit {
            batch,
            partner_id: format!("ptr_{partner}"),
            mode,
            total,
            count: 1,
        }
    }

    /// SQLite's planner walks the debits and finds each float by its key.
    #[tokio::test]
    async fn the_debit_probes_each_float_by_key_on_sqlite() {
        let debits = [debit(0, 7, Mode::Live, 400), debit(1, 8, Mode::Live, 100)];
        let statement = debit_statement(DbBackend::Sqlite, &debits, Utc::now()).unwrap();
        crate::store::tests::assert_planned_through(
            statement,
            "SEARCH floats USING INDEX sqlite_autoindex_floats_1",
            "SCAN floats",
        )
        .await;
    }

    /// On PostgreSQL a debit of a few floats among 20,000 finds each by
    /// its key, not by reading every float (its record set was guessed at
    /// 100 rows, which made a hash join over the whole table look cheaper),
    /// without the table's statistics, and still moves exactly the floats
    /// that can pay: a float short of its total stays as it was, and the
    /// bound on the rows cuts none.
    #[tokio::test]
    async fn the_debit_probes_each_float_by_key_on_postgres() {
        crate::store::tests::on_own_postgres("esim_debit", |db| async move {
            partners_with_1000_cents(&db, 10_000).await;
            let debits = [
                debit(0, 7, Mode::Live, 400),
                debit(0, 7, Mode::Sandbox, 100),
                debit(1, 512, Mode::Live, 1000),
                debit(2, 1, Mode::Live, 1001),
            ];
            let statement = debit_statement(DbBackend::Postgres, &debits, Utc::now()).unwrap();

            let plan = crate::store::tests::postgres_plan(&db, &statement).await;
            assert!(plan.contains("floats_pkey"), "{plan}");
            assert!(!plan.contains("Seq Scan on floats"), "{plan}");

            let row = |p: &str, m: &str, b, n| (p.to_owned(), m.to_owned(), b, n);
            assert_eq!(
                moved_by(&db, statement).await,
                vec![
                    row("ptr_512", "live", 0, 2),
                    row("ptr_7", "live", 600, 2),
                    row("ptr_7", "sandbox", 900, 1),
                ],
                "the short float ptr_1 is not moved"
            );
        })
        .await;
    }

    /// With 1,000 partners and the floats' statistics gathered, a debit of
    /// thirty floats still finds each by its key: by its costs PostgreSQL
    /// would read all 2,000 floats into a hash (and every version their
    /// debits left) rather than probe thirty times, which took three times
    /// as long.
    #[tokio::test]
    async fn a_debit_among_a_thousand_partners_probes_by_key_on_postgres() {
        crate::store::tests::on_own_postgres("esim_debit_1000", |db| async move {
            partners_with_1000_cents(&db, 1_000).await;
            db.execute_unprepared("ANALYZE floats").await.unwrap();
            let debits: Vec<Debit> = (0..30)
                .map(|n| debit(n, 1 + n * 33, Mode::Live, 10))
                .collect();
            let statement = debit_statement(DbBackend::Postgres, &debits, Utc::now()).unwrap();

            let plan = crate::store::tests::postgres_plan(&db, &statement).await;
            assert!(plan.contains("floats_pkey"), "{plan}");
            assert!(!plan.contains("Seq Scan on floats"), "{plan}");
            let moved = moved_by(&db, statement).await;
            assert_eq!(moved.len(), 30);
            assert!(
                moved
                    .iter()
                    .all(|(_, mode, balance, _)| mode == "live" && *balance == 990)
            );
        })
        .await;
    }

    /// A float another transaction debits while the debit waits for its row
    /// is debited as that transaction left it, the guard checked again on
    /// the new balance: neither debit is lost and the row is not skipped
    /// (what another node's commit on the same partner meets).
    #[tokio::test]
    async fn a_debit_waiting_on_a_moved_float_applies_to_its_new_balance_on_postgres() {
        use sea_orm::TransactionTrait as _;

        crate::store::tests::on_own_postgres("esim_debit_wait", |db| async move {
            partners_with_1000_cents(&db, 10_000).await;
            let other = db.begin().await.unwrap();
            other
                .execute_unprepared(
                    "UPDATE floats SET balance_cents = balance_cents - 400 \
                     WHERE partner_id = 'ptr_7' AND mode = 'live'",
                )
                .await
                .unwrap();
            let debits = [debit(0, 7, Mode::Live, 500)];
            let statement = debit_statement(DbBackend::Postgres, &debits, Utc::now()).unwrap();
            let waiting = tokio::spawn({
                let db = db.clone();
                async move { moved_by(&db, statement).await }
            });
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while !has_a_waiting_lock(&db).await {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the debit never waited"
                );
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            other.commit().await.unwrap();

            let moved = waiting.await.unwrap();
            assert_eq!(moved, vec![("ptr_7".to_owned(), "live".to_owned(), 100, 2)]);
        })
        .await;
    }

    /// Partners `ptr_1` to `ptr_{count}`, each float holding 1,000 cents;
    /// no statistics gathered.
    async fn partners_with_1000_cents(db: &sea_orm::DatabaseConnection, count: usize) {
        db.execute_unprepared(&format!(
            "INSERT INTO partners (id, name, slug, status, tier, created_at, updated_at) \
             SELECT 'ptr_' || i, 'P' || i, 'p' || i, 'live', 'gold', now(), now() \
             FROM generate_series(1, {count}) AS i; \
             INSERT INTO floats (partner_id, mode, balance_cents, updated_at) \
             SELECT id, m, 1000, now() FROM partners, (VALUES ('live'), ('sandbox')) AS v(m)"
        ))
        .await
        .unwrap();
    }

    /// The floats `statement` moved: (partner, mode, balance, next seq), sorted.
    async fn moved_by(
        db: &sea_orm::DatabaseConnection,
        statement: Statement,
    ) -> Vec<(String, String, i64, i64)> {
        let rows = db.query_all_raw(statement).await.unwrap();
        let mut moved: Vec<_> = rows.iter().map(|row| moved_row(row).unwrap()).collect();
        moved.sort();
        moved
    }

    /// Whether some session of this database waits for a lock.
    async fn has_a_waiting_lock(db: &sea_orm::DatabaseConnection) -> bool {
        let waiting = Statement::from_string(
            DbBackend::Postgres,
            "SELECT count(*) AS n FROM pg_stat_activity \
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        );
        let row = db.query_one_raw(waiting).await.unwrap().unwrap();
        row.try_get::<i64>("", "n").unwrap() > 0
    }
}
