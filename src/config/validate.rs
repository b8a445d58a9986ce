//! Checks of the configuration that serde cannot express: ranges, formats
//! and settings that depend on each other. Each failure names the setting.

use anyhow::bail;
use secrecy::ExposeSecret;

use super::{RateLimitBackend, SANDBOX_BAND, Settings};

impl Settings {
    /// Checks the values that types alone cannot; each error names its key.
    pub(super) fn validate(&self) -> anyhow::Result<()> {
        service(self)?;
        supplier(self)?;
        node(self)?;
        rate_limits(self)?;
        tracing_subscriber::EnvFilter::try_new(&self.log.level)
            .map_err(|e| anyhow::anyhow!("invalid configuration: `log.level`: {e}"))?;
        Ok(())
    }
}

/// The database, the secrets, the HTTP limits, the docs and the catalogue.
fn service(s: &Settings) -> anyhow::Result<()> {
    let url = &s.database.url;
    if !(url.starts_with("sqlite:")
        || url.starts_with("postgres://")
        || url.starts_with("postgresql://"))
    {
        bail!("invalid configuration: `database.url` must start with sqlite: or postgres://");
    }
    if s.database.probe_timeout_ms == 0 {
        bail!("invalid configuration: `database.probe_timeout_ms` must be above 0");
    }
    if s.operator.token.expose_secret().len() < 16 {
        bail!("invalid configuration: `operator.token` must be at least 16 characters");
    }
    if s.operator.four_eyes_cents < 0 {
        bail!("invalid configuration: `operator.four_eyes_cents` must not be negative");
    }
    if !(1..=30 * 24 * 3600).contains(&s.operator.approval_lapse_seconds) {
        bail!("invalid configuration: `operator.approval_lapse_seconds` must be from 1 to 2592000");
    }
    if s.cursor.secret.expose_secret().len() < 16 {
        bail!("invalid configuration: `cursor.secret` must be at least 16 characters");
    }
    if s.http.request_timeout_ms < 100 {
        bail!("invalid configuration: `http.request_timeout_ms` must be at least 100");
    }
    if s.http.body_limit_bytes < 1024 {
        bail!("invalid configuration: `http.body_limit_bytes` must be at least 1024");
    }
    if let Some(docs) = &s.docs_url
        && !(docs.starts_with("http://") || docs.starts_with("https://"))
    {
        bail!("invalid configuration: `docs_url` must be an absolute http(s) URL");
    }
    if s.catalogue.refresh_seconds == 0 {
        bail!("invalid configuration: `catalogue.refresh_seconds` must be above 0");
    }
    Ok(())
}

/// The supplier, admission and the simulators.
fn supplier(s: &Settings) -> anyhow::Result<()> {
    if s.supplier.base_url.is_none() && !s.simulators.enabled {
        bail!(
            "invalid configuration: `supplier.base_url` is required when `simulators.enabled` is false"
        );
    }
    if s.supplier.batch_size == 0 {
        bail!("invalid configuration: `supplier.batch_size` must be at least 1");
    }
    if s.admission.horizon_seconds == 0 {
        bail!("invalid configuration: `admission.horizon_seconds` must be above 0");
    }
    if s.admission.refresh_ms == 0 {
        bail!("invalid configuration: `admission.refresh_ms` must be above 0");
    }
    if s.supplier.poll_interval_ms == 0
        || s.supplier.max_poll_interval_ms < s.supplier.poll_interval_ms
    {
        bail!(
            "invalid configuration: `supplier.poll_interval_ms` must be above 0 and at most `supplier.max_poll_interval_ms`"
        );
    }
    if let Err(problem) = crate::domain::supplier::Route::parse(&s.suppliers.route) {
        bail!("invalid configuration: `suppliers.route` {problem}");
    }
    if s.suppliers
        .route()
        .contains(crate::domain::supplier::SupplierName::Airalo)
        && s.airalo.base_url.is_none()
        && !s.simulators.enabled
    {
        bail!(
            "invalid configuration: `airalo.base_url` is required when `suppliers.route` names airalo and `simulators.enabled` is false"
        );
    }
    if s.supplier.retry_backoff_ms == 0
        || s.supplier.max_retry_backoff_ms < s.supplier.retry_backoff_ms
    {
        bail!(
            "invalid configuration: `supplier.retry_backoff_ms` must be above 0 and at most `supplier.max_retry_backoff_ms`"
        );
    }
    if s.airalo.timeout_ms == 0 {
        bail!("invalid configuration: `airalo.timeout_ms` must be above 0");
    }
    if s.supplier.max_attempts < 1 {
        bail!("invalid configuration: `supplier.max_attempts` must be at least 1");
    }
    if !(0.0..=1.0).contains(&s.simulators.supplier_fail_rate) {
        bail!("invalid configuration: `simulators.supplier_fail_rate` must be from 0 to 1");
    }
    Ok(())
}

