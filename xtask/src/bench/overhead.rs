//! What the workloads pay: real jobs timed inside a pod's cgroup with no agent, with the
//! agent as it runs by default (eBPF source, `--attach-within auto`: the stat programs
//! detached while every threshold is far, as here), and with `--attach-within always` (the
//! stat programs on their hooks at all times, the default before).
//!
//! The jobs: `gcc -O2` of a generated C file (CPU, a compiler's heap), `sort` of a generated
//! text file written back to disk (page cache charged to the pod), and processes in turn,
//! each growing a heap (`bench_load heap`: anonymous faults only). Every job runs once untimed first: the
//! first touch of memory the hypervisor has not backed yet costs several times a later one
//! (a 2 GiB heap took 8.6 s once, then 1.5-3.1 s). The variants alternate round by round, so
//! a machine that speeds up or slows down moves them alike; each figure is the median wall
//! time of its rounds, with its ratio to the median without the agent. The threshold sits
//! 100 MiB above zero of a 16 GiB allocatable: far, as on a node at work. The full run adds
//! the heap job in Linux 6.18 under qemu, fentry among its variants (see [`super::overhead_vm`]).
use std::{
    fmt::Write as _,
    fs,
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use serde_json::json;

use super::{
    Machines, Size,
    env::{Agent, BenchTree, Binaries, Machine, Rng, SourceArg, limit_memory, loadavg, spawn_in},
    overhead_vm, percentile,
    report::{Figure, Section},
};
use crate::setup::ensure_debian_packages;

/// The pod's memory limit: room for every job without reclaim.
const POD_LIMIT: u64 = 3 << 30;

/// What the pod runs, and how large.
struct Sizes {
    rounds: usize,
    c_functions: usize,
    sort_mib: usize,
    heap_mib: usize,
    /// Processes growing a heap of `heap_mib`, one after the other.
    heaps: usize,
}

const SMOKE: Sizes = Sizes {
    rounds: 1,
    c_functions: 20,
    sort_mib: 1,
    heap_mib: 16,
    heaps: 1,
};

const QUICK: Sizes = Sizes {
    rounds: 1,
    c_functions: 300,
    sort_mib: 16,
    heap_mib: 256,
    heaps: 2,
};

const FULL: Sizes = Sizes {
    rounds: 5,
    c_functions: 4000,
    sort_mib: 300,
    heap_mib: 2048,
    heaps: 5,
};

/// How the agent runs beside the jobs.
struct Variant {
    label: &'static str,
    /// `None`: no agent.
    flags: Option<&'static [&'static str]>,
    /// A line the agent logs once it runs as measured, awaited before the jobs.
    ready: Option<&'static str>,
}

const VARIANTS: [Variant; 3] = [
    Variant {
        label: "no agent",
        flags: None,
        ready: None,
    },
    Variant {
        label: "agent, default (stat programs detached far away)",
        // The default, named: the harness pins `always` when no --attach-within is given.
        flags: Some(&["--attach-within", "auto"]),
        ready: Some("memory stat programs detached"),
    },
    Variant {
        label: "agent, --attach-within always",
        flags: Some(&["--attach-within", "always"]),
        ready: None,
    },
];

/// A job and the command that runs it once.
struct Job {
    name: &'static str,
    command: Command,
}

/// Real jobs beside the agent on this machine, then in a VM on 6.18, as `machines` says.
pub(super) fn run(
    bins: &Binaries,
    machine: &Machine,
    size: Size,
    machines: Machines,
) -> anyhow::Result<Section> {
    if !machines.host() {
        return overhead_vm::run(bins, machine, size);
    }
    ensure_debian_packages(&["gcc", "coreutils"])?;
    let sizes = size.pick(&SMOKE, &QUICK, &FULL);
    let tree = BenchTree::create("overhead", 2)?;
    let config = tree.write_config(100 * 1024)?;
    let pod = tree.pod_dir(&tree.uids[1]);
    limit_memory(&pod, tree.hierarchy.v2, POD_LIMIT)?;
    let jobs = prepare_jobs(bins, &tree.scratch, sizes)?;
    let load = loadavg();
    eprintln!(
        "bench: overhead: {} rounds of {} jobs under {} variants (load {load:.2})",
        sizes.rounds,
        jobs.len(),
        VARIANTS.len()
    );
    // times[variant][job]: one wall time per round, in seconds.
    let mut times = vec![vec![Vec::new(); jobs.len()]; VARIANTS.len()];
    let mut jobs = jobs;
    for job in &mut jobs {
        time_job(job, &pod)?;
    }
    for _ in 0..sizes.rounds {
        for (v, variant) in VARIANTS.iter().enumerate() {
            let agent = start(bins, &tree, &config, variant)?;
            for (j, job) in jobs.iter_mut().enumerate() {
                times[v][j].push(time_job(job, &pod)?);
            }
            if let Some(agent) = agent {
                agent.stop()?;
            }
        }
    }
    let mut section = summarize(machine, load, sizes, &jobs, &times);
    // The quick run leaves the emulated 6.18 out: its boot and heaps take minutes.
    if size != Size::Quick && machines.vms() {
        let vm = overhead_vm::run(bins, machine, size)?;
        section.figures.extend(vm.figures);
        section.raw["vm_6_18_tcg"] = vm.raw;
    }
    Ok(section)
}

