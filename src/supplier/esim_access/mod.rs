//! HTTP adapter of eSIM Access's open API (recorded payloads and where each
//! shape comes from: `tests/fixtures/esim_access/`).
//!
//! - `POST /api/v1/open/esim/order` `{transactionId, packageInfoList:
//!   [{packageCode, count}]}` → `obj.orderNo`. One order buys `count`
//!   profiles; a repeated `transactionId` is the same order.
//! - `POST /api/v1/open/esim/query` `{orderNo, iccid: "", pager: {pageNum,
//!   pageSize}}` → `obj.esimList[].{esimTranNo, iccid, ac, ...}` and
//!   `obj.pager.total`, or `errorCode` `200010` while the profiles are being
//!   allocated. Pages are read until every profile is in.
//! - `POST /api/v1/open/esim/usage/query` `{esimTranNoList: [...]}` (at most
//!   10) → `obj.esimUsageList[].{esimTranNo, dataUsage, totalData}` in bytes.
//! - Every answer is `{success, errorCode, errorMsg, obj}`; each documented
//!   code is classified in [`classify`]: transient (ask again under the same
//!   transaction id), refused (nothing was bought; refund), or unknown (ask
//!   again: a repeated transaction id never buys twice).
//!
//! Every request carries `RT-AccessCode`, `RT-Timestamp` (ms), `RT-RequestID`
//! and `RT-Signature` = hex HMAC-SHA256(secret, timestamp + request id +
//! access code + body), and passes the node's [`RateGate`] first. Answers
//! are read in `parse.rs`.

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use hmac::{Hmac, Mac};
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Value, json};
use sha2::Sha256;

use super::{Allocation, Placed, Supplier, SupplierError, Usage, gate::RateGate};
use crate::domain::pace::Pass;

mod parse;

pub use parse::{Obj, envelope, read_order, read_profiles, read_usage};

/// The supplier's "profile not yet allocated" code.
pub const ALLOCATING: &str = "200010";
/// The supplier's "system busy" code: asked again, and every call slows down.
pub const BUSY: &str = "900001";
/// Profiles per query page (the documented pager takes 5 to 500).
const PAGE_SIZE: u32 = 100;
/// Pause of every call after an answer that says to slow down (HTTP 429, or
/// "system busy"). The documentation gives the limit, 8 requests/s, but no
/// code for going over it.
const SLOW_DOWN: Duration = Duration::from_secs(1);

/// What an error code of the supplier means for the call that got it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The supplier did not (or may not have) done it yet; the same call may
    /// succeed later. A placement is asked again under the same transaction id.
    Transient,
    /// The supplier will not do it: nothing was bought.
    Refused,
    /// Not a documented code: treated as transient (asked again under the same
    /// transaction id, which never buys twice) and logged.
    Unknown,
}

/// The documented codes (`tests/fixtures/esim_access/README.md` lists them
/// with their documented meaning).
pub fn classify(code: &str) -> ErrorClass {
    match code {
        // Server error, timestamp expired (clock skew: the next call carries
        // a new one), profile not yet allocated, system busy.
        "000001" | "101001" | ALLOCATING | BUSY => ErrorClass::Transient,
        // Headers, method, JSON or parameters wrong; IP blocked; signature
        // mismatch; price or amount wrong; insufficient balance; order
        // parameters wrong; insufficient available profiles; package,
        // location, currency, carrier, vendor or order unknown; ICCID not in
        // the order. Nothing was bought.
        "000101" | "000102" | "000103" | "000104" | "000105" | "000106" | "000107" | "101002"
        | "101003" | "200005" | "200006" | "200007" | "200008" | "200011" | "310201" | "310211"
        | "310221" | "310231" | "310241" | "310243" | "310251" | "310272" | "310403" => {
            ErrorClass::Refused
        }
        // "Operation not allowed due to order status" and "abnormal order
        // status" say nothing certain about a purchase: asked again, like
        // any undocumented code.
        _ => ErrorClass::Unknown,
    }
}

