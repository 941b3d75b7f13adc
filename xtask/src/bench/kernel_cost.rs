//! Kernel cost: each attached program's average run time per hit, and how much slower a
//! page-fault-heavy loop gets while the agent's programs are attached.
//!
//! Run time per hit comes from the kernel's own accounting (`kernel.bpf_stats_enabled=1`,
//! put back afterwards) as `bpftool prog show` reports it: the change of run_time_ns over the
//! change of run_cnt across a window with page faults and cgroup creations, for the programs
//! the agent holds open. The slowdown is `bench_load faults` (map, touch and unmap 4 MiB,
//! many times, in a pod cgroup) in rounds: without the agent, with the agent (eBPF source)
//! for each way its memcg programs can hook and count (raw tracepoints with per-CPU sums and
//! the programs pinned on; then, as levers measured beside it, every update added to the
//! cgroup's total at once, classic tracepoints, and the default `--attach-within auto`, which
//! detaches the stat programs while the threshold is far, as it is here), and with only an empty program on the memcg raw
//! tracepoints (the floor: the kernel's dispatch); once more without the agent at the end.
//! Statistics stay at their previous setting during those runs, so their own clock reads
//! are not counted. The loop's own CPU time is what is compared (the
//! faults are handled in its context), so time it waits for a CPU held by other work is not.
use std::{collections::BTreeMap, process::Command, time::Duration};

use anyhow::{Context as _, bail};
use serde_json::{Value, json};

use super::{
    Size,
    env::{Agent, BenchTree, Binaries, Machine, SourceArg, SysctlGuard, loadavg, spawn_in},
    percentile,
    report::{Figure, Section},
};
use crate::setup::ensure_debian_packages;

/// One program's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct ProgStats {
    pub run_time_ns: u64,
    pub run_cnt: u64,
}

pub(super) fn run(bins: &Binaries, machine: &Machine, size: Size) -> anyhow::Result<Section> {
    ensure_debian_packages(&["bpftool"])?;
    let (rounds, repeats) = size.pick((30, 1), (300, 3), (1000, 5));
    let tree = BenchTree::create("kernel", 2)?;
    let config = tree.write_config(100 * 1024)?;
    let fault_dir = tree.pod_dir(&tree.uids[1]);
    let load = loadavg();
    eprintln!("bench: kernel: {repeats} rounds of every variant (load {load:.2})");
    // Rounds interleave the variants, so a machine that speeds up or slows down during the
    // run moves every variant alike instead of the ones measured last.
    let variants: Vec<&Hook> = HOOKS.iter().chain([&FLOOR]).collect();
    let mut off = Vec::new();
    let mut on = vec![Vec::new(); variants.len()];
    let mut per_prog = vec![BTreeMap::new(); variants.len()];
    for round in 0..repeats {
        off.push(fault_run(bins, &fault_dir, rounds)?);
        for (i, hook) in variants.iter().enumerate() {
            let attached = Attached::start(bins, &tree, &config, hook)?;
            on[i].push(fault_run(bins, &fault_dir, rounds)?);
            if round == 0 {
                per_prog[i] = run_time_per_hit(bins, &tree, &fault_dir, rounds, attached.pid())?;
            }
            attached.stop()?;
        }
    }
    off.push(fault_run(bins, &fault_dir, rounds)?);
    let hooks: Vec<_> = variants
        .into_iter()
        .zip(on)
        .zip(per_prog)
        .map(|((h, o), p)| (h, o, p))
        .collect();
    let pages = fault_pages(rounds);

    let mut figures = Vec::new();
    let off_median = percentile(&off, 50.0).unwrap_or(f64::NAN);
    let baseline = Figure::new(
        "kernel",
        "page faults, not attached",
        "CPU ns/page",
        off_median,
        "ns",
    )
    .note(format!("median of {} runs x {pages} pages", off.len()))
    .on(machine, load);
    for (hook, on, per_prog) in &hooks {
        let on_median = percentile(on, 50.0).unwrap_or(f64::NAN);
        figures.push(
            Figure::new(
                "kernel",
                &format!("page faults, attached{}", hook.suffix()),
                "CPU ns/page",
                on_median,
                "ns",
            )
            .note(format!(
                "median of {} runs x {pages} pages; rounds {}",
                on.len(),
                round_ratios(on, &off)
            ))
            .on(machine, load)
            .against(&baseline),
        );
        for (name, stats) in per_prog {
            if stats.run_cnt == 0 {
                continue;
            }
            figures.push(
                Figure::new(
                    "kernel",
                    &format!("{name}{}", hook.suffix()),
                    "ns/hit",
                    stats.run_time_ns as f64 / stats.run_cnt as f64,
                    "ns",
                )
                .note(format!(
                    "{} hits, {:.2}/faulted page",
                    stats.run_cnt,
                    stats.run_cnt as f64 / pages as f64
                ))
                .on(machine, load),
            );
        }
    }
    figures.push(baseline);
    let (_, on, per_prog) = &hooks[0];
    let levers: serde_json::Map<String, Value> = hooks[1..]
        .iter()
        .map(|(hook, on, per_prog)| {
            let figures = json!({
                "flags": hook.flags,
                "faults_ns_per_page_attached": on,
                "programs": programs_json(per_prog),
            });
            (hook.tag.to_string(), figures)
        })
        .collect();
    let raw = json!({
        "faults_ns_per_page_not_attached": off,
        "faults_ns_per_page_attached": on,
        "pages_per_run": pages,
        "programs": programs_json(per_prog),
        "levers": levers,
        "load": load,
    });
    Ok(Section { figures, raw })
}

