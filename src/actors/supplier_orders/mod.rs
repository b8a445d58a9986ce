//! Supplier orders on this node: the placer that gathers pending units of
//! many orders (and partners) into supplier orders, and one driver per
//! supplier order that places it and waits for its profiles.
//!
//! A supplier order is written down with the units it carries before the
//! supplier is called ([`store::supplier_orders::open`]); its id is the
//! supplier's `transactionId`. Its driver then:
//!
//! 1. places it with the supplier it was written down for (the first of
//!    `suppliers.route` that sells the plan and is in the route now),
//!    retrying transient failures with capped backoff under the same
//!    transaction id until the supplier answers an order number, refuses, or
//!    the deadline leaves only the time to place and allocate. For a supplier
//!    without an idempotency key (Airalo) every placement that may repeat an
//!    earlier one is preceded by a lookup of the order by its transaction id.
//!    When the supplier will certainly not deliver (a refusal, a request that
//!    never left, its breaker open before anything was sent, or a lookup
//!    proving nothing was taken) the units are handed to a new supplier order
//!    at the next supplier of the route that sells the plan
//!    ([`store::supplier_orders::hand_over`]); only when none is left are
//!    they refunded;
//! 2. waits for the profiles: woken by the supplier's `ORDER_STATUS`
//!    webhook ([`SupplierOrders::wake`]), or polling with backoff as the
//!    fallback.
//!
//! Every order pass that carries units in it awaits the same driver, and
//! deals itself the profiles of its own units: the carried units sorted by
//! id get the profiles sorted by ICCID, one each, so any node dealing the
//! same supplier order deals it the same way.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use entities::supplier_order;
use tokio::sync::{Notify, mpsc, oneshot, watch};

mod driver;

use driver::drive;

use crate::{
    catalogue::Catalogue,
    domain::{
        order::FailureCode,
        partner::Mode,
        states::SupplierOrderStatus,
        supplier::{Packages, SupplierName},
        time,
    },
    store::{self, Db, inline_write::InlineWriter, supplier_orders as rows},
    supplier::{Profile, Supplier, set::SupplierSet},
    sync::lock,
};

/// What the supplier orders need.
#[derive(Clone)]
pub struct SupplierOrdersArgs {
    pub db: Db,
    /// The supplier orders' bookkeeping writes: on PostgreSQL a few
    /// connections of their own ([`crate::store::kept`]), else the pool.
    pub writes: store::WriterDb,
    /// On a SQLite file, the connection that writes supplier orders down on
    /// the caller's thread ([`crate::store::inline_write`]).
    pub inline: Option<Arc<InlineWriter>>,
    /// The live suppliers, their route and breakers.
    pub live: Arc<SupplierSet>,
    pub sandbox: Arc<dyn Supplier>,
    /// The plans' packages at each supplier.
    pub catalogue: Arc<Catalogue>,
    /// Most units one live supplier order carries (sandbox orders carry one,
    /// so that each sandbox fixture unit keeps its own fate).
    pub batch_size: usize,
    /// How long the placer waits for more units before writing supplier
    /// orders down (longer while every placement slot is busy).
    pub batch_window: Duration,
    /// Pause before the first placement retry, doubled on each further one
    /// up to `max_retry_backoff`.
    pub retry_backoff: Duration,
    pub max_retry_backoff: Duration,
    /// Time kept before the deadline to place and allocate: transient
    /// failures are retried until only this much is left.
    pub reserve: Duration,
    /// First pause between allocation polls; doubled up to `max_poll_interval`.
    pub poll_interval: Duration,
    pub max_poll_interval: Duration,
    /// Longest a supplier order may take, from being written down to its
    /// profiles, before its undelivered units are refunded.
    pub deadline: Duration,
    pub node_id: Arc<str>,
}

/// How a supplier order ended, as its carriers see it.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// The profiles allocated, with the units they are dealt to.
    Profiles(Arc<Delivered>),
    /// Nothing will be delivered.
    Failed { code: FailureCode, reason: String },
    /// Not settled now (the database could not be reached): try again later.
    Later(String),
}

