//! A simulated eSIM Access open API, a copy of the service as its
//! documentation describes it (recorded shapes: `tests/fixtures/esim_access/`):
//! signed requests checked (`RT-*` headers), the documented envelope and
//! error codes, a per-account rate limit, orders of many profiles
//! (`packageInfoList` with `count`) where a repeated `transactionId` is the
//! same order, queries with a mandatory pager, usage by `esimTranNoList`,
//! and the `ORDER_STATUS`/`GOT_RESOURCE` webhook once profiles are allocated.
//! Faults (latency, 5xx, garbage, refusals, late answers) are injected with
//! `POST /sim/supplier/faults`; `GET /sim/supplier/stats` counts what it saw.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU32, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use axum::{
    Json, Router,
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use serde::Deserialize;
use serde_json::{Value, json};

use super::stock::IccidStock;
use crate::supplier::{
    Profile,
    esim_access::{ALLOCATING, BUSY, sign},
    sandbox::profiles_from_stock,
};
use crate::sync::lock;

/// SM-DP+ address of simulated profiles.
pub(crate) const SIM_SMDP: &str = "smdp.sim-supplier.esim-reseller.invalid";

/// How far a request's `RT-Timestamp` may be from the simulator's clock.
const TIMESTAMP_TOLERANCE_MS: u64 = 5 * 60 * 1000;
/// Most profiles one order may carry, as documented.
pub(crate) const MAX_COUNT: u64 = 30;
/// Most profiles one usage query may name, as documented.
const MAX_USAGE_LIST: usize = 10;

/// Faults and latency, changed by `POST /sim/supplier/faults`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Faults {
    /// How long a placed order takes to allocate.
    #[serde(default)]
    pub latency_ms: u64,
    /// Share of calls answered with HTTP 500.
    #[serde(default)]
    pub fail_rate: f64,
    /// The next N calls answer HTTP 500.
    #[serde(default)]
    pub fail_next: u32,
    /// The next N order placements are refused with `reject_code` (default:
    /// `200011`, insufficient available profiles).
    #[serde(default)]
    pub reject_next: u32,
    /// The error code of those refusals.
    #[serde(default)]
    pub reject_code: Option<String>,
    /// The next N order placements answer "system busy" (`900001`) after
    /// taking the order: the caller must ask again under the same id.
    #[serde(default)]
    pub busy_next: u32,
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
    package_code: String,
    count: u32,
    /// The ICCID serial of its first profile, the rest following it.
    first_serial: u64,
    ready_at: Instant,
}

impl Placed {
    fn profiles(&self) -> Vec<Profile> {
        profiles_from_stock(
            &self.transaction_id,
            self.first_serial,
            self.count,
            SIM_SMDP,
        )
    }
}

/// What the simulator saw, for load tests (`GET /sim/supplier/stats`).
#[derive(Default)]
struct Stats {
    requests: AtomicU64,
    rate_limited: AtomicU64,
    orders: AtomicU64,
    profiles: AtomicU64,
    queries: AtomicU64,
    webhooks: AtomicU64,
    busiest_second: AtomicU64,
}

/// Shared simulator state.
pub(crate) struct SupplierSim {
    access_code: String,
    secret: String,
    faults: Mutex<Faults>,
    /// Requests per second accepted; 0: no limit.
    rate_limit: AtomicU32,
    /// (unix second, requests in it).
    window: Mutex<(u64, u64)>,
    by_transaction: Mutex<HashMap<String, Arc<Placed>>>,
    by_order_no: Mutex<HashMap<String, Arc<Placed>>>,
    by_iccid: Mutex<HashMap<String, (Arc<Placed>, Profile)>>,
    /// The ICCIDs it issues, in order.
    stock: IccidStock,
    /// Where `ORDER_STATUS` webhooks go (the notify URL of the account).
    notify_url: Mutex<Option<String>>,
    stats: Stats,
    http: reqwest::Client,
}

impl SupplierSim {
    pub(crate) fn new(
        access_code: &str,
        secret: &str,
        faults: Faults,
        rate_limit: u32,
    ) -> Arc<Self> {
        Arc::new(Self {
            access_code: access_code.to_owned(),
            secret: secret.to_owned(),
            faults: Mutex::new(faults),
            rate_limit: AtomicU32::new(rate_limit),
            window: Mutex::new((0, 0)),
            by_transaction: Mutex::default(),
            by_order_no: Mutex::default(),
            by_iccid: Mutex::default(),
            stock: IccidStock::new(),
            notify_url: Mutex::new(None),
            stats: Stats::default(),
            http: reqwest::Client::new(),
        })
    }

