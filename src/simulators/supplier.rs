//! A simulated wholesale eSIM supplier speaking the protocol of
//! `supplier::esim_access`, with signature checks, per-transaction
//! idempotency, allocation latency and injectable faults.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use axum::{
    Json, Router,
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    routing::post,
};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::supplier::{
    esim_access::{ALLOCATING, sign},
    sandbox::profile_for,
};

/// SM-DP+ address of simulated profiles.
pub const SIM_SMDP: &str = "smdp.sim-supplier.esim-reseller.invalid";

/// Faults and latency, changed by `POST /sim/supplier/faults`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Faults {
    /// How long a placed order takes to allocate.
    #[serde(default)]
    pub latency_ms: u64,
    /// Share of calls answered with HTTP 500.
    #[serde(default)]
    pub fail_rate: f64,
    /// The next N calls answer HTTP 500.
    #[serde(default)]
    pub fail_next: u32,
    /// The next N order placements are refused (no stock).
    #[serde(default)]
    pub reject_next: u32,
    /// The next N calls answer a body that is not JSON.
    #[serde(default)]
    pub garbage_next: u32,
    /// The next N calls are carried out at once but answered only after
    /// `slow_ms`: a caller with a shorter time-out sees a time-out for a
    /// call that did take effect.
    #[serde(default)]
    pub slow_next: u32,
    /// How late a slow answer is.
    #[serde(default)]
    pub slow_ms: u64,
}

struct Placed {
    order_no: String,
    transaction_id: String,
    ready_at: Instant,
}

/// Shared simulator state.
pub struct SupplierSim {
    access_code: String,
    secret: String,
    faults: Mutex<Faults>,
    by_transaction: Mutex<HashMap<String, Arc<Placed>>>,
    by_order_no: Mutex<HashMap<String, Arc<Placed>>>,
}

impl SupplierSim {
    pub fn new(access_code: &str, secret: &str, faults: Faults) -> Arc<Self> {
        Arc::new(Self {
            access_code: access_code.to_owned(),
            secret: secret.to_owned(),
            faults: Mutex::new(faults),
            by_transaction: Mutex::new(HashMap::new()),
            by_order_no: Mutex::new(HashMap::new()),
        })
    }

    fn faults(&self) -> std::sync::MutexGuard<'_, Faults> {
        self.faults.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Routes of the simulated supplier.
pub fn routes(sim: Arc<SupplierSim>) -> Router {
    let api = Router::new()
        .route("/api/v1/open/esim/order", post(order))
        .route("/api/v1/open/esim/query", post(query))
        .route("/api/v1/open/esim/usage/query", post(usage))
        .route_layer(axum::middleware::from_fn_with_state(
            sim.clone(),
            answer_late,
        ));
    Router::new()
        .merge(api)
        .route("/sim/supplier/faults", post(set_faults))
        .with_state(sim)
}

/// Applies `slow_next`: the call has already taken effect when the answer
/// is held back.
async fn answer_late(
    State(sim): State<Arc<SupplierSim>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let answer = next.run(request).await;
    let delay = {
        let mut faults = sim.faults();
        (faults.slow_next > 0).then(|| {
            faults.slow_next -= 1;
            Duration::from_millis(faults.slow_ms)
        })
    };
    if let Some(delay) = delay {
        tokio::time::sleep(delay).await;
    }
    answer
}

async fn set_faults(
    State(sim): State<Arc<SupplierSim>>,
    Json(faults): Json<Faults>,
) -> Json<Value> {
    tracing::info!(?faults, "simulated supplier faults changed");
    *sim.faults() = faults;
    Json(json!({ "ok": true }))
}

/// Checks the signature and applies injected faults; `Err` is the answer to send.
fn admit(sim: &SupplierSim, headers: &HeaderMap, body: &[u8]) -> Result<Value, Box<Response>> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let text = std::str::from_utf8(body).unwrap_or_default();
    let expected = sign(
        &sim.secret,
        &header("RT-Timestamp"),
        &header("RT-RequestID"),
        &sim.access_code,
        text,
    );
    if header("RT-AccessCode") != sim.access_code || header("RT-Signature") != expected {
        return Err(Box::new(answer_error("101001", "signature mismatch")));
    }
    {
        let mut faults = sim.faults();
        if faults.fail_next > 0 {
            faults.fail_next -= 1;
            return Err(Box::new(StatusCode::INTERNAL_SERVER_ERROR.into_response()));
        }
        if faults.garbage_next > 0 {
            faults.garbage_next -= 1;
            return Err(Box::new(
                (StatusCode::OK, "<html>upstream proxy error</html>").into_response(),
            ));
        }
        if faults.fail_rate > 0.0 && rand::random::<f64>() < faults.fail_rate {
            return Err(Box::new(StatusCode::INTERNAL_SERVER_ERROR.into_response()));
        }
    }
    serde_json::from_slice(body).map_err(|_| Box::new(answer_error("100002", "body is not JSON")))
}

