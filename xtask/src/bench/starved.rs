//! Starved of CPU: how soon the agent acts on a crossing when held to the DaemonSet's CPU
//! limit, against the same agent without a limit, at N pods a tenth of which churn memory.
//!
//! A bench-owned tree holds N burstable pods; [`super::density`]'s churn runs throughout
//! (every tenth pod's memory up and down by 2 MiB once a second). One agent acts on the tree
//! (a cgroup kill, not a dry run) with the defaults the DaemonSet runs, a hard
//! `allocatableMemory.available` threshold 64 MiB above the tree's working set, from a memory
//! cgroup and a CPU cgroup of its own. Trials alternate between the DaemonSet's CPU limit
//! (a CFS quota of 100m: 10 ms each 100 ms period) and no limit, so both cases share the
//! machine's load; each trial:
//! 1. waits a random 0.3-2.3 s, so crossings fall at every phase of the agent's own timers
//!    (the waiting records read every second, the resync every 10 s);
//! 2. starts a hog, a `bench_load step` in a pod that does not churn, and has it allocate
//!    past the threshold page by page (`race`): it reads CLOCK_MONOTONIC right after the
//!    page that crosses (by the working set read just before) and says so at once;
//! 3. takes the agent's decision for the hog's pod (its `monotonic_ns`) and the hog's death
//!    (its parent's wait returning), and the CFS periods that ran out of quota meanwhile;
//! 4. waits out the eviction gates (100 ms) before the next.
//!
//! A hog the agent sees crossing before it stamps the crossing (the churn moves the working
//! set by a few MiB) is counted apart, without a latency.
use std::{
    io::{BufRead as _, BufReader, Write as _},
    path::Path,
    process::{ChildStdin, ChildStdout, Command, Stdio},
    sync::mpsc,
    time::Duration,
};

use anyhow::{Context as _, bail};
use serde_json::{Value, json};
use test_harness::{cgroup_tree::oom_kills_in, watched_process::WatchedProcess};

use super::{
    Size,
    cpu_quota::{CpuQuota, Throttling},
    density::{start_churn, stop_churn},
    env::{BenchTree, Binaries, Machine, Rng, limit_memory, loadavg, monotonic_ns, spawn_in},
    percentile,
    report::{Figure, Section},
};

const MIB: u64 = 1 << 20;
/// Allocatable memory given to the agent.
const ALLOCATABLE: u64 = 4 << 30;
/// How far above the tree's working set the threshold lies: what the hog allocates.
const HOG_TO_CROSS: u64 = 64 * MIB;
/// The hog allocates this much past the crossing page, clear of the kernel's 256 KiB step.
const BEYOND: u64 = MIB;
/// The agent's memory limit: far above what it takes.
const AGENT_MEMORY: u64 = 1 << 30;
/// The tree's memory limit: the pods, the churn and the hog, with room.
const TREE_MEMORY: u64 = 1 << 30;

/// One trial's timestamps (CLOCK_MONOTONIC ns).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Trial {
    pub limited: bool,
    /// Right after the crossing page, in the hog; `None` when the hog died first.
    pub crossed: Option<u64>,
    pub decided: u64,
    pub died: u64,
    /// CFS periods of the agent's cgroup from the hog's start to its death.
    pub throttling: Throttling,
    /// The kernel OOM-killed the hog (a loss for the agent).
    pub oom_killed: bool,
}

impl Trial {
    fn after_crossing(&self, at: u64) -> Option<f64> {
        Some((at as i64 - self.crossed? as i64) as f64 / 1e6)
    }
    pub(super) fn decision_ms(&self) -> Option<f64> {
        self.after_crossing(self.decided)
    }
    pub(super) fn death_ms(&self) -> Option<f64> {
        self.after_crossing(self.died)
    }
}

/// One size's trials, with the agent's CPU per case.
pub(super) struct Run {
    pub pods: usize,
    /// The limited case's CPU limit, millicores.
    pub millicores: u64,
    pub trials: Vec<Trial>,
    /// The agent's CPU over each case's trials, percent of one core: (limited, unlimited).
    pub cpu_percent: (f64, f64),
    pub load: f64,
}

