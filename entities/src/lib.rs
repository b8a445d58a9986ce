//! sea-orm entities of esim-reseller: one module per table.
//!
//! Enum-like columns (`status`, `mode`, `tier`) are stored as short strings so
//! that one schema serves SQLite and PostgreSQL; `src/domain` owns their
//! parsing and their meaning.

pub mod api_key;
pub mod catalogue_version;
pub mod deposit;
pub mod destination;
pub mod esim;
pub mod float;
pub mod idempotency_key;
pub mod ledger_entry;
pub mod node;
pub mod order;
pub mod order_unit;
pub mod partner;
pub mod plan;
pub mod provider_delivery;
pub mod review;
pub mod supplier_order;