/// What a supplier order delivered, read once for all its carriers.
#[derive(Debug)]
pub struct Delivered {
    /// The supplier that delivered them (`sandbox` for sandbox orders).
    pub supplier: String,
    /// The profiles, sorted by ICCID (fewer than the units only if the
    /// deadline passed first).
    pub profiles: Vec<Profile>,
    /// The units it carries, each with its seat: its place among their ids
    /// sorted, and the n-th seat gets the n-th profile. A map, so that each
    /// of a delivery's orders finds its units' seats without reading the
    /// whole list (which made dealing a large supplier order quadratic);
    /// hashed with foldhash, as the ids are the service's own.
    pub seats: foldhash::HashMap<String, usize>,
}

/// A request to carry some units.
struct PlaceRequest {
    mode: Mode,
    plan_id: String,
    unit_ids: Vec<String>,
    reply: oneshot::Sender<Result<HashMap<String, String>, String>>,
}

/// The supplier orders of this node.
#[derive(Clone)]
pub struct SupplierOrders {
    inner: Arc<Inner>,
}

struct Inner {
    args: SupplierOrdersArgs,
    placer: mpsc::Sender<PlaceRequest>,
    /// Drivers running or recently finished, by transaction id.
    drivers: Mutex<HashMap<String, Driver>>,
    /// Wake-ups of drivers waiting for profiles, by supplier order number,
    /// and webhooks that came before their driver waited.
    wakers: Mutex<Wakers>,
    /// When the supplier's webhook last reached this node.
    last_webhook: Mutex<Option<std::time::Instant>>,
    /// When finished drivers were last forgotten.
    last_pruned: Mutex<std::time::Instant>,
}

/// How often finished drivers are forgotten.
const PRUNE_EVERY: Duration = Duration::from_secs(1);

/// While webhooks arrived this recently, a driver waits for one (up to the
/// longest poll interval) before its first question, instead of asking early.
const WEBHOOKS_FLOWING: Duration = Duration::from_secs(120);

struct Driver {
    outcome: watch::Receiver<Option<Outcome>>,
    started: std::time::Instant,
}

/// Finished drivers are remembered this long, so that late carriers of the
/// same supplier order do not ask the supplier again.
const REMEMBER_FINISHED: Duration = Duration::from_secs(600);

/// Finished drivers remembered at most; past it the oldest are forgotten
/// first. Each keeps its supplier order's profiles (a few hundred bytes a
/// unit), and under sustained load ten minutes of them came to hundreds of
/// megabytes: about 500 bytes an order, at 7,000 orders a second. A carrier
/// that finds its driver forgotten asks the supplier once more under the
/// same order number; it never buys again.
const FINISHED_KEPT_MAX: usize = 1024;

impl Driver {
    fn finished(&self) -> bool {
        self.outcome.borrow().is_some()
    }
}

/// Forgets the finished drivers started more than [`REMEMBER_FINISHED`]
/// before `now`, then the oldest finished ones beyond `kept_max`; running
/// drivers stay.
fn forget_finished(
    drivers: &mut HashMap<String, Driver>,
    now: std::time::Instant,
    kept_max: usize,
) {
    let recent = |d: &Driver| now.saturating_duration_since(d.started) < REMEMBER_FINISHED;
    drivers.retain(|_, d| !d.finished() || recent(d));
    let mut finished: Vec<(std::time::Instant, String)> = drivers
        .iter()
        .filter(|(_, d)| d.finished())
        .map(|(id, d)| (d.started, id.clone()))
        .collect();
    if finished.len() <= kept_max {
        return;
    }
    let excess = finished.len() - kept_max;
    finished.select_nth_unstable(excess - 1);
    for (_, id) in &finished[..excess] {
        drivers.remove(id);
    }
}

