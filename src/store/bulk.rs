//! Set-based statements whose text does not depend on how many rows they
//! carry, so each is prepared once per connection and reused.
//!
//! A multi-row `INSERT .. VALUES (..), (..)` or an `IN (?, ?, ..)` list has a
//! different text for every size, which defeats the driver's statement cache
//! and, past a size, the databases' bind-parameter limits. Here the rows (or
//! the ids) travel in a fixed number of parameters and the database unpacks
//! them: on SQLite one JSON array (`jsonb_each` for rows, `json_each` for
//! ids); on PostgreSQL rows as one array per column (`unnest($1::text[],
//! $2::bigint[], ..)`) and ids as one JSON array
//! (`jsonb_array_elements_text`). The column list and types come from the
//! entity definition, so the statement cannot drift from the schema.
//!
//! PostgreSQL's rows went as one JSON document (`jsonb_to_recordset`) until
//! a profile put about a sixth of its CPU in parsing that document and
//! looking each cell up by name; an array per column is read once, element
//! by element, and cost measurably less per order.
//!
//! Rows go through `jsonb_each` rather than `json_each`: the latter hands
//! each row over as JSON text, and every `value ->> 'column'` then parses
//! that text again (a row of eleven columns, eleven times); the former hands
//! it over in SQLite's binary form, which `->>` reads directly. What the
//! columns receive is the same. (An id is a plain value either way.)

use std::{borrow::Borrow, fmt::Write as _};

use chrono::{DateTime, Utc};
use sea_orm::{
    ColumnTrait, ColumnType, ConnectionTrait, DbBackend, DbErr, EntityTrait, IdenStatic, Iterable,
    ModelTrait, Statement, Value, sea_query::SimpleExpr,
};

/// Inserts `models` into their table in one statement whatever their number
/// (none: nothing is sent).
pub(crate) async fn insert_models<E, C>(
    db: &C,
    models: &[impl Borrow<E::Model>],
) -> Result<(), DbErr>
where
    E: EntityTrait,
    C: ConnectionTrait,
{
    match insert_statement::<E>(db.get_database_backend(), models)? {
        Some(insert) => db.execute_raw(insert).await.map(|_| ()),
        None => Ok(()),
    }
}

/// The statement [`insert_models`] runs (`None` for no rows).
pub(crate) fn insert_statement<E: EntityTrait>(
    backend: DbBackend,
    models: &[impl Borrow<E::Model>],
) -> Result<Option<Statement>, DbErr> {
    if models.is_empty() {
        return Ok(None);
    }
    let sql = insert_sql::<E>(backend);
    Ok(Some(Statement::from_sql_and_values(
        backend,
        sql,
        rows_values::<E>(backend, models)?,
    )))
}

/// [`insert_statement`] for rows a unique index may hold already: a row whose
/// `unique` columns are taken is skipped, not an error, and the statement
/// answers the `unique` columns of the rows it did insert, so the caller
/// learns which were taken without the whole statement failing.
pub(crate) fn insert_new_statement<E: EntityTrait>(
    backend: DbBackend,
    models: &[impl Borrow<E::Model>],
    unique: &[E::Column],
) -> Result<Option<Statement>, DbErr> {
    let columns = names(unique.iter().copied());
    insert_on_conflict::<E>(
        backend,
        models,
        &format!("ON CONFLICT ({columns}) DO NOTHING RETURNING {columns}"),
    )
}

/// [`insert_statement`] for rows that may exist already: a row whose
/// `key` columns are taken has its `set` columns overwritten by the new
/// row's, where the existing row passes `guard` (SQL over the table's own
/// columns, `"table"."column"`); else it is left alone. Rows inserted and
/// rows overwritten both count as changed.
pub(crate) fn upsert_statement<E: EntityTrait>(
    backend: DbBackend,
    models: &[impl Borrow<E::Model>],
    key: &[E::Column],
    set: &[E::Column],
    guard: &str,
) -> Result<Option<Statement>, DbErr> {
    insert_on_conflict::<E>(backend, models, &upsert_clause::<E>(key, set, guard))
}

