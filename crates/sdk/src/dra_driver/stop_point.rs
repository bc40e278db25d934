//! The steps of a prepare at which a test may stop the driver (feature
//! `test-util`), so as to kill it exactly there and check that nothing
//! prepared is lost. With the variable [`STOP_AT_ENV`] naming a step, the
//! server writes `nodeplugins-sdk: stopped at <step>` on stderr when it
//! gets there and waits forever. Without the feature these are no-ops.

/// The environment variable naming the step to stop at (feature
/// `test-util`).
pub const STOP_AT_ENV: &str = "NODEPLUGINS_SDK_STOP_AT";

/// A step of a prepare, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The claims are recorded as being prepared, before the driver is
    /// called.
    Recorded,
    /// The driver answered; nothing of its answer is written yet.
    Answered,
    /// The CDI spec files are written; the record still says the prepare
    /// was interrupted.
    CdiWritten,
    /// The driver's answer is recorded; the kubelet has not heard it.
    Saved,
}

impl Step {
    /// Every step, in order.
    pub const ALL: [Step; 4] = [
        Self::Recorded,
        Self::Answered,
        Self::CdiWritten,
        Self::Saved,
    ];

    /// The step's name, as [`STOP_AT_ENV`] names it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Recorded => "recorded",
            Self::Answered => "answered",
            Self::CdiWritten => "cdi-written",
            Self::Saved => "saved",
        }
    }
}

/// Stops here if the test asked to (feature `test-util`).
#[cfg(feature = "test-util")]
pub(super) async fn stop_point(step: Step) {
    static STOP_AT: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let stop_at = STOP_AT.get_or_init(|| std::env::var(STOP_AT_ENV).ok());
    if stop_at.as_deref() == Some(step.name()) {
        eprintln!("nodeplugins-sdk: stopped at {}", step.name());
        std::future::pending::<()>().await;
    }
}

/// Stops here if the test asked to (feature `test-util`).
#[cfg(not(feature = "test-util"))]
pub(super) async fn stop_point(_step: Step) {}
