//! One error type that renders itself as the contract's JSON bodies.

use http::{header, HeaderValue, Method, StatusCode};
use serde::Serialize;
use serde_json::{json, Value};
use utoipa::ToSchema;

use super::{json_response, Response};
use crate::core::retry::is_unavailable;
use crate::domain::identity::AuthError;
use crate::domain::rejection::{DomainError, Rejection};
use crate::domain::shared_stores::{StoreError, MAX_ENTRIES_PER_STORE, MAX_STORES_PER_ORGANIZATION};

/// The status of each rejection of the domain: the one place that maps them.
pub fn status_of(rejection: Rejection) -> StatusCode {
    match rejection {
        Rejection::Invalid => StatusCode::BAD_REQUEST,
        Rejection::Forbidden => StatusCode::FORBIDDEN,
        Rejection::NotFound => StatusCode::NOT_FOUND,
        Rejection::Conflict => StatusCode::CONFLICT,
        Rejection::PaymentRequired => StatusCode::PAYMENT_REQUIRED,
        Rejection::Pending => StatusCode::SERVICE_UNAVAILABLE,
    }
}

/// `{ detail }`: authentication failures and the errors of every endpoint outside the
/// shared stores.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Detail {
    pub detail: String,
}

/// `{ error }`: the shared stores' errors; the limit errors add `code` and `limit`.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StoreErrorBody {
    pub error: String,
    /// `shared_store_limit_reached` or `shared_store_entry_limit_reached`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub code: Option<&'static str>,
    /// The limit reached (10 stores, 10,000 entries).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, value_type = Option<u64>)]
    pub limit: Option<u32>,
}

/// A shared-store 400 or 413: `{ error }`, or `{ detail }` for metadata problems.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub enum StoreRefusal {
    Error(StoreErrorBody),
    Detail(Detail),
}

/// A 303 to a response too large for a Lambda function, kept for 10 minutes.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LargeResponse {
    pub detail: String,
    /// Where to GET the whole answer (also the `Location` header).
    pub location: String,
}

/// The challenge of every 401.
pub const BEARER_CHALLENGE: &str = r#"Bearer realm="video-workflow""#;

/// An HTTP error: a status and a JSON body.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub body: Value,
}

impl ApiError {
    /// `{ "error": message }`, the shape of shared-store errors.
    pub fn error(status: StatusCode, message: impl Into<String>) -> Self {
        Self::store(status, StoreErrorBody { error: message.into(), code: None, limit: None })
    }

    /// `{ "detail": message }`, the shape of authentication and general errors.
    pub fn detail(status: StatusCode, message: impl Into<String>) -> Self {
        Self { status, body: json!(Detail { detail: message.into() }) }
    }

    /// A shared-store error body.
    fn store(status: StatusCode, body: StoreErrorBody) -> Self {
        Self { status, body: json!(StoreRefusal::Error(body)) }
    }

    /// A 500 that logs its cause and shows only `message`.
    pub fn internal(error: &dyn std::fmt::Display, message: &'static str) -> Self {
        tracing::error!(error = %error, "{message}");
        Self::error(StatusCode::INTERNAL_SERVER_ERROR, message)
    }

    /// A 503 `{ detail }` that logs its cause: a dependency kept failing or did not
    /// answer within its retry schedule, so the request may succeed if sent again.
    pub fn unavailable(error: &anyhow::Error) -> Self {
        tracing::error!(error = %format!("{error:#}"), "a dependency is unavailable");
        Self::detail(StatusCode::SERVICE_UNAVAILABLE, "The service is temporarily unavailable; try again shortly")
    }

    /// A storage failure outside the shared stores: 503 when a dependency is unavailable,
    /// otherwise a 500 `{ detail: message }` that logs its cause.
    pub fn backend(error: &anyhow::Error, message: String) -> Self {
        if is_unavailable(error) {
            return Self::unavailable(error);
        }
        tracing::error!(error = %format!("{error:#}"), "{message}");
        Self::detail(StatusCode::INTERNAL_SERVER_ERROR, message)
    }

