//! The verdict: every order polled to a final status, then every partner's
//! money checked against its ledger (and, under admission, the refusals and
//! the shares).

use super::*;

/// Waits until no partner has an order in `processing`.
pub(super) async fn settle(
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

/// Every page of a partner's ledger.
pub(super) async fn whole_ledger(
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

pub(super) async fn check(
    args: &LoadtestArgs,
    http: &reqwest::Client,
    partners: &[Partner],
    observed: &Observed,
    all_final: bool,
) -> anyhow::Result<Verdict> {
    let mut failures = run_failures(observed, all_final);
    let mut per_partner = Vec::new();
    let mut refunded_total = 0_i64;
    for (index, partner) in partners.iter().enumerate() {
        let ledger = whole_ledger(http, args, partner).await?;
        let books = Books::of(&ledger);
        refunded_total += books.refunds;
        let balance = balance(http, args, partner).await?.unwrap_or(i64::MIN);
        let accepted = observed.accepted.get(&index).map_or(0, HashSet::len);
        failures.extend(books.failures(&partner.id, balance, accepted));
        if index < 10 {
            per_partner.push(json!({ "partner_id": partner.id, "balance_cents": balance, "ledger_sum_cents": books.sum, "purchase_rows": books.purchases, "accepted_orders": accepted, "refunded_cents": books.refunds }));
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

/// What went wrong over the whole run, whatever the partner.
fn run_failures(observed: &Observed, all_final: bool) -> Vec<String> {
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
    failures
}

/// One partner's ledger, summed up.
struct Books {
    /// Sum of every movement: the balance it must equal.
    sum: i64,
    purchases: usize,
    refunds: i64,
    /// Rows whose `balance_after_cents` is negative.
    negative_rows: usize,
}

impl Books {
    fn of(ledger: &[Value]) -> Self {
        let cents = |r: &Value| r["amount_cents"].as_i64();
        Self {
            sum: ledger.iter().filter_map(cents).sum(),
            purchases: ledger.iter().filter(|r| r["kind"] == "purchase").count(),
            refunds: ledger
                .iter()
                .filter(|r| r["kind"] == "refund")
                .filter_map(cents)
                .sum(),
            negative_rows: ledger
                .iter()
                .filter(|r| r["balance_after_cents"].as_i64().is_some_and(|b| b < 0))
                .count(),
        }
    }

    /// The partner's money against its books and its accepted orders.
    fn failures(&self, partner: &str, balance: i64, accepted: usize) -> Vec<String> {
        let mut failures = Vec::new();
        if balance != self.sum {
            failures.push(format!(
                "{partner}: balance {balance} != ledger sum {}",
                self.sum
            ));
        }
        if self.purchases != accepted {
            failures.push(format!(
                "{partner}: {accepted} accepted orders but {} purchase rows",
                self.purchases
            ));
        }
        if self.negative_rows > 0 {
            failures.push(format!(
                "{partner}: {} ledger rows with a negative balance",
                self.negative_rows
            ));
        }
        failures
    }
}

/// Largest spread of equal partners' accepted units around their mean.
pub(super) const SHARE_TOLERANCE: f64 = 0.20;

/// The admission checks: refusals happened, at once and with `Retry-After`;
/// nothing was refunded; equal partners got equal shares (±20%).
pub(super) fn check_admission(
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
pub(super) fn share_spread(units: &[u64]) -> Value {
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
