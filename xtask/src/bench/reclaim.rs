//! Reclaim before eviction (`--reclaim-first`) in Debian 12's 6.1 under qemu (cgroup v2, the
//! classic LRU it boots with, `memory.reclaim`), against the agent's kubelet-exact default in
//! the same boot:
//! (a) a reader whose working set is 150Mi of idle file cache it read twice, pushed over the
//!     threshold by another pod: trials with an eviction or a kernel OOM kill, flag off and on;
//! (b) the oom-race's draining cases (a hog that allocates on after SIGTERM; an idle bystander
//!     that drains while the hog grows) at 48 MiB: wins and the time from the decision to the
//!     hog's death, flag off and on;
//! (c) the same reader re-reading its file (its cache is in use): how long after the crossing
//!     (the pods' working set first past the threshold's level, as the trial reads it every
//!     millisecond) its cgroup was empty, flag on.
//! Every figure is the emulated VM's: compare them with each other.
use std::path::Path;

use anyhow::Context as _;
use serde_json::{Value, json};

use super::{
    Size,
    env::{Binaries, Machine, loadavg},
    percentile,
    report::{Figure, Section, json_lines, win_table},
};
use crate::vm;

/// The VM's RAM, as oom-v2's.
const MEMORY_MIB: u32 = 1536;
const RACE_MARGIN_MIB: u64 = 48;
const FLAG: &str = "--reclaim-first";
/// The oom-race's draining cases: (label, the runner's flags after SOURCE MARGIN TRIALS).
const RACES: [(&str, &[&str]); 2] = [
    ("draining hog", &["--draining-hog"]),
    (
        "draining bystander",
        &["--other-victim", "--draining-victim"],
    ),
];

pub(super) fn run(bins: &Binaries, machine: &Machine, size: Size) -> anyhow::Result<Section> {
    let (cache_trials, race_trials) = size.pick((1, 1), (3, 3), (10, 20));
    let load = loadavg();
    eprintln!(
        "bench: reclaim before eviction in the 6.1 VM ({cache_trials} cache trials, \
         {race_trials} race trials a case, load {load:.2})"
    );
    let helpers = bins.helpers.as_path();
    let (cache_runner, race_runner) = (
        helpers.join("reclaim_trials"),
        helpers.join("oom_race_trials"),
    );
    let alloc = helpers.join("alloc");
    let env: [(&str, &Path); 2] = [
        ("MONITOR_BIN", &bins.monitor),
        ("MONITOR_ALLOC_BIN", &alloc),
    ];
    let (cache_n, race_n, margin) = (
        cache_trials.to_string(),
        race_trials.to_string(),
        RACE_MARGIN_MIB.to_string(),
    );
    let mut argv: Vec<(&Path, Vec<&str>)> = vec![
        (&cache_runner, vec!["idle", &cache_n]),
        (&cache_runner, vec!["idle", &cache_n, FLAG]),
        (&cache_runner, vec!["hot", &cache_n, FLAG]),
    ];
    for (_, flags) in RACES {
        for with in [false, true] {
            let mut args = vec!["ebpf", margin.as_str(), race_n.as_str()];
            args.extend(flags.iter().copied());
            args.extend(with.then_some(FLAG));
            argv.push((&race_runner, args));
        }
    }
    let runs: Vec<(&Path, &[&str])> = argv
        .iter()
        .map(|(runner, args)| (*runner, args.as_slice()))
        .collect();
    let mut console = Vec::new();
    vm::run_on_debian_kernel(MEMORY_MIB, &runs, &env, |line: &str| {
        eprintln!("{line}");
        console.push(line.to_string());
    })?;
    let trials = json_lines(&console, "trial")?;
    let ran = |args: &[&str]| -> anyhow::Result<Vec<&Value>> {
        let mine: Vec<&Value> = trials.iter().filter(|t| args_are(t, args)).collect();
        anyhow::ensure!(!mine.is_empty(), "the VM printed no trial of {args:?}");
        Ok(mine)
    };
    let figure = |case: &str, metric: &str, value: f64, unit: &str, note: String| {
        Figure::new("reclaim", case, metric, value, unit)
            .note(note)
            .on(machine, load)
    };
    let mut figures = Vec::new();
    let mut raw = serde_json::Map::new();

    // (a) idle cache.
    for (case, args) in [
        ("idle cache, kubelet-exact", vec!["idle", &cache_n]),
        ("idle cache, --reclaim-first", vec!["idle", &cache_n, FLAG]),
    ] {
        let mine = ran(&args)?;
        size.expect_trials(case, mine.len(), cache_trials)?;
        let acted = mine
            .iter()
            .filter(|t| evictions(t) > 0 || t["oom_kills"].as_u64() != Some(0))
            .count();
        figures.push(figure(
            case,
            "trials with an eviction or a kernel OOM kill",
            100.0 * acted as f64 / mine.len() as f64,
            "%",
            format!("{acted}/{} trials", mine.len()),
        ));
        raw.insert(case.into(), json!(mine));
    }

    // (b) the race, flag off and on.
    let mut rates = Vec::new();
    for (label, flags) in RACES {
        let mut medians = Vec::new();
        for with in [false, true] {
            let mut args = vec!["ebpf", margin.as_str(), race_n.as_str()];
            args.extend(flags.iter().copied());
            args.extend(with.then_some(FLAG));
            let case = format!("{label}{}", if with { ", --reclaim-first" } else { "" });
            let mine = ran(&args)?;
            size.expect_trials(&case, mine.len(), race_trials)?;
            let wins = mine.iter().filter(|t| t["win"] == true).count();
            rates.push((case.clone(), RACE_MARGIN_MIB, wins, mine.len()));
            figures.push(figure(
                &case,
                &format!("win rate, {RACE_MARGIN_MIB} MiB margin"),
                100.0 * wins as f64 / mine.len() as f64,
                "%",
                format!("{wins}/{} trials", mine.len()),
            ));
            let to_kill: Vec<f64> = mine.iter().filter_map(|t| decision_to_kill_ms(t)).collect();
            let median = percentile(&to_kill, 50.0).context("no trial was decided")?;
            figures.push(figure(
                &case,
                "decision to the hog's death, median",
                median,
                "ms",
                format!("{} trials decided", to_kill.len()),
            ));
            medians.push(median);
            raw.insert(case, json!(mine));
        }
        if let [off, on] = medians.as_slice() {
            figures.push(figure(
                &format!("{label}, --reclaim-first against off"),
                "decision to the hog's death, median difference",
                on - off,
                "ms",
                "the same boot".into(),
            ));
        }
    }
    println!(
        "the oom-race's draining cases with and without --reclaim-first (Linux 6.1 VM, \
         emulated)\n{}",
        win_table(&rates)
    );

    // (c) cache in use.
    let case = "cache in use, --reclaim-first";
    let mine = ran(&["hot", &cache_n, FLAG])?;
    size.expect_trials(case, mine.len(), cache_trials)?;
    let gone: Vec<f64> = mine.iter().filter_map(|t| crossing_to_gone_ms(t)).collect();
    figures.push(figure(
        case,
        "trials in which the reader was evicted",
        100.0 * gone.len() as f64 / mine.len() as f64,
        "%",
        format!("{}/{} trials", gone.len(), mine.len()),
    ));
    if let (Some(median), Some(worst)) = (percentile(&gone, 50.0), percentile(&gone, 100.0)) {
        figures.push(figure(
            case,
            "the crossing to the reader's cgroup empty, median",
            median,
            "ms",
            format!("slowest {worst:.0} ms"),
        ));
    }
    raw.insert(case.into(), json!(mine));
    Ok(Section {
        figures,
        raw: json!({ "kernel": "6.1", "memory_mib": MEMORY_MIB, "cases": raw }),
    })
}

