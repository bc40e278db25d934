//! Programs built on the nodeplugins SDK: `nodeplugins-csi-registrar` (a
//! drop-in replacement for the node-driver-registrar sidecar) and the
//! example CSI driver, device plugin and DRA driver. This library holds what
//! they share: the logging flags.
#![forbid(unsafe_code)]

use nodeplugins_sdk::logging::{self, LogFormat};

/// `--log-format` and `--log-level`, the same as the agent's.
#[derive(Debug, Clone, clap::Args)]
pub struct LogFlags {
    /// Log line format: text or json.
    #[arg(long, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Log level (error, warn, info, debug, trace) or TARGET=LEVEL
    /// directives; RUST_LOG overrides it.
    #[arg(long, default_value = "info")]
    pub log_level: String,
}

impl LogFlags {
    /// Installs logging to stderr, colour only on a terminal.
    pub fn init(&self) {
        logging::init(self.log_format, &self.log_level);
    }
}
