//! Typed errors of the gateway: every refusal is `{"error": code, "detail", "field", ...}`
//! (docs/gateway.md, "Errors"), returned as the [`Error`] variant of its code, so callers
//! match what they mean:
//!
//! ```no_run
//! # use jobqueue_client::{Client, EnqueueOptions, Error};
//! # let client = Client::new("http://127.0.0.1:8000", "jqt_...");
//! let options = EnqueueOptions { id: Some("welcome/42".into()), ..Default::default() };
//! match client.enqueue("emails.send", serde_json::json!({}), &options) {
//!     Ok(answer) => println!("{}", answer.jid),
//!     Err(Error::DuplicateJob(e)) => println!("held by {:?}", e.jid),
//!     Err(e) => return Err(e),
//! }
//! # Ok::<(), Error>(())
//! ```

use std::fmt;

use serde_json::Value;

/// The body of an error answer, with its status and `Retry-After`.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    /// The HTTP status; 0 when no answer came.
    pub status: u16,
    /// The body's `error` code, e.g. `invalid_request`, `lease_lost`.
    pub code: String,
    /// The body's sentence for people.
    pub detail: String,
    /// The request field at fault (`priority`, `jobs[3].queue`).
    pub field: Option<String>,
    /// The refused job's position in a batch.
    pub index: Option<u64>,
    /// The package's own code of an `invalid_request` (`invalid_option`...).
    pub reason: Option<String>,
    /// The holder of a duplicate id (409 `duplicate_job`).
    pub jid: Option<String>,
    /// The scope a 403 lacked.
    pub scope: Option<String>,
    /// Seconds to wait before trying again (`Retry-After` of a 429 or 503).
    pub retry_after: Option<f64>,
    /// The whole decoded body (`Value::Null` when the answer was not JSON).
    pub body: Value,
}

impl ApiError {
    /// An error of `status` from its decoded `body` (or the raw `text` when it is not a
    /// JSON error body).
    pub fn from_answer(
        status: u16,
        body: Option<Value>,
        text: &str,
        retry_after: Option<&str>,
    ) -> Self {
        let body = match body {
            Some(value) if value.get("error").map_or(false, Value::is_string) => value,
            _ => serde_json::json!({
                "error": format!("http_{}", status),
                "detail": text.chars().take(500).collect::<String>(),
            }),
        };
        let text_of = |name: &str| body.get(name).and_then(Value::as_str).map(str::to_owned);
        ApiError {
            status,
            code: text_of("error").unwrap_or_default(),
            detail: text_of("detail").unwrap_or_default(),
            field: text_of("field"),
            index: body.get("index").and_then(Value::as_u64),
            reason: text_of("reason"),
            jid: text_of("jid"),
            scope: text_of("scope"),
            retry_after: retry_after
                .and_then(|v| v.trim().parse::<f64>().ok())
                .map(|v| v.max(0.0)),
            body,
        }
    }

    pub(crate) fn local(code: &str, detail: String) -> Self {
        ApiError {
            status: 0,
            code: code.to_owned(),
            detail: detail.clone(),
            field: None,
            index: None,
            reason: None,
            jid: None,
            scope: None,
            retry_after: None,
            body: serde_json::json!({"error": code, "detail": detail}),
        }
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.status, self.code, self.detail)?;
        if let Some(field) = &self.field {
            write!(f, " (field {})", field)?;
        }
        Ok(())
    }
}

/// An error of a gateway call: one variant per error code of the gateway, plus
/// [`Error::Unreachable`] (no answer) and [`Error::Decode`] (an answer of the wrong shape).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Error {
    /// 400 `bad_request`: a path or query parameter is malformed; `field` names it.
    BadRequest(ApiError),
    /// 422 `invalid_request`: a body field is invalid (`field`, and `index` in a batch).
    InvalidRequest(ApiError),
    /// 401 `unauthorized`: no token, or an unknown, revoked or expired one.
    Unauthorized(ApiError),
    /// 402 `pro_required`: a Pro unique mode or route without a valid licence.
    ProRequired(ApiError),
    /// 403 `forbidden`: the token lacks the scope (`scope`) or is not allowed the queue.
    Forbidden(ApiError),
    /// 404 `not_found`: no such job, a free id, or no such route.
    NotFound(ApiError),
    /// 405 `method_not_allowed`: the route exists, not with this method.
    MethodNotAllowed(ApiError),
    /// 409 `duplicate_job`: the id is held; `jid` is the holder's.
    DuplicateJob(ApiError),
    /// 409 `lease_lost`: a report on a job no longer held under that lease token.
    LeaseLost(ApiError),
    /// 413 `body_too_large`: the body is over the gateway's `MAX_BODY_BYTES`.
    BodyTooLarge(ApiError),
    /// 415 `not_json`: the body was not JSON.
    NotJson(ApiError),
    /// 429 `rate_limited`: the token is over its rate; wait `retry_after` seconds.
    RateLimited(ApiError),
    /// 503 `lock_timeout`: a creation lock timed out.
    LockTimeout(ApiError),
    /// 503 `database_unavailable`: the gateway's database did not answer.
    DatabaseUnavailable(ApiError),
    /// Another 502, 503 or 504.
    ServiceUnavailable(ApiError),
    /// No answer: the connection failed (`connection_failed`) or timed out (`timeout`).
    Unreachable(ApiError),
    /// Any other error status.
    Other(ApiError),
    /// A success answer that is not the documented JSON.
    Decode(String),
}

