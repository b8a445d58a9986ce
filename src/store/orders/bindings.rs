//! Idempotency-Key bindings: what the keys of a batch are bound to, read in
//! one query, and the bindings a shared commit writes.
//!
//! A commit binds its keys with an insert that skips a key bound already
//! and answers the keys it bound, so a key an account took for new without
//! reading it (it holds only its recent keys in memory) turns back the
//! batch that holds it instead of failing the whole commit.

use super::*;
use sea_orm::{DbBackend, Statement};

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

/// A shared commit's key bindings: the rows, inserted so that a key bound
/// already is skipped, and how many keys each partner's batch binds (a
/// shared commit holds each partner at most once, and a batch binds one key
/// per order and per binding refusal: [`PartnerBatch::written`]).
pub(super) struct KeyBindings {
    /// The bindings, in lock order.
    rows: Vec<idempotency_key::Model>,
    /// Partner -> (index of its batch, keys the batch binds).
    expected: HashMap<String, (usize, usize)>,
}

/// What a key binding is unique by: a binding whose key is bound already is
/// skipped by the insert, not an error.
pub(super) const KEY_COLUMNS: [idempotency_key::Column; 2] = [
    idempotency_key::Column::PartnerId,
    idempotency_key::Column::Key,
];

impl KeyBindings {
    /// The bindings, in lock order.
    pub(super) fn rows(&self) -> &[idempotency_key::Model] {
        &self.rows
    }

    /// The one statement that binds every key through the pool (`None`
    /// when nothing binds a key), answering the partner of each key it bound.
    pub(super) fn insert(&self, backend: DbBackend) -> Result<Option<Statement>, DbErr> {
        bulk::insert_new_statement::<idempotency_key::Entity>(backend, &self.rows, &KEY_COLUMNS)
    }

    /// `Ok` when the insert bound every key (`bound`: the partner of each
    /// key it bound); otherwise the batches with a key it skipped, turned
    /// back.
    pub(super) fn all_bound(&self, bound: Vec<String>) -> Result<(), SharedError> {
        let expected: usize = self.expected.values().map(|&(_, keys)| keys).sum();
        if bound.len() == expected {
            return Ok(());
        }
        let mut counted: HashMap<&str, usize> = HashMap::new();
        for partner in &bound {
            *counted.entry(partner.as_str()).or_default() += 1;
        }
        let taken: BTreeSet<usize> = self
            .expected
            .iter()
            .filter(|(partner, (_, keys))| {
                counted.get(partner.as_str()).copied().unwrap_or(0) < *keys
            })
            .map(|(_, &(batch, _))| batch)
            .collect();
        if taken.is_empty() {
            return Err(SharedError::Db(DbErr::Custom(
                "the key bindings' insert answered keys it was not given".into(),
            )));
        }
        Err(SharedError::Turned(Turned::Taken(taken)))
    }
}

/// The batches' key bindings, in lock order, and which batch binds each.
pub(super) fn key_bindings(batches: &[&PartnerBatch], now: DateTime<Utc>) -> KeyBindings {
    let expected = batches
        .iter()
        .enumerate()
        .map(|(index, batch)| (batch.partner_id.clone(), (index, batch.written())))
        .collect();
    KeyBindings {
        rows: key_rows_in_lock_order(batches, now),
        expected,
    }
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

    #[test]
    fn only_the_batches_whose_key_the_insert_skipped_are_turned_back() {
        let (a, b, c) = (
            refusals("pt_a", &["k1", "k2"]),
            refusals("pt_b", &["k1"]),
            refusals("pt_c", &["k9"]),
        );
        let keys = key_bindings(&[&a, &b, &c], Utc::now());
        let partners = |ps: &[&str]| ps.iter().map(|p| (*p).to_owned()).collect::<Vec<_>>();
        let everything = partners(&["pt_a", "pt_a", "pt_b", "pt_c"]);

        assert!(keys.all_bound(everything).is_ok());
        let skipped = keys.all_bound(partners(&["pt_a", "pt_b"]));
        assert!(
            matches!(&skipped, Err(SharedError::Turned(Turned::Taken(t))) if *t == BTreeSet::from([0, 2])),
            "{skipped:?}"
        );
    }
}
