//! The supplies of a node: the live suppliers (each configured API, or its
//! simulator on this node, behind its own rate gate and breaker, over the
//! route), admission over their capacities, the payment provider, and the
//! stand-ins that play the outside services in development.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use secrecy::ExposeSecret;

use crate::{
    actors::admission::{Admission, AdmissionArgs, LaneArgs, SellersOf},
    catalogue::Catalogue,
    config::{RateLimitBackend, Settings},
    domain::supplier::{Breaker, SupplierName},
    limits::Limiter,
    payments::{PaymentProvider, btcpay::BtcPayClient},
    simulators::{
        Simulators,
        airalo::{AiraloFaults, AiraloSim},
        payments::PaymentsSim,
        supplier::{Faults, SupplierSim},
    },
    state::Suppliers,
    supplier::{
        Supplier,
        airalo::{self, AiraloClient},
        esim_access::EsimAccessClient,
        gate::RateGate,
        metered::Metered,
        sandbox::SandboxSupplier,
        set::{SupplierEntry, SupplierSet},
    },
};

/// The suppliers' and payment provider's stand-ins, calling back this node.
pub(super) fn simulators(settings: &Settings, public_addr: SocketAddr) -> Simulators {
    simulators_calling(settings, &format!("http://{public_addr}"))
}

/// The stand-ins, sending their webhooks to the service at `service_url`
/// (its public listener, e.g. `http://127.0.0.1:8080`).
pub(super) fn simulators_calling(settings: &Settings, service_url: &str) -> Simulators {
    let supplier_sim = SupplierSim::new(
        settings.supplier.access_code.expose_secret(),
        settings.supplier.secret.expose_secret(),
        Faults {
            latency_ms: settings.simulators.supplier_latency_ms,
            fail_rate: settings.simulators.supplier_fail_rate,
            ..Faults::default()
        },
        settings.simulators.supplier_rate_limit,
    );
    supplier_sim.set_notify_url(format!("{service_url}/callbacks/esim-access"));
    let payments_sim = PaymentsSim::new(
        settings.payments.api_key.expose_secret(),
        settings.payments.webhook_secret.expose_secret(),
    );
    payments_sim.set_callback_url(format!("{service_url}/callbacks/btcpay"));
    let airalo = AiraloSim::new(
        settings.airalo.client_id.expose_secret(),
        settings.airalo.client_secret.expose_secret(),
        AiraloFaults {
            latency_ms: settings.simulators.airalo_latency_ms,
            ..AiraloFaults::default()
        },
        settings.simulators.airalo_rate_limit_per_minute,
    );
    airalo.set_webhook_url(format!("{service_url}/callbacks/airalo"));
    Simulators {
        supplier: supplier_sim,
        airalo,
        payments: payments_sim,
    }
}

/// The suppliers behind their rate gate, and admission reading the gate.
pub(super) struct Supply {
    pub(super) suppliers: Suppliers,
    pub(super) admission: Option<Arc<Admission>>,
    /// The node's rate-limit counters, shared with the partner API.
    pub(super) limiter: Arc<Limiter>,
}

impl Supply {
    pub(super) async fn start(
        settings: &Settings,
        simulators_addr: Option<SocketAddr>,
        catalogue: &Arc<Catalogue>,
    ) -> anyhow::Result<Self> {
        // One limiter for the node: the partners' windows and, with Redis,
        // the suppliers' limits as one window for the whole fleet (one
        // connection, one breaker, one state on the rate-limits route).
        let limiter = Arc::new(Limiter::connect(&settings.rate_limit).await?);
        let shared_window = match settings.rate_limit.backend {
            RateLimitBackend::Redis => Some(limiter.clone()),
            RateLimitBackend::Memory => None,
        };
        let live = Arc::new(live_suppliers(settings, simulators_addr, shared_window)?);
        let lanes: Vec<LaneArgs> = live
            .in_route()
            .map(|entry| LaneArgs {
                name: entry.name.as_str(),
                calls_per_second: entry.gate.per_second(),
                batch_size: settings.supplier.batch_size.min(entry.max_units),
                tally: entry.tally.clone(),
                gate: entry.gate.clone(),
            })
            .collect();
        let admission = settings.admission.enabled.then(|| {
            Arc::new(Admission::new(AdmissionArgs {
                lanes,
                sellers_of: Some(sellers_of(catalogue.clone(), live.clone())),
                horizon_seconds: settings
                    .admission
                    .horizon(settings.supplier.deadline_seconds),
            }))
        });
        let suppliers = Suppliers {
            live,
            sandbox: Arc::new(SandboxSupplier::new(Duration::from_millis(
                settings.sandbox.slow_provisioning_ms,
            ))),
        };
        Ok(Self {
            suppliers,
            admission,
            limiter,
        })
    }
}

