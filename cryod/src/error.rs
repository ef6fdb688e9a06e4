//! cryod's error type and its one map to gRPC status codes, and to HTTP
//! status codes (the hub's).

use crate::store::StoreError;

/// An operation refused or failed. `Display` is one line meant for the user.
/// It crosses the fleet as it is (an owner's answer to another node), so
/// the asker gives the same status code.
#[derive(Debug, thiserror::Error, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Error {
    /// The request itself is wrong (bad name, bad time, bad path).
    #[error("{0}")]
    Invalid(String),
    /// What the request names does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The request is fine but the state forbids it now.
    #[error("{0}")]
    Precondition(String),
    /// It would clash with something that exists.
    #[error("{0}")]
    Conflict(String),
    /// The part of cryod that would answer has gone (a session ended under
    /// the call, a chamber's supervisor stopped).
    #[error("{0}")]
    Unavailable(String),
    /// cryod's own fault; logged with detail.
    #[error("internal error: {0}")]
    Internal(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The HTTP status the hub answers this kind with: the same decision as
    /// the gRPC code (a precondition is a conflict with the state, in HTTP).
    pub fn http_status(&self) -> axum::http::StatusCode {
        use axum::http::StatusCode;
        match self {
            Error::Invalid(_) => StatusCode::BAD_REQUEST,
            Error::NotFound(_) => StatusCode::NOT_FOUND,
            Error::Precondition(_) | Error::Conflict(_) => StatusCode::CONFLICT,
            Error::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Error::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Conflict(m) => Error::Conflict(m),
            other => Error::Internal(other.to_string()),
        }
    }
}

impl From<Error> for tonic::Status {
    fn from(e: Error) -> Self {
        match e {
            Error::Invalid(m) => tonic::Status::invalid_argument(m),
            Error::NotFound(m) => tonic::Status::not_found(m),
            Error::Precondition(m) => tonic::Status::failed_precondition(m),
            Error::Conflict(m) => tonic::Status::already_exists(m),
            Error::Unavailable(m) => tonic::Status::unavailable(m),
            Error::Internal(m) => {
                tracing::error!(error = %m, "internal error");
                tonic::Status::internal(m)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Error;
    use axum::http::StatusCode;

    /// One decision per kind, the same over HTTP as over gRPC.
    #[test]
    fn each_kind_has_one_http_status() {
        let status = |e: Error| (e.http_status(), tonic::Status::from(e).code());
        assert_eq!(status(Error::Invalid(String::new())), (StatusCode::BAD_REQUEST, tonic::Code::InvalidArgument));
        assert_eq!(status(Error::NotFound(String::new())), (StatusCode::NOT_FOUND, tonic::Code::NotFound));
        assert_eq!(status(Error::Precondition(String::new())), (StatusCode::CONFLICT, tonic::Code::FailedPrecondition));
        assert_eq!(status(Error::Conflict(String::new())), (StatusCode::CONFLICT, tonic::Code::AlreadyExists));
        assert_eq!(
            status(Error::Unavailable(String::new())),
            (StatusCode::SERVICE_UNAVAILABLE, tonic::Code::Unavailable)
        );
        assert_eq!(status(Error::Internal(String::new())), (StatusCode::INTERNAL_SERVER_ERROR, tonic::Code::Internal));
    }
}