impl SupplierOrders {
    /// Starts the placer task.
    pub fn start(args: SupplierOrdersArgs) -> Self {
        let (placer, requests) = mpsc::channel(4096);
        let inner = Arc::new(Inner {
            args,
            placer,
            drivers: Mutex::default(),
            wakers: Mutex::default(),
            last_webhook: Mutex::default(),
            last_pruned: Mutex::new(std::time::Instant::now()),
        });
        tokio::spawn(placer_loop(inner.args.clone(), requests));
        Self { inner }
    }

    /// Puts units in supplier orders (with units of other orders waiting at
    /// the same time); returns each unit's transaction id.
    pub async fn carry(
        &self,
        mode: Mode,
        plan_id: &str,
        unit_ids: Vec<String>,
    ) -> Result<HashMap<String, String>, String> {
        let (reply, answer) = oneshot::channel();
        let request = PlaceRequest {
            mode,
            plan_id: plan_id.to_owned(),
            unit_ids,
            reply,
        };
        self.inner
            .placer
            .send(request)
            .await
            .map_err(|_| "the placer stopped".to_owned())?;
        answer.await.map_err(|_| "the placer stopped".to_owned())?
    }

    /// Waits for a supplier order to end, starting its driver on this node
    /// if none runs.
    pub async fn outcome(&self, transaction_id: &str) -> Outcome {
        let mut receiver = self.driver(transaction_id);
        loop {
            if let Some(outcome) = receiver.borrow_and_update().clone() {
                return outcome;
            }
            if receiver.changed().await.is_err() {
                return Outcome::Later("the supplier order's driver stopped".into());
            }
        }
    }

    fn driver(&self, transaction_id: &str) -> watch::Receiver<Option<Outcome>> {
        let mut drivers = lock(&self.inner.drivers);
        if let Some(driver) = drivers.get(transaction_id) {
            // A driver that ended with `Later` is started again.
            let retry = matches!(&*driver.outcome.borrow(), Some(Outcome::Later(_)));
            if !retry {
                return driver.outcome.clone();
            }
        }
        // Forgetting finished drivers walks them all: at most once a second,
        // not once per supplier order.
        let mut pruned = lock(&self.inner.last_pruned);
        if pruned.elapsed() >= PRUNE_EVERY {
            forget_finished(&mut drivers, std::time::Instant::now(), FINISHED_KEPT_MAX);
            *pruned = std::time::Instant::now();
        }
        drop(pruned);
        let (sender, receiver) = watch::channel(None);
        drivers.insert(
            transaction_id.to_owned(),
            Driver {
                outcome: receiver.clone(),
                started: std::time::Instant::now(),
            },
        );
        let inner = self.inner.clone();
        let id = transaction_id.to_owned();
        tokio::spawn(async move {
            let outcome = drive(&inner, &id).await;
            let _ = sender.send(Some(outcome));
        });
        receiver
    }

    /// The supplier said the profiles of `order_no` are ready: wake its
    /// driver if it runs here. Returns whether one was woken. A webhook that
    /// comes before its driver waits (the supplier allocated while the
    /// placement's answer was still on its way) is kept for a while, and the
    /// driver finds it when it starts waiting instead of sleeping until its
    /// first question.
    pub fn wake(&self, order_no: &str) -> bool {
        let woken = lock(&self.inner.wakers).wake(order_no);
        // Early or not, webhooks reach this node: its drivers may wait for them.
        *lock(&self.inner.last_webhook) = Some(std::time::Instant::now());
        woken
    }
}

/// Drivers waiting for profiles, and webhooks that came first.
#[derive(Default)]
pub(super) struct Wakers {
    /// The wake-up of each waiting driver, by supplier order number.
    waiting: HashMap<String, Arc<Notify>>,
    /// Webhooks for orders no driver waited on yet, with when they came.
    early: HashMap<String, std::time::Instant>,
}

/// How long a webhook that came before its driver waited is kept: longer
/// than a placement's answer takes, short enough that webhooks for other
/// nodes' orders do not pile up.
const EARLY_WAKE_KEPT: Duration = Duration::from_secs(60);

