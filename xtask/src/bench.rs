//! `cargo xtask bench [NAME] [--quick | --smoke] [--json] [--agent PATH]`: the agent's speed measured side by
//! side in one run, each figure next to a baseline measured in the same run.
//!
//! - `latency`: time from the allocation that crosses an eviction threshold (read by the
//!   allocating process) to the agent's decision, for the eBPF source and the poll source at
//!   100 ms, 1 s and 10 s.
//! - `density`: the agent's CPU share and peak RSS with 1,000 to 10,000 pod cgroups, a share
//!   of them churning memory, eBPF source against polling every second.
//! - `kernel`: each kernel program's run time per hit, and how much slower page faults get
//!   while the programs are attached.
//! - `hooks`: the memcg programs on tracepoints against the same programs on fentry (the
//!   5.11-6.12 path), side by side on Linux 6.18 booted under qemu, and on this machine.
//! - `ranking`: the ranking micro-benchmark (incremental index against the fastest of a
//!   comparator re-sort, a sort of precomputed keys and a minimum scan).
//! - `oom-race`: how often the agent stops a pod allocating ~2 GiB/s before the kernel's OOM
//!   killer, per margin and source, with `--kube` through the API alone against kill-first;
//!   victims that handle SIGTERM on cgroup v2 in a VM, with and without the memory brake;
//!   then the real peers (earlyoom, systemd-oomd) against the agent on whole-node memory in
//!   a VM (`oom-v2` and `oom-peers` run those parts alone).
//! - `pid-race`: a fork bomb against a hard `pid.available` threshold, the kernel's fork
//!   counter against a 10 s read; crossing -> decision p50/p99, and a fork's cost with the
//!   agent attached against none.
//!
//! - `overhead`: what real jobs in a pod (a C build, a sort to a file, a growing heap) pay
//!   for the agent beside them: wall time with no agent, the default agent (stat programs
//!   detached far from every threshold) and `--attach-within always`; the full run adds the
//!   heap job in the 6.18 VM, on fentry too. The other benches pin
//!   `--attach-within always`: they measure the agent with its stat programs on.
//! - `starved`: crossing -> decision and crossing -> the hog's death with the acting agent
//!   (its defaults) held to the DaemonSet's CPU limit, a CFS quota of 100m (`--cpu-limit`),
//!   against no limit, trials alternating, at 1,000 and 10,000 pods (`--pods`) a tenth of
//!   which churn.
//!
//! Figures are printed as one table; `--json` adds one JSON object as the last line. Nothing
//! here passes or fails on speed: only a harness that cannot measure fails. Three sizes
//! ([`Size`]): the full run measures, `--quick` gives rough figures in minutes, and the smoke
//! (`cargo xtask test` runs it) proves each benchmark still runs: one trial of each case, one
//! VM boot where a case needs a VM, on the test build's binaries; it fails when a trial did
//! not run to its end or a figure did not parse, never on a figure's value.
mod cpu_quota;
mod density;
mod env;
mod hooks;
mod kernel_cost;
mod latency;
mod oom_arm64;
mod oom_brake;
mod oom_peers;
mod oom_race;
mod overhead;
mod overhead_vm;
mod pid_race;
mod ranking;
mod reclaim;
mod report;
mod starved;

use std::time::Instant;

use anyhow::{Context as _, bail};
use clap::ValueEnum;

pub(crate) use report::percentile;

use crate::process::status;

/// Which benchmark `cargo xtask bench NAME` runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Name {
    Latency,
    Density,
    Kernel,
    Hooks,
    Ranking,
    OomRace,
    /// A fork bomb against a `pid.available` threshold, and a fork's cost.
    PidRace,
    /// Real jobs in a pod with and without the agent beside them.
    Overhead,
    /// Crossing -> decision and -> the hog's death under the DaemonSet's CPU limit.
    Starved,
    /// The oom-race's cgroup v2 cases alone (victims that handle SIGTERM, with and without
    /// the memory brake, in a VM); `oom-race` includes them.
    OomV2,
    /// The oom-race's peers alone (earlyoom and systemd-oomd against the agent on
    /// whole-node memory, in a VM); `oom-race` includes them.
    OomPeers,
    /// The oom-race's cgroup v2 race on arm64 beside x86_64 alone (6.12 VMs of each);
    /// `oom-race` includes it.
    OomArm64,
    /// Reclaim before eviction (`--reclaim-first`) against the default, in a VM: idle cache,
    /// the oom-race's draining cases, cache in use.
    Reclaim,
}

