//! `esim-reseller admin <noun> <verb>`: each verb is one operator API call;
//! the answer is printed as JSON and a non-2xx answer exits with status 1.

use anyhow::Context;
use clap::{Args, Subcommand};
use reqwest::Method;
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Map, Value, json};

use super::{
    cli_team::{ApprovalsCommand, AuditArgs, OperatorsCommand},
    client::OperatorClient,
};
use crate::config::{Settings, Sources};

/// Where the operator API is and how to authenticate.
#[derive(Debug, Args)]
pub struct AdminArgs {
    /// Base URL of the operator listener; default from configuration (`http.operator_addr`).
    #[arg(long, env = "ESIM_OPERATOR_URL", global = true)]
    pub operator_url: Option<String>,
    /// Your operator token; default from configuration (`operator.token`,
    /// the bootstrap token: use it only to create the first operators).
    #[arg(
        long,
        env = "ESIM_OPERATOR_TOKEN",
        hide_env_values = true,
        global = true
    )]
    pub token: Option<String>,
    #[command(subcommand)]
    pub command: AdminCommand,
}

#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Partner accounts.
    #[command(subcommand)]
    Partner(PartnerCommand),
    /// API keys.
    #[command(subcommand)]
    Key(KeyCommand),
    /// The plan catalogue.
    #[command(subcommand)]
    Plans(PlansCommand),
    /// Destinations (countries).
    #[command(subcommand)]
    Destinations(DestinationsCommand),
    /// The live actors: kind, partner, mailbox length, restarts.
    Actors,
    /// Admission: the supplier's capacity, the backlog, each partner's
    /// share, refusals.
    Admission,
    /// Money on a partner's floats.
    #[command(subcommand)]
    Money(MoneyCommand),
    /// Where rate-limit windows are counted, and whether Redis answers.
    RateLimits,
    /// The suppliers: their state, an order's supply, margins.
    #[command(subcommand)]
    Suppliers(SuppliersCommand),
    /// Who the token belongs to and what its role allows.
    Whoami,
    /// Named operators and their roles.
    #[command(subcommand)]
    Operators(OperatorsCommand),
    /// Money movements held for a second operator (four eyes).
    #[command(subcommand)]
    Approvals(ApprovalsCommand),
    /// The audit trail: who did what, newest first.
    Audit(AuditArgs),
}

