//! The plan catalogue, held in memory and priced per caller.
//!
//! The whole catalogue (about a thousand plans) is a sorted in-memory
//! snapshot, so listing, single reads, quotes and order acceptance never query
//! the database for a plan. Operator changes through this node reload it at
//! once; every node also checks the database's catalogue version every
//! `catalogue.refresh_seconds` and reloads when it moved, which bounds how
//! stale another node can be.

mod rows;

pub use rows::{
    CatalogueFile, DestinationInput, MAX_PRICE_CENTS, PlanInput, destination_row, plan_row,
    seed_if_empty,
};

use std::{
    cmp::Ordering,
    collections::HashMap,
    sync::{Arc, Mutex, RwLock},
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};
use entities::{destination, plan};
use serde::Serialize;
use serde_json::Value;

use crate::{
    domain::{
        partner::Mode,
        pricing::{self, Rate, Unavailable, UnitPrice},
        supplier::Packages,
    },
    store::{self, Db},
};

/// The sort key of the plan list: country code, data, duration, id.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Keyset {
    pub country_code: String,
    pub data_amount_mb: i64,
    pub duration_days: i32,
    pub id: String,
}

impl Keyset {
    pub fn of(plan: &plan::Model) -> Self {
        Self {
            country_code: plan.country_code.clone(),
            data_amount_mb: plan.data_amount_mb,
            duration_days: plan.duration_days,
            id: plan.id.clone(),
        }
    }

    /// The cursor form of the key.
    pub fn to_values(&self) -> Vec<Value> {
        vec![
            self.country_code.clone().into(),
            self.data_amount_mb.into(),
            self.duration_days.into(),
            self.id.clone().into(),
        ]
    }

    /// Reads a key back from a verified cursor.
    pub fn from_values(values: &[Value]) -> Option<Self> {
        match values {
            [country, data, duration, id] => Some(Self {
                country_code: country.as_str()?.to_owned(),
                data_amount_mb: data.as_i64()?,
                duration_days: i32::try_from(duration.as_i64()?).ok()?,
                id: id.as_str()?.to_owned(),
            }),
            _ => None,
        }
    }
}

/// One immutable view of the catalogue.
pub struct Snapshot {
    /// The database's catalogue version this snapshot was read at.
    pub version: i64,
    /// Every plan, sorted by [`Keyset`].
    plans: Vec<Arc<plan::Model>>,
    /// Index into `plans` by id.
    by_id: HashMap<String, usize>,
    /// Destinations by code.
    destinations: HashMap<String, destination::Model>,
}

/// How a plan looks to one caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// On sale at this price.
    Sellable(UnitPrice),
    /// Delisted by the operator.
    Inactive,
    /// Cannot be priced for this caller.
    Unavailable(Unavailable),
}

/// Filters of `GET /plans`, already validated.
#[derive(Debug, Default, Clone)]
pub struct PlanFilter {
    /// Upper-cased; a value that is not two letters matches nothing.
    pub country: Option<String>,
    /// Compared case-insensitively with the plan's region.
    pub region: Option<String>,
    pub plan_type: Option<String>,
    pub min_days: Option<i64>,
    pub max_days: Option<i64>,
    pub min_data_mb: Option<i64>,
    pub max_data_mb: Option<i64>,
    pub unlimited: Option<bool>,
    /// Exclusive.
    pub updated_since: Option<DateTime<Utc>>,
}

impl PlanFilter {
    fn matches(&self, plan: &plan::Model) -> bool {
        let within = |value: i64, min: Option<i64>, max: Option<i64>| {
            min.is_none_or(|m| value >= m) && max.is_none_or(|m| value <= m)
        };
        self.country
            .as_ref()
            .is_none_or(|c| plan.country_code == *c)
            && self.region.as_ref().is_none_or(|r| {
                plan.region
                    .as_deref()
                    .is_some_and(|pr| pr.eq_ignore_ascii_case(r))
            })
            && self.plan_type.as_ref().is_none_or(|t| plan.plan_type == *t)
            && within(i64::from(plan.duration_days), self.min_days, self.max_days)
            && within(plan.data_amount_mb, self.min_data_mb, self.max_data_mb)
            && self.unlimited.is_none_or(|u| plan.unlimited == u)
            && self
                .updated_since
                .is_none_or(|since| plan.updated_at > since)
    }
}

impl Snapshot {
    fn new(rows: store::catalogue::CatalogueRows) -> Self {
        let mut plans: Vec<Arc<plan::Model>> = rows.plans.into_iter().map(Arc::new).collect();
        plans.sort_by_key(|p| Keyset::of(p));
        let by_id = plans
            .iter()
            .enumerate()
            .map(|(i, p)| (p.id.clone(), i))
            .collect();
        let destinations = rows
            .destinations
            .into_iter()
            .map(|d| (d.code.clone(), d))
            .collect();
        Self {
            version: rows.version,
            plans,
            by_id,
            destinations,
        }
    }

    /// A plan the caller may see: not a sandbox fixture for a live key, not in
    /// a withdrawn destination. Inactive plans are returned (single reads show them).
    pub fn visible(&self, id: &str, mode: Mode) -> Option<&Arc<plan::Model>> {
        let plan = &self.plans[*self.by_id.get(id)?];
        self.is_visible(plan, mode).then_some(plan)
    }

    /// A plan's package at each supplier that sells it (eSIM Access under
    /// the plan's own id when it names none, or is not in the catalogue).
    pub fn packages(&self, plan_id: &str) -> Packages {
        let stored = self
            .by_id
            .get(plan_id)
            .and_then(|i| self.plans.get(*i))
            .and_then(|plan| plan.supplier_packages.as_ref());
        Packages::of_plan(plan_id, stored)
    }

