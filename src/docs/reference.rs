//! The API reference, rendered from the OpenAPI document (one section per
//! operation with its code samples, one per schema), and the errors
//! reference (one anchored section per code).

use std::fmt::Write;

use serde_json::Value;

use super::{head, samples};
use crate::http::error::ErrorCode;

/// HTML-escapes text for element content and attribute values.
pub(super) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Text with `code` spans, escaped.
pub(super) fn prose(text: &str) -> String {
    escape(text)
        .split('`')
        .enumerate()
        .map(|(i, part)| {
            if i % 2 == 1 {
                format!("<code>{part}</code>")
            } else {
                part.to_owned()
            }
        })
        .collect()
}

fn str_at<'a>(value: &'a Value, key: &str) -> &'a str {
    value.get(key).and_then(Value::as_str).unwrap_or("")
}

/// A one-line summary of a schema: its type or the component it names,
/// with its bounds.
fn schema_summary(schema: &Value) -> String {
    if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
        let name = reference.rsplit('/').next().unwrap_or(reference);
        return format!("<a href=\"#schema-{0}\">{0}</a>", escape(name));
    }
    if let Some(options) = schema.get("oneOf").and_then(Value::as_array) {
        return options
            .iter()
            .map(schema_summary)
            .collect::<Vec<_>>()
            .join(" | ");
    }
    let mut out = match schema.get("type") {
        Some(Value::Array(types)) => types
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" | "),
        Some(Value::String(t)) if t == "array" => format!(
            "array of {}",
            schema.get("items").map(schema_summary).unwrap_or_default()
        ),
        Some(Value::String(t)) => t.clone(),
        _ => "any".to_owned(),
    };
    for key in [
        "format",
        "pattern",
        "minimum",
        "maximum",
        "multipleOf",
        "minLength",
        "maxLength",
    ] {
        if let Some(bound) = schema.get(key) {
            let bound = bound
                .as_str()
                .map_or_else(|| bound.to_string(), str::to_owned);
            let _ = write!(out, ", {key} <code>{}</code>", escape(&bound));
        }
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        let values: Vec<String> = values
            .iter()
            .map(|v| format!("<code>{}</code>", escape(v.as_str().unwrap_or_default())))
            .collect();
        let _ = write!(out, ": {}", values.join(", "));
    }
    out
}

/// The API reference: one section per operation (anchored by its
/// `operationId`), then one per schema (anchored `schema-<name>`).
pub(crate) fn render_api_page(doc: &Value) -> String {
    let mut page = head("API reference");
    let info = &doc["info"];
    let _ = write!(
        page,
        "<h1>{} ({})</h1><p>{}</p><p>Base path <code>/partner/v1</code>. Authenticate with \
         <code>Authorization: Bearer &lt;key&gt;</code> on every route but <code>/health</code>. \
         Errors: see the <a href=\"/docs/errors\">errors reference</a>. Each route shows a request in \
         curl, Python and JavaScript, generated from this document's examples, and the answer it gets.</p>\
         <h2>Routes</h2><ul>",
        escape(str_at(info, "title")),
        escape(str_at(info, "version")),
        prose(str_at(info, "description")),
    );
    let empty = serde_json::Map::new();
    let paths = doc["paths"].as_object().unwrap_or(&empty);
    let operations: Vec<(&str, &str, &Value)> = paths
        .iter()
        .flat_map(|(path, item)| {
            ["get", "post"]
                .into_iter()
                .filter_map(move |method| item.get(method).map(|op| (path.as_str(), method, op)))
        })
        .collect();
    for (path, method, op) in &operations {
        let id = str_at(op, "operationId");
        let _ = write!(
            page,
            "<li><a href=\"#{id}\"><span class=\"method\">{method}</span> {path}</a></li>",
            id = escape(id),
            path = escape(path),
        );
    }
    page.push_str("</ul>");
    for (path, method, op) in &operations {
        render_operation(&mut page, path, method, op);
    }
    page.push_str("<h2>Schemas</h2>");
    let schemas = doc["components"]["schemas"].as_object().unwrap_or(&empty);
    for (name, schema) in schemas {
        render_schema(&mut page, name, schema);
    }
    page.push_str(super::FOOT);
    page
}