impl Error {
    /// The typed error of an answer: by its `error` code, else by its status.
    pub fn from_api(error: ApiError) -> Self {
        match error.code.as_str() {
            "bad_request" => return Error::BadRequest(error),
            "invalid_request" => return Error::InvalidRequest(error),
            "unauthorized" => return Error::Unauthorized(error),
            "pro_required" => return Error::ProRequired(error),
            "forbidden" => return Error::Forbidden(error),
            "not_found" => return Error::NotFound(error),
            "method_not_allowed" => return Error::MethodNotAllowed(error),
            "duplicate_job" => return Error::DuplicateJob(error),
            "lease_lost" => return Error::LeaseLost(error),
            "body_too_large" => return Error::BodyTooLarge(error),
            "not_json" => return Error::NotJson(error),
            "rate_limited" => return Error::RateLimited(error),
            "lock_timeout" => return Error::LockTimeout(error),
            "database_unavailable" => return Error::DatabaseUnavailable(error),
            _ => {}
        }
        match error.status {
            0 => Error::Unreachable(error),
            400 => Error::BadRequest(error),
            401 => Error::Unauthorized(error),
            402 => Error::ProRequired(error),
            403 => Error::Forbidden(error),
            404 => Error::NotFound(error),
            405 => Error::MethodNotAllowed(error),
            413 => Error::BodyTooLarge(error),
            415 => Error::NotJson(error),
            422 => Error::InvalidRequest(error),
            429 => Error::RateLimited(error),
            502..=504 => Error::ServiceUnavailable(error),
            _ => Error::Other(error),
        }
    }

    /// The error's body, status and code (None for [`Error::Decode`]).
    pub fn api(&self) -> Option<&ApiError> {
        match self {
            Error::BadRequest(e)
            | Error::InvalidRequest(e)
            | Error::Unauthorized(e)
            | Error::ProRequired(e)
            | Error::Forbidden(e)
            | Error::NotFound(e)
            | Error::MethodNotAllowed(e)
            | Error::DuplicateJob(e)
            | Error::LeaseLost(e)
            | Error::BodyTooLarge(e)
            | Error::NotJson(e)
            | Error::RateLimited(e)
            | Error::LockTimeout(e)
            | Error::DatabaseUnavailable(e)
            | Error::ServiceUnavailable(e)
            | Error::Unreachable(e)
            | Error::Other(e) => Some(e),
            Error::Decode(_) => None,
        }
    }

    /// The HTTP status (0: no answer, or an answer of the wrong shape).
    pub fn status(&self) -> u16 {
        self.api().map_or(0, |e| e.status)
    }

    /// The gateway's `error` code (`decode` for [`Error::Decode`]).
    pub fn code(&self) -> &str {
        self.api().map_or("decode", |e| e.code.as_str())
    }

    /// The variant's name, e.g. `DuplicateJob`.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::BadRequest(_) => "BadRequest",
            Error::InvalidRequest(_) => "InvalidRequest",
            Error::Unauthorized(_) => "Unauthorized",
            Error::ProRequired(_) => "ProRequired",
            Error::Forbidden(_) => "Forbidden",
            Error::NotFound(_) => "NotFound",
            Error::MethodNotAllowed(_) => "MethodNotAllowed",
            Error::DuplicateJob(_) => "DuplicateJob",
            Error::LeaseLost(_) => "LeaseLost",
            Error::BodyTooLarge(_) => "BodyTooLarge",
            Error::NotJson(_) => "NotJson",
            Error::RateLimited(_) => "RateLimited",
            Error::LockTimeout(_) => "LockTimeout",
            Error::DatabaseUnavailable(_) => "DatabaseUnavailable",
            Error::ServiceUnavailable(_) => "ServiceUnavailable",
            Error::Unreachable(_) => "Unreachable",
            Error::Other(_) => "Other",
            Error::Decode(_) => "Decode",
        }
    }

    /// Whether trying again later may succeed: no answer, a 429 or a 503.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::Unreachable(_)
                | Error::RateLimited(_)
                | Error::LockTimeout(_)
                | Error::DatabaseUnavailable(_)
                | Error::ServiceUnavailable(_)
        )
    }

    /// Seconds from the `Retry-After` header, if any.
    pub fn retry_after(&self) -> Option<f64> {
        self.api().and_then(|e| e.retry_after)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Decode(text) => write!(
                f,
                "the gateway's answer is not of the documented shape: {}",
                text
            ),
            other => match other.api() {
                Some(api) => write!(f, "{}", api),
                None => Ok(()),
            },
        }
    }
}

impl std::error::Error for Error {}
