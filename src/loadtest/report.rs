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

/// The answer of a rate-limit refusal, as counted in `responses`.
const RATE_LIMITED: &str = "429 rate_limit.exceeded";
/// The answer of a refusal at admission, as counted in `responses`.
const ADMISSION_REFUSED: &str = "502 supplier_error";

/// A warning when one refusal is more than half of the answers, naming what
/// lifts it: the run then measured the server's limits, not its speed. A
/// refusal at admission is expected under `--admission`. The verdict is
/// about money and does not change.
pub(super) fn dominant_refusal(
    responses: &BTreeMap<String, u64>,
    admission: bool,
    tier: &str,
) -> Option<String> {
    let total: u64 = responses.values().sum();
    let count = |label: &str| responses.get(label).copied().unwrap_or(0);
    let dominates = |n: u64| n > 0 && n.saturating_mul(2) > total;
    let share = |n: u64| (n as f64 * 100.0 / total.max(1) as f64).round();
    let rate_limited = count(RATE_LIMITED);
    if dominates(rate_limited) {
        return Some(format!(
            "{rate_limited} of {total} answers ({}%) were {RATE_LIMITED}: the run measured the \
             server's rate-limit bands, not its speed. Lift them with `esim-reseller serve \
             --profile loadtest`, or the ESIM__RATE_LIMIT__BANDS__<BAND>__<CLASS>__LIMIT \
             variables (the band of tier `{tier}`, e.g. \
             ESIM__RATE_LIMIT__BANDS__{}__WRITE__LIMIT=100000000)",
            share(rate_limited),
            tier.to_uppercase()
        ));
    }
    let refused = count(ADMISSION_REFUSED);
    if !admission && dominates(refused) {
        return Some(format!(
            "{refused} of {total} answers ({}%) were admission's {ADMISSION_REFUSED} refusals: \
             the run measured the supplier's limit or what this service settles in time, not \
             its speed. Lift the supplier's with `esim-reseller serve --profile loadtest`, or \
             ESIM__SUPPLIER__REQUESTS_PER_SECOND=0 (with ESIM__SIMULATORS__SUPPLIER_RATE_LIMIT=0), \
             the settling bound with ESIM__ADMISSION__ENABLED=false; or pass --admission to test \
             admission",
            share(refused)
        ));
    }
    None
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
    if let Some(warning) = report["warning"].as_str() {
        println!("WARNING             {warning}");
    }
    println!("{}", report["verdict"].as_str().unwrap_or("FAIL"));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answers(counts: &[(&str, u64)]) -> BTreeMap<String, u64> {
        counts.iter().map(|(k, n)| (k.to_string(), *n)).collect()
    }

    #[test]
    fn a_dominant_rate_limit_names_the_profile_and_the_variables() {
        let mostly_429 = answers(&[("202", 40), (RATE_LIMITED, 60)]);
        let warning = dominant_refusal(&mostly_429, false, "gold").expect("a warning");
        assert!(warning.contains("60 of 100 answers (60%)"), "{warning}");
        assert!(warning.contains("serve --profile loadtest"), "{warning}");
        assert!(
            warning.contains("ESIM__RATE_LIMIT__BANDS__GOLD__WRITE__LIMIT"),
            "{warning}"
        );
        assert!(dominant_refusal(&mostly_429, true, "gold").is_some());
    }

    #[test]
    fn half_or_less_is_not_dominant() {
        let half = answers(&[("202", 50), (RATE_LIMITED, 50)]);
        assert_eq!(dominant_refusal(&half, false, "gold"), None);
        assert_eq!(dominant_refusal(&answers(&[]), false, "gold"), None);
        let accepted = answers(&[("202", 1000)]);
        assert_eq!(dominant_refusal(&accepted, false, "gold"), None);
    }

    #[test]
    fn admission_refusals_warn_only_without_admission() {
        let refused = answers(&[("202", 10), (ADMISSION_REFUSED, 90)]);
        let warning = dominant_refusal(&refused, false, "gold").expect("a warning");
        assert!(
            warning.contains("ESIM__SUPPLIER__REQUESTS_PER_SECOND=0"),
            "{warning}"
        );
        assert!(warning.contains("serve --profile loadtest"), "{warning}");
        assert_eq!(dominant_refusal(&refused, true, "gold"), None);
    }
}
