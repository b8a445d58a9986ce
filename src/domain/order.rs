//! Order and unit states, and how an order settles once every unit has.

pub(crate) use entities::states::{FailureCode, OrderStatus, UnitStatus};

/// The final status of an order from its unit counts, or `None` while any
/// unit is pending.
pub(crate) fn settled_status(
    delivered: usize,
    refunded: usize,
    pending: usize,
) -> Option<OrderStatus> {
    match (delivered, refunded, pending) {
        (_, _, p) if p > 0 => None,
        (_, 0, _) => Some(OrderStatus::Completed),
        (0, _, _) => Some(OrderStatus::Failed),
        _ => Some(OrderStatus::PartiallyCompleted),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_order_settles_only_when_no_unit_is_pending() {
        assert_eq!(settled_status(1, 0, 1), None);
        assert_eq!(settled_status(3, 0, 0), Some(OrderStatus::Completed));
        assert_eq!(settled_status(0, 3, 0), Some(OrderStatus::Failed));
        assert_eq!(
            settled_status(2, 1, 0),
            Some(OrderStatus::PartiallyCompleted)
        );
    }
}
