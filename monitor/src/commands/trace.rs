//! `monitor trace`: live kernel memory events per cgroup.
use std::{
    io::{self, Write as _},
    process::ExitCode,
    time::Duration,
};

use clap::ValueEnum;

use crate::{
    cgroupfs::{CgroupPaths, MemoryHierarchy, stats},
    source::ebpf::{KernelSource, LoadOptions},
    trace::{TraceRecord, TraceView},
};

/// Output format of event lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Aligned columns for people.
    Text,
    /// One JSON object per line.
    Json,
}

/// Print live memory events from the kernel: per-cgroup stat changes larger than the step,
/// and cgroup creation and removal, with the cgroup path resolved from its id.
#[derive(clap::Args, Debug)]
pub struct TraceArgs {
    /// Output format.
    #[arg(long, value_enum, default_value_t = Output::Text)]
    pub output: Output,
    /// Stop after this many seconds (default: run until Ctrl-C).
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// Only show this cgroup and the cgroups below it: a path below the memory hierarchy's
    /// root (`/kubepods/burstable`) or the full cgroupfs path.
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<String>,
    /// Report a stat when it moved by at least this many bytes since its last report.
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 20)]
    pub step: u64,
}

pub fn run(args: TraceArgs) -> anyhow::Result<ExitCode> {
    if let Some(d) = args.duration
        && !(d.is_finite() && d > 0.0)
    {
        anyhow::bail!("--duration must be a positive number of seconds, got {d}");
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(trace(args))
}

async fn trace(args: TraceArgs) -> anyhow::Result<ExitCode> {
    let hierarchy = MemoryHierarchy::discover()?;
    let filter = args.cgroup.as_deref().map(|c| relative_to(&hierarchy, c));
    let mut source = KernelSource::load(LoadOptions {
        step_bytes: args.step,
        hierarchy_id: hierarchy.hierarchy_id,
    })?;
    for skipped in source.skipped() {
        log::warn!("not attached: {} ({})", skipped.program.hook(), skipped.reason);
    }
    // Scan after attaching so that no cgroup created in between is missed.
    let paths = CgroupPaths::scan(&hierarchy.mount)?;
    let mut view = TraceView::new(paths, filter);
    let start_ns = monotonic_ns();
    let mut out = io::stdout().lock();
    if args.output == Output::Text {
        writeln!(out, "{}", TraceRecord::text_header())?;
    }
    let deadline = tokio::time::sleep(
        args.duration
            .map_or(Duration::MAX / 4, Duration::from_secs_f64),
    );
    tokio::pin!(deadline);
    let mut batch = Vec::new();
    loop {
        tokio::select! {
            _ = &mut deadline => break,
            _ = tokio::signal::ctrl_c() => break,
            res = source.next_batch(&mut batch) => res?,
        }
        let mut baseline = |id, path: &str, stat| {
            let own = stats::read_own(&hierarchy.dir(path), hierarchy.version, stat).ok()?;
            Some(own as i64 - source.running_total(id, stat).unwrap_or(0))
        };
        for decoded in batch.drain(..) {
            let Some(record) = view.apply(decoded?, &mut baseline) else { continue };
            let line = match args.output {
                Output::Text => record.text(start_ns),
                Output::Json => serde_json::to_string(&record)?,
            };
            if let Err(e) = writeln!(out, "{line}") {
                // A closed pipe (`monitor trace | head`) ends the trace quietly.
                return if e.kind() == io::ErrorKind::BrokenPipe { Ok(ExitCode::SUCCESS) } else { Err(e.into()) };
            }
        }
        out.flush()?;
    }
    let drops = source.drops();
    if drops.ring_full > 0 || drops.map_full > 0 {
        eprintln!(
            "monitor: the kernel dropped {} events (ring buffer full) and could not track {} cgroups (map full)",
            drops.ring_full, drops.map_full
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `--cgroup` as a path below the hierarchy root.
fn relative_to(hierarchy: &MemoryHierarchy, cgroup: &str) -> String {
    let rel = std::path::Path::new(cgroup)
        .strip_prefix(&hierarchy.mount)
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|_| cgroup.to_string());
    format!("/{}", rel.trim_matches('/'))
}

/// CLOCK_MONOTONIC now, the clock of the kernel's timestamps.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
