//! Hook cost: the memcg programs on the kernel's tracepoints against the same programs on
//! fentry, the hook of 5.11-6.12 kernels (which lack the tracepoints). Only a kernel from
//! 6.13 has both, so the comparison boots Debian's 6.18 under qemu and runs the `hook_cost`
//! helper there: page faults with no program, with the tracepoint programs and with the fentry
//! programs, in turn, and each program's run time per hit from the kernel's own accounting.
//! TCG emulates every instruction, so its nanoseconds are not a real machine's: the figures
//! that carry over are the ratios within the run. The same helper also runs on this machine,
//! which shows what it allows (hosts may refuse fentry programs even to root).
use std::collections::BTreeMap;

use anyhow::{Context as _, bail};
use serde_json::{Value, json};

use super::{
    Machines, Size,
    env::{Binaries, Machine, loadavg},
    percentile,
    report::{Figure, Section},
};
use crate::vm;

/// One measurement the helper printed.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Measurement {
    Faults {
        hook: String,
        ns_per_page: f64,
        pages: u64,
        /// (program, run time ns, runs) with statistics on.
        programs: Vec<(String, u64, u64)>,
    },
    Unavailable {
        hook: String,
        why: String,
    },
}

/// The hooks' cost on this machine and in a VM with both memcg hooks, as `machines` says.
pub(super) fn run(
    bins: &Binaries,
    machine: &Machine,
    size: Size,
    machines: Machines,
) -> anyhow::Result<Section> {
    // Under TCG a faulted page costs ~10x a real one: fewer rounds there.
    let (host_rounds, vm_rounds, repeats) = size.pick((20, 5, 1), (100, 20, 3), (500, 100, 7));
    let load = loadavg();
    let mut host = Vec::new();
    if machines.host() {
        eprintln!("bench: hooks: on this machine (load {load:.2})");
        host = host_measurements(bins, host_rounds, repeats)?;
    }
    let mut guest = Vec::new();
    if machines.vms() {
        eprintln!("bench: hooks: on Linux 6.18 under qemu");
        let mut console = Vec::new();
        vm::run_on_both_hooks_kernel(
            &bins.hook_cost,
            &[&vm_rounds.to_string(), &repeats.to_string()],
            &[("MONITOR_BENCH_LOAD_BIN", &bins.load)],
            |line| {
                println!("{line}");
                console.push(line.to_string());
            },
        )?;
        guest = parse(&console.join("\n"));
        if guest.is_empty() {
            bail!("the VM printed no hook-cost line");
        }
    }
    let host_label = format!("this machine ({})", machine.kernel);
    let mut figures = figures_of(&host_label, &host, machine, load);
    figures.extend(figures_of("Linux 6.18 VM (TCG)", &guest, machine, load));
    let raw = json!({
        "host": host.iter().map(raw).collect::<Vec<_>>(),
        "vm_6_18_tcg": guest.iter().map(raw).collect::<Vec<_>>(),
        "load": load,
    });
    Ok(Section { figures, raw })
}