/// How much of each benchmark a run does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Size {
    /// Each case's machinery once, on the test build (`cargo xtask test`).
    Smoke,
    /// A few trials a case: rough figures in minutes (`--quick`).
    Quick,
    /// The figures docs/benchmarks.md quotes.
    Full,
}

impl Size {
    /// The value for this size.
    pub(super) fn pick<T>(self, smoke: T, quick: T, full: T) -> T {
        match self {
            Self::Smoke => smoke,
            Self::Quick => quick,
            Self::Full => full,
        }
    }

    fn label(self) -> &'static str {
        self.pick(" (--smoke)", " (--quick)", "")
    }

    /// In the smoke, a case that returned fewer trials than it ran did not run to its end.
    pub(super) fn expect_trials(self, case: &str, got: usize, asked: usize) -> anyhow::Result<()> {
        if self == Self::Smoke && got < asked {
            bail!("{case}: {got} of {asked} trials reported a result");
        }
        Ok(())
    }
}

/// The helpers the benchmarks run beside the agent (the tests crate's binaries).
const HELPERS: [&str; 11] = [
    "ranking_timings",
    "bench_load",
    "hook_cost",
    "hook_floor",
    "oom_race_trials",
    "pid_race_trials",
    "reap_time",
    "oom_peers_trials",
    "overhead_trials",
    "reclaim_trials",
    "alloc",
];

/// The DaemonSet's CPU limit (deploy/base/daemonset.yaml), in millicores: the `starved`
/// bench's limit unless `--cpu-limit` says otherwise.
pub(crate) const DAEMONSET_MILLICORES: u64 = 100;

/// How the benchmarks run the agent, and how they report.
pub(crate) struct Options {
    /// Also print the results as one JSON object.
    pub json: bool,
    /// The `monitor` binary measured instead of the build's.
    pub agent: Option<std::path::PathBuf>,
    /// Flags for every agent started.
    pub agent_flags: Vec<String>,
    /// The `starved` bench's CPU limit, millicores.
    pub cpu_limit: u64,
    /// The `starved` bench's pod counts (empty: the size's).
    pub pods: Vec<usize>,
    /// Where the cases run: `cargo xtask test` runs the smoke's VM cases beside its VM tests.
    pub machines: Machines,
}

/// Which of the cases a run takes: those on this machine, those that boot a VM, or both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Machines {
    Both,
    /// This machine's cases alone: no VM boots.
    Host,
    /// The cases in VMs alone (hooks and overhead on 6.18, oom-race's cgroup v2 cases and
    /// peers on 6.1); they put no load on this machine's memory, only on its cores.
    Vms,
}

impl Machines {
    fn host(self) -> bool {
        self != Self::Vms
    }

    fn vms(self) -> bool {
        self != Self::Host
    }
}

impl Default for Options {
    /// The build's agent with its defaults, figures as a table.
    fn default() -> Self {
        Self {
            json: false,
            agent: None,
            agent_flags: Vec::new(),
            cpu_limit: DAEMONSET_MILLICORES,
            pods: Vec::new(),
            machines: Machines::Both,
        }
    }
}