#[derive(Debug, Subcommand)]
pub enum SuppliersCommand {
    /// The route and each supplier's state, calls, refusals and failovers.
    List,
    /// Which supplier carried each unit of an order, at what cost.
    Supply { order_id: String },
    /// Delivered units, revenue, cost and margin per partner and supplier.
    Margins {
        /// Orders created at or after (RFC 3339; default 30 days ago).
        #[arg(long)]
        from: Option<String>,
        /// Orders created before (RFC 3339; default now).
        #[arg(long)]
        to: Option<String>,
        #[arg(long)]
        partner_id: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum MoneyCommand {
    /// Move money on the live float: one ledger row (above
    /// `operator.four_eyes_cents` it is held for a second operator: 202).
    Move {
        partner_id: String,
        /// `adjustment` (either sign), `payout` or `chargeback` (negative).
        #[arg(long)]
        kind: String,
        /// Signed cents, e.g. 50000 or -2500.
        #[arg(long, allow_hyphen_values = true)]
        amount_cents: i64,
        #[arg(long)]
        description: String,
    },
    /// Set the sandbox float (play money).
    SandboxFloat {
        partner_id: String,
        balance_cents: i64,
    },
    /// Record a wire transfer, credited at once.
    Wire {
        partner_id: String,
        #[arg(long)]
        amount_cents: i64,
        /// The bank-statement text (unique per partner).
        #[arg(long)]
        reference: String,
    },
    /// Deposit reviews raised by settlement
    /// (`--status open|approved|rejected|resolved`).
    Reviews {
        #[arg(long)]
        status: Option<String>,
    },
    /// Approve a review: the amount in question moves on the live float,
    /// once (above `operator.four_eyes_cents` it is held for a second operator).
    Approve {
        review_id: String,
        #[arg(long)]
        note: String,
    },
    /// Reject a review: it closes and no money moves.
    Reject {
        review_id: String,
        #[arg(long)]
        note: String,
    },
    /// Close a review with what was decided outside (no money moves).
    Resolve {
        review_id: String,
        #[arg(long)]
        resolution: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum PlansCommand {
    /// Upsert a catalogue file: `{"destinations": [...], "plans": [...]}` or a bare array of plans.
    Import { file: std::path::PathBuf },
    /// Put a plan on sale.
    Activate { plan_id: String },
    /// Take a plan off sale (it drops out of lists; single reads show `available: false`).
    Deactivate { plan_id: String },
}

#[derive(Debug, Subcommand)]
pub enum DestinationsCommand {
    /// Withdraw a country: its plans are not found.
    Withdraw { code: String },
    /// Restore a withdrawn country.
    Restore { code: String },
}

#[derive(Debug, Subcommand)]
pub enum PartnerCommand {
    /// Open an account (status `pending` unless given).
    Create {
        #[arg(long)]
        name: String,
        #[arg(long)]
        tier: String,
        #[arg(long)]
        slug: Option<String>,
        #[arg(long)]
        status: Option<String>,
        #[arg(long)]
        discount_override_bps: Option<i64>,
        #[arg(long)]
        low_balance_threshold_cents: Option<i64>,
    },
    /// Show an account with both floats.
    Show { id: String },
    /// Change an account's terms.
    Update {
        id: String,
        #[arg(long)]
        status: Option<String>,
        #[arg(long)]
        tier: Option<String>,
        #[arg(long, conflicts_with = "clear_discount_override")]
        discount_override_bps: Option<i64>,
        /// Remove the discount override (the tier's discount applies).
        #[arg(long)]
        clear_discount_override: bool,
        #[arg(long)]
        low_balance_threshold_cents: Option<i64>,
    },
    /// Move an account to another status (`closed` is terminal).
    Status { id: String, status: String },
}

#[derive(Debug, Subcommand)]
pub enum KeyCommand {
    /// Issue a key; its secret is printed once.
    Issue {
        /// The partner's `pt_` id.
        partner_id: String,
        /// `live` or `sandbox`.
        #[arg(long)]
        mode: String,
        #[arg(long)]
        label: Option<String>,
        /// RFC 3339 instant after which the key is refused.
        #[arg(long)]
        expires_at: Option<String>,
        /// A CIDR the key may be used from; repeat for several.
        #[arg(long = "allow")]
        allowed_cidrs: Vec<String>,
    },
    /// Issue a replacement now; the old key expires after the grace period.
    Rotate {
        /// The key's `pk_` id.
        key_id: String,
        /// Seconds the old key keeps working (default 3600).
        #[arg(long)]
        grace_seconds: Option<i64>,
    },
    /// Refuse the key from the next request on.
    Revoke { key_id: String },
    /// Set the CIDRs a key may be used from.
    Allow {
        key_id: String,
        /// A CIDR or address; repeat for several.
        #[arg(long = "cidr", required_unless_present = "clear")]
        cidrs: Vec<String>,
        /// Remove the allowlist: any source address.
        #[arg(long, conflicts_with = "cidrs")]
        clear: bool,
    },
}

/// Runs one admin verb; returns the process exit code.
pub async fn run(args: AdminArgs) -> anyhow::Result<u8> {
    let client = client_for(&args)?;
    let requests = requests_for(args.command)?;
    // Several requests (an import) print as one JSON array of answers.
    let several = requests.len() > 1;
    let mut answers = Vec::with_capacity(requests.len());
    let mut succeeded = true;
    for (method, path, body) in requests {
        let (status, answer) = client.send(method, &path, body.as_ref()).await?;
        answers.push(answer);
        if !status.is_success() {
            succeeded = false;
            break;
        }
    }
    let printed = if several {
        Value::Array(answers)
    } else {
        answers.pop().unwrap_or(Value::Null)
    };
    println!("{}", serde_json::to_string_pretty(&printed)?);
    Ok(if succeeded { 0 } else { 1 })
}

/// The requests that import a catalogue file: its destinations, then its plans.
fn import_requests(file: &std::path::Path) -> anyhow::Result<Vec<Request>> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let document: Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", file.display()))?;
    let (destinations, plans) = match document {
        Value::Array(plans) => (None, Value::Array(plans)),
        Value::Object(mut parts) => (
            parts.remove("destinations"),
            parts.remove("plans").unwrap_or(Value::Array(Vec::new())),
        ),
        _ => anyhow::bail!("{} holds neither an object nor an array", file.display()),
    };
    let mut requests = Vec::new();
    if let Some(destinations) = destinations {
        requests.push((Method::POST, "/destinations".to_owned(), Some(destinations)));
    }
    requests.push((Method::POST, "/plans".to_owned(), Some(plans)));
    Ok(requests)
}

fn client_for(args: &AdminArgs) -> anyhow::Result<OperatorClient> {
    let (url, token) = match (&args.operator_url, &args.token) {
        (Some(url), Some(token)) => (url.clone(), token.clone()),
        _ => {
            let settings = Settings::load(&Sources::from_process())?;
            let mut addr = settings.http.operator_addr;
            if addr.ip().is_unspecified() {
                addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
            }
            (
                args.operator_url
                    .clone()
                    .unwrap_or_else(|| format!("http://{addr}")),
                args.token
                    .clone()
                    .unwrap_or_else(|| settings.operator.token.expose_secret().to_owned()),
            )
        }
    };
    OperatorClient::new(&url, SecretString::from(token))
}

/// Inserts `key: value` when the value is present.
fn put(map: &mut Map<String, Value>, key: &str, value: Option<impl Into<Value>>) {
    if let Some(value) = value {
        map.insert(key.to_owned(), value.into());
    }
}

/// The operator API calls one admin verb makes, in order.
/// A request of the operator API: method, path and body.
type Request = (Method, String, Option<Value>);

fn requests_for(command: AdminCommand) -> anyhow::Result<Vec<Request>> {
    Ok(vec![match command {
        AdminCommand::Plans(PlansCommand::Import { file }) => return import_requests(&file),
        AdminCommand::Partner(command) => partner_request(command),
        AdminCommand::Key(command) => key_request(command),
        AdminCommand::Money(command) => money_request(command),
        AdminCommand::Plans(PlansCommand::Activate { plan_id }) => (
            Method::PATCH,
            format!("/plans/{plan_id}"),
            Some(json!({ "active": true })),
        ),
        AdminCommand::Plans(PlansCommand::Deactivate { plan_id }) => (
            Method::PATCH,
            format!("/plans/{plan_id}"),
            Some(json!({ "active": false })),
        ),
        AdminCommand::Destinations(DestinationsCommand::Withdraw { code }) => (
            Method::PATCH,
            format!("/destinations/{code}"),
            Some(json!({ "withdrawn": true })),
        ),
        AdminCommand::Destinations(DestinationsCommand::Restore { code }) => (
            Method::PATCH,
            format!("/destinations/{code}"),
            Some(json!({ "withdrawn": false })),
        ),
        AdminCommand::Actors => (Method::GET, "/actors".to_owned(), None),
        AdminCommand::Admission => (Method::GET, "/admission".to_owned(), None),
        AdminCommand::Suppliers(command) => suppliers_request(command),
        AdminCommand::RateLimits => (Method::GET, "/rate-limits".to_owned(), None),
        AdminCommand::Whoami => (Method::GET, "/me".to_owned(), None),
        AdminCommand::Operators(command) => super::cli_team::operators_request(command),
        AdminCommand::Approvals(command) => super::cli_team::approvals_request(command),
        AdminCommand::Audit(args) => super::cli_team::audit_request(args),
    }])
}

fn suppliers_request(command: SuppliersCommand) -> Request {
    match command {
        SuppliersCommand::List => (Method::GET, "/suppliers".to_owned(), None),
        SuppliersCommand::Supply { order_id } => {
            (Method::GET, format!("/orders/{order_id}/supply"), None)
        }
        SuppliersCommand::Margins {
            from,
            to,
            partner_id,
        } => {
            let mut query = form_urlencoded::Serializer::new(String::new());
            for (name, value) in [("from", from), ("to", to), ("partner_id", partner_id)] {
                if let Some(value) = value {
                    query.append_pair(name, &value);
                }
            }
            let query = query.finish();
            let path = match query.is_empty() {
                true => "/margins".to_owned(),
                false => format!("/margins?{query}"),
            };
            (Method::GET, path, None)
        }
    }
}

fn partner_request(command: PartnerCommand) -> Request {
    match command {
        PartnerCommand::Create {
            name,
            tier,
            slug,
            status,
            discount_override_bps,
            low_balance_threshold_cents,
        } => {
            let mut body = Map::new();
            body.insert("name".into(), name.into());
            body.insert("tier".into(), tier.into());
            put(&mut body, "slug", slug);
            put(&mut body, "status", status);
            put(&mut body, "discount_override_bps", discount_override_bps);
            put(
                &mut body,
                "low_balance_threshold_cents",
                low_balance_threshold_cents,
            );
            (Method::POST, "/partners".into(), Some(body.into()))
        }
        PartnerCommand::Show { id } => (Method::GET, format!("/partners/{id}"), None),
        PartnerCommand::Update {
            id,
            status,
            tier,
            discount_override_bps,
            clear_discount_override,
            low_balance_threshold_cents,
        } => {
            let mut body = Map::new();
            put(&mut body, "status", status);
            put(&mut body, "tier", tier);
            if clear_discount_override {
                body.insert("discount_override_bps".into(), Value::Null);
            }
            put(&mut body, "discount_override_bps", discount_override_bps);
            put(
                &mut body,
                "low_balance_threshold_cents",
                low_balance_threshold_cents,
            );
            (Method::PATCH, format!("/partners/{id}"), Some(body.into()))
        }
        PartnerCommand::Status { id, status } => (
            Method::PATCH,
            format!("/partners/{id}"),
            Some(json!({ "status": status })),
        ),
    }
}

fn key_request(command: KeyCommand) -> Request {
    match command {
        KeyCommand::Issue {
            partner_id,
            mode,
            label,
            expires_at,
            allowed_cidrs,
        } => {
            let mut body = Map::new();
            body.insert("mode".into(), mode.into());
            put(&mut body, "label", label);
            put(&mut body, "expires_at", expires_at);
            if !allowed_cidrs.is_empty() {
                body.insert("allowed_cidrs".into(), allowed_cidrs.into());
            }
            (
                Method::POST,
                format!("/partners/{partner_id}/keys"),
                Some(body.into()),
            )
        }
        KeyCommand::Rotate {
            key_id,
            grace_seconds,
        } => {
            let mut body = Map::new();
            put(&mut body, "grace_seconds", grace_seconds);
            (
                Method::POST,
                format!("/keys/{key_id}/rotate"),
                Some(body.into()),
            )
        }
        KeyCommand::Revoke { key_id } => (Method::POST, format!("/keys/{key_id}/revoke"), None),
        KeyCommand::Allow {
            key_id,
            cidrs,
            clear,
        } => {
            let list = if clear { Value::Null } else { cidrs.into() };
            (
                Method::PATCH,
                format!("/keys/{key_id}"),
                Some(json!({ "allowed_cidrs": list })),
            )
        }
    }
}

fn money_request(command: MoneyCommand) -> Request {
    match command {
        MoneyCommand::Move {
            partner_id,
            kind,
            amount_cents,
            description,
        } => (
            Method::POST,
            format!("/partners/{partner_id}/movements"),
            Some(json!({ "kind": kind, "amount_cents": amount_cents, "description": description })),
        ),
        MoneyCommand::Wire {
            partner_id,
            amount_cents,
            reference,
        } => (
            Method::POST,
            format!("/partners/{partner_id}/wire-deposits"),
            Some(json!({ "amount_cents": amount_cents, "reference": reference })),
        ),
        MoneyCommand::Reviews { status } => {
            let query = status.map(|s| format!("?status={s}")).unwrap_or_default();
            (Method::GET, format!("/reviews{query}"), None)
        }
        MoneyCommand::Approve { review_id, note } => (
            Method::POST,
            format!("/reviews/{review_id}/approve"),
            Some(json!({ "note": note })),
        ),
        MoneyCommand::Reject { review_id, note } => (
            Method::POST,
            format!("/reviews/{review_id}/reject"),
            Some(json!({ "note": note })),
        ),
        MoneyCommand::Resolve {
            review_id,
            resolution,
        } => (
            Method::POST,
            format!("/reviews/{review_id}/resolve"),
            Some(json!({ "resolution": resolution })),
        ),
        MoneyCommand::SandboxFloat {
            partner_id,
            balance_cents,
        } => (
            Method::PUT,
            format!("/partners/{partner_id}/sandbox-float"),
            Some(json!({ "balance_cents": balance_cents })),
        ),
    }
}
