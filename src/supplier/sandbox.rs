//! The supplier sandbox orders use: in process, no money, no network.
//! Fixture plans behave as documented: `pl_sandbox_supplier_error` fails every
//! unit, `pl_sandbox_partial` fails every even unit, `pl_sandbox_slow` takes
//! `sandbox.slow_provisioning_ms` to allocate.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use async_trait::async_trait;

use super::{Allocation, Placed, Profile, Supplier, SupplierError, Usage};
use crate::domain::esim;

/// SM-DP+ address of sandbox profiles.
pub(crate) const SANDBOX_SMDP: &str = "smdp.sandbox.esim-reseller.invalid";

pub(crate) struct SandboxSupplier {
    slow: Duration,
    /// Order number → (ready at, transaction id, count).
    orders: Mutex<HashMap<String, (Instant, String, u32)>>,
}

impl SandboxSupplier {
    pub(crate) fn new(slow: Duration) -> Self {
        Self {
            slow,
            orders: Mutex::new(HashMap::new()),
        }
    }
}

/// The unit number at the end of a unit id (`po_x_3` → 3).
fn unit_number(transaction_id: &str) -> u64 {
    transaction_id
        .rsplit('_')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1)
}

/// How many ICCID serials there are: 15 digits after `89` and the issuer
/// `99`, before the check digit.
pub(crate) const ICCID_SERIALS: u64 = 1_000_000_000_000_000;

/// A deterministic profile for a transaction: its ICCID, matching id and
/// transaction number all drawn from the transaction id's digest.
fn profile_for(transaction_id: &str, smdp: &str) -> Profile {
    let digest = digest_of(transaction_id);
    let serial = u64::from_be_bytes(digest[..8].try_into().unwrap_or([0; 8])) % ICCID_SERIALS;
    profile_with_serial(&digest, serial, smdp)
}

/// SHA-256 of a transaction id (or of a unit's, `<id>#<n>`).
fn digest_of(transaction_id: &str) -> [u8; 32] {
    sha2::Digest::finalize(<sha2::Sha256 as sha2::Digest>::new_with_prefix(
        transaction_id.as_bytes(),
    ))
    .into()
}

/// The profile whose matching id and transaction number come from `digest`
/// and whose ICCID has `serial`.
fn profile_with_serial(digest: &[u8; 32], serial: u64, smdp: &str) -> Profile {
    let matching = hex::encode_upper(&digest[8..20]);
    Profile {
        iccid: esim::iccid_from_serial("99", serial),
        activation_code: esim::activation_code(smdp, &matching),
        // A number of 14 digits, as the supplier's own.
        esim_tran_no: Some(format!(
            "{:014}",
            u64::from_be_bytes(digest[20..28].try_into().unwrap_or([0; 8])) % 100_000_000_000_000
        )),
    }
}

/// The id each unit's profile is drawn from: the transaction's own for an
/// order of one, `<id>#<n>` for the n-th of several.
fn unit_ids(transaction_id: &str, count: u32) -> Vec<String> {
    if count <= 1 {
        return vec![transaction_id.to_owned()];
    }
    (1..=count)
        .map(|n| format!("{transaction_id}#{n}"))
        .collect()
}

/// The profiles of a supplier order: one per unit, each a deterministic
/// function of the transaction id and its place in the order.
pub(crate) fn profiles_for(transaction_id: &str, count: u32, smdp: &str) -> Vec<Profile> {
    unit_ids(transaction_id, count)
        .iter()
        .map(|id| profile_for(id, smdp))
        .collect()
}

/// The profiles of a supplier order whose ICCIDs a stock issued together,
/// `first_serial` and the serials after it, one a unit in order; the
/// matching ids and transaction numbers as [`profiles_for`] draws them.
pub(crate) fn profiles_from_stock(
    transaction_id: &str,
    first_serial: u64,
    count: u32,
    smdp: &str,
) -> Vec<Profile> {
    (0u64..)
        .zip(unit_ids(transaction_id, count))
        .map(|(n, id)| {
            let serial = (first_serial + n) % ICCID_SERIALS;
            profile_with_serial(&digest_of(&id), serial, smdp)
        })
        .collect()
}

#[async_trait]
impl Supplier for SandboxSupplier {
    async fn place_order(
        &self,
        transaction_id: &str,
        package_code: &str,
        count: u32,
    ) -> Result<Placed, SupplierError> {
        let fails = match package_code {
            "pl_sandbox_supplier_error" => true,
            "pl_sandbox_partial" => unit_number(transaction_id).is_multiple_of(2),
            _ => false,
        };
        if fails {
            return Err(SupplierError::Refused("sandbox fixture: no stock".into()));
        }
        let delay = if package_code == "pl_sandbox_slow" {
            self.slow
        } else {
            Duration::ZERO
        };
        let order_no = format!("SBX{}", &transaction_id.replace('_', ""));
        crate::sync::lock(&self.orders)
            .entry(order_no.clone())
            .or_insert((Instant::now() + delay, transaction_id.to_owned(), count));
        Ok(Placed::unpriced(order_no))
    }

    async fn query(&self, order_no: &str) -> Result<Allocation, SupplierError> {
        let entry = crate::sync::lock(&self.orders).get(order_no).cloned();
        match entry {
            None => Err(SupplierError::Refused("unknown order".into())),
            Some((ready_at, _, _)) if Instant::now() < ready_at => Ok(Allocation::Pending),
            Some((_, transaction_id, count)) => Ok(Allocation::Ready(profiles_for(
                &transaction_id,
                count,
                SANDBOX_SMDP,
            ))),
        }
    }

    async fn usage(
        &self,
        _iccid: &str,
        _esim_tran_no: Option<&str>,
    ) -> Result<Usage, SupplierError> {
        Ok(Usage {
            data_used_mb: 0,
            data_total_mb: 0,
        })
    }
}
