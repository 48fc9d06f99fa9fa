//! The envelope timestamp rule: an RFC 3339 date-time rewritten in UTC.
//!
//! Accepted form (RFC 3339 `date-time`, without leap seconds):
//! `YYYY-MM-DD(T|t)HH:MM:SS[.F{1,9}](Z|z|(+|-)HH:MM)`. The output is the same
//! instant as `YYYY-MM-DDTHH:MM:SS[.F]Z`, with the fraction's trailing zeros
//! (and then an empty dot) removed.

/// Length of the longest normalized form, `YYYY-MM-DDTHH:MM:SS.fffffffffZ`.
const MAX_LEN: usize = 30;

/// Seconds in a day.
const DAY: i64 = 86_400;

/// A normalized timestamp, kept inline (no allocation).
#[derive(Debug, Clone, Copy)]
pub(super) struct Normalized {
    buf: [u8; MAX_LEN],
    len: usize,
}

impl Normalized {
    /// The normalized text (ASCII).
    pub(super) fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// Rewrites `text` to UTC if it is a valid RFC 3339 date-time whose UTC
/// instant falls in the years 0000..=9999; `None` otherwise.
pub(super) fn normalize(text: &[u8]) -> Option<Normalized> {
    let ts = parse(text)?;
    let local = days_from_civil(ts.year, ts.month, ts.day) * DAY
        + i64::from(ts.hour) * 3600
        + i64::from(ts.minute) * 60
        + i64::from(ts.second);
    let utc = local - ts.offset_seconds;
    let (year, month, day) = civil_from_days(utc.div_euclid(DAY));
    if !(0..=9999).contains(&year) {
        return None;
    }
    let secs = utc.rem_euclid(DAY);

    let mut out = Normalized {
        buf: [0; MAX_LEN],
        len: 0,
    };
    let mut push = |b: u8| {
        out.buf[out.len] = b;
        out.len += 1;
    };
    // `year` is in 0..=9999 and the other fields are below 100, so every
    // value fits its digit count and the casts are lossless.
    let fields: [(i64, u32); 6] = [
        (year, 4),
        (i64::from(month), 2),
        (i64::from(day), 2),
        (secs / 3600, 2),
        (secs / 60 % 60, 2),
        (secs % 60, 2),
    ];
    for (n, &(value, width)) in fields.iter().enumerate() {
        if n > 0 {
            push(b"--T::"[n - 1]);
        }
        for k in (0..width).rev() {
            let digit = (value / 10_i64.pow(k)) % 10;
            push(b'0' + digit as u8);
        }
    }
    let fraction = trim_trailing_zeros(ts.fraction);
    if !fraction.is_empty() {
        push(b'.');
        for &b in fraction {
            push(b);
        }
    }
    push(b'Z');
    Some(out)
}

/// Seconds since the Unix epoch of a valid RFC 3339 date-time (any
/// offset), with its fraction; `None` otherwise.
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
pub(super) fn unix_seconds(text: &[u8]) -> Option<f64> {
    let ts = parse(text)?;
    let whole = days_from_civil(ts.year, ts.month, ts.day) * DAY
        + i64::from(ts.hour) * 3600
        + i64::from(ts.minute) * 60
        + i64::from(ts.second)
        - ts.offset_seconds;
    let fraction = ts
        .fraction
        .iter()
        .rev()
        .fold(0.0, |acc, &d| (acc + f64::from(d - b'0')) / 10.0);
    Some(whole as f64 + fraction)
}

/// The fields of a syntactically and calendrically valid date-time.
struct Parsed<'a> {
    year: i64,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
    /// The fraction digits as written (1..=9 of them), or empty.
    fraction: &'a [u8],
    /// Local time minus UTC, in seconds.
    offset_seconds: i64,
}

fn parse(s: &[u8]) -> Option<Parsed<'_>> {
    // Fixed part: YYYY-MM-DDTHH:MM:SS (19 bytes).
    if s.len() < 20 {
        return None;
    }
    let year = digits(s, 0, 4)?;
    let month = digits(s, 5, 2)?;
    let day = digits(s, 8, 2)?;
    let hour = digits(s, 11, 2)?;
    let minute = digits(s, 14, 2)?;
    let second = digits(s, 17, 2)?;
    if s[4] != b'-' || s[7] != b'-' || !matches!(s[10], b'T' | b't') {
        return None;
    }
    if s[13] != b':' || s[16] != b':' {
        return None;
    }
    if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
        return None;
    }
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }

    let mut i = 19;
    let mut fraction: &[u8] = &[];
    if s[i] == b'.' {
        let start = i + 1;
        let mut end = start;
        while end < s.len() && s[end].is_ascii_digit() {
            end += 1;
        }
        if !(1..=9).contains(&(end - start)) {
            return None;
        }
        fraction = &s[start..end];
        i = end;
    }

    let offset_seconds = match s.get(i..)? {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), _, _, b':', _, _] => {
            let oh = digits(s, i + 1, 2)?;
            let om = digits(s, i + 4, 2)?;
            if oh > 23 || om > 59 {
                return None;
            }
            let magnitude = i64::from(oh) * 3600 + i64::from(om) * 60;
            if *sign == b'-' {
                -magnitude
            } else {
                magnitude
            }
        }
        _ => return None,
    };

    Some(Parsed {
        year: i64::from(year),
        month,
        day,
        hour,
        minute,
        second,
        fraction,
        offset_seconds,
    })
}

