//! Persistence through sea-orm: the only place that knows SQL.
//!
//! SQLite (the embedded default) runs in WAL mode with `synchronous=FULL` and a
//! busy timeout, and reads its pages with `pread`, not through a memory map:
//! in WAL mode a connection that finds the database changed since its last
//! transaction drops its page cache and unmaps the whole file, so under a
//! steady stream of writes a map costs an `munmap`, a new map and a page
//! fault per page touched, more than the copies it saves. The WAL is copied
//! back into the database file every [`SQLITE_CHECKPOINT_PAGES`] pages rather
//! than SQLite's 1,000: a checkpoint runs inside the commit that crosses the
//! mark, and index pages rewritten by many commits are copied once per
//! checkpoint. Under the order path's steady writes the WAL still starts
//! over after each ([`checkpoint`]), so it stays near the mark. Statement
//! journals (a multi-row statement's undo) stay in memory (`temp_store`).
//! The bundled SQLite is built with the query planner stability guarantee
//! (`SQLITE_ENABLE_QPSG`, set in `.cargo/config.toml`): without it a
//! statement whose `LIMIT` is a bound value (every `.one()`) is parsed again
//! each time its values are bound. It is also built without two locks the
//! bundled build takes for the whole process: one page cache shared by
//! every connection behind one mutex (each connection keeps its own) and
//! allocation statistics behind another (not read here). Every transaction
//! that reads and then writes starts `IMMEDIATE` ([`begin_write`]) so two
//! writers never deadlock on a lock upgrade and SQLite never answers
//! `SQLITE_BUSY` mid-transaction. The pool does not ping a SQLite
//! connection each time it hands it out (a local file is never dropped by a
//! server or a proxy; the ping was one more hand-off per statement). The
//! hottest point reads (`GET /balance`, `GET /orders/{id}`) skip the pool:
//! [`inline`] runs them on the caller's thread over connections of its own,
//! and the order path's three writers (the shared commit, supplier orders
//! written down, deliveries) run their writes the same way, those queued
//! together in one transaction with one commit ([`inline_write`]). Where
//! there is no inline reader (PostgreSQL), the balance reads asked at the
//! same moment are gathered into one query per round ([`gathered`]), and
//! the order path's writers keep connections of their own rather than take
//! one from the pool (and its two pings) for every write ([`kept`],
//! [`WriterDb`]).

/// WAL pages between automatic checkpoints (about 40 MiB of 4 KiB pages).
pub const SQLITE_CHECKPOINT_PAGES: u32 = 10_000;

pub mod approvals;
pub mod audit;
pub(crate) mod bulk;
pub(crate) mod catalogue;
pub(crate) mod changes;
mod checkpoint;
pub(crate) mod deposits;
pub(crate) mod esims;
pub(crate) mod fixtures;
pub mod gathered;
pub mod inline;
pub mod inline_write;
pub mod kept;
pub(crate) mod keys;
pub mod nodes;
pub mod operators;
pub mod orders;
pub mod partners;
mod pool;
pub(crate) mod supplier_orders;
pub mod supply;
pub mod trends;
pub mod verify;
mod wal_frames;
mod writer_db;
mod writes;

use std::{
    path::{Path, PathBuf},
    str::FromStr,
    sync::Arc,
    time::Duration,
};

use anyhow::Context;
use migration::{Migrator, MigratorTrait};
use sea_orm::{
    ConnectOptions, Database, DatabaseConnection, DatabaseConnectionType, DbErr, SqlErr,
    sqlx::{
        Postgres,
        pool::PoolOptions,
        postgres::PgConnectOptions,
        sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous},
    },
};

use crate::config::DatabaseSettings;
pub use writer_db::{WriterDb, WriterTxn};
use writes::register_write_gate;
pub(crate) use writes::write_alone;
pub use writes::{GateUse, WriteTxn, begin_write, write_gate_use};

pub use pool::{PoolUse, pool_use};

/// A shared handle on the database pool.
pub type Db = DatabaseConnection;

