//! `esim-reseller simulate`: the stand-ins for the suppliers (eSIM Access,
//! Airalo) and the payment provider (BTCPay Server) alone, in their own
//! process, on `simulators.addr`. A benchmark then measures the service
//! without its stand-ins' CPU, and several nodes can share one simulator,
//! as they would share the real services. Webhooks go to `--callbacks-to`
//! (one node, or the load balancer in front of several).

use tokio::net::TcpListener;

use super::{running::shutdown_signal, supply::simulators_calling};
use crate::{config::Settings, simulators};

/// Serves the simulators until SIGINT or SIGTERM.
pub async fn simulate(settings: Settings, callbacks_to: &str) -> anyhow::Result<()> {
    let service_url = callbacks_to.trim_end_matches('/');
    let sims = simulators_calling(&settings, service_url);
    let listener = TcpListener::bind(settings.simulators.addr)
        .await
        .map_err(|err| {
            anyhow::anyhow!("binding simulators on {}: {err}", settings.simulators.addr)
        })?;
    let addr = listener.local_addr()?;
    tracing::info!(listener = "simulators", addr = %addr, callbacks_to = service_url, "listening");
    // The stand-ins answer in their own services' shapes; no envelope here.
    axum::serve(listener, simulators::routes(&sims))
        .with_graceful_shutdown(shutdown_signal())
        .await?;
    tracing::info!("simulators stopped");
    Ok(())
}