/// The decimal value of `count` ASCII digits at `s[at..]`, if all are digits.
fn digits(s: &[u8], at: usize, count: usize) -> Option<u32> {
    let field = s.get(at..at + count)?;
    field.iter().try_fold(0u32, |acc, &b| {
        b.is_ascii_digit().then(|| acc * 10 + u32::from(b - b'0'))
    })
}

fn trim_trailing_zeros(fraction: &[u8]) -> &[u8] {
    let keep = fraction
        .iter()
        .rposition(|&b| b != b'0')
        .map_or(0, |p| p + 1);
    &fraction[..keep]
}

fn is_leap_year(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if is_leap_year(i64::from(year)) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (month 1..=12).
///
/// Counts in 400-year cycles of 146 097 days whose years start on 1 March,
/// so that the leap day is the last day of the (shifted) year.
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    // Shift the year start to March: January and February belong to the
    // previous shifted year.
    let y = if month <= 2 { year - 1 } else { year };
    let cycle = y.div_euclid(400);
    let year_of_cycle = y - cycle * 400; // 0..=399
    let shifted_month = i64::from((month + 9) % 12); // March = 0 .. February = 11
                                                     // Days from 1 March to the first of the shifted month: the month lengths
                                                     // from March repeat 31,30,31,30,31 which (153 * m + 2) / 5 reproduces.
    let day_of_year = (153 * shifted_month + 2) / 5 + i64::from(day) - 1; // 0..=365
    let day_of_cycle = year_of_cycle * 365 + year_of_cycle / 4 - year_of_cycle / 100 + day_of_year;
    // 719 468 = days from 0000-03-01 to 1970-01-01.
    cycle * 146_097 + day_of_cycle - 719_468
}

/// `YYYY-MM-DDTHH:MM:SSZ` of `seconds` since the Unix epoch, or `None`
/// outside the years 0000..=9999.
pub(super) fn utc_text(seconds: i64) -> Option<String> {
    let (year, month, day) = civil_from_days(seconds.div_euclid(DAY));
    let secs = seconds.rem_euclid(DAY);
    (0..=9999).contains(&year).then(|| {
        format!(
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
            secs / 3600,
            secs / 60 % 60,
            secs % 60
        )
    })
}