/// The `ON CONFLICT` clause of [`upsert_statement`] and [`row_upsert_sql`].
fn upsert_clause<E: EntityTrait>(key: &[E::Column], set: &[E::Column], guard: &str) -> String {
    let key = names(key.iter().copied());
    let set = set
        .iter()
        .map(|c| format!("\"{0}\" = excluded.\"{0}\"", c.as_str()))
        .collect::<Vec<_>>()
        .join(", ");
    format!("ON CONFLICT ({key}) DO UPDATE SET {set} WHERE {guard}")
}

/// [`insert_statement`] followed by its `ON CONFLICT` clause (`None` for
/// no rows).
fn insert_on_conflict<E: EntityTrait>(
    backend: DbBackend,
    models: &[impl Borrow<E::Model>],
    on_conflict: &str,
) -> Result<Option<Statement>, DbErr> {
    if models.is_empty() {
        return Ok(None);
    }
    // SQLite reads `ON` right after `SELECT .. FROM ..` as a join's: a
    // `WHERE` between them ends the select.
    let filler = match backend {
        DbBackend::Postgres => "",
        _ => " WHERE true",
    };
    let sql = format!("{}{filler} {on_conflict}", insert_sql::<E>(backend));
    Ok(Some(Statement::from_sql_and_values(
        backend,
        sql,
        rows_values::<E>(backend, models)?,
    )))
}

/// Column names in double quotes, separated by commas.
fn names(columns: impl Iterator<Item = impl ColumnTrait>) -> String {
    let mut text = String::new();
    push_names(&mut text, columns);
    text
}

/// The insert of one row of `E`, a `?` per column in the order
/// [`row_values`] gives them; with `skip_taken` columns, a row whose values
/// there are taken is skipped rather than an error. The form for a writer that runs one
/// prepared statement once per row on its own thread (the inline writer,
/// SQLite): there a statement costs no hand-off, and binding a row's values
/// directly costs less than packing the rows into JSON for SQLite to unpack
/// again, column by column ([`insert_statement`]'s form, which the pool's
/// writers need: one statement, one hand-off, whatever the rows).
///
/// The text is pushed piece by piece into one string, not formatted: the
/// inline writer asks for it once for each table of each write (its
/// statement cache then finds the prepared statement by it), where a
/// `format!` for each column's name took some thousands of instructions an
/// order.
pub(crate) fn row_insert_sql<E: EntityTrait>(skip_taken: &[E::Column]) -> String {
    let mut sql = String::with_capacity(512);
    sql.push_str("INSERT INTO \"");
    sql.push_str(E::default().table_name());
    sql.push_str("\" (");
    push_names(&mut sql, E::Column::iter());
    sql.push_str(") VALUES (");
    for (at, _) in E::Column::iter().enumerate() {
        sql.push_str(if at == 0 { "?" } else { ", ?" });
    }
    sql.push(')');
    if !skip_taken.is_empty() {
        sql.push_str(" ON CONFLICT (");
        push_names(&mut sql, skip_taken.iter().copied());
        sql.push_str(") DO NOTHING");
    }
    sql
}

/// [`names`], pushed onto `sql`.
fn push_names(sql: &mut String, columns: impl Iterator<Item = impl ColumnTrait>) {
    for (at, column) in columns.enumerate() {
        if at > 0 {
            sql.push_str(", ");
        }
        sql.push('"');
        sql.push_str(column.as_str());
        sql.push('"');
    }
}

/// [`upsert_statement`] for one row, in [`row_insert_sql`]'s form.
pub(crate) fn row_upsert_sql<E: EntityTrait>(
    key: &[E::Column],
    set: &[E::Column],
    guard: &str,
) -> String {
    format!(
        "{} {}",
        row_insert_sql::<E>(&[]),
        upsert_clause::<E>(key, set, guard)
    )
}

