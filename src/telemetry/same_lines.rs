//! The service's log formats against tracing-subscriber's own: the same
//! spans and events, every kind of field and the awkward ones, must come out
//! the same, byte for byte but for the time they were written.

use std::{
    io,
    sync::{Arc, Mutex},
};

use chrono::DateTime;
use tracing::Subscriber;
use tracing_subscriber::{filter::LevelFilter, fmt, fmt::MakeWriter, prelude::*};

use super::{json_layer, plain_layer};

/// An output that keeps what it is given.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// Everything written so far.
    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

/// A line's time (27 characters: the first thing the pretty format writes
/// and the first value the JSON format does) and the line without it.
fn split_time(line: &str) -> (&str, String) {
    let at = if line.starts_with('{') {
        "{\"timestamp\":\"".len()
    } else {
        0
    };
    let time = &line[at..at + 27];
    (time, format!("{}{}", &line[..at], &line[at + 27..]))
}

impl MakeWriter<'_> for Captured {
    type Writer = Captured;

    fn make_writer(&self) -> Captured {
        self.clone()
    }
}

/// tracing-subscriber's own `pretty` format without colours, as the service
/// would configure it.
fn stock_pretty(out: &Captured) -> impl Subscriber + Send + Sync {
    tracing_subscriber::registry()
        .with(LevelFilter::TRACE)
        .with(
            fmt::layer()
                .with_target(false)
                .with_ansi(false)
                .with_writer(out.clone()),
        )
}

/// The service's `pretty` format without colours, its own layer.
fn our_pretty(out: &Captured) -> impl Subscriber + Send + Sync {
    tracing_subscriber::registry()
        .with(LevelFilter::TRACE)
        .with(plain_layer(out.clone()))
}

/// tracing-subscriber's own flattened `json` format, as the service would
/// configure it.
fn stock_json(out: &Captured) -> impl Subscriber + Send + Sync {
    tracing_subscriber::registry()
        .with(LevelFilter::TRACE)
        .with(
            fmt::layer()
                .json()
                .flatten_event(true)
                .with_current_span(true)
                .with_span_list(true)
                .with_writer(out.clone()),
        )
}

/// The service's `json` format, its own layer.
fn our_json(out: &Captured) -> impl Subscriber + Send + Sync {
    tracing_subscriber::registry()
        .with(LevelFilter::TRACE)
        .with(json_layer(out.clone()))
}

/// An error with a source, as the formats list them.
#[derive(Debug)]
struct Refused(io::Error);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("supplier refused \u{1b}[1m")
    }
}

