//! The `pretty` log format for an output that is not a terminal, written
//! as tracing-subscriber's full format writes it with colours off, byte for
//! byte, but with fewer instructions: at `info` every request writes a line,
//! and on that line the stock format spends much of its time painting
//! field names and separators in a style that is empty without colours
//! (each one a trip through `core::fmt`) and formatting the date from
//! scratch. Here names and separators are written as they are, and the
//! date comes from [`super::clock`]. Values keep the stock formatting
//! (`Debug`, the message's escaping of control characters); an error, with
//! its list of sources, is handed to the stock visitor itself. A test holds
//! the two formats equal.

use std::fmt::{self, Write as _};

use tracing::{Event, Level, Subscriber, field::Field};
use tracing_subscriber::{
    field::{RecordFields, Visit, VisitOutput},
    fmt::{
        FmtContext, FormatEvent, FormatFields, FormattedFields,
        format::{DefaultVisitor, Writer},
    },
    registry::LookupSpan,
};

use super::clock::write_timestamp;

/// Formats a whole line: time, level, the spans from the root with their
/// fields, then the event's fields.
pub(super) struct PlainLine;

/// Formats a span's or an event's fields: `name=value`, the message bare,
/// separated by spaces; an error (with its sources) by the stock visitor.
pub(super) struct PlainFields;

impl<S, N> FormatEvent<S, N> for PlainLine
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        write_timestamp(&mut writer)?;
        writer.write_char(' ')?;
        writer.write_str(level_label(*event.metadata().level()))?;
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                writer.write_str(span.metadata().name())?;
                if let Some(fields) = span.extensions().get::<FormattedFields<N>>()
                    && !fields.is_empty()
                {
                    writer.write_char('{')?;
                    writer.write_str(fields)?;
                    writer.write_char('}')?;
                }
                writer.write_char(':')?;
            }
            // The stock format writes a space after the spans only when
            // there was one; a scope always holds at least one.
            writer.write_char(' ')?;
        }
        ctx.format_fields(writer.by_ref(), event)?;
        writer.write_char('\n')
    }
}

/// The level as the stock format pads it, with the space that follows.
fn level_label(level: Level) -> &'static str {
    match level {
        Level::TRACE => "TRACE ",
        Level::DEBUG => "DEBUG ",
        Level::INFO => " INFO ",
        Level::WARN => " WARN ",
        Level::ERROR => "ERROR ",
    }
}

impl<'w> FormatFields<'w> for PlainFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'w>, fields: R) -> fmt::Result {
        let mut visitor = PlainVisitor {
            writer,
            is_empty: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.finish()
    }
}

/// Writes fields as the stock `DefaultVisitor` does.
struct PlainVisitor<'w> {
    /// Where the fields go.
    writer: Writer<'w>,
    /// No field written yet (the next one needs no space before it).
    is_empty: bool,
    /// The first error, after which nothing more is written.
    result: fmt::Result,
}

impl PlainVisitor<'_> {
    /// Hands one field to the stock visitor, which knows its formatting.
    fn stock(&mut self, field: &Field, record: impl FnOnce(&mut DefaultVisitor<'_>, &Field)) {
        if self.result.is_err() {
            return;
        }
        let mut visitor = DefaultVisitor::new(self.writer.by_ref(), self.is_empty);
        record(&mut visitor, field);
        self.result = visitor.finish();
        // Fields the stock visitor skips (the `log` crate's metadata) leave
        // the line as it was.
        if !field.name().starts_with("log.") {
            self.is_empty = false;
        }
    }

    /// Writes `name=` (or nothing for the message) after the separating
    /// space; false when the field is skipped.
    fn begin(&mut self, field: &Field) -> bool {
        let name = field.name();
        if self.result.is_err() || name.starts_with("log.") {
            return false;
        }
        if self.is_empty {
            self.is_empty = false;
        } else if let Err(error) = self.writer.write_char(' ') {
            self.result = Err(error);
            return false;
        }
        if name != "message" {
            let name = name.strip_prefix("r#").unwrap_or(name);
            if let Err(error) = self
                .writer
                .write_str(name)
                .and_then(|()| self.writer.write_char('='))
            {
                self.result = Err(error);
                return false;
            }
        }
        true
    }
}

impl Visit for PlainVisitor<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if !self.begin(field) {
            return;
        }
        self.result = if field.name() == "message" && self.writer.sanitizes_ansi_escapes() {
            write!(Escaping(&mut self.writer), "{value:?}")
        } else {
            write!(self.writer, "{value:?}")
        };
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        if self.begin(field) {
            self.result = write!(self.writer, "{value}");
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        if self.begin(field) {
            self.result = write!(self.writer, "{value}");
        }
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        if self.begin(field) {
            self.result = self.writer.write_str(if value { "true" } else { "false" });
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            // Written as given, escaped as a message is.
            self.record_debug(field, &format_args!("{value}"));
        } else if self.begin(field) {
            // Quoted, as the stock format writes a string field.
            self.result = write!(self.writer, "{value:?}");
        }
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        if self.begin(field) {
            self.result = write!(self.writer, "{value:?}");
        }
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.stock(field, |visitor, field| visitor.record_error(field, value));
    }
}

impl VisitOutput<fmt::Result> for PlainVisitor<'_> {
    fn finish(self) -> fmt::Result {
        self.result
    }
}

/// Writes through, escaping the control characters a terminal would act on
/// (as the stock format escapes a message: C0's ESC, BEL, BS, FF, DEL and
/// the C1 range), so that a message cannot drive the terminal that shows it.
struct Escaping<'a, 'w>(&'a mut Writer<'w>);

impl fmt::Write for Escaping<'_, '_> {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        let mut rest = text;
        while let Some(at) = rest.find(needs_escape) {
            self.0.write_str(&rest[..at])?;
            // `find` returned the index of a char, so one starts there.
            let ch = rest[at..].chars().next().unwrap_or_default();
            match ch {
                '\x1b' => self.0.write_str("\\x1b")?,
                '\x07' => self.0.write_str("\\x07")?,
                '\x08' => self.0.write_str("\\x08")?,
                '\x0c' => self.0.write_str("\\x0c")?,
                '\x7f' => self.0.write_str("\\x7f")?,
                _ => write!(self.0, "\\u{{{:x}}}", ch as u32)?,
            }
            rest = &rest[at + ch.len_utf8()..];
        }
        self.0.write_str(rest)
    }
}

/// Whether the stock format escapes this character in a message.
fn needs_escape(ch: char) -> bool {
    matches!(
        ch,
        '\x1b' | '\x07' | '\x08' | '\x0c' | '\x7f' | '\u{80}'..='\u{9f}'
    )
}
