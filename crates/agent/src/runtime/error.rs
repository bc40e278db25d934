//! Why a runtime call failed.

use std::time::Duration;

use nodeplugins_api::retry::Classify;

/// Why a runtime call failed, naming the call.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RuntimeError {
    /// The runtime's socket could not be dialed.
    #[error("container runtime at {endpoint}: cannot connect: {message}")]
    Connect {
        /// The runtime's endpoint.
        endpoint: String,
        /// Why.
        message: String,
    },
    /// The runtime answered the call with an error.
    #[error("container runtime {operation}: {code:?}: {message}")]
    Call {
        /// The CRI method.
        operation: &'static str,
        /// The gRPC status code.
        code: tonic::Code,
        /// The runtime's message.
        message: String,
    },
    /// The runtime did not answer within the call's deadline.
    #[error("container runtime {operation}: no answer within {deadline:?}")]
    Deadline {
        /// The CRI method.
        operation: &'static str,
        /// The deadline.
        deadline: Duration,
    },
    /// The runtime answered without something it must send.
    #[error("container runtime {operation}: the answer has no {missing}")]
    Incomplete {
        /// The CRI method.
        operation: &'static str,
        /// What is missing.
        missing: &'static str,
    },
    /// No such sandbox or container (any more).
    #[error("container runtime: no {what} {id}")]
    NotFound {
        /// `sandbox` or `container`.
        what: &'static str,
        /// Its id.
        id: String,
    },
    /// The image is absent and the pull policy forbids pulling it.
    #[error("image {image} is not present with pull policy Never")]
    ImageNeverPulled {
        /// The image.
        image: String,
    },
}

impl RuntimeError {
    /// The gRPC code of a failed call, if it was one.
    pub fn code(&self) -> Option<tonic::Code> {
        match self {
            Self::Call { code, .. } => Some(*code),
            Self::Deadline { .. } => Some(tonic::Code::DeadlineExceeded),
            Self::NotFound { .. } => Some(tonic::Code::NotFound),
            _ => None,
        }
    }

    /// The failure as the kubelet's CRI client words it (grpc-go's
    /// `rpc error: code = NotFound desc = ...`).
    pub fn go_text(&self) -> String {
        match self {
            Self::Call { code, message, .. } => {
                format!("rpc error: code = {code:?} desc = {message}")
            }
            Self::Deadline { .. } => {
                "rpc error: code = DeadlineExceeded desc = context deadline exceeded".into()
            }
            other => other.to_string(),
        }
    }

    /// Whether the runtime said the thing asked about does not exist.
    pub fn is_not_found(&self) -> bool {
        self.code() == Some(tonic::Code::NotFound)
    }
}

/// A failed runtime call is tried again on its caller's schedule; the
/// same failure is one that reads the same.
impl Classify for RuntimeError {}
