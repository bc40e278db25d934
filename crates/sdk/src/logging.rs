//! Log setup for plugin binaries (feature `logging`): text or JSON lines on
//! stderr, colour only when stderr is a terminal (a log file or a pod's log
//! gets no escape codes), `RUST_LOG` over the given level.

use std::io::IsTerminal;
use std::str::FromStr;

use tracing_subscriber::EnvFilter;

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// A log format other than `text` or `json`.
#[derive(Debug, Clone, thiserror::Error)]
#[error("unknown log format {0:?}: use text or json")]
pub struct UnknownLogFormat(String);

impl FromStr for LogFormat {
    type Err = UnknownLogFormat;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.to_ascii_lowercase().as_str() {
            "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            _ => Err(UnknownLogFormat(text.to_string())),
        }
    }
}

impl std::fmt::Display for LogFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Text => "text",
            Self::Json => "json",
        })
    }
}

/// Installs the global subscriber writing to stderr; `RUST_LOG` overrides
/// `level` (a level or `target=level` directives).
pub fn init(format: LogFormat, level: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_parse_in_any_case_and_print_back() {
        for (text, format) in [("text", LogFormat::Text), ("JSON", LogFormat::Json)] {
            let parsed: LogFormat = text.parse().unwrap();
            assert_eq!(parsed, format);
            assert_eq!(parsed.to_string(), text.to_ascii_lowercase());
        }
        assert!("yaml".parse::<LogFormat>().is_err());
    }
}