/// Inverse of [`days_from_civil`]: the (year, month, day) of a day number.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let cycle = z.div_euclid(146_097);
    let day_of_cycle = z - cycle * 146_097; // 0..=146_096
                                            // Remove the leap days accumulated before this day, then divide by 365.
    let year_of_cycle =
        (day_of_cycle - day_of_cycle / 1460 + day_of_cycle / 36_524 - day_of_cycle / 146_096) / 365; // 0..=399
    let day_of_year =
        day_of_cycle - (365 * year_of_cycle + year_of_cycle / 4 - year_of_cycle / 100);
    let shifted_month = (5 * day_of_year + 2) / 153; // 0..=11
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1; // 1..=31
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = year_of_cycle + cycle * 400 + i64::from(month <= 2);
    // month is 1..=12 and day 1..=31 by construction.
    (year, month as u32, day as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_date_time_is_read_as_seconds_since_the_epoch_whatever_its_offset() {
        let at = |s: &str| unix_seconds(s.as_bytes());
        assert_eq!(at("1970-01-01T00:00:00Z"), Some(0.0));
        assert_eq!(at("2026-12-07T10:22:45.5Z"), Some(1_796_638_965.5));
        assert_eq!(at("2026-12-07T11:22:45.5+01:00"), Some(1_796_638_965.5));
        assert_eq!(at("2026-12-07T10:22:45"), None);
        assert_eq!(at("not a time"), None);
    }

    fn norm(s: &str) -> Option<String> {
        normalize(s.as_bytes()).map(|n| String::from_utf8(n.as_bytes().to_vec()).unwrap())
    }

    #[test]
    fn day_numbers_agree_with_counting_days_one_by_one_over_years_0_to_9999() {
        let mut expected = days_from_civil(0, 1, 1);
        for year in 0..=9999u32 {
            for month in 1..=12 {
                for day in 1..=days_in_month(year, month) {
                    let n = days_from_civil(i64::from(year), month, day);
                    assert_eq!(n, expected, "{year:04}-{month:02}-{day:02}");
                    assert_eq!(civil_from_days(n), (i64::from(year), month, day));
                    expected += 1;
                }
            }
        }
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
    }

    #[test]
    fn a_unix_time_is_written_in_utc_to_the_second_and_reads_back_as_itself() {
        assert_eq!(utc_text(0).as_deref(), Some("1970-01-01T00:00:00Z"));
        assert_eq!(
            utc_text(1_796_638_864).as_deref(),
            Some("2026-12-07T10:21:04Z")
        );
        for seconds in [-62_167_219_200, 951_782_400, 253_402_300_799] {
            let text = utc_text(seconds).unwrap();
            assert_eq!(
                unix_seconds(text.as_bytes()),
                Some(seconds as f64),
                "{text}"
            );
        }
        assert_eq!(utc_text(253_402_300_800), None);
    }

    #[test]
    fn utc_input_only_loses_trailing_fraction_zeros_and_lowercase_letters() {
        assert_eq!(
            norm("2024-05-06t07:08:09z").unwrap(),
            "2024-05-06T07:08:09Z"
        );
        assert_eq!(
            norm("2024-05-06T07:08:09.000Z").unwrap(),
            "2024-05-06T07:08:09Z"
        );
        assert_eq!(
            norm("2024-05-06T07:08:09.120Z").unwrap(),
            "2024-05-06T07:08:09.12Z"
        );
        assert_eq!(
            norm("2024-05-06T07:08:09.123456789+00:00").unwrap(),
            "2024-05-06T07:08:09.123456789Z"
        );
        assert_eq!(
            norm("2024-05-06T07:08:09-00:00").unwrap(),
            "2024-05-06T07:08:09Z"
        );
    }

    #[test]
    fn offsets_move_the_instant_across_day_month_year_and_leap_day_boundaries() {
        assert_eq!(
            norm("2024-01-01T07:59:59+08:00").unwrap(),
            "2023-12-31T23:59:59Z"
        );
        assert_eq!(
            norm("2024-02-29T20:30:00-05:00").unwrap(),
            "2024-03-01T01:30:00Z"
        );
        assert_eq!(
            norm("2024-03-01T05:00:00+05:30").unwrap(),
            "2024-02-29T23:30:00Z"
        );
        assert_eq!(
            norm("2023-03-01T00:00:00+00:01").unwrap(),
            "2023-02-28T23:59:00Z"
        );
        assert_eq!(
            norm("2000-01-01T00:00:00+23:59").unwrap(),
            "1999-12-31T00:01:00Z"
        );
        assert_eq!(
            norm("1999-12-31T23:59:59-23:59").unwrap(),
            "2000-01-01T23:58:59Z"
        );
    }

    #[test]
    fn instants_outside_years_0000_to_9999_are_not_valid() {
        assert_eq!(norm("0000-01-01T00:59:59+01:00"), None);
        assert_eq!(
            norm("0000-01-01T01:00:00+01:00").unwrap(),
            "0000-01-01T00:00:00Z"
        );
        assert_eq!(norm("9999-12-31T23:00:00-01:00"), None);
        assert_eq!(
            norm("9999-12-31T22:59:59.5-01:00").unwrap(),
            "9999-12-31T23:59:59.5Z"
        );
    }

    #[test]
    fn malformed_or_impossible_date_times_are_not_valid() {
        for bad in [
            "",
            "2024-05-06",
            "2024-05-06T07:08:09",
            "2024-05-06 07:08:09Z",
            "2024-05-06T07:08Z",
            "2024-5-06T07:08:09Z",
            "+2024-05-06T07:08:09Z",
            "2024-05-06T07:08:09.Z",
            "2024-05-06T07:08:09.1234567890Z",
            "2024-05-06T07:08:09,5Z",
            "2024-05-06T07:08:09+0800",
            "2024-05-06T07:08:09+08",
            "2024-05-06T07:08:09+24:00",
            "2024-05-06T07:08:09+08:60",
            "2024-05-06T07:08:09Zx",
            "2024-05-06T07:08:09ZZ",
            "2024-05-06T24:00:00Z",
            "2024-05-06T23:60:00Z",
            "2024-05-06T23:59:60Z",
            "2024-00-06T07:08:09Z",
            "2024-13-06T07:08:09Z",
            "2024-05-00T07:08:09Z",
            "2024-04-31T07:08:09Z",
            "2023-02-29T07:08:09Z",
            "1900-02-29T07:08:09Z",
            "2024-05-06T07:08:09\u{ff11}Z",
        ] {
            assert_eq!(norm(bad), None, "{bad}");
        }
        assert!(norm("2000-02-29T00:00:00Z").is_some());
    }
}
