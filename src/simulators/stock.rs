//! ICCIDs issued as a supplier's stock issues them: in order from one
//! range, the profiles of one order next to each other (the two profiles of
//! eSIM Access's own query example, `tests/fixtures/esim_access/`, are
//! 8943108170000775671 and 8943108170000775689, serials 77567 and 77568).
//! Drawn from a digest of each transaction instead (as the sandbox supplier
//! draws them), they would scatter over the whole range, and every profile
//! the service stores would land on a page of its own in the index of
//! ICCIDs, where a real supplier's, issued in order, land together: a cost
//! of the stand-in that a benchmark would count as the service's.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::supplier::sandbox::ICCID_SERIALS;

/// The next serial a simulator issues.
pub(crate) struct IccidStock {
    /// The serial the next profile gets.
    next: AtomicU64,
}

impl IccidStock {
    /// A stock whose range starts at a random serial, so that two
    /// simulators, or one started again against the same database, issue
    /// different ICCIDs (two ranges of even ten million profiles each
    /// overlap with a chance of one in fifty million).
    pub(crate) fn new() -> Self {
        Self::starting_at(rand::random_range(0..ICCID_SERIALS))
    }

    /// A stock whose next serial is `serial`.
    fn starting_at(serial: u64) -> Self {
        Self {
            next: AtomicU64::new(serial),
        }
    }

    /// The first of `count` serials issued together (at least one): the
    /// order's profiles take it and the ones after it.
    pub(crate) fn take(&self, count: u32) -> u64 {
        self.next
            .fetch_add(u64::from(count.max(1)), Ordering::Relaxed)
            % ICCID_SERIALS
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::supplier::sandbox::profiles_from_stock;

    #[test]
    fn an_orders_profiles_take_consecutive_iccids_and_the_next_order_follows() {
        let stock = IccidStock::starting_at(77_566);
        let first = profiles_from_stock("po_a", stock.take(2), 2, "smdp.example");
        let next = profiles_from_stock("po_b", stock.take(1), 1, "smdp.example");
        let iccids: Vec<&str> = first
            .iter()
            .chain(&next)
            .map(|p| p.iccid.as_str())
            .collect();
        assert_eq!(
            iccids,
            [
                "89990000000000775664",
                "89990000000000775672",
                "89990000000000775680"
            ]
        );
        assert!(
            iccids
                .iter()
                .all(|iccid| crate::domain::esim::is_valid_iccid(iccid))
        );
        // Each unit keeps a matching id of its own.
        assert_ne!(first[0].activation_code, first[1].activation_code);
    }

    #[test]
    fn the_range_wraps_at_its_end() {
        let stock = IccidStock::starting_at(ICCID_SERIALS - 1);
        assert_eq!(stock.take(1), ICCID_SERIALS - 1);
        assert_eq!(stock.take(1), 0);
        let profiles = profiles_from_stock("po_c", ICCID_SERIALS - 1, 2, "smdp.example");
        assert_eq!(
            profiles[1].iccid,
            crate::domain::esim::iccid_from_serial("99", 0)
        );
    }
}
