//! The OOM race on arm64 beside x86_64: the oom-race's cgroup v2 case of a hog that drains
//! on SIGTERM by allocating on, with the agent's defaults, 48 MiB above a hard threshold, in
//! Debian 12's 6.12 (memory counted by fentry on both) emulated for each architecture in turn,
//! in the same run. Both run the image's static release agent of their architecture and the
//! test build's helpers (`oom_race_trials`, `alloc`) of theirs. TCG emulates each architecture
//! at its own speed: the two are compared as win rates, not as times.
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde_json::{Value, json};

use super::{
    Size,
    env::{Machine, loadavg},
    report::{Figure, Section, json_lines, win_table},
};
use crate::{arch::Arch, vm};

/// The VM's RAM, as oom-v2's: the race runs inside the kubepods limit, far below it.
const MEMORY_MIB: u32 = 1536;
const MARGIN_MIB: u64 = 48;
const LABEL: &str = "v2, draining hog, defaults";
/// The runner's flags after SOURCE MARGIN TRIALS (oom-v2's case of the same label).
const FLAGS: [&str; 1] = ["--draining-hog"];

pub(super) fn run(machine: &Machine, size: Size) -> anyhow::Result<Section> {
    let trials = size.pick(1, 3, 10);
    let load = loadavg();
    eprintln!(
        "bench: oom-race on arm64 and x86_64 6.12 VMs ({trials} trials each, {MARGIN_MIB} MiB, \
         load {load:.2})"
    );
    let mut figures = Vec::new();
    let mut rates = Vec::new();
    let mut raw = Vec::new();
    for arch in Arch::ALL {
        let results = race(arch, trials)?;
        size.expect_trials(LABEL, results.len(), trials)?;
        let wins = results.iter().filter(|r| r["win"] == true).count();
        let graces: Vec<u64> = results
            .iter()
            .filter_map(|r| r["grace_ms"].as_u64())
            .collect();
        let label = format!("{LABEL}, {}", arch.oci());
        rates.push((label.clone(), MARGIN_MIB, wins, results.len()));
        figures.push(
            Figure::new(
                "oom-race",
                &label,
                &format!("win rate, {MARGIN_MIB} MiB margin, 6.12 VM"),
                100.0 * wins as f64 / results.len().max(1) as f64,
                "%",
            )
            .note(format!(
                "{wins}/{} trials ({} VM, emulated, the image's static agent); grace ms \
                 {graces:?}",
                results.len(),
                arch.oci()
            ))
            .on(machine, load),
        );
        raw.push(json!({ "arch": arch.oci(), "wins": wins, "trials": results }));
    }
    println!(
        "oom-race on arm64 beside x86_64 (Linux 6.12 VMs, emulated)\n{}",
        win_table(&rates)
    );
    Ok(Section {
        figures,
        raw: json!({
            "kernel": "6.12",
            "memory_mib": MEMORY_MIB,
            "margin_mib": MARGIN_MIB,
            "case": LABEL,
            "arches": raw,
        }),
    })
}

/// `trials` trials of the case in `arch`'s 6.12 VM; the runner's result lines.
fn race(arch: Arch, trials: usize) -> anyhow::Result<Vec<Value>> {
    let monitor = crate::image::static_binary(arch)?;
    let helpers = vm::test_helpers(arch)?;
    let helper = |name: &str| -> anyhow::Result<PathBuf> {
        helpers
            .iter()
            .find(|path| path.file_name().is_some_and(|n| n == name))
            .cloned()
            .with_context(|| format!("the tests crate built no {name} for {arch:?}"))
    };
    let (runner, alloc) = (helper("oom_race_trials")?, helper("alloc")?);
    let env: [(&str, &Path); 2] = [("MONITOR_BIN", &monitor), ("MONITOR_ALLOC_BIN", &alloc)];
    let (margin, trials) = (MARGIN_MIB.to_string(), trials.to_string());
    let args: Vec<&str> = ["ebpf", margin.as_str(), trials.as_str()]
        .into_iter()
        .chain(FLAGS)
        .collect();
    let mut console = Vec::new();
    vm::run_on_6_12(arch, MEMORY_MIB, &[(&runner, &args)], &env, |line: &str| {
        eprintln!("[{}] {line}", arch.oci());
        console.push(line.to_string());
    })?;
    json_lines(&console, "trial")
}
