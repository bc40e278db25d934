//! Durations as Kubernetes components write them on their command lines:
//! Go's `time.ParseDuration` syntax, so that a flag copied from a
//! DaemonSet spec (`--timeout=1m30s`, `--connection-timeout=90s`) means
//! here what it means to the Go program it replaces.
//!
//! A duration is a sequence of decimal numbers, each with an optional
//! fraction and a unit: `ns`, `us` (or `µs`, `μs`), `ms`, `s`, `m`, `h`;
//! `300ms`, `1.5h`, `2h45m`. A bare `0` is zero. A sign is accepted as Go
//! accepts it, but a negative duration is refused: nothing here waits a
//! negative time.

use std::time::Duration;

/// Why a duration could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DurationError {
    /// Not Go duration syntax.
    #[error("invalid duration {0:?}: expected numbers with units, such as 300ms, 1m30s or 2h")]
    Invalid(String),
    /// A number without its unit (other than a bare `0`).
    #[error("missing unit in duration {0:?} (ns, us, ms, s, m, h)")]
    MissingUnit(String),
    /// A unit Go does not know.
    #[error("unknown unit {unit:?} in duration {text:?} (ns, us, ms, s, m, h)")]
    UnknownUnit {
        /// The unit.
        unit: String,
        /// The whole text.
        text: String,
    },
    /// A negative duration.
    #[error("negative duration {0:?}")]
    Negative(String),
    /// More than a `Duration` holds.
    #[error("duration {0:?} is too long")]
    Overflow(String),
}

/// Nanoseconds per unit.
const UNITS: [(&str, u128); 8] = [
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("μs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// Reads `text` as Go's `time.ParseDuration` does; a negative duration is
/// an error.
pub fn parse_go_duration(text: &str) -> Result<Duration, DurationError> {
    let invalid = || DurationError::Invalid(text.to_string());
    let (negative, mut rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    // Exact in nanoseconds: each term's whole part times its unit, plus its
    // fraction's digits scaled down, as Go adds them.
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let whole_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (whole, after) = rest.split_at(whole_len);
        let (fraction, after) = match after.strip_prefix('.') {
            Some(after) => {
                let len = after.bytes().take_while(u8::is_ascii_digit).count();
                after.split_at(len)
            }
            None => ("", after),
        };
        if whole.is_empty() && fraction.is_empty() {
            return Err(invalid());
        }
        let unit_len = after
            .char_indices()
            .find(|(_, c)| c.is_ascii_digit() || *c == '.')
            .map_or(after.len(), |(i, _)| i);
        let (unit, after) = after.split_at(unit_len);
        if unit.is_empty() {
            return Err(DurationError::MissingUnit(text.to_string()));
        }
        let Some(&(_, scale)) = UNITS.iter().find(|(name, _)| *name == unit) else {
            return Err(DurationError::UnknownUnit {
                unit: unit.to_string(),
                text: text.to_string(),
            });
        };
        let overflow = || DurationError::Overflow(text.to_string());
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| overflow())?
        };
        let mut term = whole.checked_mul(scale).ok_or_else(overflow)?;
        let mut place = scale;
        for digit in fraction.bytes() {
            place /= 10;
            term += u128::from(digit - b'0') * place;
        }
        total = total.checked_add(term).ok_or_else(overflow)?;
        rest = after;
    }
    if negative && total > 0 {
        return Err(DurationError::Negative(text.to_string()));
    }
    let seconds = u64::try_from(total / 1_000_000_000)
        .map_err(|_| DurationError::Overflow(text.to_string()))?;
    // The remainder is below 1e9 and fits.
    let nanos = (total % 1_000_000_000) as u32;
    Ok(Duration::new(seconds, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> Duration {
        match parse_go_duration(text) {
            Ok(d) => d,
            Err(e) => panic!("{text:?}: {e}"),
        }
    }

    #[test]
    fn what_go_reads_is_read_the_same() {
        // Each pair as Go's time.ParseDuration answers it.
        assert_eq!(ok("0"), Duration::ZERO);
        assert_eq!(ok("+0"), Duration::ZERO);
        assert_eq!(ok("-0"), Duration::ZERO);
        assert_eq!(ok("1s"), Duration::from_secs(1));
        assert_eq!(ok("1m30s"), Duration::from_secs(90));
        assert_eq!(ok("2h45m"), Duration::from_secs(9900));
        assert_eq!(ok("300ms"), Duration::from_millis(300));
        assert_eq!(ok("1.5h"), Duration::from_secs(5400));
        assert_eq!(ok(".5s"), Duration::from_millis(500));
        assert_eq!(ok("1.s"), Duration::from_secs(1));
        assert_eq!(ok("1h1m1s1ms1us1ns"), Duration::new(3661, 1_001_001));
        assert_eq!(ok("10µs"), Duration::from_micros(10));
        assert_eq!(ok("10μs"), Duration::from_micros(10));
        assert_eq!(ok("0.000000001s"), Duration::from_nanos(1));
        assert_eq!(
            ok("1.0000000009s"),
            Duration::from_secs(1),
            "Go drops what is below 1 ns"
        );
        assert_eq!(ok("3m0s"), Duration::from_secs(180));
    }

    #[test]
    fn what_go_refuses_is_refused_with_the_reason() {
        for text in ["", "s", ".s", "-", "+", "1.2.3s", " 1s", "1s "] {
            assert!(parse_go_duration(text).is_err(), "{text:?}");
        }
        assert!(matches!(
            parse_go_duration("30"),
            Err(DurationError::MissingUnit(_))
        ));
        assert!(matches!(
            parse_go_duration("1m30"),
            Err(DurationError::MissingUnit(_))
        ));
        assert!(matches!(
            parse_go_duration("3d"),
            Err(DurationError::UnknownUnit { unit, .. }) if unit == "d"
        ));
        assert!(matches!(
            parse_go_duration("-1s"),
            Err(DurationError::Negative(_))
        ));
        assert!(matches!(
            parse_go_duration("99999999999999999999999h"),
            Err(DurationError::Overflow(_))
        ));
    }
}
