//! `esim-reseller loadtest`: drives a running server with concurrent orders
//! and duplicate retries, then checks through the API that no cent was lost
//! or doubled.
//!
//! 1. Creates partners through the operator API (tier, live status, a live
//!    key, a funding adjustment).
//! 2. Sends `POST /orders` closed-loop at a concurrency, or open-loop at a
//!    rate, for a duration or a count. A share of requests is retried with
//!    the same key and body after the answer (a duplicate), and a share is
//!    sent twice at once (a same-key race).
//! 3. Polls until every accepted order is final.
//! 4. Checks, per partner: balance equals the ledger's sum (funding −
//!    purchases + refunds); every ledger `balance_after` and every balance
//!    read is never negative; accepted orders equal purchase rows; no
//!    Idempotency-Key maps to two orders; every order is final.
//!
//! With `--admission` the supplier's limit is in force and the burst is
//! meant to exceed it: orders refused at admission (502 `supplier_error`)
//! are expected, and the verdict also requires that every refusal came with
//! `Retry-After` and at once (p99 under a second), that every accepted order
//! was delivered in full (no refund at all), and that equal partners'
//! accepted units are within ±20% of their mean.
//!
//! Rate limits are the server's: lift the bands through its configuration
//! (e.g. `ESIM__RATE_LIMIT__BANDS__GOLD__WRITE__LIMIT=100000000`).
//!
//! Several nodes: give `--public-url` once per node (or comma-separated);
//! every request, reads included, goes to the next one in turn, so one
//! partner's orders, replays and races are spread over all of them.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use clap::Args;
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use reqwest::{Method, StatusCode};
use secrecy::SecretString;
use serde_json::{Value, json};

use crate::operator::client::OperatorClient;

/// The partner listener when no `--public-url` is given.
pub const DEFAULT_PUBLIC_URL: &str = "http://127.0.0.1:8080";

/// Options of `loadtest`.
#[derive(Debug, Clone, Args)]
pub struct LoadtestArgs {
    /// Base URL of the partner listener. Repeat the flag, or separate URLs
    /// with commas, to spread requests over several nodes in turn.
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_PUBLIC_URL)]
    pub public_url: Vec<String>,
    /// Base URL of the operator listener.
    #[arg(long, default_value = "http://127.0.0.1:8081")]
    pub operator_url: String,
    /// Operator token.
    #[arg(
        long,
        env = "ESIM_OPERATOR_TOKEN",
        default_value = "dev-operator-token-change-me",
        hide_env_values = true
    )]
    pub token: String,
    /// Partners to create.
    #[arg(long, default_value_t = 1)]
    pub partners: usize,
    /// One partner takes all the traffic (the others only exist).
    #[arg(long)]
    pub hot: bool,
    /// Tier of the partners.
    #[arg(long, default_value = "gold")]
    pub tier: String,
    /// Funding of each partner, in cents.
    #[arg(long, default_value_t = 100_000_000)]
    pub funding_cents: i64,
    /// Plan to order.
    #[arg(long, default_value = "pl_fr_1gb_7d")]
    pub plan: String,
    /// Units per order.
    #[arg(long, default_value_t = 1)]
    pub quantity: i64,
    /// Closed loop: requests in flight at once.
    #[arg(long, default_value_t = 32)]
    pub concurrency: usize,
    /// Open loop: requests started per second (overrides closed loop).
    #[arg(long)]
    pub rate: Option<u64>,
    /// Seconds to drive (ignored when --count is given).
    #[arg(long, default_value_t = 10)]
    pub duration: u64,
    /// Orders to send in all.
    #[arg(long)]
    pub count: Option<u64>,
    /// Share of orders retried with the same key and body after their answer.
    #[arg(long, default_value_t = 0.05)]
    pub duplicate_fraction: f64,
    /// Share of orders sent twice at once with the same key.
    #[arg(long, default_value_t = 0.02)]
    pub race_fraction: f64,
    /// Longest wait for orders to settle, in seconds.
    #[arg(long, default_value_t = 120)]
    pub settle_timeout: u64,
    /// Drive `GET <path>` (e.g. `/balance`, `/plans?country=fr`) instead of orders.
    #[arg(long)]
    pub read_path: Option<String>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// The supplier's limit is in force: expect refusals at admission and
    /// check them (Retry-After, at once), full delivery and fair shares.
    #[arg(long)]
    pub admission: bool,
    /// The partner listeners, taken in turn (built from `public_url` by [`run`]).
    #[arg(skip)]
    pub targets: Arc<Targets>,
}

