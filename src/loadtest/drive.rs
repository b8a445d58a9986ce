//! Driving the server: partners created through the operator API, orders
//! sent closed- or open-loop with duplicates and same-key races, each
//! answer recorded, balances watched while the run lasts.

use super::*;

pub(super) async fn create_partners(
    operator: &OperatorClient,
    args: &LoadtestArgs,
) -> anyhow::Result<Vec<Partner>> {
    let run = uuid::Uuid::new_v4().simple().to_string();
    let mut partners = Vec::with_capacity(args.partners);
    let mut approver: Option<Approver> = None;
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
        match status {
            StatusCode::CREATED => {}
            // Above the four-eyes limit: a second operator approves it.
            StatusCode::ACCEPTED => {
                if approver.is_none() {
                    approver = Some(Approver::create(operator, args, &run).await?);
                }
                if let Some(approver) = &approver {
                    approver.approve(&entry).await?;
                }
            }
            _ => bail!("funding: {status} {entry}"),
        }
        partners.push(Partner {
            id,
            key: key["secret"].as_str().context("key secret")?.to_owned(),
        });
    }
    if let Some(approver) = approver {
        approver.revoke(operator).await?;
    }
    Ok(partners)
}

/// A finance operator of this run that approves its funding when the
/// server holds it for a second operator (four eyes), revoked once the
/// partners are funded. Its steps are in the audit trail like anyone's.
struct Approver {
    /// Its `op_` id.
    id: String,
    /// A client with its token.
    client: OperatorClient,
}

impl Approver {
    async fn create(
        operator: &OperatorClient,
        args: &LoadtestArgs,
        run: &str,
    ) -> anyhow::Result<Self> {
        let body =
            json!({ "name": format!("loadtest approver {}", &run[..12]), "role": "finance" });
        let (status, created) = operator
            .send(Method::POST, "/operators", Some(&body))
            .await?;
        if status != StatusCode::CREATED {
            bail!(
                "funding is held for a second operator, and creating one failed: {status} {created}"
            );
        }
        let token = created["token"].as_str().context("the approver's token")?;
        Ok(Self {
            id: created["id"]
                .as_str()
                .context("the approver's id")?
                .to_owned(),
            client: OperatorClient::new(&args.operator_url, token.to_owned().into())?,
        })
    }

    async fn approve(&self, held: &serde_json::Value) -> anyhow::Result<()> {
        let id = held["id"].as_str().context("the held funding's id")?;
        let note = json!({ "note": "loadtest funding" });
        let path = format!("/approvals/{id}/approve");
        let (status, answer) = self.client.send(Method::POST, &path, Some(&note)).await?;
        if status != StatusCode::OK {
            bail!("approving the funding {id}: {status} {answer}");
        }
        Ok(())
    }

    async fn revoke(self, operator: &OperatorClient) -> anyhow::Result<()> {
        let path = format!("/operators/{}/revoke", self.id);
        let (status, answer) = operator.send(Method::POST, &path, None).await?;
        if status != StatusCode::OK {
            bail!("revoking the loadtest approver: {status} {answer}");
        }
        Ok(())
    }
}