/// `millicores`: the limited case's CPU limit (`--cpu-limit`, by default the DaemonSet's 100m
/// of deploy/base/daemonset.yaml); `pods`: the pod counts measured (`--pods`), none for the
/// size's own.
pub(super) fn run(
    bins: &Binaries,
    machine: &Machine,
    size: Size,
    millicores: u64,
    pods: &[usize],
) -> anyhow::Result<Section> {
    let (sizes, trials, warmup): (&[usize], usize, u64) = size.pick(
        (&[100], 1, 1),
        (&[10_000], 30, 3),
        (&[1000, 10_000], 40, 10),
    );
    let sizes = if pods.is_empty() { sizes } else { pods };
    let mut runs = Vec::new();
    for &pods in sizes {
        let load = loadavg();
        eprintln!("bench: starved {pods} pods, {trials} trials a case (load {load:.2})");
        let run = measure(bins, pods, millicores, trials, Duration::from_secs(warmup))
            .with_context(|| format!("starved at {pods} pods"))?;
        for limited in [true, false] {
            let got = run.trials.iter().filter(|t| t.limited == limited).count();
            size.expect_trials(&case(pods, limited.then_some(millicores)), got, trials)?;
        }
        runs.push(run);
    }
    Ok(summarize(machine, &runs))
}

fn case(pods: usize, limit: Option<u64>) -> String {
    match limit {
        Some(millicores) => format!("{pods} pods, {millicores}m CPU"),
        None => format!("{pods} pods, no CPU limit"),
    }
}

fn measure(
    bins: &Binaries,
    pods: usize,
    millicores: u64,
    trials: usize,
    warmup: Duration,
) -> anyhow::Result<Run> {
    eprintln!("bench: starved {pods} pods: creating cgroups");
    let tree = BenchTree::create(&format!("starved-{pods}"), pods)?;
    let v2 = tree.hierarchy.v2;
    limit_memory(&tree.dir, v2, TREE_MEMORY)?;
    let churners = start_churn(bins, &tree)?;
    let result = with_churn(bins, &tree, millicores, trials, warmup);
    stop_churn(churners);
    result
}

fn with_churn(
    bins: &Binaries,
    tree: &BenchTree,
    millicores: u64,
    trials: usize,
    warmup: Duration,
) -> anyhow::Result<Run> {
    let v2 = tree.hierarchy.v2;
    let kubepods = tree.kubepods_dir();
    std::thread::sleep(Duration::from_secs(1));
    let idle = tree.hierarchy.working_set(&kubepods)?;
    let threshold_kib = (ALLOCATABLE - idle - HOG_TO_CROSS) / 1024;
    let crossing_ws = ALLOCATABLE - threshold_kib * 1024;
    let config = tree.write_config(threshold_kib)?;
    let agent_dir = test_harness::cgroup_tree::create_dirs(&tree.dir, "agent", v2)?;
    limit_memory(&agent_dir, v2, AGENT_MEMORY)?;
    let cpu = CpuQuota::create("starved", &tree.hierarchy.mount, &agent_dir)?;
    let agent = start_agent(bins, tree, &config, &agent_dir)?;
    cpu.enter(agent.pid())?;
    std::thread::sleep(warmup);
    let load = loadavg();
    // Pods that do not churn, one per trial (an evicted pod is never chosen again).
    let stride = tree.uids.len() / (tree.uids.len() / 10).max(1);
    let mut hog_pods = tree
        .uids
        .iter()
        .enumerate()
        .filter(|(i, _)| i % stride != 0);
    let mut rng = Rng::seeded();
    let mut out = Vec::with_capacity(2 * trials);
    // (ticks, wall ns) of the agent per case: limited, unlimited.
    let mut cpu_use = [(0u64, 0u64); 2];
    for n in 0..2 * trials {
        let limited = n % 2 == 0;
        let limit = limited.then_some(millicores);
        cpu.limit(limit)?;
        let (ticks, wall) = (super::env::proc_cpu_ticks(agent.pid())?, monotonic_ns());
        std::thread::sleep(Duration::from_secs_f64(0.3 + 2.0 * rng.unit()));
        let stray = agent.take_lines();
        if !stray.is_empty() {
            bail!("decisions with no hog: {stray:?}\n{}", agent.stderr());
        }
        let (_, uid) = hog_pods.next().context("no pod left for a hog")?;
        let trial = trial(bins, tree, &agent, &cpu, uid, crossing_ws, limited)
            .with_context(|| format!("trial {} ({})", n + 1, case(tree.uids.len(), limit)))?;
        let used = &mut cpu_use[usize::from(!limited)];
        used.0 += super::env::proc_cpu_ticks(agent.pid())? - ticks;
        used.1 += monotonic_ns() - wall;
        out.push(trial);
        // The eviction gates (100 ms) and the agent's look at the emptied cgroup.
        std::thread::sleep(Duration::from_millis(300));
    }
    cpu.limit(None)?;
    let percent = |(ticks, ns): (u64, u64)| {
        ticks as f64 / super::env::clock_ticks_per_sec() / (ns as f64 / 1e9) * 100.0
    };
    let mut agent = agent;
    agent.stop(Duration::from_secs(10));
    if let Some(warning) = agent.stderr().lines().find(|l| l.contains("WARN")) {
        eprintln!("bench: agent warned: {warning}");
    }
    Ok(Run {
        pods: tree.uids.len(),
        millicores,
        trials: out,
        cpu_percent: (percent(cpu_use[0]), percent(cpu_use[1])),
        load,
    })
}