/// Whether a trial ran with exactly `args` (what its runner was given).
fn args_are(trial: &Value, args: &[&str]) -> bool {
    trial["args"]
        .as_array()
        .is_some_and(|a| a.iter().filter_map(Value::as_str).eq(args.iter().copied()))
}

fn evictions(trial: &Value) -> usize {
    trial["evicted"].as_array().map_or(0, Vec::len)
}

/// From the crossing to the reader's cgroup empty, in a trial that saw both.
fn crossing_to_gone_ms(trial: &Value) -> Option<f64> {
    Some(trial["reader_gone_ms"].as_f64()? - trial["crossed_ms"].as_f64()?)
}

/// From the decision to the hog's end, in a race trial that was decided.
fn decision_to_kill_ms(trial: &Value) -> Option<f64> {
    let (decided, ended) = (
        trial["decided_ms"].as_f64()?,
        trial["hog_ended_ms"].as_f64()?,
    );
    Some((ended - decided).max(0.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trials_are_told_apart_by_their_arguments() {
        let console = [
            r#"{"trial":0,"args":["idle","10"],"evicted":["reader"],"oom_kills":0}"#.to_string(),
            r#"{"trial":0,"args":["idle","10","--reclaim-first"],"evicted":[],"oom_kills":0}"#
                .to_string(),
            r#"{"trial":0,"args":["ebpf","48","20","--draining-hog"],"decided_ms":12.5,"hog_ended_ms":1013.0}"#
                .to_string(),
            r#"{"trial":0,"args":["hot","10","--reclaim-first"],"crossed_ms":300.5,"reader_gone_ms":1100.0}"#
                .to_string(),
        ];
        let trials = json_lines(&console, "trial").unwrap();
        assert!(args_are(&trials[0], &["idle", "10"]));
        assert!(!args_are(&trials[0], &["idle", "10", FLAG]));
        assert!(args_are(&trials[1], &["idle", "10", FLAG]));
        assert_eq!((evictions(&trials[0]), evictions(&trials[1])), (1, 0));
        assert_eq!(decision_to_kill_ms(&trials[2]), Some(1000.5));
        assert_eq!(decision_to_kill_ms(&trials[0]), None);
        assert_eq!(crossing_to_gone_ms(&trials[3]), Some(799.5));
        assert_eq!(crossing_to_gone_ms(&trials[2]), None, "never crossed");
    }
}