/// How the agent's memcg programs hook the kernel in a measured window.
struct Hook {
    label: &'static str,
    tag: &'static str,
    flags: &'static [&'static str],
    /// A line the agent logs once it runs as measured, awaited before the window.
    ready: Option<&'static str>,
}

impl Hook {
    /// Appended to the case names of every hook but the default.
    fn suffix(&self) -> String {
        if self.tag == HOOKS[0].tag {
            String::new()
        } else {
            format!(" ({})", self.label)
        }
    }
}

/// Not the agent: a program that returns at once on both memcg raw tracepoints
/// (`hook_floor`), what the kernel's dispatch alone costs; no program can cost less.
const FLOOR: Hook = Hook {
    label: "the floor: an empty raw_tp program",
    tag: "floor",
    flags: &[],
    ready: None,
};

/// What one variant attached: the agent with a hook's flags, or the floor's program.
enum Attached {
    Agent(Agent),
    Floor(Floor),
}

impl Attached {
    fn start(
        bins: &Binaries,
        tree: &BenchTree,
        config: &std::path::Path,
        hook: &Hook,
    ) -> anyhow::Result<Self> {
        if hook.tag == FLOOR.tag {
            return Ok(Self::Floor(Floor::attach(bins)?));
        }
        let agent = Agent::start_with(
            bins,
            tree,
            SourceArg::Ebpf,
            hook.flags,
            config,
            "16Gi",
            &format!("kernel-{}", hook.tag),
        )?;
        if let Some(line) = hook.ready {
            agent.wait_for_log(line, Duration::from_secs(30))?;
        }
        // Until its programs are attached and it idles.
        std::thread::sleep(Duration::from_millis(300));
        Ok(Self::Agent(agent))
    }

    fn pid(&self) -> u32 {
        match self {
            Self::Agent(agent) => agent.pid(),
            Self::Floor(floor) => floor.pid(),
        }
    }

    fn stop(self) -> anyhow::Result<()> {
        match self {
            Self::Agent(agent) => agent.stop().map(drop),
            Self::Floor(floor) => floor.detach(),
        }
    }
}

/// Each program's run time per hit over one fault run and 20 cgroup creations and
/// removals, with the kernel's statistics on for this window only.
fn run_time_per_hit(
    bins: &Binaries,
    tree: &BenchTree,
    fault_dir: &std::path::Path,
    rounds: usize,
    pid: u32,
) -> anyhow::Result<BTreeMap<String, ProgStats>> {
    let _stats = SysctlGuard::set("kernel.bpf_stats_enabled", "1")?;
    let before = agent_programs(pid)?;
    if before.is_empty() {
        bail!("bpftool lists no programs of pid {pid}");
    }
    fault_run(bins, fault_dir, rounds)?;
    for i in 0..20 {
        let d = tree.dir.join(format!("kubepods/burstable/lifecycle-{i}"));
        std::fs::create_dir(&d)?;
        std::fs::remove_dir(&d)?;
    }
    Ok(delta(&before, &agent_programs(pid)?))
}

