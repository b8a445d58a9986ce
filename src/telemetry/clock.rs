//! The time at the start of every log line, as tracing-subscriber writes
//! it (`2026-12-06T21:56:35.123456Z`: RFC 3339, UTC, microseconds), with
//! the date and the second formatted once per second per thread rather
//! than for every line.

use std::{
    cell::RefCell,
    fmt::{self, Write as _},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

thread_local! {
    /// This thread's last formatted second: its Unix time and
    /// `YYYY-MM-DDTHH:MM:SS`.
    static SECOND: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
}

/// Writes the time now.
pub(super) fn write_timestamp(writer: &mut impl fmt::Write) -> fmt::Result {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(since_epoch) => write_time(writer, since_epoch),
        Err(_before_1970) => writer.write_str("<unknown time>"),
    }
}

/// Writes a time given since the Unix epoch, formatting its date and
/// second once per second per thread.
fn write_time(writer: &mut impl fmt::Write, since_epoch: Duration) -> fmt::Result {
    let second = since_epoch.as_secs();
    SECOND.with(|cached| {
        let mut cached = cached.borrow_mut();
        if cached.0 != second {
            cached.1.clear();
            write_second(&mut cached.1, second)?;
            cached.0 = second;
        }
        writer.write_str(&cached.1)
    })?;
    let mut digits = [b'0'; 6];
    let mut left = since_epoch.subsec_micros();
    for digit in digits.iter_mut().rev() {
        // A digit: `left % 10` is below 10.
        *digit = b'0' + (left % 10) as u8;
        left /= 10;
    }
    writer.write_char('.')?;
    writer.write_str(std::str::from_utf8(&digits).unwrap_or("000000"))?;
    writer.write_char('Z')
}

/// `YYYY-MM-DDTHH:MM:SS` of a Unix second, in UTC.
fn write_second(out: &mut String, second: u64) -> fmt::Result {
    let Some(time) = i64::try_from(second)
        .ok()
        .and_then(|second| chrono::DateTime::from_timestamp(second, 0))
    else {
        return out.write_str("<unknown time>");
    };
    write!(out, "{}", time.format("%Y-%m-%dT%H:%M:%S"))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use chrono::{DateTime, SecondsFormat};

    use super::write_time;

    #[test]
    fn the_time_is_written_as_rfc_3339_in_microseconds_utc() {
        let instants = [
            Duration::new(0, 0),
            Duration::new(951_782_400, 999_999_999), // 2000-02-29
            Duration::new(1_798_761_599, 123_456_789), // the last second of 2026
            Duration::new(1_798_761_600, 1_000),
            Duration::new(1_798_761_600, 7_000_000), // the same second again
            Duration::new(4_102_444_800, 500_000),   // 2100-01-01 (2100 is no leap year)
        ];
        for since_epoch in instants {
            let mut written = String::new();
            write_time(&mut written, since_epoch).unwrap();
            let expected =
                DateTime::from_timestamp(since_epoch.as_secs() as i64, since_epoch.subsec_nanos())
                    .unwrap()
                    .to_rfc3339_opts(SecondsFormat::Micros, true);
            assert_eq!(written, expected);
        }
    }
}