/// Opens the pool, creating the SQLite file and its folder on first run.
///
/// On PostgreSQL the pool is also bounded against a database host that
/// vanishes or freezes ([`bound_postgres`]).
#[tracing::instrument(skip_all, fields(backend))]
pub async fn connect(settings: &DatabaseSettings) -> anyhow::Result<Db> {
    let is_sqlite = settings.url.starts_with("sqlite:");
    tracing::Span::current().record("backend", if is_sqlite { "sqlite" } else { "postgres" });
    if is_sqlite {
        ensure_sqlite_folder(&settings.url)?;
        // Before the first connection opens: from here on every SQLite file
        // writes a commit's WAL frames in one call (see `wal_frames`).
        if !wal_frames::install() {
            tracing::warn!(
                "SQLite's default VFS could not be wrapped; WAL frames are written as SQLite asks"
            );
        }
    }
    let mut options = ConnectOptions::new(settings.url.clone());
    let pool_size = match (settings.max_connections, is_sqlite) {
        (0, true) => 8,
        (0, false) => 16,
        (n, _) => n,
    };
    // `connect_timeout` and `acquire_timeout` are one knob in sqlx (the
    // pool's acquire timeout): see ACQUIRE_TIMEOUT.
    options
        .max_connections(pool_size)
        .min_connections(1)
        .connect_timeout(ACQUIRE_TIMEOUT)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .sqlx_logging(false);
    if is_sqlite {
        // sqlx pings every connection it takes from the pool (one more
        // hand-off to the connection's thread per statement or
        // transaction), to find those a server or a proxy dropped; a
        // connection to a local file is never dropped.
        options.test_before_acquire(false);
        let busy = Duration::from_millis(settings.busy_timeout_ms);
        options.map_sqlx_sqlite_opts(move |opts: SqliteConnectOptions| {
            opts.create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Full)
                .busy_timeout(busy)
                .foreign_keys(true)
                .pragma("temp_store", "memory")
                .pragma("wal_autocheckpoint", SQLITE_CHECKPOINT_PAGES.to_string())
        });
    }
    let peers = if is_sqlite {
        None
    } else {
        bound_postgres(&mut options, &settings.url).await
    };
    let db = Database::connect(options)
        .await
        .with_context(|| format!("connecting to the database ({})", redact_url(&settings.url)))?;
    register_write_gate(&db, Duration::from_millis(settings.busy_timeout_ms.max(1)));
    if let Some(peers) = peers {
        keep_arming(&db, peers);
    }
    Ok(db)
}

// What a database call may cost when the PostgreSQL host vanishes (powered
// off, partitioned, its port blackholed: packets dropped) or freezes (the
// process stopped while its kernel still answers TCP). sqlx bounds none of
// it by itself: it opens a plain `TcpStream` (no keepalive) and has no
// client-side time-out on a query once a connection is handed out, and
// sea-orm's `ConnectOptions` only bounds the pool (`acquire_timeout`;
// `connect_timeout` is the same sqlx knob; `idle_timeout` and `max_lifetime`,
// left at sqlx's 10 and 30 minutes, recycle connections but bound no call).
// What each bound below covers, and what it cannot: with them a vanished
// host holds a call for at most about ten seconds, inside a partner's HTTP
// time-out (the docs' samples use 30 s; an order waits at most 30 s for its
// account actor). A *frozen* server behind a live kernel, on a connection
// already handed out, is bounded by none of them: the proxy in front must
// cut those sessions when its check fails (docs/reliability.md, "PostgreSQL
// failover"), or the call waits until the server resumes.

/// Bounds getting a connection from the pool: waiting for a free one, and
/// opening a new one (TCP connect, startup and authentication, the
/// keepalive setup below) and the liveness ping of an idle one
/// (`test_before_acquire`, sqlx's default). A frozen or vanished host costs
/// a request at most this long at acquire (`PoolTimedOut`, a 500). It cannot
/// bound a statement on a connection already handed out.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// PostgreSQL's `lock_timeout`, set per connection at startup (no round
/// trip): the *server* gives up a wait for a lock held this long, for
/// instance a float row or an Idempotency-Key held by the open transaction
/// of a node that froze. A frozen or vanished server ends no wait: the TCP
/// bounds below and the proxy in front are for that. A database URL that
/// names `lock_timeout` in its `options` keeps its own.
///
/// `statement_timeout` is deliberately not set: on a COMMIT waiting for the
/// synchronous standby it does not fail the commit, it ends the wait with a
/// WARNING ("canceling wait for synchronous replication ... already committed
/// locally") and reports success, so an order would be acknowledged that only
/// the primary holds, and a failover to the standby would lose it.
const LOCK_TIMEOUT: Duration = Duration::from_secs(10);

