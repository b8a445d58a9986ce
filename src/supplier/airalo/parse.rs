//! Reading Airalo's answers (recorded shapes: `tests/fixtures/airalo/`).
//! Numbers come as JSON numbers or as strings (`"quantity": "1"`, `"price":
//! "9.50"` in the order list), so every number is read both ways.

use std::time::Duration;

use serde_json::Value;

use crate::{
    domain::esim,
    supplier::{Placed, Profile, SupplierError, Usage},
};

/// A number written as a JSON number or as a string.
pub(crate) fn number(value: &Value) -> Option<f64> {
    match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// `data.access_token` and `data.expires_in` of a token answer.
pub(crate) fn read_token(answer: &Value) -> Result<(String, Duration), SupplierError> {
    let token = answer["data"]["access_token"]
        .as_str()
        .filter(|t| !t.is_empty())
        .ok_or_else(|| SupplierError::Transient("/token: no access_token in the answer".into()))?;
    let seconds = number(&answer["data"]["expires_in"])
        .filter(|s| *s > 0.0)
        .ok_or_else(|| SupplierError::Transient("/token: no expires_in in the answer".into()))?;
    let lifetime = Duration::try_from_secs_f64(seconds).unwrap_or(Duration::MAX);
    Ok((token.to_owned(), lifetime))
}

/// The wholesale price of one unit in US cents, rounded up, from an order's
/// `net_price` (USD). The documentation calls `net_price` "the wholesale
/// price that you will be charged"; a package's `net_price` is per eSIM and
/// every documented order (all of quantity 1) repeats it, so it is read as
/// the price of one unit (see the fixtures' README: not confirmed for a
/// quantity above 1).
pub(crate) fn unit_cost_cents(order: &Value) -> Option<i64> {
    let usd = number(&order["net_price"]).filter(|p| p.is_finite() && *p >= 0.0)?;
    // Round up to the cent, ignoring float noise below a thousandth of one.
    Some(((usd * 100.0) - 0.001).ceil().max(0.0) as i64)
}

/// The Airalo order id of an order object, as a string.
pub(crate) fn order_id(order: &Value) -> Option<String> {
    match &order["id"] {
        Value::Number(n) => Some(n.to_string()),
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        _ => None,
    }
}

/// `Placed` of an order object (`data` of a submit or get answer, or one
/// entry of the order list).
pub(crate) fn read_placed(path: &str, order: &Value) -> Result<Placed, SupplierError> {
    let order_no = order_id(order)
        .ok_or_else(|| SupplierError::Transient(format!("{path}: no order id in the answer")))?;
    Ok(Placed {
        order_no,
        unit_cost_cents: unit_cost_cents(order),
        profiles: read_profiles(order),
    })
}

/// The profiles of an order object's `sims`. `qrcode` already is the
/// activation code (`LPA:1$<lpa>$<matching_id>`); when it is missing the
/// code is built from `lpa` and `matching_id`. A sim with neither is not
/// usable yet and is left out.
pub(crate) fn read_profiles(order: &Value) -> Vec<Profile> {
    let Some(sims) = order["sims"].as_array() else {
        return Vec::new();
    };
    sims.iter()
        .filter_map(|sim| {
            let iccid = sim["iccid"].as_str().filter(|s| !s.is_empty())?;
            let activation_code = match sim["qrcode"].as_str() {
                Some(code) if code.starts_with("LPA:1$") => code.to_owned(),
                _ => {
                    let lpa = sim["lpa"].as_str().filter(|s| !s.is_empty())?;
                    let matching = sim["matching_id"].as_str().filter(|s| !s.is_empty())?;
                    esim::activation_code(lpa, matching)
                }
            };
            Some(Profile {
                iccid: iccid.to_owned(),
                activation_code,
                esim_tran_no: None,
            })
        })
        .collect()
}

/// One page of the order list: the orders whose `description` is exactly
/// `description` (the filter is a `LIKE '%…%'` search) and are not failed
/// or refunded, and whether more pages follow.
pub(crate) fn read_order_page(
    answer: &Value,
    description: &str,
) -> Result<(Vec<Placed>, bool), SupplierError> {
    let orders = answer["data"]
        .as_array()
        .ok_or_else(|| SupplierError::Transient("/orders: no order list in the answer".into()))?;
    let mut found = Vec::new();
    for order in orders {
        let failed = matches!(
            order["status"]["slug"].as_str(),
            Some("failed" | "refunded")
        );
        if order["description"].as_str() == Some(description) && !failed {
            found.push(read_placed("/orders", order)?);
        }
    }
    let meta = &answer["meta"];
    let more = match (number(&meta["current_page"]), number(&meta["last_page"])) {
        (Some(current), Some(last)) => current < last,
        _ => answer["links"]["next"].is_string(),
    };
    Ok((found, more))
}

/// The usage in a usage answer's `data` (megabytes). For an unlimited
/// package `remaining` and `total` "default to 0 and should be ignored":
/// nothing is known, so both are 0.
pub(crate) fn read_usage(answer: &Value) -> Result<Usage, SupplierError> {
    let data = &answer["data"];
    if data["is_unlimited"] == Value::Bool(true) {
        return Ok(Usage {
            data_used_mb: 0,
            data_total_mb: 0,
        });
    }
    match (number(&data["total"]), number(&data["remaining"])) {
        (Some(total), Some(remaining)) => {
            let total = total.round() as i64;
            let remaining = remaining.round() as i64;
            Ok(Usage {
                data_used_mb: (total - remaining).max(0),
                data_total_mb: total.max(0),
            })
        }
        _ => Err(SupplierError::Transient(
            "/sims/usage: malformed answer".into(),
        )),
    }
}
