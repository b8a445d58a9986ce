//! The naive baseline of the order path: one database transaction per
//! order, no HTTP, no actors, no batching. Each of `--concurrency` tasks
//! loops: begin, debit the float and write the order, its unit, its key and
//! its purchase row (the service's own store code, with a batch of one),
//! commit. Each order's partner is drawn at random from `--partners`, as
//! `scripts/bench.sh` draws each request's, and the script runs the loop
//! beside the service at each partner count of the same run.
//!
//! ```text
//! cargo run --release -p naive-orders -- --url 'sqlite:///tmp/naive.db?mode=rwc' --partners 100
//! ```

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use chrono::Utc;
use clap::Parser;
use entities::order;
use esim_reseller::{
    config::DatabaseSettings,
    domain::ids::OrderId,
    store::{
        self,
        orders::{NewOrder, PartnerBatch, accept_batch},
        partners::{NewPartner, create},
    },
};
use hdrhistogram::Histogram;

/// The loop's settings.
#[derive(Debug, Parser)]
struct Args {
    /// A fresh database (it is migrated first).
    #[arg(long, default_value = "sqlite:///tmp/naive-orders.db?mode=rwc")]
    url: String,
    /// Tasks looping at once, each with its own transaction.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Seconds the loop runs.
    #[arg(long, default_value_t = 10)]
    duration: u64,
    /// Partners, each with a funded live float; every order draws its own.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    partners: u32,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let db = store::connect(&DatabaseSettings {
        url: args.url.clone(),
        max_connections: 16,
        busy_timeout_ms: 5000,
        probe_timeout_ms: 2000,
    })
    .await?;
    store::migrate(&db).await?;
    let mut partners = Vec::with_capacity(args.partners as usize);
    for _ in 0..args.partners {
        partners.push(funded_partner(&db).await?);
    }
    let partners = Arc::new(partners);

    let histogram = Arc::new(Mutex::new(Histogram::<u64>::new(3)?));
    let ends = Instant::now() + Duration::from_secs(args.duration);
    let started = Instant::now();
    let tasks: Vec<_> = (0..args.concurrency)
        .map(|task| {
            let (db, partners, histogram) = (db.clone(), partners.clone(), histogram.clone());
            tokio::spawn(async move {
                let mut done = 0u64;
                while Instant::now() < ends {
                    let began = Instant::now();
                    let partner_id = &partners[rand::random_range(0..partners.len())];
                    let new = NewOrder {
                        order: std::sync::Arc::new(order_of(
                            partner_id,
                            &format!("naive-{task}-{done}-key"),
                        )),
                        fingerprint: "naive".into(),
                    };
                    let txn = store::begin_write(&db).await?;
                    let batch = PartnerBatch {
                        partner_id: partner_id.clone(),
                        orders: vec![new],
                        refusals: Vec::new(),
                    };
                    accept_batch(&txn, &batch, Utc::now())
                        .await
                        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
                    txn.commit().await?;
                    done += 1;
                    let micros = began.elapsed().as_micros() as u64;
                    if let Ok(mut h) = histogram.lock() {
                        let _ = h.record(micros);
                    }
                }
                anyhow::Ok(done)
            })
        })
        .collect();
    let mut orders = 0;
    for task in tasks {
        orders += task.await??;
    }
    let seconds = started.elapsed().as_secs_f64();
    let h = histogram.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
    println!(
        "{}",
        serde_json::json!({
            "baseline": "naive: one transaction per order, no HTTP",
            "database": args.url.split(':').next(),
            "partners": args.partners,
            "concurrency": args.concurrency,
            "orders": orders,
            "seconds": (seconds * 100.0).round() / 100.0,
            "orders_per_second": (orders as f64 / seconds).round(),
            "p50_ms": h.value_at_quantile(0.5) as f64 / 1000.0,
            "p99_ms": h.value_at_quantile(0.99) as f64 / 1000.0,
        })
    );
    Ok(())
}

/// A new gold partner whose live float holds far more than a run can
/// spend; its id.
async fn funded_partner(db: &store::Db) -> anyhow::Result<String> {
    let partner = create(
        db,
        NewPartner {
            name: "Naive".into(),
            slug: format!("naive-{}", uuid::Uuid::now_v7().simple()),
            status: entities::states::AccountStatus::Live,
            tier: "gold".into(),
            discount_override_bps: None,
            low_balance_threshold_cents: 0,
            sandbox_float_cents: 0,
        },
        Utc::now(),
    )
    .await?
    .partner;
    let txn = store::begin_write(db).await?;
    store::orders::move_money(
        &txn,
        &partner.id,
        esim_reseller::domain::partner::Mode::Live,
        1_000_000_000_000,
        Utc::now(),
    )
    .await?;
    txn.commit().await?;
    Ok(partner.id)
}

/// One live order of one unit, priced as the gold tier pays for the plan.
fn order_of(partner_id: &str, key: &str) -> order::Model {
    order::Model {
        id: OrderId::generate().into_string(),
        partner_id: partner_id.to_owned(),
        mode: entities::states::Mode::Live,
        idempotency_key: key.to_owned(),
        plan_id: "pl_fr_1gb_7d".into(),
        quantity: 1,
        unit_price_cents: 425,
        total_cents: 425,
        list_unit_cents: 500,
        price_source: "tier:gold".into(),
        metadata: serde_json::json!({}),
        status: entities::states::OrderStatus::Processing,
        failure_code: None,
        refunded_cents: 0,
        attempts: 0,
        claimed_until: None,
        claimed_by: None,
        created_at: Utc::now(),
        completed_at: None,
    }
}