/// PostgreSQL's `idle_in_transaction_session_timeout`: the server ends a
/// session left inside a transaction this long, so a node that froze or
/// vanished mid-transaction does not hold its row locks (a partner's float,
/// an order's claim) against the other nodes. No transaction here waits on
/// anything but the database, so an idle one is a lost client.
const IDLE_IN_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(30);

/// TCP keepalive on the pool's sockets: after this long without traffic the
/// kernel probes the peer every [`KEEPALIVE_INTERVAL`], so a connection to a
/// host that vanished while it sat idle (or while a statement was answered
/// by nothing) is found dead instead of waiting on the system default of two
/// hours.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(5);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(2);
const KEEPALIVE_PROBES: u32 = 3;

/// `TCP_USER_TIMEOUT`: data sent (a query, a commit) and not acknowledged by
/// the peer's kernel for this long aborts the connection, and it also caps
/// unanswered keepalive probes. Together with keepalive a call on a host
/// whose packets are dropped fails within about ten seconds instead of the
/// kernel's ~15 minutes of retransmissions. Neither sees a *frozen* process
/// whose kernel still acknowledges (SIGSTOP, a proxy in front of a stopped
/// server): HAProxy's `on-marked-down shutdown-sessions` cuts those.
const TCP_USER_TIMEOUT: Duration = Duration::from_secs(10);

/// The PostgreSQL-only bounds: server-side time-outs in the startup options,
/// and TCP keepalive with a user time-out on every socket the pool opens.
/// Returns the database's addresses when keepalive is set up.
async fn bound_postgres(
    options: &mut ConnectOptions,
    url: &str,
) -> Option<Arc<Vec<std::net::SocketAddr>>> {
    let named = |name: &str| url.contains(name);
    let mut server_side = Vec::new();
    if !named("lock_timeout") {
        server_side.push(("lock_timeout", LOCK_TIMEOUT.as_millis()));
    }
    if !named("idle_in_transaction_session_timeout") {
        server_side.push((
            "idle_in_transaction_session_timeout",
            IDLE_IN_TRANSACTION_TIMEOUT.as_millis(),
        ));
    }
    options.map_sqlx_postgres_opts(move |opts: PgConnectOptions| {
        opts.options(server_side.iter().copied())
    });
    // sqlx has no hook on its socket (sqlx-core `net::connect_tcp` opens a
    // plain `tokio::net::TcpStream`), so once a connection is up its socket
    // is found among this process's descriptors by its peer address.
    let peers = database_addresses(url).await;
    if peers.is_empty() {
        return None;
    }
    let peers = Arc::new(peers);
    let hooked = peers.clone();
    options.map_sqlx_postgres_pool_opts(move |pool: PoolOptions<Postgres>| {
        let peers = hooked.clone();
        pool.after_connect(move |_conn, _meta| {
            let peers = peers.clone();
            Box::pin(async move {
                keepalive::arm_sockets_to(&peers);
                Ok(())
            })
        })
    });
    Some(peers)
}

/// Arms, every [`KEEPALIVE_IDLE`] while the pool is open, the database
/// sockets opened without the pool's `after_connect`: the changes listener
/// keeps a pool of its own (`changes::subscribe`) whose connection, opened
/// again after a failover, would otherwise go without keepalive.
fn keep_arming(db: &Db, peers: Arc<Vec<std::net::SocketAddr>>) {
    let DatabaseConnectionType::SqlxPostgresPoolConnection(_) = &db.inner else {
        return;
    };
    let pool = db.get_postgres_connection_pool().clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(KEEPALIVE_IDLE);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while !pool.is_closed() {
            every.tick().await;
            keepalive::arm_sockets_to(&peers);
        }
    });
}

