//! Changes other nodes must hear of at once: a key revoked, rotated or
//! restricted, an account suspended or re-tiered.
//!
//! On PostgreSQL a change is a `NOTIFY` on one channel and every node
//! `LISTEN`s on a connection of its own; a notification reaches the others
//! in milliseconds. SQLite has no such thing (and one SQLite file serves one
//! node), so publishing there does nothing and nobody listens; the key
//! cache's time to live stays the bound wherever notifications cannot help.

use sea_orm::{
    ConnectionTrait, DatabaseConnection, DatabaseConnectionType, DbBackend, DbErr, Statement,
    sqlx::postgres::{PgListener, PgPoolOptions},
};

/// The channel every node listens on.
const CHANNEL: &str = "esim_auth_changes";

/// What changed; the payload names what each node must forget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// One key (revoked, rotated or restricted).
    Key(String),
    /// One account and so every key of it (status, tier or discount).
    Partner(String),
}

impl Change {
    fn payload(&self) -> String {
        match self {
            Self::Key(id) => format!("key:{id}"),
            Self::Partner(id) => format!("partner:{id}"),
        }
    }

    fn parse(payload: &str) -> Option<Self> {
        match payload.split_once(':')? {
            ("key", id) if !id.is_empty() => Some(Self::Key(id.to_owned())),
            ("partner", id) if !id.is_empty() => Some(Self::Partner(id.to_owned())),
            _ => None,
        }
    }
}

/// Tells every listening node about `change` (delivered when the
/// surrounding transaction, if any, commits). Does nothing on SQLite.
pub(crate) async fn publish<C: ConnectionTrait>(db: &C, change: &Change) -> Result<(), DbErr> {
    if db.get_database_backend() != DbBackend::Postgres {
        return Ok(());
    }
    db.execute_raw(Statement::from_sql_and_values(
        DbBackend::Postgres,
        "SELECT pg_notify($1, $2)",
        [CHANNEL.into(), change.payload().into()],
    ))
    .await
    .map(|_| ())
}

/// What a subscription heard.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Heard {
    /// A change published by some node (this one included).
    Change(Change),
    /// The listening connection was lost and re-established: changes
    /// published meanwhile may have been missed.
    Gap,
}

/// A node's ear on the changes channel, on a connection of its own.
pub(crate) struct Subscription {
    listener: PgListener,
}

/// Starts listening; `None` on a database without notifications (SQLite).
pub(crate) async fn subscribe(db: &DatabaseConnection) -> Result<Option<Subscription>, DbErr> {
    let DatabaseConnectionType::SqlxPostgresPoolConnection(_) = &db.inner else {
        return Ok(None);
    };
    // A pool of one beside the service's own: the listening connection is
    // held for good, and must neither shrink the pool requests use nor keep
    // that pool from closing at shutdown.
    let options = db.get_postgres_connection_pool().connect_options();
    let own = PgPoolOptions::new()
        .max_connections(1)
        .min_connections(0)
        .connect_lazy_with((*options).clone());
    let mut listener = PgListener::connect_with(&own)
        .await
        .map_err(listener_error)?;
    listener.listen(CHANNEL).await.map_err(listener_error)?;
    Ok(Some(Subscription { listener }))
}

impl Subscription {
    /// Waits for the next change, or for a gap after a lost connection.
    /// Payloads this version does not understand are skipped.
    pub(crate) async fn next(&mut self) -> Result<Heard, DbErr> {
        loop {
            match self.listener.try_recv().await.map_err(listener_error)? {
                None => return Ok(Heard::Gap),
                Some(note) => {
                    if let Some(change) = Change::parse(note.payload()) {
                        return Ok(Heard::Change(change));
                    }
                    tracing::warn!(
                        payload = note.payload(),
                        "unknown change notification skipped"
                    );
                }
            }
        }
    }
}

fn listener_error(err: sea_orm::sqlx::Error) -> DbErr {
    DbErr::Custom(format!("listening for changes: {err}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_read_back_as_the_change_they_name() {
        for change in [Change::Key("key_1".into()), Change::Partner("ptn_2".into())] {
            assert_eq!(Change::parse(&change.payload()), Some(change));
        }
    }

    #[test]
    fn unknown_or_empty_payloads_are_not_changes() {
        for payload in ["", "key:", "partner", "order:ord_1", "key"] {
            assert_eq!(Change::parse(payload), None, "{payload}");
        }
    }
}
