//! The console's suppliers page: the route, each supplier's state on this
//! node (up, failing, out of the route and until when, probing), its calls,
//! units, refusals and failovers, and the last 30 days' margin per supplier.

use axum::extract::State;
use maud::{Markup, html};

use super::{pages::Page, session::Operator, views::usd};
use crate::{
    domain::time,
    state::AppState,
    store::{self, supply::MarginRow},
    supplier::set::SupplierView,
};

/// `GET /console/suppliers`.
pub(super) async fn page(operator: Operator, State(state): State<AppState>) -> Page {
    let now = time::now();
    let margins = store::supply::margins(&state.db, now - chrono::Duration::days(30), now, None)
        .await
        .map_err(|err| super::pages::failed(&operator, err))?;
    let live = &state.suppliers.live;
    let route: Vec<&str> = live
        .route()
        .suppliers()
        .iter()
        .map(|s| s.as_str())
        .collect();
    let content = section(&route.join(" → "), &live.view(), &margins);
    Ok(super::pages::shown(
        &operator,
        "Suppliers",
        "/console/suppliers",
        content,
    ))
}

fn section(route: &str, suppliers: &[SupplierView], margins: &[MarginRow]) -> Markup {
    html! {
        p { "Route: " strong { (route) } ". Counts are this node's since it started." }
        table {
            thead { tr {
                th { "Supplier" } th { "State" } th.num { "Calls" } th.num { "Units placed" }
                th.num { "Refusals" } th.num { "Failures" } th.num { "Units moved on" }
                th.num { "Limit /s" }
            } }
            tbody {
                @for s in suppliers {
                    tr {
                        td { code { (s.name.as_str()) } @if !s.in_route { " (not in the route)" } }
                        td class=[(s.state != "up").then_some("low")] {
                            (s.state)
                            @if let Some(left) = s.out_of_route_for_seconds {
                                " (probed again in " (format!("{left:.0}")) " s)"
                            }
                        }
                        td.num { (s.calls) }
                        td.num { (s.units_placed) }
                        td.num { (s.refusals) }
                        td.num { (s.failures) }
                        td.num { (s.units_failed_over) }
                        td.num {
                            (s.requests_per_second)
                            @if let Some(pace) = s.learnt_requests_per_second {
                                " (paced at " (pace) " after slow-downs)"
                            }
                            @if let (Some(calls), Some(seconds)) = (s.learnt_requests_per_window, s.learnt_window_seconds) {
                                " (" (calls) " every " (seconds) " s)"
                            }
                        }
                    }
                }
            }
        }
        h2 { "Last 30 days, delivered live units" }
        (margin_table(margins))
    }
}

fn margin_table(margins: &[MarginRow]) -> Markup {
    let mut by_supplier: std::collections::BTreeMap<&str, (i64, i64, i64, i64)> =
        std::collections::BTreeMap::new();
    for row in margins {
        let entry = by_supplier.entry(row.supplier.as_str()).or_default();
        entry.0 += row.units;
        entry.1 += row.revenue_cents;
        entry.2 += row.cost_cents;
        entry.3 += row.estimated_cost_units;
    }
    html! {
        @if by_supplier.is_empty() {
            p { "No live unit delivered in the last 30 days." }
        } @else {
            table {
                thead { tr {
                    th { "Supplier" } th.num { "Units" } th.num { "Revenue" } th.num { "Cost" }
                    th.num { "Margin" } th.num { "Units at the cost floor" }
                } }
                tbody {
                    @for (supplier, (units, revenue, cost, estimated)) in &by_supplier {
                        tr {
                            td { code { (supplier) } }
                            td.num { (units) }
                            td.num { (usd(*revenue)) }
                            td.num { (usd(*cost)) }
                            td.num class=[(revenue < cost).then_some("low")] { (usd(revenue - cost)) }
                            td.num { (estimated) }
                        }
                    }
                }
            }
            p { "Cost is the supplier's price where its answer named one (Airalo's net price), else the plan's cost floor." }
        }
    }
}
