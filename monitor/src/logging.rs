//! Where log records go: stderr, filtered by `RUST_LOG` (default `info`), as text lines for
//! people or one JSON object per line for log collectors (`--log-format`).
//!
//! Records of crates that log through `log` (aya, among others) are carried into the same
//! output. In JSON, each record names the spans it happened in (`span`, `spans`), and a span's
//! end is a record of its own (`"message":"close"`): a decision's span ends when its action
//! reports back, so that record holds the decision's outcome.
use std::{
    fmt,
    io::{self, Write as _},
    sync::atomic::{AtomicU64, Ordering},
};

use tracing::{Event, Subscriber};
use tracing_subscriber::{
    EnvFilter,
    fmt::{FmtContext, FormatEvent, FormatFields, MakeWriter, format::FmtSpan, format::Writer},
    registry::LookupSpan,
    util::SubscriberInitExt as _,
};

/// `--log-format`: how stderr's log records are written.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum LogFormat {
    /// `[2026-01-02T03:04:05Z INFO ] message key=value`, one record a line.
    #[default]
    Text,
    /// One JSON object a line: timestamp, level, target, fields, and the spans the record
    /// belongs to (a decision's pod, signal, observed value, threshold and outcome).
    Json,
}

/// The filter when `RUST_LOG` is unset or empty.
const DEFAULT_FILTER: &str = "info";

/// Sends every record to stderr in `format` for the rest of the process.
pub(crate) fn init(format: LogFormat) {
    let filter = filter(std::env::var("RUST_LOG").ok().as_deref());
    // A second call (tests in one process) keeps the first subscriber.
    let _ = subscriber(format, filter, || BestEffortStderr).try_init();
}

/// Log writes that failed (stderr on a full disk, a closed pipe, a restarted journald): each
/// costs its line, never the agent. Shown as `monitor_log_write_failures_total`.
static LOG_WRITE_FAILURES: AtomicU64 = AtomicU64::new(0);

/// Log writes that failed since start.
pub(crate) fn log_write_failures() -> u64 {
    LOG_WRITE_FAILURES.load(Ordering::Relaxed)
}

/// stderr that never reports a failure to its caller: tracing's writer would otherwise print
/// the failure with `eprintln!`, which panics when stderr itself is what failed.
struct BestEffortStderr;

impl io::Write for BestEffortStderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if io::stderr().lock().write_all(buf).is_err() {
            LOG_WRITE_FAILURES.fetch_add(1, Ordering::Relaxed);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Writes `args` and a newline to stderr outside the log (the status view, the final error),
/// counting a failure instead of panicking as `eprintln!` does.
pub(crate) fn stderr_line(args: fmt::Arguments<'_>) {
    let _ = writeln!(BestEffortStderr, "{args}");
}

/// `RUST_LOG`'s directives (`info`, `monitor=debug,kube=warn`); a bad directive is reported on
/// stderr and the default used, so a typo never silences the agent.
fn filter(rust_log: Option<&str>) -> EnvFilter {
    match rust_log.map(str::trim).filter(|s| !s.is_empty()) {
        None => EnvFilter::new(DEFAULT_FILTER),
        Some(directives) => EnvFilter::try_new(directives).unwrap_or_else(|e| {
            stderr_line(format_args!(
                "monitor: RUST_LOG={directives:?} ignored ({e}); logging at {DEFAULT_FILTER}"
            ));
            EnvFilter::new(DEFAULT_FILTER)
        }),
    }
}

/// The subscriber for `format`, writing to `writer`.
fn subscriber<W>(
    format: LogFormat,
    filter: EnvFilter,
    writer: W,
) -> Box<dyn Subscriber + Send + Sync + 'static>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .log_internal_errors(false);
    match format {
        LogFormat::Text => Box::new(builder.event_format(TextLine).finish()),
        LogFormat::Json => Box::new(
            builder
                .json()
                .with_current_span(true)
                .with_span_list(true)
                .with_span_events(FmtSpan::CLOSE)
                .finish(),
        ),
    }
}

