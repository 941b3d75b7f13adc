//! The OOM race on cgroup v2, where the memory brake exists: the tests crate's `oom_race_trials`
//! runs in Debian 12's kernel (6.1, memcg counted by fentry) under qemu, a kubepods cgroup
//! limited a margin above a hard `allocatableMemory.available` threshold. Victims that handle
//! SIGTERM: the hog itself (allocating on until SIGKILL), and an idle bystander the kubelet's
//! order evicts first while the hog grows. Each lever on its own and with the others; a trial
//! is won when the kernel's OOM killer never fired in the tree and the agent decided. The
//! figures are the emulated VM's, slower than this machine: compare them with each other.
use std::path::Path;

use anyhow::bail;
use serde_json::{Value, json};

use super::{
    Size,
    env::{Binaries, Machine, loadavg},
    report::{Figure, Section, json_lines, win_table},
};
use crate::vm;

/// The VM's RAM: the races run inside the kubepods limit, far below it.
const MEMORY_MIB: u32 = 1536;

/// (label, the runner's flags after SOURCE MARGIN TRIALS).
const CASES: [(&str, &[&str]); 7] = [
    (
        "v2, draining hog, no lever",
        &[
            "--draining-hog",
            "--grace-projection",
            "off",
            "--memory-brake",
            "off",
        ],
    ),
    (
        "v2, draining hog, brake alone",
        &["--draining-hog", "--grace-projection", "off"],
    ),
    (
        "v2, draining hog, per-pod brake alone",
        &[
            "--draining-hog",
            "--grace-projection",
            "off",
            "--memory-brake",
            "pods",
        ],
    ),
    ("v2, draining hog, defaults", &["--draining-hog"]),
    (
        "v2, draining bystander, no brake",
        &[
            "--other-victim",
            "--draining-victim",
            "--memory-brake",
            "off",
        ],
    ),
    (
        "v2, draining bystander, defaults",
        &["--other-victim", "--draining-victim"],
    ),
    (
        "v2, draining bystander, per-pod brake",
        &[
            "--other-victim",
            "--draining-victim",
            "--memory-brake",
            "pods",
        ],
    ),
];

pub(super) fn run(bins: &Binaries, machine: &Machine, size: Size) -> anyhow::Result<Section> {
    let (margins, trials): (&[u64], usize) =
        size.pick((&[48], 1), (&[48], 3), (&[16, 48, 200], 20));
    let release = bins.helpers.as_path();
    let runner = release.join("oom_race_trials");
    let alloc = release.join("alloc");
    let env: [(&str, &Path); 2] = [
        ("MONITOR_BIN", &bins.monitor),
        ("MONITOR_ALLOC_BIN", &alloc),
    ];
    let trials_arg = trials.to_string();
    let margin_args: Vec<String> = margins.iter().map(u64::to_string).collect();
    let load = loadavg();
    eprintln!(
        "bench: oom-race on cgroup v2 in the VM ({} cases of {} margins, {trials} trials, load \
         {load:.2})",
        CASES.len(),
        margins.len()
    );
    // The smoke and the quick run in one boot; the full one a boot per case, as a whole full
    // run in one guest outlasts the VM's time limit.
    let per_boot = size.pick(CASES.len(), CASES.len(), 1);
    let mut console = Vec::new();
    for cases in CASES.chunks(per_boot) {
        let argv: Vec<Vec<&str>> = cases
            .iter()
            .flat_map(|(_, flags)| {
                margin_args.iter().map(|margin| {
                    ["ebpf", margin.as_str(), trials_arg.as_str()]
                        .into_iter()
                        .chain(flags.iter().copied())
                        .collect()
                })
            })
            .collect();
        let runs: Vec<(&Path, &[&str])> = argv
            .iter()
            .map(|args| (runner.as_path(), args.as_slice()))
            .collect();
        vm::run_on_debian_kernel(MEMORY_MIB, &runs, &env, |line: &str| {
            eprintln!("{line}");
            console.push(line.to_string());
        })?;
    }
    let results = json_lines(&console, "trial")?;
    let mut figures = Vec::new();
    let mut rates = Vec::new();
    let mut raw = Vec::new();
    for (label, flags) in CASES {
        for (margin, margin_arg) in margins.iter().zip(&margin_args) {
            let mine: Vec<&Value> = results
                .iter()
                .filter(|r| ran_with(r, margin_arg, flags))
                .collect();
            if mine.is_empty() {
                bail!("the VM printed no trial of {label} at {margin} MiB");
            }
            size.expect_trials(label, mine.len(), trials)?;
            let wins = mine.iter().filter(|r| r["win"] == true).count();
            let graces: Vec<u64> = mine.iter().filter_map(|r| r["grace_ms"].as_u64()).collect();
            let evicted: Vec<String> = mine
                .iter()
                .map(|r| {
                    r["evicted"]
                        .as_array()
                        .map(|names| {
                            names
                                .iter()
                                .filter_map(Value::as_str)
                                .map(|n| n.split('-').next().unwrap_or(n))
                                .collect::<Vec<_>>()
                                .join("+")
                        })
                        .unwrap_or_default()
                })
                .collect();
            rates.push((label.to_string(), *margin, wins, mine.len()));
            figures.push(
                Figure::new(
                    "oom-race",
                    label,
                    &format!("win rate, {margin} MiB margin"),
                    100.0 * wins as f64 / mine.len() as f64,
                    "%",
                )
                .note(format!(
                    "{wins}/{} trials (VM); grace ms {graces:?}; evicted {}",
                    mine.len(),
                    evicted.join(", ")
                ))
                .on(machine, load),
            );
            raw.push(json!({
                "case": label,
                "margin_mib": margin,
                "wins": wins,
                "trials": mine,
            }));
        }
    }
    println!(
        "oom-race on cgroup v2 (Linux 6.1 VM, emulated)\n{}",
        win_table(&rates)
    );
    Ok(Section {
        figures,
        raw: json!({ "kernel": "6.1", "memory_mib": MEMORY_MIB, "cases": raw }),
    })
}

/// Whether a trial ran at `margin` with exactly `flags` after SOURCE MARGIN TRIALS.
fn ran_with(trial: &Value, margin: &str, flags: &[&str]) -> bool {
    let Some(args) = trial["args"].as_array() else {
        return false;
    };
    let args: Vec<&str> = args.iter().filter_map(Value::as_str).collect();
    args.get(1) == Some(&margin) && args.get(3..) == Some(flags)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trials_are_told_apart_by_margin_and_flags() {
        let console = [
            "[ 12.3] booting".to_string(),
            r#"{"trial":0,"win":true,"args":["ebpf","48","3","--draining-hog"]}"#.to_string(),
            r#"{"trial":0,"win":false,"args":["ebpf","48","3","--draining-hog","--grace-projection","off"]}"#
                .to_string(),
        ];
        let trials = json_lines(&console, "trial").unwrap();
        assert_eq!(trials.len(), 2);
        assert!(ran_with(&trials[0], "48", &["--draining-hog"]));
        assert!(!ran_with(&trials[0], "16", &["--draining-hog"]));
        assert!(!ran_with(&trials[1], "48", &["--draining-hog"]));
        assert!(ran_with(
            &trials[1],
            "48",
            &["--draining-hog", "--grace-projection", "off"]
        ));
        assert!(json_lines(&["{\"trial\": nope".to_string()], "trial").is_err());
    }
}
