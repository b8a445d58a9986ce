//! Pure rules of the business: no I/O, no clocks except where passed in.
//! Everything here is unit-tested beside its code.
//!
//! The closed vocabularies (modes, statuses, kinds) are declared once in
//! `entities::states`, where sea-orm stores them, and re-exported here with
//! the rules that give them meaning; [`states`] gathers them all.

pub(crate) mod admission;
pub mod api_key;
pub mod audit;
pub mod cursor;
pub(crate) mod deposit;
pub(crate) mod digest;
pub mod esim;
pub mod idempotency;
pub mod ids;
pub mod net;
pub mod operators;
pub(crate) mod order;
pub(crate) mod ordering;
pub mod pace;
pub mod partner;
pub(crate) mod pricing;
pub mod quota;
pub(crate) mod rate;
pub(crate) mod review;
pub(crate) mod supplier;
pub(crate) mod time;
pub(crate) mod validation;

/// Every stored vocabulary, for code that needs several.
pub(crate) mod states {
    pub(crate) use entities::states::*;
}
