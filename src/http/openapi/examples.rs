//! One example per schema and per operation, telling one story: the live
//! partner Acme Travel (gold tier) buys a France 1 GB plan for a customer,
//! after topping up its float with a crypto deposit.
//!
//! Each schema's example is written into the document, and each operation's
//! request body and 2xx answers carry the example of their schema, so the
//! reference pages and generated clients show them. A test checks every
//! example against its schema.

use serde_json::{Value, json};

const PARTNER: &str = "pt_0ujsswThIGTUYm2K8FjOOf";
const KEY: &str = "pk_0ujsszwN8NRY24YaXiTIE2";
const ORDER: &str = "po_0ujtsYcgvSTl8PAuAdqWYS";
const PLAN: &str = "pl_fr_1gb_7d";
const DEPOSIT: &str = "dep_0ujssxh0cECutqzMgbtXSG";
const CREDIT: &str = "led_0ujst0p1yNxWk5rEq3XbPa";
const PURCHASE: &str = "led_0ujtsYd2QhX3uV8sNqLmCk";
const ICCID: &str = "8944500102198304826";
const SMDP: &str = "rsp.example-smdp.com";
const MATCHING: &str = "JQ-1K8W4P-2HZ7RT";

fn esim() -> Value {
    json!({
        "object": "esim",
        "iccid": ICCID,
        "order_id": ORDER,
        "plan_id": PLAN,
        "mode": "live",
        "status": "released",
        "activation_code": format!("LPA:1${SMDP}${MATCHING}"),
        "smdp_address": SMDP,
        "matching_id": MATCHING,
        "created_at": "2026-11-24T10:15:04Z"
    })
}

fn order() -> Value {
    json!({
        "object": "order",
        "id": ORDER,
        "mode": "live",
        "status": "completed",
        "plan_id": PLAN,
        "quantity": 1,
        "unit_price_cents": 314,
        "total_cents": 314,
        "list_unit_cents": 349,
        "discount_bps": 1002,
        "price_source": "tier:gold",
        "currency": "USD",
        "refunded_cents": 0,
        "metadata": { "customer_ref": "c-42" },
        "esims": [esim()],
        "failure_code": null,
        "poll_after_ms": null,
        "created_at": "2026-11-24T10:15:01Z",
        "completed_at": "2026-11-24T10:15:04Z"
    })
}

fn plan() -> Value {
    json!({
        "object": "plan",
        "id": PLAN,
        "name": "France 1 GB · 7 days",
        "country_code": "FR",
        "region": "europe",
        "global": false,
        "plan_type": "fixed",
        "data_amount_mb": 1024,
        "daily_allowance_mb": null,
        "fup_speed": null,
        "unlimited": false,
        "duration_days": 7,
        "voice_minutes": null,
        "sms_count": null,
        "coverage_types": ["4G", "5G"],
        "speed": "4G/5G",
        "networks": ["Orange", "SFR", "Bouygues Telecom"],
        "requires_kyc": null,
        "list_price_cents": 349,
        "your_price_cents": 314,
        "discount_bps": 1000,
        "price_source": "tier:gold",
        "tier": "gold",
        "min_resale_price_cents": null,
        "available": true
    })
}

fn deposit() -> Value {
    json!({
        "object": "deposit",
        "id": DEPOSIT,
        "status": "credited",
        "method": "crypto",
        "requested_cents": 50000,
        "credited_cents": 50000,
        "currency": "USD",
        "reference": "7Qx2Lm9RkT3vWc8YbN1sDf",
        "ledger_entry_id": CREDIT,
        "payment_url": "https://pay.example.com/i/7Qx2Lm9RkT3vWc8YbN1sDf",
        "expires_at": "2026-11-24T10:00:00Z",
        "created_at": "2026-11-24T09:00:00Z",
        "credited_at": "2026-11-24T09:12:41Z"
    })
}

fn ledger_entry() -> Value {
    json!({
        "object": "ledger_entry",
        "id": PURCHASE,
        "seq": 2,
        "kind": "purchase",
        "amount_cents": -314,
        "balance_after_cents": 49686,
        "description": "Order po_0ujtsYcgvSTl8PAuAdqWYS: 1 × pl_fr_1gb_7d",
        "order_id": ORDER,
        "deposit_id": null,
        "created_at": "2026-11-24T10:15:01Z"
    })
}

fn destination() -> Value {
    json!({
        "code": "FR",
        "name": "France",
        "region": "europe",
        "plan_count": 12,
        "from_price_cents": 314
    })
}

fn key() -> Value {
    json!({
        "id": KEY,
        "label": "production",
        "last4": "x9Qa",
        "mode": "live",
        "expires_at": null,
        "created_at": "2026-11-01T08:00:00Z"
    })
}

fn window(limit: u32, window_seconds: u32) -> Value {
    json!({ "limit": limit, "window_seconds": window_seconds })
}

fn rate_limits() -> Value {
    json!({
        "read": window(40, 1),
        "write": window(50, 5),
        "supplier": window(4, 1),
        "catalogue": window(240, 60)
    })
}

/// A page of one item, with more to come.
fn page(item: Value, cursor: &str) -> Value {
    json!({ "data": [item], "has_more": true, "next_cursor": cursor })
}

fn partner() -> Value {
    json!({
        "object": "partner",
        "id": PARTNER,
        "name": "Acme Travel",
        "slug": "acme-travel",
        "status": "live",
        "mode": "live",
        "tier": "gold",
        "key": key(),
        "rate_limits": rate_limits(),
        "created_at": "2026-11-01T08:00:00Z"
    })
}

