//! Code samples of every operation, in curl, Python (requests) and
//! JavaScript (fetch), written from the OpenAPI document: the path, the
//! query parameters that carry an example, the `Idempotency-Key` header and
//! the request body's example. Nothing is written by hand, so a sample
//! cannot drift from the contract; a test runs every sample against a fresh
//! server and checks the answer against the documented status and schema.
//!
//! Every sample reads the same environment: `ESIM_API` (the base URL, ending
//! in `/partner/v1`), `ESIM_KEY` (a secret key) and, for a route that names
//! a resource, the variable of its path parameter (`ORDER_ID`, `PLAN_ID`,
//! `DEPOSIT_ID`, `ICCID`).

use std::fmt::Write;

use serde_json::Value;

/// One operation's samples.
#[derive(Debug, Clone)]
pub struct Samples {
    /// The operation's `operationId`.
    pub operation_id: String,
    /// `GET`, `POST`.
    pub method: String,
    /// The path as documented, e.g. `/orders/{id}`.
    pub path: String,
    /// The status a first successful call answers: 201 or 202 where
    /// documented, else 200.
    pub success_status: u16,
    /// Environment variables the samples read besides `ESIM_API` and `ESIM_KEY`.
    pub variables: Vec<String>,
    pub curl: String,
    pub python: String,
    pub javascript: String,
}

/// The samples of every operation of the document, in document order.
pub fn all(doc: &Value) -> Vec<Samples> {
    let Some(paths) = doc["paths"].as_object() else {
        return Vec::new();
    };
    paths
        .iter()
        .flat_map(|(path, item)| {
            ["get", "post"].into_iter().filter_map(move |method| {
                item.get(method).map(|op| for_operation(path, method, op))
            })
        })
        .collect()
}

/// The environment variable standing for a path parameter of a path.
fn variable_for(path: &str, parameter: &str) -> String {
    match (path.split('/').nth(1), parameter) {
        (_, "iccid") => "ICCID".to_owned(),
        (Some(collection), "id") => {
            let singular = collection.trim_end_matches('s');
            format!("{}_ID", singular.to_ascii_uppercase())
        }
        (_, other) => other.to_ascii_uppercase(),
    }
}

/// What a request is made of, before it is written in a language.
struct Request {
    method: String,
    /// Path segments: text, or a variable to substitute.
    segments: Vec<Segment>,
    query: Vec<(String, String)>,
    authenticated: bool,
    idempotent: bool,
    body: Option<Value>,
}

enum Segment {
    Text(String),
    Variable(String),
}

pub fn for_operation(path: &str, method: &str, op: &Value) -> Samples {
    let request = request_of(path, method, op);
    let variables = request
        .segments
        .iter()
        .filter_map(|s| match s {
            Segment::Variable(name) => Some(name.clone()),
            Segment::Text(_) => None,
        })
        .collect();
    // A route that creates or accepts answers 201 or 202 (its 200, if any,
    // is a replay); others answer 200.
    let success_status = op["responses"]
        .as_object()
        .and_then(|r| {
            r.keys()
                .filter_map(|s| s.parse::<u16>().ok())
                .filter(|s| (200..300).contains(s))
                .max()
        })
        .unwrap_or(200);
    Samples {
        operation_id: op["operationId"].as_str().unwrap_or_default().to_owned(),
        method: method.to_ascii_uppercase(),
        path: path.to_owned(),
        success_status,
        variables,
        curl: curl(&request),
        python: python(&request),
        javascript: javascript(&request),
    }
}

fn request_of(path: &str, method: &str, op: &Value) -> Request {
    let segments = split_path(path);
    let query = op["parameters"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["in"] == "query")
        .filter_map(|p| {
            let example = p.get("example").or_else(|| p["schema"].get("example"))?;
            let value = example
                .as_str()
                .map_or_else(|| example.to_string(), str::to_owned);
            Some((p["name"].as_str()?.to_owned(), value))
        })
        .collect();
    let idempotent = op["parameters"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|p| p["in"] == "header" && p["name"] == "Idempotency-Key");
    Request {
        method: method.to_ascii_uppercase(),
        segments,
        query,
        authenticated: op.get("security").is_some(),
        idempotent,
        body: op["requestBody"]["content"]["application/json"]
            .get("example")
            .cloned(),
    }
}

