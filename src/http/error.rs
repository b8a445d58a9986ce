//! The one error type of the HTTP surface and its stable vocabulary.
//!
//! A handler returns [`ApiError`]; its `IntoResponse` leaves the error in the
//! response's extensions and the envelope middleware (`http::envelope`) writes
//! the spec's body once the request id and `doc_url` base are known. Errors
//! that axum or tower raise themselves (unknown path, wrong method, body too
//! large, a panic) arrive there as bare statuses and are mapped by
//! [`ApiError::from_bare_status`], so no plain-text body ever leaves.

use std::fmt;

use axum::{
    http::{HeaderName, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde_json::{Map, Value};

use crate::domain::{
    admission::Busy,
    ordering::Refusal,
    partner::{self, Mode},
};

/// Every error code of the partner API. Stable forever: add, never change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    RequestInvalid,
    PlanInactive,
    AuthMissing,
    AuthInvalidKey,
    AuthKeyExpired,
    BalanceInsufficient,
    AuthIpNotAllowed,
    PartnerNotLive,
    PartnerSuspended,
    PartnerClosed,
    Forbidden,
    PlanNotFound,
    OrderNotFound,
    EsimNotFound,
    NotFound,
    IdempotencyKeyReused,
    OrderInProgress,
    OrderNotCancellable,
    Conflict,
    PlanUnavailable,
    RateLimitExceeded,
    InternalError,
    SupplierError,
    ServiceUnavailable,
}

impl ErrorCode {
    /// The whole vocabulary, in the spec's order (the errors reference page
    /// and its tests walk this list).
    pub const ALL: [ErrorCode; 24] = [
        ErrorCode::RequestInvalid,
        ErrorCode::PlanInactive,
        ErrorCode::AuthMissing,
        ErrorCode::AuthInvalidKey,
        ErrorCode::AuthKeyExpired,
        ErrorCode::BalanceInsufficient,
        ErrorCode::AuthIpNotAllowed,
        ErrorCode::PartnerNotLive,
        ErrorCode::PartnerSuspended,
        ErrorCode::PartnerClosed,
        ErrorCode::Forbidden,
        ErrorCode::PlanNotFound,
        ErrorCode::OrderNotFound,
        ErrorCode::EsimNotFound,
        ErrorCode::NotFound,
        ErrorCode::IdempotencyKeyReused,
        ErrorCode::OrderInProgress,
        ErrorCode::OrderNotCancellable,
        ErrorCode::Conflict,
        ErrorCode::PlanUnavailable,
        ErrorCode::RateLimitExceeded,
        ErrorCode::InternalError,
        ErrorCode::SupplierError,
        ErrorCode::ServiceUnavailable,
    ];

    /// The value clients branch on.
    pub fn as_str(self) -> &'static str {
        use ErrorCode::*;
        match self {
            RequestInvalid => "request.invalid",
            PlanInactive => "plan.inactive",
            AuthMissing => "auth.missing",
            AuthInvalidKey => "auth.invalid_key",
            AuthKeyExpired => "auth.key_expired",
            BalanceInsufficient => "balance.insufficient",
            AuthIpNotAllowed => "auth.ip_not_allowed",
            PartnerNotLive => "partner.not_live",
            PartnerSuspended => "partner.suspended",
            PartnerClosed => "partner.closed",
            Forbidden => "forbidden",
            PlanNotFound => "plan.not_found",
            OrderNotFound => "order.not_found",
            EsimNotFound => "esim.not_found",
            NotFound => "not_found",
            IdempotencyKeyReused => "idempotency.key_reused",
            OrderInProgress => "order.in_progress",
            OrderNotCancellable => "order.not_cancellable",
            Conflict => "conflict",
            PlanUnavailable => "plan.unavailable",
            RateLimitExceeded => "rate_limit.exceeded",
            InternalError => "internal_error",
            SupplierError => "supplier_error",
            ServiceUnavailable => "service_unavailable",
        }
    }

    /// The code with this wire name.
    pub fn from_wire(code: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == code)
    }

    /// The HTTP status the spec gives the code.
    pub fn status(self) -> StatusCode {
        use ErrorCode::*;
        match self {
            RequestInvalid | PlanInactive => StatusCode::BAD_REQUEST,
            AuthMissing | AuthInvalidKey | AuthKeyExpired => StatusCode::UNAUTHORIZED,
            BalanceInsufficient => StatusCode::PAYMENT_REQUIRED,
            AuthIpNotAllowed | PartnerNotLive | PartnerSuspended | PartnerClosed | Forbidden => {
                StatusCode::FORBIDDEN
            }
            PlanNotFound | OrderNotFound | EsimNotFound | NotFound => StatusCode::NOT_FOUND,
            IdempotencyKeyReused | OrderInProgress | OrderNotCancellable | Conflict => {
                StatusCode::CONFLICT
            }
            PlanUnavailable => StatusCode::UNPROCESSABLE_ENTITY,
            RateLimitExceeded => StatusCode::TOO_MANY_REQUESTS,
            InternalError => StatusCode::INTERNAL_SERVER_ERROR,
            SupplierError => StatusCode::BAD_GATEWAY,
            ServiceUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The coarse family (`error.type`).
    pub fn error_type(self) -> &'static str {
        use ErrorCode::*;
        match self {
            RequestInvalid | PlanInactive => "invalid_request_error",
            AuthMissing | AuthInvalidKey | AuthKeyExpired | AuthIpNotAllowed => {
                "authentication_error"
            }
            BalanceInsufficient => "insufficient_balance",
            PartnerNotLive | PartnerSuspended | PartnerClosed | Forbidden => "permission_error",
            PlanNotFound | OrderNotFound | EsimNotFound | NotFound => "not_found_error",
            IdempotencyKeyReused => "idempotency_error",
            OrderInProgress | OrderNotCancellable | Conflict => "conflict_error",
            PlanUnavailable => "unavailable_error",
            RateLimitExceeded => "rate_limit_error",
            InternalError | ServiceUnavailable => "api_error",
            SupplierError => "supplier_error",
        }
    }

    /// The anchor of the code on the errors reference page.
    pub fn anchor(self) -> String {
        self.as_str().replace('.', "-")
    }

    /// What a message says when nothing more specific is known.
    pub fn default_message(self) -> &'static str {
        use ErrorCode::*;
        match self {
            RequestInvalid => "The request is invalid.",
            PlanInactive => "The plan is not on sale.",
            AuthMissing => "An Authorization: Bearer header is required.",
            AuthInvalidKey => "The API key is not valid.",
            AuthKeyExpired => "The API key has expired.",
            BalanceInsufficient => "The balance is too low for this order.",
            AuthIpNotAllowed => "Requests from this source address are not allowed for this key.",
            PartnerNotLive => "The account is not approved for live trading yet.",
            PartnerSuspended => "The account is suspended.",
            PartnerClosed => "The account is closed.",
            Forbidden => "This operation is not allowed.",
            PlanNotFound => "No such plan.",
            OrderNotFound => "No such order.",
            EsimNotFound => "No such eSIM.",
            NotFound => "Not found.",
            IdempotencyKeyReused => {
                "The Idempotency-Key was already used with a different request."
            }
            OrderInProgress => "The order is in progress.",
            OrderNotCancellable => "The order cannot be cancelled.",
            Conflict => "A concurrent request won a race; nothing moved.",
            PlanUnavailable => "The plan cannot be priced for this account.",
            RateLimitExceeded => "Too many requests.",
            InternalError => {
                "Something went wrong on our side; retry with the same Idempotency-Key."
            }
            SupplierError => "The supplier failed; retry with the same Idempotency-Key.",
            ServiceUnavailable => "The service is unavailable; nothing was charged.",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

pub use crate::domain::validation::{Invalid, Violation, Violations};

/// Every validation failure of a request: one 400 naming each.
impl From<Invalid> for ApiError {
    fn from(invalid: Invalid) -> Self {
        ApiError::validation(invalid.0)
    }
}

/// An error on its way to the client. Boxed so that `Result<T, ApiError>`
/// stays one pointer wide on the happy path.
#[derive(Debug, Clone)]
pub struct ApiError(Box<ErrorDetail>);

/// What an [`ApiError`] says.
#[derive(Debug, Clone)]
pub struct ErrorDetail {
    /// The stable code.
    pub code: ErrorCode,
    /// Set only where the status differs from the code's own (405, 413).
    pub status: Option<StatusCode>,
    /// Human text; may change at any time.
    pub message: String,
    /// The one offending field, if exactly one was wrong.
    pub param: Option<String>,
    /// Extra members of `error` (`details`, `balance_cents`, ...).
    pub extras: Map<String, Value>,
    /// Extra response headers (`Retry-After`, `Idempotency-Replayed`, ...).
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

impl std::ops::Deref for ApiError {
    type Target = ErrorDetail;

    fn deref(&self) -> &ErrorDetail {
        &self.0
    }
}

impl std::ops::DerefMut for ApiError {
    fn deref_mut(&mut self) -> &mut ErrorDetail {
        &mut self.0
    }
}

impl ApiError {
    /// An error with the code's default message.
    pub fn new(code: ErrorCode) -> Self {
        Self(Box::new(ErrorDetail {
            code,
            status: None,
            message: code.default_message().to_owned(),
            param: None,
            extras: Map::new(),
            headers: Vec::new(),
        }))
    }

    /// Replaces the message.
    pub fn with_message(mut self, message: impl Into<String>) -> Self {
        self.message = message.into();
        self
    }

    /// Names the offending field.
    pub fn with_param(mut self, param: impl Into<String>) -> Self {
        self.param = Some(param.into());
        self
    }

    /// Adds a member beside the six standard ones.
    pub fn with_extra(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.extras.insert(key.to_owned(), value.into());
        self
    }

    /// Adds a response header.
    pub fn with_header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.headers.push((name, value));
        self
    }

    /// A 400 `request.invalid` about one field.
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self::validation(vec![Violation {
            param: Some(param.into()),
            message: message.into(),
        }])
    }

    /// A 400 `request.invalid` not tied to one field (malformed JSON, ...).
    pub fn invalid_request(message: impl Into<String>) -> Self {
        Self::validation(vec![Violation {
            param: None,
            message: message.into(),
        }])
    }

    /// A 400 `request.invalid` carrying every failure in `details`; `param`
    /// is set when exactly one field was wrong.
    pub fn validation(violations: Vec<Violation>) -> Self {
        let mut params: Vec<&str> = violations
            .iter()
            .filter_map(|v| v.param.as_deref())
            .collect();
        params.dedup();
        let param = match params.as_slice() {
            [only] if violations.iter().all(|v| v.param.is_some()) => Some((*only).to_owned()),
            _ => None,
        };
        let message = match violations.as_slice() {
            [one] => match &one.param {
                Some(p) => format!("`{p}`: {}", one.message),
                None => one.message.clone(),
            },
            many => format!("{} problems with the request; see details.", many.len()),
        };
        let details: Vec<Value> = violations
            .iter()
            .map(|v| serde_json::json!({ "param": v.param, "message": v.message }))
            .collect();
        let mut error = Self::new(ErrorCode::RequestInvalid).with_message(message);
        error.param = param;
        error.with_extra("details", details)
    }

    /// A 500 whose cause is logged here and never shown to the client.
    pub fn internal(cause: impl fmt::Display) -> Self {
        tracing::error!(error = %cause, "internal error");
        Self::new(ErrorCode::InternalError)
    }

    /// Maps a status raised outside our handlers to the spec's code.
    pub fn from_bare_status(status: StatusCode) -> Self {
        let code = match status.as_u16() {
            400 => ErrorCode::RequestInvalid,
            401 => ErrorCode::AuthInvalidKey,
            402 => ErrorCode::BalanceInsufficient,
            403 => ErrorCode::Forbidden,
            404 => ErrorCode::NotFound,
            409 => ErrorCode::Conflict,
            422 => ErrorCode::PlanUnavailable,
            429 => ErrorCode::RateLimitExceeded,
            502 => ErrorCode::SupplierError,
            503 => ErrorCode::ServiceUnavailable,
            // Other client errors (405, 406, 408, 411, 413, 414, 415, 431) are
            // malformed requests; other server errors are our fault.
            405..=499 => ErrorCode::RequestInvalid,
            _ => ErrorCode::InternalError,
        };
        let mut error = Self::new(code);
        if code.status() != status {
            error.status = Some(status);
            error.message = match status {
                StatusCode::METHOD_NOT_ALLOWED => "This method is not allowed on this path.".into(),
                StatusCode::PAYLOAD_TOO_LARGE => "The request body is too large.".into(),
                StatusCode::UNSUPPORTED_MEDIA_TYPE => {
                    "Content-Type must be application/json.".into()
                }
                StatusCode::REQUEST_TIMEOUT => "The request took too long to arrive.".into(),
                other => other
                    .canonical_reason()
                    .unwrap_or("The request is invalid.")
                    .into(),
            };
        }
        error
    }

    /// A 413 in the spec's envelope.
    pub fn body_too_large() -> Self {
        Self::from_bare_status(StatusCode::PAYLOAD_TOO_LARGE)
    }

    /// The status the response carries.
    pub fn http_status(&self) -> StatusCode {
        self.status.unwrap_or_else(|| self.code.status())
    }

    /// The spec's body: `{"error": {type, code, message, doc_url, request_id, param, ...extras}}`.
    pub fn body(&self, request_id: &str, docs_base: &str) -> Value {
        let mut error = Map::with_capacity(6 + self.extras.len());
        error.insert("type".into(), self.code.error_type().into());
        error.insert("code".into(), self.code.as_str().into());
        error.insert("message".into(), self.message.clone().into());
        error.insert(
            "doc_url".into(),
            format!("{docs_base}/errors#{}", self.code.anchor()).into(),
        );
        error.insert("request_id".into(), request_id.into());
        error.insert(
            "param".into(),
            self.param.clone().map_or(Value::Null, Value::String),
        );
        for (key, value) in &self.extras {
            error.insert(key.clone(), value.clone());
        }
        serde_json::json!({ "error": error })
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = self.http_status().into_response();
        for (name, value) in &self.headers {
            response.headers_mut().insert(name.clone(), value.clone());
        }
        response.extensions_mut().insert(self);
        response
    }
}

/// The spec's error for an order refusal: its code, message, `param` and
/// the amounts of a 402.
impl From<Refusal> for ApiError {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::PlanNotFound => ApiError::new(ErrorCode::PlanNotFound).with_param("plan_id"),
            Refusal::PlanInactive => ApiError::new(ErrorCode::PlanInactive).with_param("plan_id"),
            Refusal::PlanUnavailable(why) => ApiError::new(ErrorCode::PlanUnavailable)
                .with_message(why.reason())
                .with_param("plan_id"),
            Refusal::Gated(gate) => ApiError::new(match gate {
                partner::Refusal::NotLive => ErrorCode::PartnerNotLive,
                partner::Refusal::Suspended => ErrorCode::PartnerSuspended,
                partner::Refusal::Closed => ErrorCode::PartnerClosed,
            }),
            Refusal::Insufficient {
                mode,
                balance_cents,
                required_cents,
            } => {
                let refusal = ApiError::new(ErrorCode::BalanceInsufficient)
                    .with_extra("balance_cents", balance_cents)
                    .with_extra("required_cents", required_cents);
                match mode {
                    Mode::Sandbox => refusal.with_extra("mode", "sandbox"),
                    Mode::Live => refusal,
                }
            }
            Refusal::KeyReused { other_mode } => {
                let why = if other_mode {
                    "This Idempotency-Key was used by a key of the other mode."
                } else {
                    "This Idempotency-Key was used with a different request; use a new key or resend the original body."
                };
                ApiError::new(ErrorCode::IdempotencyKeyReused)
                    .with_message(why)
                    .with_param("Idempotency-Key")
            }
            Refusal::SupplierBusy {
                busy,
                retry_after_seconds,
            } => ApiError::new(ErrorCode::SupplierError)
                .with_message(format!(
                    "{} cannot deliver this order within the provisioning deadline right now; nothing was charged. Retry with the same Idempotency-Key after {retry_after_seconds} s.",
                    match busy {
                        Busy::Settling => "Provisioning",
                        Busy::Capacity | Busy::FairShare => "The supplier",
                    }
                ))
                .with_extra("retry_after_seconds", retry_after_seconds)
                .with_header(header::RETRY_AFTER, HeaderValue::from(retry_after_seconds)),
        }
    }
}