    /// Points the webhook at the service once its address is known.
    pub(crate) fn set_notify_url(&self, url: String) {
        *lock(&self.notify_url) = Some(url);
    }

    fn faults(&self) -> std::sync::MutexGuard<'_, Faults> {
        lock(&self.faults)
    }

    /// Counts a request in the current second; false past the limit.
    fn within_rate(&self) -> bool {
        let second = crate::limits::unix_now_seconds();
        let mut window = lock(&self.window);
        if window.0 != second {
            *window = (second, 0);
        }
        window.1 += 1;
        self.stats
            .busiest_second
            .fetch_max(window.1, Ordering::Relaxed);
        let limit = u64::from(self.rate_limit.load(Ordering::Relaxed));
        limit == 0 || window.1 <= limit
    }
}

/// Routes of the simulated supplier.
pub(crate) fn routes(sim: Arc<SupplierSim>) -> Router {
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
        .route("/sim/supplier/settings", post(set_settings))
        .route("/sim/supplier/stats", get(stats))
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

/// Body of `POST /sim/supplier/settings`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SimSettings {
    /// Requests per second accepted; 0 lifts the limit.
    rate_limit: u32,
}

async fn set_settings(
    State(sim): State<Arc<SupplierSim>>,
    Json(settings): Json<SimSettings>,
) -> Json<Value> {
    sim.rate_limit.store(settings.rate_limit, Ordering::Relaxed);
    Json(json!({ "rate_limit": settings.rate_limit }))
}

async fn stats(State(sim): State<Arc<SupplierSim>>) -> Json<Value> {
    let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
    Json(json!({
        "requests": read(&sim.stats.requests),
        "rate_limited": read(&sim.stats.rate_limited),
        "orders": read(&sim.stats.orders),
        "profiles": read(&sim.stats.profiles),
        "queries": read(&sim.stats.queries),
        "webhooks": read(&sim.stats.webhooks),
        "busiest_second": read(&sim.stats.busiest_second),
        "rate_limit": sim.rate_limit.load(Ordering::Relaxed),
    }))
}

