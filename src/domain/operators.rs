//! Operators: their roles, what each route asks of them, their tokens, and
//! the four-eyes rule for money. Pure: the edge resolves who is calling and
//! asks these functions what that caller may do.

use rand::{Rng, distr::Alphanumeric};

use chrono::{DateTime, Utc};
pub use entities::states::OperatorRole as Role;

use super::states::ApprovalStatus;

use super::api_key::digest;

/// Prefix of an operator's token.
const TOKEN_PREFIX: &str = "svc_op_";
/// Random characters after the prefix (about 256 bits).
const TOKEN_LEN: usize = 43;

/// The id and name under which the configured bootstrap token acts.
pub const BOOTSTRAP_ID: &str = "op_bootstrap";
/// See [`BOOTSTRAP_ID`].
pub const BOOTSTRAP_NAME: &str = "bootstrap";

/// Who is calling the operator API, as the edge resolved it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// `op_` id, or [`BOOTSTRAP_ID`].
    pub id: String,
    /// The operator's name.
    pub name: String,
    /// What the operator may do.
    pub role: Role,
    /// The request being served (`X-Request-Id`), for the audit trail.
    pub request_id: Option<String>,
}

impl Caller {
    /// The configured token's caller: an administrator named `bootstrap`.
    pub fn bootstrap(request_id: Option<String>) -> Self {
        Self {
            id: BOOTSTRAP_ID.to_owned(),
            name: BOOTSTRAP_NAME.to_owned(),
            role: Role::Admin,
            request_id,
        }
    }

    /// The service itself, for what nobody asked for (a lapse). It may do
    /// nothing through the API.
    pub fn system() -> Self {
        Self {
            id: "op_system".to_owned(),
            name: "system".to_owned(),
            role: Role::Viewer,
            request_id: None,
        }
    }

    /// Whether the caller's role includes `role`.
    pub fn may(&self, role: Role) -> bool {
        self.role >= role
    }
}

/// The role a route asks for: every read is a viewer's; each change belongs
/// to the least role whose work it is; anything not named here is an
/// administrator's, so a new route is closed until it is placed.
///
/// `route` is the matched path below `/operator/v1`, e.g. `/keys/{id}/revoke`.
pub fn required_role(method: &str, route: &str) -> Role {
    if matches!(method, "GET" | "HEAD") {
        return Role::Viewer;
    }
    match route {
        "/partners"
        | "/partners/{id}"
        | "/partners/{id}/keys"
        | "/partners/{id}/sandbox-float"
        | "/keys/{id}"
        | "/keys/{id}/rotate"
        | "/keys/{id}/revoke" => Role::Support,
        "/partners/{id}/movements"
        | "/partners/{id}/wire-deposits"
        | "/reviews/{id}/resolve"
        | "/reviews/{id}/approve"
        | "/reviews/{id}/reject"
        | "/approvals/{id}/approve"
        | "/approvals/{id}/reject" => Role::Finance,
        _ => Role::Admin,
    }
}

/// Whether moving `amount_cents` (either sign) needs a second operator.
pub fn needs_second_operator(amount_cents: i64, four_eyes_cents: i64) -> bool {
    amount_cents.unsigned_abs() > four_eyes_cents.unsigned_abs()
}

/// Where an approval stands at `now`: a pending one past its time has
/// lapsed, whether or not the lapse was written yet.
pub fn effective_status(
    stored: ApprovalStatus,
    expires_at: DateTime<Utc>,
    now: DateTime<Utc>,
) -> ApprovalStatus {
    match stored {
        ApprovalStatus::PendingApproval if expires_at <= now => ApprovalStatus::Lapsed,
        other => other,
    }
}

/// A newly issued operator token: shown once, never stored.
pub struct IssuedToken {
    /// The whole token, prefix included.
    pub secret: String,
    /// What is stored: the SHA-256 of `secret` in lowercase hex.
    pub hash: String,
    /// The last four characters of `secret`.
    pub last4: String,
}

/// Generates an operator token from the thread-local CSPRNG.
pub fn issue_token() -> IssuedToken {
    let random: String = rand::rng()
        .sample_iter(&Alphanumeric)
        .take(TOKEN_LEN)
        .map(char::from)
        .collect();
    let secret = format!("{TOKEN_PREFIX}{random}");
    let last4 = secret[secret.len() - 4..].to_owned();
    IssuedToken {
        hash: digest(&secret),
        secret,
        last4,
    }
}