/// Writes the jobs' inputs into `scratch` and returns the jobs.
fn prepare_jobs(bins: &Binaries, scratch: &Path, sizes: &Sizes) -> anyhow::Result<Vec<Job>> {
    let source = scratch.join("generated.c");
    fs::write(&source, c_source(sizes.c_functions))?;
    let mut gcc = Command::new("gcc");
    gcc.args(["-O2", "-c", "-o"])
        .arg(scratch.join("generated.o"))
        .arg(&source);
    let text = scratch.join("words.txt");
    fs::write(&text, words(sizes.sort_mib << 20))?;
    let mut sort = Command::new("sort");
    sort.env("LC_ALL", "C")
        .arg(format!("--buffer-size={}M", sizes.sort_mib * 4))
        .arg("--temporary-directory")
        .arg(scratch)
        .arg("--output")
        .arg(scratch.join("sorted.txt"))
        .arg(&text);
    // Processes in turn, each growing its heap from nothing: one alone lasts about a second
    // here, too short to tell 1 % from noise.
    let mut heap = Command::new("sh");
    heap.args([
        "-c",
        "for i in $(seq \"$1\"); do \"$2\" heap \"$3\" || exit; done",
        "heap",
        &sizes.heaps.to_string(),
    ])
    .arg(&bins.load)
    .arg(sizes.heap_mib.to_string());
    Ok(vec![
        Job {
            name: "gcc -O2",
            command: gcc,
        },
        Job {
            name: "sort to a file",
            command: sort,
        },
        Job {
            name: "heap growth, processes in turn",
            command: heap,
        },
    ])
}

/// A C file of `functions` functions with loops and branches, enough work for `-O2`.
fn c_source(functions: usize) -> String {
    let mut c = String::new();
    for i in 0..functions {
        let _ = writeln!(
            c,
            "int f{i}(const int *a, int n) {{ int s = {i}; for (int k = 0; k < n; k++) {{ \
             s += a[k] * {m} ^ (s >> 3); if (s & 1) s -= k; else s += a[(k + {i}) % n]; }} \
             return s; }}",
            m = i % 97 + 3
        );
    }
    c
}

/// About `bytes` of lines of random lowercase words.
fn words(bytes: usize) -> String {
    let mut rng = Rng::seeded();
    let mut text = String::with_capacity(bytes + 64);
    while text.len() < bytes {
        let len = 4 + (rng.unit() * 12.0) as usize;
        for _ in 0..len {
            text.push(char::from(b'a' + (rng.unit() * 26.0) as u8));
        }
        text.push('\n');
    }
    text
}

/// The agent for `variant`, ready and idle; `None` for no agent.
fn start(
    bins: &Binaries,
    tree: &BenchTree,
    config: &Path,
    variant: &Variant,
) -> anyhow::Result<Option<Agent>> {
    let Some(flags) = variant.flags else {
        return Ok(None);
    };
    let agent = Agent::start_with(
        bins,
        tree,
        SourceArg::Ebpf,
        flags,
        config,
        "16Gi",
        "overhead",
    )?;
    if let Some(line) = variant.ready {
        agent.wait_for_log(line, Duration::from_secs(30))?;
    }
    // Until its programs are attached and it idles.
    std::thread::sleep(Duration::from_millis(300));
    Ok(Some(agent))
}

/// Runs `job` once inside `pod` and returns its wall time in seconds.
fn time_job(job: &mut Job, pod: &Path) -> anyhow::Result<f64> {
    job.command.stdout(Stdio::null()).stderr(Stdio::piped());
    let started = Instant::now();
    let child = spawn_in(&mut job.command, pod)?;
    let output = child
        .wait_with_output()
        .with_context(|| format!("waiting for {}", job.name))?;
    let seconds = started.elapsed().as_secs_f64();
    if !output.status.success() {
        bail!(
            "{} failed ({}): {}",
            job.name,
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(seconds)
}

fn summarize(
    machine: &Machine,
    load: f64,
    sizes: &Sizes,
    jobs: &[Job],
    times: &[Vec<Vec<f64>>],
) -> Section {
    let mut figures = Vec::new();
    for (j, job) in jobs.iter().enumerate() {
        let median = |v: usize| percentile(&times[v][j], 50.0).unwrap_or(f64::NAN);
        let baseline = Figure::new(
            "overhead",
            &format!("{}, {}", job.name, VARIANTS[0].label),
            "wall time",
            median(0),
            "s",
        )
        .note(format!("median of {} runs", times[0][j].len()))
        .on(machine, load);
        for (v, variant) in VARIANTS.iter().enumerate().skip(1) {
            figures.push(
                Figure::new(
                    "overhead",
                    &format!("{}, {}", job.name, variant.label),
                    "wall time",
                    median(v),
                    "s",
                )
                .note(format!("median of {} runs", times[v][j].len()))
                .on(machine, load)
                .against(&baseline),
            );
        }
        figures.push(baseline);
    }
    let raw = json!({
        "sizes": {
            "rounds": sizes.rounds,
            "c_functions": sizes.c_functions,
            "sort_mib": sizes.sort_mib,
            "heap_mib": sizes.heap_mib,
            "heaps": sizes.heaps,
        },
        "variants": VARIANTS.iter().map(|v| v.label).collect::<Vec<_>>(),
        "jobs": jobs.iter().map(|j| j.name).collect::<Vec<_>>(),
        "wall_seconds": times,
        "load": load,
    });
    Section { figures, raw }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generated_inputs_have_the_asked_sizes() {
        let c = c_source(10);
        assert_eq!(c.lines().count(), 10);
        assert!(c.contains("int f9(const int *a, int n)"));
        let text = words(10_000);
        assert!((10_000..10_100).contains(&text.len()), "{}", text.len());
        assert!(
            text.lines()
                .all(|w| (4..16).contains(&w.len()) && w.bytes().all(|b| b.is_ascii_lowercase()))
        );
    }
}
