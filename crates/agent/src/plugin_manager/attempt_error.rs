//! Why one registration attempt failed: the registration's own error, or
//! the handler panicking during it.

use nodeplugins_api::retry::Classify;

use super::register::RegisterError;

/// Why a registration attempt failed; its text is what operators see and
/// the plugin was told.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AttemptError {
    /// A step of the registration failed.
    #[error(transparent)]
    Register(#[from] RegisterError),
    /// The handler panicked; the panic's message.
    #[error("RegisterPlugin error -- handler panicked: {0}")]
    Panicked(String),
}

/// Every failed registration is retried on the backoff schedule; the same
/// failure again (said once, not at every retry) is the one with the same
/// text.
impl Classify for AttemptError {}
