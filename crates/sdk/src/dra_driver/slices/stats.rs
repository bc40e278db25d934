//! Counts of what the ResourceSlice publisher did.

/// Counts of what the publisher did, since the driver started.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PublishStats {
    /// Slices created.
    pub creates: u64,
    /// Slices updated.
    pub updates: u64,
    /// Slices deleted.
    pub deletes: u64,
    /// Failed attempts (each also went to the error handler).
    pub failures: u64,
    /// The last failure, until the next success.
    pub last_error: Option<String>,
    /// How many times the publisher found every pool in line with the
    /// server once its watches had listed: at least one once a start's
    /// first look is done.
    pub syncs: u64,
}