pub(crate) fn run(name: Option<Name>, size: Size, options: Options) -> anyhow::Result<()> {
    let started = Instant::now();
    let needs_root = name != Some(Name::Ranking);
    if needs_root && !env::is_root() {
        bail!(
            "the latency, density, kernel, hooks, oom-race, pid-race, overhead, starved and oom-peers benchmarks create cgroups and load kernel programs: run as root (or `cargo xtask bench ranking`)"
        );
    }
    // Before the build: a wrong --agent is said at once, not minutes later.
    let bins = env::Binaries::locate(size, options.agent, options.agent_flags)?;
    // The arm64 race takes the image's agents and the test build's helpers, which it builds.
    if name != Some(Name::OomArm64) {
        build(size, needs_root)?;
    }
    let machine = env::Machine::read();
    let mut figures = Vec::new();
    let mut raw_sections = serde_json::Map::new();
    let mut run_one = |n: Name, f: &mut dyn FnMut() -> anyhow::Result<report::Section>| {
        let label = format!("{n:?}").to_lowercase();
        eprintln!("bench: {label} (load {:.2})", env::loadavg());
        let section_started = Instant::now();
        let section = f().with_context(|| format!("bench {label}{}", size.label()))?;
        if size == Size::Smoke {
            report::check_smoke(&label, &section.figures)?;
        }
        // Where the run's time goes, for keeping each size within its budget.
        eprintln!(
            "bench: {label} took {:.0} s",
            section_started.elapsed().as_secs_f64()
        );
        figures.extend(section.figures);
        raw_sections.insert(label, section.raw);
        Ok::<(), anyhow::Error>(())
    };
    let machines = options.machines;
    for section in sections(name, machines) {
        match section {
            Name::Latency => run_one(section, &mut || latency::run(&bins, &machine, size)),
            Name::Density => run_one(section, &mut || density::run(&bins, &machine, size)),
            Name::Kernel => run_one(section, &mut || kernel_cost::run(&bins, &machine, size)),
            Name::Hooks => run_one(section, &mut || hooks::run(&bins, &machine, size, machines)),
            Name::Ranking => run_one(section, &mut || ranking::run(&bins, &machine, size)),
            Name::OomRace => run_one(section, &mut || {
                oom_race::run(&bins, &machine, size, machines.vms())
            }),
            Name::PidRace => run_one(section, &mut || pid_race::run(&bins, &machine, size)),
            Name::Overhead => run_one(section, &mut || {
                overhead::run(&bins, &machine, size, machines)
            }),
            Name::Starved => run_one(section, &mut || {
                starved::run(&bins, &machine, size, options.cpu_limit, &options.pods)
            }),
            Name::OomV2 => run_one(section, &mut || oom_brake::run(&bins, &machine, size)),
            Name::OomPeers => run_one(section, &mut || oom_peers::run(&bins, &machine, size)),
            Name::OomArm64 => run_one(section, &mut || oom_arm64::run(&machine, size)),
            Name::Reclaim => run_one(section, &mut || reclaim::run(&bins, &machine, size)),
        }?;
    }
    let elapsed = started.elapsed();
    println!("{}", report::table(&figures));
    println!(
        "machine: {} cores, kernel {}; bench took {:.0} s{}",
        machine.cores,
        machine.kernel,
        elapsed.as_secs_f64(),
        size.label()
    );
    println!("agent: {}", bins.monitor.display());
    if !bins.agent_flags.is_empty() {
        println!("agent flags: {}", bins.agent_flags.join(" "));
    }
    if options.json {
        println!(
            "{}",
            report::json(&machine, size, elapsed, &figures, raw_sections)
        );
    }
    Ok(())
}