/// `hook_floor` holding its program on both memcg raw tracepoints until dropped.
struct Floor {
    child: std::process::Child,
}

impl Floor {
    fn attach(bins: &Binaries) -> anyhow::Result<Self> {
        use std::io::BufRead as _;
        let mut child = Command::new(&bins.hook_floor)
            .args(["mod_memcg_lruvec_state", "mod_memcg_state"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", bins.hook_floor.display()))?;
        let mut line = String::new();
        let stdout = child.stdout.take().context("hook_floor's stdout")?;
        std::io::BufReader::new(stdout).read_line(&mut line)?;
        if line.trim() != "attached" {
            let _ = child.kill();
            let _ = child.wait();
            bail!("hook_floor did not attach (see its error above)");
        }
        Ok(Self { child })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Closes its stdin, which makes it detach and exit.
    fn detach(mut self) -> anyhow::Result<()> {
        drop(self.child.stdin.take());
        let status = self.child.wait()?;
        if !status.success() {
            bail!("hook_floor exited with {status}");
        }
        Ok(())
    }
}

/// The default hook first (the figures' main case), then each lever measured beside it.
const HOOKS: [Hook; 4] = [
    Hook {
        label: "raw tracepoints",
        tag: "raw",
        flags: &[],
        ready: None,
    },
    // Every update added to the cgroup's total at once: the programs before per-CPU sums.
    Hook {
        label: "no per-CPU budget",
        tag: "budget1",
        flags: &["--per-cpu-budget", "1"],
        ready: None,
    },
    // The kernel fills the classic tracepoint's record before the program runs.
    Hook {
        label: "classic tracepoints",
        tag: "tp",
        flags: &["--memcg-hook", "tracepoint"],
        ready: None,
    },
    // The bench's threshold is gigabytes away: by default the agent takes its stat programs
    // off (the other variants pin them on).
    Hook {
        label: "default (--attach-within auto), far from the threshold: stat programs detached",
        tag: "gated",
        flags: &["--attach-within", "auto"],
        ready: Some("memory stat programs detached"),
    },
];

fn programs_json(per_prog: &BTreeMap<String, ProgStats>) -> Value {
    per_prog
        .iter()
        .map(|(n, s)| {
            (
                n.clone(),
                json!({"run_time_ns": s.run_time_ns, "run_cnt": s.run_cnt}),
            )
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// The spread of one variant's ratio round by round, each run against the mean of the runs
/// without the agent just before and after it: how far one run can mislead on this machine.
fn round_ratios(on: &[f64], off: &[f64]) -> String {
    let ratios: Vec<f64> = on
        .iter()
        .zip(off.windows(2))
        .map(|(on, around)| on / f64::midpoint(around[0], around[1]))
        .collect();
    if ratios.is_empty() {
        return "-".to_string();
    }
    let low = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let high = ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{low:.2}x-{high:.2}x")
}

fn fault_pages(rounds: usize) -> u64 {
    (4 << 20) / 4096 * rounds as u64
}

/// One `bench_load faults 4 ROUNDS` run in `dir`: CPU ns per page.
fn fault_run(bins: &Binaries, dir: &std::path::Path, rounds: usize) -> anyhow::Result<f64> {
    let mut cmd = Command::new(&bins.load);
    cmd.args(["faults", "4", &rounds.to_string()])
        .stdout(std::process::Stdio::piped());
    let child = spawn_in(&mut cmd, dir)?;
    let out = child.wait_with_output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    parse_faults(&text).with_context(|| format!("unexpected output of bench_load faults: {text}"))
}

/// `faults <pages> <CPU ns per page> <wall ns per page>` -> CPU ns per page.
fn parse_faults(text: &str) -> Option<f64> {
    let mut words = text.split_whitespace();
    (words.next()? == "faults").then_some(())?;
    let _pages: u64 = words.next()?.parse().ok()?;
    words.next()?.parse().ok()
}

/// The agent's programs by name, from `bpftool -j prog show`: those whose ids appear in the
/// agent's file descriptors (`prog_id:` in /proc/<pid>/fdinfo).
fn agent_programs(pid: u32) -> anyhow::Result<BTreeMap<String, ProgStats>> {
    let mut ids = Vec::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/fdinfo"))?.flatten() {
        let info = std::fs::read_to_string(entry.path()).unwrap_or_default();
        ids.extend(prog_id(&info));
    }
    let out = Command::new("bpftool")
        .args(["-j", "prog", "show"])
        .output()
        .context("running bpftool")?;
    if !out.status.success() {
        bail!(
            "bpftool prog show failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let progs: Value = serde_json::from_slice(&out.stdout).context("bpftool's JSON")?;
    Ok(programs_of(&progs, &ids))
}

/// The program id of a BPF program fd's fdinfo.
fn prog_id(fdinfo: &str) -> Option<u64> {
    fdinfo
        .lines()
        .find_map(|l| l.strip_prefix("prog_id:")?.trim().parse().ok())
}

pub(super) fn programs_of(progs: &Value, ids: &[u64]) -> BTreeMap<String, ProgStats> {
    let mut found = BTreeMap::new();
    for prog in progs.as_array().into_iter().flatten() {
        if !prog["id"].as_u64().is_some_and(|id| ids.contains(&id)) {
            continue;
        }
        let name = prog["name"].as_str().unwrap_or("?").to_string();
        let entry: &mut ProgStats = found.entry(name).or_default();
        entry.run_time_ns += prog["run_time_ns"].as_u64().unwrap_or(0);
        entry.run_cnt += prog["run_cnt"].as_u64().unwrap_or(0);
    }
    found
}

/// Counter changes between two snapshots.
pub(super) fn delta(
    before: &BTreeMap<String, ProgStats>,
    after: &BTreeMap<String, ProgStats>,
) -> BTreeMap<String, ProgStats> {
    after
        .iter()
        .map(|(name, a)| {
            let b = before.get(name).copied().unwrap_or_default();
            let d = ProgStats {
                run_time_ns: a.run_time_ns.saturating_sub(b.run_time_ns),
                run_cnt: a.run_cnt.saturating_sub(b.run_cnt),
            };
            (name.clone(), d)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_agents_programs_count() {
        let progs = json!([
            {"id": 1, "name": "mod_memcg_lruve", "run_time_ns": 900, "run_cnt": 10},
            {"id": 2, "name": "other", "run_time_ns": 5, "run_cnt": 5},
            {"id": 3, "name": "no_stats"}
        ]);
        let found = programs_of(&progs, &[1, 3]);
        assert_eq!(found.len(), 2);
        assert_eq!(found["no_stats"], ProgStats::default());
        assert_eq!(
            prog_id("pos:\t0\nprog_type:\t5\nprog_id:\t969\n"),
            Some(969)
        );
        assert_eq!(prog_id("pos:\t0\n"), None);
        assert_eq!(
            found["mod_memcg_lruve"],
            ProgStats {
                run_time_ns: 900,
                run_cnt: 10
            }
        );
    }

    #[test]
    fn round_ratios_compare_each_run_with_the_runs_around_it() {
        assert_eq!(
            round_ratios(&[110.0, 300.0], &[100.0, 100.0, 200.0]),
            "1.10x-2.00x"
        );
        assert_eq!(round_ratios(&[], &[100.0]), "-");
    }

    #[test]
    fn deltas_between_snapshots() {
        let b = BTreeMap::from([(
            "a".to_string(),
            ProgStats {
                run_time_ns: 100,
                run_cnt: 2,
            },
        )]);
        let a = BTreeMap::from([
            (
                "a".to_string(),
                ProgStats {
                    run_time_ns: 400,
                    run_cnt: 5,
                },
            ),
            (
                "b".to_string(),
                ProgStats {
                    run_time_ns: 10,
                    run_cnt: 1,
                },
            ),
        ]);
        let d = delta(&b, &a);
        assert_eq!(
            d["a"],
            ProgStats {
                run_time_ns: 300,
                run_cnt: 3
            }
        );
        assert_eq!(
            d["b"],
            ProgStats {
                run_time_ns: 10,
                run_cnt: 1
            }
        );
    }

    #[test]
    fn fault_output_parses() {
        assert_eq!(parse_faults("faults 1024 1095.1 1210.4\n"), Some(1095.1));
        assert_eq!(parse_faults("nope"), None);
    }
}