/// A supplier error code as the error of the call that got it.
fn classified(path: &str, code: &str, message: &str) -> SupplierError {
    let text = format!("{path}: {code} {message}");
    match classify(code) {
        ErrorClass::Refused => SupplierError::Refused(text),
        ErrorClass::Transient if code == BUSY => SupplierError::SlowDown(text),
        ErrorClass::Transient => SupplierError::Transient(text),
        ErrorClass::Unknown => {
            tracing::warn!(
                path,
                code,
                message,
                "undocumented supplier error code; treated as transient"
            );
            SupplierError::Transient(text)
        }
    }
}

/// The HTTP client of the supplier.
pub struct EsimAccessClient {
    /// The API's root, without a trailing slash.
    base_url: String,
    /// The account's access code (`RT-AccessCode`).
    access_code: SecretString,
    /// The secret every request is signed with.
    secret: SecretString,
    /// The HTTP client, with the configured time-out.
    http: reqwest::Client,
    /// The node's gate for this supplier's rate limit.
    gate: Arc<RateGate>,
}

impl EsimAccessClient {
    pub fn new(
        base_url: &str,
        access_code: SecretString,
        secret: SecretString,
        timeout: Duration,
        gate: Arc<RateGate>,
    ) -> anyhow::Result<Self> {
        Ok(Self {
            base_url: base_url.trim_end_matches('/').to_owned(),
            access_code,
            secret,
            http: super::http_client(timeout)?,
            gate,
        })
    }

    /// Sends one signed request and reads the envelope: `Ok(obj)` on
    /// success, a classified error otherwise.
    async fn call(&self, path: &str, body: Value) -> Result<Obj, SupplierError> {
        self.call_envelope(path, body)
            .await?
            .map_err(|(code, message)| classified(path, &code, &message))
    }

    /// Sends one signed request; the outer error is the transport's, the
    /// inner one the supplier's `(errorCode, errorMsg)`.
    async fn call_envelope(
        &self,
        path: &str,
        body: Value,
    ) -> Result<Result<Obj, (String, String)>, SupplierError> {
        let pass = self.gate.admit().await;
        let answer = self.post(path, body, pass).await?;
        let answer = envelope(&answer)
            .ok_or_else(|| SupplierError::Transient(format!("{path}: not an answer")))?;
        if let Err((code, _)) = &answer
            && code == BUSY
        {
            self.gate.slow_down(pass, SLOW_DOWN);
        }
        Ok(answer)
    }

    /// Sends one signed request and returns its answer's bytes, read as JSON
    /// by [`envelope`] (which checks as UTF-8 only the text it keeps, where
    /// `text()` first copied the whole answer through a lossy decoding).
    async fn post(
        &self,
        path: &str,
        body: Value,
        pass: Pass,
    ) -> Result<impl AsRef<[u8]>, SupplierError> {
        let body = body.to_string();
        let timestamp = crate::limits::unix_now_millis().to_string();
        let request_id = uuid::Uuid::new_v4().simple().to_string();
        let signature = sign(
            self.secret.expose_secret(),
            &timestamp,
            &request_id,
            self.access_code.expose_secret(),
            &body,
        );
        let response = self
            .http
            .post(format!("{}{path}", self.base_url))
            .header("content-type", "application/json")
            .header("RT-AccessCode", self.access_code.expose_secret())
            .header("RT-Timestamp", &timestamp)
            .header("RT-RequestID", &request_id)
            .header("RT-Signature", signature)
            .body(body)
            .send()
            .await
            .map_err(|e| sending_failed(path, &e))?;
        let status = response.status();
        if status == reqwest::StatusCode::TOO_MANY_REQUESTS {
            self.gate.slow_down(pass, SLOW_DOWN);
            return Err(SupplierError::SlowDown(format!(
                "{path}: HTTP 429, too many requests"
            )));
        }
        let answer = response
            .bytes()
            .await
            .map_err(|e| SupplierError::Transient(format!("{path}: reading: {e}")))?;
        if !status.is_success() {
            return Err(SupplierError::Transient(format!("{path}: HTTP {status}")));
        }
        Ok(answer)
    }
}

