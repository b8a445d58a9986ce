//! sea-orm entities of esim-reseller: one module per table.
//!
//! Enum-like columns (`status`, `mode`, `kind`) are typed by the closed
//! vocabularies of [`states`] and stored as their short words, so one schema
//! serves SQLite and PostgreSQL and a stored word outside the vocabulary fails
//! to load. `tier` stays text: tiers are named by the configuration.

pub mod api_key;
pub mod approval;
pub mod audit_event;
pub mod catalogue_version;
pub mod deposit;
pub mod destination;
pub mod esim;
pub mod float;
pub mod idempotency_key;
pub mod ledger_entry;
pub mod node;
pub mod operator;
pub mod order;
pub mod order_unit;
pub mod partner;
pub mod plan;
pub mod provider_delivery;
pub mod review;
pub mod states;
pub mod supplier_order;
