//! Identifiers, secrets and timestamps.
//!
//! Every resource id is 128 random bits written as 32 lowercase hex
//! characters. Tokens and lease proofs are 256 random bits in hex behind a
//! short prefix; they are opaque to clients.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Serialize, Serializer};

/// A resource id: 128 random bits, shown as 32 lowercase hex characters.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Id(u128);

impl Id {
    /// A fresh random id.
    pub fn random() -> Self {
        let mut bytes = [0u8; 16];
        fill_random(&mut bytes);
        Id(u128::from_be_bytes(bytes))
    }

    /// Parses exactly 32 lowercase hex characters; anything else is `None`.
    pub fn parse(text: &str) -> Option<Self> {
        let well_formed = text.len() == 32
            && text
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if !well_formed {
            return None;
        }
        u128::from_str_radix(text, 16).ok().map(Id)
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

impl fmt::Debug for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl Serialize for Id {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// A random secret: `prefix` followed by 64 lowercase hex characters (256 bits).
pub fn random_secret(prefix: &str) -> String {
    let mut bytes = [0u8; 32];
    fill_random(&mut bytes);
    let mut out = String::with_capacity(prefix.len() + 64);
    out.push_str(prefix);
    for b in bytes {
        out.push(hex_digit(b >> 4));
        out.push(hex_digit(b & 0x0f));
    }
    out
}

fn hex_digit(n: u8) -> char {
    char::from_digit(u32::from(n), 16).unwrap_or('0')
}

fn fill_random(buf: &mut [u8]) {
    // Without the OS random source no id or secret can be trusted: stop.
    getrandom::getrandom(buf).expect("the operating system's random source failed");
}

/// Compares two secrets without stopping at the first differing byte.
pub fn secrets_equal(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Formats a wall-clock time as RFC 3339 in UTC with exactly six fractional
/// digits, e.g. `2026-11-30T16:02:44.123456Z`.
pub fn rfc3339(time: SystemTime) -> String {
    let since_epoch = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since_epoch.as_secs();
    let micros = since_epoch.subsec_micros();
    let (year, month, day) = civil_from_days((secs / 86_400) as i64);
    let rem = secs % 86_400;
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{micros:06}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Converts a count of days since 1970-01-01 to a proleptic Gregorian
/// (year, month, day), by shifting the year to start on March 1st so that the
/// leap day is the last day of a 400-year cycle's year.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let shifted = days + 719_468; // days from 0000-03-01 to 1970-01-01
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153; // 0 = March
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month as u32, day as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn ids_round_trip_through_their_text_form() {
        let id = Id::random();
        let text = id.to_string();
        assert_eq!(text.len(), 32);
        assert_eq!(Id::parse(&text), Some(id));
    }

    #[test]
    fn only_32_lowercase_hex_characters_parse_as_an_id() {
        assert!(Id::parse("0123456789abcdef0123456789abcdef").is_some());
        assert!(Id::parse("0123456789ABCDEF0123456789abcdef").is_none());
        assert!(Id::parse("0123456789abcdef0123456789abcde").is_none());
        assert!(Id::parse("+123456789abcdef0123456789abcdef").is_none());
        assert!(Id::parse("0123456789abcdef0123456789abcdeg").is_none());
    }

    #[test]
    fn secrets_carry_256_bits_behind_their_prefix() {
        let secret = random_secret("lp_");
        assert_eq!(secret.len(), 3 + 64);
        assert!(secret.starts_with("lp_"));
        assert_ne!(secret, random_secret("lp_"));
    }

    #[test]
    fn timestamps_are_rfc3339_utc_with_microseconds() {
        let at = |secs: u64, micros: u64| {
            rfc3339(UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_micros(micros))
        };
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(at(951_782_400, 1), "2000-02-29T00:00:00.000001Z");
        assert_eq!(at(1_796_054_564, 123_456), "2026-11-30T16:02:44.123456Z");
        assert_eq!(at(4_107_542_399, 999_999), "2100-02-28T23:59:59.999999Z");
    }
}
