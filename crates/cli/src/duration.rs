//! Durations on the command line: a number with a unit, such as `30s`,
//! `500ms`, `2m` or `1h`.

use std::time::Duration;

/// Parses `<number><unit>` with unit `ms`, `s`, `m` or `h`.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .ok_or_else(|| format!("{text:?} has no unit (ms, s, m, h)"))?;
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} does not start with a number"))?;
    let scale = match unit {
        "ms" => 0.001,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => return Err(format!("unknown unit {unit:?} in {text:?} (ms, s, m, h)")),
    };
    Duration::try_from_secs_f64(value * scale).map_err(|e| format!("{text:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_errors() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        for bad in ["30", "s", "3x", "-1s", ""] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
