//! The accounts directory: finds or spawns a partner's account actor, links
//! it to the `AccountsSupervisor`, restarts it when it fails (its state is
//! reloaded from the database in `pre_start`), and passivates idle ones with
//! `drain` so nothing queued is dropped.

mod money;

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicI64, AtomicU32, AtomicUsize, Ordering},
    },
    time::Duration,
};

use chrono::{DateTime, Utc};
use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, SupervisionEvent, rpc::CallResult};
use serde::Serialize;

use super::{
    account::{AccountActor, AccountArgs, AccountError, AccountMsg, Decision, PlaceOrder},
    log_lifecycle,
    provisioning::ProvisioningHandle,
};
use crate::{
    domain::{order::FailureCode, time},
    limits::unix_now_millis,
    store::Db,
    sync::lock,
};

/// A sweep that passivates at least this many actors hands freed memory back
/// to the operating system.
const TRIM_AFTER_PASSIVATING: usize = 256;

/// Returns memory freed by passivated actors to the operating system. glibc
/// keeps freed heap in its arenas; without this the resident size after a
/// burst of partners never comes down.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn release_freed_memory() {
    unsafe extern "C" {
        fn malloc_trim(pad: usize) -> i32;
    }
    // SAFETY: malloc_trim only walks glibc's own allocator state; it takes no
    // pointer and is safe to call from any thread at any time.
    unsafe {
        malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn release_freed_memory() {}

/// How long a caller waits for its account actor.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// One live account actor.
struct Entry {
    actor: ActorRef<AccountMsg>,
    started_at: DateTime<Utc>,
    /// Messages sent and not yet answered.
    queued: Arc<AtomicUsize>,
    /// Unix ms of the last message.
    last_used: Arc<AtomicI64>,
}

/// Shared between handlers and the supervisor.
struct Directory {
    db: Db,
    provisioning: Option<ProvisioningHandle>,
    /// What the supplier can take, shared by every account actor.
    admission: Option<Arc<super::admission::Admission>>,
    /// The running account actors by partner id, looked up by every order
    /// and balance request: hashed with foldhash rather than SipHash, as the
    /// ids are the service's own (a key's partner), never a caller's text.
    entries: Mutex<foldhash::HashMap<String, Entry>>,
    /// The partner of every running account actor, by actor id. Kept apart
    /// from `entries` (which a caller may clear when an actor stops answering)
    /// so the supervisor can always name the partner of a failed actor.
    owners: Mutex<HashMap<ActorId, String>>,
    restarts: Mutex<HashMap<String, u32>>,
    /// One lock per partner whose actor is being started, so two callers do
    /// not start two actors for one partner while other partners' starts go
    /// on (an actor's start reads the database).
    starting: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Set at shutdown: no account actor is started after it.
    closing: std::sync::atomic::AtomicBool,
    supervisor: Mutex<Option<ActorRef<SupervisorMsg>>>,
    idle_after: Duration,
    batching: bool,
    writer: Option<super::writer::CommitWriter>,
    total_restarts: AtomicU32,
    /// The account actors running (each keeps its share of remembered keys).
    live: super::account::LiveAccounts,
}

/// A handle on the directory (cheap to clone).
#[derive(Clone)]
pub struct Accounts(Arc<Directory>);

/// One row of `GET /operator/v1/actors`.
#[derive(Debug, Serialize)]
pub struct ActorInfo {
    pub kind: &'static str,
    pub partner_id: Option<String>,
    pub mailbox_len: usize,
    pub restarts: u32,
    pub started_at: DateTime<Utc>,
}

/// What [`Accounts::load`] reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AccountsLoad {
    /// Account actors running.
    pub live: usize,
    /// Messages sent to them and not yet answered.
    pub queued: usize,
    /// The most waiting at one actor.
    pub max_queued: usize,
}

impl Accounts {
    /// Starts the supervisor; account actors start on first use.
    pub async fn start(
        db: Db,
        idle_after: Duration,
        batching: bool,
        writer: Option<super::writer::CommitWriter>,
        provisioning: Option<ProvisioningHandle>,
        admission: Option<Arc<super::admission::Admission>>,
    ) -> anyhow::Result<Self> {
        let directory = Arc::new(Directory {
            db,
            provisioning,
            admission,
            entries: Mutex::default(),
            owners: Mutex::new(HashMap::new()),
            restarts: Mutex::new(HashMap::new()),
            starting: Mutex::new(HashMap::new()),
            closing: std::sync::atomic::AtomicBool::new(false),
            supervisor: Mutex::new(None),
            idle_after,
            batching,
            writer,
            total_restarts: AtomicU32::new(0),
            live: Default::default(),
        });
        let (supervisor, _) = Actor::spawn(None, AccountsSupervisor, directory.clone()).await?;
        *lock(&directory.supervisor) = Some(supervisor);
        Ok(Self(directory))
    }

