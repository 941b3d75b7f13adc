//! The OOM race: does the agent stop a pod allocating as fast as one process can (the
//! tests crate's `alloc` helper, ~2 GiB/s here) before the kernel's OOM killer fires?
//!
//! Each run is the tests crate's `oom_race_trials` trial runner (it owns the MOCK API server and the
//! STAND-IN kubelet, so they live in one place): a kubepods cgroup whose memory limit lies a
//! margin above the point where a hard `allocatableMemory.available` threshold is met, two
//! steady pods holding 40 MiB each, and per trial a fresh pod told to allocate 1 GiB at
//! once. A trial is won when the agent decided and no OOM kill happened in the tree
//! (`memory.oom_control` of each cgroup on v1, `memory.events` on v2). Sources side by side
//! at every margin: eBPF, polling every 100 ms, 1 s and 10 s (the kubelet's housekeeping
//! period), and `--kube` with the eBPF source, the Eviction API alone (the stand-in kubelet
//! stops the pod after a reaction delay) against local-first (the agent kills, then posts).
//! One more case: a bystander of lower priority that the kubelet's order evicts first. And a
//! hog that handles SIGTERM and keeps allocating until SIGKILL, with its grace period cut to
//! what the node affords (`--grace-projection on`, the default) and with the whole second, and
//! the same with the opt-in `--predict 100ms` (acting before the crossing). And, with the
//! defaults, the race starting while the stat programs are detached (allocatable memory
//! leaves twice the default `--attach-within` above the threshold): the 100 ms guard read
//! must attach them before the hog, plain or draining, crosses.
//! Then the same race on cgroup v2 with the memory brake, in a VM (see [`super::oom_brake`]),
//! and the peers on whole-node memory, in a VM (see [`super::oom_peers`]).
use std::process::{Command, Stdio};

use anyhow::{Context as _, bail};
use serde_json::{Value, json};

use super::{
    Size,
    env::{Binaries, Machine, loadavg},
    oom_brake, oom_peers,
    report::{Figure, Section, win_table},
};

/// One way of running the agent.
struct Case {
    label: String,
    args: Vec<String>,
    /// Margins to run at; `None`: every margin.
    margins: Option<Vec<u64>>,
}

fn case(label: &str, args: &[&str]) -> Case {
    Case {
        label: label.into(),
        args: args.iter().map(ToString::to_string).collect(),
        margins: None,
    }
}