/// An account actor's failure, as the spec's error.
impl From<crate::actors::account::AccountError> for ApiError {
    fn from(err: crate::actors::account::AccountError) -> Self {
        use crate::actors::account::AccountError;
        match err {
            AccountError::Internal(cause) => ApiError::internal(cause),
            AccountError::Conflict { message, param } => {
                let conflict = ApiError::new(ErrorCode::Conflict).with_message(message);
                match param {
                    Some(param) => conflict.with_param(param),
                    None => conflict,
                }
            }
            AccountError::Refused(refusal) => ApiError::from(refusal),
        }
    }
}

/// A deposit operation's failure, as the spec's error.
impl From<crate::deposits::DepositError> for ApiError {
    fn from(err: crate::deposits::DepositError) -> Self {
        use crate::deposits::DepositError;
        match err {
            DepositError::Unavailable { retryable } => {
                let refusal = ApiError::new(ErrorCode::ServiceUnavailable)
                    .with_message("The invoice could not be opened; nothing was charged.");
                if retryable {
                    refusal.with_extra("retryable", true)
                } else {
                    refusal
                }
            }
            DepositError::BadSignature => ApiError::new(ErrorCode::AuthInvalidKey)
                .with_message("The callback signature does not verify."),
            DepositError::NotJson => ApiError::invalid_request("The callback body is not JSON."),
            DepositError::Account(err) => ApiError::from(err),
            DepositError::Internal(cause) => ApiError::internal(cause),
        }
    }
}