    /// Where provisioning is, if it runs on this node.
    pub fn provisioning(&self) -> Option<&ProvisioningHandle> {
        self.0.provisioning.as_ref()
    }

    /// Sends the partner's actor one request and waits for its answer. If the
    /// actor stops or fails with the message, its outcome is unknown here:
    /// the caller gets a 500 and retries (an order with the same key, which
    /// replays whatever was committed), and the directory forgets the actor.
    async fn ask<T: Send + 'static>(
        &self,
        partner_id: &str,
        build: impl FnOnce(ractor::RpcReplyPort<T>) -> AccountMsg,
    ) -> Result<T, AccountError> {
        let (actor, queued, _) = self.actor_for(partner_id).await?;
        queued.fetch_add(1, Ordering::Relaxed);
        let answer = actor.call(build, Some(CALL_TIMEOUT)).await;
        queued.fetch_sub(1, Ordering::Relaxed);
        match answer {
            Ok(CallResult::Success(value)) => Ok(value),
            _ => {
                self.forget(partner_id, &actor);
                Err(AccountError::internal(format_args!(
                    "account actor of {partner_id} did not answer"
                )))
            }
        }
    }

    /// Asks the partner's actor to decide an order.
    pub async fn place_order(
        &self,
        partner_id: &str,
        request: PlaceOrder,
    ) -> Result<Decision, AccountError> {
        let request = Box::new(request);
        self.ask(partner_id, |reply| AccountMsg::PlaceOrder(request, reply))
            .await?
    }

    /// Asks the partner's actor to refund undelivered units of an order.
    pub async fn refund(
        &self,
        partner_id: &str,
        order_id: &str,
        unit_ids: Vec<String>,
        failure: FailureCode,
    ) -> Result<(), String> {
        let order_id = order_id.to_owned();
        self.ask(partner_id, |reply| AccountMsg::Refund {
            order_id,
            unit_ids,
            failure,
            reply,
        })
        .await
        .map_err(|e| e.to_string())?
    }

    /// Fault injection: makes the partner's actor fail.
    pub async fn fail(&self, partner_id: &str) -> Result<(), AccountError> {
        let (actor, _, _) = self.actor_for(partner_id).await?;
        actor
            .cast(AccountMsg::Fail)
            .map_err(|_| AccountError::internal("actor gone"))
    }

    /// Live actors, for operators.
    pub fn list(&self) -> Vec<ActorInfo> {
        let restarts = lock(&self.0.restarts).clone();
        let mut rows: Vec<ActorInfo> = lock(&self.0.entries)
            .iter()
            .map(|(partner_id, entry)| ActorInfo {
                kind: "account",
                partner_id: Some(partner_id.clone()),
                mailbox_len: entry.queued.load(Ordering::Relaxed),
                restarts: restarts.get(partner_id).copied().unwrap_or(0),
                started_at: entry.started_at,
            })
            .collect();
        rows.sort_by(|a, b| a.partner_id.cmp(&b.partner_id));
        rows
    }

    /// How many account actors run and how much waits at them, from the
    /// same entries as [`Self::list`] without copying them.
    pub fn load(&self) -> AccountsLoad {
        let entries = lock(&self.0.entries);
        let mut load = AccountsLoad {
            live: entries.len(),
            ..AccountsLoad::default()
        };
        for entry in entries.values() {
            let queued = entry.queued.load(Ordering::Relaxed);
            load.queued += queued;
            load.max_queued = load.max_queued.max(queued);
        }
        load
    }

    /// Restarts of account actors since this process started.
    pub fn total_restarts(&self) -> u32 {
        self.0.total_restarts.load(Ordering::Relaxed)
    }

    /// Stops every account actor after what is queued.
    /// Drains every account actor (each finishes what is queued), then
    /// stops the supervisor; waits up to `patience` for each step.
    pub async fn drain_all(&self, patience: Duration) {
        self.0.closing.store(true, Ordering::Release);
        let actors: Vec<ActorRef<AccountMsg>> = lock(&self.0.entries)
            .values()
            .map(|entry| entry.actor.clone())
            .collect();
        let drains = actors
            .iter()
            .map(|actor| actor.drain_and_wait(Some(patience)));
        futures::future::join_all(drains).await;
        let supervisor = lock(&self.0.supervisor).clone();
        if let Some(supervisor) = supervisor {
            let _ = supervisor
                .stop_and_wait(Some("shutdown".into()), Some(patience))
                .await;
        }
    }

    async fn actor_for(
        &self,
        partner_id: &str,
    ) -> Result<(ActorRef<AccountMsg>, Arc<AtomicUsize>, Arc<AtomicI64>), AccountError> {
        if let Some(found) = self.lookup(partner_id) {
            return Ok(found);
        }
        // Boxed: starting an actor is a large state machine, and every
        // request's future would otherwise carry (and copy) it.
        Box::pin(self.start_actor(partner_id)).await
    }

    /// Starts the partner's actor (unless another request just did) and
    /// returns it: the first use of an account on this node.
    async fn start_actor(
        &self,
        partner_id: &str,
    ) -> Result<(ActorRef<AccountMsg>, Arc<AtomicUsize>, Arc<AtomicI64>), AccountError> {
        let starting = starting_lock(&self.0, partner_id).lock_owned().await;
        let spawned = match self.lookup(partner_id) {
            Some(_) => Ok(()),
            None => spawn_account(&self.0, partner_id, "first use").await,
        };
        drop(starting);
        forget_starting(&self.0, partner_id);
        spawned
            .map_err(|e| AccountError::internal(format_args!("spawning the account actor: {e}")))?;
        self.lookup(partner_id)
            .ok_or_else(|| AccountError::internal("account actor vanished at start"))
    }

    fn lookup(
        &self,
        partner_id: &str,
    ) -> Option<(ActorRef<AccountMsg>, Arc<AtomicUsize>, Arc<AtomicI64>)> {
        let entries = lock(&self.0.entries);
        let entry = entries.get(partner_id)?;
        entry
            .last_used
            .store(unix_now_millis() as i64, Ordering::Relaxed);
        Some((
            entry.actor.clone(),
            entry.queued.clone(),
            entry.last_used.clone(),
        ))
    }

    fn forget(&self, partner_id: &str, actor: &ActorRef<AccountMsg>) {
        let mut entries = lock(&self.0.entries);
        if entries
            .get(partner_id)
            .is_some_and(|e| e.actor.get_id() == actor.get_id())
        {
            entries.remove(partner_id);
        }
    }
}