fn host_measurements(
    bins: &Binaries,
    rounds: usize,
    repeats: usize,
) -> anyhow::Result<Vec<Measurement>> {
    let out = std::process::Command::new(&bins.hook_cost)
        .args([rounds.to_string(), repeats.to_string()])
        .env("MONITOR_BENCH_LOAD_BIN", &bins.load)
        .output()
        .with_context(|| format!("running {}", bins.hook_cost.display()))?;
    if !out.status.success() {
        bail!(
            "{} failed ({}): {}",
            bins.hook_cost.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(parse(&String::from_utf8_lossy(&out.stdout)))
}

/// The `hook-cost {json}` lines of `text` (console lines may carry a carriage return).
pub(super) fn parse(text: &str) -> Vec<Measurement> {
    text.lines()
        .filter_map(|line| {
            let value: Value =
                serde_json::from_str(line.trim().strip_prefix("hook-cost ")?).ok()?;
            let hook = value["hook"].as_str()?.to_string();
            if let Some(why) = value["unavailable"].as_str() {
                return Some(Measurement::Unavailable {
                    hook,
                    why: why.to_string(),
                });
            }
            let programs = value["programs"]
                .as_array()?
                .iter()
                .filter_map(|p| {
                    Some((
                        p["program"].as_str()?.to_string(),
                        p["run_time_ns"].as_u64()?,
                        p["runs"].as_u64()?,
                    ))
                })
                .collect();
            Some(Measurement::Faults {
                hook,
                ns_per_page: value["ns_per_page"].as_f64()?,
                pages: value["pages"].as_u64()?,
                programs,
            })
        })
        .collect()
}

/// Per hook: median ns per faulted page (with its ratio to no programs), and each program's
/// run time per hit over all repeats; a hook that could not attach is one figure-less note.
fn figures_of(where_: &str, all: &[Measurement], machine: &Machine, load: f64) -> Vec<Figure> {
    let mut pages: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut runs: BTreeMap<(&str, &str), (u64, u64, u64)> = BTreeMap::new();
    let mut unavailable: BTreeMap<&str, &str> = BTreeMap::new();
    for m in all {
        match m {
            Measurement::Faults {
                hook,
                ns_per_page,
                pages: faulted,
                programs,
            } => {
                pages.entry(hook).or_default().push(*ns_per_page);
                for (program, ns, n) in programs {
                    let sum = runs.entry((hook, program)).or_default();
                    sum.0 += ns;
                    sum.1 += n;
                    sum.2 += faulted;
                }
            }
            Measurement::Unavailable { hook, why } => {
                unavailable.insert(hook, why);
            }
        }
    }
    let median = |hook: &str| pages.get(hook).and_then(|v| percentile(v, 50.0));
    let figure = |case: String, metric: &str, value: f64, note: String| {
        Figure::new("hooks", &case, metric, value, "ns")
            .note(note)
            .on(machine, load)
    };
    let mut out = Vec::new();
    let Some(none) = median("none") else {
        return out;
    };
    let baseline = figure(
        format!("{where_}: page faults, no programs"),
        "CPU ns/page",
        none,
        format!("median of {}", pages["none"].len()),
    );
    for hook in ["raw-tracepoints", "tracepoints", "fentry", "fentry-at-once"] {
        if let Some(why) = unavailable.get(hook) {
            eprintln!("bench: hooks: {where_}: {hook} unavailable: {why}");
            continue;
        }
        let Some(value) = median(hook) else { continue };
        out.push(
            figure(
                format!("{where_}: page faults, {hook}"),
                "CPU ns/page",
                value,
                format!("median of {}", pages[hook].len()),
            )
            .against(&baseline),
        );
        for ((_, program), (ns, n, faulted)) in runs
            .range((hook, "")..)
            .take_while(|((h, _), _)| *h == hook)
        {
            if *n == 0 {
                continue;
            }
            out.push(figure(
                format!("{where_}: {hook} {program}"),
                "ns/hit",
                *ns as f64 / *n as f64,
                format!("{n} hits, {:.2}/faulted page", *n as f64 / *faulted as f64),
            ));
        }
    }
    out.push(baseline);
    out
}

fn raw(m: &Measurement) -> Value {
    match m {
        Measurement::Faults {
            hook,
            ns_per_page,
            pages,
            programs,
        } => json!({
            "hook": hook,
            "ns_per_page": ns_per_page,
            "pages": pages,
            "programs": programs.iter().map(|(p, ns, n)| json!({"program": p, "run_time_ns": ns, "runs": n})).collect::<Vec<_>>(),
        }),
        Measurement::Unavailable { hook, why } => json!({"hook": hook, "unavailable": why}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helper_lines_parse_and_noise_is_ignored() {
        let text = "[   1.2] booting\r\n\
            hook-cost {\"hook\":\"none\",\"ns_per_page\":1500.5,\"pages\":1024,\"programs\":[]}\r\n\
            hook-cost {\"hook\":\"fentry\",\"ns_per_page\":1600,\"pages\":1024,\"programs\":[{\"program\":\"stat\",\"run_time_ns\":4000,\"runs\":100}]}\n\
            hook-cost {\"hook\":\"tracepoints\",\"unavailable\":\"no memcg tracepoints\"}\n\
            hook-cost {not json}\n";
        assert_eq!(
            parse(text),
            [
                Measurement::Faults {
                    hook: "none".into(),
                    ns_per_page: 1500.5,
                    pages: 1024,
                    programs: vec![],
                },
                Measurement::Faults {
                    hook: "fentry".into(),
                    ns_per_page: 1600.0,
                    pages: 1024,
                    programs: vec![("stat".into(), 4000, 100)],
                },
                Measurement::Unavailable {
                    hook: "tracepoints".into(),
                    why: "no memcg tracepoints".into(),
                },
            ]
        );
    }

    #[test]
    fn figures_are_medians_against_no_programs_and_hits_over_all_repeats() {
        let faults = |hook: &str, ns: f64, runs: u64| Measurement::Faults {
            hook: hook.into(),
            ns_per_page: ns,
            pages: 100,
            programs: if runs == 0 {
                vec![]
            } else {
                vec![("stat".into(), runs * 50, runs)]
            },
        };
        let all = [
            faults("none", 1000.0, 0),
            faults("tracepoints", 1200.0, 400),
            faults("none", 1100.0, 0),
            faults("tracepoints", 1300.0, 400),
            faults("none", 900.0, 0),
            faults("tracepoints", 1250.0, 400),
            Measurement::Unavailable {
                hook: "fentry".into(),
                why: "refused".into(),
            },
        ];
        let machine = Machine::read();
        let figures = figures_of("here", &all, &machine, 0.5);
        let cases: Vec<&str> = figures.iter().map(|f| f.case.as_str()).collect();
        assert_eq!(
            cases,
            [
                "here: page faults, tracepoints",
                "here: tracepoints stat",
                "here: page faults, no programs"
            ]
        );
        assert_eq!(figures[0].value, 1250.0);
        let (ratio, _) = figures[0].ratio.clone().unwrap();
        assert!((ratio - 1250.0 / 1000.0).abs() < 1e-9);
        assert_eq!(figures[1].value, 50.0);
        assert_eq!(figures[1].note, "1200 hits, 4.00/faulted page");
    }
}
