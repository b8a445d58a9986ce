//! The console's charts, drawn as inline SVG (no script, nothing fetched,
//! so they show under `default-src 'none'`): the overview's last hour per
//! minute (live orders accepted, live units delivered and refunded,
//! admission refusals) and a partner's page with its live float over its
//! last ledger movements. Also the link to a partner's page, its name
//! beside its id.
//!
//! Refusals are not stored: admission counts them in memory since the node
//! started. This module keeps, per node, the count seen each minute the
//! overview was shown (taken then and by nothing else), and a bar spans the
//! time between two such samples at its average per minute.

use std::{
    collections::{HashMap, VecDeque},
    sync::{LazyLock, Mutex},
};

use axum::{
    extract::{Path, State},
    http::StatusCode,
};
use chrono::{DateTime, Duration, Utc};
use entities::states::UnitStatus;
use maud::{Markup, html};

use super::{
    pages::{self, Page},
    session::Operator,
    views::{self, usd, when},
};
use crate::{
    domain::time,
    state::AppState,
    store::{self, partners::PartnerWithFloats, trends::FloatPoint},
};

/// Minutes the overview charts.
const MINUTES: u32 = 60;
/// Ledger movements a partner's float line shows.
const FLOAT_POINTS: u64 = 200;
/// Geometry of a chart: the view box and the plot's margins inside it.
const WIDTH: f64 = 480.0;
const HEIGHT: f64 = 170.0;
const TOP: f64 = 10.0;
const BOTTOM: f64 = 22.0;
const RIGHT: f64 = 10.0;
const BLUE: &str = "#1f5fa8";

/// The overview's four series, over the same minutes.
pub(super) struct Trends {
    /// The start of the first minute charted.
    start: DateTime<Utc>,
    /// Live orders accepted, per minute.
    orders: Vec<i64>,
    /// Live units delivered, per minute.
    delivered: Vec<i64>,
    /// Live units refunded, per minute.
    refunded: Vec<i64>,
    /// Refusals between overview views; `None` when admission is off.
    refusals: Option<Refusals>,
}

/// What this node's admission refused, as far as the samples tell.
struct Refusals {
    /// Refusals counted since the node started, by every reason.
    total: u64,
    /// Samples `(minute since the epoch, total then)`, oldest first.
    samples: Vec<(i64, u64)>,
}

/// One bar: minutes `from..to` of the chart (indices, `to` excluded) at `value`.
struct Bar {
    /// First minute covered.
    from: f64,
    /// Minute after the last covered.
    to: f64,
    /// Height, in the chart's unit.
    value: f64,
    /// What hovering it says.
    tip: String,
}

/// One node's samples, `(minute since the epoch, refusal total then)`, oldest first.
type Samples = VecDeque<(i64, u64)>;

/// Samples of each node's refusal total, keyed by node id (tests run
/// several nodes in one process).
static SAMPLES: LazyLock<Mutex<HashMap<String, Samples>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// Loads the last hour, and samples this node's refusal total.
pub(super) async fn load(state: &AppState) -> Result<Trends, sea_orm::DbErr> {
    let now = time::now();
    let this_minute = now.timestamp().div_euclid(60);
    let start = DateTime::from_timestamp((this_minute - i64::from(MINUTES) + 1) * 60, 0)
        .unwrap_or(now - Duration::hours(1));
    let db = &state.db;
    let orders = store::trends::live_orders_per_minute(db, start, MINUTES).await?;
    let delivered =
        store::trends::live_units_per_minute(db, UnitStatus::Delivered, start, MINUTES).await?;
    let refunded =
        store::trends::live_units_per_minute(db, UnitStatus::Refunded, start, MINUTES).await?;
    let refusals = state.admission.as_ref().map(|admission| {
        let total = admission.view().refusals.values().sum();
        Refusals {
            total,
            samples: sample(&state.node_id, this_minute, total),
        }
    });
    Ok(Trends {
        start,
        orders,
        delivered,
        refunded,
        refusals,
    })
}

