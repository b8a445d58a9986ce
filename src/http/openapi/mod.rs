//! The OpenAPI 3.1 document of the partner API, generated from the handlers'
//! `#[utoipa::path]` attributes and the resources' `ToSchema` derives.
//!
//! What is the same on every route is added here once, by [`CommonParts`]:
//! the bearer scheme, the error body (its `code` enum is the vocabulary in
//! [`ErrorCode::ALL`]), the 401/403/429 every authenticated route can answer,
//! the 400 of an unknown query parameter and the 413 of an oversized body,
//! `X-Request-Id` on every answer and the `X-RateLimit-*` headers on the
//! answers of rate-limited routes. `openapi.json` at the repository root is
//! this document, checked by a test.

mod examples;
mod shape;

use utoipa::{
    Modify, OpenApi,
    openapi::{
        self, Components, HttpMethod, ObjectBuilder, OpenApi as Document, RefOr, Response,
        ResponseBuilder, Schema, Type,
        content::ContentBuilder,
        header::HeaderBuilder,
        link::LinkBuilder,
        path::Operation,
        schema::AdditionalProperties,
        security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme},
        server::ServerBuilder,
    },
};

use serde_json::Value;

use super::{deposits, error::ErrorCode, esims, health, me, orders, plans};
use crate::domain::states::{
    AccountStatus, DepositStatus, EsimStatus, FailureCode, LedgerKind, Mode, OrderStatus,
};

/// The revision of `v1` this document describes: the date of the newest
/// entry in `docs/changelog.md`. The spec fixes `info.version` at `v1`
/// (Versioning, rule 1), so revisions are dated in `info.x-revision` instead.
pub const REVISION: &str = "2026-12-06";

/// Name of the bearer security scheme in the document.
const BEARER: &str = "bearer";
/// Name of the error body schema.
pub const ERROR_SCHEMA: &str = "Error";
/// Name of the schema inside the error body.
const ERROR_DETAIL_SCHEMA: &str = "ErrorDetail";
/// Name of the error vocabulary schema.
const ERROR_CODE_SCHEMA: &str = "ErrorCode";
/// Name of the error family schema.
const ERROR_TYPE_SCHEMA: &str = "ErrorType";

#[derive(OpenApi)]
#[openapi(
    info(
        title = "esim-reseller partner API",
        version = "v1",
        description = "Server-to-server JSON API for buying eSIM data plans from a prepaid USD float. \
Amounts are integer cents. Every error has the same body; branch on `error.code`.",
    ),
    paths(
        health::health,
        me::me,
        me::balance,
        deposits::ledger,
        deposits::create,
        deposits::list,
        deposits::show,
        plans::list,
        plans::show,
        plans::price,
        plans::destinations,
        orders::create,
        orders::list,
        orders::show,
        esims::list,
        esims::show,
        esims::install,
        esims::usage,
    ),
    components(schemas(
        PlanType, Unlimited, DepositStatus, LedgerKind, OrderStatus, EsimStatus, Mode, AccountStatus,
        FailureCode,
    )),
    modifiers(&CommonParts),
    tags(
        (name = "account", description = "The partner, its balance and its ledger."),
        (name = "deposits", description = "Topping up the float."),
        (name = "catalogue", description = "Plans, prices and destinations."),
        (name = "orders", description = "Buying plans; provisioning happens after the 202."),
        (name = "esims", description = "Delivered profiles, install payloads and usage."),
        (name = "health", description = "Liveness of the service and its database."),
    )
)]
struct PartnerApi;

/// Ends the description of a header that is on every answer of its kind.
const ALWAYS: &str = "Always present.";

/// The document as utoipa builds it.
pub fn document() -> Document {
    PartnerApi::openapi()
}

/// The document as served at `GET /partner/v1/openapi.json`: utoipa's, with
/// `required: true` on the headers that are always present (a field utoipa's
/// header object lacks).
pub fn to_value() -> Value {
    let mut doc = serde_json::to_value(document()).unwrap_or(Value::Null);
    if let Some(info) = doc.get_mut("info").and_then(Value::as_object_mut) {
        info.insert("x-revision".to_owned(), Value::from(REVISION));
    }
    mark_required_headers(&mut doc);
    shape::apply(&mut doc);
    examples::apply(&mut doc);
    doc
}

/// The document as pretty JSON with a trailing newline (the committed file's form).
pub fn to_json() -> String {
    let mut json = serde_json::to_string_pretty(&to_value()).unwrap_or_default();
    json.push('\n');
    json
}