/// The agent as the DaemonSet runs it, but on the bench tree with `--pods` and acting by a
/// cgroup kill; JSON decisions on stdout.
fn start_agent(
    bins: &Binaries,
    tree: &BenchTree,
    config: &Path,
    cgroup: &Path,
) -> anyhow::Result<WatchedProcess> {
    let mut cmd = Command::new(&bins.monitor);
    cmd.arg("--pods")
        .arg(tree.pods_dir())
        .args(["--kubepods-cgroup", &tree.kubepods_rel])
        .args(["--allocatable-memory", &ALLOCATABLE.to_string()])
        .arg("--config")
        .arg(config)
        .args(&bins.agent_flags)
        .arg("--checkpoint-dir")
        .arg(tree.scratch.join("checkpoint"))
        .args(["--output", "json", "--metrics-addr", "127.0.0.1:19753"])
        .env("RUST_LOG", "info");
    let agent = WatchedProcess::spawn_in(cmd, cgroup)
        .with_context(|| format!("starting {}", bins.monitor.display()))?;
    if agent
        .wait_stderr(Duration::from_secs(300), |l| l.contains("pods: "))
        .is_none()
    {
        bail!("the agent did not load the pods:\n{}", agent.stderr());
    }
    Ok(agent)
}

#[allow(clippy::too_many_arguments)]
fn trial(
    bins: &Binaries,
    tree: &BenchTree,
    agent: &WatchedProcess,
    cpu: &CpuQuota,
    uid: &str,
    crossing_ws: u64,
    limited: bool,
) -> anyhow::Result<Trial> {
    let pod_dir = tree.pod_dir(uid);
    let mut hog = Hog::start(bins, &pod_dir)?;
    let at = distance(tree, crossing_ws)?;
    let before = cpu.throttling()?;
    let crossed = hog.race(at + BEYOND, at)?;
    // Starved, the agent may take seconds; far more is a harness fault.
    let timeout = Duration::from_secs(60);
    let line = agent
        .next_line(timeout)
        .map_err(|_| anyhow::anyhow!("the agent exited:\n{}", agent.stderr()))?
        .with_context(|| format!("no decision within {timeout:?}:\n{}", agent.stderr()))?;
    let decision: Value = serde_json::from_str(&line.text)
        .with_context(|| format!("agent output is not JSON: {}", line.text))?;
    if decision["uid"] != uid {
        bail!("the agent chose another pod than the hog's: {}", line.text);
    }
    let decided = decision["monotonic_ns"]
        .as_u64()
        .context("no monotonic_ns")?;
    let died = hog
        .death
        .recv_timeout(timeout)
        .with_context(|| format!("the hog outlived its eviction by {timeout:?}"))?;
    let throttling = cpu.throttling()?.since(before);
    Ok(Trial {
        limited,
        crossed,
        decided,
        died,
        throttling,
        oom_killed: oom_kills_in(&pod_dir)
            .with_context(|| format!("the OOM kills of {}", pod_dir.display()))?
            > 0,
    })
}

