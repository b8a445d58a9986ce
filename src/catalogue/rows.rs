//! The catalogue as operators load it: destination and plan rows from the
//! seed file or an import, each checked field by field (every problem named
//! with its place in the file), and the seed loaded on a first start.

use chrono::{DateTime, Utc};
use entities::{destination, plan};
use serde::Deserialize;

use crate::{
    domain::{time, validation::Violations},
    store::{self, Db},
};

/// A destination as the operator loads it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DestinationInput {
    pub code: String,
    pub name: String,
    pub region: String,
}

/// A plan as the operator loads it: the Plan resource's catalogue fields
/// plus `cost_floor_cents`, `active` and `sandbox_only`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanInput {
    pub id: String,
    pub name: String,
    pub country_code: Option<String>,
    pub region: Option<String>,
    pub global: bool,
    pub plan_type: String,
    pub data_amount_mb: i64,
    pub daily_allowance_mb: Option<i64>,
    pub fup_speed: Option<String>,
    pub unlimited: bool,
    pub duration_days: i32,
    pub voice_minutes: Option<i32>,
    pub sms_count: Option<i32>,
    pub coverage_types: Vec<String>,
    pub speed: String,
    pub networks: Option<Vec<String>>,
    pub requires_kyc: Option<bool>,
    pub list_price_cents: i64,
    pub cost_floor_cents: i64,
    pub active: bool,
    #[serde(default)]
    pub sandbox_only: bool,
    /// The plan's package at each supplier that sells it, by supplier
    /// (`esim_access`, `airalo`); absent: eSIM Access under the plan's id.
    #[serde(default)]
    pub supplier_packages: Option<std::collections::BTreeMap<String, String>>,
}

/// The seed and import file: destinations and plans.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CatalogueFile {
    pub destinations: Vec<DestinationInput>,
    pub plans: Vec<PlanInput>,
}

/// Checks a destination; `at` prefixes the parameter names (`[3].code`).
pub fn destination_row(
    input: DestinationInput,
    at: &str,
    now: DateTime<Utc>,
    v: &mut Violations,
) -> destination::Model {
    let code = input.code.to_ascii_uppercase();
    v.check(
        code.len() != 2 || !code.bytes().all(|b| b.is_ascii_uppercase()),
        &format!("{at}code"),
        "must be an ISO 3166-1 alpha-2 code",
    );
    v.check(
        input.name.trim().is_empty() || input.name.len() > 100,
        &format!("{at}name"),
        "must be 1 to 100 characters",
    );
    v.check(
        !is_slug(&input.region),
        &format!("{at}region"),
        "must be a lowercase slug of at most 64 characters",
    );
    destination::Model {
        code,
        name: input.name.trim().to_owned(),
        region: input.region,
        withdrawn: false,
        updated_at: now,
    }
}

/// Largest list price or cost floor a plan may carry: keeps the pricing
/// arithmetic (cents × basis points) far from overflowing.
pub const MAX_PRICE_CENTS: i64 = 100_000_000;

/// Checks a plan against the known destination codes; `at` prefixes the
/// parameter names.
pub fn plan_row(
    input: PlanInput,
    at: &str,
    known_countries: &dyn Fn(&str) -> bool,
    now: DateTime<Utc>,
    v: &mut Violations,
) -> plan::Model {
    let country = check_identity(&input, at, known_countries, v);
    check_amounts(&input, at, v);
    if let Some(packages) = &input.supplier_packages
        && let Some(problem) = crate::domain::supplier::check_packages(packages)
    {
        v.check(true, &format!("{at}supplier_packages"), &problem);
    }
    plan::Model {
        id: input.id,
        name: input.name.trim().to_owned(),
        country_code: country,
        region: input.region,
        global: input.global,
        plan_type: input.plan_type,
        data_amount_mb: input.data_amount_mb,
        daily_allowance_mb: input.daily_allowance_mb,
        fup_speed: input.fup_speed,
        unlimited: input.unlimited,
        duration_days: input.duration_days,
        voice_minutes: input.voice_minutes,
        sms_count: input.sms_count,
        coverage_types: serde_json::json!(input.coverage_types),
        speed: input.speed,
        networks: input.networks.map(|n| serde_json::json!(n)),
        requires_kyc: input.requires_kyc,
        list_price_cents: input.list_price_cents,
        cost_floor_cents: input.cost_floor_cents,
        active: input.active,
        sandbox_only: input.sandbox_only,
        created_at: now,
        updated_at: now,
        supplier_packages: input
            .supplier_packages
            .filter(|packages| !packages.is_empty())
            .map(|packages| serde_json::json!(packages)),
    }
}