/// The addresses the database URL's host resolves to (none for a Unix
/// socket or a name that does not resolve now: keepalive is then skipped).
async fn database_addresses(url: &str) -> Vec<std::net::SocketAddr> {
    let Ok(opts) = PgConnectOptions::from_str(url) else {
        return Vec::new();
    };
    let host = opts.get_host().trim_matches(|c| c == '[' || c == ']');
    if opts.get_socket().is_some() || host.starts_with('/') {
        return Vec::new();
    }
    match tokio::net::lookup_host((host, opts.get_port())).await {
        Ok(found) => found.collect(),
        Err(err) => {
            tracing::warn!(error = %err, "database host did not resolve: no TCP keepalive");
            Vec::new()
        }
    }
}

/// TCP keepalive and a user time-out on this process's sockets to the
/// database, set from the pool's `after_connect`.
mod keepalive {
    use std::net::SocketAddr;

    /// Arms every socket of this process whose peer is one of `peers` and
    /// whose keepalive is still off: the connection just opened, or any
    /// other opened without the pool's hook (the changes listener's).
    /// Failures are logged and never fail the connection.
    #[cfg(target_os = "linux")]
    pub(super) fn arm_sockets_to(peers: &[SocketAddr]) {
        let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
            return;
        };
        for entry in entries.flatten() {
            let Some(fd) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
                continue;
            };
            let is_socket = std::fs::read_link(entry.path())
                .is_ok_and(|target| target.to_string_lossy().starts_with("socket:"));
            if is_socket
                && sys::peer(fd).is_some_and(|peer| peers.contains(&peer))
                && let Err(err) = sys::arm(fd)
            {
                tracing::warn!(error = %err, "could not set TCP keepalive on a database socket");
            }
        }
    }

    #[cfg(not(target_os = "linux"))]
    pub(super) fn arm_sockets_to(_peers: &[SocketAddr]) {}

    /// The few socket calls needed, straight from the C library (Linux).
    #[cfg(target_os = "linux")]
    mod sys {
        use std::{
            ffi::c_void,
            io,
            net::{Ipv4Addr, Ipv6Addr, SocketAddr},
        };

        use super::super::{
            KEEPALIVE_IDLE, KEEPALIVE_INTERVAL, KEEPALIVE_PROBES, TCP_USER_TIMEOUT,
        };

        unsafe extern "C" {
            fn getpeername(fd: i32, addr: *mut c_void, len: *mut u32) -> i32;
            fn getsockopt(fd: i32, level: i32, name: i32, value: *mut c_void, len: *mut u32)
            -> i32;
            fn setsockopt(fd: i32, level: i32, name: i32, value: *const c_void, len: u32) -> i32;
        }

        const SOL_SOCKET: i32 = 1;
        const SO_KEEPALIVE: i32 = 9;
        const IPPROTO_TCP: i32 = 6;
        const TCP_KEEPIDLE: i32 = 4;
        const TCP_KEEPINTVL: i32 = 5;
        const TCP_KEEPCNT: i32 = 6;
        const TCP_USER_TIMEOUT_OPT: i32 = 18;
        const AF_INET: u16 = 2;
        const AF_INET6: u16 = 10;

        /// The socket's peer, if it is a connected IPv4 or IPv6 socket.
        pub(super) fn peer(fd: i32) -> Option<SocketAddr> {
            let mut buf = [0_u8; 128]; // a sockaddr_storage
            let mut len = buf.len() as u32;
            // SAFETY: `buf` is writable for `len` bytes and getpeername
            // writes at most that many; an fd that is not a socket (or was
            // closed meanwhile) only makes it fail.
            if unsafe { getpeername(fd, buf.as_mut_ptr().cast(), &mut len) } != 0 {
                return None;
            }
            let family = u16::from_ne_bytes([buf[0], buf[1]]);
            let port = u16::from_be_bytes([buf[2], buf[3]]);
            match family {
                AF_INET if len >= 8 => {
                    let ip = Ipv4Addr::new(buf[4], buf[5], buf[6], buf[7]);
                    Some(SocketAddr::new(ip.into(), port))
                }
                AF_INET6 if len >= 24 => {
                    let octets: [u8; 16] = buf[8..24].try_into().ok()?;
                    Some(SocketAddr::new(Ipv6Addr::from(octets).into(), port))
                }
                _ => None,
            }
        }

        /// Keepalive on, with the module's timings, unless already on.
        pub(super) fn arm(fd: i32) -> io::Result<()> {
            if get(fd, SOL_SOCKET, SO_KEEPALIVE)? != 0 {
                return Ok(());
            }
            let secs = |d: std::time::Duration| d.as_secs() as i32;
            set(fd, IPPROTO_TCP, TCP_KEEPIDLE, secs(KEEPALIVE_IDLE))?;
            set(fd, IPPROTO_TCP, TCP_KEEPINTVL, secs(KEEPALIVE_INTERVAL))?;
            set(fd, IPPROTO_TCP, TCP_KEEPCNT, KEEPALIVE_PROBES as i32)?;
            let user_timeout = TCP_USER_TIMEOUT.as_millis() as i32;
            set(fd, IPPROTO_TCP, TCP_USER_TIMEOUT_OPT, user_timeout)?;
            set(fd, SOL_SOCKET, SO_KEEPALIVE, 1)
        }

        fn get(fd: i32, level: i32, name: i32) -> io::Result<i32> {
            let mut value = 0_i32;
            let mut len = size_of::<i32>() as u32;
            // SAFETY: `value` is a writable int and `len` says so.
            let rc = unsafe { getsockopt(fd, level, name, (&raw mut value).cast(), &mut len) };
            if rc == 0 {
                Ok(value)
            } else {
                Err(io::Error::last_os_error())
            }
        }

        fn set(fd: i32, level: i32, name: i32, value: i32) -> io::Result<()> {
            // SAFETY: `value` is a readable int and the length says so;
            // setting an option changes nothing but that socket's option.
            let rc = unsafe {
                setsockopt(
                    fd,
                    level,
                    name,
                    (&raw const value).cast(),
                    size_of::<i32>() as u32,
                )
            };
            if rc == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        }
    }
}