/// How far the tree's working set is from the threshold, once the churn leaves at least half
/// the distance set.
fn distance(tree: &BenchTree, crossing_ws: u64) -> anyhow::Result<u64> {
    let mut at = 0;
    for _ in 0..100 {
        at = crossing_ws.saturating_sub(tree.hierarchy.working_set(&tree.kubepods_dir())?);
        if at >= HOG_TO_CROSS / 2 {
            return Ok(at);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!(
        "the tree's working set stays {} MiB short of the threshold, not the {} MiB set",
        at / MIB,
        HOG_TO_CROSS / MIB
    )
}

/// A `bench_load step` in a pod's cgroup, its death stamped by the thread that waits for it.
/// One the agent did not kill ends with its input, when this is dropped.
struct Hog {
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    death: mpsc::Receiver<u64>,
}

impl Hog {
    fn start(bins: &Binaries, cgroup: &Path) -> anyhow::Result<Self> {
        let mut cmd = Command::new(&bins.load);
        cmd.arg("step").stdin(Stdio::piped()).stdout(Stdio::piped());
        let mut child = spawn_in(&mut cmd, cgroup)?;
        let stdin = child.stdin.take().context("stdin")?;
        let stdout = BufReader::new(child.stdout.take().context("stdout")?);
        let (tx, death) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = child.wait();
            let _ = tx.send(monotonic_ns());
        });
        Ok(Self {
            stdin,
            stdout,
            death,
        })
    }

    /// Allocates `bytes`, crossing at `at`: the crossing's time, `None` when it died first.
    fn race(&mut self, bytes: u64, at: u64) -> anyhow::Result<Option<u64>> {
        writeln!(self.stdin, "race {bytes} {at}")?;
        self.stdin.flush()?;
        let mut answer = String::new();
        self.stdout.read_line(&mut answer)?;
        if answer.is_empty() {
            return Ok(None);
        }
        answer
            .strip_prefix("crossed ")
            .and_then(|ns| ns.trim().parse().ok())
            .map(Some)
            .with_context(|| format!("unexpected answer from the hog: {answer}"))
    }
}

/// A stage of a trial, in ms after the crossing.
type Part = fn(&Trial) -> Option<f64>;