/// Early webhooks kept at most: when full, the expired ones are dropped,
/// and a webhook that still finds no room is not kept (its driver then
/// asks at its first question, as without webhooks).
const EARLY_WAKES_MAX: usize = 10_000;

impl Wakers {
    /// Wakes the driver of `order_no`, or keeps the webhook for it.
    fn wake(&mut self, order_no: &str) -> bool {
        if let Some(notify) = self.waiting.get(order_no) {
            notify.notify_one();
            return true;
        }
        if self.early.len() >= EARLY_WAKES_MAX {
            self.early.retain(|_, at| at.elapsed() < EARLY_WAKE_KEPT);
        }
        if self.early.len() < EARLY_WAKES_MAX {
            self.early
                .insert(order_no.to_owned(), std::time::Instant::now());
        }
        false
    }

    /// Registers a driver waiting for `order_no`; its wake-up is already
    /// given when the webhook came first.
    pub(super) fn wait(&mut self, order_no: &str) -> Arc<Notify> {
        let notify = Arc::new(Notify::new());
        if self
            .early
            .remove(order_no)
            .is_some_and(|at| at.elapsed() < EARLY_WAKE_KEPT)
        {
            notify.notify_one();
        }
        self.waiting.insert(order_no.to_owned(), notify.clone());
        notify
    }

    /// The driver of `order_no` stopped waiting.
    pub(super) fn done(&mut self, order_no: &str) {
        self.waiting.remove(order_no);
    }
}

// ------------------------------------------------------------------ placer

/// How often a placer waiting for a free placement slot looks again.
const SLOT_CHECK: Duration = Duration::from_millis(10);

async fn placer_loop(args: SupplierOrdersArgs, mut requests: mpsc::Receiver<PlaceRequest>) {
    let full = args.batch_size.min(args.live.max_units()).max(1);
    while let Some(first) = requests.recv().await {
        let mut gathered = vec![first];
        let window_ends = tokio::time::Instant::now() + args.batch_window;
        loop {
            let live_units: usize = gathered
                .iter()
                .filter(|r| r.mode == Mode::Live)
                .map(|r| r.unit_ids.len())
                .sum();
            let sandbox_only = live_units == 0;
            if live_units >= full {
                break;
            }
            let now = tokio::time::Instant::now();
            // Past the window, write down as soon as a placement slot is
            // free (at once for sandbox units: they are not rate-limited).
            if now >= window_ends && (sandbox_only || args.live.any_free_slot()) {
                break;
            }
            let until = if now >= window_ends {
                now + SLOT_CHECK
            } else {
                window_ends
            };
            match tokio::time::timeout_at(until, requests.recv()).await {
                Ok(Some(request)) => gathered.push(request),
                Ok(None) => break,
                Err(_) => {}
            }
        }
        write_down(&args, gathered).await;
    }
}

/// Groups the gathered units by mode and package, cuts them into supplier
/// orders, writes those down, and answers every request.
async fn write_down(args: &SupplierOrdersArgs, gathered: Vec<PlaceRequest>) {
    let mut groups: HashMap<(Mode, String), Vec<String>> = HashMap::new();
    for request in &gathered {
        groups
            .entry((request.mode, request.plan_id.clone()))
            .or_default()
            .extend(request.unit_ids.iter().cloned());
    }
    let mut carried: HashMap<String, Result<String, String>> = HashMap::new();
    // Supplier orders given to each supplier in this batch, so a burst
    // spreads over the route as it fills the first supplier's slots.
    let mut assigned: HashMap<String, usize> = HashMap::new();
    for ((mode, plan_id), unit_ids) in groups {
        let size = match mode {
            Mode::Live => args.batch_size.min(args.live.max_units()).max(1),
            Mode::Sandbox => 1,
        };
        for chunk in unit_ids.chunks(size) {
            let result = open(args, mode, &plan_id, chunk, &mut assigned).await;
            for unit in chunk {
                carried.insert(unit.clone(), result.clone());
            }
        }
    }
    for request in gathered {
        let answer: Result<HashMap<String, String>, String> = request
            .unit_ids
            .iter()
            .map(|unit| {
                let txn = carried
                    .get(unit)
                    .cloned()
                    .unwrap_or_else(|| Err("not carried".into()))?;
                Ok((unit.clone(), txn))
            })
            .collect();
        let _ = request.reply.send(answer);
    }
}