/// A model's values in the column order [`row_insert_sql`] binds them.
pub(crate) fn row_values<E: EntityTrait>(model: &E::Model) -> impl Iterator<Item = Value> + '_ {
    E::Column::iter().map(move |column| model.get(column))
}

/// `column IN (ids)` with the ids in one JSON parameter, for a filter whose
/// text is the same for one id or ten thousand.
pub(crate) fn column_in<'a>(
    db: &impl ConnectionTrait,
    column: impl ColumnTrait,
    ids: impl IntoIterator<Item = &'a str>,
) -> SimpleExpr {
    column_in_for(db.get_database_backend(), column, ids)
}

/// [`column_in`] for a backend named rather than a connection.
pub(crate) fn column_in_for<'a>(
    backend: DbBackend,
    column: impl ColumnTrait,
    ids: impl IntoIterator<Item = &'a str>,
) -> SimpleExpr {
    let list = serde_json::Value::from(ids.into_iter().collect::<Vec<_>>()).to_string();
    let name = column.as_str().to_owned();
    let sql = match backend {
        // `= ANY(ARRAY(..))`, not `IN (SELECT ..)`: PostgreSQL plans the
        // latter as a join against a set it guesses at 100 rows, and while
        // a table's statistics still say it is small (a new database, or
        // between two analyses) that join reads the whole table, every
        // time. The former is an index condition as soon as the table is
        // more than a few pages; below that PostgreSQL may read the table
        // for it too, and a prepared statement keeps that plan until the
        // table's next analysis. A guard checked first makes such a read
        // cheap; a statement that compares every row with the list cannot
        // afford it (`orders::settle`'s count of units probes instead).
        DbBackend::Postgres => {
            format!("\"{name}\" = ANY(ARRAY(SELECT jsonb_array_elements_text($1::jsonb)))")
        }
        _ => format!("\"{name}\" IN (SELECT value FROM json_each(?))"),
    };
    SimpleExpr::cust_with_values(sql, [list])
}

/// `condition` checked on the rows a statement's other conditions find,
/// never used to find them. A guard beside an id list (`status =
/// 'processing'`, `supplier_txn_id IS NULL`) matches an index of its own,
/// and both planners take it: SQLite's always, PostgreSQL's whenever its
/// estimates call the guarded state rare, which it is. That index holds the
/// whole backlog in that state (on PostgreSQL also an entry per earlier
/// update until vacuum), so every statement walked all of it to find the
/// few ids listed, where the primary key finds each in one probe. A
/// condition wrapped in `IS TRUE` matches no index.
pub(crate) fn checked_only(condition: SimpleExpr) -> SimpleExpr {
    use sea_orm::sea_query::{ExprTrait as _, Keyword};
    // A keyword, not a custom expression: sea-query writes the latter in
    // parentheses, and PostgreSQL reads `IS (TRUE)` as a syntax error.
    SimpleExpr::expr(condition).is(SimpleExpr::Keyword(Keyword::Custom(
        String::from("TRUE").into(),
    )))
}

/// The insert for entity `E`: the same text for any number of rows.
fn insert_sql<E: EntityTrait>(backend: DbBackend) -> String {
    let table = E::default().table_name().to_owned();
    let columns: Vec<(String, &ColumnType)> = E::Column::iter()
        .map(|c| (c.as_str().to_owned(), column_type(&c)))
        .collect();
    let names = columns
        .iter()
        .map(|(name, _)| format!("\"{name}\""))
        .collect::<Vec<_>>()
        .join(", ");
    match backend {
        DbBackend::Postgres => {
            let picks = columns
                .iter()
                .map(|(name, ty)| match ty {
                    ColumnType::Json | ColumnType::JsonBinary => format!("r.\"{name}\"::json"),
                    _ => format!("r.\"{name}\""),
                })
                .collect::<Vec<_>>()
                .join(", ");
            let arrays = columns
                .iter()
                .enumerate()
                .map(|(i, (_, ty))| format!("${}::{}[]", i + 1, pg_type(ty)))
                .collect::<Vec<_>>()
                .join(", ");
            format!(
                "INSERT INTO \"{table}\" ({names}) SELECT {picks} \
                 FROM unnest({arrays}) AS r({names})"
            )
        }
        _ => {
            let picks = columns
                .iter()
                .map(|(name, _)| format!("value ->> '{name}'"))
                .collect::<Vec<_>>()
                .join(", ");
            format!("INSERT INTO \"{table}\" ({names}) SELECT {picks} FROM jsonb_each(?)")
        }
    }
}