/// The start lock of one partner's actor (created on demand).
fn starting_lock(directory: &Directory, partner_id: &str) -> Arc<tokio::sync::Mutex<()>> {
    lock(&directory.starting)
        .entry(partner_id.to_owned())
        .or_default()
        .clone()
}

/// Drops a partner's start lock once nobody holds or waits on it (clones
/// are made and counted under the map's mutex, so a waiter always keeps it).
fn forget_starting(directory: &Directory, partner_id: &str) {
    let mut starting = lock(&directory.starting);
    if starting
        .get(partner_id)
        .is_some_and(|gate| Arc::strong_count(gate) == 1)
    {
        starting.remove(partner_id);
    }
}

async fn spawn_account(
    directory: &Arc<Directory>,
    partner_id: &str,
    reason: &str,
) -> anyhow::Result<()> {
    if directory.closing.load(Ordering::Acquire) {
        anyhow::bail!("the service is shutting down");
    }
    let supervisor = lock(&directory.supervisor)
        .clone()
        .ok_or_else(|| anyhow::anyhow!("the accounts supervisor is not running"))?;
    let args = AccountArgs {
        partner_id: partner_id.to_owned(),
        db: directory.db.clone(),
        provisioning: directory.provisioning.clone(),
        max_batch: if directory.batching {
            super::account::MAX_BATCH
        } else {
            1
        },
        writer: directory.writer.clone(),
        admission: directory.admission.clone(),
        live: directory.live.clone(),
    };
    let (actor, _) = Actor::spawn_linked(None, AccountActor, args, supervisor.get_cell()).await?;
    lock(&directory.owners).insert(actor.get_id(), partner_id.to_owned());
    lock(&directory.entries).insert(
        partner_id.to_owned(),
        Entry {
            actor,
            started_at: time::now(),
            queued: Arc::new(AtomicUsize::new(0)),
            last_used: Arc::new(AtomicI64::new(unix_now_millis() as i64)),
        },
    );
    log_lifecycle("account", Some(partner_id), "started", reason);
    Ok(())
}

/// Messages of the supervisor.
enum SupervisorMsg {
    /// Passivate account actors idle for longer than the configured time.
    SweepIdle,
}

/// Parent of every account actor.
struct AccountsSupervisor;

