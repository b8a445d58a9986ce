//! Submit order and Submit order async, and the async order's webhook.

use std::{
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use axum::{
    Json,
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode, header::CONTENT_TYPE},
    response::{IntoResponse, Response},
};
use serde_json::{Map, Value, json};

use super::{
    AiraloSim,
    api::{authorized, coded, invalid, params, take_loss, take_rejection, text},
    lock,
    orders::{Package, SIM_SMDP, SimOrder, TEST_INSUFFICIENT_BALANCE, TEST_OUT_OF_STOCK},
};
use crate::supplier::sandbox::profiles_from_stock;

/// Most eSIMs one order may carry ("Maximum of 50").
const MAX_QUANTITY: i64 = 50;
/// Deliveries of one webhook before giving up.
const WEBHOOK_ATTEMPTS: u32 = 5;
/// Wait before the second delivery, doubled before each next one.
const WEBHOOK_RETRY: Duration = Duration::from_millis(200);

/// A valid order request.
struct OrderRequest {
    /// What is ordered.
    package: Package,
    /// How many eSIMs.
    quantity: u32,
    /// The partner's description.
    description: Option<String>,
    /// Where an async order's webhook goes, when given.
    webhook_url: Option<String>,
}

/// Validates an order's fields as the documentation's 422 answers do.
fn order_request(params: &Map<String, Value>) -> Result<OrderRequest, Box<Response>> {
    let mut errors = Vec::new();
    let package_id = text(params, "package_id");
    if package_id.is_none() {
        errors.push(("package_id", "The package id field is required.".to_owned()));
    }
    let quantity = match text(params, "quantity").map(|q| q.parse::<i64>()) {
        None => Err("The quantity field is required."),
        Some(Err(_)) => Err("The quantity must be an integer."),
        Some(Ok(n)) if n < 1 => Err("The quantity must be at least 1."),
        Some(Ok(n)) if n > MAX_QUANTITY => Err("The quantity may not be greater than 50."),
        Some(Ok(n)) => Ok(n as u32),
    };
    if let Err(message) = quantity {
        errors.push(("quantity", message.to_owned()));
    }
    if text(params, "type").is_some_and(|t| t != "sim") {
        errors.push(("type", "The selected type is invalid.".to_owned()));
    }
    let description = params.get("description").cloned().unwrap_or(Value::Null);
    if !(description.is_string() || description.is_null()) {
        errors.push((
            "description",
            "The description must be a string.".to_owned(),
        ));
    }
    let webhook_url = text(params, "webhook_url");
    if webhook_url
        .as_deref()
        .is_some_and(|u| !(u.starts_with("http://") || u.starts_with("https://")))
    {
        errors.push((
            "webhook_url",
            "The webhook url format is invalid.".to_owned(),
        ));
    }
    if !errors.is_empty() {
        return Err(Box::new(invalid(errors)));
    }
    let package = match package_id.as_deref().unwrap_or_default() {
        TEST_INSUFFICIENT_BALANCE => return Err(Box::new(coded(11))),
        TEST_OUT_OF_STOCK => return Err(Box::new(coded(33))),
        id => Package::parse(id).ok_or_else(|| Box::new(coded(34)))?,
    };
    Ok(OrderRequest {
        package,
        quantity: quantity.unwrap_or(1),
        description: description.as_str().map(str::to_owned),
        webhook_url,
    })
}

impl AiraloSim {
    /// Takes an order: it is recorded and listed from now on.
    fn take(&self, request: OrderRequest) -> Arc<SimOrder> {
        let mut profiles = profiles_from_stock(
            &uuid::Uuid::new_v4().to_string(),
            self.stock.take(request.quantity),
            request.quantity,
            SIM_SMDP,
        );
        for profile in &mut profiles {
            profile.esim_tran_no = None;
        }
        let order = Arc::new(SimOrder {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            created_at: chrono::Utc::now(),
            package: request.package,
            quantity: request.quantity,
            description: request.description,
            profiles,
        });
        lock(&self.orders).push(order.clone());
        let mut by_iccid = lock(&self.by_iccid);
        for profile in &order.profiles {
            by_iccid.insert(profile.iccid.clone(), order.clone());
        }
        self.stats.orders.fetch_add(1, Ordering::Relaxed);
        self.stats
            .units
            .fetch_add(u64::from(order.quantity), Ordering::Relaxed);
        let key = order.description.clone().unwrap_or_default();
        *lock(&self.stats.per_description).entry(key).or_insert(0) += 1;
        order
    }
}