/// The sections a run takes, in order: `name`'s, or every one, on `machines`. The sections
/// on both sides split inside (hooks, overhead); the oom-race's VM cases are sections of their
/// own (named alone, or run alone when the run leaves this machine's cases out).
fn sections(name: Option<Name>, machines: Machines) -> Vec<Name> {
    use Name::{
        Density, Hooks, Kernel, Latency, OomArm64, OomPeers, OomRace, OomV2, Overhead, PidRace,
        Ranking, Reclaim, Starved,
    };
    // Every section has cases on this machine.
    const ALL: [Name; 9] = [
        Latency, Density, Kernel, Hooks, Ranking, OomRace, PidRace, Overhead, Starved,
    ];
    // Those with cases in a VM too, split inside; oom-race's are OomV2's, OomPeers' and
    // OomArm64's.
    const PART_IN_VMS: [Name; 2] = [Hooks, Overhead];
    if let Some(OomV2 | OomPeers | OomArm64 | Reclaim) = name {
        return name.into_iter().collect();
    }
    let wanted = |n: Name| name.is_none_or(|named| named == n);
    let mut picked: Vec<Name> = ALL
        .into_iter()
        .filter(|n| wanted(*n) && (machines.host() || PART_IN_VMS.contains(n)))
        .collect();
    if wanted(OomRace) && machines == Machines::Vms {
        picked.extend([OomV2, OomPeers, OomArm64]);
    }
    // In a VM only, a section of its own; not in the test command's smoke (its VM part runs
    // beside the host's timed tests, and this section's load made the host's OOM race lose).
    if name.is_none() && machines == Machines::Both {
        picked.push(Reclaim);
    }
    picked
}

/// The agent and the helpers, built as the size runs them: the smoke takes the test build's
/// binaries (`cargo test` built them; the same command finds them fresh), the others one
/// release build of everything.
fn build(size: Size, needs_root: bool) -> anyhow::Result<()> {
    let mut build = crate::process::cargo();
    if size == Size::Smoke {
        eprintln!("bench: the smoke runs the test build's agent and helpers");
        return status(build.args(["test", "--no-run", "--quiet"]));
    }
    build.args(["build", "--release", "--quiet", "--package", "tests"]);
    let helpers: &[&str] = if needs_root { &HELPERS } else { &HELPERS[..1] };
    if needs_root {
        eprintln!("bench: building the agent and the load helpers (release)");
        build.args(["--package", "monitor", "--bin", "monitor"]);
    }
    for helper in helpers {
        build.args(["--bin", helper]);
    }
    status(&mut build)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_smoke_s_two_sides_together_take_every_case_once() {
        use Name::{
            Density, Hooks, Kernel, Latency, OomArm64, OomPeers, OomRace, OomV2, Overhead, PidRace,
            Ranking, Reclaim, Starved,
        };
        let host = [
            Latency, Density, Kernel, Hooks, Ranking, OomRace, PidRace, Overhead, Starved,
        ];
        assert_eq!(sections(None, Machines::Host), host);
        let every = sections(None, Machines::Both);
        assert_eq!(
            every[..host.len()],
            host,
            "each such section has cases here"
        );
        assert_eq!(every[host.len()..], [Reclaim], "and one in a VM alone");
        // Hooks and overhead take their VM parts; oom-race's VM cases are sections of their own.
        assert_eq!(
            sections(None, Machines::Vms),
            [Hooks, Overhead, OomV2, OomPeers, OomArm64]
        );
        assert_eq!(sections(Some(Reclaim), Machines::Both), [Reclaim]);
        assert_eq!(
            sections(Some(OomRace), Machines::Vms),
            [OomV2, OomPeers, OomArm64]
        );
        assert_eq!(sections(Some(OomArm64), Machines::Both), [OomArm64]);
        assert_eq!(sections(Some(Starved), Machines::Vms), []);
        assert_eq!(sections(Some(OomV2), Machines::Both), [OomV2]);
        assert_eq!(sections(Some(Hooks), Machines::Host), [Hooks]);
    }

    #[test]
    fn the_starved_bench_holds_the_agent_to_the_daemonsets_cpu_limit() {
        let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/base/daemonset.yaml");
        let yaml = std::fs::read_to_string(manifest).unwrap();
        let limits = yaml.split("limits:").nth(1).expect("the agent has limits");
        let cpu = limits
            .lines()
            .find_map(|l| l.trim().strip_prefix("cpu: "))
            .expect("a CPU limit");
        assert_eq!(cpu, format!("{DAEMONSET_MILLICORES}m"));
    }
}
