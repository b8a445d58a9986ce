//! The supply side of the configuration: the simulators, the suppliers
//! (`[supplier]` for eSIM Access and how supplier orders are placed,
//! `[airalo]`), and the route over them (`[suppliers]`).

use std::net::SocketAddr;

use secrecy::SecretString;
use serde::Deserialize;

/// `[simulators]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimulatorSettings {
    /// Whether `serve` runs the simulators.
    pub enabled: bool,
    /// Their listener.
    pub addr: SocketAddr,
    /// Allocation latency of the simulated supplier at start.
    pub supplier_latency_ms: u64,
    /// Share of simulated supplier calls failing with HTTP 500 at start.
    pub supplier_fail_rate: f64,
    /// Requests per second the simulated supplier accepts, as the real one
    /// documents; 0 lifts the limit (load tests of our own code).
    pub supplier_rate_limit: u32,
    /// Allocation latency of the simulated Airalo at start.
    pub airalo_latency_ms: u64,
    /// Requests per minute the simulated Airalo accepts (0: no limit).
    pub airalo_rate_limit_per_minute: u32,
}

/// `[supplier]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SupplierSettings {
    /// The supplier's API base; `None` means the built-in simulator.
    #[serde(default)]
    pub base_url: Option<String>,
    /// Account identifier sent with every request.
    pub access_code: SecretString,
    /// Request-signing secret.
    pub secret: SecretString,
    /// Per-request time-out.
    pub timeout_ms: u64,
    /// Passes of a unit that could not even be written into a supplier
    /// order before it is refunded as `internal_error`.
    pub max_attempts: i32,
    /// Pause before the first placement retry, doubled on each further one
    /// up to `max_retry_backoff_ms`.
    pub retry_backoff_ms: u64,
    /// Longest pause between placement retries.
    pub max_retry_backoff_ms: u64,
    /// Seconds kept before the deadline to place and allocate: a transient
    /// failure (5xx, time-out, busy, 429) is retried until only this is left.
    pub reserve_seconds: u64,
    /// First pause between allocation polls of a supplier order (doubled
    /// up to `max_poll_interval_ms`; the supplier's webhook cuts it short).
    pub poll_interval_ms: u64,
    /// Longest pause between allocation polls.
    pub max_poll_interval_ms: u64,
    /// Requests per second this service sends the supplier, shared by every
    /// call of a node (and by every node with `rate_limit.backend = redis`);
    /// 0 lifts the limit.
    pub requests_per_second: u32,
    /// Most units one supplier order carries.
    pub batch_size: usize,
    /// How long units wait for others to share a supplier order.
    pub batch_window_ms: u64,
    /// Longest a unit may take to allocate.
    pub deadline_seconds: u64,
}

/// `[suppliers]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SuppliersSettings {
    /// The suppliers in order of preference, comma-separated
    /// (`esim_access`, `airalo`).
    pub route: String,
    /// Failures without an answer in a row that take a supplier out of the
    /// route (0: never).
    pub breaker_failures: u32,
    /// How long a supplier stays out before one probe call is let through.
    pub breaker_open_seconds: u64,
}

impl SuppliersSettings {
    /// The parsed route (checked at load; eSIM Access alone if it could not be).
    pub fn route(&self) -> crate::domain::supplier::Route {
        crate::domain::supplier::Route::parse(&self.route).unwrap_or_default()
    }
}

/// `[airalo]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AiraloSettings {
    /// The Partner API's `/v2` root; `None` means the built-in simulator.
    #[serde(default)]
    pub base_url: Option<String>,
    /// OAuth client id of the partner account.
    pub client_id: SecretString,
    /// OAuth client secret; also what Airalo signs its webhooks with.
    pub client_secret: SecretString,
    /// Requests per second this service sends Airalo (0: no limit).
    pub requests_per_second: u32,
    /// Per-request time-out.
    pub timeout_ms: u64,
}