fn column_type<C: ColumnTrait>(column: &C) -> &'static ColumnType {
    // `def()` builds a fresh definition; its type is one of a few constants,
    // mapped here to a static so callers can keep it.
    match column.def().get_column_type() {
        ColumnType::Json | ColumnType::JsonBinary => &ColumnType::Json,
        ColumnType::TimestampWithTimeZone | ColumnType::Timestamp | ColumnType::DateTime => {
            &ColumnType::TimestampWithTimeZone
        }
        ColumnType::Integer | ColumnType::SmallInteger | ColumnType::TinyInteger => {
            &ColumnType::Integer
        }
        ColumnType::BigInteger => &ColumnType::BigInteger,
        ColumnType::Boolean => &ColumnType::Boolean,
        _ => &ColumnType::Text,
    }
}

fn pg_type(ty: &ColumnType) -> &'static str {
    match ty {
        // JSON travels as its text, so that SQLite stores exactly what the
        // driver would have stored; PostgreSQL casts it back.
        ColumnType::Json => "text",
        ColumnType::TimestampWithTimeZone => "timestamptz",
        ColumnType::Integer => "integer",
        ColumnType::BigInteger => "bigint",
        ColumnType::Boolean => "boolean",
        _ => "text",
    }
}

/// The parameters of [`insert_sql`]'s statement: the rows as one JSON
/// array (SQLite) or one array per column (PostgreSQL).
fn rows_values<E: EntityTrait>(
    backend: DbBackend,
    models: &[impl Borrow<E::Model>],
) -> Result<Vec<Value>, DbErr> {
    match backend {
        DbBackend::Postgres => columns_arrays::<E>(models),
        _ => Ok(vec![Value::from(rows_json::<E>(models)?)]),
    }
}

/// One PostgreSQL array literal per column, in column order, each passed as
/// text and cast by the statement (`$n::bigint[]`). Text rather than a bound
/// array: the driver's array binding has no place for a NULL element.
fn columns_arrays<E: EntityTrait>(models: &[impl Borrow<E::Model>]) -> Result<Vec<Value>, DbErr> {
    E::Column::iter()
        .map(|column| {
            // Room for a short cell each; a longer one grows the string.
            let mut out = String::with_capacity(2 + models.len() * 24);
            out.push('{');
            for (i, model) in models.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_element(&mut out, model.borrow().get(column))?;
            }
            out.push('}');
            Ok(Value::from(out))
        })
        .collect()
}

/// One element of an array literal: `NULL`, a number or a boolean as it
/// is, or text in double quotes ([`push_quoted`]), which PostgreSQL reads
/// back as that text whatever it holds (commas, braces, spaces, the word
/// NULL).
fn write_element(out: &mut String, value: Value) -> Result<(), DbErr> {
    match plain(value)? {
        Plain::Null => out.push_str("NULL"),
        // Writing to a String cannot fail.
        Plain::Integer(n) => {
            let _ = write!(out, "{n}");
        }
        Plain::Bool(b) => out.push_str(if b { "true" } else { "false" }),
        Plain::Text(text) => push_quoted(out, &text),
    }
    Ok(())
}

/// `text` in double quotes, with `"` and `\` escaped by a backslash.
fn push_quoted(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
}