fn plan(size: Size) -> (Vec<u64>, usize, Vec<Case>) {
    let kube = |mode: &str, delay_ms: u64| {
        let delay = delay_ms.to_string();
        let label = match mode {
            "api" => format!("kube api, kubelet +{delay_ms}ms"),
            _ => format!("kube kill, kubelet +{delay_ms}ms"),
        };
        case(&label, &["ebpf", "--kube", mode, "--kubelet-delay", &delay])
    };
    let other = || {
        let mut c = case("ebpf, other victim", &["ebpf", "--other-victim"]);
        c.margins = Some(vec![48]);
        c
    };
    // A hog that handles SIGTERM and allocates on until SIGKILL, with the grace period cut to
    // what the node affords and with the kubelet's whole second.
    let draining = |projection: &str, margins: Vec<u64>| {
        let label = match projection {
            "on" => "ebpf, draining hog",
            _ => "ebpf, draining hog, whole grace",
        };
        let mut c = case(
            label,
            &["ebpf", "--draining-hog", "--grace-projection", projection],
        );
        c.margins = Some(margins);
        c
    };
    // The draining hog with the opt-in prediction on top of the grace projection: acting
    // the lead before the crossing.
    let predicting = |margins: Vec<u64>| {
        let mut c = case(
            "ebpf, draining hog, predict 100ms",
            &["ebpf", "--draining-hog", "--predict", "100"],
        );
        c.margins = Some(margins);
        c
    };
    // With the defaults, the stat programs detached when the hog starts: only the guard read
    // can attach them in time (the trial runner's --beyond-distance).
    let beyond = |draining: bool, margins: Vec<u64>| {
        let (label, args): (&str, &[&str]) = if draining {
            (
                "ebpf, draining hog, programs detached at start",
                &["ebpf", "--draining-hog", "--beyond-distance"],
            )
        } else {
            (
                "ebpf, programs detached at start",
                &["ebpf", "--beyond-distance"],
            )
        };
        let mut c = case(label, args);
        c.margins = Some(margins);
        c
    };
    let at = |margin: u64, mut c: Case| {
        c.margins = Some(vec![margin]);
        c
    };
    let full = || {
        vec![
            case("ebpf", &["ebpf"]),
            case("poll 100ms", &["poll:100"]),
            case("poll 1s", &["poll:1000"]),
            case("poll 10s", &["poll:10000"]),
            kube("api", 50),
            kube("api", 300),
            kube("kill", 100),
            other(),
            draining("on", vec![16, 48, 200]),
            draining("off", vec![16, 48, 200]),
            predicting(vec![16, 48, 100]),
            beyond(false, vec![16, 48, 200]),
            beyond(true, vec![16, 48, 200]),
        ]
    };
    match size {
        // Every case of the full run once, at one margin.
        Size::Smoke => (vec![48], 1, full().into_iter().map(|c| at(48, c)).collect()),
        // The eBPF source at both margins, every other case at the wider one only.
        Size::Quick => {
            let cases = vec![
                case("ebpf", &["ebpf"]),
                at(48, case("poll 100ms", &["poll:100"])),
                at(48, kube("api", 100)),
                at(48, kube("kill", 100)),
                other(),
                draining("on", vec![48]),
                draining("off", vec![48]),
                predicting(vec![16]),
                beyond(true, vec![48]),
            ];
            (vec![16, 48], 3, cases)
        }
        Size::Full => (vec![16, 32, 48, 100, 200], 20, full()),
    }
}

/// The trials on this machine, then, `with_vms`, the cgroup v2 cases and the peers in VMs.
pub(super) fn run(
    bins: &Binaries,
    machine: &Machine,
    size: Size,
    with_vms: bool,
) -> anyhow::Result<Section> {
    let release = bins.helpers.as_path();
    let runner = release.join("oom_race_trials");
    let (margins, trials, cases) = plan(size);
    // Win rates are read side by side in the table, not as ratios of each other.
    let mut figures = Vec::new();
    let mut raw = Vec::new();
    // (case, margin) -> (wins, trials)
    let mut rates: Vec<(String, u64, usize, usize)> = Vec::new();
    for case in &cases {
        for &margin in case.margins.as_ref().unwrap_or(&margins) {
            let load = loadavg();
            eprintln!(
                "bench: oom-race {} at {margin} MiB ({trials} trials, load {load:.2})",
                case.label
            );
            let out = Command::new(&runner)
                .args(&case.args[..1])
                .args([margin.to_string(), trials.to_string()])
                .args(&case.args[1..])
                .env("MONITOR_BIN", &bins.monitor)
                .env("MONITOR_ALLOC_BIN", release.join("alloc"))
                .stderr(Stdio::inherit())
                .output()
                .with_context(|| format!("running {}", runner.display()))?;
            if !out.status.success() {
                bail!(
                    "{} {:?} failed: {}",
                    runner.display(),
                    case.args,
                    out.status
                );
            }
            let results: Vec<Value> = String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(serde_json::from_str)
                .collect::<Result<_, _>>()
                .context("the trial runner's output is not JSON lines")?;
            size.expect_trials(&case.label, results.len(), trials)?;
            let wins = results.iter().filter(|r| r["win"] == true).count();
            let victims: Vec<&str> = results
                .iter()
                .filter_map(|r| r["victim"].as_str())
                .collect();
            rates.push((case.label.clone(), margin, wins, results.len()));
            let figure = Figure::new(
                "oom-race",
                &case.label,
                &format!("win rate, {margin} MiB margin"),
                100.0 * wins as f64 / results.len().max(1) as f64,
                "%",
            )
            .note(format!("{wins}/{} trials", results.len()))
            .on(machine, load);
            figures.push(figure);
            raw.push(json!({
                "case": case.label,
                "margin_mib": margin,
                "wins": wins,
                "trials": results,
                "victims": victims,
                "load": load,
            }));
        }
    }
    println!("{}", win_table(&rates));
    let (reap_figures, reap_raw) = reap_times(release, machine, size.pick(1, 6, 30))?;
    figures.extend(reap_figures);
    let mut raw = json!({ "cgroup": raw, "reap": reap_raw });
    if with_vms {
        let v2 = oom_brake::run(bins, machine, size)?;
        figures.extend(v2.figures);
        raw["cgroup_v2"] = v2.raw;
        let peers = oom_peers::run(bins, machine, size)?;
        figures.extend(peers.figures);
        raw["peers"] = peers.raw;
    }
    Ok(Section { figures, raw })
}

