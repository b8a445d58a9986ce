//! HTTP adapter of Airalo's Partner API v2 (recorded payloads and where each
//! shape comes from: `tests/fixtures/airalo/README.md`).
//!
//! - `POST /token` with form fields `client_id`, `client_secret`,
//!   `grant_type=client_credentials` → `data.access_token`,
//!   `data.expires_in` (seconds). The token endpoint is rate limited (a few
//!   calls a minute), so one token is cached for every call, fetched once
//!   under a lock, replaced shortly before it ends (at most after the 24
//!   hours the documentation recommends), and fetched again once when a
//!   call answers 401.
//! - `POST /orders` `{package_id, quantity (1 to 50), type: "sim",
//!   description}` (JSON, as the official SDKs send it) → `data` with the
//!   order `id`, `code`, `net_price` and `sims[]` (`iccid`, `lpa`,
//!   `matching_id`, `qrcode` = `LPA:1$<lpa>$<matching_id>`). The order is
//!   synchronous: the profiles come in the answer. Our transaction id is
//!   the `description`.
//! - There is no idempotency key: placing twice buys twice. Before placing
//!   again after a lost answer the caller asks [`Supplier::find_order`],
//!   which reads `GET /orders?filter[description]=…` (a `LIKE '%…%'`
//!   search, so matches are compared exactly) page by page.
//! - `GET /orders/{id}?include=sims,status` → the order with its `sims`
//!   (none yet: pending; none and `failed` or `refunded`: refused).
//! - `GET /sims/{iccid}/usage` → `data.remaining`, `data.total` (MB).
//!   Airalo caches this answer 20 minutes and limits it per ICCID, so the
//!   client keeps each answer 20 minutes too.
//! - Errors: 422 `{code, reason}` (documented codes, [`classify`]), 422
//!   validation `{data: {field: message}, meta: {message}}`, 401, 403 (IP
//!   allowlist), 404, 429 (`Retry-After`; every call pauses) and 5xx, each
//!   transient, refused or unknown (transient and logged).
//! - Every request passes the node's [`RateGate`] and carries
//!   `airalo-signature` as the SDKs send it; async-order webhooks are
//!   checked with [`verify_signature`] and read with [`webhook_order`].

mod errors;
mod parse;
mod transport;
mod webhook;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use async_trait::async_trait;
use secrecy::SecretString;
use serde_json::json;

pub use errors::{ErrorClass, classify, label};
pub use webhook::{
    SIGNATURE_HEADER, WebhookOrder, canonical_json, sign, verify_signature, webhook_order,
};

use self::transport::{Call, Transport};
use super::{Allocation, Placed, Supplier, SupplierError, Usage, gate::RateGate};
use crate::sync::lock;

/// Most eSIMs one order may carry ("Maximum of 50").
pub const MAX_QUANTITY: u32 = 50;
/// How long Airalo caches a usage answer, and so how long the client keeps it.
pub const USAGE_CACHE_TTL: Duration = Duration::from_secs(20 * 60);

/// Airalo counts its limits a minute at a time (its Rate limits page: so
/// many requests a minute per client id, per token, per ICCID), so the
/// node's pace learns the window from the first 429 naming a long wait.
pub const LIMIT_WINDOW: Duration = Duration::from_secs(60);
/// Most ICCIDs whose usage is kept.
const USAGE_CACHE_MAX: usize = 10_000;
/// Orders per page of the order list.
const PAGE_SIZE: u32 = 50;
/// Pages of matching orders read before `find_order` gives up telling.
const MAX_PAGES: u32 = 20;

/// The HTTP client of Airalo.
pub struct AiraloClient {
    /// Token, rate gate and HTTP.
    transport: Transport,
    /// Usage answers by ICCID, with when they were read.
    usage_cache: Mutex<HashMap<String, (Instant, Usage)>>,
}

impl AiraloClient {
    /// A client of the API rooted at `base_url` (the `/v2` root, e.g.
    /// `https://partners-api.airalo.com/v2`).
    pub fn new(
        base_url: &str,
        client_id: SecretString,
        client_secret: SecretString,
        timeout: Duration,
        gate: Arc<RateGate>,
    ) -> anyhow::Result<Self> {
        Ok(Self {
            transport: Transport::new(base_url, client_id, client_secret, timeout, gate)?,
            usage_cache: Mutex::new(HashMap::new()),
        })
    }

