//! The service's clock reading, the text its instants are stored as, and
//! the text the API writes them in.

use chrono::{DateTime, Datelike, SecondsFormat, SubsecRound, Timelike, Utc};

/// Now, to the microsecond: the precision both databases store, so a value
/// read back equals the value written.
pub(crate) fn now() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(6)
}

/// `t` in RFC 3339 with `+00:00` and as many fraction digits as it needs
/// (none, 3, 6 or 9): exactly chrono's
/// `to_rfc3339_opts(SecondsFormat::AutoSi, false)`, the text the SQLite
/// driver stores, so stored values keep comparing as text. Written digit by
/// digit rather than through the formatting machinery, which cost nearly
/// twice as much, for the several instants every order's rows carry. Years
/// outside 0..=9999 and leap seconds are left to chrono.
pub(crate) fn rfc3339(t: &DateTime<Utc>) -> String {
    written(t, false)
}

/// `t` as [`rfc3339`] writes it but with `Z` for the offset: exactly
/// chrono's `to_rfc3339_opts(SecondsFormat::AutoSi, true)`, which is what
/// chrono's serde writes for a `DateTime<Utc>`, the form of every instant
/// the API answers with.
pub(crate) fn rfc3339_z(t: &DateTime<Utc>) -> String {
    written(t, true)
}

/// [`rfc3339`] (`+00:00`) or [`rfc3339_z`] (`Z`).
fn written(t: &DateTime<Utc>, use_z: bool) -> String {
    let nanos = t.nanosecond();
    let year = match u32::try_from(t.year()) {
        Ok(year) if year <= 9999 && nanos < 1_000_000_000 => year,
        _ => return t.to_rfc3339_opts(SecondsFormat::AutoSi, use_z),
    };
    let (fraction, width) = match nanos {
        0 => (0, 0),
        n if n % 1_000_000 == 0 => (n / 1_000_000, 3),
        n if n % 1_000 == 0 => (n / 1_000, 6),
        n => (n, 9),
    };
    let mut text = String::with_capacity(35);
    push_digits(&mut text, year, 4);
    text.push('-');
    push_digits(&mut text, t.month(), 2);
    text.push('-');
    push_digits(&mut text, t.day(), 2);
    text.push('T');
    push_digits(&mut text, t.hour(), 2);
    text.push(':');
    push_digits(&mut text, t.minute(), 2);
    text.push(':');
    push_digits(&mut text, t.second(), 2);
    if width > 0 {
        text.push('.');
        push_digits(&mut text, fraction, width);
    }
    text.push_str(if use_z { "Z" } else { "+00:00" });
    text
}

/// The last `width` decimal digits of `value`, zero-padded.
fn push_digits(text: &mut String, value: u32, width: u32) {
    for place in (0..width).rev() {
        let digit = (value / 10u32.pow(place)) % 10;
        text.push(char::from_digit(digit, 10).unwrap_or('0'));
    }
}

/// Strategies for the property tests of instants' texts.
#[cfg(test)]
pub(crate) mod strategies {
    use proptest::prelude::*;

    /// Nanoseconds of every fraction width an instant's text can carry
    /// (none, 3, 6 or 9 digits).
    pub(crate) fn any_nanos() -> impl Strategy<Value = u32> {
        prop_oneof![
            Just(0u32),
            (0u32..1_000).prop_map(|ms| ms * 1_000_000),
            (0u32..1_000_000).prop_map(|us| us * 1_000),
            0u32..1_000_000_000,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::{strategies::any_nanos, *};
    use chrono::TimeZone;
    use proptest::prelude::*;

    fn chrono_text(t: &DateTime<Utc>) -> String {
        t.to_rfc3339_opts(SecondsFormat::AutoSi, false)
    }

    #[test]
    fn instants_are_written_as_chrono_writes_them() {
        for text in [
            "2026-11-25T10:00:00+00:00",
            "2026-11-25T10:00:00.120+00:00",
            "2026-11-25T10:00:00.123456+00:00",
            "2026-11-25T10:00:00.123456789+00:00",
            "0000-01-01T00:00:00.000001+00:00",
            "9999-12-31T23:59:59.999+00:00",
        ] {
            let t = DateTime::parse_from_rfc3339(text).unwrap().to_utc();
            assert_eq!(rfc3339(&t), text);
            assert_eq!(rfc3339(&t), chrono_text(&t));
        }
    }

    #[test]
    fn far_years_and_leap_seconds_are_left_to_chrono() {
        let far = Utc.with_ymd_and_hms(10_000, 1, 1, 0, 0, 0).unwrap();
        assert_eq!(rfc3339(&far), chrono_text(&far));
        let before = Utc.with_ymd_and_hms(-1, 6, 1, 12, 0, 0).unwrap();
        assert_eq!(rfc3339(&before), chrono_text(&before));
        let leap = chrono::NaiveDate::from_ymd_opt(2016, 12, 31)
            .unwrap()
            .and_hms_nano_opt(23, 59, 59, 1_500_000_000)
            .unwrap()
            .and_utc();
        assert_eq!(rfc3339(&leap), chrono_text(&leap));
        for t in [far, before, leap] {
            assert_eq!(
                rfc3339_z(&t),
                t.to_rfc3339_opts(SecondsFormat::AutoSi, true)
            );
        }
    }

    proptest! {
        #[test]
        fn any_instant_is_written_as_chrono_writes_it(
            seconds in -62_167_219_200i64..253_402_300_800i64,
            nanos in any_nanos(),
        ) {
            let t = DateTime::from_timestamp(seconds, nanos).unwrap();
            prop_assert_eq!(rfc3339(&t), chrono_text(&t));
            prop_assert_eq!(rfc3339_z(&t), t.to_rfc3339_opts(SecondsFormat::AutoSi, true));
        }
    }
}
