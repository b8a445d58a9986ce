//! Layered configuration: `config/default.toml` (also compiled into the binary,
//! so the service starts from any directory), then `config/$ESIM_ENV.toml` if
//! present, then `ESIM__SECTION__KEY` environment variables.
//!
//! Unknown keys are refused and every value is checked before `serve` binds a
//! port; an error names the key. Secrets are [`SecretString`]s, which never
//! print.

use std::{collections::BTreeMap, net::SocketAddr, path::PathBuf};

use anyhow::Context;
use config::{Config, Environment, File, FileFormat};
use ipnet::IpNet;
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;

use crate::domain::rate::Band;

mod profile;
mod supply;
mod validate;

pub use profile::{LIFTED_BAND_LIMIT, PROFILES, apply_profile};
pub use supply::{AiraloSettings, SimulatorSettings, SupplierSettings, SuppliersSettings};

/// The band sandbox keys use.
pub const SANDBOX_BAND: &str = "sandbox";

const EMBEDDED_DEFAULTS: &str = include_str!("../../config/default.toml");

/// The whole configuration of one `serve` process.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// Where the data lives.
    pub database: DatabaseSettings,
    /// Listeners and HTTP limits.
    pub http: HttpSettings,
    /// The operator API's credentials.
    pub operator: OperatorSettings,
    /// Signing of pagination cursors.
    pub cursor: CursorSettings,
    /// Base of every `doc_url`; `None` means `http://<public address>/docs`.
    #[serde(default)]
    pub docs_url: Option<String>,
    /// Log output.
    pub log: LogSettings,
    /// The built-in supplier and payment-provider simulators.
    pub simulators: SimulatorSettings,
    /// The eSIM supplier (eSIM Access) and how supplier orders are placed.
    pub supplier: SupplierSettings,
    /// Which suppliers are used, in which order, and when one is left out.
    pub suppliers: SuppliersSettings,
    /// The second supplier, Airalo's Partner API.
    pub airalo: AiraloSettings,
    /// The crypto payment provider.
    pub payments: PaymentSettings,
    /// The background reconciler.
    pub reconciler: ReconcilerSettings,
    /// Rate-limit storage.
    pub rate_limit: RateLimitSettings,
    /// Sandbox play money.
    pub sandbox: SandboxSettings,
    /// Commercial tiers by name.
    pub tiers: BTreeMap<String, TierSettings>,
    /// Key lookups.
    pub auth: AuthSettings,
    /// The plan catalogue.
    pub catalogue: CatalogueSettings,
    /// Provisioning workers.
    pub provisioning: ProvisioningSettings,
    /// Admission of live orders within the supplier's capacity.
    pub admission: AdmissionSettings,
    /// This node's identity and heartbeat.
    pub node: NodeSettings,
    /// Account actors.
    pub accounts: AccountsSettings,
    /// How orders are committed.
    pub store: StoreSettings,
    /// Periodic backups of the embedded SQLite database.
    pub backup: BackupSettings,
}

/// `[backup]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackupSettings {
    /// Minutes between two backups (0: none; fractions allowed).
    pub every_minutes: f64,
    /// Where the copies are written.
    pub dir: PathBuf,
    /// How many good copies are kept (the newest).
    pub keep: usize,
}

/// How account actors commit order requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommitMode {
    /// Group commit: one transaction for every request queued behind the actor.
    Batch,
    /// One transaction per order.
    PerRequest,
}

/// `[store]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreSettings {
    /// `batch` or `per_request`.
    pub commit_mode: CommitMode,
}

/// `[catalogue]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CatalogueSettings {
    /// Load the shipped catalogue into an empty database.
    pub seed: bool,
    /// Seconds between checks for changes made through other nodes.
    pub refresh_seconds: u64,
    /// Seconds `GET /destinations` is cached per rate.
    pub destinations_cache_seconds: u64,
}

/// `[tiers.<name>]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TierSettings {
    /// Headline discount of the tier, in basis points (0-10000).
    pub discount_bps: u32,
    /// The rate-limit band of live keys on this tier (a key of `rate_limit.bands`).
    pub rate_band: String,
}

/// `[auth]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSettings {
    /// Seconds a cached key and account lookup is trusted on this node.
    pub key_cache_seconds: u64,
}

