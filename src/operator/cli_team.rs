//! The admin verbs of the operators themselves: who they are
//! (`admin whoami`, `admin operators ...`), the money held for a second
//! operator (`admin approvals ...`) and the audit trail (`admin audit`).

use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::json;

/// A request of the operator API: method, path and body.
pub(super) type Request = (Method, String, Option<serde_json::Value>);

#[derive(Debug, Subcommand)]
pub enum OperatorsCommand {
    /// Every operator (names, roles, the last four characters of tokens).
    List,
    /// Create a named operator; its token is printed once.
    Create {
        #[arg(long)]
        name: String,
        /// `viewer`, `support`, `finance` or `admin`.
        #[arg(long)]
        role: String,
    },
    /// Replace an operator's token now; the old one stops at once.
    Rotate { operator_id: String },
    /// Refuse an operator's token from the next request on, on every node.
    Revoke { operator_id: String },
}

#[derive(Debug, Subcommand)]
pub enum ApprovalsCommand {
    /// Money movements held for a second operator
    /// (`--status pending_approval|approved|rejected|lapsed`).
    List {
        #[arg(long)]
        status: Option<String>,
    },
    /// One held movement.
    Show { approval_id: String },
    /// Approve a movement another operator asked for: the money moves, once.
    Approve {
        approval_id: String,
        #[arg(long)]
        note: String,
    },
    /// Reject a held movement: nothing moves.
    Reject {
        approval_id: String,
        #[arg(long)]
        note: String,
    },
}

/// Filters of `admin audit`.
#[derive(Debug, Args)]
pub struct AuditArgs {
    /// An operator's `op_` id or name.
    #[arg(long)]
    pub operator: Option<String>,
    #[arg(long)]
    pub partner_id: Option<String>,
    /// An action (`movement.create`) or every action of a noun (`movement`).
    #[arg(long)]
    pub action: Option<String>,
    /// At or after (RFC 3339).
    #[arg(long)]
    pub since: Option<String>,
    /// Before (RFC 3339).
    #[arg(long)]
    pub until: Option<String>,
    /// Rows per page (1 to 200, default 50).
    #[arg(long)]
    pub limit: Option<u32>,
    /// The `next_cursor` of the previous page.
    #[arg(long)]
    pub cursor: Option<String>,
}

pub(super) fn operators_request(command: OperatorsCommand) -> Request {
    match command {
        OperatorsCommand::List => (Method::GET, "/operators".to_owned(), None),
        OperatorsCommand::Create { name, role } => (
            Method::POST,
            "/operators".to_owned(),
            Some(json!({ "name": name, "role": role })),
        ),
        OperatorsCommand::Rotate { operator_id } => (
            Method::POST,
            format!("/operators/{operator_id}/rotate"),
            None,
        ),
        OperatorsCommand::Revoke { operator_id } => (
            Method::POST,
            format!("/operators/{operator_id}/revoke"),
            None,
        ),
    }
}

pub(super) fn approvals_request(command: ApprovalsCommand) -> Request {
    match command {
        ApprovalsCommand::List { status } => {
            let query = status.map(|s| format!("?status={s}")).unwrap_or_default();
            (Method::GET, format!("/approvals{query}"), None)
        }
        ApprovalsCommand::Show { approval_id } => {
            (Method::GET, format!("/approvals/{approval_id}"), None)
        }
        ApprovalsCommand::Approve { approval_id, note } => (
            Method::POST,
            format!("/approvals/{approval_id}/approve"),
            Some(json!({ "note": note })),
        ),
        ApprovalsCommand::Reject { approval_id, note } => (
            Method::POST,
            format!("/approvals/{approval_id}/reject"),
            Some(json!({ "note": note })),
        ),
    }
}

pub(super) fn audit_request(args: AuditArgs) -> Request {
    let mut query = form_urlencoded::Serializer::new(String::new());
    let limit = args.limit.map(|l| l.to_string());
    for (name, value) in [
        ("operator", args.operator),
        ("partner_id", args.partner_id),
        ("action", args.action),
        ("since", args.since),
        ("until", args.until),
        ("limit", limit),
        ("cursor", args.cursor),
    ] {
        if let Some(value) = value {
            query.append_pair(name, &value);
        }
    }
    let query = query.finish();
    let path = match query.is_empty() {
        true => "/audit".to_owned(),
        false => format!("/audit?{query}"),
    };
    (Method::GET, path, None)
}
