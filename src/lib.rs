//! # esim-reseller
//!
//! A prepaid, server-to-server JSON API (`/partner/v1`) through which partners
//! buy eSIM data plans from a USD float and resell them.
//!
//! ## Layers
//!
//! Modules depend on each other one way (`scripts/check_layers.py`, run by
//! CI, fails on a cycle or on an edge imported below the edges):
//!
//! ```text
//! domain (pure rules)  <-  store (SQL)  <-  actors, deposits, catalogue, auth (decisions)
//!     <-  state (what handlers read)  <-  http, operator (the edges)  <-  app (wiring)
//! ```
//!
//! [`config`], [`metrics`], [`limits`], [`periodic`] and [`sync`] are leaves every
//! layer may use;
//! [`supplier`] and [`payments`] adapt the outside world beside [`store`].
//!
//! ## An order, file by file
//!
//! 1. `http/auth.rs` authenticates the key ([`auth`] caches lookups; key and
//!    account changes are announced to every node through
//!    [`store::changes`]), gates the account and counts the rate window
//!    ([`limits`]).
//! 2. `http/orders.rs` parses the body strictly (`http/extract.rs`), prices
//!    the plan for the caller ([`catalogue`], [`domain::pricing`]) and asks
//!    the partner's account actor through [`actors::accounts`].
//! 3. `actors/account.rs` queues the request and, at its next turn, decides
//!    every queued request together with [`domain::ordering::decide`]:
//!    idempotency, balance, and admission within the supplier's capacity
//!    ([`domain::admission`], the node's view in [`actors::admission`]).
//!    The decided batch is committed in one transaction with a constant
//!    number of statements (`store/orders/accept.rs`, `store/bulk.rs`;
//!    through the shared commit writer, `actors/writer.rs`) before any
//!    request is answered; [`http::error`] turns refusals into the spec's
//!    errors. Keys the actor does not remember are decided as new; the
//!    commit's insert of key bindings turns back a batch whose key is bound
//!    already, and the actor reads its keys and decides it again
//!    (`store/orders/bindings.rs`).
//! 4. `actors/provisioning.rs` claims the accepted order (a lease renewed by
//!    its holder; `store/nodes.rs` says which nodes are alive), and
//!    `actors/supplier_orders/` gathers units of many orders into one
//!    supplier order, writes it down, and its driver (`driver.rs`) places it
//!    through the rate gate (`supplier/gate.rs`) and the eSIM Access adapter
//!    (`supplier/esim_access.rs`), and waits for the profiles (webhook or
//!    polling). Deliveries are written in batches (`actors/deliveries.rs`);
//!    undelivered units are refunded by the account actor. `actors/reconciler.rs` re-drives what a
//!    crash left behind.
//!
//! ## A deposit, file by file
//!
//! 1. `http/deposits.rs` asks [`deposits`] to open a crypto invoice through
//!    the BTCPay Greenfield adapter (`payments/btcpay.rs`); the deposit is
//!    stored `pending`.
//! 2. The provider's webhook reaches [`deposits`] on `/callbacks/btcpay`: the
//!    signature is verified over the raw body, the invoice is read back, and
//!    the state table of [`domain::deposit`] decides the next step. A
//!    credit goes through the partner's account actor (one ledger row, once).
//! 3. `deposits::reconcile_until_stopped` asks the provider about invoices
//!    whose webhook went quiet and lapses expired ones.
//!
//! ## Around them
//!
//! - [`app`] builds and runs the service (listeners, routers, background
//!   tasks, graceful shutdown); [`state`] is what handlers read.
//! - [`operator`]: the operator API on its own listener, the `admin` CLI,
//!   and the console at `/console` (deposit reviews are decided through the
//!   account actor whichever of the three an operator uses).
//! - [`simulators`]: copies of eSIM Access and BTCPay Server built from their
//!   documentation and source, with injectable faults.
//! - [`docs`]: the partner docs: quickstart, guides, the API reference with
//!   samples generated from the OpenAPI examples, and the errors page every
//!   `doc_url` points into.
//! - [`telemetry`]: log output; [`metrics`]: Prometheus text at `/metrics`;
//!   [`periodic`]: the loop behind every background pass.
//! - [`loadtest`]: drives a running server and checks the money.
//!
//! `docs/architecture.md` draws the actors, their supervision and the data
//! flow.

#![warn(unreachable_pub)]
// The tour above links the crate's private modules: the documentation is
// for the crate's developers and is built with `--document-private-items`
// (CI: `cargo doc --no-deps --document-private-items` with warnings denied),
// where every such link resolves.
#![allow(rustdoc::private_intra_doc_links)]

pub(crate) mod actors;
pub mod app;
pub(crate) mod auth;
pub mod backup;
pub mod catalogue;
pub mod config;
pub(crate) mod deposits;
pub mod docs;
pub mod domain;
pub mod http;
pub(crate) mod limits;
pub mod loadtest;
pub(crate) mod metrics;
pub mod operator;
pub mod payments;
pub(crate) mod periodic;
pub(crate) mod simulators;
pub(crate) mod state;
pub mod store;
pub mod supplier;
pub(crate) mod sync;
pub mod telemetry;

/// Installs ring as the process's TLS crypto provider (reqwest is built
/// without one). Idempotent; call before building any HTTP client.
pub fn install_tls_provider() {
    let _already_installed = rustls::crypto::ring::default_provider().install_default();
}