/// `[database]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseSettings {
    /// `sqlite://...` or `postgres://...`.
    pub url: String,
    /// Pool size; 0 picks a default for the database kind.
    pub max_connections: u32,
    /// How long a SQLite writer waits for the write lock.
    pub busy_timeout_ms: u64,
    /// Health reports the database down when a probe takes longer.
    pub probe_timeout_ms: u64,
}

/// `[http]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpSettings {
    /// Partner API, callbacks and docs.
    pub public_addr: SocketAddr,
    /// Operator API and metrics.
    pub operator_addr: SocketAddr,
    /// Peers whose `X-Forwarded-For` is believed.
    pub trusted_proxies: Vec<IpNet>,
    /// Largest request body, in bytes.
    pub body_limit_bytes: usize,
    /// Largest request body on the operator listener, in bytes.
    pub operator_body_limit_bytes: usize,
    /// Longest a client may take to send a request's headers.
    pub header_read_timeout_ms: u64,
    /// Largest request head (request line and headers), in bytes.
    pub max_header_bytes: usize,
    /// Longest a partner request may take before it is answered 503
    /// `service_unavailable` (retryable), whatever holds it (a frozen
    /// database host, a stuck dependency).
    pub request_timeout_ms: u64,
}

/// `[operator]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperatorSettings {
    /// Bearer token of the operator API.
    pub token: SecretString,
    /// Enables the actor fault-injection route.
    pub fault_injection: bool,
    /// Marks the console's session cookie `Secure` (HTTPS only).
    #[serde(default)]
    pub console_secure_cookie: bool,
    /// Whether `GET /metrics` asks for the operator token. Unset: it does
    /// except in development (simulators on, both listeners on loopback).
    #[serde(default)]
    pub metrics_require_token: Option<bool>,
    /// A money movement of more than this many cents (either sign) waits
    /// for a second operator's approval (four eyes). Default $1,000.
    #[serde(default = "default_four_eyes_cents")]
    pub four_eyes_cents: i64,
    /// How long a held movement waits for its approval before it lapses.
    #[serde(default = "default_approval_lapse_seconds")]
    pub approval_lapse_seconds: i64,
}

fn default_four_eyes_cents() -> i64 {
    100_000
}

fn default_approval_lapse_seconds() -> i64 {
    24 * 60 * 60
}

/// `[cursor]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CursorSettings {
    /// HMAC key of pagination cursors.
    pub secret: SecretString,
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable, for a terminal.
    Pretty,
    /// One JSON object per line, for `jq` and log shippers.
    Json,
}

/// `[log]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogSettings {
    /// `pretty` or `json`.
    pub format: LogFormat,
    /// A `tracing` filter directive.
    pub level: String,
}

/// `[provisioning]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProvisioningSettings {
    /// Whether this node provisions.
    pub enabled: bool,
    /// Orders provisioned at once.
    pub concurrency: usize,
    /// How long a worker holds an order.
    pub lease_seconds: u64,
}

/// `[admission]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdmissionSettings {
    /// Whether live orders beyond the supplier's capacity are refused.
    pub enabled: bool,
    /// Seconds of supplier work the backlog may hold (never more than
    /// `supplier.deadline_seconds`: see [`AdmissionSettings::horizon`]).
    pub horizon_seconds: u32,
    /// How often the backlog is read from the database.
    pub refresh_ms: u64,
}

impl AdmissionSettings {
    /// The horizon in force: the configured one, cut to the provisioning
    /// deadline (a unit admitted later than that could never be on time).
    pub fn horizon(&self, deadline_seconds: u64) -> u32 {
        let deadline = u32::try_from(deadline_seconds).unwrap_or(u32::MAX).max(1);
        self.horizon_seconds.min(deadline)
    }
}

impl Settings {
    /// Development: the simulators run and both listeners are on loopback,
    /// so nothing outside this machine can reach the service or be reached
    /// by it with the public development secrets.
    pub fn is_development(&self) -> bool {
        self.development_blockers().is_empty()
    }

    /// Whether `GET /metrics` asks for the operator token.
    pub fn metrics_require_token(&self) -> bool {
        self.operator
            .metrics_require_token
            .unwrap_or(!self.is_development())
    }

