//! One call to a plugin with a deadline: the deadline travels as
//! `grpc-timeout` so the plugin sees it, and is enforced here whether or not
//! the plugin honours it; a failure is a [`CallError`] that says which of
//! the three ways the call went wrong. The agent's device and DRA managers
//! and the CLI's `check` and `conformance` all call plugins through this.

use std::time::Duration;

use tonic::{Code, Request, Response, Status};

/// Why one call to a plugin failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    /// The plugin answered with an error status.
    #[error("{:?}: {}", .0.code(), .0.message())]
    Status(#[source] Status),
    /// The plugin did not answer in time.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The plugin's connection was dropped while the call ran.
    #[error("the plugin disconnected during the call")]
    Disconnected,
}

/// The metadata key that marks a `DeadlineExceeded` as this side's own
/// (the call layer's deadline passed), with the deadline in milliseconds.
const LOCAL_DEADLINE: &str = "nodeplugins-local-deadline-ms";

/// The status a call gets when its deadline passes on this side.
pub fn local_timeout(deadline: Duration) -> Status {
    let mut status = Status::deadline_exceeded(format!("no answer within {deadline:?}"));
    if let Ok(value) = deadline.as_millis().to_string().parse() {
        status.metadata_mut().insert(LOCAL_DEADLINE, value);
    }
    status
}

impl CallError {
    /// A failed call's status: this side's deadline passing is a
    /// [`Timeout`](Self::Timeout), anything else the peer's answer.
    pub fn from_status(status: Status) -> Self {
        let local = status
            .metadata()
            .get(LOCAL_DEADLINE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        match local {
            Some(ms) if status.code() == Code::DeadlineExceeded => {
                Self::Timeout(Duration::from_millis(ms))
            }
            _ => Self::Status(status),
        }
    }

    /// The gRPC code the failure amounts to: the plugin's own, or
    /// `DeadlineExceeded` for a timeout and `Unavailable` for a dropped
    /// connection.
    pub fn code(&self) -> Code {
        match self {
            Self::Status(status) => status.code(),
            Self::Timeout(_) => Code::DeadlineExceeded,
            Self::Disconnected => Code::Unavailable,
        }
    }

    /// What went wrong, without the code: the plugin's message, or this
    /// side's account of a timeout or a dropped connection.
    pub fn message(&self) -> String {
        match self {
            Self::Status(status) => status.message().to_string(),
            other => other.to_string(),
        }
    }
}

/// `message` as a request carrying `timeout` as its deadline.
pub fn with_deadline<T>(message: T, timeout: Duration) -> Request<T> {
    let mut request = Request::new(message);
    request.set_timeout(timeout);
    request
}

/// `call`'s answer if it comes within `timeout`.
pub async fn within<T>(
    timeout: Duration,
    call: impl Future<Output = Result<T, Status>>,
) -> Result<T, CallError> {
    match tokio::time::timeout(timeout, call).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(status)) => Err(CallError::Status(status)),
        Err(_) => Err(CallError::Timeout(timeout)),
    }
}

/// A unary call's answer through a client whose [`CallLayer`] keeps the
/// deadline.
///
/// [`CallLayer`]: crate::call_layer::CallLayer
pub async fn answer<T>(
    call: impl Future<Output = Result<Response<T>, Status>>,
) -> Result<T, CallError> {
    call.await
        .map(Response::into_inner)
        .map_err(CallError::from_status)
}

/// A unary call's answer if it comes within `timeout`.
pub async fn unary<T>(
    timeout: Duration,
    call: impl Future<Output = Result<Response<T>, Status>>,
) -> Result<T, CallError> {
    within(timeout, async { call.await.map(Response::into_inner) }).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_call_that_never_answers_times_out_with_its_deadline() {
        let timeout = Duration::from_secs(3);
        let never = std::future::pending::<Result<Response<()>, Status>>();
        let error = unary(timeout, never).await.unwrap_err();
        assert!(matches!(error, CallError::Timeout(t) if t == timeout));
        assert_eq!(error.code(), Code::DeadlineExceeded);
        assert_eq!(error.to_string(), "no answer within 3s");
    }

    #[tokio::test]
    async fn a_status_keeps_its_code_and_message() {
        let failed = async { Err::<Response<()>, _>(Status::not_found("no such claim")) };
        let error = unary(Duration::from_secs(1), failed).await.unwrap_err();
        assert_eq!(error.code(), Code::NotFound);
        assert_eq!(error.message(), "no such claim");
        assert_eq!(error.to_string(), "NotFound: no such claim");
    }

    #[tokio::test]
    async fn this_sides_deadline_is_a_timeout_and_the_peers_is_its_answer() {
        let ours = async { Err::<Response<()>, _>(local_timeout(Duration::from_secs(2))) };
        let error = answer(ours).await.unwrap_err();
        assert!(matches!(error, CallError::Timeout(t) if t == Duration::from_secs(2)));
        assert_eq!(error.to_string(), "no answer within 2s");
        let theirs = async { Err::<Response<()>, _>(Status::deadline_exceeded("slow disk")) };
        let error = answer(theirs).await.unwrap_err();
        assert!(matches!(error, CallError::Status(_)));
        assert_eq!(error.message(), "slow disk");
    }

    #[test]
    fn the_deadline_travels_with_the_request() {
        let request = with_deadline((), Duration::from_millis(1500));
        let sent = request.metadata().get("grpc-timeout").unwrap();
        assert_eq!(sent.to_str().unwrap(), "1500000u");
    }
}
