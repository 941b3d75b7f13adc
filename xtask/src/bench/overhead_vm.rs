//! The overhead bench's heap job in Linux 6.18 under qemu (TCG), where fentry attaches: the
//! tests crate's `overhead_trials` times processes growing a heap in a pod's cgroup with no
//! agent, with the agent's defaults (stat programs detached), and with them always attached
//! on the default hook (raw tracepoints) and on fentry. Only our own binaries are in the
//! guest, so no build or sort runs there. Emulated faults cost far more than real ones:
//! compare the variants with each other, not with this machine.
use anyhow::bail;
use serde_json::json;

use super::{
    Size,
    env::{Binaries, Machine, loadavg},
    percentile,
    report::{Figure, Section, json_lines},
};
use crate::vm;

/// Rounds, MiB each process grows, processes in turn per job: a job of some seconds in the
/// emulator, inside the VM's 1 GiB.
const ROUNDS: usize = 5;
const HEAP_MIB: usize = 256;
const HEAPS: usize = 3;

/// Not in the quick run: a boot of the emulated 6.18 and its heaps take minutes. The smoke
/// runs one small round.
pub(super) fn run(bins: &Binaries, machine: &Machine, size: Size) -> anyhow::Result<Section> {
    let (rounds, heap_mib, heaps) = size.pick(
        (1, 16, 1),
        (ROUNDS, HEAP_MIB, HEAPS),
        (ROUNDS, HEAP_MIB, HEAPS),
    );
    let runner = bins.helpers.join("overhead_trials");
    let load = loadavg();
    eprintln!(
        "bench: overhead: on Linux 6.18 under qemu, {rounds} rounds of {heaps} x {heap_mib} MiB \
         heaps (load {load:.2})"
    );
    let mut console = Vec::new();
    vm::run_on_both_hooks_kernel(
        &runner,
        &[
            &rounds.to_string(),
            &heap_mib.to_string(),
            &heaps.to_string(),
        ],
        &[
            ("MONITOR_BIN", &bins.monitor),
            ("MONITOR_BENCH_LOAD_BIN", &bins.load),
        ],
        |line| {
            eprintln!("{line}");
            console.push(line.to_string());
        },
    )?;
    let trials = json_lines(&console, "variant")?;
    // Variants in the order the runner printed them; the first is without the agent.
    let mut variants: Vec<(String, Vec<f64>)> = Vec::new();
    for trial in &trials {
        let (Some(label), Some(seconds)) = (trial["variant"].as_str(), trial["seconds"].as_f64())
        else {
            bail!("a trial without variant or seconds: {trial}");
        };
        match variants.iter_mut().find(|(l, _)| l == label) {
            Some((_, times)) => times.push(seconds),
            None => variants.push((label.to_string(), vec![seconds])),
        }
    }
    let Some((base_label, base_times)) = variants.first() else {
        bail!("the VM printed no overhead trial");
    };
    let job = format!("heap growth, {heaps} x {heap_mib} MiB, Linux 6.18 VM (TCG)");
    let figure = |label: &str, times: &[f64]| {
        Figure::new(
            "overhead",
            &format!("{job}, {label}"),
            "wall time",
            percentile(times, 50.0).unwrap_or(f64::NAN),
            "s",
        )
        .note(format!("median of {} runs", times.len()))
        .on(machine, load)
    };
    let baseline = figure(base_label, base_times);
    let mut figures: Vec<Figure> = variants
        .iter()
        .skip(1)
        .map(|(label, times)| figure(label, times).against(&baseline))
        .collect();
    figures.push(baseline);
    Ok(Section {
        figures,
        raw: json!({
            "kernel": "6.18",
            "rounds": rounds,
            "heap_mib": heap_mib,
            "heaps": heaps,
            "trials": trials,
            "load": load,
        }),
    })
}