/// The node, the reconciler, the sandbox and the payment provider.
fn node(s: &Settings) -> anyhow::Result<()> {
    if s.node.heartbeat_seconds == 0 {
        bail!("invalid configuration: `node.heartbeat_seconds` must be above 0");
    }
    if !s.node.id.is_empty()
        && (s.node.id.len() > 40
            || !s
                .node
                .id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.'))
    {
        bail!(
            "invalid configuration: `node.id` must be at most 40 letters, digits, `-`, `_` or `.`"
        );
    }
    if s.provisioning.lease_seconds == 0 {
        // A claim of no length lapses as it is made: two nodes could work
        // on one order at once.
        bail!("invalid configuration: `provisioning.lease_seconds` must be above 0");
    }
    if s.reconciler.interval_seconds == 0 {
        bail!("invalid configuration: `reconciler.interval_seconds` must be above 0");
    }
    if s.sandbox.initial_float_cents < 0 {
        bail!("invalid configuration: `sandbox.initial_float_cents` must not be negative");
    }
    if !(0.0..=525_600.0).contains(&s.backup.every_minutes) {
        bail!(
            "invalid configuration: `backup.every_minutes` must be 0 (off) or a positive number of minutes up to a year"
        );
    }
    if s.backup.every_minutes > 0.0 && !s.database.url.starts_with("sqlite:") {
        bail!(
            "invalid configuration: `backup.every_minutes` backs up the embedded SQLite database; with PostgreSQL use its own tools (a synchronous standby, pg_basebackup)"
        );
    }
    if s.backup.every_minutes > 0.0 && s.backup.keep == 0 {
        bail!("invalid configuration: `backup.keep` must be at least 1");
    }
    if s.payments.invoice_minutes == 0 {
        bail!("invalid configuration: `payments.invoice_minutes` must be above 0");
    }
    Ok(())
}

/// The rate-limit backend, the tiers and their bands.
fn rate_limits(s: &Settings) -> anyhow::Result<()> {
    if s.rate_limit.backend == RateLimitBackend::Redis && s.rate_limit.redis_url.is_none() {
        bail!(
            "invalid configuration: `rate_limit.redis_url` is required when `rate_limit.backend` is redis"
        );
    }
    if s.tiers.is_empty() {
        bail!("invalid configuration: `tiers` must name at least one tier");
    }
    for (name, tier) in &s.tiers {
        if tier.discount_bps > 10_000 {
            bail!("invalid configuration: `tiers.{name}.discount_bps` must be at most 10000");
        }
        if !s.rate_limit.bands.contains_key(&tier.rate_band) {
            bail!(
                "invalid configuration: `tiers.{name}.rate_band` names no band of `rate_limit.bands`"
            );
        }
    }
    if !s.rate_limit.bands.contains_key(SANDBOX_BAND) {
        bail!("invalid configuration: `rate_limit.bands.sandbox` is required");
    }
    for (name, band) in &s.rate_limit.bands {
        for (class, window) in band.windows() {
            if window.limit == 0 || window.window_seconds == 0 {
                bail!(
                    "invalid configuration: `rate_limit.bands.{name}.{}` needs a limit and window_seconds above 0",
                    class.as_str()
                );
            }
        }
    }
    if s.rate_limit.failed_auth_limit == 0 || s.rate_limit.failed_auth_window_seconds == 0 {
        bail!(
            "invalid configuration: `rate_limit.failed_auth_limit` and `rate_limit.failed_auth_window_seconds` must be above 0"
        );
    }
    Ok(())
}