/// The rows as one JSON array of objects keyed by column name.
fn rows_json<E: EntityTrait>(models: &[impl Borrow<E::Model>]) -> Result<String, DbErr> {
    let columns: Vec<E::Column> = E::Column::iter().collect();
    let names: Vec<String> = columns
        .iter()
        .map(|c| serde_json::Value::from(c.as_str()).to_string())
        .collect();
    let mut out = Vec::with_capacity(models.len() * 64 * columns.len());
    out.push(b'[');
    for (i, model) in models.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.push(b'{');
        for (j, (column, name)) in columns.iter().zip(&names).enumerate() {
            if j > 0 {
                out.push(b',');
            }
            out.extend_from_slice(name.as_bytes());
            out.push(b':');
            write_value(&mut out, model.borrow().get(*column))?;
        }
        out.push(b'}');
    }
    out.push(b']');
    // Nothing but serde_json's output and ASCII punctuation was written.
    String::from_utf8(out).map_err(|e| DbErr::Custom(e.to_string()))
}

/// One cell as JSON, in the form the driver would have bound it.
/// Written straight into `out` by serde_json's serializer, without building
/// a JSON value for each cell first.
fn write_value(out: &mut Vec<u8>, value: Value) -> Result<(), DbErr> {
    let written = match plain(value)? {
        Plain::Null => {
            out.extend_from_slice(b"null");
            Ok(())
        }
        Plain::Integer(n) => serde_json::to_writer(&mut *out, &n),
        Plain::Bool(b) => serde_json::to_writer(&mut *out, &b),
        Plain::Text(text) => serde_json::to_writer(&mut *out, &text),
    };
    written.map_err(|e| DbErr::Custom(e.to_string()))
}

/// A cell in the few forms the writers here send: what the SQLite driver
/// binds for each kind of column this schema has, timestamps and JSON
/// documents as their text.
pub(crate) enum Plain {
    /// An absent value.
    Null,
    /// Any integer column.
    Integer(i64),
    /// A boolean column.
    Bool(bool),
    /// Text, a timestamp ([`timestamp`]) or a JSON document's text.
    Text(String),
}

/// `value` in its [`Plain`] form; an error for a kind of value no column
/// of this schema holds.
pub(crate) fn plain(value: Value) -> Result<Plain, DbErr> {
    Ok(match value {
        Value::String(Some(s)) => Plain::Text(s),
        Value::Int(Some(n)) => Plain::Integer(i64::from(n)),
        Value::BigInt(Some(n)) => Plain::Integer(n),
        Value::SmallInt(Some(n)) => Plain::Integer(i64::from(n)),
        Value::Bool(Some(b)) => Plain::Bool(b),
        Value::ChronoDateTimeUtc(Some(t)) => Plain::Text(timestamp(&t)),
        // The document's text, as the driver stores a JSON column on SQLite.
        Value::Json(Some(j)) => Plain::Text(j.to_string()),
        Value::String(None)
        | Value::Int(None)
        | Value::BigInt(None)
        | Value::SmallInt(None)
        | Value::Bool(None)
        | Value::ChronoDateTimeUtc(None)
        | Value::Json(None) => Plain::Null,
        other => {
            return Err(DbErr::Custom(format!(
                "no plain form for the value {other:?}"
            )));
        }
    })
}

/// A timestamp in the exact text the SQLite driver stores (RFC 3339, `+00:00`,
/// as many fraction digits as needed), so stored values keep comparing as
/// text; PostgreSQL parses the same text.
pub(crate) fn timestamp(t: &DateTime<Utc>) -> String {
    crate::domain::time::rfc3339(t)
}

/// A raw statement written with PostgreSQL's `$1, $2, …` placeholders, each
/// used once and in order, turned into SQLite's positional `?` there.
pub(crate) fn portable<C: ConnectionTrait>(
    db: &C,
    sql: &str,
    values: Vec<sea_orm::Value>,
) -> Statement {
    portable_for(db.get_database_backend(), sql, values)
}

