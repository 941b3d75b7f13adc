//! The kernel programs' own log records (aya-log), carried into the agent's log under the
//! target `monitor::kernel`.
//!
//! The programs log only on their rare paths: a record dropped because the ring was full, a
//! cgroup not counted because the per-cgroup map was full, a removed cgroup that could not be
//! noted. Without the log (an object built without it, a kernel that refuses its map) the
//! agent says so once and runs on: the same losses are counted in the metrics either way.
use aya::Ebpf;
use aya_log::EbpfLogger;
use tokio::io::{Interest, unix::AsyncFd};

/// The log target of every forwarded record.
pub const TARGET: &str = "monitor::kernel";

/// Starts forwarding the kernel programs' log records, on a task of the current tokio
/// runtime; when that is not possible, logs why once and returns.
pub fn forward(ebpf: &mut Ebpf) {
    let logger = match EbpfLogger::init_with_logger(ebpf, Forward) {
        Ok(logger) => logger,
        Err(error) => {
            tracing::warn!(
                "no log records from the kernel programs: {error}; their losses are still \
                 counted in the metrics"
            );
            return;
        }
    };
    // SAFETY: the logger owns its ring's map fd and keeps it open for as long as the AsyncFd
    // holds it.
    let mut logger = match unsafe { AsyncFd::register_with_interest(logger, Interest::READABLE) } {
        Ok(logger) => logger,
        Err(error) => {
            tracing::warn!("no log records from the kernel programs: polling their ring: {error}");
            return;
        }
    };
    tokio::spawn(async move {
        loop {
            let Ok(mut ready) = logger.readable_mut().await else {
                tracing::warn!("no more log records from the kernel programs: their ring failed");
                return;
            };
            ready.get_inner_mut().flush();
            ready.clear_ready();
        }
    });
}

/// Hands each record aya-log decodes to tracing, with the program's source location.
struct Forward;

impl log::Log for Forward {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        let module = record.module_path().unwrap_or_default();
        let line = record.line().unwrap_or_default();
        // The prefix tells the kernel's records apart in the text format, which shows no target.
        let message = format_args!("kernel: {}", record.args());
        match record.level() {
            log::Level::Error => tracing::error!(target: TARGET, module, line, "{message}"),
            log::Level::Warn => tracing::warn!(target: TARGET, module, line, "{message}"),
            log::Level::Info => tracing::info!(target: TARGET, module, line, "{message}"),
            log::Level::Debug => tracing::debug!(target: TARGET, module, line, "{message}"),
            log::Level::Trace => tracing::trace!(target: TARGET, module, line, "{message}"),
        }
    }

    fn flush(&self) {}
}