/// The packages of a plan at each supplier, from the catalogue.
pub(super) fn packages_of(args: &SupplierOrdersArgs, plan_id: &str) -> Packages {
    args.catalogue.snapshot().packages(plan_id)
}

/// The supplier a new live supplier order of a plan goes to, and its
/// package there ([`SupplierSet::choose`]). A plan no supplier of the route
/// sells goes to the route's first under its own id, whose driver then
/// finds no seller and refunds it.
fn supplier_for(
    args: &SupplierOrdersArgs,
    plan_id: &str,
    assigned: &HashMap<String, usize>,
) -> (String, String) {
    let packages = packages_of(args, plan_id);
    let given = |name: SupplierName| assigned.get(name.as_str()).copied().unwrap_or(0);
    match args.live.choose(&packages, &given) {
        Some((name, code)) => (name.as_str().to_owned(), code),
        None => {
            let first = args
                .live
                .route()
                .suppliers()
                .first()
                .copied()
                .unwrap_or(SupplierName::EsimAccess);
            (first.as_str().to_owned(), plan_id.to_owned())
        }
    }
}

/// A supplier order about to be written down.
pub(super) struct NewRow<'a> {
    pub id: String,
    pub mode: Mode,
    pub supplier: String,
    pub plan_id: &'a str,
    pub package_code: String,
    pub units: usize,
    pub created_at: chrono::DateTime<chrono::Utc>,
}

/// The row of a supplier order about to be written down.
pub(super) fn new_row(args: &SupplierOrdersArgs, new: NewRow<'_>) -> supplier_order::Model {
    supplier_order::Model {
        id: new.id,
        mode: new.mode,
        package_code: new.package_code,
        unit_count: i32::try_from(new.units).unwrap_or(i32::MAX),
        order_no: None,
        status: SupplierOrderStatus::Placing,
        attempts: 0,
        last_error: None,
        node_id: args.node_id.to_string(),
        created_at: new.created_at,
        updated_at: time::now(),
        supplier: new.supplier,
        plan_id: Some(new.plan_id.to_owned()),
        successor_id: None,
        unit_cost_cents: None,
        calls_sent: 0,
    }
}

/// A new supplier order id (the supplier's transaction id).
pub(super) fn new_id() -> String {
    format!("so_{}", uuid::Uuid::now_v7().simple())
}

/// Writes one supplier order down with its units, in one transaction.
async fn open(
    args: &SupplierOrdersArgs,
    mode: Mode,
    plan_id: &str,
    unit_ids: &[String],
    assigned: &mut HashMap<String, usize>,
) -> Result<String, String> {
    // A sandbox unit is its own supplier order, named after it.
    let id = match (mode, unit_ids) {
        (Mode::Sandbox, [only]) => only.clone(),
        _ => new_id(),
    };
    let (supplier, package_code) = match mode {
        Mode::Live => supplier_for(args, plan_id, assigned),
        Mode::Sandbox => ("sandbox".to_owned(), plan_id.to_owned()),
    };
    let row = new_row(
        args,
        NewRow {
            id: id.clone(),
            mode,
            supplier,
            plan_id,
            package_code,
            units: unit_ids.len(),
            created_at: time::now(),
        },
    );
    let package_code = row.package_code.clone();
    let supplier = row.supplier.clone();
    *assigned.entry(supplier.clone()).or_default() += 1;
    // Owned: the write may run on whichever writer takes the turn.
    let (owned, units) = (row.clone(), unit_ids.to_vec());
    let inline = crate::actors::write_inline(args.inline.as_deref(), move |c| {
        rows::open_inline(c, &owned, &units)
    })
    .await;
    let written = match inline {
        // Refused: a unit was taken already (rolled back).
        Some(done) => Ok(done.is_ok()),
        None => open_through_pool(&args.writes, row, unit_ids).await,
    };
    match written {
        Ok(true) => {
            crate::metrics::supplier_order_opened(mode.as_str(), unit_ids.len());
            tracing::info!(transaction_id = %id, mode = mode.as_str(), supplier, package_code, units = unit_ids.len(), "supplier order written down");
            Ok(id)
        }
        Ok(false) => Err("a unit is already carried by another supplier order".into()),
        Err(err) => Err(format!("writing the supplier order down: {err}")),
    }
}

