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
//! access code + body), and passes the node's [`RateGate`] first.

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use hmac::{Hmac, Mac};
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Value, json};
use sha2::Sha256;

use super::{Allocation, Profile, Supplier, SupplierError, Usage, gate::RateGate};

/// The supplier's "profiles are being allocated" code.
pub const ALLOCATING: &str = "200010";
/// The supplier's "too many requests" code.
pub const RATE_LIMITED: &str = "101004";
/// Profiles per query page.
const PAGE_SIZE: u32 = 100;
/// Pause of every call after a rate-limit answer.
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

/// The documented codes (see `tests/fixtures/esim_access/README.md`).
pub fn classify(code: &str) -> ErrorClass {
    match code {
        // System busy, system error, timestamp out of range (clock skew),
        // too many requests, profiles still being allocated.
        "900001" | "999999" | "101001" | RATE_LIMITED | ALLOCATING => ErrorClass::Transient,
        // Parameters missing, null or out of range; signature or access
        // code wrong; insufficient balance; package or order unknown; no stock.
        "000101" | "000102" | "000103" | "000104" | "000105" | "000106" | "000107" | "101002"
        | "101003" | "200002" | "200005" | "200006" | "200007" | "200008" | "200009" | "200011"
        | "310201" | "310211" | "310241" | "310243" | "310272" => ErrorClass::Refused,
        _ => ErrorClass::Unknown,
    }
}

/// A supplier error code as the error of the call that got it.
fn classified(path: &str, code: &str, message: &str) -> SupplierError {
    let text = format!("{path}: {code} {message}");
    match classify(code) {
        ErrorClass::Refused => SupplierError::Refused(text),
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
    base_url: String,
    access_code: SecretString,
    secret: SecretString,
    http: reqwest::Client,
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
            // One client: connections to the supplier are kept and reused.
            http: reqwest::Client::builder()
                .timeout(timeout)
                .pool_max_idle_per_host(16)
                .tcp_nodelay(true)
                .build()?,
            gate,
        })
    }

    /// Sends one signed request and reads the envelope: `Ok(obj)` on
    /// success, a classified error otherwise.
    async fn call(&self, path: &str, body: Value) -> Result<Value, SupplierError> {
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
    ) -> Result<Result<Value, (String, String)>, SupplierError> {
        self.gate.admit().await;
        let answer = envelope(self.post(path, body).await?);
        if let Err((code, _)) = &answer
            && code == RATE_LIMITED
        {
            self.gate.slow_down(SLOW_DOWN);
        }
        Ok(answer)
    }

    async fn post(&self, path: &str, body: Value) -> Result<Value, SupplierError> {
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
            .map_err(|e| SupplierError::Transient(format!("{path}: {e}")))?;
        let status = response.status();
        if status.as_u16() == 429 {
            self.gate.slow_down(SLOW_DOWN);
        }
        let text = response
            .text()
            .await
            .map_err(|e| SupplierError::Transient(format!("{path}: reading: {e}")))?;
        if !status.is_success() {
            return Err(SupplierError::Transient(format!("{path}: HTTP {status}")));
        }
        serde_json::from_str(&text)
            .map_err(|_| SupplierError::Transient(format!("{path}: not JSON")))
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

/// `obj` of a successful answer, or the error (code, message) it carries.
pub fn envelope(answer: Value) -> Result<Value, (String, String)> {
    if answer["success"].as_bool() == Some(true) {
        return Ok(answer["obj"].clone());
    }
    let code = match &answer["errorCode"] {
        Value::String(code) => code.clone(),
        Value::Number(code) => code.to_string(),
        _ => "unknown".to_owned(),
    };
    let message = answer["errorMsg"].as_str().unwrap_or("").to_owned();
    Err((code, message))
}

/// The order number of an order answer's `obj`.
pub fn read_order(obj: &Value) -> Result<String, SupplierError> {
    obj["orderNo"]
        .as_str()
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| SupplierError::Transient("order: no orderNo in the answer".into()))
}

/// The profiles of one query page's `obj`, and the total the pager reports.
pub fn read_profiles(obj: &Value) -> Result<(Vec<Profile>, Option<u64>), SupplierError> {
    let list = obj["esimList"]
        .as_array()
        .ok_or_else(|| SupplierError::Transient("query: no esimList in the answer".into()))?;
    let mut profiles = Vec::with_capacity(list.len());
    for entry in list {
        // A profile is usable once it has an ICCID and an activation code.
        if let (Some(iccid), Some(ac)) = (
            entry["iccid"].as_str().filter(|s| !s.is_empty()),
            entry["ac"].as_str().filter(|s| !s.is_empty()),
        ) {
            profiles.push(Profile {
                iccid: iccid.to_owned(),
                activation_code: ac.to_owned(),
                esim_tran_no: entry["esimTranNo"].as_str().map(str::to_owned),
            });
        }
    }
    Ok((profiles, obj["pager"]["total"].as_u64()))
}

/// The usage of one profile in a usage answer's `obj`.
pub fn read_usage(obj: &Value, esim_tran_no: &str) -> Result<Usage, SupplierError> {
    const MB: i64 = 1024 * 1024;
    let row = obj["esimUsageList"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["esimTranNo"] == esim_tran_no))
        .ok_or_else(|| {
            SupplierError::Transient("usage: the profile is not in the answer".into())
        })?;
    match (row["dataUsage"].as_i64(), row["totalData"].as_i64()) {
        (Some(used), Some(total)) => Ok(Usage {
            data_used_mb: used / MB,
            data_total_mb: total / MB,
        }),
        _ => Err(SupplierError::Transient("usage: malformed answer".into())),
    }
}

#[async_trait]
impl Supplier for EsimAccessClient {
    async fn place_order(
        &self,
        transaction_id: &str,
        package_code: &str,
        count: u32,
    ) -> Result<String, SupplierError> {
        let obj = self
            .call(
                "/api/v1/open/esim/order",
                json!({
                    "transactionId": transaction_id,
                    "packageInfoList": [{ "packageCode": package_code, "count": count }],
                }),
            )
            .await?;
        read_order(&obj)
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
        read_usage(&obj, &esim_tran_no)
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
        obj["esimList"][0]["esimTranNo"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| SupplierError::Refused(format!("query: no profile {iccid}")))
    }
}
