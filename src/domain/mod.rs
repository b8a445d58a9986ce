//! Pure rules of the business: no I/O, no clocks except where passed in.
//! Everything here is unit-tested beside its code.
//!
//! The closed vocabularies (modes, statuses, kinds) are declared once in
//! `entities::states`, where sea-orm stores them, and re-exported here with
//! the rules that give them meaning; [`states`] gathers them all.

pub mod admission;
pub mod api_key;
pub mod cursor;
pub mod deposit;
pub mod esim;
pub mod idempotency;
pub mod ids;
pub mod net;
pub mod order;
pub mod ordering;
pub mod partner;
pub mod pricing;
pub mod rate;
pub mod time;
pub mod validation;

/// Every stored vocabulary, for code that needs several.
pub mod states {
    pub use entities::states::*;
}
