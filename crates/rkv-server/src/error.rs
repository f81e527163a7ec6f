//! The one place that maps failures to HTTP: every error a client can cause or see becomes
//! a status code and OpenAI's error body
//! `{"error": {"message", "type", "param", "code"}}`, including axum's own JSON
//! rejections and the engine's refusals.
//!
//! Must not know: routes, the engine's internals beyond its public error types.

use axum::extract::rejection::JsonRejection;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use rkv_engine::handle::SubmitError;
use serde_json::{json, Value};
use thiserror::Error;

/// An error answered to a client.
#[derive(Debug, Clone, Error, PartialEq)]
pub enum ApiError {
    /// Malformed or unsatisfiable input (400).
    #[error("{message}")]
    InvalidRequest {
        message: String,
        param: Option<String>,
    },
    /// `model` names a model this server does not serve (404).
    #[error("The model `{0}` does not exist or you do not have access to it.")]
    ModelNotFound(String),
    /// The body is not declared as JSON (415).
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// The body is larger than the server accepts (413).
    #[error("{0}")]
    PayloadTooLarge(String),
    /// No such route (404).
    #[error("{0}")]
    NotFound(String),
    /// The route exists with another method (405).
    #[error("{0}")]
    MethodNotAllowed(String),
    /// The engine's queue is full (429).
    #[error("{0}")]
    QueueFull(String),
    /// The engine is shutting down (503).
    #[error("{0}")]
    Unavailable(String),
    /// A generation failed inside the engine (500).
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    /// A 400 without a named parameter.
    pub fn invalid(message: impl Into<String>) -> Self {
        ApiError::InvalidRequest {
            message: message.into(),
            param: None,
        }
    }

    /// A 400 about the request field `param`.
    pub fn invalid_param(param: &str, message: impl Into<String>) -> Self {
        ApiError::InvalidRequest {
            message: message.into(),
            param: Some(param.to_string()),
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::InvalidRequest { .. } => StatusCode::BAD_REQUEST,
            ApiError::ModelNotFound(_) | ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::QueueFull(_) => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// OpenAI's `error.type`.
    fn kind(&self) -> &'static str {
        match self {
            ApiError::InvalidRequest { .. }
            | ApiError::ModelNotFound(_)
            | ApiError::UnsupportedMediaType(_)
            | ApiError::PayloadTooLarge(_)
            | ApiError::NotFound(_)
            | ApiError::MethodNotAllowed(_) => "invalid_request_error",
            ApiError::QueueFull(_) => "requests",
            ApiError::Unavailable(_) | ApiError::Internal(_) => "server_error",
        }
    }

    /// OpenAI's `error.code`.
    fn code(&self) -> Option<&'static str> {
        match self {
            ApiError::ModelNotFound(_) => Some("model_not_found"),
            ApiError::QueueFull(_) => Some("rate_limit_exceeded"),
            ApiError::Unavailable(_) => Some("service_unavailable"),
            _ => None,
        }
    }

    fn param(&self) -> Option<&str> {
        match self {
            ApiError::InvalidRequest { param, .. } => param.as_deref(),
            ApiError::ModelNotFound(_) => Some("model"),
            _ => None,
        }
    }

    /// The JSON body: `{"error": {...}}`. Also what a stream sends when a sample fails.
    pub fn body(&self) -> Value {
        json!({
            "error": {
                "message": self.to_string(),
                "type": self.kind(),
                "param": self.param(),
                "code": self.code(),
            }
        })
    }
}

impl From<SubmitError> for ApiError {
    fn from(e: SubmitError) -> Self {
        match e {
            SubmitError::Invalid(inner) => {
                let param = match inner {
                    rkv_engine::EngineError::TooLong { .. } => Some("max_tokens".to_string()),
                    rkv_engine::EngineError::Config(_) => Some("kv_compression".to_string()),
                    rkv_engine::EngineError::Grammar(_) => Some("response_format".to_string()),
                    _ => None,
                };
                ApiError::InvalidRequest {
                    message: inner.to_string(),
                    param,
                }
            }
            SubmitError::QueueFull { .. } => ApiError::QueueFull(e.to_string()),
            SubmitError::Closed => ApiError::Unavailable(e.to_string()),
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> Self {
        let detail = r.body_text();
        match r {
            JsonRejection::MissingJsonContentType(_) => ApiError::UnsupportedMediaType(
                "the body must be JSON sent with `Content-Type: application/json`".into(),
            ),
            JsonRejection::BytesRejection(b) if b.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                ApiError::PayloadTooLarge(detail)
            }
            JsonRejection::JsonDataError(_) => ApiError::InvalidRequest {
                param: field_of(&detail),
                message: format!("invalid JSON body: {detail}"),
            },
            _ => ApiError::invalid(format!("invalid JSON body: {detail}")),
        }
    }
}

/// The field a JSON data error names (`... target type: echo: invalid type ...`: `echo`).
fn field_of(detail: &str) -> Option<String> {
    let (_, rest) = detail.split_once("target type: ")?;
    let (path, _) = rest.split_once(": ")?;
    let ok = !path.is_empty()
        && path
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '[' | ']'));
    ok.then(|| path.to_string())
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = (self.status(), axum::Json(self.body())).into_response();
        if matches!(self, ApiError::QueueFull(_)) {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_has_openai_fields() {
        let e = ApiError::ModelNotFound("gpt-9".into());
        assert_eq!(e.status(), StatusCode::NOT_FOUND);
        let b = e.body();
        assert_eq!(b["error"]["code"], "model_not_found");
        assert_eq!(b["error"]["param"], "model");
        assert_eq!(b["error"]["type"], "invalid_request_error");
        assert!(b["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("gpt-9")));
    }

    #[test]
    fn submit_errors_map_to_statuses() {
        let full: ApiError = SubmitError::QueueFull {
            waiting: 5,
            bound: 5,
        }
        .into();
        assert_eq!(full.status(), StatusCode::TOO_MANY_REQUESTS);
        let closed: ApiError = SubmitError::Closed.into();
        assert_eq!(closed.status(), StatusCode::SERVICE_UNAVAILABLE);
        let long: ApiError = SubmitError::Invalid(rkv_engine::EngineError::TooLong {
            prompt: 10,
            max_new: 10,
            context: 12,
        })
        .into();
        assert_eq!(long.status(), StatusCode::BAD_REQUEST);
        assert_eq!(long.body()["error"]["param"], "max_tokens");
    }
}