/// Checks the signature, the clock and the rate, and applies injected
/// faults; `Err` is the answer to send.
fn admit(sim: &SupplierSim, headers: &HeaderMap, body: &[u8]) -> Result<Value, Box<Response>> {
    sim.stats.requests.fetch_add(1, Ordering::Relaxed);
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    if header("RT-AccessCode").is_empty() || header("RT-Signature").is_empty() {
        return Err(Box::new(answer_error("000101", "Missing mandatory header")));
    }
    let text = std::str::from_utf8(body).unwrap_or_default();
    let expected = sign(
        &sim.secret,
        &header("RT-Timestamp"),
        &header("RT-RequestID"),
        &sim.access_code,
        text,
    );
    // A wrong access code cannot sign as the account does.
    if header("RT-AccessCode") != sim.access_code || header("RT-Signature") != expected {
        return Err(Box::new(answer_error("101003", "Signature mismatch")));
    }
    let skew = header("RT-Timestamp")
        .parse::<u64>()
        .map(|t| t.abs_diff(crate::limits::unix_now_millis()));
    if skew.is_err() || skew.is_ok_and(|s| s > TIMESTAMP_TOLERANCE_MS) {
        return Err(Box::new(answer_error("101001", "Timestamp expired")));
    }
    if !sim.within_rate() {
        sim.stats.rate_limited.fetch_add(1, Ordering::Relaxed);
        // The documentation gives the limit but no code for going over it:
        // answered as HTTP does.
        return Err(Box::new(
            (
                StatusCode::TOO_MANY_REQUESTS,
                Json(json!({ "success": false, "errorCode": BUSY, "errorMsg": "Too many requests", "obj": null })),
            )
                .into_response(),
        ));
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
    serde_json::from_slice(body).map_err(|_| Box::new(answer_error("000104", "Invalid JSON")))
}

fn answer_error(code: &str, message: &str) -> Response {
    Json(json!({ "success": false, "errorCode": code, "errorMsg": message, "obj": null }))
        .into_response()
}

fn answer_ok(obj: Value) -> Response {
    Json(json!({ "success": true, "errorCode": "0", "errorMsg": null, "obj": obj })).into_response()
}

async fn order(State(sim): State<Arc<SupplierSim>>, headers: HeaderMap, body: Bytes) -> Response {
    let request = match admit(&sim, &headers, &body) {
        Ok(request) => request,
        Err(answer) => return *answer,
    };
    let Some(transaction_id) = request["transactionId"]
        .as_str()
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
    else {
        return answer_error("000105", "Mandatory params missing: transactionId");
    };
    let package = &request["packageInfoList"][0];
    let Some(package_code) = package["packageCode"].as_str().filter(|p| !p.is_empty()) else {
        return answer_error("000105", "Mandatory params missing: packageCode");
    };
    let count = package["count"].as_u64().unwrap_or(0);
    if !(1..=MAX_COUNT).contains(&count) {
        return answer_error("200008", "Order parameter error: count");
    }
    let existing = lock(&sim.by_transaction).get(&transaction_id).cloned();
    if let Some(placed) = existing {
        // A repeated transactionId is the same order.
        return answer_ok(json!({ "orderNo": placed.order_no, "transactionId": transaction_id }));
    }
    // Plans of the catalogue are the packages this supplier sells.
    if !package_code.starts_with("pl_") {
        return answer_error("310243", "package does not exist");
    }
    let (refusal, busy) = {
        let mut faults = sim.faults();
        let refusal = (faults.reject_next > 0).then(|| {
            faults.reject_next -= 1;
            faults
                .reject_code
                .clone()
                .unwrap_or_else(|| "200011".to_owned())
        });
        let busy = refusal.is_none() && faults.busy_next > 0;
        if busy {
            faults.busy_next -= 1;
        }
        (refusal, busy)
    };
    if let Some(code) = refusal {
        return answer_error(&code, refusal_message(&code));
    }
    let latency = Duration::from_millis(sim.faults().latency_ms);
    let placed = Arc::new(Placed {
        order_no: format!("B{}", &uuid::Uuid::new_v4().simple().to_string()[..16]),
        transaction_id: transaction_id.clone(),
        package_code: package_code.to_owned(),
        count: count as u32,
        first_serial: sim.stock.take(count as u32),
        ready_at: Instant::now() + latency,
    });
    lock(&sim.by_transaction).insert(transaction_id.clone(), placed.clone());
    lock(&sim.by_order_no).insert(placed.order_no.clone(), placed.clone());
    {
        let mut by_iccid = lock(&sim.by_iccid);
        for profile in placed.profiles() {
            by_iccid.insert(profile.iccid.clone(), (placed.clone(), profile));
        }
    }
    sim.stats.orders.fetch_add(1, Ordering::Relaxed);
    sim.stats.profiles.fetch_add(count, Ordering::Relaxed);
    tokio::spawn(notify_when_ready(sim.clone(), placed.clone(), latency));
    if busy {
        // The order was taken, but the answer says otherwise.
        return answer_error(BUSY, "System busy");
    }
    answer_ok(json!({ "orderNo": placed.order_no, "transactionId": transaction_id }))
}

fn refusal_message(code: &str) -> &'static str {
    match code {
        "200007" => "Insufficient balance",
        "310241" => "packageCode does not exist",
        "310243" => "package does not exist",
        "200011" => "Insufficient available profiles",
        _ => "Order parameter error",
    }
}

/// Sends `ORDER_STATUS`/`GOT_RESOURCE` to the notify URL once the order's
/// profiles are allocated.
async fn notify_when_ready(sim: Arc<SupplierSim>, placed: Arc<Placed>, latency: Duration) {
    tokio::time::sleep(latency).await;
    let Some(url) = lock(&sim.notify_url).clone() else {
        return;
    };
    let body = json!({
        "notifyType": "ORDER_STATUS",
        "content": { "orderNo": placed.order_no, "orderStatus": "GOT_RESOURCE" },
    });
    if sim.http.post(url).json(&body).send().await.is_ok() {
        sim.stats.webhooks.fetch_add(1, Ordering::Relaxed);
    }
}