/// Writes a supplier order down with its units through the pool (on
/// PostgreSQL a kept connection); `false` (rolled back) when a unit was
/// taken already.
async fn open_through_pool(
    db: &store::WriterDb,
    row: supplier_order::Model,
    unit_ids: &[String],
) -> Result<bool, sea_orm::DbErr> {
    let txn = db.begin().await?;
    let taken = rows::open(&txn, row, unit_ids).await?;
    txn.keep_if(taken).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Resolves at once when the wake-up was already given.
    async fn given(notify: &Notify) -> bool {
        tokio::time::timeout(Duration::from_millis(50), notify.notified())
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn a_webhook_before_its_driver_waits_is_kept_for_it() {
        let mut wakers = Wakers::default();
        assert!(!wakers.wake("B1"), "nobody waited yet");

        let notify = wakers.wait("B1");

        assert!(
            given(&notify).await,
            "the early webhook wakes the driver at once"
        );
        assert!(wakers.early.is_empty(), "taken, not kept twice");
    }

    #[tokio::test]
    async fn a_driver_waiting_first_is_woken_and_others_are_not() {
        let mut wakers = Wakers::default();
        let first = wakers.wait("B1");
        let second = wakers.wait("B2");

        assert!(wakers.wake("B1"));

        assert!(given(&first).await);
        assert!(
            !given(&second).await,
            "another order's webhook wakes nobody else"
        );
        wakers.done("B1");
        assert!(!wakers.wake("B1"), "a finished driver is not woken");
    }

    #[test]
    fn early_webhooks_are_bounded() {
        let mut wakers = Wakers::default();
        for n in 0..EARLY_WAKES_MAX + 10 {
            wakers.wake(&format!("B{n}"));
        }
        assert_eq!(wakers.early.len(), EARLY_WAKES_MAX);
    }

    /// A driver for the registry, started `age` before `now`, finished or not.
    fn driver_aged(now: std::time::Instant, age: Duration, finished: bool) -> Driver {
        let outcome = finished.then(|| Outcome::Later("done".into()));
        let (_, receiver) = watch::channel(outcome);
        Driver {
            outcome: receiver,
            started: now - age,
        }
    }

    /// Finished drivers past the time bound go, then the oldest beyond the
    /// count bound; running drivers stay however old.
    #[test]
    fn finished_drivers_are_forgotten_past_their_time_and_beyond_their_number() {
        // Ahead of the clock, so that every age fits after the clock's start.
        let now = std::time::Instant::now() + REMEMBER_FINISHED * 3;
        let mut drivers = HashMap::new();
        for n in 0..10u64 {
            let age = Duration::from_secs(10 + n);
            drivers.insert(format!("done-{n}"), driver_aged(now, age, true));
        }
        drivers.insert("stale".into(), driver_aged(now, REMEMBER_FINISHED, true));
        let running = driver_aged(now, REMEMBER_FINISHED * 2, false);
        drivers.insert("running".into(), running);

        forget_finished(&mut drivers, now, 4);

        let mut kept: Vec<&str> = drivers.keys().map(String::as_str).collect();
        kept.sort_unstable();
        assert_eq!(kept, ["done-0", "done-1", "done-2", "done-3", "running"]);

        forget_finished(&mut drivers, now, 4);
        assert_eq!(drivers.len(), 5, "nothing more to forget");
    }
}
