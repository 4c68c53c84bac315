//! Timestamps a call hands the kernel, as strace shows them: `utimensat`'s
//! two `struct timespec`s, each with its date in UTC as a comment
//! (`{tv_sec=5, tv_nsec=0} /* 1970-01-01T00:00:05+0000 */`), or
//! `UTIME_NOW` and `UTIME_OMIT`.

/// `tv_nsec` values that mean the current time, and no change.
const UTIME_NOW: i64 = (1 << 30) - 1;
const UTIME_OMIT: i64 = (1 << 30) - 2;

/// The civil date of day `days` since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// One `struct timespec` as strace shows a time to set.
fn timespec(sec: i64, nsec: i64) -> String {
    match nsec {
        UTIME_NOW => return "UTIME_NOW".to_string(),
        UTIME_OMIT => return "UTIME_OMIT".to_string(),
        _ => {}
    }
    let (year, month, day) = civil(sec.div_euclid(86_400));
    let of_day = sec.rem_euclid(86_400);
    let fraction = match nsec {
        1..=999_999_999 => format!(".{nsec:09}"),
        _ => String::new(),
    };
    format!(
        "{{tv_sec={sec}, tv_nsec={nsec}}} /* {year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}{fraction}+0000 */",
        of_day / 3600,
        of_day / 60 % 60,
        of_day % 60
    )
}

/// `utimensat`'s times: two `struct timespec`s.
pub(super) fn utimens(bytes: &[u8]) -> Option<String> {
    let word = |k: usize| -> Option<i64> {
        Some(i64::from_le_bytes(
            bytes.get(8 * k..8 * k + 8)?.try_into().ok()?,
        ))
    };
    Some(format!(
        "[{}, {}]",
        timespec(word(0)?, word(1)?),
        timespec(word(2)?, word(3)?)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn times(a: (i64, i64), b: (i64, i64)) -> Vec<u8> {
        [a.0, a.1, b.0, b.1]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect()
    }

    /// strace 6.1's lines for `gzip -k` (the file's times copied), `touch
    /// -m` and `touch -a -d @5` on this machine (its time zone UTC).
    #[test]
    fn times_read_as_strace_shows_them() {
        let now = (1_795_973_864, 362_220_985);
        assert_eq!(
            utimens(&times(now, now)).unwrap(),
            "[{tv_sec=1795973864, tv_nsec=362220985} /* 2026-11-29T17:37:44.362220985+0000 */, \
             {tv_sec=1795973864, tv_nsec=362220985} /* 2026-11-29T17:37:44.362220985+0000 */]"
        );
        assert_eq!(
            utimens(&times((0, UTIME_OMIT), (0, UTIME_NOW))).unwrap(),
            "[UTIME_OMIT, UTIME_NOW]"
        );
        assert_eq!(
            utimens(&times((5, 0), (0, UTIME_OMIT))).unwrap(),
            "[{tv_sec=5, tv_nsec=0} /* 1970-01-01T00:00:05+0000 */, UTIME_OMIT]"
        );
        assert_eq!(civil(11_016), (2000, 2, 29), "a leap day");
        assert_eq!(utimens(&[0; 16]), None, "cut short: the address");
    }
}
