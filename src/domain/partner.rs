//! Partner account status and key mode, and the operator's status transitions.

pub use entities::states::{AccountStatus as Status, Mode};

/// The operator's transition table. `closed` is terminal; a live account
/// never goes back to `sandbox` or `pending` (it has real money and history).
pub fn may_become(now: Status, next: Status) -> bool {
    use Status::*;
    if now == next {
        return true;
    }
    matches!(
        (now, next),
        (Sandbox, Pending | Live | Closed)
            | (Pending, Sandbox | Live | Closed)
            | (Live, Suspended | Closed)
            | (Suspended, Live | Closed)
    )
}

/// A slug from a display name: lowercase ASCII letters and digits joined by
/// single hyphens.
pub fn slugify(name: &str) -> String {
    let mut slug = String::with_capacity(name.len());
    for ch in name.chars() {
        if ch.is_ascii_alphanumeric() {
            slug.push(ch.to_ascii_lowercase());
        } else if !slug.is_empty() && !slug.ends_with('-') {
            slug.push('-');
        }
    }
    while slug.ends_with('-') {
        slug.pop();
    }
    slug
}

/// Whether an operator-supplied slug is well formed.
pub fn is_valid_slug(slug: &str) -> bool {
    !slug.is_empty()
        && slug.len() <= 100
        && slug
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !slug.starts_with('-')
        && !slug.ends_with('-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closed_is_terminal() {
        for next in [
            Status::Sandbox,
            Status::Pending,
            Status::Live,
            Status::Suspended,
        ] {
            assert!(!may_become(Status::Closed, next));
        }
    }

    #[test]
    fn suspension_is_reversible_and_live_never_goes_back() {
        assert!(may_become(Status::Live, Status::Suspended));
        assert!(may_become(Status::Suspended, Status::Live));
        assert!(!may_become(Status::Live, Status::Pending));
        assert!(!may_become(Status::Live, Status::Sandbox));
        assert!(!may_become(Status::Sandbox, Status::Suspended));
    }

    #[test]
    fn every_status_round_trips() {
        for s in ["sandbox", "pending", "live", "suspended", "closed"] {
            assert_eq!(Status::parse(s).map(Status::as_str), Some(s));
        }
        assert_eq!(Status::parse("LIVE"), None);
    }

    #[test]
    fn slugs_are_tidy() {
        assert_eq!(slugify("  Acme Travel, Inc. "), "acme-travel-inc");
        assert_eq!(slugify("Ünïcode"), "n-code");
        assert!(is_valid_slug("acme-1"));
        assert!(!is_valid_slug("-acme"));
        assert!(!is_valid_slug("Acme"));
    }
}

/// Why an account refuses a key's requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    NotLive,
    Suspended,
    Closed,
}

/// Account gating: live keys need a `live` account; sandbox keys work on
/// every account that is not `closed`.
pub fn gate(status: Status, mode: Mode) -> Result<(), Refusal> {
    match (status, mode) {
        (Status::Closed, _) => Err(Refusal::Closed),
        (_, Mode::Sandbox) | (Status::Live, Mode::Live) => Ok(()),
        (Status::Suspended, Mode::Live) => Err(Refusal::Suspended),
        (Status::Pending | Status::Sandbox, Mode::Live) => Err(Refusal::NotLive),
    }
}

#[cfg(test)]
mod gate_tests {
    use super::*;

    #[test]
    fn the_gating_matrix() {
        use Mode::*;
        use Status as S;
        let cases = [
            (S::Sandbox, Live, Err(Refusal::NotLive)),
            (S::Pending, Live, Err(Refusal::NotLive)),
            (S::Live, Live, Ok(())),
            (S::Suspended, Live, Err(Refusal::Suspended)),
            (S::Closed, Live, Err(Refusal::Closed)),
            (S::Sandbox, Sandbox, Ok(())),
            (S::Pending, Sandbox, Ok(())),
            (S::Live, Sandbox, Ok(())),
            (S::Suspended, Sandbox, Ok(())),
            (S::Closed, Sandbox, Err(Refusal::Closed)),
        ];
        for (status, mode, expected) in cases {
            assert_eq!(gate(status, mode), expected, "{status:?} {mode:?}");
        }
    }
}