/// Records `total` as the node's sample of `minute` (the latest of a minute
/// stands) and returns the node's samples of the last two hours.
fn sample(node: &str, minute: i64, total: u64) -> Vec<(i64, u64)> {
    let mut all = SAMPLES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let oldest = minute - 2 * i64::from(MINUTES);
    all.retain(|_, samples| samples.back().is_some_and(|(m, _)| *m >= oldest));
    let samples = all.entry(node.to_owned()).or_default();
    if samples.back().is_some_and(|(m, _)| *m == minute) {
        samples.pop_back();
    }
    samples.push_back((minute, total));
    while samples.front().is_some_and(|(m, _)| *m < oldest) {
        samples.pop_front();
    }
    samples.iter().copied().collect()
}

/// The overview's charts, two by two.
pub(super) fn section(trends: &Trends) -> Markup {
    let per_minute = |series: &[i64], what: &str| -> Vec<Bar> {
        series
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .map(|(i, n)| Bar {
                from: i as f64,
                to: i as f64 + 1.0,
                value: *n as f64,
                tip: format!("{}: {n} {what}", clock(trends.start, i as f64)),
            })
            .collect()
    };
    let total = |series: &[i64]| format!("{} in the last hour", series.iter().sum::<i64>());
    html! {
        h2 { "The last hour, per minute" }
        div.charts {
            (chart("Orders accepted", &total(&trends.orders), trends.start, &per_minute(&trends.orders, "live orders accepted")))
            (chart("Units delivered", &total(&trends.delivered), trends.start, &per_minute(&trends.delivered, "live units delivered")))
            (chart("Units refunded", &total(&trends.refunded), trends.start, &per_minute(&trends.refunded, "live units refunded")))
            (refusals_chart(trends))
        }
        p.muted {
            "Live orders by when they were accepted; live units by when they were last updated in their state. "
            "Admission refusals are not stored: this node counts them since it started, and the chart shows "
            "how many it counted between two views of this page, at their average per minute."
        }
    }
}

/// Admission refusals between the samples of the last hour.
fn refusals_chart(trends: &Trends) -> Markup {
    let Some(refusals) = &trends.refusals else {
        return chart(
            "Admission refusals",
            "admission is off on this node",
            trends.start,
            &[],
        );
    };
    let first = trends.start.timestamp().div_euclid(60);
    let bars: Vec<Bar> = refusals
        .samples
        .windows(2)
        .filter_map(|pair| {
            let ((before, was), (after, is)) = (pair[0], pair[1]);
            let count = is.saturating_sub(was);
            let (from, to) = ((before + 1 - first) as f64, (after + 1 - first) as f64);
            (count > 0 && to > 0.0).then(|| Bar {
                from: from.max(0.0),
                to,
                value: count as f64 / (to - from).max(1.0),
                tip: format!(
                    "{count} refused between {} and {}",
                    clock(trends.start, from),
                    clock(trends.start, to)
                ),
            })
        })
        .collect();
    let summary = format!("{} since this node started", refusals.total);
    chart("Admission refusals", &summary, trends.start, &bars)
}

/// `HH:MM` of minute `index` of a chart starting at `start`.
fn clock(start: DateTime<Utc>, index: f64) -> String {
    let at = start + Duration::seconds((index * 60.0) as i64);
    at.format("%H:%M").to_string()
}

/// A bar chart of the last hour: bars in minutes, ticks every 15 minutes.
fn chart(title: &str, summary: &str, start: DateTime<Utc>, bars: &[Bar]) -> Markup {
    let left = 36.0;
    let tallest = bars.iter().map(|b| b.value).fold(0.0, f64::max);
    let step = (tallest / 4.0).ceil().max(1.0);
    let y = |value: f64| HEIGHT - BOTTOM - value / (step * 4.0) * (HEIGHT - BOTTOM - TOP);
    let x = |minute: f64| left + minute / f64::from(MINUTES) * (WIDTH - left - RIGHT);
    let ticks: Vec<(f64, String)> = (0..=4)
        .map(|i| (y(step * f64::from(i)), (step * f64::from(i)).to_string()))
        .collect();
    html! {
        figure.chart {
            figcaption { strong { (title) } " · " span.muted { (summary) } }
            svg xmlns="http://www.w3.org/2000/svg" viewBox={ "0 0 " (WIDTH) " " (HEIGHT) } role="img" aria-label=(title) font-size="10" {
                title { (title) ", " (summary) }
                (grid(left, &ticks))
                @for bar in bars {
                    rect x=(px(x(bar.from) + 0.5)) y=(px(y(bar.value))) width=(px((x(bar.to) - x(bar.from) - 1.0).max(1.0)))
                        height=(px(HEIGHT - BOTTOM - y(bar.value))) fill=(BLUE) { title { (bar.tip) } }
                }
                @for minute in [0.0, 15.0, 30.0, 45.0] {
                    text x=(px(x(minute))) y=(px(HEIGHT - 6.0)) text-anchor="middle" { (clock(start, minute)) }
                }
                text x=(px(x(60.0))) y=(px(HEIGHT - 6.0)) text-anchor="end" { "now" }
            }
        }
    }
}

