//! HTTP adapter for an eSIM Access-style wholesale API.
//!
//! - `POST /api/v1/open/esim/order` `{transactionId, packageInfoList: [{packageCode, count}]}`
//!   → `{success, errorCode, errorMsg, obj: {orderNo}}`
//! - `POST /api/v1/open/esim/query` `{orderNo, pager}` → `obj.esimList[].{iccid, ac}`,
//!   or `errorCode` `200010` while profiles are being allocated
//! - `POST /api/v1/open/esim/usage/query` `{iccidList}` → `obj.esimUsageList[].{dataUsage, totalData}` (bytes)
//!
//! Every request carries `RT-AccessCode`, `RT-Timestamp` (ms), `RT-RequestID`
//! and `RT-Signature` = hex HMAC-SHA256(secret, timestamp + request id + access code + body).

use std::time::Duration;

use async_trait::async_trait;
use hmac::{Hmac, Mac};
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Value, json};
use sha2::Sha256;

use super::{Allocation, Profile, Supplier, SupplierError, Usage};

/// The supplier's "profiles are being allocated" code.
pub const ALLOCATING: &str = "200010";

/// The HTTP client of the supplier.
pub struct EsimAccessClient {
    base_url: String,
    access_code: SecretString,
    secret: SecretString,
    http: reqwest::Client,
}

impl EsimAccessClient {
    pub fn new(
        base_url: &str,
        access_code: SecretString,
        secret: SecretString,
        timeout: Duration,
    ) -> anyhow::Result<Self> {
        Ok(Self {
            base_url: base_url.trim_end_matches('/').to_owned(),
            access_code,
            secret,
            http: reqwest::Client::builder().timeout(timeout).build()?,
        })
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

/// `obj` of a successful answer, or the error it carries.
fn obj(answer: Value) -> Result<Value, (String, String)> {
    if answer["success"].as_bool() == Some(true) {
        return Ok(answer["obj"].clone());
    }
    let code = answer["errorCode"].as_str().unwrap_or("unknown").to_owned();
    let message = answer["errorMsg"].as_str().unwrap_or("").to_owned();
    Err((code, message))
}

#[async_trait]
impl Supplier for EsimAccessClient {
    async fn place_order(
        &self,
        transaction_id: &str,
        package_code: &str,
    ) -> Result<String, SupplierError> {
        let answer = self
            .post(
                "/api/v1/open/esim/order",
                json!({
                    "transactionId": transaction_id,
                    "packageInfoList": [{ "packageCode": package_code, "count": 1 }],
                }),
            )
            .await?;
        match obj(answer) {
            Ok(obj) => obj["orderNo"]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| SupplierError::Transient("order: no orderNo".into())),
            Err((code, message)) => Err(SupplierError::Refused(format!("{code} {message}"))),
        }
    }

    async fn query(&self, order_no: &str) -> Result<Allocation, SupplierError> {
        let answer = self
            .post(
                "/api/v1/open/esim/query",
                json!({ "orderNo": order_no, "pager": { "pageNum": 1, "pageSize": 50 } }),
            )
            .await?;
        match obj(answer) {
            Ok(obj) => {
                let first = &obj["esimList"][0];
                match (first["iccid"].as_str(), first["ac"].as_str()) {
                    (Some(iccid), Some(ac)) => Ok(Allocation::Ready(Profile {
                        iccid: iccid.to_owned(),
                        activation_code: ac.to_owned(),
                    })),
                    _ => Err(SupplierError::Transient(
                        "query: no profile in the answer".into(),
                    )),
                }
            }
            Err((code, _)) if code == ALLOCATING => Ok(Allocation::Pending),
            Err((code, message)) => Err(SupplierError::Refused(format!("{code} {message}"))),
        }
    }

    async fn usage(&self, iccid: &str) -> Result<Usage, SupplierError> {
        let answer = self
            .post(
                "/api/v1/open/esim/usage/query",
                json!({ "iccidList": [iccid] }),
            )
            .await?;
        let obj = obj(answer)
            .map_err(|(code, message)| SupplierError::Refused(format!("{code} {message}")))?;
        let row = &obj["esimUsageList"][0];
        const MB: i64 = 1024 * 1024;
        match (row["dataUsage"].as_i64(), row["totalData"].as_i64()) {
            (Some(used), Some(total)) => Ok(Usage {
                data_used_mb: used / MB,
                data_total_mb: total / MB,
            }),
            _ => Err(SupplierError::Transient("usage: malformed answer".into())),
        }
    }
}
