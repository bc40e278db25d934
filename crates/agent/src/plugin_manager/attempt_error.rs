//! Why one registration attempt failed: the registration's own error, or
//! the handler panicking during it.

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

impl AttemptError {
    /// The same failure again (logged once, not at every retry): errors
    /// are not comparable, their text is.
    pub(crate) fn same_as(&self, other: &Self) -> bool {
        self.to_string() == other.to_string()
    }
}
