//! The run's report: latencies in milliseconds, the admission figures, and
//! the text printed at the end.

use super::*;

pub(super) fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

pub(super) fn ms(us: u64) -> f64 {
    round2(us as f64 / 1000.0)
}

/// Refusals at admission: how many, how fast, with `Retry-After`.
pub(super) fn admission_report(observed: &Observed) -> Value {
    let latency = &observed.refusal_latency_us;
    json!({
        "refusals": observed.refusals,
        "refusals_without_retry_after": observed.refusals_without_retry_after,
        "refusal_latency_ms": {
            "p50": ms(latency.value_at_quantile(0.50)),
            "p99": ms(latency.value_at_quantile(0.99)),
            "max": ms(latency.max()),
        },
    })
}

pub(super) fn print_text(report: &Value) {
    println!(
        "partners            {} {}",
        report["partners"],
        if report["hot"] == true {
            "(one hot)"
        } else {
            ""
        }
    );
    println!("requests            {}", report["requests"]);
    println!("requests/s          {}", report["requests_per_second"]);
    println!("accepted orders     {}", report["accepted_orders"]);
    println!("accepted/s          {}", report["accepted_per_second"]);
    println!("settled/s           {}", report["settled_per_second"]);
    let l = &report["latency_ms"];
    println!(
        "latency ms          p50 {}  p90 {}  p99 {}  p99.9 {}  max {}",
        l["p50"], l["p90"], l["p99"], l["p99.9"], l["max"]
    );
    println!("responses           {}", report["responses"]);
    let admission = &report["admission"];
    if admission["refusals"].as_u64().unwrap_or(0) > 0 {
        let l = &admission["refusal_latency_ms"];
        println!(
            "refused at admission {} (p50 {} ms, p99 {} ms, {} without Retry-After)",
            admission["refusals"], l["p50"], l["p99"], admission["refusals_without_retry_after"]
        );
    }
    let shares = &report["invariants"]["shares"];
    if !shares.is_null() {
        println!(
            "accepted units      mean {} per partner, least {}, most {} (worst {}% from the mean)",
            shares["mean_units"],
            shares["least_units"],
            shares["most_units"],
            (shares["worst_deviation"].as_f64().unwrap_or(0.0) * 100.0).round()
        );
    }
    if let Some(by_url) = report["requests_by_url"].as_object()
        && by_url.len() > 1
    {
        for (url, sent) in by_url {
            println!("requests to         {url} {sent}");
        }
    }
    if report["transport_errors"] != 0 {
        println!("transport errors    {}", report["transport_errors"]);
    }
    for failure in report["invariants"]["failures"]
        .as_array()
        .into_iter()
        .flatten()
    {
        println!(
            "violation           {}",
            failure.as_str().unwrap_or_default()
        );
    }
    println!("{}", report["verdict"].as_str().unwrap_or("FAIL"));
}