    /// What `serve` refuses outside development, one line per setting to
    /// change: every secret still equal to its public value shipped in
    /// `config/default.toml`. Empty in development or when every secret was
    /// changed.
    pub fn production_problems(&self) -> Vec<String> {
        if self.is_development() {
            return Vec::new();
        }
        let shipped = Config::builder()
            .add_source(File::from_str(EMBEDDED_DEFAULTS, FileFormat::Toml))
            .build()
            .ok();
        let is_shipped = |name: &str, value: &SecretString| {
            shipped
                .as_ref()
                .and_then(|defaults| defaults.get_string(name).ok())
                .is_some_and(|public| public == value.expose_secret())
        };
        self.secrets()
            .into_iter()
            .filter(|(name, value)| is_shipped(name, value))
            .map(|(name, _)| {
                format!(
                    "`{name}` is the public development value; set {} to a secret of your own",
                    env_name(name)
                )
            })
            .collect()
    }

    /// Every secret setting by its dotted name.
    fn secrets(&self) -> Vec<(&'static str, &SecretString)> {
        let mut secrets = vec![
            ("operator.token", &self.operator.token),
            ("cursor.secret", &self.cursor.secret),
            ("payments.webhook_secret", &self.payments.webhook_secret),
            ("payments.api_key", &self.payments.api_key),
            ("supplier.secret", &self.supplier.secret),
            ("supplier.access_code", &self.supplier.access_code),
        ];
        // Airalo's credentials matter where Airalo is used: named in the
        // route, or pointed at a real account.
        let airalo_used = self.airalo.base_url.is_some()
            || self
                .suppliers
                .route()
                .contains(crate::domain::supplier::SupplierName::Airalo);
        if airalo_used {
            secrets.push(("airalo.client_id", &self.airalo.client_id));
            secrets.push(("airalo.client_secret", &self.airalo.client_secret));
        }
        secrets
    }

    /// Why this setup is not development, for messages.
    pub fn why_not_development(&self) -> String {
        self.development_blockers().join(", ")
    }

    /// What makes this setup other than development (none: development).
    fn development_blockers(&self) -> Vec<String> {
        let mut blockers = Vec::new();
        if !self.simulators.enabled {
            blockers.push("the simulators are off".to_owned());
        }
        for (name, addr) in [
            ("http.public_addr", self.http.public_addr),
            ("http.operator_addr", self.http.operator_addr),
        ] {
            if !addr.ip().is_loopback() {
                blockers.push(format!("`{name}` ({addr}) is not on loopback"));
            }
        }
        blockers
    }
}

/// The environment variable that sets a dotted setting.
fn env_name(setting: &str) -> String {
    format!("ESIM__{}", setting.replace('.', "__").to_uppercase())
}

/// `[node]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSettings {
    /// This node's id in the provisioning claims it holds; it must stay the
    /// same across restarts so a restarted node takes its claims back at
    /// once, and differ between nodes. Empty: `<host name>-<public port>`
    /// (a random id when the port is 0).
    pub id: String,
    /// Seconds between heartbeats; a node quiet for three of them is taken
    /// for dead and its claims are taken over.
    pub heartbeat_seconds: u64,
}

impl NodeSettings {
    /// How long a node may stay quiet before it is taken for dead.
    pub fn liveness_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.heartbeat_seconds.max(1) * 3)
    }
}

/// `[accounts]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccountsSettings {
    /// Idle time before an account actor is passivated.
    pub idle_seconds: u64,
}

/// `[payments]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PaymentSettings {
    /// The provider's API base; `None` means the built-in simulator.
    #[serde(default)]
    pub base_url: Option<String>,
    /// The provider's store that invoices are opened in.
    pub store_id: String,
    /// API key for the provider.
    pub api_key: SecretString,
    /// HMAC secret of the provider's callbacks.
    pub webhook_secret: SecretString,
    /// Invoice lifetime.
    pub invoice_minutes: u32,
}

/// `[reconciler]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReconcilerSettings {
    /// Seconds between passes.
    pub interval_seconds: u64,
    /// Orders younger than this are left alone.
    pub grace_seconds: u64,
}

/// Where rate-limit windows are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RateLimitBackend {
    /// In this process: one node.
    Memory,
    /// In Redis: shared by every node.
    Redis,
}

/// `[rate_limit]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitSettings {
    /// `memory` or `redis`.
    pub backend: RateLimitBackend,
    /// Required when the backend is `redis`.
    #[serde(default)]
    pub redis_url: Option<String>,
    /// Bound on each Redis call (ms); past it the node counts in memory.
    pub redis_timeout_ms: u64,
    /// After a failed Redis call, ms counted in memory before one call probes.
    pub redis_breaker_open_ms: u64,
    /// Failed authentications allowed per source address per window.
    pub failed_auth_limit: u32,
    /// The failed-authentication window, in seconds.
    pub failed_auth_window_seconds: u32,
    /// Bands by name: `sandbox` plus each tier's `rate_band`.
    pub bands: BTreeMap<String, Band>,
}

