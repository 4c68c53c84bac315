//! Durations on the command line: `0.5` (seconds), `500ms`, `2s`, `1m`, `100us`.

use std::time::Duration;

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
    if !secs.is_finite() || secs < 0.0 {
        return Err(format!("'{text}' is not a valid duration"));
    }
    Ok(Duration::from_secs_f64(secs))
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
    }
}