/// A request that failed before an answer: not sent at all when the
/// connection could not be made, else perhaps taken.
pub(crate) fn sending_failed(path: &str, error: &reqwest::Error) -> SupplierError {
    if error.is_connect() {
        SupplierError::NotSent(format!("{path}: {error}"))
    } else {
        SupplierError::Transient(format!("{path}: {error}"))
    }
}

/// The request signature of the supplier's protocol.
pub fn sign(
    secret: &str,
    timestamp: &str,
    request_id: &str,
    access_code: &str,
    body: &str,
) -> String {
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret.as_bytes()) {
        Ok(mac) => mac,
        // HMAC takes keys of any length.
        Err(_) => return String::new(),
    };
    mac.update(timestamp.as_bytes());
    mac.update(request_id.as_bytes());
    mac.update(access_code.as_bytes());
    mac.update(body.as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

#[async_trait]
impl Supplier for EsimAccessClient {
    async fn place_order(
        &self,
        transaction_id: &str,
        package_code: &str,
        count: u32,
    ) -> Result<Placed, SupplierError> {
        let obj = self
            .call(
                "/api/v1/open/esim/order",
                json!({
                    "transactionId": transaction_id,
                    "packageInfoList": [{ "packageCode": package_code, "count": count }],
                }),
            )
            .await?;
        read_order(&obj.value()).map(Placed::unpriced)
    }

    async fn query(&self, order_no: &str) -> Result<Allocation, SupplierError> {
        let mut profiles = Vec::new();
        for page in 1.. {
            let answer = self
                .call_envelope(
                    "/api/v1/open/esim/query",
                    json!({
                        "orderNo": order_no,
                        "iccid": "",
                        "pager": { "pageNum": page, "pageSize": PAGE_SIZE },
                    }),
                )
                .await?;
            let obj = match answer {
                Ok(obj) => obj,
                Err((code, _)) if code == ALLOCATING => return Ok(Allocation::Pending),
                Err((code, message)) => {
                    return Err(classified("/api/v1/open/esim/query", &code, &message));
                }
            };
            let (mut page_profiles, total) = read_profiles(&obj)?;
            let last = page_profiles.len() < PAGE_SIZE as usize;
            profiles.append(&mut page_profiles);
            if last || total.is_some_and(|t| profiles.len() as u64 >= t) {
                break;
            }
        }
        Ok(Allocation::Ready(profiles))
    }

    async fn usage(&self, iccid: &str, esim_tran_no: Option<&str>) -> Result<Usage, SupplierError> {
        let esim_tran_no = match esim_tran_no {
            Some(number) => number.to_owned(),
            // A profile stored before its number was kept: find it by ICCID.
            None => self.esim_tran_no_of(iccid).await?,
        };
        let obj = self
            .call(
                "/api/v1/open/esim/usage/query",
                json!({ "esimTranNoList": [esim_tran_no] }),
            )
            .await?;
        read_usage(&obj.value(), &esim_tran_no)
    }
}

impl EsimAccessClient {
    async fn esim_tran_no_of(&self, iccid: &str) -> Result<String, SupplierError> {
        let obj = self
            .call(
                "/api/v1/open/esim/query",
                json!({ "orderNo": "", "iccid": iccid, "pager": { "pageNum": 1, "pageSize": 5 } }),
            )
            .await?;
        obj.value()["esimList"][0]["esimTranNo"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| SupplierError::Refused(format!("query: no profile {iccid}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_matches_the_documented_example() {
        // The worked example of the documentation's signature section.
        assert_eq!(
            sign(
                "1111",
                "1628670421",
                "4ce9d9cdac9e4e17b3a2c66c358c1ce2",
                "11111",
                r#"{"imsi":"326543826"}"#
            ),
            "7eb765e27df5373dea2dbc8c41a7d9557743e46c8054750f3d851b3fd01d0835"
        );
    }
}