    /// A context's error as the contract's `{ detail }` body: its rejection's status with
    /// its message; a failure of ours is a 503 when a dependency is unavailable, otherwise
    /// a 500 `{ detail: failure }` that logs its cause.
    pub fn refused(error: impl DomainError, failure: impl FnOnce() -> String) -> Self {
        let message = error.to_string();
        match error.rejection() {
            Ok(rejection) => Self::detail(status_of(rejection), message),
            Err(cause) => Self::backend(&cause, failure()),
        }
    }

    /// Renders the response. A 401 carries the `WWW-Authenticate` challenge RFC 9110
    /// requires (the bearer scheme; `X-API-Key` is an API key, not an HTTP scheme).
    pub fn into_response(self) -> Response {
        let mut response = json_response(self.status, &self.body);
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(BEARER_CHALLENGE));
        }
        response
    }

    /// A 405 `{ detail }` with the `Allow` header RFC 9110 requires: the methods the
    /// path does answer.
    pub fn method_not_allowed(allowed: &[&Method], detail: &str) -> Response {
        let mut response = Self::detail(StatusCode::METHOD_NOT_ALLOWED, detail).into_response();
        let list = allowed.iter().map(|method| method.as_str()).collect::<Vec<_>>().join(", ");
        if let Ok(value) = HeaderValue::from_str(&list) {
            response.headers_mut().insert(header::ALLOW, value);
        }
        response
    }

    /// Maps a shared-store failure; `failure` is the contract's 500 text for the endpoint.
    pub fn from_store(error: StoreError, failure: &'static str) -> Self {
        let message = error.to_string();
        match error {
            StoreError::NameRequired
            | StoreError::PutFieldsRequired
            | StoreError::PatchFieldsRequired
            | StoreError::EntriesRequired
            | StoreError::EntriesIncomplete
            | StoreError::Invalid(_) => Self::error(StatusCode::BAD_REQUEST, message),
            StoreError::MetadataNotObject => Self::detail(StatusCode::BAD_REQUEST, message),
            StoreError::MetadataTooLarge => Self::detail(StatusCode::PAYLOAD_TOO_LARGE, message),
            StoreError::BulkTooLarge => Self::error(StatusCode::PAYLOAD_TOO_LARGE, message),
            StoreError::StoreNotFound | StoreError::EntryNotFound => Self::error(StatusCode::NOT_FOUND, message),
            StoreError::EntryIdTaken => Self::error(StatusCode::CONFLICT, message),
            StoreError::StoreLimitReached => Self::store(
                StatusCode::CONFLICT,
                StoreErrorBody {
                    error: message,
                    code: Some("shared_store_limit_reached"),
                    limit: Some(MAX_STORES_PER_ORGANIZATION),
                },
            ),
            StoreError::EntryLimitReached => Self::store(
                StatusCode::CONFLICT,
                StoreErrorBody {
                    error: message,
                    code: Some("shared_store_entry_limit_reached"),
                    limit: Some(MAX_ENTRIES_PER_STORE),
                },
            ),
            // The contract's 500 body, also when a dependency is unavailable (retries spent).
            StoreError::Backend(cause) => Self::internal(&format!("{cause:#}"), failure),
        }
    }
}

impl From<AuthError> for ApiError {
    fn from(error: AuthError) -> Self {
        match error {
            AuthError::ApiAccessRequired => Self::detail(StatusCode::FORBIDDEN, error.to_string()),
            AuthError::InvalidApiKey | AuthError::NoOrganization => {
                Self::detail(StatusCode::UNAUTHORIZED, error.to_string())
            }
            AuthError::Backend(cause) => {
                tracing::error!(error = %format!("{cause:#}"), "authentication failed");
                let status = if is_unavailable(&cause) {
                    StatusCode::SERVICE_UNAVAILABLE
                } else {
                    StatusCode::INTERNAL_SERVER_ERROR
                };
                Self::detail(status, "authentication is unavailable, try again")
            }
        }
    }
}