fn install_payload() -> Value {
    json!({
        "object": "install_payload",
        "iccid": ICCID,
        "activation_code": format!("LPA:1${SMDP}${MATCHING}"),
        "smdp_address": SMDP,
        "matching_id": MATCHING,
        "apple_install_url": format!("https://esimsetup.apple.com/esim_qrcode_provisioning?carddata=LPA:1${SMDP}${MATCHING}"),
        "qr_code_svg": "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 33 33\"><path d=\"M0 0h7v7H0z\"/></svg>",
        "qr_code_png_base64": "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAAAAAA6fptVAAAACklEQVR4nGNgAAAAAgABSK+kcQAAAABJRU5ErkJggg=="
    })
}

/// A refusal as the API sends it.
fn error() -> Value {
    json!({
        "error": {
            "type": "insufficient_balance",
            "code": "balance.insufficient",
            "message": "The float holds 200 cents; this order needs 314.",
            "doc_url": "https://docs.example.com/partner/v1/errors#balance-insufficient",
            "request_id": "req_0ujtsYcgvSTl8PAuAdqWYT",
            "param": null,
            "balance_cents": 200,
            "required_cents": 314
        }
    })
}

const CURSOR: &str = "eyJrIjpbIjIwMjYtMTEtMjRUMTA6MTU6MDFaIl19.q3Vx0LQ2t8f1";

/// The example of each component schema, by name.
pub(super) fn for_schema(name: &str) -> Option<Value> {
    let example = match name {
        "PartnerView" => partner(),
        "KeyView" => key(),
        "RateLimits" => rate_limits(),
        "RateWindow" => window(40, 1),
        "BalanceView" => json!({
            "object": "balance",
            "balance_cents": 49686,
            "currency": "USD",
            "tier": "gold",
            "discount_bps": 1000,
            "low_balance_threshold_cents": 10000,
            "mode": "live"
        }),
        "LedgerEntryView" => ledger_entry(),
        "DepositView" => deposit(),
        "NewDeposit" => json!({ "amount_cents": 50000 }),
        "PlanView" => plan(),
        "Quote" => json!({
            "plan_id": PLAN,
            "quantity": 2,
            "unit_price_cents": 314,
            "total_cents": 628,
            "list_unit_cents": 349,
            "discount_bps": 1000,
            "price_source": "tier:gold",
            "tier": "gold",
            "balance_cents": 49686,
            "sufficient_balance": true,
            "mode": "live"
        }),
        "DestinationView" => destination(),
        "OrderBody" => json!({
            "plan_id": PLAN,
            "quantity": 1,
            "metadata": { "customer_ref": "c-42" }
        }),
        "OrderView" => order(),
        "EsimView" => esim(),
        "InstallPayload" => install_payload(),
        "UsageView" => json!({
            "object": "usage",
            "iccid": ICCID,
            "status": "released",
            "data_used_mb": 312,
            "data_remaining_mb": 712,
            "unlimited": false,
            "as_of": "2026-11-25T07:30:00Z"
        }),
        "Health" => json!({ "status": "ok", "uptime_seconds": 86400, "database": "ok" }),
        "ListEnvelope_PlanView" => page(plan(), CURSOR),
        "ListEnvelope_DestinationView" => page(destination(), CURSOR),
        "ListEnvelope_OrderView" => page(order(), CURSOR),
        "ListEnvelope_EsimView" => page(esim(), CURSOR),
        "ListEnvelope_DepositView" => page(deposit(), CURSOR),
        "ListEnvelope_LedgerEntryView" => page(ledger_entry(), CURSOR),
        "Error" => error(),
        "ErrorDetail" => error()["error"].clone(),
        _ => return None,
    };
    Some(example)
}

/// Writes each schema's example into the document: the named examples
/// above, and the first word of each closed vocabulary.
pub(super) fn apply(doc: &mut Value) {
    let Some(schemas) = doc
        .pointer_mut("/components/schemas")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    for (name, schema) in schemas.iter_mut() {
        let example = match for_schema(name) {
            Some(example) => example,
            None => match schema["enum"].get(0) {
                Some(first) => first.clone(),
                None => continue,
            },
        };
        if let Some(map) = schema.as_object_mut() {
            map.insert("examples".into(), json!([example]));
        }
    }
    examples_on_operations(doc);
}

/// Each request body and 2xx answer whose schema is a component carries
/// that component's example, under `example` of its media type.
fn examples_on_operations(doc: &mut Value) {
    let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) else {
        return;
    };
    for operation in paths
        .values_mut()
        .filter_map(Value::as_object_mut)
        .flat_map(|item| item.values_mut())
    {
        add_example(operation.pointer_mut("/requestBody/content/application~1json"));
        if let Some(responses) = operation
            .get_mut("responses")
            .and_then(Value::as_object_mut)
        {
            for (status, response) in responses.iter_mut() {
                if status.starts_with('2') {
                    add_example(response.pointer_mut("/content/application~1json"));
                }
            }
        }
    }
}

fn add_example(media: Option<&mut Value>) {
    let Some(media) = media else {
        return;
    };
    let name = media["schema"]["$ref"]
        .as_str()
        .and_then(|r| r.rsplit('/').next())
        .map(str::to_owned);
    if let (Some(example), Some(map)) =
        (name.as_deref().and_then(for_schema), media.as_object_mut())
    {
        map.insert("example".into(), example);
    }
}
