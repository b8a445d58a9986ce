//! The `json` log format, written as tracing-subscriber's JSON format
//! writes it (flattened event, current span, span list) byte for byte, with
//! far fewer instructions. The stock format keeps each span's fields as a
//! JSON text and, for every line, parses that text back into a map and
//! serialises it again, twice (the current span and the list); it builds
//! a sorted map of JSON values for every span that opens, and formats the
//! time from scratch. Here a span's fields are written once, sorted as the
//! stock format sorts them, and each line copies that text in; the values
//! are escaped and written as serde_json writes them. A test holds the two
//! formats equal.

use std::{
    collections::BTreeMap,
    fmt::{self, Write as _},
};

use tracing::{Event, Subscriber, field::Field};
use tracing_log::NormalizeEvent;
use tracing_subscriber::{
    field::{RecordFields, Visit, VisitOutput},
    fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields, format::Writer},
    registry::{LookupSpan, SpanRef},
};

use super::clock::write_timestamp;

/// Formats a whole line: time, level, the event's fields, its target, the
/// current span and every span from the root.
pub(super) struct JsonLine;

/// Formats a span's fields as one JSON object, keys sorted.
pub(super) struct JsonSpanFields;

impl<S> FormatEvent<S, JsonSpanFields> for JsonLine
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, JsonSpanFields>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        // A line from a crate that logs with `log` names that crate's
        // target, not the bridge's.
        let normalized = event.normalized_metadata();
        let meta = normalized.as_ref().unwrap_or_else(|| event.metadata());
        writer.write_str("{\"timestamp\":\"")?;
        write_timestamp(&mut writer)?;
        writer.write_str("\",\"level\":\"")?;
        writer.write_str(meta.level().as_str())?;
        writer.write_char('"')?;
        let mut fields = EventFields {
            writer: writer.by_ref(),
            result: Ok(()),
        };
        event.record(&mut fields);
        fields.result?;
        writer.write_str(",\"target\":")?;
        write_json_str(&mut writer, meta.target())?;
        let current = event
            .parent()
            .and_then(|id| ctx.span(id))
            .or_else(|| ctx.lookup_current());
        if let Some(span) = &current {
            writer.write_str(",\"span\":")?;
            write_span(&mut writer, span)?;
            // The stock format lists the spans of the current context, even
            // when the event names another parent.
            writer.write_str(",\"spans\":[")?;
            if let Some(leaf) = ctx.lookup_current() {
                for (n, span) in leaf.scope().from_root().enumerate() {
                    if n > 0 {
                        writer.write_char(',')?;
                    }
                    write_span(&mut writer, &span)?;
                }
            }
            writer.write_char(']')?;
        }
        writer.write_str("}\n")
    }
}

/// A span as the stock format writes it: its fields, then its name.
fn write_span<'a, S>(writer: &mut Writer<'_>, span: &SpanRef<'a, S>) -> fmt::Result
where
    S: LookupSpan<'a>,
{
    let extensions = span.extensions();
    let stored = extensions
        .get::<FormattedFields<JsonSpanFields>>()
        .map_or("{}", |fields| fields.fields.as_str());
    // `{"a":1}` becomes `{"a":1,"name":"…"}`.
    let inner = stored
        .strip_prefix('{')
        .and_then(|rest| rest.strip_suffix('}'))
        .unwrap_or("");
    writer.write_char('{')?;
    writer.write_str(inner)?;
    if !inner.is_empty() {
        writer.write_char(',')?;
    }
    writer.write_str("\"name\":")?;
    write_json_str(writer, span.metadata().name())?;
    writer.write_char('}')
}

/// Writes an event's fields as the stock format's serde visitor does: each
/// as `,"name":value`, names as given, `Debug` values as strings.
struct EventFields<'w> {
    /// Where the fields go.
    writer: Writer<'w>,
    /// The first error, after which nothing more is written.
    result: fmt::Result,
}

