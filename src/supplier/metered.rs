//! A [`Supplier`] that counts and times every call of the one it wraps
//! (`esim_supplier_calls_total`, `esim_supplier_call_duration_seconds`), so
//! the adapter itself stays free of metrics and time-outs are counted as the
//! service saw them. It also keeps a [`Tally`] of calls made and units
//! placed, from which admission learns how many units a call moves.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Instant,
};

use async_trait::async_trait;

use super::{Allocation, Placed, Supplier, SupplierError, Usage};
use crate::metrics::supplier_call;

/// The outcome label of a supplier call: `ok`, `refused`, `transient`,
/// `slow_down` or `not_sent`
/// (a query for a profile still being allocated is `pending`, decided by the caller).
pub(crate) fn supplier_outcome<T>(result: &Result<T, SupplierError>) -> &'static str {
    match result {
        Ok(_) => "ok",
        Err(SupplierError::Refused(_)) => "refused",
        Err(SupplierError::Transient(_)) => "transient",
        Err(SupplierError::SlowDown(_)) => "slow_down",
        Err(SupplierError::NotSent(_)) => "not_sent",
    }
}

/// Calls made to a supplier and units it accepted, since start.
#[derive(Debug, Default)]
pub struct Tally {
    calls: AtomicU64,
    units_placed: AtomicU64,
}

impl Tally {
    /// (calls, units placed) so far.
    pub fn read(&self) -> (u64, u64) {
        (
            self.calls.load(Ordering::Relaxed),
            self.units_placed.load(Ordering::Relaxed),
        )
    }

    fn call(&self) {
        self.calls.fetch_add(1, Ordering::Relaxed);
    }
}

/// Wraps a supplier; every call is recorded with its operation and outcome.
pub(crate) struct Metered {
    /// The supplier's name, the `supplier` label of its metrics.
    name: &'static str,
    inner: Arc<dyn Supplier>,
    tally: Arc<Tally>,
}

impl Metered {
    pub(crate) fn new(name: &'static str, inner: Arc<dyn Supplier>) -> Self {
        Self {
            name,
            inner,
            tally: Arc::default(),
        }
    }

    /// The running count of this supplier's calls and placed units.
    pub(crate) fn tally(&self) -> Arc<Tally> {
        self.tally.clone()
    }
}

#[async_trait]
impl Supplier for Metered {
    async fn place_order(
        &self,
        transaction_id: &str,
        package_code: &str,
        count: u32,
    ) -> Result<Placed, SupplierError> {
        let started = Instant::now();
        let result = self
            .inner
            .place_order(transaction_id, package_code, count)
            .await;
        supplier_call(
            self.name,
            "place_order",
            supplier_outcome(&result),
            started.elapsed(),
        );
        self.tally.call();
        if result.is_ok() {
            self.tally
                .units_placed
                .fetch_add(u64::from(count), Ordering::Relaxed);
        }
        result
    }

    async fn query(&self, order_no: &str) -> Result<Allocation, SupplierError> {
        let started = Instant::now();
        let result = self.inner.query(order_no).await;
        let outcome = match &result {
            Ok(Allocation::Pending) => "pending",
            other => supplier_outcome(other),
        };
        supplier_call(self.name, "query", outcome, started.elapsed());
        self.tally.call();
        result
    }

    async fn usage(&self, iccid: &str, esim_tran_no: Option<&str>) -> Result<Usage, SupplierError> {
        let started = Instant::now();
        let result = self.inner.usage(iccid, esim_tran_no).await;
        supplier_call(
            self.name,
            "usage",
            supplier_outcome(&result),
            started.elapsed(),
        );
        self.tally.call();
        result
    }

    fn idempotent_placement(&self) -> bool {
        self.inner.idempotent_placement()
    }

    async fn find_order(&self, transaction_id: &str) -> Result<Option<Placed>, SupplierError> {
        let started = Instant::now();
        let result = self.inner.find_order(transaction_id).await;
        supplier_call(
            self.name,
            "find_order",
            supplier_outcome(&result),
            started.elapsed(),
        );
        self.tally.call();
        result
    }

    fn max_units_per_order(&self) -> u32 {
        self.inner.max_units_per_order()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn supplier_outcomes() {
        let placed: Result<Placed, SupplierError> = Ok(Placed::unpriced("B1"));
        assert_eq!(supplier_outcome(&placed), "ok");
        let refused: Result<Placed, SupplierError> = Err(SupplierError::Refused("no".into()));
        assert_eq!(supplier_outcome(&refused), "refused");
        let down: Result<Placed, SupplierError> = Err(SupplierError::Transient("503".into()));
        assert_eq!(supplier_outcome(&down), "transient");
    }
}
