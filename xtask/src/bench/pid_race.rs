//! The PID race: a fork bomb in a pod against a hard `pid.available` threshold, the agent
//! woken by the kernel's fork counter against an agent that reads `pid.available` every 10 s
//! as the kubelet's housekeeping does; crossing -> decision p50/p99 and how many tasks the
//! bomb had made by the decision. First, a fork's cost with the agent's programs attached
//! (without and with a pid threshold, which arms the fork counter and marks task cgroups)
//! against none, as ratios measured in the same run (the tests crate's `pid_race_trials`).
use std::{
    path::Path,
    process::{Command, Stdio},
};

use anyhow::{Context as _, bail};
use serde_json::{Value, json};

use super::{
    Size,
    env::{Binaries, Machine, loadavg},
    report::{Figure, Section, percentile},
};

fn run_lines(runner: &Path, bins: &Binaries, args: &[&str]) -> anyhow::Result<Vec<Value>> {
    let out = Command::new(runner)
        .args(args)
        .env("MONITOR_BIN", &bins.monitor)
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running {}", runner.display()))?;
    if !out.status.success() {
        bail!("{} {args:?} failed: {}", runner.display(), out.status);
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()
        .context("pid_race's output is not JSON lines")
}

pub(super) fn run(bins: &Binaries, machine: &Machine, size: Size) -> anyhow::Result<Section> {
    let (trials, rounds) = size.pick((1, 1), (3, 3), (20, 7));
    let runner = bins.helpers.join("pid_race_trials");
    let mut figures = Vec::new();
    let mut raw = serde_json::Map::new();
    // First, on a machine the bombs have not loaded yet.
    let load = loadavg();
    eprintln!("bench: pid-race fork cost ({rounds} rounds, load {load:.2})");
    let cost = run_lines(&runner, bins, &["fork-cost", &rounds.to_string()])?;
    let cost = cost
        .first()
        .context("pid_race_trials fork-cost printed nothing")?;
    let without = cost["median_without_ns"].as_f64().unwrap_or(f64::NAN);
    let with = cost["median_with_ns"].as_f64().unwrap_or(f64::NAN);
    let marking = cost["median_marking_ns"].as_f64().unwrap_or(f64::NAN);
    let alone = Figure::new(
        "pid-race",
        "fork, exit and wait, no agent",
        "median per fork",
        without,
        "ns",
    )
    .note(format!("{rounds} rounds alternating with the next"))
    .on(machine, load);
    let attached = Figure::new(
        "pid-race",
        "fork, exit and wait, agent attached",
        "median per fork",
        with,
        "ns",
    )
    .against(&alone)
    .note(format!(
        "{rounds} rounds, dry run, eBPF source, memory thresholds only"
    ))
    .on(machine, load);
    let marked = Figure::new(
        "pid-race",
        "fork, exit and wait, agent with a pid threshold",
        "median per fork",
        marking,
        "ns",
    )
    .against(&alone)
    .note(format!(
        "{rounds} rounds, as above, the fork counter armed and task cgroups marked"
    ))
    .on(machine, load);
    figures.extend([alone, attached, marked]);
    raw.insert("fork_cost".into(), cost.clone());
    for (mode, label) in [
        ("ebpf", "fork counter"),
        ("resync", "pid.available read every 10 s"),
    ] {
        let load = loadavg();
        eprintln!("bench: pid-race {label} ({trials} trials, load {load:.2})");
        let results = run_lines(&runner, bins, &[mode, &trials.to_string()])?;
        let latencies: Vec<f64> = results
            .iter()
            .filter_map(|r| r["crossing_to_decision_ms"].as_f64())
            .collect();
        let made: Vec<f64> = results
            .iter()
            .filter_map(|r| r["tasks_made_by_decision"].as_f64())
            .collect();
        let decided = latencies.len();
        let stopped = results
            .iter()
            .filter(|r| r["stopped_before_cap"] == true)
            .count();
        let cap = results.first().and_then(|r| r["cap"].as_u64()).unwrap_or(0);
        for (metric, p) in [
            ("crossing -> decision p50", 50.0),
            ("crossing -> decision p99", 99.0),
        ] {
            let value = percentile(&latencies, p).unwrap_or(f64::NAN);
            figures.push(
                Figure::new("pid-race", label, metric, value, "ms")
                    .note(format!(
                        "{decided}/{} decided, {stopped} stopped before their cap of {cap}; \
                         tasks made by the decision, median {:.0}",
                        results.len(),
                        percentile(&made, 50.0).unwrap_or(f64::NAN),
                    ))
                    .on(machine, load),
            );
        }
        raw.insert(mode.into(), json!({ "load": load, "trials": results }));
    }
    Ok(Section {
        figures,
        raw: Value::Object(raw),
    })
}