    fn cached_usage(&self, iccid: &str) -> Option<Usage> {
        let cache = lock(&self.usage_cache);
        cache
            .get(iccid)
            .filter(|(read_at, _)| read_at.elapsed() < USAGE_CACHE_TTL)
            .map(|(_, usage)| usage.clone())
    }

    fn keep_usage(&self, iccid: &str, usage: &Usage) {
        let mut cache = lock(&self.usage_cache);
        if cache.len() >= USAGE_CACHE_MAX {
            cache.retain(|_, (read_at, _)| read_at.elapsed() < USAGE_CACHE_TTL);
            if cache.len() >= USAGE_CACHE_MAX {
                cache.clear();
            }
        }
        cache.insert(iccid.to_owned(), (Instant::now(), usage.clone()));
    }
}

/// Whether `value` may stand in a URL path as it is.
fn path_safe(value: &str) -> bool {
    !value.is_empty() && value.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// The one order among those found under a transaction id.
fn first_placed(transaction_id: &str, mut found: Vec<Placed>) -> Option<Placed> {
    if found.len() > 1 {
        tracing::warn!(
            transaction_id,
            orders = found.len(),
            "several Airalo orders carry one transaction id"
        );
    }
    found.sort_by_key(|p| p.order_no.parse::<u64>().unwrap_or(u64::MAX));
    found.into_iter().next()
}

#[async_trait]
impl Supplier for AiraloClient {
    async fn place_order(
        &self,
        transaction_id: &str,
        package_code: &str,
        count: u32,
    ) -> Result<Placed, SupplierError> {
        if !(1..=MAX_QUANTITY).contains(&count) {
            return Err(SupplierError::Refused(format!(
                "/orders: quantity {count} outside 1 to {MAX_QUANTITY}"
            )));
        }
        let body = json!({
            "package_id": package_code,
            "quantity": count,
            "type": "sim",
            "description": transaction_id,
        });
        let answer = self.transport.call(&Call::post("/orders", body)).await?;
        parse::read_placed("/orders", &answer["data"])
    }

    async fn query(&self, order_no: &str) -> Result<Allocation, SupplierError> {
        if !path_safe(order_no) {
            return Err(SupplierError::Refused(format!(
                "/orders: no order {order_no:?}"
            )));
        }
        let call = Call::get(
            format!("/orders/{order_no}"),
            vec![("include", "sims,status".to_owned())],
        );
        let answer = self.transport.call(&call).await?;
        let profiles = parse::read_profiles(&answer["data"]);
        if !profiles.is_empty() {
            return Ok(Allocation::Ready(profiles));
        }
        match answer["data"]["status"]["slug"].as_str() {
            Some(status @ ("failed" | "refunded")) => Err(SupplierError::Refused(format!(
                "/orders/{order_no}: order {status} without eSIMs"
            ))),
            _ => Ok(Allocation::Pending),
        }
    }

    async fn usage(
        &self,
        iccid: &str,
        _esim_tran_no: Option<&str>,
    ) -> Result<Usage, SupplierError> {
        if let Some(usage) = self.cached_usage(iccid) {
            return Ok(usage);
        }
        if !path_safe(iccid) {
            return Err(SupplierError::Refused(format!("/sims: no eSIM {iccid:?}")));
        }
        let call = Call::get(format!("/sims/{iccid}/usage"), Vec::new());
        let usage = parse::read_usage(&self.transport.call(&call).await?)?;
        self.keep_usage(iccid, &usage);
        Ok(usage)
    }

    fn idempotent_placement(&self) -> bool {
        false
    }

    async fn find_order(&self, transaction_id: &str) -> Result<Option<Placed>, SupplierError> {
        if transaction_id.is_empty() {
            return Ok(None);
        }
        let mut found = Vec::new();
        for page in 1..=MAX_PAGES {
            let call = Call::get(
                "/orders",
                vec![
                    ("filter[description]", transaction_id.to_owned()),
                    ("include", "status".to_owned()),
                    ("limit", PAGE_SIZE.to_string()),
                    ("page", page.to_string()),
                ],
            );
            let answer = self.transport.call(&call).await?;
            let (mut orders, more) = parse::read_order_page(&answer, transaction_id)?;
            found.append(&mut orders);
            if !more {
                return Ok(first_placed(transaction_id, found));
            }
        }
        Err(SupplierError::Transient(format!(
            "/orders: more than {MAX_PAGES} pages of orders match {transaction_id:?}; cannot tell"
        )))
    }

    fn max_units_per_order(&self) -> u32 {
        MAX_QUANTITY
    }
}

#[cfg(test)]
mod tests {
    use reqwest::{
        StatusCode,
        header::{HeaderMap, HeaderValue},
    };
    use serde_json::Value;

    use super::{parse, transport::retry_after, *};
    use crate::supplier::Profile;

    /// A recorded payload (see the fixtures' README for where each shape
    /// comes from).
    fn fixture_text(name: &str) -> String {
        let path = format!(
            "{}/tests/fixtures/airalo/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    fn fixture(name: &str) -> Value {
        serde_json::from_str(&fixture_text(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    fn error_of(name: &str, status: u16) -> SupplierError {
        let status = StatusCode::from_u16(status).unwrap();
        errors::from_answer("/orders", status, &fixture_text(name))
    }

    const TRANSACTION: &str = "sot_01JD4Z6Q8K3M5N7P9R1T3V5X7Z";

    #[test]
    fn the_token_answer_gives_the_token_and_its_lifetime() {
        let (token, lifetime) = parse::read_token(&fixture("token_ok.json")).unwrap();
        assert_eq!(token, "<access token>");
        assert_eq!(lifetime, Duration::from_secs(31_622_400));
        let no_lifetime = serde_json::json!({ "data": { "access_token": "t" } });
        assert!(parse::read_token(&no_lifetime).is_err());
    }

    #[test]
    fn an_order_answer_gives_its_id_unit_price_and_every_sim() {
        let answer = fixture("order_ok_two_sims.json");
        let placed = parse::read_placed("/orders", &answer["data"]).unwrap();
        assert_eq!(placed.order_no, "583747");
        assert_eq!(placed.unit_cost_cents, Some(160));
        let profiles = parse::read_profiles(&answer["data"]);
        assert_eq!(
            profiles,
            vec![
                Profile {
                    iccid: "8944465400003573253".into(),
                    activation_code: "LPA:1$RSP-3088.IDEMIA.IO$YVTGM-5LZC6-PIC56-KFEZJ".into(),
                    esim_tran_no: None,
                },
                // No `qrcode`: built from `lpa` and `matching_id`.
                Profile {
                    iccid: "8944465400003573269".into(),
                    activation_code: "LPA:1$RSP-3088.IDEMIA.IO$QWERT-7ASD2-ZXC34-POIUY".into(),
                    esim_tran_no: None,
                },
            ]
        );
    }

    #[test]
    fn a_sandbox_order_without_net_price_is_unpriced() {
        let answer = fixture("order_ok_sandbox.json");
        let placed = parse::read_placed("/orders", &answer["data"]).unwrap();
        assert_eq!(placed.order_no, "9666");
        assert_eq!(placed.unit_cost_cents, None);
        let profiles = parse::read_profiles(&answer["data"]);
        assert_eq!(profiles.len(), 1);
        assert_eq!(placed.profiles, profiles, "the answer's sims come with it");
        assert_eq!(profiles[0].activation_code, "LPA:1$lpa.airalo.com$TEST");
    }

    #[test]
    fn the_order_query_answer_gives_its_sims() {
        let answer = fixture("order_get_ok.json");
        let profiles = parse::read_profiles(&answer["data"]);
        assert_eq!(profiles.len(), 1);
        assert_eq!(profiles[0].iccid, "891000000000009032");
        assert!(parse::read_profiles(&serde_json::json!({ "sims": [] })).is_empty());
    }

    #[test]
    fn unit_prices_round_up_to_the_cent() {
        let cost = |v: Value| parse::unit_cost_cents(&serde_json::json!({ "net_price": v }));
        assert_eq!(cost(serde_json::json!(1.6)), Some(160));
        assert_eq!(cost(serde_json::json!(1.601)), Some(161));
        assert_eq!(cost(serde_json::json!("3.20")), Some(320));
        assert_eq!(cost(serde_json::json!(0.1 + 0.2)), Some(30));
        assert_eq!(cost(Value::Null), None);
    }

    #[test]
    fn the_description_search_is_matched_exactly() {
        let page = fixture("orders_list_found.json");
        let (found, more) = parse::read_order_page(&page, TRANSACTION).unwrap();
        assert_eq!(found, vec![Placed::unpriced("583747")]);
        assert!(!more);
        let (found, _) = parse::read_order_page(&page, &format!("{TRANSACTION}_2")).unwrap();
        assert_eq!(found, vec![Placed::unpriced("583748")]);
        let (found, more) =
            parse::read_order_page(&fixture("orders_list_empty.json"), TRANSACTION).unwrap();
        assert!(found.is_empty() && !more);
    }

    #[test]
    fn later_pages_are_read_and_failed_orders_do_not_count() {
        let mut page = fixture("orders_list_found.json");
        page["meta"]["last_page"] = serde_json::json!(3);
        assert!(parse::read_order_page(&page, TRANSACTION).unwrap().1);
        page["data"][1]["status"]["slug"] = serde_json::json!("failed");
        assert!(
            parse::read_order_page(&page, TRANSACTION)
                .unwrap()
                .0
                .is_empty()
        );
        assert!(parse::read_order_page(&serde_json::json!({}), TRANSACTION).is_err());
    }

    #[test]
    fn usage_is_total_less_remaining_and_nothing_for_unlimited() {
        let usage = parse::read_usage(&fixture("usage_ok.json")).unwrap();
        assert_eq!(
            usage,
            Usage {
                data_used_mb: 2048 - 767,
                data_total_mb: 2048
            }
        );
        let nothing = Usage {
            data_used_mb: 0,
            data_total_mb: 0,
        };
        assert_eq!(
            parse::read_usage(&fixture("usage_unlimited.json")).unwrap(),
            nothing
        );
        assert_eq!(
            parse::read_usage(&fixture("usage_recycled.json")).unwrap(),
            nothing
        );
        assert!(parse::read_usage(&serde_json::json!({ "data": {} })).is_err());
    }

    #[test]
    fn documented_codes_are_classified() {
        for (name, code, class) in [
            ("error_422_code_11.json", 11, ErrorClass::Refused),
            ("error_422_code_13.json", 13, ErrorClass::Refused),
            ("error_422_code_33.json", 33, ErrorClass::Refused),
            ("error_422_code_34.json", 34, ErrorClass::Refused),
            ("error_422_code_53.json", 53, ErrorClass::Unknown),
            ("error_403_code_89.json", 89, ErrorClass::Refused),
        ] {
            assert_eq!(fixture(name)["code"], code, "{name}");
            assert_eq!(classify(code), class, "{name}");
        }
        for code in [14, 23, 43, 73] {
            assert_eq!(classify(code), ErrorClass::Refused, "{code}");
        }
        assert_eq!(classify(99), ErrorClass::Unknown);
    }

    #[test]
    fn refusals_name_the_path_and_the_code() {
        match error_of("error_422_code_33.json", 422) {
            SupplierError::Refused(text) => {
                assert!(text.starts_with("/orders: 33 insufficient stock"), "{text}")
            }
            other => panic!("{other:?}"),
        }
        assert!(
            matches!(error_of("error_422_code_11.json", 422), SupplierError::Refused(t) if t.contains("11 insufficient credit"))
        );
        assert!(matches!(
            error_of("error_422_code_13.json", 422),
            SupplierError::Refused(t) if t.contains("13 operator maintenance")
        ));
        assert!(
            matches!(error_of("error_422_code_53.json", 422), SupplierError::Transient(t) if t.contains("53"))
        );
        assert!(
            matches!(error_of("error_403_code_89.json", 403), SupplierError::Refused(t) if t.contains("89"))
        );
    }

    #[test]
    fn http_answers_without_a_code_are_classified_by_status() {
        let refused = |e: SupplierError| matches!(e, SupplierError::Refused(_));
        let validation = error_of("error_422_validation.json", 422);
        assert!(
            matches!(&validation, SupplierError::Refused(t) if t.contains("quantity: The quantity may not be greater than 50.")),
            "{validation:?}"
        );
        assert!(refused(error_of(
            "error_422_quantity_not_available.json",
            422
        )));
        assert!(refused(error_of("error_404_not_found.json", 404)));
        assert!(refused(error_of("error_401_unauthorized.json", 401)));
        assert!(refused(error_of("token_error_invalid_client.json", 422)));
        assert!(refused(error_of("token_error_auth_failed.json", 401)));
        // No documented code: not known to be final.
        assert!(!refused(error_of("error_422_not_opted_in.json", 422)));
        assert!(!refused(errors::from_answer(
            "/orders",
            StatusCode::BAD_GATEWAY,
            "<html>"
        )));
        assert!(!refused(errors::from_answer(
            "/orders",
            StatusCode::IM_A_TEAPOT,
            ""
        )));
    }

    #[test]
    fn a_429_names_its_wait() {
        assert_eq!(fixture("error_429.json")["message"], "Too Many Attempts.");
        let mut headers = HeaderMap::new();
        assert_eq!(retry_after(&headers), Duration::from_secs(1));
        let reset = crate::limits::unix_now_seconds() + 30;
        headers.insert("x-ratelimit-reset", HeaderValue::from(reset));
        assert!((29..=30).contains(&retry_after(&headers).as_secs()));
        headers.insert("retry-after", HeaderValue::from_static("7"));
        assert_eq!(retry_after(&headers), Duration::from_secs(7));
    }

    #[test]
    fn the_recorded_webhook_signature_verifies() {
        let signature = fixture("webhook_async_order.signature.json");
        let secret = signature["secret"].as_str().unwrap();
        let header = signature["airalo_signature"].as_str().unwrap();
        let body = fixture_text("webhook_async_order.json");
        // The file is pretty-printed: it verifies through the SDKs'
        // re-encoding.
        assert!(verify_signature(secret, body.as_bytes(), header));
        assert!(verify_signature(
            secret,
            body.as_bytes(),
            &header.to_uppercase()
        ));
        assert!(!verify_signature("another secret", body.as_bytes(), header));
        let tampered = body.replace("583747", "583748");
        assert!(!verify_signature(secret, tampered.as_bytes(), header));
        assert!(!verify_signature(secret, body.as_bytes(), "not hex"));
        assert!(!verify_signature(secret, body.as_bytes(), ""));
    }

    #[test]
    fn raw_and_php_encoded_bodies_verify() {
        // What PHP's `json_encode` writes.
        let body = r#"{"data":{"description":"caf\u00e9 https:\/\/x\/y"}}"#;
        let value: Value = serde_json::from_str(body).unwrap();
        // Sent as signed (PHP's default encoding): the raw body matches.
        assert!(verify_signature(
            "s",
            body.as_bytes(),
            &sign("s", body.as_bytes())
        ));
        // The same payload written as UTF-8 with plain slashes.
        let plain = value.to_string();
        assert!(verify_signature(
            "s",
            plain.as_bytes(),
            &sign("s", body.as_bytes())
        ));
        let sdk = canonical_json(&value);
        assert_eq!(sdk, r#"{"data":{"description":"café https:\/\/x\/y"}}"#);
        assert!(verify_signature(
            "s",
            plain.as_bytes(),
            &sign("s", sdk.as_bytes())
        ));
    }

    #[test]
    fn the_async_webhook_names_the_order_and_the_transaction() {
        let order = webhook_order(&fixture("webhook_async_order.json")).unwrap();
        assert_eq!(
            order.request_id.as_deref(),
            Some("3NhR3gKmqCWK7IWppurpDX3Cg")
        );
        assert_eq!(order.description.as_deref(), Some(TRANSACTION));
        assert_eq!(order.order_id.as_deref(), Some("583747"));
        assert_eq!(order.profiles.len(), 1);
        assert_eq!(order.unit_cost_cents, Some(160));
        let low_data = serde_json::json!({ "level": "3days", "iccid": "87123123456889019" });
        assert_eq!(webhook_order(&low_data), None);
    }

    #[test]
    fn only_plain_identifiers_go_into_paths() {
        assert!(path_safe("583747") && path_safe("8944465400003573253"));
        assert!(!path_safe("") && !path_safe("1/../2") && !path_safe("1?x=2"));
    }
}
