//! The per-request series ([`HTTP_REQUESTS`], [`HTTP_REQUEST_DURATION`]),
//! recorded by the envelope as each request finishes.
//!
//! The series are few (listeners x route templates x methods x statuses)
//! and every request lands in one of them, so their handles are registered
//! once and kept: a request then costs two atomic updates, where recording
//! through the macros built four label strings and looked the key up in the
//! recorder's registry twice, on every request. Their maps hash with
//! foldhash rather than the standard library's SipHash: every key is one of
//! the service's own names, never a caller's text.

use std::{
    sync::{LazyLock, Mutex},
    time::Duration,
};

use foldhash::HashMap;
use metrics::{Counter, Histogram, counter, histogram};

use super::{HTTP_REQUEST_DURATION, HTTP_REQUESTS, is_installed};
use crate::sync::lock;

/// What labels a request's series, but its route template.
type Labels = (&'static str, &'static str, u16);

/// The two handles of one series.
#[derive(Clone)]
struct Series {
    /// Requests answered.
    requests: Counter,
    /// Seconds from arrival to answer.
    duration: Histogram,
}

/// A listener's, method's and status's series, by route template (looked
/// up by `&str`, without allocating).
type ByRoute = HashMap<Box<str>, Series>;

/// Registered series.
static SERIES: LazyLock<Mutex<HashMap<Labels, ByRoute>>> = LazyLock::new(Mutex::default);

/// Records one finished request of `listener` that matched `route` (a
/// template, or `unmatched`), answered `status` after `elapsed`.
pub(crate) fn request_finished(
    listener: &'static str,
    route: &str,
    method: &'static str,
    status: u16,
    elapsed: Duration,
) {
    let series = series(listener, route, method, status);
    series.requests.increment(1);
    series.duration.record(elapsed.as_secs_f64());
}

/// The handles of a series, registered on first use. Before the process's
/// recorder is installed nothing is kept: a handle registered then would
/// record nowhere for good.
fn series(listener: &'static str, route: &str, method: &'static str, status: u16) -> Series {
    if !is_installed() {
        return register(listener, route, method, status);
    }
    let mut known = lock(&SERIES);
    let by_route = known.entry((listener, method, status)).or_default();
    if let Some(series) = by_route.get(route) {
        return series.clone();
    }
    let series = register(listener, route, method, status);
    by_route.insert(route.into(), series.clone());
    series
}

/// Registers a series with the recorder installed now.
fn register(listener: &'static str, route: &str, method: &'static str, status: u16) -> Series {
    let labels = [
        ("listener", listener.to_owned()),
        ("route", route.to_owned()),
        ("method", method.to_owned()),
        ("status", status.to_string()),
    ];
    Series {
        requests: counter!(HTTP_REQUESTS, &labels),
        duration: histogram!(HTTP_REQUEST_DURATION, &labels),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_series_is_registered_once_and_counts_every_request() {
        let handle = crate::metrics::install();
        for _ in 0..3 {
            request_finished(
                "test-listener",
                "/a/{id}",
                "GET",
                204,
                Duration::from_millis(2),
            );
        }
        request_finished(
            "test-listener",
            "/a/{id}",
            "GET",
            404,
            Duration::from_millis(1),
        );
        let text = handle.render();
        let line = |status: &str| {
            text.lines()
                .find(|l| {
                    l.starts_with(HTTP_REQUESTS)
                        && l.contains("listener=\"test-listener\"")
                        && l.contains(&format!("status=\"{status}\""))
                })
                .map(str::to_owned)
        };
        assert!(line("204").is_some_and(|l| l.ends_with(" 3")), "{text}");
        assert!(line("404").is_some_and(|l| l.ends_with(" 1")), "{text}");
        let known = lock(&SERIES);
        assert_eq!(known[&("test-listener", "GET", 204)].len(), 1);
    }
}
