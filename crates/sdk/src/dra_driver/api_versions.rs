//! Which DRAPlugin API versions a driver serves.

/// Which DRAPlugin versions to serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiVersions {
    /// `v1.DRAPlugin`.
    pub v1: bool,
    /// `v1beta1.DRAPlugin`.
    pub v1beta1: bool,
}

impl Default for ApiVersions {
    fn default() -> Self {
        Self {
            v1: true,
            v1beta1: true,
        }
    }
}