/// `[sandbox]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxSettings {
    /// What a new sandbox float holds, in cents.
    pub initial_float_cents: i64,
    /// How long the slow fixture takes to provision.
    pub slow_provisioning_ms: u64,
}

/// Where configuration files are read from, and which overrides apply on top.
#[derive(Debug, Default, Clone)]
pub struct Sources {
    /// Folder holding `default.toml` and `<env>.toml`; default `./config`
    /// (or `$ESIM_CONFIG_DIR`).
    pub dir: Option<PathBuf>,
    /// Environment name; default `$ESIM_ENV`.
    pub env: Option<String>,
    /// Whether `ESIM__*` environment variables apply.
    pub use_environment: bool,
    /// Last-word overrides as (dotted key, value); used by tests and tools.
    /// A value written as a JSON array of strings sets a list.
    pub overrides: Vec<(String, String)>,
}

impl Sources {
    /// The sources `serve` and the CLI use.
    pub fn from_process() -> Self {
        Self {
            dir: std::env::var_os("ESIM_CONFIG_DIR").map(PathBuf::from),
            env: std::env::var("ESIM_ENV").ok().filter(|e| !e.is_empty()),
            use_environment: true,
            overrides: Vec::new(),
        }
    }
}

impl Settings {
    /// Reads and checks the configuration.
    pub fn load(sources: &Sources) -> anyhow::Result<Self> {
        let dir = sources
            .dir
            .clone()
            .unwrap_or_else(|| PathBuf::from("config"));
        let mut builder = Config::builder()
            .add_source(File::from_str(EMBEDDED_DEFAULTS, FileFormat::Toml))
            .add_source(File::from(dir.join("default.toml")).required(false));
        if let Some(env) = &sources.env {
            builder =
                builder.add_source(File::from(dir.join(format!("{env}.toml"))).required(true));
        }
        if sources.use_environment {
            builder = builder.add_source(
                Environment::with_prefix("ESIM")
                    .prefix_separator("__")
                    .separator("__")
                    .try_parsing(true)
                    .list_separator(",")
                    .with_list_parse_key("http.trusted_proxies"),
            );
        }
        for (key, value) in &sources.overrides {
            // A value written as a JSON array of strings overrides a list.
            let list = value
                .starts_with('[')
                .then(|| serde_json::from_str::<Vec<String>>(value).ok())
                .flatten();
            builder = match list {
                Some(list) => builder.set_override(key.as_str(), list),
                None => builder.set_override(key.as_str(), value.as_str()),
            }
            .with_context(|| format!("configuration key `{key}`"))?;
        }
        let settings: Settings = builder
            .build()
            .context("reading configuration")?
            .try_deserialize()
            .map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?;
        settings.validate()?;
        Ok(settings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(overrides: &[(&str, &str)]) -> anyhow::Result<Settings> {
        Settings::load(&Sources {
            dir: Some(PathBuf::from("/nonexistent")),
            env: None,
            use_environment: false,
            overrides: overrides
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        })
    }

    #[test]
    fn embedded_defaults_load_without_files() {
        let settings = load(&[]).expect("defaults load");
        assert!(settings.database.url.starts_with("sqlite:"));
        assert_eq!(settings.http.public_addr.port(), 8080);
        assert!(settings.simulators.enabled);
    }

    #[test]
    fn a_bad_value_names_its_key() {
        let err = load(&[("http.public_addr", "not-an-address")]).unwrap_err();
        assert!(format!("{err:#}").contains("public_addr"), "{err:#}");
        let err = load(&[("database.url", "mysql://x")]).unwrap_err();
        assert!(err.to_string().contains("database.url"), "{err}");
        let err = load(&[("operator.token", "short")]).unwrap_err();
        assert!(err.to_string().contains("operator.token"), "{err}");
        let err = load(&[("provisioning.lease_seconds", "0")]).unwrap_err();
        assert!(err.to_string().contains("lease_seconds"), "{err}");
    }

    #[test]
    fn secrets_do_not_print() {
        let settings = load(&[("operator.token", "a-very-secret-operator-token")]).unwrap();
        let printed = format!("{settings:?}");
        assert!(!printed.contains("a-very-secret-operator-token"));
        assert!(!printed.contains("dev-cursor-secret"));
    }
}
