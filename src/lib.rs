//! # esim-reseller
//!
//! A prepaid, server-to-server JSON API (`/partner/v1`) through which partners
//! buy eSIM data plans from a USD float and resell them.
//!
//! A tour of the crate, outside in:
//!
//! - [`config`]: layered settings (`config/default.toml`, `config/$ESIM_ENV.toml`,
//!   `ESIM__SECTION__KEY`), checked before anything binds.
//! - [`app`]: builds the service: database, migrations, listeners, routers,
//!   graceful shutdown. Tests start the same [`app::Application`] on port 0.
//! - [`http`]: the partner API. Handlers parse and answer; [`http::error`] is
//!   the one error type and its stable vocabulary; [`http::envelope`] gives
//!   every response a request id and every error the spec's envelope;
//!   [`http::extract`] refuses unknown parameters and fields;
//!   [`http::openapi`] is the OpenAPI document generated from the handlers;
//!   [`http::server`] accepts connections with a header-read timeout and a
//!   request-head limit.
//! - [`actors`]: ractor actors: an account actor per partner (the only
//!   writer of its floats, deciding queued orders in groups), their
//!   supervising directory, the shared commit writer, provisioning with its
//!   delivery writer, supplier orders (units of many orders gathered into
//!   one eSIM Access order, written down before the call, woken by the
//!   supplier's webhook), and the reconciler.
//! - [`supplier`]: the eSIM supplier trait, the eSIM Access adapter with its
//!   error classes, the rate gate every live call passes, and the sandbox
//!   supplier.
//! - [`payments`]: the payment-provider trait and the BTCPay Greenfield
//!   adapter with webhook verification; [`deposits`]: reads invoices back
//!   and applies the deposit state table of [`domain::deposit`].
//! - [`operator`]: the operator API on its own listener, and the `admin` CLI
//!   that wraps it.
//! - [`auth`]: key lookups with a short per-node cache; [`limits`]: the
//!   fixed-window counters (memory or Redis) behind rate limits and the
//!   failed-authentication budget.
//! - [`catalogue`]: the plan catalogue in memory, priced per caller, seeded
//!   from `config/catalogue.json` on first start.
//! - [`domain`]: pure rules (ids, key material, account status and gating,
//!   source addresses, rate windows, pricing, cursors, idempotency
//!   fingerprints, ICCIDs, order settlement, the deposit state table); no I/O.
//! - [`store`]: sea-orm persistence; the only module that knows SQL.
//! - [`simulators`]: copies of eSIM Access and BTCPay Server as their
//!   documentation and source describe them (shapes, codes, rate limit,
//!   webhooks), with injectable faults.
//! - [`docs`]: reference pages (index, API reference rendered from the
//!   OpenAPI document, errors), so every `doc_url` resolves.
//! - [`telemetry`]: log output (`pretty` or `json`).
//! - [`metrics`]: Prometheus metrics at `/metrics` on the operator listener:
//!   request counts and latencies by route template, orders, provisioning,
//!   supplier calls, deposits, actors, the database pool, refusals.
//! - [`loadtest`]: the `loadtest` command that drives a running server and
//!   checks the money through the API.

pub mod actors;
pub mod app;
pub mod auth;
pub mod catalogue;
pub mod config;
pub mod deposits;
pub mod docs;
pub mod domain;
pub mod http;
pub mod limits;
pub mod loadtest;
pub mod metrics;
pub mod operator;
pub mod payments;
pub mod simulators;
pub mod state;
pub mod store;
pub mod supplier;
pub mod telemetry;

/// Installs ring as the process's TLS crypto provider (reqwest is built
/// without one). Idempotent; call before building any HTTP client.
pub fn install_tls_provider() {
    let _already_installed = rustls::crypto::ring::default_provider().install_default();
}
