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

mod check;
mod drive;
mod html;
mod report;

use check::*;
use drive::*;
use report::*;

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
    /// Also write the run as an HTML page (throughput and latency over
    /// time, a latency histogram, the verdict and these settings) that opens
    /// offline.
    #[arg(long, value_name = "FILE.html")]
    pub report: Option<std::path::PathBuf>,
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
    /// When the drive began, and what each of its seconds saw.
    drive_started: Instant,
    seconds: Vec<html::Second>,
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
        drive_started: Instant::now(),
        seconds: Vec::new(),
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
        "warning": dominant_refusal(&observed.by_status, args.admission, &args.tier),
        "verdict": if verdict.pass { "PASS" } else { "FAIL" },
    });
    if args.json {
        println!("{report}");
    } else {
        print_text(&report);
    }
    if let Some(path) = &args.report {
        let page = html::render(&report, &settings_of(&args), &observed.seconds, histogram);
        std::fs::write(path, page).with_context(|| format!("writing {}", path.display()))?;
        if !args.json {
            println!("report              {}", path.display());
        }
    }
    Ok(if verdict.pass { 0 } else { 1 })
}

/// The settings a report shows: what was asked of the run.
fn settings_of(args: &LoadtestArgs) -> Value {
    json!({
        "public_url": args.public_url.join(", "),
        "partners": args.partners,
        "hot": args.hot,
        "tier": args.tier,
        "plan": args.read_path.as_deref().map_or(args.plan.clone(), |path| format!("GET {path}")),
        "quantity": args.quantity,
        "concurrency": args.concurrency,
        "rate": args.rate,
        "duration_seconds": args.duration,
        "count": args.count,
        "duplicate_fraction": args.duplicate_fraction,
        "race_fraction": args.race_fraction,
        "admission": args.admission,
    })
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

struct Verdict {
    pass: bool,
    details: Value,
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
