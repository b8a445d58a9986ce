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

/// Order rows for tests, as the account actor makes them.
#[cfg(test)]
pub(crate) mod fixtures {
    use chrono::Utc;
    use entities::order;

    use super::OrderStatus;
    use crate::domain::partner::Mode;

    /// A sandbox order just accepted: one unit of `pl_x` at `total_cents`,
    /// priced by the gold tier, with no metadata, created now.
    pub(crate) fn accepted(
        id: &str,
        partner_id: &str,
        key: &str,
        total_cents: i64,
    ) -> order::Model {
        order::Model {
            id: id.into(),
            partner_id: partner_id.into(),
            mode: Mode::Sandbox,
            idempotency_key: key.into(),
            plan_id: "pl_x".into(),
            quantity: 1,
            unit_price_cents: total_cents,
            total_cents,
            list_unit_cents: total_cents,
            price_source: "tier:gold".into(),
            metadata: serde_json::json!({}),
            status: OrderStatus::Processing,
            failure_code: None,
            refunded_cents: 0,
            attempts: 0,
            claimed_until: None,
            claimed_by: None,
            created_at: Utc::now(),
            completed_at: None,
        }
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