fn mark_required_headers(node: &mut Value) {
    match node {
        Value::Object(map) => {
            if let Some(Value::Object(headers)) = map.get_mut("headers") {
                for header in headers.values_mut() {
                    let always = header
                        .get("description")
                        .and_then(Value::as_str)
                        .is_some_and(|d| d.ends_with(ALWAYS));
                    if always && let Value::Object(header) = header {
                        header.insert("required".to_owned(), Value::Bool(true));
                    }
                }
            }
            map.values_mut().for_each(mark_required_headers);
        }
        Value::Array(items) => items.iter_mut().for_each(mark_required_headers),
        _ => {}
    }
}

/// `plan_type` of a plan and the `type` filter.
#[derive(utoipa::ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum PlanType {
    Fixed,
    Daily,
}

/// The `unlimited` filter: the strings `true` and `false` only.
#[derive(utoipa::ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum Unlimited {
    True,
    False,
}

/// The served document, built once.
static SERVED: std::sync::LazyLock<String> = std::sync::LazyLock::new(to_json);

/// `GET /partner/v1/openapi.json`: no key, no rate limit.
pub async fn serve() -> impl axum::response::IntoResponse {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        SERVED.as_str(),
    )
}

/// Adds what every route shares (see the module comment).
struct CommonParts;

impl Modify for CommonParts {
    fn modify(&self, doc: &mut Document) {
        doc.servers = Some(vec![
            ServerBuilder::new()
                .url(crate::http::PARTNER_BASE)
                .description(Some("The partner API, relative to the service's address"))
                .build(),
        ]);
        let components = doc.components.get_or_insert_with(Components::new);
        components
            .schemas
            .insert(ERROR_CODE_SCHEMA.to_owned(), RefOr::T(error_code_schema()));
        components
            .schemas
            .insert(ERROR_TYPE_SCHEMA.to_owned(), RefOr::T(error_type_schema()));
        components.schemas.insert(
            ERROR_DETAIL_SCHEMA.to_owned(),
            RefOr::T(error_detail_schema()),
        );
        components.add_security_scheme(
            BEARER,
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "`Authorization: Bearer svc_sk_live_...` (live) or `svc_sk_test_...` (sandbox)",
                    ))
                    .build(),
            ),
        );
        for (path, item) in doc.paths.paths.iter_mut() {
            for (method, operation) in operations(item) {
                let authenticated = path.as_str() != "/health";
                if authenticated {
                    operation.security =
                        Some(vec![SecurityRequirement::new(BEARER, Vec::<String>::new())]);
                    add_auth_errors(operation);
                }
                add_request_errors(operation);
                add_headers(operation, authenticated);
                add_links(path, method, operation);
            }
        }
    }
}

/// The operations of one path item with their methods.
fn operations(item: &mut openapi::PathItem) -> Vec<(HttpMethod, &mut Operation)> {
    [
        (HttpMethod::Get, item.get.as_mut()),
        (HttpMethod::Post, item.post.as_mut()),
    ]
    .into_iter()
    .filter_map(|(method, op)| op.map(|op| (method, op)))
    .collect()
}

/// The error body in `#[utoipa::path]` responses; its schema is [`error_schema`].
pub struct ErrorBody;

impl utoipa::PartialSchema for ErrorBody {
    fn schema() -> RefOr<Schema> {
        RefOr::T(error_schema())
    }
}

impl utoipa::ToSchema for ErrorBody {
    fn name() -> std::borrow::Cow<'static, str> {
        ERROR_SCHEMA.into()
    }
}

/// The error vocabulary: every `error.code`, and every order `failure_code`
/// drawn from it.
fn error_code_schema() -> Schema {
    let codes: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(codes))
        .description(Some(
            "The error vocabulary. Stable: a code never changes meaning and is never removed; \
new codes may be added, so keep a default branch.",
        ))
        .into()
}

/// The coarse family of an error.
fn error_type_schema() -> Schema {
    let mut types: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.error_type()).collect();
    types.sort_unstable();
    types.dedup();
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(types))
        .description(Some(
            "The coarse family of an error; branch on `code` for anything finer.",
        ))
        .into()
}

