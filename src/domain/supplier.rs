//! Which wholesale supplier sells what, in which order of preference, and
//! when one is left out of the route for a while.
//!
//! - [`SupplierName`]: the suppliers this service speaks to.
//! - [`Route`]: the configured preference (`suppliers.route`, e.g.
//!   `esim_access,airalo`).
//! - [`Packages`]: a plan's package at each supplier that sells it (a plan
//!   with none named is sold by eSIM Access under its own id).
//! - [`Breaker`]: a circuit breaker per supplier. After `threshold`
//!   failures in a row it opens for `open_for`; then one call at a time is
//!   let through as a probe (half-open), and the first success closes it.
//!
//! Nothing here reads a clock: the caller passes `now`.

use std::{
    collections::BTreeMap,
    fmt,
    time::{Duration, Instant},
};

use serde::Serialize;

/// A supplier this service buys from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SupplierName {
    /// eSIM Access's open API.
    EsimAccess,
    /// Airalo's Partner API v2.
    Airalo,
}

impl SupplierName {
    /// Every supplier, in the default order of preference.
    pub const ALL: [SupplierName; 2] = [SupplierName::EsimAccess, SupplierName::Airalo];

    /// The stored and configured word.
    pub fn as_str(self) -> &'static str {
        match self {
            SupplierName::EsimAccess => "esim_access",
            SupplierName::Airalo => "airalo",
        }
    }

    /// The supplier a word names, if any.
    pub fn parse(word: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == word)
    }
}

impl fmt::Display for SupplierName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The suppliers to try, most preferred first, each at most once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route(Vec<SupplierName>);

impl Default for Route {
    /// eSIM Access alone.
    fn default() -> Self {
        Self(vec![SupplierName::EsimAccess])
    }
}

impl Route {
    /// Parses `esim_access,airalo` (spaces allowed); names the first word
    /// that is not a supplier, or a repeated one.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut route = Vec::new();
        for word in text.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            let name = SupplierName::parse(word).ok_or_else(|| {
                format!("`{word}` is not a supplier (known: esim_access, airalo)")
            })?;
            if route.contains(&name) {
                return Err(format!("`{word}` appears twice"));
            }
            route.push(name);
        }
        if route.is_empty() {
            return Err("names no supplier".into());
        }
        Ok(Self(route))
    }

    /// The suppliers, most preferred first.
    pub fn suppliers(&self) -> &[SupplierName] {
        &self.0
    }

    /// Whether the route has this supplier.
    pub fn contains(&self, name: SupplierName) -> bool {
        self.0.contains(&name)
    }

    /// The suppliers of the route that sell a plan, with their package, in
    /// route order.
    pub fn sellers<'a>(&self, packages: &'a Packages) -> Vec<(SupplierName, &'a str)> {
        self.0
            .iter()
            .filter_map(|name| packages.of(*name).map(|code| (*name, code)))
            .collect()
    }

    /// The next supplier after `current` in the route that sells the plan.
    pub fn next_after<'a>(
        &self,
        current: SupplierName,
        packages: &'a Packages,
    ) -> Option<(SupplierName, &'a str)> {
        let from = self.0.iter().position(|s| *s == current)?;
        self.0[from + 1..]
            .iter()
            .find_map(|name| packages.of(*name).map(|code| (*name, code)))
    }
}

/// A plan's package code at each supplier that sells it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Packages(BTreeMap<SupplierName, String>);

impl Packages {
    /// The packages stored with a plan: `{"esim_access": "...", "airalo":
    /// "..."}`; null (or an object naming none) means eSIM Access under the
    /// plan's own id. Unknown supplier names are ignored (a catalogue written
    /// by a newer version).
    pub fn of_plan(plan_id: &str, stored: Option<&serde_json::Value>) -> Self {
        let mut packages = BTreeMap::new();
        if let Some(object) = stored.and_then(serde_json::Value::as_object) {
            for (word, code) in object {
                if let (Some(name), Some(code)) = (SupplierName::parse(word), code.as_str())
                    && !code.is_empty()
                {
                    packages.insert(name, code.to_owned());
                }
            }
        }
        if packages.is_empty() {
            packages.insert(SupplierName::EsimAccess, plan_id.to_owned());
        }
        Self(packages)
    }

