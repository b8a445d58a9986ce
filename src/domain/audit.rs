//! What an audit row says: who did what to which target, when, for which
//! request, with which amounts and what changed. Built by the edge from the
//! [`Caller`]; written by the store in the transaction of the change.

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::operators::Caller;

/// How the attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The change was made.
    Ok,
    /// A money movement was held for a second operator.
    PendingApproval,
    /// The attempt was refused (role, four eyes); nothing changed.
    Refused,
}

impl Outcome {
    /// The stored word.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::PendingApproval => "pending_approval",
            Outcome::Refused => "refused",
        }
    }
}

/// One audit row to append.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub at: DateTime<Utc>,
    pub operator_id: String,
    pub operator_name: String,
    /// The operator's role at the time.
    pub role: &'static str,
    pub request_id: Option<String>,
    /// What was done, `<noun>.<verb>`.
    pub action: &'static str,
    pub outcome: Outcome,
    /// `partner`, `key`, `deposit`, `review`, `operator`, `approval`, ...
    pub target_kind: &'static str,
    pub target_id: String,
    pub partner_id: Option<String>,
    pub amount_cents: Option<i64>,
    pub before: Option<Value>,
    pub after: Option<Value>,
    pub note: Option<String>,
}

impl Caller {
    /// An entry for `action` on `target_kind` `target_id` by this caller,
    /// successful unless said otherwise.
    pub fn audit(
        &self,
        action: &'static str,
        target_kind: &'static str,
        target_id: impl Into<String>,
        at: DateTime<Utc>,
    ) -> Entry {
        Entry {
            at,
            operator_id: self.id.clone(),
            operator_name: self.name.clone(),
            role: self.role.as_str(),
            request_id: self.request_id.clone(),
            action,
            outcome: Outcome::Ok,
            target_kind,
            target_id: target_id.into(),
            partner_id: None,
            amount_cents: None,
            before: None,
            after: None,
            note: None,
        }
    }
}

impl Entry {
    /// The partner concerned.
    pub fn partner(mut self, partner_id: impl Into<String>) -> Self {
        self.partner_id = Some(partner_id.into());
        self
    }

    /// The cents moved or asked for.
    pub fn amount(mut self, cents: i64) -> Self {
        self.amount_cents = Some(cents);
        self
    }

    /// What the target was before.
    pub fn before(mut self, value: Value) -> Self {
        self.before = Some(value);
        self
    }

    /// What the target became.
    pub fn after(mut self, value: Value) -> Self {
        self.after = Some(value);
        self
    }

    /// The operator's note.
    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.note = Some(note.into());
        self
    }

    /// Held for a second operator.
    pub fn pending(mut self) -> Self {
        self.outcome = Outcome::PendingApproval;
        self
    }

    /// Refused, and why.
    pub fn refused(mut self, why: impl Into<String>) -> Self {
        self.outcome = Outcome::Refused;
        self.note = Some(why.into());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_carries_the_caller_and_what_was_said() {
        let caller = Caller::bootstrap(Some("req_1".into()));
        let at = Utc::now();
        let entry = caller
            .audit("movement.create", "partner", "pt_1", at)
            .partner("pt_1")
            .amount(-500)
            .note("refund")
            .pending();
        assert_eq!(entry.operator_name, "bootstrap");
        assert_eq!(entry.role, "admin");
        assert_eq!(entry.request_id.as_deref(), Some("req_1"));
        assert_eq!(entry.outcome.as_str(), "pending_approval");
        assert_eq!(entry.amount_cents, Some(-500));
        let refused = caller.audit("x.y", "partner", "pt_1", at).refused("role");
        assert_eq!(refused.outcome, Outcome::Refused);
        assert_eq!(refused.note.as_deref(), Some("role"));
    }
}