/// What went wrong: `{type, code, message, doc_url, request_id, param, ...}`.
fn error_detail_schema() -> Schema {
    let string = |description: &str| {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .description(Some(description))
    };
    let inner = ObjectBuilder::new()
        .property("type", openapi::Ref::from_schema_name(ERROR_TYPE_SCHEMA))
        .required("type")
        .property(
            "code",
            openapi::schema::RefBuilder::new()
                .ref_location_from_schema_name(ERROR_CODE_SCHEMA)
                .description(Some("Stable forever; the value to branch on.")),
        )
        .required("code")
        .property(
            "message",
            string("For people; may change without notice. Never parse it."),
        )
        .required("message")
        .property(
            "doc_url",
            string("The code's anchor on the errors reference page.")
                .format(Some(openapi::SchemaFormat::Custom("uri".to_owned()))),
        )
        .required("doc_url")
        .property("request_id", string("Also in the `X-Request-Id` header."))
        .required("request_id")
        .property(
            "param",
            ObjectBuilder::new()
                .schema_type(openapi::schema::SchemaType::from_iter([
                    Type::String,
                    Type::Null,
                ]))
                .description(Some("The offending field, where one field was wrong.")),
        )
        .required("param")
        .additional_properties(Some(AdditionalProperties::FreeForm(true)))
        .description(Some(
            "Extra fields may appear: `details` (validation), `balance_cents` and `required_cents` \
(402), `mode`, `rate_class` and `retry_after_seconds` (429 window limit), `retry_after_seconds` \
(502 at order acceptance: the supplier is at capacity), `retryable` (503).",
        ));
    inner.into()
}

/// The error body: `{"error": ErrorDetail}`.
fn error_schema() -> Schema {
    ObjectBuilder::new()
        .property("error", openapi::Ref::from_schema_name(ERROR_DETAIL_SCHEMA))
        .required("error")
        .additional_properties(Some(AdditionalProperties::FreeForm(false)))
        .description(Some(
            "Every refusal has this body, whatever the route; branch on `error.code`.",
        ))
        .into()
}

/// A response with the error body.
pub fn error_response(description: &str) -> Response {
    ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(openapi::Ref::from_schema_name(ERROR_SCHEMA)))
                .build(),
        )
        .build()
}

/// 401, 403 and 429, which every authenticated route can answer.
fn add_auth_errors(operation: &mut Operation) {
    add_error(
        operation,
        "401",
        "`auth.missing`, `auth.invalid_key` or `auth.key_expired`",
    );
    add_error(
        operation,
        "403",
        "`auth.ip_not_allowed`, `partner.not_live`, `partner.suspended` or `partner.closed`",
    );
    add_error(
        operation,
        "429",
        "`rate_limit.exceeded`: the window limit of the route's class (with `Retry-After` and \
`X-RateLimit-*`) or the failed-authentication budget (without them)",
    );
}

/// The 400 every route answers to a query parameter it does not take (or
/// one named twice), and the 413 of every route that takes a body, to one
/// past the service's limit.
fn add_request_errors(operation: &mut Operation) {
    const UNKNOWN_QUERY: &str = "an unknown or repeated query parameter (refused on every route)";
    if let Some(response) = error_entry(operation, "400")
        && !response.description.contains(UNKNOWN_QUERY)
    {
        response.description = if response.description.is_empty() {
            format!("`request.invalid`: {UNKNOWN_QUERY}")
        } else {
            format!("{}; also {UNKNOWN_QUERY}", response.description)
        };
    }
    if operation.request_body.is_some() {
        add_error(
            operation,
            "413",
            "`request.invalid`: the body is larger than the service takes (`http.body_limit_bytes`, \
64 KiB unless configured)",
        );
    }
}

/// Documents the error answer `status` with `description`, in front of what
/// the route already says of it.
fn add_error(operation: &mut Operation, status: &str, description: &str) {
    let Some(response) = error_entry(operation, status) else {
        return;
    };
    if response.description.is_empty() {
        response.description = description.to_owned();
    } else if !response.description.contains(description) {
        response.description = format!("{description}; {}", response.description);
    }
}

/// The operation's answer `status`, made an error answer with no
/// description yet if the route had none (`None` for a shared reference).
fn error_entry<'a>(operation: &'a mut Operation, status: &str) -> Option<&'a mut Response> {
    let entry = operation
        .responses
        .responses
        .entry(status.to_owned())
        .or_insert_with(|| RefOr::T(error_response("")));
    match entry {
        RefOr::T(response) => Some(response),
        RefOr::Ref(_) => None,
    }
}

