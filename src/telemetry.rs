//! Log output: `pretty` for a terminal, `json` (one object per line) for `jq`
//! and shippers. `RUST_LOG`, when set, wins over `log.level`.

use tracing_subscriber::{EnvFilter, fmt, prelude::*};

use crate::config::{LogFormat, LogSettings};

/// Installs the global subscriber once; later calls are no-ops (tests start
/// many apps in one process).
pub fn init(settings: &LogSettings) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&settings.level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let registry = tracing_subscriber::registry().with(filter);
    let _already_set = match settings.format {
        LogFormat::Json => registry
            .with(
                fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_current_span(true)
                    // Every enclosing span, so that a line deep in a handler
                    // still says which request and which operator it serves.
                    .with_span_list(true),
            )
            .try_init(),
        LogFormat::Pretty => registry.with(fmt::layer().with_target(false)).try_init(),
    };
}