/// Applies every pending migration.
#[tracing::instrument(skip_all)]
pub async fn migrate(db: &Db) -> anyhow::Result<()> {
    Migrator::up(db, None).await.context("applying migrations")
}

/// A cheap round trip, for the health probe.
pub async fn ping(db: &Db) -> Result<(), DbErr> {
    db.ping().await
}

fn sqlite_file(db: &Db) -> Option<PathBuf> {
    match &db.inner {
        DatabaseConnectionType::SqlxSqlitePoolConnection(_) => Some(
            db.get_sqlite_connection_pool()
                .connect_options()
                .get_filename()
                .to_path_buf(),
        ),
        _ => None,
    }
}

/// Whether an error is a unique-constraint violation (a lost race or a
/// duplicate), which callers turn into a 4xx.
pub fn is_unique_violation(err: &DbErr) -> bool {
    matches!(err.sql_err(), Some(SqlErr::UniqueConstraintViolation(_)))
}

fn ensure_sqlite_folder(url: &str) -> anyhow::Result<()> {
    let rest = url.trim_start_matches("sqlite:").trim_start_matches("//");
    let path = rest.split('?').next().unwrap_or_default();
    if path.is_empty() || path == ":memory:" {
        return Ok(());
    }
    // Validate the URL the way the driver will read it.
    SqliteConnectOptions::from_str(url).context("invalid configuration: `database.url`")?;
    if let Some(parent) = Path::new(path)
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
    {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating the database folder {}", parent.display()))?;
    }
    Ok(())
}

