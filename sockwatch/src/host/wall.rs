//! Wall-clock times as the lines write them: RFC 3339 in UTC with nanoseconds
//! (`2026-12-02T17:20:01.123456789Z`), formatted by hand into a fixed buffer, as the hot path
//! writes one per line and must not allocate for it.

/// `YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ`: four-digit years cover every `u64` nanosecond count.
pub const RFC3339_LEN: usize = 30;

const NS_PER_SEC: u64 = 1_000_000_000;
const SECS_PER_DAY: u64 = 86_400;

/// `wall_ns` (nanoseconds since the Unix epoch) as RFC 3339 in UTC.
pub fn rfc3339(wall_ns: u64) -> [u8; RFC3339_LEN] {
    let (secs, nanos) = (wall_ns / NS_PER_SEC, wall_ns % NS_PER_SEC);
    let (year, month, day) = civil_from_days(secs / SECS_PER_DAY);
    let in_day = secs % SECS_PER_DAY;
    let mut out = *b"0000-00-00T00:00:00.000000000Z";
    digits(&mut out[0..4], year);
    digits(&mut out[5..7], month);
    digits(&mut out[8..10], day);
    digits(&mut out[11..13], in_day / 3600);
    digits(&mut out[14..16], in_day / 60 % 60);
    digits(&mut out[17..19], in_day % 60);
    digits(&mut out[20..29], nanos);
    out
}

/// [`rfc3339`] for a stream of times, most in the same second as the one before: the date
/// and time of day are formatted again only when the second changes.
#[derive(Debug, Default)]
pub struct Rfc3339Cache {
    secs: Option<u64>,
    text: [u8; RFC3339_LEN],
}

impl Rfc3339Cache {
    pub fn format(&mut self, wall_ns: u64) -> &[u8; RFC3339_LEN] {
        let secs = wall_ns / NS_PER_SEC;
        if self.secs == Some(secs) {
            digits(&mut self.text[20..29], wall_ns % NS_PER_SEC);
        } else {
            self.text = rfc3339(wall_ns);
            self.secs = Some(secs);
        }
        &self.text
    }
}

/// Writes `n` into `out` in decimal, zero-padded to its length.
fn digits(out: &mut [u8], mut n: u64) {
    for d in out.iter_mut().rev() {
        *d = b'0' + (n % 10) as u8;
        n /= 10;
    }
}

/// Year, month (1-12) and day (1-31) of the proleptic Gregorian calendar, `days` after
/// 1970-01-01: Howard Hinnant's `civil_from_days`, for days on or after the epoch.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    // Counted from 0000-03-01, so that the leap day ends each 400-year era's years.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn text(wall_ns: u64) -> String {
        String::from_utf8(rfc3339(wall_ns).to_vec()).expect("ASCII")
    }

    /// The C library's broken-down UTC time of `secs`, as our own format would print it.
    fn gmtime(secs: u64) -> String {
        let t = libc::time_t::try_from(secs).expect("fits time_t");
        // SAFETY: `tm` is plain data for which all zeroes is a valid value.
        let mut tm: libc::tm = unsafe { std::mem::zeroed() };
        // SAFETY: both pointers are valid for the call; gmtime_r keeps neither.
        let done = unsafe { libc::gmtime_r(&t, &mut tm) };
        assert!(!done.is_null(), "gmtime_r({secs}) failed");
        format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
            tm.tm_year + 1900,
            tm.tm_mon + 1,
            tm.tm_mday,
            tm.tm_hour,
            tm.tm_min,
            tm.tm_sec
        )
    }

    #[test]
    fn known_instants() {
        assert_eq!(text(0), "1970-01-01T00:00:00.000000000Z");
        assert_eq!(
            text(1_796_232_001_123_456_789),
            "2026-12-02T17:20:01.123456789Z"
        );
        // A leap day, and the last nanosecond of a leap year.
        assert_eq!(
            text(951_782_400 * NS_PER_SEC),
            "2000-02-29T00:00:00.000000000Z"
        );
        assert_eq!(
            text(1_735_689_600 * NS_PER_SEC - 1),
            "2024-12-31T23:59:59.999999999Z"
        );
        assert_eq!(text(u64::MAX), "2554-07-21T23:34:33.709551615Z");
    }

    proptest! {
        #[test]
        fn the_cache_formats_as_rfc3339_does(
            start in any::<u64>(),
            steps in proptest::collection::vec(0u64..3 * NS_PER_SEC, 1..50),
        ) {
            let mut cache = Rfc3339Cache::default();
            let mut t = start;
            for step in steps {
                t = t.saturating_add(step);
                prop_assert_eq!(cache.format(t), &rfc3339(t), "at {}", t);
            }
        }

        #[test]
        fn the_date_and_time_are_the_c_librarys(wall_ns in any::<u64>()) {
            let ours = text(wall_ns);
            prop_assert_eq!(&ours[..19], gmtime(wall_ns / NS_PER_SEC));
            prop_assert_eq!(&ours[19..], format!(".{:09}Z", wall_ns % NS_PER_SEC));
        }
    }
}
