//! Instants in answers, written by [`time::rfc3339_z`]: the text chrono's
//! serializer writes for a `DateTime<Utc>`, without its formatting
//! machinery, which took about 3,400 instructions for the one instant of
//! every accepted order's body. For `#[serde(serialize_with = ..)]` on the
//! views' instants; the OpenAPI document still reads their type.

use chrono::{DateTime, Utc};
use serde::Serializer;

use crate::domain::time;

/// An instant, as chrono's serializer writes it.
pub(crate) fn z<S: Serializer>(t: &DateTime<Utc>, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&time::rfc3339_z(t))
}

/// An instant that may be absent: `null`, or as [`z`] writes it.
pub(crate) fn optional_z<S: Serializer>(
    t: &Option<DateTime<Utc>>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => z(t, serializer),
        None => serializer.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde::Serialize;

    use super::*;
    use crate::domain::time::strategies::any_nanos;

    /// Two instants through these writers.
    #[derive(Serialize)]
    struct Written {
        #[serde(serialize_with = "z")]
        at: DateTime<Utc>,
        #[serde(serialize_with = "optional_z")]
        maybe: Option<DateTime<Utc>>,
    }

    /// The same through chrono's serializer.
    #[derive(Serialize)]
    struct ByChrono {
        at: DateTime<Utc>,
        maybe: Option<DateTime<Utc>>,
    }

    fn both(at: DateTime<Utc>, maybe: Option<DateTime<Utc>>) -> (String, String) {
        (
            serde_json::to_string(&Written { at, maybe }).unwrap(),
            serde_json::to_string(&ByChrono { at, maybe }).unwrap(),
        )
    }

    #[test]
    fn far_years_and_leap_seconds_read_as_chrono_writes_them() {
        let leap = chrono::NaiveDate::from_ymd_opt(2016, 12, 31)
            .unwrap()
            .and_hms_nano_opt(23, 59, 59, 1_500_000_000)
            .unwrap()
            .and_utc();
        let far = DateTime::from_timestamp(253_402_300_800, 5_000).unwrap();
        let (written, by_chrono) = both(leap, Some(far));
        assert_eq!(written, by_chrono);
        assert!(written.contains("23:59:60.500Z"), "{written}");
    }

    proptest! {
        /// Any instant of any year, with a fraction of any width, and an
        /// absent one: the same JSON as chrono's serializer writes.
        #[test]
        fn the_same_json_as_chrono_writes(
            seconds in -8_000_000_000_000i64..8_000_000_000_000i64,
            nanos in any_nanos(),
            present in any::<bool>(),
        ) {
            let at = DateTime::from_timestamp(seconds, nanos).unwrap();
            let (written, by_chrono) = both(at, present.then_some(at));
            prop_assert_eq!(written, by_chrono);
        }
    }
}