    /// The package at one supplier, if it sells the plan.
    pub fn of(&self, name: SupplierName) -> Option<&str> {
        self.0.get(&name).map(String::as_str)
    }
}

/// Problems with a `supplier_packages` object as an operator loads it.
pub(crate) fn check_packages(packages: &BTreeMap<String, String>) -> Option<String> {
    for (word, code) in packages {
        if SupplierName::parse(word).is_none() {
            return Some(format!(
                "`{word}` is not a supplier (known: esim_access, airalo)"
            ));
        }
        let valid = !code.is_empty()
            && code.len() <= 100
            && code
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
        if !valid {
            return Some(format!(
                "the {word} package must be 1 to 100 letters, digits, `-`, `_` or `.`"
            ));
        }
    }
    None
}

/// Where a supplier's breaker stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    /// Calls go out.
    Closed,
    /// Out of the route until then.
    Open { until: Instant },
    /// The open time is over: one probe call at a time goes out.
    HalfOpen,
}

/// A supplier's circuit breaker.
#[derive(Debug, Clone)]
pub struct Breaker {
    /// Failures in a row that open it.
    threshold: u32,
    /// How long it stays open.
    open_for: Duration,
    /// Failures in a row so far.
    failures: u32,
    /// Open until then, if opened.
    open_until: Option<Instant>,
    /// A probe is out (half-open): other calls wait for its answer.
    probing: bool,
    /// Times it opened since start.
    opened: u64,
}

impl Breaker {
    /// A closed breaker that opens after `threshold` failures in a row (0:
    /// never) for `open_for`.
    pub fn new(threshold: u32, open_for: Duration) -> Self {
        Self {
            threshold,
            open_for,
            failures: 0,
            open_until: None,
            probing: false,
            opened: 0,
        }
    }

    /// Where it stands at `now`.
    pub fn state(&self, now: Instant) -> BreakerState {
        match self.open_until {
            None => BreakerState::Closed,
            Some(until) if now < until => BreakerState::Open { until },
            Some(_) => BreakerState::HalfOpen,
        }
    }

    /// Whether a call may go out now; a call let through while half-open is
    /// the probe, and no other is let through until it answers.
    pub fn allow(&mut self, now: Instant) -> bool {
        match self.state(now) {
            BreakerState::Closed => true,
            BreakerState::Open { .. } => false,
            BreakerState::HalfOpen if self.probing => false,
            BreakerState::HalfOpen => {
                self.probing = true;
                true
            }
        }
    }

    /// Whether new work should be given to this supplier now (a closed
    /// breaker, or a half-open one with no probe out).
    pub fn takes_work(&self, now: Instant) -> bool {
        match self.state(now) {
            BreakerState::Closed => true,
            BreakerState::Open { .. } => false,
            BreakerState::HalfOpen => !self.probing,
        }
    }

    /// The supplier answered (even with a refusal: it is up).
    pub fn success(&mut self) {
        self.failures = 0;
        self.open_until = None;
        self.probing = false;
    }

    /// The supplier could not be reached or failed; returns true when this
    /// failure opened the breaker.
    pub fn failure(&mut self, now: Instant) -> bool {
        self.failures = self.failures.saturating_add(1);
        let was_probe = self.probing;
        self.probing = false;
        let opens = self.threshold > 0 && (was_probe || self.failures >= self.threshold);
        if opens {
            let reopening = self.open_until.is_some();
            self.open_until = Some(now + self.open_for);
            if !reopening {
                self.opened += 1;
            }
            return !reopening;
        }
        false
    }