impl LoadtestArgs {
    /// The partner listener for the next request.
    fn base(&self) -> &str {
        self.targets.pick()
    }
}

/// Partner listeners taken round robin, with how many requests each got.
#[derive(Debug, Default)]
pub struct Targets {
    urls: Vec<String>,
    next: AtomicUsize,
    sent: Vec<AtomicU64>,
}

impl Targets {
    /// The listeners of `--public-url`, without blanks or trailing slashes.
    pub fn new(urls: &[String]) -> anyhow::Result<Self> {
        let urls: Vec<String> = urls
            .iter()
            .map(|u| u.trim().trim_end_matches('/').to_owned())
            .filter(|u| !u.is_empty())
            .collect();
        if urls.is_empty() {
            bail!("--public-url names no URL");
        }
        Ok(Self {
            sent: urls.iter().map(|_| AtomicU64::new(0)).collect(),
            urls,
            next: AtomicUsize::new(0),
        })
    }

    /// The next listener in turn.
    pub fn pick(&self) -> &str {
        if self.urls.is_empty() {
            return DEFAULT_PUBLIC_URL;
        }
        let n = self.next.fetch_add(1, Ordering::Relaxed) % self.urls.len();
        self.sent[n].fetch_add(1, Ordering::Relaxed);
        &self.urls[n]
    }

    /// Requests sent to each listener so far.
    pub fn sent(&self) -> BTreeMap<String, u64> {
        self.urls
            .iter()
            .zip(&self.sent)
            .map(|(url, sent)| (url.clone(), sent.load(Ordering::Relaxed)))
            .collect()
    }
}

struct Partner {
    id: String,
    key: String,
}

/// What the drive phase saw.
struct Observed {
    latency_us: Histogram<u64>,
    by_status: BTreeMap<String, u64>,
    /// Idempotency-Key → the order ids answered for it.
    key_orders: HashMap<String, HashSet<String>>,
    /// Partner index → accepted order ids.
    accepted: HashMap<usize, HashSet<String>>,
    negative_balance_seen: bool,
    transport_errors: u64,
    /// Latency of refusals at admission (502 `supplier_error`).
    refusal_latency_us: Histogram<u64>,
    /// Refusals at admission, and those without `Retry-After`.
    refusals: u64,
    refusals_without_retry_after: u64,
}

