//! The partner documentation served under `/docs`, so every `doc_url`
//! resolves on a fresh `serve` with no network: a quickstart, guides and the
//! changelog (Markdown under `docs/partner/` and `docs/changelog.md`,
//! rendered once), the API reference with code samples generated from the
//! OpenAPI document's examples ([`samples`]), and the errors reference.
//! Plain HTML and one inline style sheet; no script, nothing fetched from
//! elsewhere.

mod reference;
pub mod samples;

use std::sync::LazyLock;

use axum::{
    Router,
    extract::Path,
    http::StatusCode,
    response::{Html, IntoResponse, Response},
    routing::get,
};

use reference::escape;
pub(crate) use reference::{render_api_page, render_errors_page};

use crate::{http::openapi, state::AppState};

/// Routes under `/docs`.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(index_page))
        .route("/quickstart", get(quickstart_page))
        .route("/guides/{name}", get(guide_page))
        .route("/changelog", get(changelog_page))
        .route("/errors", get(errors_page))
        .route("/api", get(api_page))
}

/// A guide: its address under `/docs/guides/`, its title and its Markdown.
pub struct Guide {
    pub slug: &'static str,
    pub title: &'static str,
    pub markdown: &'static str,
}

/// The guides, in reading order.
pub const GUIDES: &[Guide] = &[
    Guide {
        slug: "idempotency",
        title: "Idempotency and retries",
        markdown: include_str!("../../docs/partner/idempotency.md"),
    },
    Guide {
        slug: "polling",
        title: "Polling an order",
        markdown: include_str!("../../docs/partner/polling.md"),
    },
    Guide {
        slug: "rate-limits",
        title: "Rate limits",
        markdown: include_str!("../../docs/partner/rate-limits.md"),
    },
    Guide {
        slug: "sandbox",
        title: "The sandbox and its fixtures",
        markdown: include_str!("../../docs/partner/sandbox.md"),
    },
    Guide {
        slug: "deposits",
        title: "Deposits and the ledger",
        markdown: include_str!("../../docs/partner/deposits.md"),
    },
];

/// The quickstart, from a sandbox key to a delivered eSIM.
pub const QUICKSTART: &str = include_str!("../../docs/partner/quickstart.md");
/// The changelog and versioning policy.
pub const CHANGELOG: &str = include_str!("../../docs/changelog.md");

const STYLE: &str = "<style>body{font:15px/1.5 system-ui,sans-serif;max-width:60rem;margin:0 auto;padding:0 1rem 3rem;color:#222}\
nav{border-bottom:1px solid #ccc;padding:.8rem 0;margin-bottom:1rem}nav a{margin-right:1rem}\
code,pre{font:13px ui-monospace,monospace;background:#f4f4f4}pre{padding:.6rem;overflow-x:auto}\
table{border-collapse:collapse;margin:.5rem 0}td,th{border:1px solid #ddd;padding:.25rem .5rem;text-align:left;vertical-align:top}\
h2{border-top:1px solid #ccc;padding-top:1rem}.method{font-weight:bold;text-transform:uppercase}\
details.sample{margin:.3rem 0}details.sample summary{cursor:pointer;font-weight:600}</style>";

/// The end of every page.
const FOOT: &str = "</main></body></html>";

/// The start of every page: its title, the style sheet and the navigation.
fn head(title: &str) -> String {
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <link rel=\"icon\" href=\"data:,\">\
         <title>{} - esim-reseller partner API v1</title>{STYLE}</head><body><nav>\
         <a href=\"/docs\">Docs</a><a href=\"/docs/quickstart\">Quickstart</a>\
         <a href=\"/docs/api\">API reference</a><a href=\"/docs/errors\">Errors</a>\
         <a href=\"/docs/changelog\">Changelog</a></nav><main>",
        escape(title)
    )
}

/// Markdown as a page.
fn markdown_page(title: &str, markdown: &str) -> String {
    let mut page = head(title);
    let options = pulldown_cmark::Options::ENABLE_TABLES;
    pulldown_cmark::html::push_html(
        &mut page,
        pulldown_cmark::Parser::new_ext(markdown, options),
    );
    page.push_str(FOOT);
    page
}

async fn index_page() -> Html<String> {
    static PAGE: LazyLock<String> = LazyLock::new(render_index);
    Html(PAGE.clone())
}

fn render_index() -> String {
    let mut page = head("Docs");
    page.push_str(
        "<h1>esim-reseller partner API v1</h1>\
         <p>Buy eSIM data plans from a prepaid USD float and resell them, over a server-to-server JSON API.</p>\
         <h2>Start</h2><ul>\
         <li><a href=\"/docs/quickstart\">Quickstart</a>: from a sandbox key to a delivered eSIM in seven calls</li>\
         </ul><h2>Guides</h2><ul>",
    );
    for guide in GUIDES {
        page.push_str(&format!(
            "<li><a href=\"/docs/guides/{}\">{}</a></li>",
            guide.slug,
            escape(guide.title)
        ));
    }
    page.push_str(
        "</ul><h2>Reference</h2><ul>\
         <li><a href=\"/docs/api\">API reference</a>: every route with a request in curl, Python and JavaScript and its answer</li>\
         <li><a href=\"/docs/errors\">Errors</a>: every error code, its status and what to do</li>\
         <li><a href=\"/docs/changelog\">Changelog and versioning</a></li>\
         <li><a href=\"/partner/v1/openapi.json\">openapi.json</a>: the OpenAPI 3.1 document, to generate a client from</li></ul>",
    );
    page.push_str(FOOT);
    page
}

async fn quickstart_page() -> Html<String> {
    static PAGE: LazyLock<String> = LazyLock::new(|| markdown_page("Quickstart", QUICKSTART));
    Html(PAGE.clone())
}

async fn changelog_page() -> Html<String> {
    static PAGE: LazyLock<String> = LazyLock::new(|| markdown_page("Changelog", CHANGELOG));
    Html(PAGE.clone())
}

async fn guide_page(Path(name): Path<String>) -> Response {
    match GUIDES.iter().find(|g| g.slug == name) {
        Some(guide) => Html(markdown_page(guide.title, guide.markdown)).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            Html(markdown_page(
                "Not found",
                "# No such guide\n\nSee [the docs](/docs).",
            )),
        )
            .into_response(),
    }
}

async fn api_page() -> Html<String> {
    static PAGE: LazyLock<String> = LazyLock::new(|| render_api_page(&openapi::to_value()));
    Html(PAGE.clone())
}

async fn errors_page() -> Html<String> {
    static PAGE: LazyLock<String> = LazyLock::new(render_errors_page);
    Html(PAGE.clone())
}