fn split_path(path: &str) -> Vec<Segment> {
    let mut segments = Vec::new();
    let mut rest = path;
    while let Some(open) = rest.find('{') {
        let close = rest[open..].find('}').map_or(rest.len(), |c| open + c);
        segments.push(Segment::Text(rest[..open].to_owned()));
        segments.push(Segment::Variable(variable_for(
            path,
            &rest[open + 1..close],
        )));
        rest = rest.get(close + 1..).unwrap_or("");
    }
    segments.push(Segment::Text(rest.to_owned()));
    segments
}

fn query_string(query: &[(String, String)]) -> String {
    if query.is_empty() {
        return String::new();
    }
    let pairs: Vec<String> = query.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("?{}", pairs.join("&"))
}

fn pretty(body: &Value) -> String {
    serde_json::to_string_pretty(body).unwrap_or_default()
}

fn curl(request: &Request) -> String {
    let mut url = String::from("$ESIM_API");
    for segment in &request.segments {
        match segment {
            Segment::Text(text) => url.push_str(text),
            Segment::Variable(name) => {
                let _ = write!(url, "${name}");
            }
        }
    }
    url.push_str(&query_string(&request.query));
    let mut out = String::from("curl -sS");
    if request.method != "GET" {
        let _ = write!(out, " -X {}", request.method);
    }
    let _ = write!(out, " \"{url}\"");
    if request.authenticated {
        out.push_str(" \\\n  -H \"Authorization: Bearer $ESIM_KEY\"");
    }
    if request.idempotent {
        out.push_str(" \\\n  -H \"Idempotency-Key: order-$(date +%s%N)\"");
    }
    if let Some(body) = &request.body {
        let _ = write!(
            out,
            " \\\n  -H \"Content-Type: application/json\" \\\n  -d '{}'",
            serde_json::to_string(body).unwrap_or_default()
        );
    }
    out
}

fn python(request: &Request) -> String {
    let mut out = String::from("import os\n");
    if request.idempotent {
        out.push_str("import uuid\n");
    }
    out.push_str("\nimport requests\n\nAPI = os.environ[\"ESIM_API\"]\n");
    let mut url = String::from("f\"{API}");
    for segment in &request.segments {
        match segment {
            Segment::Text(text) => url.push_str(text),
            Segment::Variable(name) => {
                let _ = writeln!(
                    out,
                    "{} = os.environ[\"{name}\"]",
                    name.to_ascii_lowercase()
                );
                let _ = write!(url, "{{{}}}", name.to_ascii_lowercase());
            }
        }
    }
    url.push('"');
    let mut headers = Vec::new();
    if request.authenticated {
        headers.push("\"Authorization\": f\"Bearer {os.environ['ESIM_KEY']}\"".to_owned());
    }
    if request.idempotent {
        headers.push("\"Idempotency-Key\": str(uuid.uuid4())".to_owned());
    }
    let _ = write!(
        out,
        "\nresponse = requests.{}(\n    {url},\n",
        request.method.to_ascii_lowercase()
    );
    if !headers.is_empty() {
        let _ = writeln!(out, "    headers={{{}}},", headers.join(", "));
    }
    if !request.query.is_empty() {
        let params: Vec<String> = request
            .query
            .iter()
            .map(|(k, v)| format!("\"{k}\": \"{v}\""))
            .collect();
        let _ = writeln!(out, "    params={{{}}},", params.join(", "));
    }
    if let Some(body) = &request.body {
        let _ = writeln!(out, "    json={},", python_literal(body, 1));
    }
    out.push_str("    timeout=30,\n)\nprint(response.status_code, response.json())\n");
    out
}

