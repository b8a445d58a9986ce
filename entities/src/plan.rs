//! A plan of the catalogue.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "plans")]
pub struct Model {
    /// `pl_` id, chosen by whoever loads the catalogue.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub name: String,
    /// ISO 3166-1 alpha-2; "" for regional and global bundles.
    pub country_code: String,
    /// The country's region, or the bundle's slug, or `global`.
    pub region: Option<String>,
    pub global: bool,
    /// `fixed` or `daily`.
    pub plan_type: String,
    pub data_amount_mb: i64,
    pub daily_allowance_mb: Option<i64>,
    pub fup_speed: Option<String>,
    pub unlimited: bool,
    pub duration_days: i32,
    pub voice_minutes: Option<i32>,
    pub sms_count: Option<i32>,
    /// JSON array of strings.
    pub coverage_types: Json,
    pub speed: String,
    /// JSON array of operator names, or null when none are held.
    pub networks: Option<Json>,
    pub requires_kyc: Option<bool>,
    pub list_price_cents: i64,
    /// What the plan costs us: no partner price goes below it.
    pub cost_floor_cents: i64,
    /// False once delisted.
    pub active: bool,
    /// Sandbox fixtures, seen only by sandbox keys.
    pub sandbox_only: bool,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
    /// The package of every supplier that sells the plan, by supplier
    /// (`{"esim_access": "...", "airalo": "..."}`); null means eSIM Access
    /// alone, under the plan's own id.
    pub supplier_packages: Option<Json>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
