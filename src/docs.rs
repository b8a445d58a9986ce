//! Reference pages served under `/docs`, so every `doc_url` resolves on a
//! fresh `serve` with no network.

use std::fmt::Write;

use axum::{Router, response::Html, routing::get};

use crate::{app::AppState, http::error::ErrorCode};

/// Routes under `/docs`.
pub fn routes() -> Router<AppState> {
    Router::new().route("/errors", get(errors_page))
}

async fn errors_page() -> Html<String> {
    Html(render_errors_page())
}

/// The errors reference: one anchored section per code.
pub fn render_errors_page() -> String {
    let mut page = String::from(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Errors - esim-reseller partner API v1</title></head><body>\
         <h1>Errors</h1><p>Branch on <code>error.code</code>, never on <code>error.message</code>.</p>",
    );
    for code in ErrorCode::ALL {
        let _ = write!(
            page,
            "<section id=\"{anchor}\"><h2><code>{code}</code></h2><p>HTTP {status}, type <code>{kind}</code>. {message}</p></section>",
            anchor = code.anchor(),
            code = code.as_str(),
            status = code.status().as_u16(),
            kind = code.error_type(),
            message = code.default_message(),
        );
    }
    page.push_str("</body></html>");
    page
}
