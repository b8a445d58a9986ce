//! The service's clock reading.

use chrono::{DateTime, SubsecRound, Utc};

/// Now, to the microsecond: the precision both databases store, so a value
/// read back equals the value written.
pub(crate) fn now() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(6)
}