    /// Failures in a row so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Times it opened since start.
    pub fn opened(&self) -> u64 {
        self.opened
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_route_parses_in_order_and_names_bad_words() {
        let route = Route::parse("esim_access, airalo").unwrap();
        assert_eq!(
            route.suppliers(),
            &[SupplierName::EsimAccess, SupplierName::Airalo]
        );
        assert!(Route::parse("airalo,airalo").unwrap_err().contains("twice"));
        assert!(Route::parse("acme").unwrap_err().contains("acme"));
        assert!(Route::parse(" , ").is_err());
    }

    #[test]
    fn a_plan_without_packages_is_sold_by_esim_access_under_its_id() {
        let packages = Packages::of_plan("pl_fr_1gb_7d", None);
        assert_eq!(packages.of(SupplierName::EsimAccess), Some("pl_fr_1gb_7d"));
        assert_eq!(packages.of(SupplierName::Airalo), None);
        let empty = Packages::of_plan("pl_x", Some(&json!({})));
        assert_eq!(empty.of(SupplierName::EsimAccess), Some("pl_x"));
    }

    #[test]
    fn sellers_and_the_next_supplier_follow_the_route() {
        let both = Packages::of_plan(
            "pl_fr",
            Some(&json!({"esim_access": "pl_fr", "airalo": "bonjour-7days-1gb", "acme": "x"})),
        );
        let airalo_only = Packages::of_plan("pl_de", Some(&json!({"airalo": "hallo-7days-1gb"})));
        let route = Route::parse("esim_access,airalo").unwrap();
        assert_eq!(route.sellers(&both).len(), 2);
        assert_eq!(
            route.sellers(&airalo_only),
            vec![(SupplierName::Airalo, "hallo-7days-1gb")]
        );
        assert_eq!(
            route.next_after(SupplierName::EsimAccess, &both),
            Some((SupplierName::Airalo, "bonjour-7days-1gb"))
        );
        assert_eq!(route.next_after(SupplierName::Airalo, &both), None);
        let alone = Route::parse("esim_access").unwrap();
        assert_eq!(alone.next_after(SupplierName::EsimAccess, &both), None);
        assert!(alone.sellers(&airalo_only).is_empty());
    }

    #[test]
    fn packages_are_checked_by_supplier_and_code() {
        let ok = BTreeMap::from([("airalo".to_owned(), "merhaba-7days-1gb".to_owned())]);
        assert_eq!(check_packages(&ok), None);
        let unknown = BTreeMap::from([("acme".to_owned(), "x".to_owned())]);
        assert!(check_packages(&unknown).unwrap().contains("acme"));
        let bad = BTreeMap::from([("airalo".to_owned(), "a b".to_owned())]);
        assert!(check_packages(&bad).is_some());
    }

    #[test]
    fn the_breaker_opens_after_failures_in_a_row_and_probes_once() {
        let now = Instant::now();
        let mut breaker = Breaker::new(3, Duration::from_secs(10));
        assert!(!breaker.failure(now));
        breaker.success();
        assert!(!breaker.failure(now));
        assert!(!breaker.failure(now));
        assert!(breaker.failure(now), "the third failure in a row opens it");
        assert!(!breaker.allow(now));
        assert!(!breaker.takes_work(now + Duration::from_secs(9)));
        let later = now + Duration::from_secs(10);
        assert_eq!(breaker.state(later), BreakerState::HalfOpen);
        assert!(breaker.allow(later), "one probe goes out");
        assert!(!breaker.allow(later), "and only one");
        assert!(!breaker.failure(later), "a failed probe keeps it open");
        assert!(matches!(
            breaker.state(later),
            BreakerState::Open { until } if until == later + Duration::from_secs(10)
        ));
        let again = later + Duration::from_secs(10);
        assert!(breaker.allow(again));
        breaker.success();
        assert_eq!(breaker.state(again), BreakerState::Closed);
        assert!(breaker.allow(again) && breaker.allow(again));
        assert_eq!(breaker.opened(), 1);
    }

    #[test]
    fn a_breaker_with_no_threshold_never_opens() {
        let now = Instant::now();
        let mut breaker = Breaker::new(0, Duration::from_secs(10));
        for _ in 0..100 {
            breaker.failure(now);
        }
        assert!(breaker.allow(now));
        assert_eq!(breaker.failures(), 100);
    }
}
