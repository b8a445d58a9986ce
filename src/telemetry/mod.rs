//! Log output: `pretty` for a terminal, `json` (one object per line) for `jq`
//! and shippers. `RUST_LOG`, when set, wins over `log.level`.
//!
//! Lines are written by a thread of their own: the request that logs a line
//! (every request does, at `info`) only queues it. A line written in place
//! would be a `write` on the async worker that answers the request, and a
//! reader of the output that fell behind (a full pipe, a stalled log
//! shipper) would hold every worker, and so every request, until it caught
//! up. The queue holds [`QUEUED_LINES`]; past that, lines are dropped
//! rather than the order path held, and counted
//! (`esim_log_lines_dropped_total`). Colours only on a terminal.
//!
//! The lines themselves are formatted on the request's thread, so their
//! cost is the order path's: [`plain`] (`pretty` without colours) and
//! [`json`] write what tracing-subscriber's own formats write, byte for byte
//! (`same_lines` tests it), for a fraction of the instructions; [`clock`]
//! writes their time.

use std::{
    io::{BufWriter, IsTerminal, Write},
    sync::OnceLock,
};

use tracing::Subscriber;
use tracing_appender::non_blocking::{ErrorCounter, NonBlocking, NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::{EnvFilter, fmt, fmt::MakeWriter, prelude::*, registry::LookupSpan};

use crate::config::{LogFormat, LogSettings};

mod clock;
mod json;
mod plain;
#[cfg(test)]
mod same_lines;

use json::{JsonLine, JsonSpanFields};
use plain::{PlainFields, PlainLine};

/// Lines waiting for the writer thread at most (some 20 to 40 MB of
/// typical lines): ten seconds and more of a busy node's requests while the
/// output is stalled.
pub const QUEUED_LINES: usize = 131_072;

/// The lines dropped because the queue was full, once the subscriber is
/// installed.
static DROPPED: OnceLock<ErrorCounter> = OnceLock::new();

/// Keeps the writer thread; dropping it writes out what is still queued
/// (hold it until the process ends).
#[must_use = "dropping the guard stops the log writer"]
pub struct LogGuard {
    /// `None` when a subscriber was already installed.
    _writer: Option<WorkerGuard>,
}

/// Installs the global subscriber once; later calls are no-ops (tests start
/// many apps in one process).
pub fn init(settings: &LogSettings) -> LogGuard {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&settings.level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let ansi = std::io::stdout().is_terminal();
    // Buffered: the writer thread writes what queued while it wrote the last
    // (a busy node's many lines) in one call, and flushes each time the
    // queue runs dry, so a quiet node's line still shows at once.
    let out = BufWriter::with_capacity(64 * 1024, std::io::stdout());
    let (writer, guard) = queued(out, QUEUED_LINES);
    let dropped = writer.error_counter();
    let registry = tracing_subscriber::registry().with(filter);
    let installed = match settings.format {
        // The stock JSON format's lines (flattened event, current span and
        // every enclosing one, so that a line deep in a handler still says
        // which request and which operator it serves), for fewer instructions.
        LogFormat::Json => registry.with(json_layer(writer)).try_init(),
        LogFormat::Pretty if ansi => registry
            .with(fmt::layer().with_target(false).with_writer(writer))
            .try_init(),
        // Without colours, the same lines for fewer instructions.
        LogFormat::Pretty => registry.with(plain_layer(writer)).try_init(),
    };
    match installed {
        Ok(()) => {
            let _first = DROPPED.set(dropped);
            LogGuard {
                _writer: Some(guard),
            }
        }
        Err(_already_set) => LogGuard { _writer: None },
    }
}

/// The `json` format's layer, writing to `writer` (the tests hold its
/// lines to the stock format's with this same layer). The fields' formatter
/// is set first: the event formatter is written for these fields only.
fn json_layer<S, W>(writer: W) -> fmt::Layer<S, JsonSpanFields, JsonLine, W>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    W: for<'w> MakeWriter<'w> + 'static,
{
    fmt::layer()
        .fmt_fields(JsonSpanFields)
        .event_format(JsonLine)
        .with_writer(writer)
}

/// The `pretty` format's layer without colours, writing to `writer` (the
/// tests hold its lines to the stock format's with this same layer).
fn plain_layer<S, W>(writer: W) -> fmt::Layer<S, PlainFields, PlainLine, W>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    W: for<'w> MakeWriter<'w> + 'static,
{
    fmt::layer()
        .event_format(PlainLine)
        .fmt_fields(PlainFields)
        .with_ansi(false)
        .with_writer(writer)
}

/// A writer that queues each line for a thread of its own that writes it
/// to `out`, holding `limit` lines at most and dropping (counting) the
/// lines that find the queue full.
fn queued<W: Write + Send + 'static>(out: W, limit: usize) -> (NonBlocking, WorkerGuard) {
    NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(limit)
        .thread_name("log-writer")
        .finish(out)
}

/// Log lines dropped so far because the writer thread's queue was full.
pub fn dropped_lines() -> u64 {
    DROPPED
        .get()
        .map_or(0, |counter| counter.dropped_lines() as u64)
}

#[cfg(test)]
mod tests {
    use std::{
        io::{self, Write},
        sync::{
            Arc, Mutex,
            mpsc::{self, Receiver},
        },
        time::Duration,
    };

    use super::queued;

    /// An output that takes nothing until `open` says so, then keeps
    /// what it is given: a pipe whose reader stalled, then caught up.
    struct Stalled {
        /// Says the reader caught up.
        open: Receiver<()>,
        /// Whether it has.
        opened: bool,
        /// What the reader got.
        written: Arc<Mutex<Vec<u8>>>,
    }

    impl Write for Stalled {
        fn write(&mut self, line: &[u8]) -> io::Result<usize> {
            if !self.opened {
                self.open.recv().map_err(io::Error::other)?;
                self.opened = true;
            }
            self.written.lock().unwrap().extend_from_slice(line);
            Ok(line.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_stalled_output_drops_and_counts_lines_and_never_holds_the_logger() {
        let (open, opened) = mpsc::channel();
        let written = Arc::new(Mutex::new(Vec::new()));
        let out = Stalled {
            open: opened,
            opened: false,
            written: written.clone(),
        };
        let (writer, guard) = queued(out, 4);
        let dropped = writer.error_counter();

        // The lines are logged on a thread of their own, so that a logger
        // held by the stalled output fails the test by the deadline instead
        // of hanging it.
        let (done, finished) = mpsc::channel();
        std::thread::spawn(move || {
            let mut writer = writer;
            for n in 0..100 {
                writer.write_all(format!("line {n}\n").as_bytes()).unwrap();
            }
            done.send(()).unwrap();
        });
        finished
            .recv_timeout(Duration::from_secs(10))
            .expect("100 lines logged while the output takes none");
        let lost = dropped.dropped_lines();
        // Four queued, at most one taken by the writer thread: the rest dropped.
        assert!((95..=96).contains(&lost), "{lost} dropped");

        open.send(()).unwrap();
        drop(guard);
        let text = String::from_utf8(written.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count() + lost, 100, "{text}");
        assert!(
            text.starts_with("line 0\n"),
            "the oldest lines kept: {text}"
        );
    }
}