fn render_operation(page: &mut String, path: &str, method: &str, op: &Value) {
    let _ = write!(
        page,
        "<section id=\"{id}\"><h2><span class=\"method\">{method}</span> <code>{path}</code></h2>",
        id = escape(str_at(op, "operationId")),
        path = escape(path),
    );
    if op.get("security").is_none() {
        page.push_str("<p>No key needed.</p>");
    }
    if let Some(params) = op.get("parameters").and_then(Value::as_array) {
        page.push_str("<h3>Parameters</h3><table><tr><th>name</th><th>in</th><th>required</th><th>schema</th><th>description</th></tr>");
        for param in params {
            let _ = write!(
                page,
                "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                escape(str_at(param, "name")),
                escape(str_at(param, "in")),
                param
                    .get("required")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
                schema_summary(&param["schema"]),
                prose(str_at(param, "description")),
            );
        }
        page.push_str("</table>");
    }
    if let Some(body) = op.get("requestBody") {
        let _ = write!(
            page,
            "<h3>Body</h3><p><code>application/json</code>: {}</p>",
            schema_summary(&body["content"]["application/json"]["schema"])
        );
    }
    page.push_str("<h3>Answers</h3><table><tr><th>status</th><th>body</th><th>description</th><th>headers</th></tr>");
    if let Some(responses) = op.get("responses").and_then(Value::as_object) {
        for (status, response) in responses {
            let headers: Vec<String> = response
                .get("headers")
                .and_then(Value::as_object)
                .map(|h| {
                    h.keys()
                        .map(|k| format!("<code>{}</code>", escape(k)))
                        .collect()
                })
                .unwrap_or_default();
            let _ = write!(
                page,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                escape(status),
                schema_summary(&response["content"]["application/json"]["schema"]),
                prose(str_at(response, "description")),
                headers.join(" "),
            );
        }
    }
    page.push_str("</table>");
    render_samples(page, path, method, op);
    page.push_str("</section>");
}

/// The operation's request in three languages, and the example answer.
fn render_samples(page: &mut String, path: &str, method: &str, op: &Value) {
    let sample = samples::for_operation(path, method, op);
    page.push_str("<h3>Example</h3>");
    if !sample.variables.is_empty() {
        let _ = write!(
            page,
            "<p>Set <code>ESIM_API</code>, <code>ESIM_KEY</code> and {} first.</p>",
            sample
                .variables
                .iter()
                .map(|v| format!("<code>{}</code>", escape(v)))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    for (language, code) in [
        ("curl", &sample.curl),
        ("Python (requests)", &sample.python),
        ("JavaScript (fetch)", &sample.javascript),
    ] {
        let _ = write!(
            page,
            "<details class=\"sample\"{open}><summary>{language}</summary><pre><code>{}</code></pre></details>",
            escape(code),
            open = if language == "curl" { " open" } else { "" },
        );
    }
    let status = sample.success_status.to_string();
    if let Some(example) = op["responses"][&status]["content"]["application/json"].get("example") {
        let _ = write!(
            page,
            "<p>Answer <code>{status}</code>:</p><pre><code>{}</code></pre>",
            escape(&serde_json::to_string_pretty(example).unwrap_or_default())
        );
    }
}

fn render_schema(page: &mut String, name: &str, schema: &Value) {
    let _ = write!(
        page,
        "<section id=\"schema-{name}\"><h3>{name}</h3><p>{}</p>",
        prose(str_at(schema, "description")),
        name = escape(name),
    );
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        page.push_str(
            "<table><tr><th>field</th><th>schema</th><th>required</th><th>description</th></tr>",
        );
        for (field, property) in properties {
            let _ = write!(
                page,
                "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td></tr>",
                escape(field),
                schema_summary(property),
                required.contains(&field.as_str()),
                prose(str_at(property, "description")),
            );
        }
        page.push_str("</table>");
    } else {
        let _ = write!(page, "<p>{}</p>", schema_summary(schema));
    }
    page.push_str("</section>");
}

/// The errors reference: one anchored section per code.
pub(crate) fn render_errors_page() -> String {
    let mut page = head("Errors");
    page.push_str(
        "<h1>Errors</h1><p>Branch on <code>error.code</code>, never on <code>error.message</code>. \
         Every error has the same body; see <a href=\"/docs/guides/idempotency\">idempotency and retries</a> \
         for what to retry.</p>",
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
    page.push_str(super::FOOT);
    page
}
