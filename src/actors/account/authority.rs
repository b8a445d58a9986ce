//! The operator behind a money movement. Its audit row is written in the
//! transaction that moves the money, so the row exists exactly when the
//! movement does; when a second operator approves a held movement, the
//! approval is closed in that same transaction, guarded on its still being
//! pending, so racing approvals move the money once.

use serde_json::Value;

use super::AccountError;
use crate::{
    domain::{audit::Entry, states::ApprovalStatus},
    store,
};

/// Who moves the money, and the held movement it carries out, if any.
#[derive(Debug, Clone)]
pub struct Authority {
    /// The audit row; its `after` is filled with what the movement made.
    pub audit: Entry,
    /// The approval this movement carries out (`apr_` id).
    pub approval_id: Option<String>,
}

impl Authority {
    /// A change made by the operator in `audit`, no approval involved.
    pub fn direct(audit: Entry) -> Self {
        Self {
            audit,
            approval_id: None,
        }
    }

    /// Writes the audit row with `after`, and closes the approval as
    /// approved with `result_id`, in `txn`. An approval no longer pending
    /// (decided or lapsed meanwhile) is a conflict: the caller rolls back.
    pub(super) async fn record(
        &self,
        txn: &sea_orm::DatabaseTransaction,
        result_id: &str,
        after: Value,
    ) -> Result<(), AccountError> {
        let entry = self.audit.clone().after(after);
        store::audit::append(txn, &entry).await?;
        let Some(approval_id) = &self.approval_id else {
            return Ok(());
        };
        let decision = store::approvals::Decision {
            status: ApprovalStatus::Approved,
            by_id: &entry.operator_id,
            by_name: &entry.operator_name,
            note: entry.note.as_deref(),
            result_id: Some(result_id),
            now: entry.at,
        };
        if store::approvals::decide(txn, approval_id, decision).await? {
            Ok(())
        } else {
            Err(AccountError::Conflict {
                message: "The approval was decided or lapsed meanwhile; nothing moved.".into(),
                param: None,
            })
        }
    }
}
