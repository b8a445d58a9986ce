//! Fixed-window rate limits: classes, bands, and the window arithmetic.
//!
//! A window of `w` seconds starts at every multiple of `w` since the Unix
//! epoch, so every node agrees on the window without talking to each other.

use serde::{Deserialize, Serialize};

/// The rate class of a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RateClass {
    Read,
    Write,
    Supplier,
    Catalogue,
}

impl RateClass {
    pub const ALL: [RateClass; 4] = [
        RateClass::Read,
        RateClass::Write,
        RateClass::Supplier,
        RateClass::Catalogue,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RateClass::Read => "read",
            RateClass::Write => "write",
            RateClass::Supplier => "supplier",
            RateClass::Catalogue => "catalogue",
        }
    }

    /// The class's place in [`RateClass::ALL`], which lists the classes in
    /// their declaration order (a test holds it).
    fn position(self) -> usize {
        self as usize
    }
}

/// The names of one API key's rate-limit windows, one per class
/// (`key:<key id>:<class>`), made once when the key is looked up rather
/// than formatted on every request. Every node names them alike, so the
/// Redis backend's windows are shared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyBuckets([String; 4]);

impl KeyBuckets {
    /// The buckets of the key with this id.
    pub fn for_key(key_id: &str) -> Self {
        Self(RateClass::ALL.map(|class| format!("key:{key_id}:{}", class.as_str())))
    }

    /// The bucket counting this key's requests of `class`.
    pub fn of(&self, class: RateClass) -> &str {
        &self.0[class.position()]
    }
}

/// A limit per window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Window {
    /// Requests permitted per window.
    pub limit: u32,
    /// Length of the window.
    pub window_seconds: u32,
}

/// The four windows of one band.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Band {
    pub read: Window,
    pub write: Window,
    pub supplier: Window,
    pub catalogue: Window,
}

impl Band {
    /// The window of a class.
    pub fn window(&self, class: RateClass) -> Window {
        match class {
            RateClass::Read => self.read,
            RateClass::Write => self.write,
            RateClass::Supplier => self.supplier,
            RateClass::Catalogue => self.catalogue,
        }
    }

    /// Every class with its window.
    pub fn windows(&self) -> [(RateClass, Window); 4] {
        RateClass::ALL.map(|class| (class, self.window(class)))
    }
}

/// Start (inclusive) and end (exclusive) of the window holding `now_unix`, in seconds.
pub(crate) fn window_bounds(now_unix: u64, window_seconds: u32) -> (u64, u64) {
    let length = u64::from(window_seconds.max(1));
    let start = now_unix - now_unix % length;
    (start, start + length)
}

/// What a counted request learns about its window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowState {
    /// Requests permitted in the window.
    pub limit: u32,
    /// Requests left after this one; floors at 0.
    pub remaining: u32,
    /// Unix seconds at which the window ends.
    pub reset_unix: u64,
    /// Whether this request is within the limit.
    pub allowed: bool,
}

impl WindowState {
    /// The state after the `count`-th request of a window.
    pub fn after(count: u64, window: Window, reset_unix: u64) -> Self {
        Self {
            limit: window.limit,
            remaining: u64::from(window.limit).saturating_sub(count) as u32,
            reset_unix,
            allowed: count <= u64::from(window.limit),
        }
    }

    /// Whole seconds until the window ends, never 0 (for `Retry-After`).
    pub fn retry_after_seconds(&self, now_unix_ms: u64) -> u64 {
        let reset_ms = self.reset_unix * 1000;
        reset_ms.saturating_sub(now_unix_ms).div_ceil(1000).max(1)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The buckets keep the names formatted per request before them, which
    /// other nodes (and windows already counted in Redis) go by.
    #[test]
    fn key_buckets_are_named_per_key_and_class() {
        let buckets = KeyBuckets::for_key("key_01ABC");
        for class in RateClass::ALL {
            assert_eq!(
                buckets.of(class),
                format!("key:key_01ABC:{}", class.as_str())
            );
        }
        assert_eq!(buckets.of(RateClass::Write), "key:key_01ABC:write");
        for (place, class) in RateClass::ALL.into_iter().enumerate() {
            assert_eq!(class.position(), place);
        }
    }

    const FIVE: Window = Window {
        limit: 3,
        window_seconds: 5,
    };

    #[test]
    fn windows_align_to_multiples_of_their_length() {
        assert_eq!(window_bounds(1_000_003, 5), (1_000_000, 1_000_005));
        assert_eq!(window_bounds(1_000_005, 5), (1_000_005, 1_000_010));
        assert_eq!(window_bounds(59, 60), (0, 60));
    }

    #[test]
    fn remaining_floors_at_zero_and_the_limit_is_inclusive() {
        assert_eq!(WindowState::after(1, FIVE, 10).remaining, 2);
        let last = WindowState::after(3, FIVE, 10);
        assert!(last.allowed);
        assert_eq!(last.remaining, 0);
        let over = WindowState::after(9, FIVE, 10);
        assert!(!over.allowed);
        assert_eq!(over.remaining, 0);
    }

    #[test]
    fn retry_after_is_whole_seconds_and_never_zero() {
        let state = WindowState::after(4, FIVE, 10);
        assert_eq!(state.retry_after_seconds(5_000), 5);
        assert_eq!(state.retry_after_seconds(9_001), 1);
        assert_eq!(state.retry_after_seconds(9_999), 1);
        assert_eq!(state.retry_after_seconds(10_000), 1);
    }

    proptest! {
        #[test]
        fn now_lies_inside_its_window(now in 0u64..4_000_000_000, w in 1u32..3600) {
            let (start, end) = window_bounds(now, w);
            prop_assert!(start <= now && now < end);
            prop_assert_eq!(end - start, u64::from(w));
            prop_assert_eq!(start % u64::from(w), 0);
        }
    }
}