/// The live suppliers: each configured API (or its simulator on this node)
/// behind its own rate gate, metered, with its breaker, over the route.
/// Airalo is built when the route names it or it is configured (so orders
/// placed before a route change still finish).
fn live_suppliers(
    settings: &Settings,
    simulators_addr: Option<SocketAddr>,
    shared_window: Option<Arc<Limiter>>,
) -> anyhow::Result<SupplierSet> {
    let route = settings.suppliers.route();
    let sim = simulators_addr.map(|addr| format!("http://{addr}"));
    let breaker = Breaker::new(
        settings.suppliers.breaker_failures,
        Duration::from_secs(settings.suppliers.breaker_open_seconds),
    );
    let mut entries = Vec::new();
    let base_url = match (&settings.supplier.base_url, &sim) {
        (Some(url), _) => url.clone(),
        (None, Some(sim)) => sim.clone(),
        (None, None) => {
            anyhow::bail!("`supplier.base_url` is required when the simulators are off")
        }
    };
    let gate = Arc::new(
        RateGate::new(
            settings.supplier.requests_per_second,
            shared_window.clone(),
            "supplier-calls",
        )
        .for_supplier(SupplierName::EsimAccess.as_str()),
    );
    let client = EsimAccessClient::new(
        &base_url,
        settings.supplier.access_code.clone(),
        settings.supplier.secret.clone(),
        Duration::from_millis(settings.supplier.timeout_ms),
        gate.clone(),
    )?;
    entries.push(entry(
        SupplierName::EsimAccess,
        Arc::new(client),
        gate,
        breaker.clone(),
    ));
    let airalo_url = match (&settings.airalo.base_url, &sim) {
        (Some(url), _) => Some(url.clone()),
        (None, Some(sim)) => Some(format!("{sim}/v2")),
        (None, None) => None,
    };
    if let Some(url) = airalo_url {
        let gate = Arc::new(
            RateGate::new(
                settings.airalo.requests_per_second,
                shared_window,
                "airalo-calls",
            )
            .counting_in(airalo::LIMIT_WINDOW)
            .for_supplier(SupplierName::Airalo.as_str()),
        );
        let client = AiraloClient::new(
            &url,
            settings.airalo.client_id.clone(),
            settings.airalo.client_secret.clone(),
            Duration::from_millis(settings.airalo.timeout_ms),
            gate.clone(),
        )?;
        entries.push(entry(SupplierName::Airalo, Arc::new(client), gate, breaker));
    }
    Ok(SupplierSet::new(route, entries))
}

/// Which suppliers of the route sell a plan, for admission: bit `i` is the
/// route's `i`-th supplier.
fn sellers_of(catalogue: Arc<Catalogue>, live: Arc<SupplierSet>) -> SellersOf {
    Arc::new(move |plan: &str| live.sellers_mask(&catalogue.snapshot().packages(plan)))
}

/// One supplier, metered, with its own breaker.
fn entry(
    name: SupplierName,
    client: Arc<dyn Supplier>,
    gate: Arc<RateGate>,
    breaker: Breaker,
) -> Arc<SupplierEntry> {
    let metered = Metered::new(name.as_str(), client);
    let tally = metered.tally();
    Arc::new(SupplierEntry::new(
        name,
        Arc::new(metered),
        gate,
        tally,
        breaker,
    ))
}

/// The payment provider: the configured BTCPay server, or the simulator on
/// this node, or none (then `POST /deposits` answers 503).
pub(super) fn build_payment_provider(
    settings: &Settings,
    simulators_addr: Option<SocketAddr>,
) -> anyhow::Result<Option<Arc<dyn PaymentProvider>>> {
    let base_url = match (&settings.payments.base_url, simulators_addr) {
        (Some(url), _) => url.clone(),
        (None, Some(addr)) => format!("http://{addr}"),
        (None, None) => return Ok(None),
    };
    let client = BtcPayClient::new(
        &base_url,
        &settings.payments.store_id,
        settings.payments.api_key.clone(),
        Duration::from_secs(15),
    )?;
    Ok(Some(Arc::new(client)))
}
