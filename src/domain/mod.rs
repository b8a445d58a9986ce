//! Pure rules of the business: no I/O, no clocks except where passed in.
//! Everything here is unit-tested beside its code.

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