/// Horizontal grid lines with their labels left of the plot, and the axes.
fn grid(left: f64, ticks: &[(f64, String)]) -> Markup {
    html! {
        @for (y, label) in ticks {
            line x1=(px(left)) x2=(px(WIDTH - RIGHT)) y1=(px(*y)) y2=(px(*y)) stroke="#e4e6ea" {}
            text x=(px(left - 4.0)) y=(px(y + 3.5)) text-anchor="end" { (label) }
        }
        line x1=(px(left)) x2=(px(left)) y1=(px(TOP)) y2=(px(HEIGHT - BOTTOM)) stroke="#8a939e" {}
        line x1=(px(left)) x2=(px(WIDTH - RIGHT)) y1=(px(HEIGHT - BOTTOM)) y2=(px(HEIGHT - BOTTOM)) stroke="#8a939e" {}
    }
}

/// A coordinate, to a tenth.
fn px(value: f64) -> String {
    format!("{value:.1}")
}

/// `GET /console/partners/{id}`: the partner, its floats and its live float
/// over its last ledger movements.
pub(super) async fn partner(
    operator: Operator,
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Page {
    let db_failed = |err| pages::failed(&operator, err);
    let found = store::partners::find_with_floats(&state.db, &id)
        .await
        .map_err(db_failed)?;
    let Some(row) = found else {
        let content = html! {
            p.notice.error role="alert" { "There is no partner " code { (id) } "." }
            p { a href="/console/partners" { "All partners" } }
        };
        let body = views::layout(
            "No such partner",
            "/console/partners",
            Some(&operator),
            content,
        );
        return Err(views::page(StatusCode::NOT_FOUND, body));
    };
    let line = store::trends::float_line(&state.db, &id, FLOAT_POINTS)
        .await
        .map_err(db_failed)?;
    Ok(pages::shown(
        &operator,
        &row.partner.name,
        "/console/partners",
        partner_section(&row, &line, time::now()),
    ))
}

fn partner_section(row: &PartnerWithFloats, line: &[FloatPoint], now: DateTime<Utc>) -> Markup {
    let low = row.live_cents < row.partner.low_balance_threshold_cents;
    html! {
        p { a href="/console/partners" { "← All partners" } }
        table.facts {
            tbody {
                tr { th { "Name" } td { (row.partner.name) } }
                tr { th { "Id" } td { code { (row.partner.id) } } }
                tr { th { "Status" } td { (row.partner.status) ", tier " (row.partner.tier) } }
                tr { th { "Live float" } td class=[low.then_some("low")] { (usd(row.live_cents)) } }
                tr { th { "Sandbox float" } td { (usd(row.sandbox_cents)) } }
                tr { th { "Low-balance alert" } td { (usd(row.partner.low_balance_threshold_cents)) } }
            }
        }
        h2 { "Live float over its last " (FLOAT_POINTS) " ledger movements" }
        @if line.is_empty() {
            p { "No ledger movement yet." }
        } @else {
            figure.chart.wide {
                figcaption {
                    strong { "Live float" } " · "
                    span.muted {
                        (line.len()) @if line.len() == 1 { " movement" } @else { " movements" }
                        " since " (when(line[0].at)) ", the balance after each; dashed: the low-balance alert"
                    }
                }
                (float_chart(line, row.partner.low_balance_threshold_cents, now))
            }
        }
    }
}

/// The float after each movement as a step line held until `now`, with
/// the low-balance threshold dashed.
fn float_chart(line: &[FloatPoint], threshold: i64, now: DateTime<Utc>) -> Markup {
    let (width, left) = (WIDTH * 2.0, 80.0);
    let balances = line.iter().map(|p| p.balance_cents as f64);
    let low = balances.clone().fold(0.0, f64::min).min(threshold as f64);
    let high = balances.fold(0.0, f64::max).max(threshold as f64);
    let high = (high + (high - low) * 0.1).max(low + 100.0);
    let first = line[0].at;
    let last = &line[line.len() - 1];
    let now = now.max(last.at);
    let span = (now - first).num_milliseconds().max(1) as f64;
    let x = |at: DateTime<Utc>| {
        left + (at - first).num_milliseconds() as f64 / span * (width - left - RIGHT)
    };
    let y = |cents: f64| {
        HEIGHT - BOTTOM - (cents - low) / (high - low).max(1.0) * (HEIGHT - BOTTOM - TOP)
    };
    let mut steps = Vec::with_capacity(line.len() * 2);
    for (i, point) in line.iter().enumerate() {
        if i > 0 {
            steps.push(format!(
                "{},{}",
                px(x(point.at)),
                px(y(line[i - 1].balance_cents as f64))
            ));
        }
        steps.push(format!(
            "{},{}",
            px(x(point.at)),
            px(y(point.balance_cents as f64))
        ));
    }
    steps.push(format!(
        "{},{}",
        px(x(now)),
        px(y(last.balance_cents as f64))
    ));
    let ticks: Vec<(f64, String)> = (0..=4)
        .map(|i| {
            let cents = low + (high - low) * f64::from(i) / 4.0;
            (y(cents), usd(cents.round() as i64))
        })
        .collect();
    html! {
        svg xmlns="http://www.w3.org/2000/svg" viewBox={ "0 0 " (width) " " (HEIGHT) } role="img" aria-label="Live float over time" font-size="10" {
            title { "Live float after each ledger movement" }
            @for (y, label) in &ticks {
                line x1=(px(left)) x2=(px(width - RIGHT)) y1=(px(*y)) y2=(px(*y)) stroke="#e4e6ea" {}
                text x=(px(left - 4.0)) y=(px(y + 3.5)) text-anchor="end" { (label) }
            }
            line x1=(px(left)) x2=(px(width - RIGHT)) y1=(px(y(threshold as f64))) y2=(px(y(threshold as f64))) stroke="#c62828" stroke-dasharray="4 3" { title { "Low-balance alert: " (usd(threshold)) } }
            polyline.float fill="none" stroke=(BLUE) stroke-width="1.8" points=(steps.join(" ")) {}
            @for point in line {
                circle cx=(px(x(point.at))) cy=(px(y(point.balance_cents as f64))) r="2.5" fill=(BLUE) { title { (when(point.at)) ": " (usd(point.balance_cents)) } }
            }
            text x=(px(left)) y=(px(HEIGHT - 6.0)) text-anchor="start" { (when(first)) }
            text x=(px(width - RIGHT)) y=(px(HEIGHT - 6.0)) text-anchor="end" { "now, " (when(now)) }
        }
    }
}

/// A partner's name linking to its page, its id beside it (the id alone
/// when the name was not loaded).
pub(super) fn partner_link(id: &str, names: &HashMap<String, String>) -> Markup {
    html! {
        // A partner this database does not hold (a supervision event of
        // another service in the same process, or one since removed) is
        // named by its id alone, without a link that would lead nowhere.
        @match names.get(id) {
            Some(name) => a href={ "/console/partners/" (id) } { (name) " " code { (id) } },
            None => code { (id) },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_between_two_views_span_the_minutes_between_them() {
        let start = DateTime::from_timestamp(600 * 60, 0).unwrap();
        let first = start.timestamp() / 60;
        assert_eq!(sample("nd_test", first + 4, 10), vec![(first + 4, 10)]);
        assert_eq!(sample("nd_test", first + 4, 12), vec![(first + 4, 12)]);
        let samples = sample("nd_test", first + 9, 42);
        assert_eq!(samples, vec![(first + 4, 12), (first + 9, 42)]);
        let trends = Trends {
            start,
            orders: vec![0; 60],
            delivered: vec![0; 60],
            refunded: vec![0; 60],
            refusals: Some(Refusals { total: 42, samples }),
        };
        let chart = refusals_chart(&trends).into_string();
        assert_eq!(chart.matches("<rect").count(), 1, "{chart}");
        assert!(
            chart.contains("30 refused between 10:05 and 10:10"),
            "{chart}"
        );
        assert!(chart.contains("42 since this node started"), "{chart}");
        assert!(!chart.contains("NaN") && !chart.contains("inf"), "{chart}");
    }
}