/// Runs the load test; returns the process exit code (1 on FAIL).
pub async fn run(mut args: LoadtestArgs) -> anyhow::Result<u8> {
    args.targets = Arc::new(Targets::new(&args.public_url)?);
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(args.concurrency.max(8) * 2)
        .timeout(Duration::from_secs(60))
        .build()?;
    let operator = OperatorClient::new(&args.operator_url, SecretString::from(args.token.clone()))?;
    let partners = Arc::new(create_partners(&operator, &args).await?);
    let observed = Arc::new(Mutex::new(Observed {
        latency_us: Histogram::new_with_bounds(1, 120_000_000, 3)?,
        by_status: BTreeMap::new(),
        key_orders: HashMap::new(),
        accepted: HashMap::new(),
        negative_balance_seen: false,
        transport_errors: 0,
        refusal_latency_us: Histogram::new_with_bounds(1, 120_000_000, 3)?,
        refusals: 0,
        refusals_without_retry_after: 0,
    }));

    let started = Instant::now();
    let sent = drive(&args, &http, &partners, &observed).await;
    let drive_secs = started.elapsed().as_secs_f64();

    let settle_started = Instant::now();
    let all_final = settle(&args, &http, &partners).await?;
    let settled_at = started.elapsed().as_secs_f64();

    // Every task holding it has finished.
    let observed = Arc::into_inner(observed)
        .context("drive tasks still running")?
        .into_inner()
        .unwrap_or_else(|p| p.into_inner());
    let verdict = check(&args, &http, &partners, &observed, all_final).await?;
    let accepted: u64 = observed.accepted.values().map(|s| s.len() as u64).sum();
    let histogram = &observed.latency_us;
    let report = json!({
        "partners": args.partners,
        "hot": args.hot,
        "requests": sent,
        "requests_per_second": round2(sent as f64 / drive_secs.max(1e-9)),
        "accepted_orders": accepted,
        "drive_seconds": round2(drive_secs),
        "accepted_per_second": round2(accepted as f64 / drive_secs.max(1e-9)),
        "settled_per_second": round2(accepted as f64 / settled_at.max(1e-9)),
        "settle_seconds": round2(settle_started.elapsed().as_secs_f64()),
        "latency_ms": {
            "p50": ms(histogram.value_at_quantile(0.50)),
            "p90": ms(histogram.value_at_quantile(0.90)),
            "p99": ms(histogram.value_at_quantile(0.99)),
            "p99.9": ms(histogram.value_at_quantile(0.999)),
            "max": ms(histogram.max()),
        },
        "responses": observed.by_status,
        "admission": admission_report(&observed),
        "transport_errors": observed.transport_errors,
        "requests_by_url": args.targets.sent(),
        "invariants": verdict.details,
        "verdict": if verdict.pass { "PASS" } else { "FAIL" },
    });
    if args.json {
        println!("{report}");
    } else {
        print_text(&report);
    }
    Ok(if verdict.pass { 0 } else { 1 })
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

fn ms(us: u64) -> f64 {
    round2(us as f64 / 1000.0)
}

async fn create_partners(
    operator: &OperatorClient,
    args: &LoadtestArgs,
) -> anyhow::Result<Vec<Partner>> {
    let run = uuid::Uuid::new_v4().simple().to_string();
    let mut partners = Vec::with_capacity(args.partners);
    for n in 0..args.partners {
        let body = json!({ "name": format!("Load {run} {n}"), "slug": format!("load-{}-{n}", &run[..12]), "tier": args.tier, "status": "live" });
        let (status, partner) = operator
            .send(Method::POST, "/partners", Some(&body))
            .await?;
        if status != StatusCode::CREATED {
            bail!("creating a partner: {status} {partner}");
        }
        let id = partner["id"].as_str().context("partner id")?.to_owned();
        let (status, key) = operator
            .send(
                Method::POST,
                &format!("/partners/{id}/keys"),
                Some(&json!({ "mode": "live", "label": "loadtest" })),
            )
            .await?;
        if status != StatusCode::CREATED {
            bail!("issuing a key: {status} {key}");
        }
        let funding = json!({ "kind": "adjustment", "amount_cents": args.funding_cents, "description": "loadtest funding" });
        let (status, entry) = operator
            .send(
                Method::POST,
                &format!("/partners/{id}/movements"),
                Some(&funding),
            )
            .await?;
        if status != StatusCode::CREATED {
            bail!("funding: {status} {entry}");
        }
        partners.push(Partner {
            id,
            key: key["secret"].as_str().context("key secret")?.to_owned(),
        });
    }
    Ok(partners)
}

/// One order request's outcome.
struct Answer {
    status: u16,
    code: Option<String>,
    order_id: Option<String>,
    /// `Retry-After`, when the answer carried one.
    retry_after: Option<u64>,
}

impl Answer {
    /// A refusal at admission: the supplier cannot deliver more in time.
    fn refused_at_admission(&self) -> bool {
        self.status == 502 && self.code.as_deref() == Some("supplier_error")
    }
}

/// Refusals at admission: how many, how fast, with `Retry-After`.
fn admission_report(observed: &Observed) -> Value {
    let latency = &observed.refusal_latency_us;
    json!({
        "refusals": observed.refusals,
        "refusals_without_retry_after": observed.refusals_without_retry_after,
        "refusal_latency_ms": {
            "p50": ms(latency.value_at_quantile(0.50)),
            "p99": ms(latency.value_at_quantile(0.99)),
            "max": ms(latency.max()),
        },
    })
}

async fn post_order(
    http: &reqwest::Client,
    args: &LoadtestArgs,
    partner: &Partner,
    key: &str,
) -> Result<(Answer, Duration), reqwest::Error> {
    let started = Instant::now();
    let response = http
        .post(format!("{}/partner/v1/orders", args.base()))
        .bearer_auth(&partner.key)
        .header("Idempotency-Key", key)
        .json(&json!({ "plan_id": args.plan, "quantity": args.quantity }))
        .send()
        .await?;
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    let body: Value = response.json().await.unwrap_or(Value::Null);
    Ok((
        Answer {
            status,
            code: body["error"]["code"].as_str().map(str::to_owned),
            order_id: body["id"].as_str().map(str::to_owned),
            retry_after,
        },
        started.elapsed(),
    ))
}

async fn get_read(
    http: &reqwest::Client,
    args: &LoadtestArgs,
    partner: &Partner,
    path: &str,
) -> Result<(Answer, Duration), reqwest::Error> {
    let started = Instant::now();
    let response = http
        .get(format!("{}/partner/v1{path}", args.base()))
        .bearer_auth(&partner.key)
        .send()
        .await?;
    let status = response.status().as_u16();
    let _ = response.bytes().await?;
    Ok((
        Answer {
            status,
            code: None,
            order_id: None,
            retry_after: None,
        },
        started.elapsed(),
    ))
}

fn record(
    observed: &Mutex<Observed>,
    partner_index: usize,
    key: &str,
    answer: Result<(Answer, Duration), reqwest::Error>,
) {
    let mut seen = observed.lock().unwrap_or_else(|p| p.into_inner());
    match answer {
        Ok((answer, took)) => {
            let _ = seen.latency_us.record(took.as_micros().max(1) as u64);
            let label = match &answer.code {
                Some(code) => format!("{} {code}", answer.status),
                None => answer.status.to_string(),
            };
            *seen.by_status.entry(label).or_insert(0) += 1;
            if answer.refused_at_admission() {
                seen.refusals += 1;
                seen.refusals_without_retry_after += u64::from(answer.retry_after.is_none());
                let _ = seen
                    .refusal_latency_us
                    .record(took.as_micros().max(1) as u64);
            }
            if let Some(order_id) = answer.order_id {
                seen.key_orders
                    .entry(key.to_owned())
                    .or_default()
                    .insert(order_id.clone());
                seen.accepted
                    .entry(partner_index)
                    .or_default()
                    .insert(order_id);
            }
        }
        Err(_) => seen.transport_errors += 1,
    }
}

/// The drive phase; returns how many requests were sent.
async fn drive(
    args: &LoadtestArgs,
    http: &reqwest::Client,
    partners: &Arc<Vec<Partner>>,
    observed: &Arc<Mutex<Observed>>,
) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(args.duration);
    let budget = args.count;
    let issued = Arc::new(AtomicU64::new(0));
    let sent = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let progress = progress_bar(args, budget);
    let workers = if args.rate.is_some() {
        args.concurrency.max(64)
    } else {
        args.concurrency.max(1)
    };
    let ticker = args.rate.map(|rate| {
        Arc::new(tokio::sync::Mutex::new(tokio::time::interval(
            Duration::from_secs_f64(1.0 / rate.max(1) as f64),
        )))
    });
    let watcher = tokio::spawn(watch_balances(
        args.clone(),
        http.clone(),
        partners.clone(),
        observed.clone(),
        stop.clone(),
    ));

    let mut tasks = Vec::with_capacity(workers);
    for worker in 0..workers {
        let (args, http, partners, observed) = (
            args.clone(),
            http.clone(),
            partners.clone(),
            observed.clone(),
        );
        let (issued, sent, progress, ticker) = (
            issued.clone(),
            sent.clone(),
            progress.clone(),
            ticker.clone(),
        );
        tasks.push(tokio::spawn(async move {
            loop {
                let n = issued.fetch_add(1, Ordering::Relaxed);
                let out_of_budget = match budget {
                    Some(count) => n >= count,
                    None => Instant::now() >= deadline,
                };
                if out_of_budget {
                    return;
                }
                if let Some(ticker) = &ticker {
                    ticker.lock().await.tick().await;
                }
                let partner_index = if args.hot {
                    0
                } else {
                    (n as usize + worker) % partners.len()
                };
                let partner = &partners[partner_index];
                if let Some(path) = &args.read_path {
                    let answer = get_read(&http, &args, partner, path).await;
                    record(&observed, partner_index, "", answer);
                    sent.fetch_add(1, Ordering::Relaxed);
                    progress.inc(1);
                    continue;
                }
                let key = format!("lt-{}", uuid::Uuid::new_v4().simple());
                let roll = rand::random::<f64>();
                if roll < args.race_fraction {
                    let (a, b) = tokio::join!(
                        post_order(&http, &args, partner, &key),
                        post_order(&http, &args, partner, &key)
                    );
                    record(&observed, partner_index, &key, a);
                    record(&observed, partner_index, &key, b);
                    sent.fetch_add(2, Ordering::Relaxed);
                } else {
                    let answer = post_order(&http, &args, partner, &key).await;
                    record(&observed, partner_index, &key, answer);
                    sent.fetch_add(1, Ordering::Relaxed);
                    if roll < args.race_fraction + args.duplicate_fraction {
                        let again = post_order(&http, &args, partner, &key).await;
                        record(&observed, partner_index, &key, again);
                        sent.fetch_add(1, Ordering::Relaxed);
                    }
                }
                progress.inc(1);
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
    stop.store(true, Ordering::Relaxed);
    let _ = watcher.await;
    progress.finish_and_clear();
    sent.load(Ordering::Relaxed)
}

fn progress_bar(args: &LoadtestArgs, count: Option<u64>) -> ProgressBar {
    if args.json {
        return ProgressBar::hidden();
    }
    let bar = match count {
        Some(count) => ProgressBar::new(count),
        None => ProgressBar::new_spinner(),
    };
    let template = match count {
        Some(_) => "{elapsed_precise} [{bar:40}] {pos}/{len} orders ({per_sec})",
        None => "{elapsed_precise} {spinner} {pos} orders ({per_sec})",
    };
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// Reads balances during the drive: none may ever be negative.
async fn watch_balances(
    args: LoadtestArgs,
    http: reqwest::Client,
    partners: Arc<Vec<Partner>>,
    observed: Arc<Mutex<Observed>>,
    stop: Arc<AtomicBool>,
) {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        let watched = if args.hot {
            &partners[..1]
        } else {
            &partners[..partners.len().min(5)]
        };
        for partner in watched {
            if let Ok(Some(balance)) = balance(&http, &args, partner).await
                && balance < 0
            {
                observed
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .negative_balance_seen = true;
            }
        }
    }
}

async fn balance(
    http: &reqwest::Client,
    args: &LoadtestArgs,
    partner: &Partner,
) -> anyhow::Result<Option<i64>> {
    let body: Value = http
        .get(format!("{}/partner/v1/balance", args.base()))
        .bearer_auth(&partner.key)
        .send()
        .await?
        .json()
        .await?;
    Ok(body["balance_cents"].as_i64())
}

/// Waits until no partner has an order in `processing`.
async fn settle(
    args: &LoadtestArgs,
    http: &reqwest::Client,
    partners: &[Partner],
) -> anyhow::Result<bool> {
    let deadline = Instant::now() + Duration::from_secs(args.settle_timeout);
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        tick.tick().await;
        let mut processing = 0;
        for partner in partners {
            let body: Value = http
                .get(format!(
                    "{}/partner/v1/orders?status=processing&limit=1",
                    args.base()
                ))
                .bearer_auth(&partner.key)
                .send()
                .await?
                .json()
                .await?;
            processing += body["data"].as_array().map_or(0, Vec::len);
        }
        if processing == 0 {
            return Ok(true);
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
    }
}

struct Verdict {
    pass: bool,
    details: Value,
}

/// Every page of a partner's ledger.
async fn whole_ledger(
    http: &reqwest::Client,
    args: &LoadtestArgs,
    partner: &Partner,
) -> anyhow::Result<Vec<Value>> {
    let mut rows = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut url = format!("{}/partner/v1/ledger?limit=200", args.base());
        if let Some(cursor) = &cursor {
            url.push_str(&format!("&cursor={cursor}"));
        }
        let page: Value = http
            .get(url)
            .bearer_auth(&partner.key)
            .send()
            .await?
            .json()
            .await?;
        rows.extend(page["data"].as_array().cloned().unwrap_or_default());
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return Ok(rows),
        }
    }
}

async fn check(
    args: &LoadtestArgs,
    http: &reqwest::Client,
    partners: &[Partner],
    observed: &Observed,
    all_final: bool,
) -> anyhow::Result<Verdict> {
    let mut failures = Vec::new();
    let double_keys = observed
        .key_orders
        .values()
        .filter(|ids| ids.len() > 1)
        .count();
    if double_keys > 0 {
        failures.push(format!(
            "{double_keys} Idempotency-Keys answered with two different orders"
        ));
    }
    if observed.negative_balance_seen {
        failures.push("a negative balance was read during the run".to_owned());
    }
    if !all_final {
        failures.push("orders still processing after the settle timeout".to_owned());
    }
    let mut per_partner = Vec::new();
    let mut refunded_total = 0_i64;
    for (index, partner) in partners.iter().enumerate() {
        let ledger = whole_ledger(http, args, partner).await?;
        let sum: i64 = ledger
            .iter()
            .filter_map(|r| r["amount_cents"].as_i64())
            .sum();
        let purchases = ledger.iter().filter(|r| r["kind"] == "purchase").count();
        let refunds: i64 = ledger
            .iter()
            .filter(|r| r["kind"] == "refund")
            .filter_map(|r| r["amount_cents"].as_i64())
            .sum();
        let negative_rows = ledger
            .iter()
            .filter(|r| r["balance_after_cents"].as_i64().is_some_and(|b| b < 0))
            .count();
        refunded_total += refunds;
        let balance = balance(http, args, partner).await?.unwrap_or(i64::MIN);
        let accepted = observed.accepted.get(&index).map_or(0, HashSet::len);
        if balance != sum {
            failures.push(format!(
                "{}: balance {balance} != ledger sum {sum}",
                partner.id
            ));
        }
        if purchases != accepted {
            failures.push(format!(
                "{}: {accepted} accepted orders but {purchases} purchase rows",
                partner.id
            ));
        }
        if negative_rows > 0 {
            failures.push(format!(
                "{}: {negative_rows} ledger rows with a negative balance",
                partner.id
            ));
        }
        if index < 10 {
            per_partner.push(json!({ "partner_id": partner.id, "balance_cents": balance, "ledger_sum_cents": sum, "purchase_rows": purchases, "accepted_orders": accepted, "refunded_cents": refunds }));
        }
    }
    let mut shares = Value::Null;
    if args.admission {
        let units: Vec<u64> = (0..partners.len())
            .map(|i| {
                observed.accepted.get(&i).map_or(0, |s| s.len() as u64)
                    * args.quantity.max(0) as u64
            })
            .collect();
        let (admission_failures, spread) = check_admission(observed, refunded_total, &units);
        failures.extend(admission_failures);
        shares = spread;
    }
    Ok(Verdict {
        pass: failures.is_empty(),
        details: json!({ "failures": failures, "refunded_cents_total": refunded_total, "partners": per_partner, "shares": shares }),
    })
}

/// Largest spread of equal partners' accepted units around their mean.
const SHARE_TOLERANCE: f64 = 0.20;

/// The admission checks: refusals happened, at once and with `Retry-After`;
/// nothing was refunded; equal partners got equal shares (±20%).
fn check_admission(
    observed: &Observed,
    refunded_total: i64,
    units: &[u64],
) -> (Vec<String>, Value) {
    let mut failures = Vec::new();
    if observed.refusals == 0 {
        failures.push(
            "no order was refused at admission: the burst did not exceed the supplier's capacity"
                .to_owned(),
        );
    }
    if observed.refusals_without_retry_after > 0 {
        failures.push(format!(
            "{} refusals at admission without Retry-After",
            observed.refusals_without_retry_after
        ));
    }
    let p99_ms = ms(observed.refusal_latency_us.value_at_quantile(0.99));
    if p99_ms >= 1000.0 {
        failures.push(format!("refusals at admission were slow: p99 {p99_ms} ms"));
    }
    if refunded_total != 0 {
        failures.push(format!(
            "{refunded_total} cents refunded: an accepted order was not delivered in full"
        ));
    }
    let spread = share_spread(units);
    if let Some(worst) = spread["worst_deviation"].as_f64()
        && worst > SHARE_TOLERANCE
    {
        failures.push(format!(
            "unequal shares: a partner's accepted units are {:.0}% from the mean",
            worst * 100.0
        ));
    }
    (failures, spread)
}

/// Mean, least, most and the worst relative deviation of accepted units.
fn share_spread(units: &[u64]) -> Value {
    if units.is_empty() {
        return Value::Null;
    }
    let mean = units.iter().sum::<u64>() as f64 / units.len() as f64;
    let least = units.iter().copied().min().unwrap_or(0);
    let most = units.iter().copied().max().unwrap_or(0);
    let worst = if mean > 0.0 {
        ((most as f64 - mean).max(mean - least as f64)) / mean
    } else {
        0.0
    };
    json!({ "mean_units": round2(mean), "least_units": least, "most_units": most, "worst_deviation": round2(worst) })
}

fn print_text(report: &Value) {
    println!(
        "partners            {} {}",
        report["partners"],
        if report["hot"] == true {
            "(one hot)"
        } else {
            ""
        }
    );
    println!("requests            {}", report["requests"]);
    println!("requests/s          {}", report["requests_per_second"]);
    println!("accepted orders     {}", report["accepted_orders"]);
    println!("accepted/s          {}", report["accepted_per_second"]);
    println!("settled/s           {}", report["settled_per_second"]);
    let l = &report["latency_ms"];
    println!(
        "latency ms          p50 {}  p90 {}  p99 {}  p99.9 {}  max {}",
        l["p50"], l["p90"], l["p99"], l["p99.9"], l["max"]
    );
    println!("responses           {}", report["responses"]);
    let admission = &report["admission"];
    if admission["refusals"].as_u64().unwrap_or(0) > 0 {
        let l = &admission["refusal_latency_ms"];
        println!(
            "refused at admission {} (p50 {} ms, p99 {} ms, {} without Retry-After)",
            admission["refusals"], l["p50"], l["p99"], admission["refusals_without_retry_after"]
        );
    }
    let shares = &report["invariants"]["shares"];
    if !shares.is_null() {
        println!(
            "accepted units      mean {} per partner, least {}, most {} (worst {}% from the mean)",
            shares["mean_units"],
            shares["least_units"],
            shares["most_units"],
            (shares["worst_deviation"].as_f64().unwrap_or(0.0) * 100.0).round()
        );
    }
    if let Some(by_url) = report["requests_by_url"].as_object()
        && by_url.len() > 1
    {
        for (url, sent) in by_url {
            println!("requests to         {url} {sent}");
        }
    }
    if report["transport_errors"] != 0 {
        println!("transport errors    {}", report["transport_errors"]);
    }
    for failure in report["invariants"]["failures"]
        .as_array()
        .into_iter()
        .flatten()
    {
        println!(
            "violation           {}",
            failure.as_str().unwrap_or_default()
        );
    }
    println!("{}", report["verdict"].as_str().unwrap_or("FAIL"));
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: LoadtestArgs,
    }

    fn parse(argv: &[&str]) -> LoadtestArgs {
        Cli::try_parse_from(std::iter::once("loadtest").chain(argv.iter().copied()))
            .expect("arguments parse")
            .args
    }

    #[test]
    fn share_spread_is_the_worst_distance_from_the_mean() {
        let spread = share_spread(&[8, 10, 12]);
        assert_eq!(spread["mean_units"], 10.0);
        assert_eq!(spread["worst_deviation"], 0.2);
        assert_eq!(share_spread(&[0, 0])["worst_deviation"], 0.0);
        assert!(share_spread(&[]).is_null());
    }

    #[test]
    fn one_public_url_by_default() {
        assert_eq!(parse(&[]).public_url, vec![DEFAULT_PUBLIC_URL]);
        assert_eq!(
            parse(&["--public-url", "http://a:1"]).public_url,
            vec!["http://a:1"]
        );
    }

    #[test]
    fn public_urls_repeat_or_split_on_commas() {
        let args = parse(&[
            "--public-url",
            "http://a:1,http://b:2",
            "--public-url",
            "http://c:3",
        ]);
        assert_eq!(
            args.public_url,
            vec!["http://a:1", "http://b:2", "http://c:3"]
        );
    }

    #[test]
    fn targets_take_turns_and_count() {
        let urls = [
            "http://a:1/".to_owned(),
            " http://b:2".to_owned(),
            String::new(),
        ];
        let targets = Targets::new(&urls).unwrap();
        let picked: Vec<&str> = (0..5).map(|_| targets.pick()).collect();
        assert_eq!(
            picked,
            [
                "http://a:1",
                "http://b:2",
                "http://a:1",
                "http://b:2",
                "http://a:1"
            ]
        );
        assert_eq!(
            targets.sent(),
            BTreeMap::from([("http://a:1".to_owned(), 3), ("http://b:2".to_owned(), 2)])
        );
    }

    #[test]
    fn one_target_is_always_picked() {
        let targets = Targets::new(&[DEFAULT_PUBLIC_URL.to_owned()]).unwrap();
        assert!((0..3).all(|_| targets.pick() == DEFAULT_PUBLIC_URL));
        assert!(Targets::new(&[" ".to_owned()]).is_err());
    }
}