/// The plan's id, name, destination and type.
fn check_identity(
    input: &PlanInput,
    at: &str,
    known_countries: &dyn Fn(&str) -> bool,
    v: &mut Violations,
) -> String {
    let param = |name: &str| format!("{at}{name}");
    let id_ok = input.id.len() <= 64
        && input.id.strip_prefix("pl_").is_some_and(|rest| {
            !rest.is_empty()
                && rest
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        });
    v.check(
        !id_ok,
        &param("id"),
        "must begin with `pl_`, use letters, digits, `_` or `-`, and be at most 64 characters",
    );
    v.check(
        input.name.trim().is_empty() || input.name.len() > 200,
        &param("name"),
        "must be 1 to 200 characters",
    );
    let country = input
        .country_code
        .as_deref()
        .map(str::to_ascii_uppercase)
        .unwrap_or_default();
    v.check(
        !country.is_empty() && !known_countries(&country),
        &param("country_code"),
        "must be a known destination code (load destinations first)",
    );
    v.check(
        input.region.as_deref().is_some_and(|r| !is_slug(r)),
        &param("region"),
        "must be a lowercase slug of at most 64 characters",
    );
    v.check(
        input.plan_type != "fixed" && input.plan_type != "daily",
        &param("plan_type"),
        "must be fixed or daily",
    );
    v.check(
        input.plan_type == "daily" && input.daily_allowance_mb.is_none(),
        &param("daily_allowance_mb"),
        "is required for a daily plan",
    );
    country
}

/// The plan's allowances, prices and speeds.
fn check_amounts(input: &PlanInput, at: &str, v: &mut Violations) {
    let param = |name: &str| format!("{at}{name}");
    v.check(
        input.data_amount_mb < 0,
        &param("data_amount_mb"),
        "must not be negative",
    );
    v.check(
        input.daily_allowance_mb.is_some_and(|d| d < 0),
        &param("daily_allowance_mb"),
        "must not be negative",
    );
    v.check(
        input.duration_days < 1,
        &param("duration_days"),
        "must be at least 1",
    );
    v.check(
        input.voice_minutes.is_some_and(|m| m < 0),
        &param("voice_minutes"),
        "must not be negative",
    );
    v.check(
        input.sms_count.is_some_and(|m| m < 0),
        &param("sms_count"),
        "must not be negative",
    );
    v.check(
        !(0..=MAX_PRICE_CENTS).contains(&input.list_price_cents),
        &param("list_price_cents"),
        "must be from 0 to 100000000 ($1,000,000)",
    );
    v.check(
        !(0..=MAX_PRICE_CENTS).contains(&input.cost_floor_cents),
        &param("cost_floor_cents"),
        "must be from 0 to 100000000 ($1,000,000)",
    );
    v.check(
        input.speed.len() > 32,
        &param("speed"),
        "must be at most 32 characters",
    );
    v.check(
        input.fup_speed.as_deref().is_some_and(|s| s.len() > 32),
        &param("fup_speed"),
        "must be at most 32 characters",
    );
}

fn is_slug(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= 64
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// The seed catalogue shipped with the service.
const SEED: &str = include_str!("../../config/catalogue.json");

/// Loads the shipped catalogue into an empty database (first start).
pub async fn seed_if_empty(db: &Db) -> anyhow::Result<()> {
    if !store::catalogue::is_empty(db).await? {
        return Ok(());
    }
    let file: CatalogueFile = serde_json::from_str(SEED)?;
    let now = time::now();
    let mut v = Violations::default();
    let destinations: Vec<destination::Model> = file
        .destinations
        .into_iter()
        .enumerate()
        .map(|(i, d)| destination_row(d, &format!("destinations[{i}]."), now, &mut v))
        .collect();
    let codes: std::collections::HashSet<String> =
        destinations.iter().map(|d| d.code.clone()).collect();
    let known = |code: &str| codes.contains(code);
    let plans: Vec<plan::Model> = file
        .plans
        .into_iter()
        .enumerate()
        .map(|(i, p)| plan_row(p, &format!("plans[{i}]."), &known, now, &mut v))
        .collect();
    if let Err(err) = v.into_result() {
        anyhow::bail!("the seed catalogue is invalid: {err}");
    }
    let (destination_count, plan_count) = (destinations.len(), plans.len());
    let txn = store::begin_write(db).await?;
    store::catalogue::upsert_destinations(&txn, destinations).await?;
    store::catalogue::upsert_plans(&txn, plans).await?;
    store::catalogue::bump_version(&txn).await?;
    txn.commit().await?;
    tracing::info!(
        destinations = destination_count,
        plans = plan_count,
        "seed catalogue loaded"
    );
    Ok(())
}
