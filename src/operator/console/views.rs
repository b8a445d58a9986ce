//! The console's HTML, rendered with maud (every value escaped). One layout,
//! one inline stylesheet, no script and nothing loaded from elsewhere.

use axum::{
    http::{HeaderValue, StatusCode, header},
    response::{Html, IntoResponse, Response},
};
use chrono::{DateTime, Utc};
use maud::{DOCTYPE, Markup, PreEscaped, html};

use super::session::Operator;
use crate::http::envelope::FinalBody;

/// What every console page may do: styles inline, icons as data, forms to
/// this origin, never framed.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; style-src 'unsafe-inline'; \
     img-src data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

const STYLE: &str = "body{font:15px/1.45 system-ui,sans-serif;margin:0;color:#1b1f24;background:#f6f7f9}\
header{display:flex;flex-wrap:wrap;gap:.4em 1.2em;align-items:center;background:#1f2a37;color:#fff;padding:.6em 1.2em}\
header>strong,header button,nav a{white-space:nowrap}\
header a{color:#cfe3ff;text-decoration:none}header a.here{color:#fff;font-weight:600}\
header form{margin-left:auto}main{padding:1em 1.4em;max-width:80em}\
table{border-collapse:collapse;width:100%;background:#fff;margin:.5em 0 1.5em}\
th,td{border-bottom:1px solid #e3e6ea;padding:.4em .6em;text-align:left;vertical-align:top}\
th{background:#eef1f4;font-weight:600}td.num{text-align:right;font-variant-numeric:tabular-nums}\
.tiles{display:flex;gap:1em;flex-wrap:wrap}.tile{background:#fff;border:1px solid #e3e6ea;\
padding:.8em 1.2em;min-width:10em}.tile b{display:block;font-size:1.8em}\
.notice{padding:.6em 1em;margin:.5em 0;border-left:4px solid #2e7d32;background:#e8f5e9}\
.error{border-left-color:#c62828;background:#ffebee}.low{color:#c62828;font-weight:600}\
input[type=text],input[type=password]{padding:.3em;min-width:16em}button{padding:.3em .8em}\
code{font-size:.9em}.muted{color:#5f6b7a}\
.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(28em,1fr));gap:1em}\
.chart{margin:0;background:#fff;border:1px solid #e3e6ea;padding:.6em .8em}\
.chart svg{display:block;width:100%;height:auto;margin-top:.4em}.chart text{fill:#5f6b7a}\
table.facts{width:auto;min-width:30em}\
form.filters{display:flex;flex-wrap:wrap;gap:.5em 1.2em;align-items:center;margin:.5em 0 1em}\
td code,td .muted{overflow-wrap:anywhere}td code.whole{overflow-wrap:normal}\
.nowrap,td.num{white-space:nowrap}\
form.decide{display:flex;flex-wrap:wrap;gap:.4em;min-width:14em}\
form.decide input[type=text]{flex:1 0 100%;min-width:0;box-sizing:border-box}\
nav a{margin-right:.5em}";

/// The sections of the console, for the navigation bar.
const SECTIONS: [(&str, &str); 8] = [
    ("/console", "Overview"),
    ("/console/partners", "Partners"),
    ("/console/orders", "Orders"),
    ("/console/reviews", "Deposit reviews"),
    ("/console/approvals", "Approvals"),
    ("/console/actors", "Actors"),
    ("/console/suppliers", "Suppliers"),
    ("/console/audit", "Audit"),
];

/// A page as a response: HTML with the console's security headers, kept
/// as it is by the API's error envelope.
pub(super) fn page(status: StatusCode, body: Markup) -> Response {
    let mut response = (status, Html(body.into_string())).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response.extensions_mut().insert(FinalBody);
    response
}

/// The frame of every page: navigation with `here` marked, and who is
/// signed in with the sign-out form when `signed_in` is given.
pub(super) fn layout(
    title: &str,
    here: &str,
    signed_in: Option<&Operator>,
    content: Markup,
) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                link rel="icon" href="data:,";
                title { (title) " · esim-reseller console" }
                style { (PreEscaped(STYLE)) }
            }
            body {
                header {
                    strong { "esim-reseller" }
                    @if let Some(operator) = signed_in {
                        nav {
                            @for (href, label) in SECTIONS {
                                a href=(href) class=[(href == here).then_some("here")] { (label) } " "
                            }
                        }
                        span.who {
                            "Signed in as " strong { (operator.caller.name) }
                            " (" (operator.caller.role.as_str()) ")"
                        }
                        form method="post" action="/console/logout" {
                            input type="hidden" name="csrf" value=(operator.csrf);
                            button type="submit" { "Sign out" }
                        }
                    }
                }
                main {
                    h1 { (title) }
                    (content)
                }
            }
        }
    }
}

/// The sign-in page, with what went wrong last time.
pub(super) fn login(problem: Option<&str>) -> Markup {
    layout(
        "Sign in",
        "",
        None,
        html! {
            @if let Some(problem) = problem {
                p.notice.error role="alert" { (problem) }
            }
            form method="post" action="/console/login" {
                p {
                    label for="token" { "Operator token " }
                    input #token type="password" name="token" required autocomplete="current-password";
                }
                button type="submit" { "Sign in" }
            }
            p.muted {
                "Your own operator token (an administrator creates it with "
                code { "admin operators create" } "), or the bootstrap token (operator.token). "
                "What the console offers depends on your role."
            }
        },
    )
}

/// A form without this session's token: from another page, or an old one.
pub(super) fn stale_form() -> Markup {
    layout(
        "Form expired",
        "",
        None,
        html! {
            p.notice.error role="alert" {
                "This form did not come from your current session. Go back, reload the page and try again."
            }
            p { a href="/console" { "Back to the console" } }
        },
    )
}

/// Something failed on our side (the database did not answer).
pub(super) fn failure(operator: &Operator, message: &str) -> Markup {
    layout(
        "Something failed",
        "",
        Some(operator),
        html! { p.notice.error role="alert" { (message) } },
    )
}

/// Cents as dollars: `$1,234.56`, `-$5.00`.
pub(super) fn usd(cents: i64) -> String {
    let sign = if cents < 0 { "-" } else { "" };
    let magnitude = cents.unsigned_abs();
    let dollars = (magnitude / 100).to_string();
    let mut grouped = String::with_capacity(dollars.len() + dollars.len() / 3);
    for (i, digit) in dollars.chars().enumerate() {
        if i > 0 && (dollars.len() - i).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    format!("{sign}${grouped}.{:02}", magnitude % 100)
}

/// A moment as operators read it in logs: UTC, to the second.
pub(super) fn when(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// [`when`] for a table cell: a narrow column breaks it between the date
/// and the time, nowhere else.
pub(super) fn moment(at: DateTime<Utc>) -> Markup {
    html! {
        span.nowrap { (at.format("%Y-%m-%d")) } " "
        span.nowrap { (at.format("%H:%M:%S UTC")) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dollars_are_grouped_by_thousands_with_two_decimals() {
        assert_eq!(usd(0), "$0.00");
        assert_eq!(usd(5), "$0.05");
        assert_eq!(usd(123_456), "$1,234.56");
        assert_eq!(usd(100_000_000), "$1,000,000.00");
        assert_eq!(usd(-500), "-$5.00");
        assert_eq!(usd(i64::MIN), "-$92,233,720,368,547,758.08");
    }

    #[test]
    fn values_are_escaped() {
        let page = login(Some("<script>alert(1)</script>")).into_string();
        assert!(!page.contains("<script>"), "{page}");
        assert!(page.contains("&lt;script&gt;"), "{page}");
    }
}