    fn is_visible(&self, plan: &plan::Model, mode: Mode) -> bool {
        if plan.sandbox_only && mode != Mode::Sandbox {
            return false;
        }
        plan.country_code.is_empty()
            || self
                .destinations
                .get(&plan.country_code)
                .is_some_and(|d| !d.withdrawn)
    }

    /// How a visible plan stands for a caller at `rate`.
    pub fn standing(plan: &plan::Model, rate: &Rate) -> Standing {
        if !plan.active {
            return Standing::Inactive;
        }
        match pricing::unit_price(
            plan.list_price_cents,
            plan.cost_floor_cents,
            rate.discount_bps,
        ) {
            Ok(price) => Standing::Sellable(price),
            Err(reason) => Standing::Unavailable(reason),
        }
    }

    /// One page of the plans a caller can buy, after `after`, in keyset order.
    pub fn page(
        &self,
        filter: &PlanFilter,
        mode: Mode,
        rate: &Rate,
        after: Option<&Keyset>,
        limit: usize,
    ) -> (Vec<(Arc<plan::Model>, UnitPrice)>, bool) {
        let start = match after {
            Some(key) => self
                .plans
                .partition_point(|p| Keyset::of(p).cmp(key) != Ordering::Greater),
            None => 0,
        };
        let mut page = Vec::with_capacity(limit.min(64));
        let mut has_more = false;
        for plan in &self.plans[start..] {
            if !self.is_visible(plan, mode) || !filter.matches(plan) {
                continue;
            }
            let Standing::Sellable(price) = Self::standing(plan, rate) else {
                continue;
            };
            if page.len() == limit {
                has_more = true;
                break;
            }
            page.push((plan.clone(), price));
        }
        (page, has_more)
    }

    /// Countries with at least one plan the caller can buy, for `rate`.
    fn destinations_for(&self, rate: &Rate) -> Vec<DestinationView> {
        let mut summary: HashMap<&str, (i64, i64)> = HashMap::new();
        for plan in &self.plans {
            if plan.country_code.is_empty() || !self.is_visible(plan, Mode::Live) {
                continue;
            }
            if let Standing::Sellable(price) = Self::standing(plan, rate) {
                let entry = summary
                    .entry(plan.country_code.as_str())
                    .or_insert((0, i64::MAX));
                entry.0 += 1;
                entry.1 = entry.1.min(price.unit_cents);
            }
        }
        let mut views: Vec<DestinationView> = summary
            .into_iter()
            .filter_map(|(code, (count, from))| {
                let destination = self.destinations.get(code)?;
                Some(DestinationView {
                    code: destination.code.clone(),
                    name: destination.name.clone(),
                    region: destination.region.clone(),
                    plan_count: count,
                    from_price_cents: from,
                })
            })
            .collect();
        views.sort_by(|a, b| a.code.cmp(&b.code));
        views
    }
}

/// The Destination resource.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct DestinationView {
    pub code: String,
    pub name: String,
    pub region: String,
    pub plan_count: i64,
    pub from_price_cents: i64,
}

/// Destinations for one rate and when they were computed.
type CachedDestinations = (Instant, Arc<Vec<DestinationView>>);

/// The catalogue service shared by handlers and actors.
pub struct Catalogue {
    db: Db,
    snapshot: RwLock<Arc<Snapshot>>,
    destinations: Mutex<HashMap<Rate, CachedDestinations>>,
    destinations_ttl: Duration,
}

impl Catalogue {
    /// Loads the catalogue from the database.
    pub async fn load(db: Db, destinations_ttl: Duration) -> Result<Self, sea_orm::DbErr> {
        let snapshot = Snapshot::new(store::catalogue::load_all(&db).await?);
        Ok(Self {
            db,
            snapshot: RwLock::new(Arc::new(snapshot)),
            destinations: Mutex::new(HashMap::new()),
            destinations_ttl,
        })
    }

    /// The current snapshot (cheap: one `Arc` clone).
    pub fn snapshot(&self) -> Arc<Snapshot> {
        // Readers and the writer only swap an Arc under the lock; nothing panics there.
        self.snapshot
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Re-reads the whole catalogue.
    pub async fn reload(&self) -> Result<(), sea_orm::DbErr> {
        let fresh = Arc::new(Snapshot::new(store::catalogue::load_all(&self.db).await?));
        tracing::info!(
            version = fresh.version,
            plans = fresh.plans.len(),
            "catalogue loaded"
        );
        *self.snapshot.write().unwrap_or_else(|p| p.into_inner()) = fresh;
        Ok(())
    }

    /// Reloads when another node changed the catalogue.
    pub async fn refresh_if_changed(&self) -> Result<(), sea_orm::DbErr> {
        if store::catalogue::version(&self.db).await? != self.snapshot().version {
            self.reload().await?;
        }
        Ok(())
    }

    /// Destinations for a rate, cached for `destinations_ttl` and shared by
    /// every partner on the same rate.
    pub fn destinations_for(&self, rate: &Rate) -> Arc<Vec<DestinationView>> {
        let mut cache = crate::sync::lock(&self.destinations);
        if let Some((at, views)) = cache.get(rate)
            && at.elapsed() < self.destinations_ttl
        {
            return views.clone();
        }
        let views = Arc::new(self.snapshot().destinations_for(rate));
        cache.insert(rate.clone(), (Instant::now(), views.clone()));
        views
    }
}
