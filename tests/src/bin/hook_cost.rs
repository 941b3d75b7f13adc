//! The memcg programs' cost on one kernel, hook by hook, for `cargo xtask bench hooks`
//! (root only). Kernels from 6.13 have both the memcg tracepoints and the functions the
//! fentry programs attach to, so there the two hooks are compared on the same machine in the
//! same run, against page faults with no program attached.
//!
//! `hook_cost ROUNDS REPEATS` runs, REPEATS times in turn: `bench_load faults 4 ROUNDS` in a
//! cgroup of its own with no programs loaded, with the programs on the memcg tracepoints in
//! their raw form (the default) and as classic tracepoints, with them on fentry, and on fentry adding every update to the cgroup's total at once
//! (no per-CPU sums). With programs loaded it runs the loop twice: once timed with the
//! kernel's run-time statistics off (their clock reads would be counted), once with them on
//! for each program's run time per hit. The ring buffer is drained while the loop runs, as
//! the agent would. Each measurement is one line on stdout:
//! `hook-cost {"hook":..,"ns_per_page":..,"pages":..,"programs":[..],"unavailable":..}`.
use std::{
    process::{Command, Stdio},
    time::Duration,
};

use monitor::source::{
    ebpf::{KernelSource, LoadOptions, MemcgHook, cgroup_map_entries},
    run_stats::{self, ProgramRuns, RunStatsWindow},
};
use serde_json::{Value, json};
use tests::{TestCgroup, binary, cgroup_tree};

/// Same as the agent's default `--step`, so wake-up records come as often as in production.
const STEP_BYTES: u64 = 256 << 10;
const MIB_PER_ROUND: usize = 4;

#[derive(Clone, Copy)]
enum Hook {
    None,
    /// The agent's default where the memcg tracepoints exist.
    RawTracepoints,
    Tracepoints,
    Fentry,
    /// fentry with every update added to the cgroup's total at once (`--per-cpu-budget 1`),
    /// the lever the default per-CPU sums are measured against.
    FentryAtOnce,
}

impl Hook {
    fn label(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::RawTracepoints => "raw-tracepoints",
            Self::Tracepoints => "tracepoints",
            Self::Fentry => "fentry",
            Self::FentryAtOnce => "fentry-at-once",
        }
    }
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().unwrap_or_else(|_| usage()))
        .collect();
    let [rounds, repeats] = args[..] else { usage() };
    let cgroup = TestCgroup::create("hook-cost");
    let dir = cgroup.child("faults");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let _in_runtime = runtime.enter();
    for _ in 0..repeats {
        for hook in [
            Hook::None,
            Hook::RawTracepoints,
            Hook::Tracepoints,
            Hook::Fentry,
            Hook::FentryAtOnce,
        ] {
            let line = measure(hook, &cgroup, &dir, rounds);
            println!("hook-cost {line}");
        }
    }
}

fn usage() -> ! {
    eprintln!("usage: hook_cost ROUNDS REPEATS");
    std::process::exit(2)
}

fn measure(hook: Hook, cgroup: &TestCgroup, dir: &std::path::Path, rounds: usize) -> Value {
    let (memcg_hook, budget_pages) = match hook {
        Hook::None => return fault_figures(hook, faults(dir, rounds, None), Vec::new()),
        Hook::RawTracepoints => (MemcgHook::Auto, None),
        Hook::Tracepoints => (MemcgHook::Tracepoint, None),
        Hook::Fentry => (MemcgHook::Fentry, None),
        Hook::FentryAtOnce => (MemcgHook::Fentry, Some(1)),
    };
    let loaded = KernelSource::load(LoadOptions {
        step_bytes: STEP_BYTES,
        hierarchy_id: cgroup.hierarchy.hierarchy_id,
        memcg_hook,
        budget_pages,
        cgroup_map_entries: cgroup_map_entries(0),
    });
    let mut source = match loaded {
        Ok(source) => source,
        Err(e) => return unavailable(hook, &format!("{e}")),
    };
    let on_tracepoints = source.fentry_functions().is_empty();
    if !source.tracks_memory()
        || on_tracepoints != matches!(hook, Hook::RawTracepoints | Hook::Tracepoints)
    {
        let reasons: Vec<String> = source
            .skipped()
            .iter()
            .map(|s| format!("{}: {}", s.program.name, s.reason))
            .collect();
        return unavailable(hook, &reasons.join("; "));
    }
    let timed = faults(dir, rounds, Some(&mut source));
    let window = match RunStatsWindow::open() {
        Ok(window) => window,
        Err(e) => return unavailable(hook, &format!("{e}")),
    };
    let before = source.program_runs();
    faults(dir, rounds, Some(&mut source));
    let runs = run_stats::delta(&before, &source.program_runs());
    drop(window);
    fault_figures(hook, timed, runs)
}

/// (pages, ns per page) of one `bench_load faults` run in `dir`, draining `source` meanwhile.
fn faults(
    dir: &std::path::Path,
    rounds: usize,
    mut source: Option<&mut KernelSource>,
) -> (u64, f64) {
    let mut cmd = Command::new(binary("bench_load", "MONITOR_BENCH_LOAD_BIN"));
    cmd.args(["faults", &MIB_PER_ROUND.to_string(), &rounds.to_string()])
        .stdout(Stdio::piped());
    let mut child = cgroup_tree::spawn_in(&mut cmd, dir).expect("starting bench_load");
    let mut events = Vec::new();
    while child.try_wait().expect("waiting for bench_load").is_none() {
        if let Some(source) = source.as_deref_mut() {
            source.read_pending(&mut events);
            events.clear();
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let out = child.wait_with_output().expect("bench_load output");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut words = text.split_whitespace();
    match (words.next(), words.next(), words.next()) {
        (Some("faults"), Some(pages), Some(ns)) => (
            pages.parse().expect("pages"),
            ns.parse().expect("ns per page"),
        ),
        _ => panic!("unexpected output of bench_load faults: {text}"),
    }
}

fn fault_figures(hook: Hook, (pages, ns_per_page): (u64, f64), runs: Vec<ProgramRuns>) -> Value {
    let programs: Vec<Value> = runs
        .iter()
        .filter(|r| r.runs > 0)
        .map(|r| json!({"program": r.program, "run_time_ns": r.run_time_ns, "runs": r.runs}))
        .collect();
    json!({"hook": hook.label(), "ns_per_page": ns_per_page, "pages": pages, "programs": programs})
}

fn unavailable(hook: Hook, why: &str) -> Value {
    json!({"hook": hook.label(), "unavailable": why})
}