/// Whether `presented` has the form of an operator token (so a partner key
/// or a typo is refused without a lookup).
pub fn is_token_form(presented: &str) -> bool {
    presented.strip_prefix(TOKEN_PREFIX).is_some_and(|rest| {
        rest.len() == TOKEN_LEN && rest.bytes().all(|b| b.is_ascii_alphanumeric())
    })
}

/// A valid operator name: 1 to 100 characters of letters, digits, spaces,
/// dots, hyphens, underscores and `@`, not starting or ending with a space.
pub fn is_valid_name(name: &str) -> bool {
    let length = name.chars().count();
    (1..=100).contains(&length)
        && name.trim() == name
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, ' ' | '.' | '-' | '_' | '@'))
        && name != BOOTSTRAP_NAME
        && name != "system"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_are_ordered_by_privilege() {
        assert!(Role::Viewer < Role::Support);
        assert!(Role::Support < Role::Finance);
        assert!(Role::Finance < Role::Admin);
        let finance = Caller {
            role: Role::Finance,
            ..Caller::bootstrap(None)
        };
        assert!(finance.may(Role::Viewer) && finance.may(Role::Finance));
        assert!(!finance.may(Role::Admin));
    }

    #[test]
    fn reads_are_viewers_and_unknown_changes_are_admins() {
        assert_eq!(required_role("GET", "/audit"), Role::Viewer);
        assert_eq!(required_role("GET", "/operators"), Role::Viewer);
        assert_eq!(required_role("POST", "/keys/{id}/revoke"), Role::Support);
        assert_eq!(required_role("PATCH", "/partners/{id}"), Role::Support);
        assert_eq!(
            required_role("POST", "/partners/{id}/movements"),
            Role::Finance
        );
        assert_eq!(
            required_role("POST", "/approvals/{id}/approve"),
            Role::Finance
        );
        assert_eq!(required_role("POST", "/operators"), Role::Admin);
        assert_eq!(required_role("POST", "/plans"), Role::Admin);
        assert_eq!(required_role("DELETE", "/something/new"), Role::Admin);
    }

    #[test]
    fn four_eyes_is_strictly_above_the_limit_either_way() {
        assert!(!needs_second_operator(100_000, 100_000));
        assert!(needs_second_operator(100_001, 100_000));
        assert!(needs_second_operator(-100_001, 100_000));
        assert!(!needs_second_operator(-100_000, 100_000));
        assert!(needs_second_operator(i64::MIN, 100_000));
    }

    #[test]
    fn a_pending_approval_lapses_at_its_time_and_a_decided_one_never() {
        let now = Utc::now();
        let past = now - chrono::Duration::seconds(1);
        let pending = ApprovalStatus::PendingApproval;
        assert_eq!(effective_status(pending, now, now), ApprovalStatus::Lapsed);
        assert_eq!(effective_status(pending, past, now), ApprovalStatus::Lapsed);
        assert_eq!(
            effective_status(pending, now + chrono::Duration::seconds(1), now),
            pending
        );
        assert_eq!(
            effective_status(ApprovalStatus::Approved, past, now),
            ApprovalStatus::Approved
        );
    }

    #[test]
    fn tokens_have_their_form_and_differ() {
        let a = issue_token();
        let b = issue_token();
        assert!(is_token_form(&a.secret) && is_token_form(&b.secret));
        assert_ne!(a.secret, b.secret);
        assert_eq!(a.hash, digest(&a.secret));
        assert!(a.secret.ends_with(&a.last4));
        assert!(!is_token_form(&a.secret[..a.secret.len() - 1]));
        assert!(!is_token_form("svc_sk_live_x"));
    }

    #[test]
    fn names_are_bounded_and_printable() {
        assert!(is_valid_name("Ana Lima"));
        assert!(is_valid_name("ana.lima@example.com"));
        assert!(!is_valid_name(""));
        assert!(!is_valid_name(" ana"));
        assert!(!is_valid_name("ana<script>"));
        assert!(!is_valid_name(&"a".repeat(101)));
        assert!(!is_valid_name("bootstrap"));
    }
}
