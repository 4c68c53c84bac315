//! Durations on the command line: `0.5` (seconds), `500ms`, `2s`, `1m`, `100us`.

use std::time::Duration;

/// The longest duration weft accepts: a year is longer than anyone traces,
/// and well within what a deadline (`Instant` + duration) can hold.
const LONGEST: Duration = Duration::from_secs(366 * 24 * 3600);

/// The shortest sampling interval: shorter ones would keep weft's sampler
/// busy without giving a finer histogram than the timers' own resolution.
const SHORTEST_INTERVAL: Duration = Duration::from_millis(1);

/// Parses a sampling interval: a duration of at least a millisecond.
pub fn parse_interval(text: &str) -> Result<Duration, String> {
    let d = parse(text)?;
    if d < SHORTEST_INTERVAL {
        return Err(format!(
            "'{text}' is shorter than the shortest interval, 1ms"
        ));
    }
    Ok(d)
}

/// Parses a duration; a bare number is seconds.
pub fn parse(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("'{text}' is not a duration (try 0.5, 500ms, 2s, 1m)"))?;
    let scale = match unit.trim() {
        "" | "s" | "sec" => 1.0,
        "ms" => 1e-3,
        "us" | "µs" => 1e-6,
        "ns" => 1e-9,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        other => {
            return Err(format!(
                "unknown unit '{other}' in '{text}' (use ns, us, ms, s, m, h)"
            ))
        }
    };
    let secs = value * scale;
    match Duration::try_from_secs_f64(secs) {
        Ok(d) if d <= LONGEST => Ok(d),
        Ok(_) | Err(_) if secs.is_finite() && secs > 0.0 => Err(format!(
            "'{text}' is longer than the longest duration, 366 days"
        )),
        _ => Err(format!("'{text}' is not a valid duration")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        assert_eq!(parse("0.5").unwrap(), Duration::from_millis(500));
        assert_eq!(parse("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse("2s").unwrap(), Duration::from_secs(2));
        assert_eq!(parse("1m").unwrap(), Duration::from_secs(60));
        assert_eq!(parse("100us").unwrap(), Duration::from_micros(100));
        assert!(parse("fast").is_err());
        assert!(parse("3 parsecs").is_err());
        assert!(parse("99999999999999999999s")
            .unwrap_err()
            .contains("longest"));
        assert!(parse("367d").is_err());
        assert!(parse("8784h").is_ok());
        assert!(parse("8785h").unwrap_err().contains("longest"));
        assert!(parse(".").is_err());
        assert!(parse_interval("0").unwrap_err().contains("shortest"));
        assert!(parse_interval("500us").is_err());
        assert_eq!(parse_interval("1ms").unwrap(), Duration::from_millis(1));
    }

    proptest::proptest! {
        /// Any text: a duration of at most the longest, or an error.
        #[test]
        fn any_text_is_a_bounded_duration_or_refused(text in "[0-9.]{0,30}(|s|ms|us|ns|m|h|sec|x| s)") {
            if let Ok(d) = parse(&text) {
                proptest::prop_assert!(d <= LONGEST);
            }
        }
    }
}