pub(super) async fn order(
    State(sim): State<Arc<AiraloSim>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(answer) = authorized(&sim, &headers) {
        return *answer;
    }
    let request = match order_request(&params(&headers, &body)) {
        Ok(request) => request,
        Err(answer) => return *answer,
    };
    if let Some(code) = take_rejection(&sim) {
        return coded(code);
    }
    let latency = Duration::from_millis(sim.faults().latency_ms);
    tokio::time::sleep(latency).await;
    let lost = take_loss(&sim);
    let order = sim.take(request);
    if let Some(hold) = lost {
        // Taken, but the answer comes after the caller stopped waiting.
        tokio::time::sleep(hold).await;
    }
    Json(json!({ "data": order.json(true, false), "meta": { "message": "success" } }))
        .into_response()
}

pub(super) async fn order_async(
    State(sim): State<Arc<AiraloSim>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(answer) = authorized(&sim, &headers) {
        return *answer;
    }
    let request = match order_request(&params(&headers, &body)) {
        Ok(request) => request,
        Err(answer) => return *answer,
    };
    let url = request
        .webhook_url
        .clone()
        .or_else(|| lock(&sim.webhook_url).clone());
    let Some(url) = url else {
        return (
            StatusCode::UNPROCESSABLE_ENTITY,
            Json(json!({ "reason": "User is not opted in and no webhook URL provided." })),
        )
            .into_response();
    };
    if let Some(code) = take_rejection(&sim) {
        return coded(code);
    }
    let request_id: String = rand::Rng::sample_iter(rand::rng(), &rand::distr::Alphanumeric)
        .take(25)
        .map(char::from)
        .collect();
    let lost = take_loss(&sim);
    tokio::spawn(complete_async(
        sim.clone(),
        request,
        request_id.clone(),
        url,
    ));
    if let Some(hold) = lost {
        tokio::time::sleep(hold).await;
    }
    let accepted_at = chrono::Utc::now().format("%Y-%m-%d %H:%M:%S").to_string();
    (
        StatusCode::ACCEPTED,
        Json(json!({
            "data": { "request_id": request_id, "accepted_at": accepted_at },
            "meta": { "message": "success" },
        })),
    )
        .into_response()
}

/// Takes an async order after the latency and delivers it to `url`.
async fn complete_async(
    sim: Arc<AiraloSim>,
    request: OrderRequest,
    request_id: String,
    url: String,
) {
    let latency = Duration::from_millis(sim.faults().latency_ms);
    tokio::time::sleep(latency).await;
    let order = sim.take(request);
    let body = json!({
        "request_id": request_id,
        "data": order.json(true, false),
        "meta": { "message": "success" },
    });
    deliver(&sim, &url, &body).await;
}

/// POSTs a webhook signed as Airalo signs it (hex HMAC-SHA512 of the body,
/// keyed with the client secret; the body as PHP's `json_encode` writes
/// it, `/` as `\/`), again after a non-2xx answer.
async fn deliver(sim: &AiraloSim, url: &str, body: &Value) {
    use hmac::Mac;
    let text = body.to_string().replace('/', "\\/");
    let signature = match hmac::Hmac::<sha2::Sha512>::new_from_slice(sim.client_secret.as_bytes()) {
        Ok(mut mac) => {
            mac.update(text.as_bytes());
            hex::encode(mac.finalize().into_bytes())
        }
        Err(_) => return,
    };
    let mut wait = WEBHOOK_RETRY;
    for attempt in 1..=WEBHOOK_ATTEMPTS {
        sim.stats.webhook_attempts.fetch_add(1, Ordering::Relaxed);
        let sent = sim
            .http
            .post(url)
            .header(CONTENT_TYPE, "application/json")
            .header("airalo-signature", &signature)
            .body(text.clone())
            .send()
            .await;
        if sent.is_ok_and(|r| r.status().is_success()) {
            sim.stats.webhooks_sent.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if attempt < WEBHOOK_ATTEMPTS {
            tokio::time::sleep(wait).await;
            wait *= 2;
        }
    }
    tracing::warn!(url, "simulated Airalo webhook not delivered");
}