/// Force to memory back for a 500 MiB victim, with and without `process_mrelease` (the
/// tests crate's `reap_time`): medians over `trials`.
fn reap_times(
    release: &std::path::Path,
    machine: &Machine,
    trials: usize,
) -> anyhow::Result<(Vec<Figure>, Vec<Value>)> {
    let runner = release.join("reap_time");
    let load = loadavg();
    eprintln!("bench: reap time, 500 MiB victim ({trials} trials a side, load {load:.2})");
    let out = Command::new(&runner)
        .arg(trials.to_string())
        .env("MONITOR_ALLOC_BIN", release.join("alloc"))
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running {}", runner.display()))?;
    if !out.status.success() {
        bail!("{} failed: {}", runner.display(), out.status);
    }
    let sides: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()
        .context("reap_time's output is not JSON lines")?;
    let figures = sides
        .iter()
        .map(|side| {
            Figure::new(
                "oom-race",
                &format!(
                    "force -> memory back, {}",
                    side["side"].as_str().unwrap_or("?")
                ),
                "median, 500 MiB victim",
                side["median_ms"].as_f64().unwrap_or(f64::NAN),
                "ms",
            )
            .note(format!("{trials} trials"))
            .on(machine, load)
        })
        .collect();
    Ok((figures, sides))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_plan_runs_each_kube_mode_and_the_other_victim() {
        for size in [Size::Smoke, Size::Quick, Size::Full] {
            let (margins, _, cases) = plan(size);
            // The smoke runs each case once, at one margin.
            let both = margins.contains(&16) && margins.contains(&48);
            assert!(both || size == Size::Smoke, "{size:?}");
            let labels: Vec<&str> = cases.iter().map(|c| c.label.as_str()).collect();
            assert!(
                labels.iter().any(|l| l.starts_with("kube api")),
                "{labels:?}"
            );
            assert!(
                labels.iter().any(|l| l.starts_with("kube kill")),
                "{labels:?}"
            );
            assert!(labels.contains(&"ebpf") && labels.contains(&"ebpf, other victim"));
        }
    }

    #[test]
    fn the_smoke_runs_every_case_of_the_full_plan_once() {
        let (_, trials, smoke) = plan(Size::Smoke);
        let (_, _, full) = plan(Size::Full);
        assert_eq!(trials, 1);
        let labels = |cases: &[Case]| cases.iter().map(|c| c.label.clone()).collect::<Vec<_>>();
        assert_eq!(labels(&smoke), labels(&full));
        assert!(
            smoke
                .iter()
                .all(|c| c.margins.as_ref().is_some_and(|m| m.len() == 1))
        );
    }

    #[test]
    fn the_full_plan_spans_16_to_200_mib_with_every_source() {
        let (margins, trials, cases) = plan(Size::Full);
        assert_eq!(margins.first(), Some(&16));
        assert_eq!(margins.last(), Some(&200));
        assert!(trials >= 10);
        let labels: Vec<&str> = cases.iter().map(|c| c.label.as_str()).collect();
        for source in ["ebpf", "poll 100ms", "poll 1s", "poll 10s"] {
            let case = cases.iter().find(|c| c.label == source);
            assert!(
                case.is_some_and(|c| c.margins.is_none()),
                "{source} at every margin: {labels:?}"
            );
        }
    }
}
