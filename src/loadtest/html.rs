//! `loadtest --report FILE.html`: the run on one page that opens offline.
//! Throughput and latency percentiles second by second, a latency
//! histogram, the invariant verdict and the settings of the run, drawn as
//! inline SVG (no script, nothing fetched).

use std::fmt::Write;

use hdrhistogram::Histogram;
use serde_json::Value;

/// What one second of the drive saw.
#[derive(Debug, Clone)]
pub(super) struct Second {
    /// Answers received in this second.
    pub(super) answers: u64,
    /// Of which accepted orders (202) or successful reads (200).
    pub(super) successes: u64,
    /// Latency of those answers, in microseconds.
    pub(super) latency_us: Histogram<u64>,
}

impl Second {
    pub(super) fn new() -> Self {
        Self {
            answers: 0,
            successes: 0,
            // An auto-resizing histogram of three significant figures:
            // `Histogram::new` fails only for a precision above five.
            latency_us: Histogram::new(3).unwrap_or_else(|_| unreachable!("precision 3 is valid")),
        }
    }
}

const WIDTH: f64 = 860.0;
const HEIGHT: f64 = 260.0;
const LEFT: f64 = 64.0;
const BOTTOM: f64 = 34.0;
const TOP: f64 = 16.0;
const RIGHT: f64 = 16.0;
const COLOURS: [&str; 4] = ["#1f77b4", "#ff7f0e", "#d62728", "#2ca02c"];

/// One named series of points `(x, y)`.
struct Series<'a> {
    name: &'a str,
    points: Vec<(f64, f64)>,
}

