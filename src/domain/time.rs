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

/// [`rfc3339`] (`+00:00`) or [`rfc3339_z`] (`Z`). The text is laid out in
/// a buffer on the stack, digits put in place, and copied into its string
/// once; the date and time are read once from the instant's UTC reading
/// (each of `DateTime`'s own accessors works that reading out again).
fn written(t: &DateTime<Utc>, use_z: bool) -> String {
    let at = t.naive_utc();
    let nanos = at.nanosecond();
    let year = match u32::try_from(at.year()) {
        Ok(year) if year <= 9999 && nanos < 1_000_000_000 => year,
        _ => return t.to_rfc3339_opts(SecondsFormat::AutoSi, use_z),
    };
    let (fraction, width) = match nanos {
        0 => (0, 0),
        n if n % 1_000_000 == 0 => (n / 1_000_000, 3),
        n if n % 1_000 == 0 => (n / 1_000, 6),
        n => (n, 9),
    };
    // The longest text: 19 for the date and time, 10 for a point and nine
    // digits, 6 for `+00:00`. Every index below is within it.
    let mut text = *b"0000-00-00T00:00:00.000000000+00:00";
    put_digits(&mut text[0..4], year);
    put_digits(&mut text[5..7], at.month());
    put_digits(&mut text[8..10], at.day());
    put_digits(&mut text[11..13], at.hour());
    put_digits(&mut text[14..16], at.minute());
    put_digits(&mut text[17..19], at.second());
    let mut len = 19;
    if width > 0 {
        put_digits(&mut text[20..20 + width], fraction);
        len += 1 + width;
    }
    let offset: &[u8] = if use_z { b"Z" } else { b"+00:00" };
    text[len..len + offset.len()].copy_from_slice(offset);
    len += offset.len();
    match std::str::from_utf8(&text[..len]) {
        Ok(written) => written.to_owned(),
        // Digits and separators are ASCII: never taken.
        Err(_) => t.to_rfc3339_opts(SecondsFormat::AutoSi, use_z),
    }
}

/// The last `digits.len()` decimal digits of `value`, zero-padded, in place.
fn put_digits(digits: &mut [u8], mut value: u32) {
    for digit in digits.iter_mut().rev() {
        // A remainder of ten is below ten: the cast keeps it whole.
        *digit = b'0' + (value % 10) as u8;
        value /= 10;
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