/// [`portable`] for a backend named rather than a connection.
pub(crate) fn portable_for(
    backend: DbBackend,
    sql: &str,
    values: Vec<sea_orm::Value>,
) -> Statement {
    let sql = match backend {
        DbBackend::Sqlite => {
            let mut out = String::with_capacity(sql.len());
            let mut chars = sql.chars().peekable();
            while let Some(c) = chars.next() {
                if c == '$' && chars.peek().is_some_and(char::is_ascii_digit) {
                    while chars.peek().is_some_and(char::is_ascii_digit) {
                        chars.next();
                    }
                    out.push('?');
                } else {
                    out.push(c);
                }
            }
            out
        }
        _ => sql.to_owned(),
    };
    Statement::from_sql_and_values(backend, sql, values)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`row_insert_sql`] as it was written with `format!`: the text its
    /// statements were prepared from.
    fn row_insert_sql_formatted<E: EntityTrait>(skip_taken: &[E::Column]) -> String {
        let quoted = |columns: Vec<E::Column>| {
            let quoted: Vec<String> = columns
                .iter()
                .map(|c| format!("\"{}\"", c.as_str()))
                .collect();
            quoted.join(", ")
        };
        let table = E::default().table_name().to_owned();
        let names = quoted(E::Column::iter().collect());
        let marks = vec!["?"; E::Column::iter().count()].join(", ");
        let mut sql = format!("INSERT INTO \"{table}\" ({names}) VALUES ({marks})");
        if !skip_taken.is_empty() {
            let taken = quoted(skip_taken.to_vec());
            sql.push_str(&format!(" ON CONFLICT ({taken}) DO NOTHING"));
        }
        sql
    }

    /// Every entity the inline writer inserts, with no column skipped, one
    /// and two: the same text as `format!` wrote.
    #[test]
    fn row_inserts_read_as_formatted() {
        fn same<E: EntityTrait>() {
            let columns: Vec<E::Column> = E::Column::iter().collect();
            for skip in [&columns[..0], &columns[..1], &columns[..2]] {
                assert_eq!(
                    row_insert_sql::<E>(skip),
                    row_insert_sql_formatted::<E>(skip)
                );
            }
        }
        use entities::{esim, idempotency_key, ledger_entry, order, order_unit, supplier_order};
        same::<order::Entity>();
        same::<ledger_entry::Entity>();
        same::<idempotency_key::Entity>();
        same::<order_unit::Entity>();
        same::<esim::Entity>();
        same::<supplier_order::Entity>();
        let keys = row_insert_sql::<idempotency_key::Entity>(&[idempotency_key::Column::PartnerId]);
        assert!(keys.starts_with("INSERT INTO \"idempotency_keys\" (\"partner_id\", \"key\", "));
        assert!(
            keys.ends_with(", ?) ON CONFLICT (\"partner_id\") DO NOTHING"),
            "{keys}"
        );
        assert_eq!(
            keys.matches('?').count(),
            idempotency_key::Column::iter().count()
        );
    }

    #[test]
    fn timestamps_match_the_sqlite_driver() {
        let t = DateTime::parse_from_rfc3339("2026-11-25T10:00:00.120Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(timestamp(&t), "2026-11-25T10:00:00.120+00:00");
    }

    #[test]
    fn insert_text_does_not_depend_on_the_rows() {
        let sqlite = insert_sql::<entities::ledger_entry::Entity>(DbBackend::Sqlite);
        assert!(sqlite.starts_with("INSERT INTO \"ledger_entries\" (\"id\", "));
        assert!(sqlite.ends_with("FROM jsonb_each(?)"));
        let pg = insert_sql::<entities::ledger_entry::Entity>(DbBackend::Postgres);
        assert!(pg.starts_with("INSERT INTO \"ledger_entries\" (\"id\", "));
        assert!(pg.contains("FROM unnest($1::text[], $2::text[], $3::bigint[], "));
        assert!(pg.contains("::timestamptz[]) AS r(\"id\", "));
    }

    /// A condition checked only still decides which rows are found, with
    /// its values bound in their places on both backends.
    #[tokio::test]
    async fn a_condition_checked_only_still_decides() {
        use sea_orm::ConnectionTrait as _;
        use sea_orm::sea_query::{ExprTrait as _, PostgresQueryBuilder, Query, SqliteQueryBuilder};

        let select = |wanted: &str| {
            Query::select()
                .expr(SimpleExpr::val(1))
                .and_where(checked_only(SimpleExpr::val("a").eq(wanted)))
                .and_where(SimpleExpr::val(2).eq(2))
                .to_owned()
        };
        let (pg, _) = select("a").build(PostgresQueryBuilder);
        assert_eq!(pg, "SELECT $1 WHERE ($2 = $3) IS TRUE AND $4 = $5");
        let (_dir, db) = crate::store::tests::sqlite_file_db("checked.db", 1).await;
        for (wanted, rows) in [("a", 1), ("b", 0)] {
            let (sql, values) = select(wanted).build(SqliteQueryBuilder);
            let statement = Statement::from_sql_and_values(DbBackend::Sqlite, sql, values);
            assert_eq!(
                db.query_all_raw(statement).await.unwrap().len(),
                rows,
                "{wanted}"
            );
        }
    }

    /// Every kind of column an insert carries reads back exactly as written:
    /// nested JSON, text that needs escaping (quotes, backslashes, braces,
    /// commas, the word NULL), absent values beside present ones in the same
    /// column, timestamps.
    #[tokio::test]
    async fn inserted_rows_read_back_exactly_as_written() {
        let (_dir, db) = crate::store::tests::sqlite_file_db("bulk.db", 2).await;
        assert_rows_read_back_as_written(&db).await;
    }

    /// The same on PostgreSQL (one array literal per column), when
    /// `TEST_DATABASE_URL` names a server: in a database of its own, dropped
    /// after.
    #[tokio::test]
    async fn inserted_rows_read_back_exactly_as_written_on_postgres() {
        crate::store::tests::on_own_postgres("esim_bulk", |db| async move {
            assert_rows_read_back_as_written(&db).await
        })
        .await;
    }

    async fn assert_rows_read_back_as_written(db: &sea_orm::DatabaseConnection) {
        use crate::domain::states::OrderStatus;
        use sea_orm::{EntityTrait, QueryOrder};

        crate::store::migrate(db).await.unwrap();
        let partner_id = crate::store::partners::gold_partner(db, "b", 0).await;
        let at = |text: &str| {
            DateTime::parse_from_rfc3339(text)
                .unwrap()
                .with_timezone(&Utc)
        };
        let tricky = entities::order::Model {
            id: "ord_bulk_1".into(),
            partner_id,
            mode: crate::domain::partner::Mode::Sandbox,
            idempotency_key: "k \"quoted\" \\ ünïcødé ✓ {a,b} NULL".into(),
            plan_id: "pl_x".into(),
            quantity: 3,
            unit_price_cents: 750,
            total_cents: 2_250,
            list_unit_cents: 800,
            price_source: "tier:gold".into(),
            metadata: serde_json::json!({"ref": "r-1", "tags": ["a", {"b": null}], "n": 1.5, "s": "x'y\"\\"}),
            status: OrderStatus::Processing,
            failure_code: None,
            refunded_cents: 0,
            attempts: 0,
            claimed_until: None,
            claimed_by: None,
            created_at: at("2026-11-26T10:00:00.123456Z"),
            completed_at: None,
        };
        let filled = entities::order::Model {
            id: "ord_bulk_2".into(),
            idempotency_key: "NULL".into(),
            metadata: serde_json::json!({}),
            price_source: "{,}".into(),
            failure_code: Some(entities::states::FailureCode::SupplierError),
            refunded_cents: -1,
            claimed_until: Some(at("2026-11-26T10:00:01Z")),
            claimed_by: Some("NULL".into()),
            completed_at: Some(at("2026-11-26T10:00:02.5Z")),
            ..tricky.clone()
        };
        let written = vec![tricky, filled];

        insert_models::<entities::order::Entity, _>(db, &written)
            .await
            .unwrap();

        let read = entities::order::Entity::find()
            .order_by_asc(entities::order::Column::Id)
            .all(db)
            .await
            .unwrap();
        assert_eq!(read, written);
    }
}