impl From<sea_orm::DbErr> for ApiError {
    fn from(err: sea_orm::DbErr) -> Self {
        ApiError::internal(format_args!("database: {err}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_a_unique_anchor_and_the_spec_status() {
        let mut anchors: Vec<String> = ErrorCode::ALL.iter().map(|c| c.anchor()).collect();
        anchors.sort();
        anchors.dedup();
        assert_eq!(anchors.len(), ErrorCode::ALL.len());
        assert_eq!(
            ErrorCode::IdempotencyKeyReused.anchor(),
            "idempotency-key_reused"
        );
        assert_eq!(ErrorCode::BalanceInsufficient.status().as_u16(), 402);
        assert_eq!(ErrorCode::SupplierError.status().as_u16(), 502);
    }

    #[test]
    fn bare_statuses_map_to_the_spec_codes() {
        let cases = [
            (400, "request.invalid"),
            (401, "auth.invalid_key"),
            (402, "balance.insufficient"),
            (403, "forbidden"),
            (404, "not_found"),
            (409, "conflict"),
            (422, "plan.unavailable"),
            (429, "rate_limit.exceeded"),
            (500, "internal_error"),
            (502, "supplier_error"),
            (503, "service_unavailable"),
            (405, "request.invalid"),
            (413, "request.invalid"),
            (504, "internal_error"),
        ];
        for (status, code) in cases {
            let err = ApiError::from_bare_status(StatusCode::from_u16(status).unwrap());
            assert_eq!(err.code.as_str(), code, "status {status}");
            assert_eq!(err.http_status().as_u16(), status);
        }
    }

    #[test]
    fn the_body_has_the_six_fields_and_extras() {
        let body = ApiError::new(ErrorCode::BalanceInsufficient)
            .with_extra("balance_cents", 5)
            .body("req_1", "http://x/docs");
        let error = &body["error"];
        assert_eq!(error["type"], "insufficient_balance");
        assert_eq!(error["code"], "balance.insufficient");
        assert_eq!(
            error["doc_url"],
            "http://x/docs/errors#balance-insufficient"
        );
        assert_eq!(error["request_id"], "req_1");
        assert!(error["param"].is_null());
        assert_eq!(error["balance_cents"], 5);
        assert!(error["message"].is_string());
    }

    #[test]
    fn param_is_named_only_when_one_field_was_wrong() {
        let one = ApiError::validation(vec![
            Violation {
                param: Some("limit".into()),
                message: "a".into(),
            },
            Violation {
                param: Some("limit".into()),
                message: "b".into(),
            },
        ]);
        assert_eq!(one.param.as_deref(), Some("limit"));
        let two = ApiError::validation(vec![
            Violation {
                param: Some("limit".into()),
                message: "a".into(),
            },
            Violation {
                param: Some("cursor".into()),
                message: "b".into(),
            },
        ]);
        assert_eq!(two.param, None);
        assert_eq!(two.extras["details"].as_array().map(Vec::len), Some(2));
    }
}