impl EventFields<'_> {
    /// Writes `,"name":` and then the value, unless an earlier field failed.
    fn entry(&mut self, field: &Field, value: impl FnOnce(&mut Writer<'_>) -> fmt::Result) {
        if self.result.is_ok() {
            self.result = self
                .writer
                .write_char(',')
                .and_then(|()| write_json_str(&mut self.writer, field.name()))
                .and_then(|()| self.writer.write_char(':'))
                .and_then(|()| value(&mut self.writer));
        }
    }
}

impl Visit for EventFields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.entry(field, |writer| write_json_debug(writer, value));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.entry(field, |writer| write_json_str(writer, value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.entry(field, |writer| write!(writer, "{value}"));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.entry(field, |writer| write!(writer, "{value}"));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.entry(field, |writer| write_json_f64(writer, value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.entry(field, |writer| {
            writer.write_str(if value { "true" } else { "false" })
        });
    }
}

impl<'w> FormatFields<'w> for JsonSpanFields {
    fn format_fields<R: RecordFields>(&self, mut writer: Writer<'w>, fields: R) -> fmt::Result {
        let mut values = SpanValues::default();
        fields.record(&mut values);
        values.write_sorted(&mut writer)
    }

    /// Fields recorded after the span opened: merged into what it had, as
    /// the stock format merges them (rare: the operator's name and id).
    fn add_fields(
        &self,
        current: &'w mut FormattedFields<Self>,
        fields: &tracing::span::Record<'_>,
    ) -> fmt::Result {
        let mut merged: BTreeMap<String, serde_json::Value> = if current.fields.is_empty() {
            BTreeMap::new()
        } else {
            serde_json::from_str(&current.fields).map_err(|_| fmt::Error)?
        };
        let mut values = SpanValues::default();
        fields.record(&mut values);
        for (name, range) in values.entries {
            let value = serde_json::from_str(&values.text[range]).map_err(|_| fmt::Error)?;
            merged.insert(name.to_owned(), value);
        }
        let text = serde_json::to_string(&merged).map_err(|_| fmt::Error)?;
        current.fields = text;
        Ok(())
    }
}

/// A span's values, each written as JSON into one text, in the order
/// recorded.
#[derive(Default)]
struct SpanValues {
    /// Each field's name and where its value lies in `text`.
    entries: Vec<(&'static str, std::ops::Range<usize>)>,
    /// The values, one after another.
    text: String,
}

impl SpanValues {
    /// Records one value under `name`.
    fn push(&mut self, name: &'static str, value: impl FnOnce(&mut String) -> fmt::Result) {
        let start = self.text.len();
        // Writing to a `String` does not fail unless a value's own
        // formatting does; such a value is left out.
        if value(&mut self.text).is_ok() {
            self.entries.push((name, start..self.text.len()));
        } else {
            self.text.truncate(start);
        }
    }

    /// Writes `{"name":value,…}` sorted by name, the last value of a name
    /// repeated winning, as the stock format's sorted map does.
    fn write_sorted(mut self, writer: &mut Writer<'_>) -> fmt::Result {
        // Stable: values of one name stay in the order recorded.
        self.entries.sort_by_key(|(name, _)| *name);
        writer.write_char('{')?;
        let mut first = true;
        for (n, (name, range)) in self.entries.iter().enumerate() {
            let next_has_same_name = self
                .entries
                .get(n + 1)
                .is_some_and(|(next, _)| next == name);
            if next_has_same_name {
                continue;
            }
            if !first {
                writer.write_char(',')?;
            }
            first = false;
            write_json_str(writer, name)?;
            writer.write_char(':')?;
            writer.write_str(&self.text[range.clone()])?;
        }
        writer.write_char('}')
    }
}

impl Visit for SpanValues {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // As the stock visitor: the `log` crate's metadata skipped, raw
        // identifiers named without their `r#`.
        let name = field.name();
        if name.starts_with("log.") {
            return;
        }
        let name = name.strip_prefix("r#").unwrap_or(name);
        self.push(name, |text| write_json_debug(text, value));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.push(field.name(), |text| write_json_str(text, value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.push(field.name(), |text| write!(text, "{value}"));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.push(field.name(), |text| write!(text, "{value}"));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.push(field.name(), |text| write_json_f64(text, value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.push(field.name(), |text| {
            text.write_str(if value { "true" } else { "false" })
        });
    }

    fn record_bytes(&mut self, field: &Field, value: &[u8]) {
        // An array of numbers, as `serde_json::Value::from(&[u8])`.
        self.push(field.name(), |text| {
            text.write_char('[')?;
            for (n, byte) in value.iter().enumerate() {
                if n > 0 {
                    text.write_char(',')?;
                }
                write!(text, "{byte}")?;
            }
            text.write_char(']')
        });
    }
}

impl VisitOutput<fmt::Result> for SpanValues {
    fn finish(self) -> fmt::Result {
        Ok(())
    }
}

/// A float as serde_json writes one: `null` unless finite.
fn write_json_f64(writer: &mut impl fmt::Write, value: f64) -> fmt::Result {
    match serde_json::Number::from_f64(value) {
        Some(number) => write!(writer, "{number}"),
        None => writer.write_str("null"),
    }
}

/// A value's `Debug` text as a JSON string.
fn write_json_debug(writer: &mut impl fmt::Write, value: &dyn fmt::Debug) -> fmt::Result {
    writer.write_char('"')?;
    write!(JsonEscaping(writer), "{value:?}")?;
    writer.write_char('"')
}

/// A JSON string, escaped as serde_json escapes one.
fn write_json_str(writer: &mut impl fmt::Write, text: &str) -> fmt::Result {
    writer.write_char('"')?;
    JsonEscaping(writer).write_str(text)?;
    writer.write_char('"')
}

/// Writes through, escaping as serde_json does inside a string: the quote,
/// the backslash and the control characters below 0x20 (`\b \t \n \f \r`
/// short, the others as `\u00xx`); nothing else.
struct JsonEscaping<'a, W: fmt::Write>(&'a mut W);

impl<W: fmt::Write> fmt::Write for JsonEscaping<'_, W> {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        // Most text has nothing to escape: one look, one write.
        let Some(first) = text.bytes().position(escaped) else {
            return self.0.write_str(text);
        };
        let mut start = 0;
        for (at, byte) in text.bytes().enumerate().skip(first) {
            let short = match byte {
                b'"' => "\\\"",
                b'\\' => "\\\\",
                b'\x08' => "\\b",
                b'\t' => "\\t",
                b'\n' => "\\n",
                b'\x0c' => "\\f",
                b'\r' => "\\r",
                0..=0x1f => "",
                _ => continue,
            };
            // Every byte escaped is ASCII, so `at` is a char boundary.
            self.0.write_str(&text[start..at])?;
            if short.is_empty() {
                write!(self.0, "\\u{byte:04x}")?;
            } else {
                self.0.write_str(short)?;
            }
            start = at + 1;
        }
        self.0.write_str(&text[start..])
    }
}

/// Whether serde_json escapes this byte inside a string.
fn escaped(byte: u8) -> bool {
    byte < 0x20 || byte == b'"' || byte == b'\\'
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::{write_json_f64, write_json_str};

    proptest! {
        #[test]
        fn strings_are_escaped_as_serde_json_escapes_them(text in any::<String>()) {
            let mut written = String::new();
            write_json_str(&mut written, &text).unwrap();
            prop_assert_eq!(written, serde_json::to_string(&text).unwrap());
        }

        #[test]
        fn floats_are_written_as_serde_json_writes_them(value in any::<f64>()) {
            let mut written = String::new();
            write_json_f64(&mut written, value).unwrap();
            prop_assert_eq!(written, serde_json::to_string(&value).unwrap());
        }
    }

    #[test]
    fn every_control_character_is_escaped_as_serde_json_escapes_it() {
        let text: String = (0u8..0x80).map(char::from).collect();
        let mut written = String::new();
        write_json_str(&mut written, &text).unwrap();
        assert_eq!(written, serde_json::to_string(&text).unwrap());
    }
}