/// The URL without its password, for messages.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let credentials = &url[scheme_end + 3..at];
            let user = credentials.split(':').next().unwrap_or_default();
            format!("{}{}@{}", &url[..scheme_end + 3], user, &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use sea_orm::{ConnectionTrait, DbBackend, Statement};
    use writes::write_gate;

    /// A fresh SQLite file opened as the service opens it; the folder goes
    /// with the first value.
    pub(super) async fn sqlite_file_db(name: &str, connections: u32) -> (tempfile::TempDir, Db) {
        sqlite_file_db_waiting(name, connections, 5_000).await
    }

    /// Holds that SQLite's planner, on a new migrated file, finds the rows of
    /// `statement` through `index` (as `EXPLAIN QUERY PLAN` names it, with
    /// its search) and never through `avoided`.
    pub(super) async fn assert_planned_through(
        statement: sea_orm::Statement,
        index: &str,
        avoided: &str,
    ) {
        let (_dir, db) = sqlite_file_db("plan.db", 1).await;
        migrate(&db).await.unwrap();
        let plan = query_plan(&db, statement).await;
        assert!(plan.contains(index), "{plan}");
        assert!(!plan.contains(avoided), "{plan}");
    }

    /// What `TEST_DATABASE_OPTIONS` adds to the `CREATE DATABASE` of each
    /// PostgreSQL database a test makes (a locale of its own); nothing
    /// unless set.
    fn database_options() -> String {
        std::env::var("TEST_DATABASE_OPTIONS").unwrap_or_default()
    }

    /// Runs `check` on a migrated PostgreSQL database of its own, dropped
    /// after (whether `check` passed or not), when `TEST_DATABASE_URL` names
    /// a server; otherwise says it skipped. The database is made with what
    /// `TEST_DATABASE_OPTIONS` says, if anything (a locale of its own).
    pub(super) async fn on_own_postgres<F, Fut>(prefix: &str, check: F)
    where
        F: FnOnce(Db) -> Fut,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let Some(base) = std::env::var("TEST_DATABASE_URL")
            .ok()
            .filter(|url| url.starts_with("postgres"))
        else {
            eprintln!("skipped: needs PostgreSQL (TEST_DATABASE_URL)");
            return;
        };
        let name = format!("{prefix}_{}", uuid::Uuid::new_v4().simple());
        let admin = Database::connect(&base).await.unwrap();
        let options = database_options();
        admin
            .execute_unprepared(&format!("CREATE DATABASE \"{name}\" {options}"))
            .await
            .unwrap();
        let (server, _) = base.rsplit_once('/').unwrap();
        let db = Database::connect(&format!("{server}/{name}"))
            .await
            .unwrap();
        migrate(&db).await.unwrap();
        let checked = tokio::spawn(check(db.clone())).await;
        db.close().await.unwrap();
        admin
            .execute_unprepared(&format!("DROP DATABASE \"{name}\" WITH (FORCE)"))
            .await
            .unwrap();
        checked.unwrap();
    }

    /// What SQLite's planner does with `statement`: the details of its
    /// `EXPLAIN QUERY PLAN`, one step per line.
    async fn query_plan(db: &Db, statement: sea_orm::Statement) -> String {
        let values = statement.values.map(|values| values.0).unwrap_or_default();
        let explain = sea_orm::Statement::from_sql_and_values(
            DbBackend::Sqlite,
            format!("EXPLAIN QUERY PLAN {}", statement.sql),
            values,
        );
        let rows = db.query_all_raw(explain).await.unwrap();
        let steps: Vec<String> = rows
            .iter()
            .map(|row| row.try_get::<String>("", "detail").unwrap())
            .collect();
        steps.join("\n")
    }

    /// A partner `ptr_1` with `count` live orders `ord_1`, `ord_2`, … of
    /// `quantity` units each, processing, written straight into PostgreSQL.
    pub(super) async fn processing_orders(db: &Db, count: u32, quantity: u32) {
        db.execute_unprepared(&format!(
            "INSERT INTO partners (id, name, slug, status, tier, created_at, updated_at) \
             VALUES ('ptr_1', 'P', 'p', 'live', 'gold', now(), now()); \
             INSERT INTO orders (id, partner_id, mode, idempotency_key, plan_id, quantity, \
             unit_price_cents, total_cents, list_unit_cents, price_source, metadata, status, \
             refunded_cents, attempts, created_at) \
             SELECT 'ord_' || i, 'ptr_1', 'live', 'k' || i, 'pl_x', {quantity}, 100, \
             100 * {quantity}, 100, 'list', '{{}}', 'processing', 0, 0, now() \
             FROM generate_series(1, {count}) AS i"
        ))
        .await
        .unwrap();
    }

    /// The one value a PostgreSQL query answers.
    pub(super) async fn one_value<C: ConnectionTrait, T: sea_orm::TryGetable>(
        db: &C,
        sql: &str,
    ) -> T {
        let row = db
            .query_one_raw(Statement::from_string(DbBackend::Postgres, sql))
            .await
            .unwrap()
            .expect("a row");
        row.try_get_by_index(0).unwrap()
    }

    /// What PostgreSQL's planner does with `statement` on `db`: its
    /// `EXPLAIN`, one line per step.
    pub(super) async fn postgres_plan<C: ConnectionTrait>(
        db: &C,
        statement: &sea_orm::Statement,
    ) -> String {
        let explain = sea_orm::Statement::from_sql_and_values(
            DbBackend::Postgres,
            format!("EXPLAIN {}", statement.sql),
            statement.values.clone().map(|v| v.0).unwrap_or_default(),
        );
        let plan: Vec<String> = db
            .query_all_raw(explain)
            .await
            .unwrap()
            .iter()
            .map(|row| row.try_get_by_index::<String>(0).unwrap())
            .collect();
        plan.join("\n")
    }

    /// The same, with its own busy timeout (which bounds the gate's wait too).
    async fn sqlite_file_db_waiting(
        name: &str,
        connections: u32,
        busy_timeout_ms: u64,
    ) -> (tempfile::TempDir, Db) {
        let dir = tempfile::tempdir().unwrap();
        let settings = DatabaseSettings {
            url: format!("sqlite://{}/{name}", dir.path().display()),
            max_connections: connections,
            busy_timeout_ms,
            probe_timeout_ms: 1_000,
        };
        let db = connect(&settings).await.unwrap();
        (dir, db)
    }

    #[tokio::test]
    async fn sqlite_writers_of_one_file_take_turns_on_the_gate() {
        let (_dir, db) = sqlite_file_db("gate.db", 4).await;
        let gate = write_gate(&db).expect("a SQLite file has a gate").lock;
        let first = begin_write(&db).await.unwrap();
        assert!(gate.try_lock().is_err(), "the first writer holds the turn");
        let second = tokio::spawn({
            let db = db.clone();
            async move { begin_write(&db).await.map(|txn| txn.commit()) }
        });
        first.commit().await.unwrap();
        let next = tokio::time::timeout(Duration::from_secs(10), second)
            .await
            .expect("the second writer gets its turn once the first commits")
            .unwrap()
            .unwrap();
        next.await.unwrap();
        assert!(gate.try_lock().is_ok(), "the turn is free once both ended");
    }

    #[tokio::test]
    async fn the_gate_counts_its_turns_and_how_long_they_held_it() {
        let (_dir, db) = sqlite_file_db("gate-use.db", 2).await;
        let before = write_gate_use(&db).expect("a SQLite file's gate is counted");
        let txn = begin_write(&db).await.unwrap();
        let held_from = std::time::Instant::now();
        txn.execute_unprepared("CREATE TABLE marks (n INTEGER NOT NULL)")
            .await
            .unwrap();
        let held_at_least = held_from.elapsed();
        txn.commit().await.unwrap();
        let after = write_gate_use(&db).unwrap();
        assert_eq!(after.turns, before.turns + 1, "one turn ended");
        assert!(
            after.held - before.held >= held_at_least,
            "counted {:?}, held at least {held_at_least:?}",
            after.held - before.held
        );
    }

    #[tokio::test]
    async fn a_write_alone_queues_on_the_gate_and_never_reaches_sqlite_s_lock() {
        let (_dir, db) = sqlite_file_db_waiting("alone.db", 4, 300).await;
        db.execute_unprepared("CREATE TABLE marks (n INTEGER NOT NULL)")
            .await
            .unwrap();
        let insert = |n: i64| {
            let db = db.clone();
            async move {
                let sql = format!("INSERT INTO marks (n) VALUES ({n})");
                db.execute_unprepared(&sql).await.map(|_| ())
            }
        };
        let held = begin_write(&db).await.unwrap();
        held.execute_unprepared("INSERT INTO marks (n) VALUES (1)")
            .await
            .unwrap();
        // While a transaction holds the turn, the write waits at the gate and
        // gives up with the gate's error: it never went to SQLite's lock
        // (whose refusal, after sleeping in the busy handler, would be a
        // plain `database is locked`).
        let refused = write_alone(&db, insert(2)).await.unwrap_err();
        assert!(
            refused.to_string().contains("(write queue)"),
            "refused at the gate, not by SQLite: {refused}"
        );
        held.commit().await.unwrap();
        write_alone(&db, insert(3))
            .await
            .expect("its turn comes once the transaction ended");
        let marks: Vec<i64> = db
            .query_all_raw(sea_orm::Statement::from_string(
                DbBackend::Sqlite,
                "SELECT n FROM marks ORDER BY n",
            ))
            .await
            .unwrap()
            .iter()
            .map(|row| row.try_get_by_index::<i64>(0).unwrap())
            .collect();
        assert_eq!(marks, vec![1, 3], "the refused write wrote nothing");
    }

    #[tokio::test]
    async fn sqlite_connections_run_in_wal_mode_with_full_sync_and_no_memory_map() {
        let (_dir, db) = sqlite_file_db("pragmas.db", 2).await;
        // The one value a query answers, as text.
        let scalar = |sql: String| {
            let db = db.clone();
            async move {
                let row = db
                    .query_one_raw(sea_orm::Statement::from_string(DbBackend::Sqlite, sql))
                    .await
                    .unwrap()
                    .unwrap();
                row.try_get_by_index::<i64>(0)
                    .map(|n| n.to_string())
                    .or_else(|_| row.try_get_by_index::<String>(0))
                    .unwrap()
            }
        };
        let pragma = |name: &str| scalar(format!("PRAGMA {name}"));
        assert_eq!(pragma("journal_mode").await, "wal");
        assert_eq!(pragma("synchronous").await, "2", "FULL");
        assert_eq!(pragma("mmap_size").await, "0");
        assert_eq!(pragma("temp_store").await, "2", "MEMORY");
        // Built with the planner stability guarantee (.cargo/config.toml):
        // a statement with a bound LIMIT is not parsed again at every use.
        let used = |option: &str| scalar(format!("SELECT sqlite_compileoption_used('{option}')"));
        assert_eq!(used("ENABLE_QPSG").await, "1");
        // And without the two process-wide locks of the bundled build: one
        // shared page cache for every connection, allocation statistics.
        assert_eq!(used("ENABLE_MEMORY_MANAGEMENT").await, "0");
        assert_eq!(used("DEFAULT_MEMSTATUS=0").await, "1");
        assert_eq!(
            pragma("wal_autocheckpoint").await,
            SQLITE_CHECKPOINT_PAGES.to_string()
        );
        assert!(
            !db.get_sqlite_connection_pool()
                .options()
                .get_test_before_acquire(),
            "a connection to the file is not pinged each time it is taken"
        );
    }

    /// The databases the tests make follow `TEST_DATABASE_OPTIONS`: under
    /// a linguistic locale (ICU's `en-US`, glibc's `en_US.UTF-8`: CI's second
    /// PostgreSQL pass) `ord_a` sorts before `ord_B`; under `C` or
    /// `C.UTF-8` bytes decide, and it sorts after.
    #[tokio::test]
    async fn test_databases_are_made_with_the_options_asked_for() {
        let options = database_options();
        let linguistic = options.contains("en-US") || options.contains("en_US");
        on_own_postgres("esim_made_as_asked", |db| async move {
            let lower_first: bool = one_value(&db, "SELECT 'ord_a' < 'ord_B'").await;
            assert_eq!(lower_first, linguistic, "options: {options:?}");
        })
        .await;
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact_url("postgres://app:hunter2@db:5432/esim"),
            "postgres://app@db:5432/esim"
        );
        assert_eq!(redact_url("sqlite://data/x.db"), "sqlite://data/x.db");
    }
}