pub(super) async fn post_order(
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

pub(super) async fn get_read(
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

pub(super) fn record(
    observed: &Mutex<Observed>,
    partner_index: usize,
    key: &str,
    answer: Result<(Answer, Duration), reqwest::Error>,
) {
    let mut seen = crate::sync::lock(observed);
    match answer {
        Ok((answer, took)) => {
            let _ = seen.latency_us.record(took.as_micros().max(1) as u64);
            note_second(&mut seen, &answer, took);
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

/// Counts an answer in the second of the drive it arrived in.
fn note_second(seen: &mut Observed, answer: &Answer, took: Duration) {
    let index = usize::try_from(seen.drive_started.elapsed().as_secs()).unwrap_or(usize::MAX);
    if index > 24 * 3600 {
        return; // a day-long drive keeps its summary, not a second-by-second page
    }
    while seen.seconds.len() <= index {
        seen.seconds.push(html::Second::new());
    }
    let second = &mut seen.seconds[index];
    second.answers += 1;
    second.successes += u64::from(matches!(answer.status, 200 | 202));
    let _ = second.latency_us.record(took.as_micros().max(1) as u64);
}

/// The drive phase; returns how many requests were sent.
pub(super) async fn drive(
    args: &LoadtestArgs,
    http: &reqwest::Client,
    partners: &Arc<Vec<Partner>>,
    observed: &Arc<Mutex<Observed>>,
) -> u64 {
    let crew = Crew {
        args: args.clone(),
        http: http.clone(),
        partners: partners.clone(),
        observed: observed.clone(),
        issued: Arc::new(AtomicU64::new(0)),
        sent: Arc::new(AtomicU64::new(0)),
        progress: progress_bar(args, args.count),
        ticker: args.rate.map(|rate| {
            Arc::new(tokio::sync::Mutex::new(tokio::time::interval(
                Duration::from_secs_f64(1.0 / rate.max(1) as f64),
            )))
        }),
        deadline: Instant::now() + Duration::from_secs(args.duration),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = tokio::spawn(watch_balances(
        args.clone(),
        http.clone(),
        partners.clone(),
        observed.clone(),
        stop.clone(),
    ));
    // Open loop needs enough workers in flight to keep the rate when
    // answers are slow; closed loop is exactly the concurrency asked for.
    let workers = if args.rate.is_some() {
        args.concurrency.max(64)
    } else {
        args.concurrency.max(1)
    };
    let tasks: Vec<_> = (0..workers)
        .map(|worker| tokio::spawn(crew.clone().work(worker)))
        .collect();
    for task in tasks {
        let _ = task.await;
    }
    stop.store(true, Ordering::Relaxed);
    let _ = watcher.await;
    crew.progress.finish_and_clear();
    crew.sent.load(Ordering::Relaxed)
}

/// What every worker of a run shares.
#[derive(Clone)]
struct Crew {
    args: LoadtestArgs,
    http: reqwest::Client,
    partners: Arc<Vec<Partner>>,
    observed: Arc<Mutex<Observed>>,
    /// Requests started (the budget of `--count`).
    issued: Arc<AtomicU64>,
    /// Requests sent, retries and races included.
    sent: Arc<AtomicU64>,
    progress: ProgressBar,
    /// Paces open-loop runs (`--rate`).
    ticker: Option<Arc<tokio::sync::Mutex<tokio::time::Interval>>>,
    /// End of a `--duration` run.
    deadline: Instant,
}

impl Crew {
    /// One worker's loop until the count or the duration is spent.
    async fn work(self, worker: usize) {
        while let Some(n) = self.next_request() {
            if let Some(ticker) = &self.ticker {
                ticker.lock().await.tick().await;
            }
            let partner = if self.args.hot {
                0
            } else {
                (n as usize + worker) % self.partners.len()
            };
            match &self.args.read_path {
                Some(path) => self.read(partner, path).await,
                None => self.order(partner).await,
            }
            self.progress.inc(1);
        }
    }

    /// The next request's number, or `None` once the budget is spent.
    fn next_request(&self) -> Option<u64> {
        let n = self.issued.fetch_add(1, Ordering::Relaxed);
        let spent = match self.args.count {
            Some(count) => n >= count,
            None => Instant::now() >= self.deadline,
        };
        (!spent).then_some(n)
    }

    async fn read(&self, partner: usize, path: &str) {
        let answer = get_read(&self.http, &self.args, &self.partners[partner], path).await;
        record(&self.observed, partner, "", answer);
        self.sent.fetch_add(1, Ordering::Relaxed);
    }

    /// An order under a fresh key: sent twice at once (a same-key race), or
    /// once and maybe again after the answer (a duplicate).
    async fn order(&self, partner: usize) {
        let (http, args, who) = (&self.http, &self.args, &self.partners[partner]);
        let key = format!("lt-{}", uuid::Uuid::new_v4().simple());
        let roll = rand::random::<f64>();
        if roll < args.race_fraction {
            let (a, b) = tokio::join!(
                post_order(http, args, who, &key),
                post_order(http, args, who, &key)
            );
            record(&self.observed, partner, &key, a);
            record(&self.observed, partner, &key, b);
            self.sent.fetch_add(2, Ordering::Relaxed);
            return;
        }
        let answer = post_order(http, args, who, &key).await;
        record(&self.observed, partner, &key, answer);
        self.sent.fetch_add(1, Ordering::Relaxed);
        if roll < args.race_fraction + args.duplicate_fraction {
            let again = post_order(http, args, who, &key).await;
            record(&self.observed, partner, &key, again);
            self.sent.fetch_add(1, Ordering::Relaxed);
        }
    }
}

pub(super) fn progress_bar(args: &LoadtestArgs, count: Option<u64>) -> ProgressBar {
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
pub(super) async fn watch_balances(
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
                crate::sync::lock(&observed).negative_balance_seen = true;
            }
        }
    }
}

pub(super) async fn balance(
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