/// The text line the agent wrote before it used tracing (env_logger's look without the
/// target): `[time LEVEL] message`, then the record's fields as `key=value`.
struct TextLine;

impl<S, N> FormatEvent<S, N> for TextLine
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
        let now = jiff::Timestamp::now();
        write!(
            writer,
            "[{} {:<5}] ",
            now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            event.metadata().level()
        )?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// The lines `format` writes of what `log` records, filtered by `rust_log`.
    pub(crate) fn captured(
        format: LogFormat,
        rust_log: Option<&str>,
        log: impl FnOnce(),
    ) -> Vec<String> {
        let out = Captured::default();
        let subscriber = subscriber(format, filter(rust_log), out.clone());
        tracing::subscriber::with_default(subscriber, log);
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        text.lines().map(str::to_owned).collect()
    }

    /// Collects what a subscriber writes.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl<'w> MakeWriter<'w> for Captured {
        type Writer = Captured;
        fn make_writer(&'w self) -> Self::Writer {
            self.clone()
        }
    }

    /// Logs one record inside a span and one debug record; the lines written.
    fn log_with(format: LogFormat, rust_log: Option<&str>) -> Vec<String> {
        captured(format, rust_log, || {
            let span = tracing::info_span!(
                "decision",
                pod.name = "hog",
                outcome = tracing::field::Empty
            );
            span.in_scope(|| tracing::info!(grace_s = 1, "eviction started"));
            span.record("outcome", "killed");
            drop(span);
            tracing::debug!("a detail");
        })
    }

    #[test]
    fn each_format_writes_its_own_lines() {
        struct Case {
            name: &'static str,
            format: LogFormat,
            rust_log: Option<&'static str>,
            check: fn(&[String]),
        }
        let cases = [
            Case {
                name: "text by default: env_logger's look, fields after the message, no spans",
                format: LogFormat::default(),
                rust_log: None,
                check: |lines| {
                    assert_eq!(lines.len(), 1, "{lines:?}");
                    let line = &lines[0];
                    assert!(
                        line.starts_with('[') && line.contains("Z INFO ] "),
                        "{line}"
                    );
                    assert!(line.ends_with("] eviction started grace_s=1"), "{line}");
                },
            },
            Case {
                name: "text honours RUST_LOG",
                format: LogFormat::Text,
                rust_log: Some("debug"),
                check: |lines| {
                    assert_eq!(lines.len(), 2, "{lines:?}");
                    assert!(lines[1].contains("DEBUG] a detail"), "{lines:?}");
                },
            },
            Case {
                name: "a bad RUST_LOG falls back to info",
                format: LogFormat::Text,
                rust_log: Some("debug,monitor=loud"),
                check: |lines| assert_eq!(lines.len(), 1, "{lines:?}"),
            },
            Case {
                name: "json: the span's fields on its records, the outcome on its close",
                format: LogFormat::Json,
                rust_log: None,
                check: |lines| {
                    let records: Vec<serde_json::Value> = lines
                        .iter()
                        .map(|l| serde_json::from_str(l).unwrap())
                        .collect();
                    assert_eq!(records.len(), 2, "{lines:?}");
                    let started = &records[0];
                    assert_eq!(started["level"], "INFO");
                    assert_eq!(started["fields"]["message"], "eviction started");
                    assert_eq!(started["fields"]["grace_s"], 1);
                    assert_eq!(started["span"]["name"], "decision");
                    assert_eq!(started["span"]["pod.name"], "hog");
                    let close = &records[1];
                    assert_eq!(close["fields"]["message"], "close");
                    assert_eq!(close["span"]["pod.name"], "hog");
                    assert_eq!(close["span"]["outcome"], "killed");
                },
            },
        ];
        for case in cases {
            let lines = log_with(case.format, case.rust_log);
            eprintln!("{}: {lines:?}", case.name);
            (case.check)(&lines);
        }
    }
}
