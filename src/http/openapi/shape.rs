//! What the contract says about each field beyond its Rust type: the id
//! prefixes, bounds, fixed words and descriptions, in one table a reader can
//! check against the spec, and the rule that every field of a resource is
//! always present.
//!
//! Applied to the document after utoipa builds it (see [`super::to_value`]);
//! a test checks that every row of the table names a field that exists.

use serde_json::{Map, Value, json};

/// The id pattern of a kind prefix, as `domain::ids::check_id` accepts it.
fn id_pattern(prefix: &str) -> String {
    format!("^{prefix}[A-Za-z0-9_-]{{1,64}}$")
}

/// An ICCID: 19 or 20 digits.
const ICCID: &str = "^[0-9]{19,20}$";
/// An ISO 3166-1 alpha-2 country code.
const COUNTRY: &str = "^[A-Z]{2}$";

/// One fact about one field.
pub(super) enum Fact {
    /// An id of this kind prefix (`po_`, `pl_`, ...).
    Id(&'static str),
    /// A regular expression the value matches.
    Pattern(&'static str),
    /// Integer bounds, inclusive.
    Range(Option<i64>, Option<i64>),
    /// The only words the field takes.
    OneOf(&'static [&'static str]),
    /// What the field means, for partners.
    Says(&'static str),
    /// An object of your own: any keys, any JSON values.
    Open,
}

use Fact::{Id, OneOf, Open, Pattern, Range, Says};

const NON_NEGATIVE: Fact = Range(Some(0), None);
const BASIS_POINTS: Fact = Range(Some(0), Some(10_000));
const USD: Fact = OneOf(&["USD"]);

/// `(schema, field, fact)`: every fact the document states about a field.
pub(super) const FIELDS: &[(&str, &str, Fact)] = &[
    // Partner and keys
    ("PartnerView", "object", OneOf(&["partner"])),
    ("PartnerView", "id", Id("pt_")),
    (
        "PartnerView",
        "slug",
        Says("Your name in lowercase letters, digits and hyphens."),
    ),
    (
        "PartnerView",
        "tier",
        Says(
            "Your commercial tier (for example `gold`); it sets your headline discount and rate-limit band.",
        ),
    ),
    (
        "PartnerView",
        "mode",
        Says("The mode of the key that made this call."),
    ),
    ("KeyView", "id", Id("pk_")),
    (
        "KeyView",
        "last4",
        Says("The last four characters of the secret, to tell keys apart."),
    ),
    (
        "KeyView",
        "expires_at",
        Says("When the key stops working; null if it does not expire."),
    ),
    ("BalanceView", "object", OneOf(&["balance"])),
    (
        "BalanceView",
        "balance_cents",
        Says("The float of this key's mode, in cents. A chargeback can take it below zero."),
    ),
    ("BalanceView", "currency", USD),
    ("BalanceView", "discount_bps", BASIS_POINTS),
    ("BalanceView", "low_balance_threshold_cents", NON_NEGATIVE),
    // Ledger and deposits
    ("LedgerEntryView", "object", OneOf(&["ledger_entry"])),
    ("LedgerEntryView", "id", Id("led_")),
    ("LedgerEntryView", "seq", Range(Some(1), None)),
    (
        "LedgerEntryView",
        "seq",
        Says("Position in this float's ledger: 1, 2, 3, ... with no gaps."),
    ),
    (
        "LedgerEntryView",
        "amount_cents",
        Says("Signed: a credit is positive, a debit negative."),
    ),
    (
        "LedgerEntryView",
        "balance_after_cents",
        Says("The float right after this entry."),
    ),
    ("LedgerEntryView", "order_id", Id("po_")),
    ("LedgerEntryView", "deposit_id", Id("dep_")),
    ("DepositView", "object", OneOf(&["deposit"])),
    ("DepositView", "id", Id("dep_")),
    ("DepositView", "requested_cents", Range(Some(1), None)),
    ("DepositView", "credited_cents", NON_NEGATIVE),
    (
        "DepositView",
        "credited_cents",
        Says("What was credited to your float; null until credited."),
    ),
    ("DepositView", "currency", USD),
    (
        "DepositView",
        "reference",
        Says("A reference for wire deposits; null for crypto."),
    ),
    ("DepositView", "ledger_entry_id", Id("led_")),
    (
        "DepositView",
        "ledger_entry_id",
        Says("The ledger entry of the credit; null before the credit."),
    ),
    (
        "DepositView",
        "payment_url",
        Says("Where to pay a crypto deposit."),
    ),
    (
        "DepositView",
        "expires_at",
        Says("When an unpaid invoice lapses."),
    ),
    // Catalogue
    ("PlanView", "object", OneOf(&["plan"])),
    ("PlanView", "id", Id("pl_")),
    ("PlanView", "country_code", Pattern(COUNTRY)),
    (
        "PlanView",
        "country_code",
        Says("The country of a single-country plan; null for regional and global plans."),
    ),
    ("PlanView", "data_amount_mb", NON_NEGATIVE),
    ("PlanView", "daily_allowance_mb", NON_NEGATIVE),
    ("PlanView", "duration_days", Range(Some(1), None)),
    ("PlanView", "voice_minutes", NON_NEGATIVE),
    ("PlanView", "sms_count", NON_NEGATIVE),
    ("PlanView", "list_price_cents", NON_NEGATIVE),
    ("PlanView", "your_price_cents", NON_NEGATIVE),
    (
        "PlanView",
        "your_price_cents",
        Says("What one unit costs you."),
    ),
    ("PlanView", "discount_bps", BASIS_POINTS),
    ("PlanView", "price_source", Pattern("^(override|tier:.+)$")),
    (
        "PlanView",
        "price_source",
        Says(
            "`tier:<tier>` when your tier's discount prices the plan, `override` when a discount agreed for you does.",
        ),
    ),
    ("PlanView", "min_resale_price_cents", NON_NEGATIVE),
    (
        "PlanView",
        "available",
        Says("Whether the plan can be ordered now; an unavailable plan shows its list price."),
    ),
    ("Quote", "plan_id", Id("pl_")),
    ("Quote", "quantity", Range(Some(1), Some(50))),
    ("Quote", "unit_price_cents", NON_NEGATIVE),
    ("Quote", "total_cents", NON_NEGATIVE),
    ("Quote", "list_unit_cents", NON_NEGATIVE),
    ("Quote", "discount_bps", BASIS_POINTS),
    ("Quote", "price_source", Pattern("^(override|tier:.+)$")),
    (
        "Quote",
        "sufficient_balance",
        Says("Whether your float covers `total_cents` now; nothing is reserved."),
    ),
    ("DestinationView", "code", Pattern(COUNTRY)),
    ("DestinationView", "plan_count", NON_NEGATIVE),
    ("DestinationView", "from_price_cents", NON_NEGATIVE),
    (
        "DestinationView",
        "from_price_cents",
        Says("Your lowest unit price among the destination's plans."),
    ),
    // Orders and eSIMs
    ("OrderView", "object", OneOf(&["order"])),
    ("OrderView", "id", Id("po_")),
    ("OrderView", "plan_id", Id("pl_")),
    ("OrderView", "quantity", Range(Some(1), Some(50))),
    ("OrderView", "unit_price_cents", NON_NEGATIVE),
    ("OrderView", "total_cents", NON_NEGATIVE),
    ("OrderView", "list_unit_cents", NON_NEGATIVE),
    ("OrderView", "discount_bps", BASIS_POINTS),
    ("OrderView", "price_source", Pattern("^(override|tier:.+)$")),
    ("OrderView", "currency", USD),
    ("OrderView", "refunded_cents", NON_NEGATIVE),
    (
        "OrderView",
        "refunded_cents",
        Says("What was credited back for units that could not be delivered."),
    ),
    ("OrderView", "metadata", Open),
    (
        "OrderView",
        "metadata",
        Says("Your metadata, echoed as you sent it."),
    ),
    ("OrderBody", "metadata", Open),
    (
        "OrderView",
        "esims",
        Says("The delivered profiles; empty while the order is processing."),
    ),
    (
        "OrderView",
        "failure_code",
        Says("Why undelivered units were refunded; null unless some were."),
    ),
    ("OrderView", "poll_after_ms", NON_NEGATIVE),
    (
        "OrderView",
        "poll_after_ms",
        Says("While not null, poll the order again after this many milliseconds."),
    ),
    (
        "OrderView",
        "completed_at",
        Says("When the order settled; null while processing."),
    ),
    ("EsimView", "object", OneOf(&["esim"])),
    ("EsimView", "iccid", Pattern(ICCID)),
    ("EsimView", "order_id", Id("po_")),
    ("EsimView", "plan_id", Id("pl_")),
    (
        "EsimView",
        "activation_code",
        Says("The LPA string: `LPA:1$<smdp_address>$<matching_id>`."),
    ),
    ("InstallPayload", "object", OneOf(&["install_payload"])),
    ("InstallPayload", "iccid", Pattern(ICCID)),
    (
        "InstallPayload",
        "apple_install_url",
        Says("Opens the iOS eSIM installer with the activation code filled in."),
    ),
    (
        "InstallPayload",
        "qr_code_svg",
        Says("The activation code as a QR code, an SVG document."),
    ),
    (
        "InstallPayload",
        "qr_code_png_base64",
        Says("The same QR code as a PNG image, base64-encoded."),
    ),
    ("UsageView", "object", OneOf(&["usage"])),
    ("UsageView", "iccid", Pattern(ICCID)),
    ("UsageView", "data_used_mb", NON_NEGATIVE),
    ("UsageView", "data_remaining_mb", NON_NEGATIVE),
    (
        "UsageView",
        "data_remaining_mb",
        Says("Null for an unlimited plan."),
    ),
    (
        "UsageView",
        "as_of",
        Says("When the supplier last measured the use."),
    ),
    // Health
    ("Health", "status", OneOf(&["ok", "degraded"])),
    ("Health", "database", OneOf(&["ok", "down"])),
    ("Health", "uptime_seconds", NON_NEGATIVE),
];

/// Applies [`FIELDS`] to the component schemas, and marks every field of the
/// resources the API answers with as required: the service always writes
/// every field, `null` where its type allows one.
pub(super) fn apply(doc: &mut Value) {
    standard_integer_formats(doc);
    let requests = request_schemas(doc);
    let Some(schemas) = doc
        .pointer_mut("/components/schemas")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    for (schema, field, fact) in FIELDS {
        if let Some(property) = schemas
            .get_mut(*schema)
            .and_then(|s| s.get_mut("properties"))
            .and_then(|p| p.get_mut(*field))
        {
            state(property, fact);
        }
    }
    for (name, schema) in schemas.iter_mut() {
        if !requests.contains(name) {
            require_every_field(schema);
        }
        if let Some(item) = name.strip_prefix("ListEnvelope_") {
            refer_to_items(schema, item);
        }
    }
}

/// Unsigned integers as OpenAPI's standard formats (`int32`, `int64`) with
/// a minimum of 0, in place of utoipa's `u-int32` and `u-int64`.
fn standard_integer_formats(node: &mut Value) {
    match node {
        Value::Object(map) => {
            let standard = match map.get("format").and_then(Value::as_str) {
                Some("u-int32") => Some("int32"),
                Some("u-int64") => Some("int64"),
                _ => None,
            };
            if let Some(format) = standard {
                map.insert("format".into(), json!(format));
                map.entry("minimum").or_insert(json!(0));
            }
            map.values_mut().for_each(standard_integer_formats);
        }
        Value::Array(items) => items.iter_mut().for_each(standard_integer_formats),
        _ => {}
    }
}

/// A page's `data` refers to its item's schema rather than repeating it, so
/// a generated client has one type per resource.
fn refer_to_items(schema: &mut Value, item: &str) {
    if let Some(data) = schema.pointer_mut("/properties/data") {
        data["items"] = json!({ "$ref": format!("#/components/schemas/{item}") });
        data["description"] = json!("This page's items, in the list's order.");
    }
    if let Some(more) = schema.pointer_mut("/properties/has_more") {
        more["description"] = json!("Whether another page follows.");
    }
    if let Some(cursor) = schema.pointer_mut("/properties/next_cursor") {
        cursor["description"] =
            json!("Pass as `cursor` to read the next page; null on the last page.");
    }
}

/// Writes one fact into a property schema. A nullable reference is a
/// `oneOf` of the reference and `null`: the fact goes on the property.
fn state(property: &mut Value, fact: &Fact) {
    let Some(map) = property.as_object_mut() else {
        return;
    };
    match fact {
        Id(prefix) => {
            map.insert("pattern".into(), json!(id_pattern(prefix)));
        }
        Pattern(pattern) => {
            map.insert("pattern".into(), json!(pattern));
        }
        Range(minimum, maximum) => {
            if let Some(minimum) = minimum {
                map.insert("minimum".into(), json!(minimum));
            }
            if let Some(maximum) = maximum {
                map.insert("maximum".into(), json!(maximum));
            }
        }
        OneOf(words) => {
            map.insert("enum".into(), json!(words));
        }
        Says(text) => {
            map.insert("description".into(), json!(text));
        }
        Open => {
            map.insert("additionalProperties".into(), json!(true));
        }
    }
}

fn require_every_field(schema: &mut Value) {
    let Some(map) = schema.as_object_mut() else {
        return;
    };
    let Some(Value::Object(properties)) = map.get("properties") else {
        return;
    };
    let names: Vec<Value> = properties.keys().map(|k| json!(k)).collect();
    map.insert("required".into(), Value::Array(names));
}

/// The component schemas a request body uses (their optional fields stay
/// optional).
fn request_schemas(doc: &Value) -> Vec<String> {
    let mut names = Vec::new();
    let paths = doc["paths"].as_object().cloned().unwrap_or_else(Map::new);
    for item in paths.values() {
        for operation in item.as_object().into_iter().flat_map(|o| o.values()) {
            let schema = &operation["requestBody"]["content"]["application/json"]["schema"];
            if let Some(name) = schema["$ref"].as_str().and_then(|r| r.rsplit('/').next()) {
                names.push(name.to_owned());
            }
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fact_names_a_field_that_exists() {
        let doc = serde_json::to_value(super::super::document()).unwrap();
        for (schema, field, _) in FIELDS {
            assert!(
                !doc["components"]["schemas"][schema]["properties"][field].is_null(),
                "{schema}.{field} is not in the document"
            );
        }
    }

    #[test]
    fn resources_require_every_field_and_request_bodies_do_not() {
        let doc = super::super::to_value();
        let order = &doc["components"]["schemas"]["OrderView"];
        let fields = order["properties"].as_object().unwrap().len();
        assert_eq!(order["required"].as_array().unwrap().len(), fields);
        let body = &doc["components"]["schemas"]["OrderBody"];
        assert_eq!(body["required"], json!(["plan_id"]));
    }
}