/// p50 and p99 of crossing -> decision and crossing -> death per case, the limited case
/// against the unlimited one of the same run, with the throttling and CPU beside them.
pub(super) fn summarize(machine: &Machine, runs: &[Run]) -> Section {
    let mut figures = Vec::new();
    let mut raw = Vec::new();
    for run in runs {
        let mut baseline: Vec<Figure> = Vec::new();
        // The unlimited case first: it is the baseline.
        for limited in [false, true] {
            let trials: Vec<&Trial> = run.trials.iter().filter(|t| t.limited == limited).collect();
            let limit = limited.then_some(run.millicores);
            let label = case(run.pods, limit);
            let early = trials.iter().filter(|t| t.crossed.is_none()).count();
            let ooms = trials.iter().filter(|t| t.oom_killed).count();
            let throttling = trials
                .iter()
                .fold(Throttling::default(), |sum, t| Throttling {
                    periods: sum.periods + t.throttling.periods,
                    throttled: sum.throttled + t.throttling.throttled,
                    throttled_ns: sum.throttled_ns + t.throttling.throttled_ns,
                });
            let cpu = if limited {
                run.cpu_percent.0
            } else {
                run.cpu_percent.1
            };
            let note = format!(
                "n={}{}, agent {cpu:.1}% of a core, throttled in {}/{} periods, {} kernel OOM kills",
                trials.len() - early,
                if early > 0 {
                    format!(" (+{early} killed before the crossing stamp)")
                } else {
                    String::new()
                },
                throttling.throttled,
                throttling.periods,
                ooms
            );
            let parts: [(&str, Part); 2] = [
                ("crossing -> decision", Trial::decision_ms),
                ("crossing -> death", Trial::death_ms),
            ];
            let mut i = 0;
            for (name, part) in parts {
                let values: Vec<f64> = trials.iter().filter_map(|t| part(t)).collect();
                for p in [50.0, 99.0] {
                    let value = percentile(&values, p).unwrap_or(f64::NAN);
                    let mut figure =
                        Figure::new("starved", &label, &format!("{name} p{p:.0}"), value, "ms")
                            .note(note.clone())
                            .on(machine, run.load);
                    // A decision before the hog's stamp has a negative latency: no ratio to it.
                    if let Some(base) = baseline.get(i).filter(|b| b.value > 0.0) {
                        figure = figure.against(base);
                    }
                    i += 1;
                    figures.push(figure);
                }
            }
            if !limited {
                baseline = figures[figures.len() - i..].to_vec();
            }
            raw.push(json!({
                "pods": run.pods,
                "cpu_limit_millicores": limit,
                "load": run.load,
                "agent_cpu_percent_of_core": cpu,
                "trials": trials.iter().map(|t| json!({
                    "crossed_ns": t.crossed,
                    "decided_ns": t.decided,
                    "died_ns": t.died,
                    "periods": t.throttling.periods,
                    "throttled_periods": t.throttling.throttled,
                    "throttled_ns": t.throttling.throttled_ns,
                    "oom_killed": t.oom_killed,
                })).collect::<Vec<_>>(),
            }));
        }
    }
    Section {
        figures,
        raw: Value::Array(raw),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trial(limited: bool, crossed: Option<u64>, decided_ms: u64, died_ms: u64) -> Trial {
        Trial {
            limited,
            crossed,
            decided: decided_ms * 1_000_000,
            died: died_ms * 1_000_000,
            throttling: Throttling {
                periods: 10,
                throttled: u64::from(limited),
                throttled_ns: 0,
            },
            oom_killed: false,
        }
    }

    #[test]
    fn the_limited_case_is_measured_against_the_unlimited_one() {
        let machine = Machine {
            cores: 2,
            kernel: "t".into(),
            memory_bytes: 0,
        };
        let mut trials: Vec<Trial> = (1..=10)
            .map(|i| trial(false, Some(0), i, 2 * i))
            .chain((1..=10).map(|i| trial(true, Some(0), 10 * i, 20 * i)))
            .collect();
        trials.push(trial(true, None, 5, 6));
        let run = Run {
            pods: 1000,
            millicores: 100,
            trials,
            cpu_percent: (9.5, 1.2),
            load: 3.0,
        };
        let section = summarize(&machine, &[run]);
        let find = |case: &str, metric: &str| {
            section
                .figures
                .iter()
                .find(|f| f.case == case && f.metric == metric)
                .unwrap_or_else(|| panic!("{case} / {metric}"))
                .clone()
        };
        let base = find("1000 pods, no CPU limit", "crossing -> decision p50");
        assert_eq!(base.value, 5.0);
        assert_eq!(base.ratio, None);
        let limited = find("1000 pods, 100m CPU", "crossing -> decision p50");
        assert_eq!(limited.value, 50.0);
        assert_eq!(
            limited.ratio,
            Some((10.0, "1000 pods, no CPU limit".into()))
        );
        let death = find("1000 pods, 100m CPU", "crossing -> death p99");
        assert_eq!(death.value, 200.0);
        assert_eq!(death.ratio, Some((10.0, "1000 pods, no CPU limit".into())));
        assert!(
            limited
                .note
                .starts_with("n=10 (+1 killed before the crossing stamp), agent 9.5%"),
            "{}",
            limited.note
        );
        assert!(
            limited.note.contains("throttled in 11/110 periods"),
            "{}",
            limited.note
        );
        assert_eq!(section.figures.len(), 8);
        assert_eq!(section.raw[1]["trials"].as_array().unwrap().len(), 11);
    }

    #[test]
    fn a_hog_killed_before_its_stamp_has_no_latency() {
        let t = trial(true, None, 5, 6);
        assert_eq!(t.decision_ms(), None);
        let t = trial(true, Some(1_000_000), 5, 6);
        assert_eq!(t.decision_ms(), Some(4.0));
        assert_eq!(t.death_ms(), Some(5.0));
    }
}