/// The whole page.
pub(super) fn render(
    report: &Value,
    settings: &Value,
    seconds: &[Second],
    latency: &Histogram<u64>,
) -> String {
    let verdict = report["verdict"].as_str().unwrap_or("FAIL");
    let mut page = String::new();
    let _ = write!(
        page,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Load test: {verdict}</title>\
         <style>body{{font:14px/1.45 system-ui,sans-serif;max-width:62rem;margin:1.5rem auto;padding:0 1rem;color:#222}}\
         .verdict{{font-size:1.6rem;font-weight:700;padding:.4rem .8rem;display:inline-block;border-radius:4px;color:#fff}}\
         .PASS{{background:#2a7d2a}}.FAIL{{background:#b22}}table{{border-collapse:collapse;margin:.5rem 0}}\
         td,th{{border:1px solid #ddd;padding:.2rem .5rem;text-align:left}}svg{{background:#fcfcfc;border:1px solid #eee}}\
         .legend span{{margin-right:1rem}}.warning{{background:#fff4d6;border-left:4px solid #e0a000;padding:.5rem .8rem}}</style></head><body>\
         <h1>Load test</h1><p><span class=\"verdict {verdict}\">{verdict}</span></p>"
    );
    if let Some(warning) = report["warning"].as_str() {
        let _ = write!(
            page,
            "<p class=\"warning\"><strong>Warning:</strong> {}</p>",
            escape(warning)
        );
    }
    summary(&mut page, report);
    failures(&mut page, report);
    page.push_str("<h2>Throughput</h2>");
    page.push_str(&chart(
        &throughput_series(seconds),
        "second of the drive",
        "answers / s",
        false,
    ));
    page.push_str("<h2>Latency over the run</h2>");
    page.push_str(&chart(
        &latency_series(seconds),
        "second of the drive",
        "ms (log scale)",
        true,
    ));
    page.push_str("<h2>Latency histogram</h2>");
    page.push_str(&histogram_chart(latency));
    page.push_str("<h2>Settings</h2>");
    table(&mut page, settings);
    page.push_str("<h2>Answers</h2>");
    table(&mut page, &report["responses"]);
    page.push_str("</body></html>");
    page
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn shown(value: &Value) -> String {
    escape(
        &value
            .as_str()
            .map_or_else(|| value.to_string(), str::to_owned),
    )
}

fn summary(page: &mut String, report: &Value) {
    let latency = &report["latency_ms"];
    let rows = [
        ("requests", shown(&report["requests"])),
        ("requests / s", shown(&report["requests_per_second"])),
        ("accepted orders", shown(&report["accepted_orders"])),
        ("accepted / s", shown(&report["accepted_per_second"])),
        ("settled / s", shown(&report["settled_per_second"])),
        (
            "latency ms",
            format!(
                "p50 {} · p90 {} · p99 {} · p99.9 {} · max {}",
                shown(&latency["p50"]),
                shown(&latency["p90"]),
                shown(&latency["p99"]),
                shown(&latency["p99.9"]),
                shown(&latency["max"])
            ),
        ),
        ("transport errors", shown(&report["transport_errors"])),
    ];
    page.push_str("<table>");
    for (name, value) in rows {
        let _ = write!(page, "<tr><th>{name}</th><td>{value}</td></tr>");
    }
    page.push_str("</table>");
}

fn failures(page: &mut String, report: &Value) {
    let failures: Vec<&Value> = report["invariants"]["failures"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    page.push_str("<h2>Invariants</h2>");
    if failures.is_empty() {
        page.push_str("<p>Every check held: no cent lost or doubled, one order per key, every order settled.</p>");
        return;
    }
    page.push_str("<ul>");
    for failure in failures {
        let _ = write!(page, "<li>{}</li>", shown(failure));
    }
    page.push_str("</ul>");
}

fn table(page: &mut String, values: &Value) {
    page.push_str("<table>");
    for (name, value) in values.as_object().into_iter().flatten() {
        let _ = write!(
            page,
            "<tr><th>{}</th><td>{}</td></tr>",
            escape(name),
            shown(value)
        );
    }
    page.push_str("</table>");
}

fn throughput_series(seconds: &[Second]) -> Vec<Series<'static>> {
    let at = |i: usize| i as f64 + 0.5;
    vec![
        Series {
            name: "answers",
            points: seconds
                .iter()
                .enumerate()
                .map(|(i, s)| (at(i), s.answers as f64))
                .collect(),
        },
        Series {
            name: "successes (202 / 200)",
            points: seconds
                .iter()
                .enumerate()
                .map(|(i, s)| (at(i), s.successes as f64))
                .collect(),
        },
    ]
}

fn latency_series(seconds: &[Second]) -> Vec<Series<'static>> {
    let quantile = |name: &'static str, q: f64| Series {
        name,
        points: seconds
            .iter()
            .enumerate()
            .filter(|(_, s)| s.answers > 0)
            .map(|(i, s)| {
                (
                    i as f64 + 0.5,
                    s.latency_us.value_at_quantile(q) as f64 / 1000.0,
                )
            })
            .collect(),
    };
    vec![
        quantile("p50", 0.50),
        quantile("p90", 0.90),
        quantile("p99", 0.99),
    ]
}

/// Maps data onto the plot area.
struct Scale {
    x_max: f64,
    y_min: f64,
    y_max: f64,
    log: bool,
}

impl Scale {
    fn x(&self, x: f64) -> f64 {
        LEFT + x / self.x_max.max(1e-9) * (WIDTH - LEFT - RIGHT)
    }

    fn y(&self, y: f64) -> f64 {
        let (low, high, y) = if self.log {
            (
                self.y_min.max(1e-3).log10(),
                self.y_max.max(1e-3).log10(),
                y.max(1e-3).log10(),
            )
        } else {
            (self.y_min, self.y_max, y)
        };
        let span = (high - low).max(1e-9);
        HEIGHT - BOTTOM - (y - low) / span * (HEIGHT - BOTTOM - TOP)
    }
}

/// Ticks of an axis: five linear steps, or the powers of ten within a log range.
fn ticks(scale: &Scale) -> Vec<f64> {
    if scale.log {
        let (low, high) = (
            scale.y_min.max(1e-3).log10().floor() as i32,
            scale.y_max.max(1e-3).log10().ceil() as i32,
        );
        (low..=high).map(|p| 10f64.powi(p)).collect()
    } else {
        (0..=4)
            .map(|i| scale.y_min + (scale.y_max - scale.y_min) * f64::from(i) / 4.0)
            .collect()
    }
}

fn label(value: f64) -> String {
    if value >= 100.0 || value == value.trunc() {
        format!("{value:.0}")
    } else if value >= 1.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

/// A line chart of several series sharing axes.
fn chart(series: &[Series<'_>], x_title: &str, y_title: &str, log: bool) -> String {
    let points = series.iter().flat_map(|s| s.points.iter());
    let x_max = points.clone().map(|p| p.0).fold(1.0, f64::max);
    let y_max = points.clone().map(|p| p.1).fold(0.0, f64::max).max(1.0);
    let y_min = if log {
        points
            .map(|p| p.1)
            .filter(|y| *y > 0.0)
            .fold(f64::INFINITY, f64::min)
            .min(y_max)
            .max(0.01)
    } else {
        0.0
    };
    // A log scale spans whole decades, so every tick lies on the chart.
    let (y_min, y_max) = if log {
        (
            10f64.powf(y_min.log10().floor()),
            10f64.powf(y_max.log10().ceil()),
        )
    } else {
        (y_min, y_max * 1.1)
    };
    let scale = Scale {
        x_max: x_max.ceil(),
        y_min,
        y_max,
        log,
    };
    let mut svg = frame(&scale, x_title, y_title, true);
    for (index, one) in series.iter().enumerate() {
        let colour = COLOURS[index % COLOURS.len()];
        let path: Vec<String> = one
            .points
            .iter()
            .map(|(x, y)| format!("{:.1},{:.1}", scale.x(*x), scale.y(*y)))
            .collect();
        let _ = write!(
            svg,
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.8\" points=\"{}\"><title>{}</title></polyline>",
            path.join(" "),
            escape(one.name)
        );
    }
    svg.push_str("</svg><p class=\"legend\">");
    for (index, one) in series.iter().enumerate() {
        let _ = write!(
            svg,
            "<span style=\"color:{}\">■ {}</span>",
            COLOURS[index % COLOURS.len()],
            escape(one.name)
        );
    }
    svg.push_str("</p>");
    svg
}

/// The axes, grid lines and titles of a chart, leaving the `<svg>` open;
/// `x_ticks` labels the x axis in whole steps (a bar chart labels its bars).
fn frame(scale: &Scale, x_title: &str, y_title: &str, x_ticks: bool) -> String {
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" font-size=\"11\">"
    );
    for tick in ticks(scale) {
        let y = scale.y(tick);
        let _ = write!(
            svg,
            "<line x1=\"{LEFT}\" x2=\"{}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#e4e4e4\"/>\
             <text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            WIDTH - RIGHT,
            LEFT - 6.0,
            y + 4.0,
            label(tick)
        );
    }
    // Whole-number ticks, about eight of them.
    let step = (scale.x_max / 8.0).ceil().max(1.0);
    let count = if x_ticks {
        (scale.x_max / step).floor() as u32
    } else {
        0
    };
    for i in 0..=count {
        if !x_ticks {
            break;
        }
        let x_value = step * f64::from(i);
        let x = scale.x(x_value);
        let _ = write!(
            svg,
            "<text x=\"{x:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            HEIGHT - BOTTOM + 14.0,
            label(x_value)
        );
    }
    let _ = write!(
        svg,
        "<line x1=\"{LEFT}\" x2=\"{LEFT}\" y1=\"{TOP}\" y2=\"{0}\" stroke=\"#888\"/>\
         <line x1=\"{LEFT}\" x2=\"{1}\" y1=\"{0}\" y2=\"{0}\" stroke=\"#888\"/>\
         <text x=\"{2}\" y=\"{3}\" text-anchor=\"middle\">{4}</text>\
         <text x=\"14\" y=\"{5}\" text-anchor=\"middle\" transform=\"rotate(-90 14 {5})\">{6}</text>",
        HEIGHT - BOTTOM,
        WIDTH - RIGHT,
        (LEFT + WIDTH - RIGHT) / 2.0,
        HEIGHT - 4.0,
        escape(x_title),
        (TOP + HEIGHT - BOTTOM) / 2.0,
        escape(y_title),
    );
    svg
}

/// Answers per latency bucket, the buckets growing by a factor of two.
fn histogram_chart(latency: &Histogram<u64>) -> String {
    let mut buckets: Vec<(f64, u64)> = Vec::new();
    let mut upper_us = 250u64;
    let max = latency.max().max(1);
    let mut lower_us = 0u64;
    while lower_us <= max {
        let count = latency.count_between(lower_us, upper_us.saturating_sub(1).max(lower_us));
        buckets.push((upper_us as f64 / 1000.0, count));
        lower_us = upper_us;
        upper_us = upper_us.saturating_mul(2);
    }
    let tallest = buckets.iter().map(|b| b.1).max().unwrap_or(0).max(1) as f64;
    let scale = Scale {
        x_max: buckets.len() as f64,
        y_min: 0.0,
        y_max: tallest * 1.1,
        log: false,
    };
    let mut svg = frame(&scale, "latency up to (ms)", "answers", false);
    let slot = (WIDTH - LEFT - RIGHT) / buckets.len().max(1) as f64;
    for (index, (upper_ms, count)) in buckets.iter().enumerate() {
        let x = LEFT + slot * index as f64;
        let y = scale.y(*count as f64);
        let _ = write!(
            svg,
            "<rect x=\"{:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\"><title>≤ {} ms: {count}</title></rect>\
             <text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\" font-size=\"9\">{}</text>",
            x + 1.0,
            (slot - 2.0).max(1.0),
            (HEIGHT - BOTTOM - y).max(0.0),
            COLOURS[0],
            label(*upper_ms),
            x + slot / 2.0,
            HEIGHT - BOTTOM + 13.0,
            label(*upper_ms),
        );
    }
    svg.push_str("</svg>");
    svg
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn second(answers: u64, latency_ms: &[u64]) -> Second {
        let mut s = Second::new();
        s.answers = answers;
        s.successes = answers;
        for ms in latency_ms {
            s.latency_us.record(ms * 1000).unwrap();
        }
        s
    }

    #[test]
    fn the_page_shows_the_verdict_the_curves_and_the_settings_offline() {
        let seconds = vec![
            second(100, &[2, 3, 40]),
            second(120, &[2, 5, 9]),
            second(90, &[1, 2, 300]),
        ];
        let mut latency = Histogram::new_with_bounds(1, 120_000_000, 3).unwrap();
        for s in &seconds {
            latency.add(&s.latency_us).unwrap();
        }
        let report = json!({
            "verdict": "PASS", "requests": 310, "latency_ms": {"p50": 2.0},
            "invariants": {"failures": []}, "responses": {"202": 300, "409 idempotency.key_reused": 10}
        });
        let page = render(
            &report,
            &json!({"concurrency": 16, "partners": 3}),
            &seconds,
            &latency,
        );
        assert!(page.contains("verdict PASS"));
        assert_eq!(page.matches("<svg").count(), 3);
        assert_eq!(
            page.matches("<polyline").count(),
            5,
            "two throughput lines, three percentiles"
        );
        assert!(page.contains("<rect"), "the histogram has bars");
        assert!(page.contains("concurrency") && page.contains("409 idempotency.key_reused"));
        assert!(!page.contains("<script"), "no script");
        assert!(!page.contains("src="), "nothing is fetched");
        assert!(
            !page.contains("NaN") && !page.contains("inf"),
            "every coordinate is a number"
        );
    }

    #[test]
    fn a_failed_run_lists_what_failed() {
        let latency = Histogram::new_with_bounds(1, 120_000_000, 3).unwrap();
        let report =
            json!({"verdict": "FAIL", "invariants": {"failures": ["1 cent lost on pt_1"]}});
        let page = render(&report, &json!({}), &[], &latency);
        assert!(page.contains("verdict FAIL"));
        assert!(page.contains("1 cent lost on pt_1"));
    }

    #[test]
    fn a_dominant_refusal_is_warned_of_beside_the_verdict() {
        let latency = Histogram::new_with_bounds(1, 120_000_000, 3).unwrap();
        let report = json!({"verdict": "PASS", "invariants": {"failures": []},
            "warning": "90 of 100 answers were 429 <rate_limit.exceeded>: serve --profile loadtest"});
        let page = render(&report, &json!({}), &[], &latency);
        assert!(page.contains("verdict PASS"), "the verdict stays");
        assert!(page.contains("<strong>Warning:</strong> 90 of 100"));
        assert!(page.contains("&lt;rate_limit.exceeded&gt;"), "escaped");
        let quiet = json!({"verdict": "PASS", "invariants": {"failures": []}});
        assert!(!render(&quiet, &json!({}), &[], &latency).contains("Warning:"));
    }
}