/// `X-Request-Id` on every answer; the rate-limit headers where a class applies.
fn add_headers(operation: &mut Operation, rate_limited: bool) {
    for (status, response) in operation.responses.responses.iter_mut() {
        let RefOr::T(response) = response else {
            continue;
        };
        // utoipa's header object has no `required`; `to_value` marks the
        // headers named in `description` as required ("Always present.").
        let header = |description: &str, schema: Type, required: bool| {
            let description = if required {
                format!("{description} {ALWAYS}")
            } else {
                description.to_owned()
            };
            RefOr::T(
                HeaderBuilder::new()
                    .schema(Some(ObjectBuilder::new().schema_type(schema)))
                    .description(Some(description))
                    .build(),
            )
        };
        response.headers.insert(
            "X-Request-Id".to_owned(),
            header(
                "Identifies this request; quote it to support.",
                Type::String,
                true,
            ),
        );
        if !rate_limited {
            continue;
        }
        // A refusal before the key is known (401, some 403s and the
        // failed-authentication 429) carries no window, so these are optional.
        let window = status.starts_with('2');
        response.headers.insert(
            "X-RateLimit-Limit".to_owned(),
            header("Requests permitted in the window.", Type::Integer, window),
        );
        response.headers.insert(
            "X-RateLimit-Remaining".to_owned(),
            header("Requests left; floors at 0.", Type::Integer, window),
        );
        response.headers.insert(
            "X-RateLimit-Reset".to_owned(),
            header(
                "Unix seconds at which the window ends.",
                Type::Integer,
                window,
            ),
        );
        if status == "429" {
            response.headers.insert(
                "Retry-After".to_owned(),
                header(
                    "Whole seconds, never 0; only on the window kind of 429.",
                    Type::Integer,
                    false,
                ),
            );
        }
    }
}

/// Links from a created resource to its read, for stateful clients and tests.
fn add_links(path: &str, method: HttpMethod, operation: &mut Operation) {
    let target = match (path, method) {
        ("/orders", HttpMethod::Post) => ("getOrder", "id"),
        ("/deposits", HttpMethod::Post) => ("getDeposit", "id"),
        _ => return,
    };
    for (status, response) in operation.responses.responses.iter_mut() {
        let RefOr::T(response) = response else {
            continue;
        };
        if !status.starts_with('2') {
            continue;
        }
        response.links.insert(
            target.0.to_owned(),
            RefOr::T(
                LinkBuilder::new()
                    .operation_id(target.0)
                    .parameter(target.1, "$response.body#/id")
                    .description("Read what was created.")
                    .build(),
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::states::Vocabulary;

    #[test]
    fn every_partner_operation_has_an_operation_id_and_x_request_id() {
        let doc = document();
        for (path, item) in doc.paths.paths.iter() {
            for (method, op) in [("get", &item.get), ("post", &item.post)] {
                let Some(op) = op else { continue };
                assert!(op.operation_id.is_some(), "{method} {path}");
                for (status, response) in &op.responses.responses {
                    let RefOr::T(response) = response else {
                        panic!("{method} {path} {status} is a reference")
                    };
                    assert!(
                        response.headers.contains_key("X-Request-Id"),
                        "{method} {path} {status}"
                    );
                }
            }
        }
    }

    /// The enum values of a schema component.
    fn enum_of(name: &str) -> Vec<String> {
        let json = to_value();
        json["components"]["schemas"][name]["enum"]
            .as_array()
            .unwrap_or_else(|| panic!("{name} is not an enum component"))
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect()
    }

    #[test]
    fn documented_enums_are_the_stored_vocabularies() {
        fn words<T: Vocabulary>() -> Vec<String> {
            T::ALL
                .iter()
                .map(|value| value.as_str().to_owned())
                .collect()
        }
        assert_eq!(enum_of("OrderStatus"), words::<OrderStatus>());
        assert_eq!(enum_of("DepositStatus"), words::<DepositStatus>());
        assert_eq!(enum_of("LedgerKind"), words::<LedgerKind>());
        assert_eq!(enum_of("Mode"), words::<Mode>());
        assert_eq!(enum_of("AccountStatus"), words::<AccountStatus>());
        assert_eq!(enum_of("FailureCode"), words::<FailureCode>());
    }

    #[test]
    fn the_error_code_enum_is_the_whole_vocabulary() {
        let json = to_value();
        let codes = &json["components"]["schemas"]["ErrorCode"]["enum"];
        assert_eq!(codes.as_array().unwrap().len(), ErrorCode::ALL.len());
    }
}
