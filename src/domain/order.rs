//! Order and unit states, and how an order settles once every unit has.

/// A unit not yet delivered or refunded.
pub const UNIT_PENDING: &str = "pending";
/// A unit whose profile is stored.
pub const UNIT_DELIVERED: &str = "delivered";
/// A unit whose money went back to the float.
pub const UNIT_REFUNDED: &str = "refunded";

/// Some unit is not settled yet.
pub const PROCESSING: &str = "processing";
/// Every unit delivered.
pub const COMPLETED: &str = "completed";
/// Some units delivered, the rest refunded.
pub const PARTIALLY_COMPLETED: &str = "partially_completed";
/// No unit delivered; everything refunded.
pub const FAILED: &str = "failed";

/// Every order status, for validating filters.
pub const STATUSES: [&str; 4] = [PROCESSING, COMPLETED, PARTIALLY_COMPLETED, FAILED];

/// Why undelivered units were refunded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureCode {
    /// The supplier could not provision them.
    SupplierError,
    /// The order could not be opened after the last attempt.
    InternalError,
}

impl FailureCode {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureCode::SupplierError => "supplier_error",
            FailureCode::InternalError => "internal_error",
        }
    }
}

/// The final status of an order from its unit counts, or `None` while any
/// unit is pending.
pub fn settled_status(delivered: usize, refunded: usize, pending: usize) -> Option<&'static str> {
    match (delivered, refunded, pending) {
        (_, _, p) if p > 0 => None,
        (_, 0, _) => Some(COMPLETED),
        (0, _, _) => Some(FAILED),
        _ => Some(PARTIALLY_COMPLETED),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_order_settles_only_when_no_unit_is_pending() {
        assert_eq!(settled_status(1, 0, 1), None);
        assert_eq!(settled_status(3, 0, 0), Some(COMPLETED));
        assert_eq!(settled_status(0, 3, 0), Some(FAILED));
        assert_eq!(settled_status(2, 1, 0), Some(PARTIALLY_COMPLETED));
    }
}
