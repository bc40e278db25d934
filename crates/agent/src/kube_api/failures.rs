//! One kind of write's failures in a row, and what each end of a write
//! tells operators: a new error once (not again while it repeats), and a
//! catch-up after failures. The latest-state writes ([`super::write_state`])
//! and the ResourceSlice wipe keep theirs in one.

use std::sync::Arc;

use super::error::KubeApiError;

/// What the end of a write tells operators.
#[derive(Debug, Clone)]
pub(crate) enum Outcome {
    /// Nothing new.
    Quiet,
    /// A new error (said once per change of error).
    Failed(Arc<KubeApiError>),
    /// Written after failures.
    CaughtUp,
}

/// Failures in a row and the last one's error.
#[derive(Debug, Default)]
pub(crate) struct Failures {
    /// How many writes in a row failed.
    pub(crate) count: u32,
    /// Why the last one did, while they keep failing.
    pub(crate) last: Option<Arc<KubeApiError>>,
}

impl Failures {
    /// Whether the last write failed.
    pub(crate) fn failing(&self) -> bool {
        self.count > 0
    }

    /// A write succeeded.
    pub(crate) fn succeeded(&mut self) -> Outcome {
        let recovered = self.failing();
        *self = Self::default();
        if recovered {
            Outcome::CaughtUp
        } else {
            Outcome::Quiet
        }
    }

    /// A write failed with `error`.
    pub(crate) fn failed(&mut self, error: Arc<KubeApiError>) -> Outcome {
        self.count = self.count.saturating_add(1);
        // Errors from the API are not comparable; their text is.
        let repeated = self
            .last
            .replace(error.clone())
            .is_some_and(|last| last.to_string() == error.to_string());
        if repeated {
            Outcome::Quiet
        } else {
            Outcome::Failed(error)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_is_said_once_while_it_repeats_and_recovery_is_said_once() {
        let mut failures = Failures::default();
        assert!(matches!(failures.succeeded(), Outcome::Quiet));
        let gone = Arc::new(KubeApiError::NoNode("n".into()));
        assert!(matches!(failures.failed(gone.clone()), Outcome::Failed(_)));
        assert!(matches!(failures.failed(gone), Outcome::Quiet));
        let other = Arc::new(KubeApiError::NoNode("m".into()));
        assert!(matches!(failures.failed(other), Outcome::Failed(_)));
        assert_eq!(failures.count, 3);
        assert!(matches!(failures.succeeded(), Outcome::CaughtUp));
        assert!(!failures.failing());
        assert!(matches!(failures.succeeded(), Outcome::Quiet));
    }
}