/// One entry of `esimList`, with the documented fields.
fn esim_json(placed: &Placed, profile: &Profile) -> Value {
    json!({
        "esimTranNo": profile.esim_tran_no,
        "orderNo": placed.order_no,
        "transactionId": placed.transaction_id,
        "imsi": "",
        "iccid": profile.iccid,
        "smsStatus": 0,
        "msisdn": "",
        "ac": profile.activation_code,
        "qrCodeUrl": "",
        "shortUrl": "",
        "smdpStatus": "RELEASED",
        "eid": "",
        "activeType": 1,
        "dataType": 1,
        "activateTime": null,
        "expiredTime": null,
        "totalVolume": 3_u64 * 1024 * 1024 * 1024,
        "totalDuration": 30,
        "durationUnit": "DAY",
        "orderUsage": 0,
        "esimStatus": "GOT_RESOURCE",
        "pin": "",
        "puk": "",
        "apn": "",
        "packageList": [{ "packageName": placed.package_code, "packageCode": placed.package_code, "duration": 30, "volume": 3_u64 * 1024 * 1024 * 1024, "locationCode": "" }],
    })
}

async fn query(State(sim): State<Arc<SupplierSim>>, headers: HeaderMap, body: Bytes) -> Response {
    let request = match admit(&sim, &headers, &body) {
        Ok(request) => request,
        Err(answer) => return *answer,
    };
    sim.stats.queries.fetch_add(1, Ordering::Relaxed);
    let page_num = request["pager"]["pageNum"].as_u64().unwrap_or(0);
    let page_size = request["pager"]["pageSize"].as_u64().unwrap_or(0);
    if page_num < 1 || !(5..=500).contains(&page_size) {
        return answer_error("000107", "Invalid param length: pager");
    }
    let order_no = request["orderNo"].as_str().unwrap_or_default();
    let iccid = request["iccid"].as_str().unwrap_or_default();
    let entries: Vec<Value> = if !order_no.is_empty() {
        let placed = lock(&sim.by_order_no).get(order_no).cloned();
        let Some(placed) = placed else {
            return answer_error("310272", "orderNo does not exist");
        };
        if Instant::now() < placed.ready_at {
            return answer_error(
                ALLOCATING,
                "profiles are being allocated, please query later",
            );
        }
        placed
            .profiles()
            .iter()
            .map(|p| esim_json(&placed, p))
            .collect()
    } else if !iccid.is_empty() {
        match lock(&sim.by_iccid).get(iccid) {
            Some((placed, profile)) => vec![esim_json(placed, profile)],
            None => Vec::new(),
        }
    } else {
        return answer_error("000105", "Mandatory params missing: orderNo or iccid");
    };
    let total = entries.len();
    let skip = ((page_num - 1) * page_size) as usize;
    let page: Vec<Value> = entries
        .into_iter()
        .skip(skip)
        .take(page_size as usize)
        .collect();
    answer_ok(json!({
        "esimList": page,
        "pager": { "pageSize": page_size, "pageNum": page_num, "total": total },
    }))
}

async fn usage(State(sim): State<Arc<SupplierSim>>, headers: HeaderMap, body: Bytes) -> Response {
    let request = match admit(&sim, &headers, &body) {
        Ok(request) => request,
        Err(answer) => return *answer,
    };
    let Some(numbers) = request["esimTranNoList"].as_array() else {
        return answer_error("000105", "Mandatory params missing: esimTranNoList");
    };
    if numbers.is_empty() || numbers.len() > MAX_USAGE_LIST {
        return answer_error("000107", "Invalid param length: esimTranNoList (1 to 10)");
    }
    let rows: Vec<Value> = numbers
        .iter()
        .filter_map(Value::as_str)
        .map(|number| {
            // A stable made-up figure per profile: some megabytes used of 3 GB.
            let used = (number.bytes().map(u64::from).sum::<u64>() % 900) * 1024 * 1024;
            json!({
                "esimTranNo": number,
                "dataUsage": used,
                "totalData": 3_u64 * 1024 * 1024 * 1024,
                "lastUpdateTime": chrono::Utc::now().to_rfc3339(),
            })
        })
        .collect();
    answer_ok(json!({ "esimUsageList": rows }))
}