fn javascript(request: &Request) -> String {
    let mut out = String::from("const api = process.env.ESIM_API;\n");
    let mut url = String::from("`${api}");
    for segment in &request.segments {
        match segment {
            Segment::Text(text) => url.push_str(text),
            Segment::Variable(name) => {
                let js = camel(name);
                let _ = writeln!(out, "const {js} = process.env.{name};");
                let _ = write!(url, "${{{js}}}");
            }
        }
    }
    url.push_str(&query_string(&request.query));
    url.push('`');
    let mut headers = Vec::new();
    if request.authenticated {
        headers.push("Authorization: `Bearer ${process.env.ESIM_KEY}`".to_owned());
    }
    if request.idempotent {
        headers.push("\"Idempotency-Key\": crypto.randomUUID()".to_owned());
    }
    if request.body.is_some() {
        headers.push("\"Content-Type\": \"application/json\"".to_owned());
    }
    let _ = write!(
        out,
        "\nconst response = await fetch({url}, {{\n  method: \"{}\",\n",
        request.method
    );
    if !headers.is_empty() {
        let _ = writeln!(out, "  headers: {{ {} }},", headers.join(", "));
    }
    if let Some(body) = &request.body {
        let json = pretty(body).replace('\n', "\n  ");
        let _ = writeln!(out, "  body: JSON.stringify({json}),");
    }
    out.push_str("});\nconsole.log(response.status, await response.json());\n");
    out
}

/// A JSON value as a Python literal, indented by four spaces per level.
fn python_literal(value: &Value, depth: usize) -> String {
    let pad = "    ".repeat(depth + 1);
    let close = "    ".repeat(depth);
    match value {
        Value::Null => "None".to_owned(),
        Value::Bool(true) => "True".to_owned(),
        Value::Bool(false) => "False".to_owned(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => Value::String(s.clone()).to_string(),
        Value::Array(items) if items.is_empty() => "[]".to_owned(),
        Value::Array(items) => {
            let items: Vec<String> = items
                .iter()
                .map(|v| format!("{pad}{},", python_literal(v, depth + 1)))
                .collect();
            format!("[\n{}\n{close}]", items.join("\n"))
        }
        Value::Object(map) if map.is_empty() => "{}".to_owned(),
        Value::Object(map) => {
            let items: Vec<String> = map
                .iter()
                .map(|(k, v)| {
                    format!(
                        "{pad}{}: {},",
                        Value::String(k.clone()),
                        python_literal(v, depth + 1)
                    )
                })
                .collect();
            format!("{{\n{}\n{close}}}", items.join("\n"))
        }
    }
}

/// `ORDER_ID` as `orderId`.
fn camel(name: &str) -> String {
    let mut out = String::new();
    for (index, word) in name.split('_').enumerate() {
        let word = word.to_ascii_lowercase();
        if index == 0 {
            out.push_str(&word);
        } else {
            let mut chars = word.chars();
            if let Some(first) = chars.next() {
                out.push(first.to_ascii_uppercase());
                out.extend(chars);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_parameters_become_named_variables() {
        assert_eq!(variable_for("/orders/{id}", "id"), "ORDER_ID");
        assert_eq!(variable_for("/plans/{id}/price", "id"), "PLAN_ID");
        assert_eq!(variable_for("/deposits/{id}", "id"), "DEPOSIT_ID");
        assert_eq!(variable_for("/esims/{iccid}/usage", "iccid"), "ICCID");
        assert_eq!(camel("ORDER_ID"), "orderId");
    }

    #[test]
    fn an_order_sample_carries_its_key_and_body_in_every_language() {
        let doc = crate::http::openapi::to_value();
        let samples = all(&doc);
        let create = samples
            .iter()
            .find(|s| s.operation_id == "createOrder")
            .unwrap();
        assert_eq!(create.success_status, 202);
        for sample in [&create.curl, &create.python, &create.javascript] {
            assert!(sample.contains("Idempotency-Key"), "{sample}");
            assert!(sample.contains("customer_ref"), "{sample}");
        }
        let show = samples
            .iter()
            .find(|s| s.operation_id == "getOrder")
            .unwrap();
        assert_eq!(show.variables, ["ORDER_ID"]);
        assert!(show.curl.contains("$ESIM_API/orders/$ORDER_ID"));
    }
}
