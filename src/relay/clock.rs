//! Times the relay reads (a row's `created_at`, HTTP's `Retry-After`) and
//! the waits it chooses (backoff with jitter).

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Days from 1970-01-01 to the civil date (proleptic Gregorian).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn seconds_of(year: i64, month: u32, day: u32, h: u32, m: u32, s: u32) -> Option<i64> {
    let valid = (1..=12).contains(&month) && (1..=31).contains(&day) && h < 24 && m < 60 && s < 61;
    valid.then(|| {
        days_from_civil(year, month, day) * 86_400
            + i64::from(h) * 3600
            + i64::from(m) * 60
            + i64::from(s)
    })
}

/// `2026-12-07T10:22:45.123456Z` (the table's UTC times) as seconds since
/// the Unix epoch, or `None`.
pub(super) fn parse_rfc3339_utc(text: &str) -> Option<f64> {
    let text = text.strip_suffix('Z')?;
    let (date, time) = text.split_once('T')?;
    let mut d = date.splitn(3, '-');
    let (year, month, day) = (
        d.next()?.parse().ok()?,
        d.next()?.parse().ok()?,
        d.next()?.parse().ok()?,
    );
    let (hms, fraction) = time.split_once('.').unwrap_or((time, "0"));
    let mut t = hms.splitn(3, ':');
    let (h, m, s) = (
        t.next()?.parse().ok()?,
        t.next()?.parse().ok()?,
        t.next()?.parse().ok()?,
    );
    let whole = seconds_of(year, month, day, h, m, s)?;
    let fraction: f64 = format!("0.{fraction}").parse().ok()?;
    Some(whole as f64 + fraction)
}

/// An HTTP date in its preferred form, `Sun, 06 Nov 1994 08:49:37 GMT`,
/// as seconds since the Unix epoch, or `None`.
fn parse_http_date(text: &str) -> Option<i64> {
    let (_, rest) = text.split_once(", ")?;
    let mut parts = rest.split(' ');
    let day: u32 = parts.next()?.parse().ok()?;
    let month = match parts.next()? {
        "Jan" => 1,
        "Feb" => 2,
        "Mar" => 3,
        "Apr" => 4,
        "May" => 5,
        "Jun" => 6,
        "Jul" => 7,
        "Aug" => 8,
        "Sep" => 9,
        "Oct" => 10,
        "Nov" => 11,
        "Dec" => 12,
        _ => return None,
    };
    let year: i64 = parts.next()?.parse().ok()?;
    let mut t = parts.next()?.splitn(3, ':');
    let (h, m, s) = (
        t.next()?.parse().ok()?,
        t.next()?.parse().ok()?,
        t.next()?.parse().ok()?,
    );
    if parts.next()? != "GMT" || parts.next().is_some() {
        return None;
    }
    seconds_of(year, month, day, h, m, s)
}

/// Seconds since the Unix epoch, now.
pub(super) fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// A `Retry-After` value (delay seconds, or an HTTP date) as a wait from
/// `now` (Unix seconds); a date past is no wait; anything else `None`.
pub(super) fn retry_after(value: &str, now: f64) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = parse_http_date(value)? as f64;
    Some(Duration::from_secs_f64((at - now).max(0.0)))
}

/// Exponential backoff with jitter: before attempt `attempts + 1`, a wait
/// between half and all of `initial × 2^(attempts − 1)`, at most `max`.
pub(super) fn backoff(initial: Duration, max: Duration, attempts: u32) -> Duration {
    let doubled = initial.saturating_mul(1u32 << attempts.saturating_sub(1).min(30));
    let full = doubled.min(max);
    let unit = (random() >> 11) as f64 / (1u64 << 53) as f64;
    full.mul_f64(0.5 + unit / 2.0)
}

/// 64 random bits, from the standard library's per-process hash keys and
/// a counter: enough for jitter and a relay's name, no cryptography.
pub(super) fn random() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tables_times_and_http_dates_are_read_as_unix_seconds() {
        assert_eq!(parse_rfc3339_utc("1970-01-01T00:00:01.500000Z"), Some(1.5));
        assert_eq!(
            parse_rfc3339_utc("2026-12-07T10:22:45.000000Z"),
            Some(1_796_638_965.0)
        );
        assert_eq!(parse_rfc3339_utc("2026-12-07 10:22:45"), None);
        assert_eq!(
            parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(784_111_777)
        );
        assert_eq!(parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT"), None);
        assert_eq!(retry_after("7", 0.0), Some(Duration::from_secs(7)));
        assert_eq!(
            retry_after("Sun, 06 Nov 1994 08:49:47 GMT", 784_111_777.0),
            Some(Duration::from_secs(10))
        );
        assert_eq!(
            retry_after("Sun, 06 Nov 1994 08:49:47 GMT", 2e9),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after("soon", 0.0), None);
        assert_eq!(retry_after("-3", 0.0), None);
    }

    #[test]
    fn the_backoff_doubles_within_its_bound_and_is_jittered() {
        let second = Duration::from_secs(1);
        for attempts in 1..40 {
            let wait = backoff(second, Duration::from_secs(60), attempts);
            let full = second
                .saturating_mul(1 << (attempts - 1).min(30))
                .min(Duration::from_secs(60));
            assert!(wait >= full / 2 && wait <= full, "{attempts}: {wait:?}");
        }
        let waits: std::collections::HashSet<_> = (0..20)
            .map(|_| backoff(second, Duration::from_secs(60), 3))
            .collect();
        assert!(waits.len() > 1, "jittered");
    }
}