fn answer_error(code: &str, message: &str) -> Response {
    Json(json!({ "success": false, "errorCode": code, "errorMsg": message, "obj": null }))
        .into_response()
}

async fn order(State(sim): State<Arc<SupplierSim>>, headers: HeaderMap, body: Bytes) -> Response {
    let request = match admit(&sim, &headers, &body) {
        Ok(request) => request,
        Err(answer) => return *answer,
    };
    let Some(transaction_id) = request["transactionId"].as_str().map(str::to_owned) else {
        return answer_error("100001", "transactionId is required");
    };
    if let Some(placed) = sim
        .by_transaction
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&transaction_id)
    {
        return Json(json!({ "success": true, "errorCode": "0", "obj": { "orderNo": placed.order_no, "transactionId": transaction_id } })).into_response();
    }
    {
        let mut faults = sim.faults();
        if faults.reject_next > 0 {
            faults.reject_next -= 1;
            return answer_error("310241", "insufficient stock for this package");
        }
    }
    let latency = Duration::from_millis(sim.faults().latency_ms);
    let placed = Arc::new(Placed {
        order_no: format!("B{}", uuid::Uuid::new_v4().simple()),
        transaction_id: transaction_id.clone(),
        ready_at: Instant::now() + latency,
    });
    sim.by_transaction
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(transaction_id.clone(), placed.clone());
    sim.by_order_no
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(placed.order_no.clone(), placed.clone());
    Json(json!({ "success": true, "errorCode": "0", "obj": { "orderNo": placed.order_no, "transactionId": transaction_id } })).into_response()
}

async fn query(State(sim): State<Arc<SupplierSim>>, headers: HeaderMap, body: Bytes) -> Response {
    let request = match admit(&sim, &headers, &body) {
        Ok(request) => request,
        Err(answer) => return *answer,
    };
    let order_no = request["orderNo"].as_str().unwrap_or_default();
    let placed = sim
        .by_order_no
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(order_no)
        .cloned();
    let Some(placed) = placed else {
        return answer_error("200005", "order not found");
    };
    if Instant::now() < placed.ready_at {
        return answer_error(ALLOCATING, "profiles are being allocated");
    }
    let profile = profile_for(&placed.transaction_id, SIM_SMDP);
    Json(json!({
        "success": true, "errorCode": "0",
        "obj": { "esimList": [{ "iccid": profile.iccid, "ac": profile.activation_code, "orderNo": placed.order_no, "esimStatus": "GOT_RESOURCE" }] }
    }))
    .into_response()
}

async fn usage(State(sim): State<Arc<SupplierSim>>, headers: HeaderMap, body: Bytes) -> Response {
    let request = match admit(&sim, &headers, &body) {
        Ok(request) => request,
        Err(answer) => return *answer,
    };
    let iccid = request["iccidList"][0].as_str().unwrap_or_default();
    // A stable made-up figure per profile: some megabytes used of a few gigabytes.
    let used = (iccid.bytes().map(u64::from).sum::<u64>() % 900) * 1024 * 1024;
    Json(json!({
        "success": true, "errorCode": "0",
        "obj": { "esimUsageList": [{ "iccid": iccid, "dataUsage": used, "totalData": 3u64 * 1024 * 1024 * 1024 }] }
    }))
    .into_response()
}