impl AccountsSupervisor {
    /// The partner whose actor this cell was; forgets the cell.
    fn partner_of(directory: &Directory, cell: &ractor::ActorCell) -> Option<String> {
        lock(&directory.owners).remove(&cell.get_id())
    }

    /// Removes the partner's entry if it is still this cell's.
    fn remove_entry(directory: &Directory, partner: &str, cell: &ractor::ActorCell) {
        let mut entries = lock(&directory.entries);
        if entries
            .get(partner)
            .is_some_and(|e| e.actor.get_id() == cell.get_id())
        {
            entries.remove(partner);
        }
    }
}

impl Actor for AccountsSupervisor {
    type Msg = SupervisorMsg;
    type State = Arc<Directory>;
    type Arguments = Arc<Directory>;

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        _state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        log_lifecycle("accounts_supervisor", None, "stopped", "shutdown");
        Ok(())
    }

    async fn pre_start(
        &self,
        myself: ActorRef<SupervisorMsg>,
        directory: Arc<Directory>,
    ) -> Result<Arc<Directory>, ActorProcessingErr> {
        let every = (directory.idle_after / 4).max(Duration::from_secs(1));
        let cell = myself.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                if cell.cast(SupervisorMsg::SweepIdle).is_err() {
                    return;
                }
            }
        });
        log_lifecycle("accounts_supervisor", None, "started", "service start");
        Ok(directory)
    }

    async fn handle(
        &self,
        _myself: ActorRef<SupervisorMsg>,
        message: SupervisorMsg,
        directory: &mut Arc<Directory>,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            SupervisorMsg::SweepIdle => {
                let cutoff = unix_now_millis() as i64 - directory.idle_after.as_millis() as i64;
                let mut entries = lock(&directory.entries);
                let idle: Vec<String> = entries
                    .iter()
                    .filter(|(_, e)| {
                        e.last_used.load(Ordering::Relaxed) < cutoff
                            && e.queued.load(Ordering::Relaxed) == 0
                    })
                    .map(|(partner, _)| partner.clone())
                    .collect();
                let passivated = idle.len();
                for partner in idle {
                    if let Some(entry) = entries.remove(&partner) {
                        // drain, not stop: what is queued still gets answered.
                        let _ = entry.actor.drain();
                        log_lifecycle("account", Some(&partner), "passivating", "idle");
                    }
                }
                drop(entries);
                if passivated >= TRIM_AFTER_PASSIVATING {
                    release_freed_memory();
                }
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<SupervisorMsg>,
        event: SupervisionEvent,
        directory: &mut Arc<Directory>,
    ) -> Result<(), ActorProcessingErr> {
        match event {
            SupervisionEvent::ActorTerminated(cell, _, _) => {
                let partner = Self::partner_of(directory, &cell);
                // The actor logs its own stop (post_stop).
                if let Some(partner) = &partner {
                    Self::remove_entry(directory, partner, &cell);
                }
            }
            SupervisionEvent::ActorFailed(cell, error) => {
                let Some(partner) = Self::partner_of(directory, &cell) else {
                    log_lifecycle("account", None, "failed", &error.to_string());
                    return Ok(());
                };
                log_lifecycle("account", Some(&partner), "failed", &error.to_string());
                Self::remove_entry(directory, &partner, &cell);
                *lock(&directory.restarts)
                    .entry(partner.clone())
                    .or_insert(0) += 1;
                directory.total_restarts.fetch_add(1, Ordering::Relaxed);
                let directory = directory.clone();
                // Restart outside the supervisor's turn so its mailbox keeps moving.
                tokio::spawn(async move {
                    let starting = starting_lock(&directory, &partner).lock_owned().await;
                    let running = lock(&directory.entries).contains_key(&partner);
                    let spawned = match running {
                        true => None,
                        false => {
                            Some(spawn_account(&directory, &partner, "restart after failure").await)
                        }
                    };
                    drop(starting);
                    forget_starting(&directory, &partner);
                    let Some(spawned) = spawned else { return };
                    match spawned {
                        Ok(()) => {
                            crate::metrics::actor_restarted("account");
                            log_lifecycle(
                                "account",
                                Some(&partner),
                                "restarted",
                                "state reloaded from the database",
                            )
                        }
                        Err(err) => log_lifecycle(
                            "account",
                            Some(&partner),
                            "failed",
                            &format!("restart failed: {err}"),
                        ),
                    }
                });
            }
            SupervisionEvent::ActorStarted(_) | SupervisionEvent::ProcessGroupChanged(_) => {}
        }
        Ok(())
    }
}