impl std::error::Error for Refused {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// Every kind of field and span the service logs, and the awkward ones.
fn log_everything() {
    let request = tracing::info_span!(
        "request",
        request_id = %"r_0a1b2c",
        method = %"GET",
        route = %"/partner/v1/balance",
        operator = tracing::field::Empty,
        operator_id = tracing::field::Empty,
    );
    let entered = request.enter();
    tracing::info!(status = 200u16, latency_ms = 0.125, "request finished");
    request.record("operator_id", "op_1");
    request.record("operator", tracing::field::display("Fay \"Costa\""));
    let inner = tracing::warn_span!(
        "operator",
        role = "admin",
        r#type = 3,
        bytes = &b"\x01\xff"[..],
        nan = f64::NAN,
        z = 1.5,
        a = -2i64,
        flag = false,
        log.skipped = 1,
    );
    inner.in_scope(|| {
        tracing::warn!(
            reason = ?Some("x"), count = 3u64, delta = -4i64, ok = true,
            tiny = 1e-7, huge = 1e17, whole = 2.0, inf = f64::INFINITY, "operator refused: role"
        );
        let error = Refused(io::Error::other("busy \u{7}"));
        tracing::error!(error = &error as &dyn std::error::Error, "with a source");
        tracing::debug!(message = "explicit \u{1b}[31m message", r#type = "kind");
        tracing::trace!("escapes \u{1b}[2J \u{9b} \u{7}\u{8}\u{c}\u{7f} done é \u{0} \u{1f}");
        tracing::info!(name = "quoted \"value\"\n\u{1b}\\ \t\r", partner_id = %"p_1");
        tracing::info!(log.target = "skipped", after = 1, "a log crate field");
        tracing::info!(only = 1);
        tracing::info!(parent: None, "no parent, inside the same spans");
    });
    drop(entered);
    let bare = tracing::info_span!("bare");
    bare.in_scope(|| tracing::info!("inside a span without fields"));
    tracing::info!(parent: &request, "a parent named, no span entered");
    tracing::info!("outside any span");
    tracing::info!(message = %"a message given as a field", status = 500u16);
    tracing_log::format_trace(
        &log::Record::builder()
            .args(format_args!("from a crate that logs with log"))
            .level(log::Level::Warn)
            .target("a_dependency::pool")
            .module_path_static(Some("a_dependency::pool"))
            .line(Some(7))
            .build(),
    )
    .unwrap();
}

/// The lines a subscriber wrote for [`log_everything`].
fn lines_of(subscriber: impl Subscriber + Send + Sync, out: &Captured) -> Vec<String> {
    tracing::subscriber::with_default(subscriber, log_everything);
    out.text().lines().map(str::to_owned).collect()
}

/// Both formats' lines, the time cut off each; the time itself must parse
/// as RFC 3339.
fn compared(stock: Vec<String>, ours: Vec<String>) -> Vec<(String, String)> {
    assert_eq!(stock.len(), 14, "{stock:#?}");
    assert_eq!(ours.len(), stock.len(), "{ours:#?}");
    let cut = |line: &String| {
        let (time, rest) = split_time(line);
        assert!(DateTime::parse_from_rfc3339(time).is_ok(), "{line}");
        rest
    };
    stock.iter().map(cut).zip(ours.iter().map(cut)).collect()
}

#[test]
fn pretty_lines_without_colours_match_the_stock_format_byte_for_byte() {
    let (stock_out, plain_out) = (Captured::default(), Captured::default());
    let lines = compared(
        lines_of(stock_pretty(&stock_out), &stock_out),
        lines_of(our_pretty(&plain_out), &plain_out),
    );
    for (stock, plain) in &lines {
        assert_eq!(plain, stock);
    }
    assert_eq!(
        lines[0].1,
        "  INFO request{request_id=r_0a1b2c method=GET route=/partner/v1/balance}: \
         request finished status=200 latency_ms=0.125"
    );
}

#[test]
fn json_lines_match_the_stock_format_byte_for_byte() {
    let (stock_out, json_out) = (Captured::default(), Captured::default());
    let lines = compared(
        lines_of(stock_json(&stock_out), &stock_out),
        lines_of(our_json(&json_out), &json_out),
    );
    for (stock, json) in &lines {
        assert_eq!(json, stock);
        let _valid: serde_json::Value = serde_json::from_str(json).unwrap();
    }
    assert_eq!(
        lines[0].1,
        "{\"timestamp\":\"\",\"level\":\"INFO\",\"message\":\"request finished\",\
         \"status\":200,\"latency_ms\":0.125,\"target\":\"esim_reseller::telemetry::same_lines\",\
         \"span\":{\"method\":\"GET\",\"request_id\":\"r_0a1b2c\",\"route\":\"/partner/v1/balance\",\
         \"name\":\"request\"},\"spans\":[{\"method\":\"GET\",\"request_id\":\"r_0a1b2c\",\
         \"route\":\"/partner/v1/balance\",\"name\":\"request\"}]}"
    );
}

/// Logs one span and one event whose values are given, through a
/// subscriber, and returns the line without its time.
fn one_line(subscriber: impl Subscriber + Send + Sync, out: &Captured, values: &Values) -> String {
    tracing::subscriber::with_default(subscriber, || {
        let span =
            tracing::info_span!("request", id = %values.display, text = values.text.as_str());
        span.in_scope(|| {
            tracing::info!(
                text = values.text.as_str(), number = values.number, count = values.count,
                shown = %values.display, debugged = ?values.text, "{}", values.message
            );
        });
    });
    split_time(&out.text()).1
}

/// The values [`one_line`] logs.
#[derive(Debug)]
struct Values {
    /// A string field, and the span's.
    text: String,
    /// A float field.
    number: f64,
    /// A signed field.
    count: i64,
    /// A `Display` field, and the span's.
    display: String,
    /// The message.
    message: String,
}

/// Any text, and often text made of what formats escape: ASCII and its
/// control characters, the C1 range, quotes, backslashes, a few wide chars.
fn text() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    prop_oneof![any::<String>(), "[\\x00-\\x{a0}é€😀]{0,24}"]
}

/// Any values at all: such text, every float (NaN and the infinities too).
fn values() -> impl proptest::strategy::Strategy<Value = Values> {
    use proptest::prelude::*;
    (text(), any::<f64>(), any::<i64>(), text(), text()).prop_map(
        |(text, number, count, display, message)| Values {
            text,
            number,
            count,
            display,
            message,
        },
    )
}

proptest::proptest! {
    #[test]
    fn any_values_come_out_as_the_stock_formats_write_them(values in values()) {
        let (stock_out, ours_out) = (Captured::default(), Captured::default());
        proptest::prop_assert_eq!(
            one_line(our_pretty(&ours_out), &ours_out, &values),
            one_line(stock_pretty(&stock_out), &stock_out, &values)
        );
        let (stock_out, ours_out) = (Captured::default(), Captured::default());
        proptest::prop_assert_eq!(
            one_line(our_json(&ours_out), &ours_out, &values),
            one_line(stock_json(&stock_out), &stock_out, &values)
        );
    }
}
