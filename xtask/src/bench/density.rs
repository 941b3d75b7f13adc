//! Overhead at density: the agent's CPU share and peak RSS with many pods, a share of them
//! churning memory, for the eBPF source against polling every second.
//!
//! A bench-owned tree holds N burstable pods (cgroups and one PodList manifest). 10% of the
//! pods churn: `bench_load churn` processes, each serving up to 50 pod cgroups, move
//! themselves from cgroup to cgroup and map, touch and unmap 2 MiB in each, so every churning
//! pod's memory goes up and down by 2 MiB once a second. The churn runs throughout; each
//! agent is started, given a warm-up, then measured over a window: CPU from utime+stime in
//! /proc/<pid>/stat, peak RSS from VmHWM (which includes start-up).
use std::{
    process::{Child, Command},
    time::{Duration, Instant},
};

use anyhow::Context as _;
use serde_json::{Value, json};

use super::{
    env::{Agent, BenchTree, Binaries, Machine, SourceArg, clock_ticks_per_sec, loadavg, spawn_in},
    report::{Figure, Section},
};

const CHURN_SHARE: f64 = 0.10;
const CHURN_MIB: usize = 2;
const CGROUPS_PER_CHURNER: usize = 50;

/// One agent's measurement.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Usage {
    pub pods: usize,
    pub source: SourceArg,
    /// Percent of one core over the window.
    pub cpu_percent: f64,
    pub peak_rss: u64,
    /// Anonymous RSS at the end of the window (the rest is mapped files and maps).
    pub rss_anon: u64,
    pub window: Duration,
    pub load: f64,
}

pub(super) fn run(bins: &Binaries, machine: &Machine, quick: bool) -> anyhow::Result<Section> {
    let (sizes, warmup, window): (&[usize], _, _) = if quick {
        (&[200], Duration::from_secs(2), Duration::from_secs(5))
    } else {
        (
            &[1000, 5000, 10_000],
            Duration::from_secs(5),
            Duration::from_secs(30),
        )
    };
    let mut results = Vec::new();
    for &pods in sizes {
        eprintln!("bench: density {pods} pods: creating cgroups");
        let tree = BenchTree::create(&format!("density-{pods}"), pods)?;
        let churners = start_churn(bins, &tree)?;
        let config = tree.write_config(100 * 1024)?;
        for source in [SourceArg::Ebpf, SourceArg::Poll(Duration::from_secs(1))] {
            let load = loadavg();
            eprintln!(
                "bench: density {pods} pods, {} (load {load:.2})",
                source.label()
            );
            let tag = source.label().replace(' ', "-");
            let agent = Agent::start(bins, &tree, source, &config, "16Gi", &tag)
                .with_context(|| format!("density {pods} pods, {}", source.label()))?;
            std::thread::sleep(warmup);
            let start = (agent.cpu_ticks()?, Instant::now());
            std::thread::sleep(window);
            let end = (agent.cpu_ticks()?, Instant::now());
            let peak_rss = agent.status_bytes("VmHWM")?;
            let rss_anon = agent.status_bytes("RssAnon")?;
            let log = agent.stop()?;
            if let Some(warning) = log.lines().find(|l| l.contains("WARN")) {
                eprintln!("bench: agent warned: {warning}");
            }
            let elapsed = end.1 - start.1;
            results.push(Usage {
                pods,
                source,
                cpu_percent: cpu_percent(end.0 - start.0, clock_ticks_per_sec(), elapsed),
                peak_rss,
                rss_anon,
                window: elapsed,
                load,
            });
        }
        stop_churn(churners);
        drop(tree);
    }
    Ok(summarize(machine, &results))
}

/// Ticks over a window as percent of one core.
pub(super) fn cpu_percent(ticks: u64, ticks_per_sec: f64, window: Duration) -> f64 {
    ticks as f64 / ticks_per_sec / window.as_secs_f64() * 100.0
}

fn start_churn(bins: &Binaries, tree: &BenchTree) -> anyhow::Result<Vec<Child>> {
    let churning = ((tree.uids.len() as f64 * CHURN_SHARE).ceil() as usize).max(1);
    // Spread over the pods: every 10th pod churns.
    let stride = tree.uids.len() / churning;
    let dirs: Vec<String> = (0..churning)
        .map(|i| tree.pod_dir(&tree.uids[i * stride]).display().to_string())
        .collect();
    let mut children = Vec::new();
    for group in dirs.chunks(CGROUPS_PER_CHURNER) {
        let mut cmd = Command::new(&bins.load);
        // Each cgroup of the group once a second.
        cmd.args(["churn", &CHURN_MIB.to_string(), &group.len().to_string()])
            .args(group);
        children.push(spawn_in(&mut cmd, std::path::Path::new(&group[0]))?);
    }
    eprintln!(
        "bench: {churning} of {} pods churn {CHURN_MIB} MiB/s each ({} helper processes)",
        tree.uids.len(),
        children.len()
    );
    Ok(children)
}

fn stop_churn(children: Vec<Child>) {
    for mut child in children {
        let _ = child.kill();
        let _ = child.wait();
    }
}

pub(super) fn summarize(machine: &Machine, results: &[Usage]) -> Section {
    let mut figures = Vec::new();
    for usage in results {
        let case = format!("{} pods {}", usage.pods, usage.source.label());
        let baseline = match usage.source {
            SourceArg::Ebpf => results
                .iter()
                .find(|u| u.pods == usage.pods && u.source != SourceArg::Ebpf),
            SourceArg::Poll(_) => None,
        };
        let note = format!(
            "{:.0} s window, {}% churning",
            usage.window.as_secs_f64(),
            (CHURN_SHARE * 100.0) as u32
        );
        let mut cpu = Figure::new("density", &case, "cpu", usage.cpu_percent, "% of a core")
            .note(note.clone())
            .on(machine, usage.load);
        let mut rss = Figure::new(
            "density",
            &case,
            "peak rss",
            usage.peak_rss as f64 / f64::from(1 << 20),
            "MiB",
        )
        .note("VmHWM")
        .on(machine, usage.load);
        if let Some(base) = baseline {
            let base_case = format!("{} pods {}", base.pods, base.source.label());
            cpu = cpu.against(&Figure::new(
                "density",
                &base_case,
                "cpu",
                base.cpu_percent,
                "",
            ));
            rss = rss.against(&Figure::new(
                "density",
                &base_case,
                "peak rss",
                base.peak_rss as f64 / f64::from(1 << 20),
                "",
            ));
        }
        figures.push(cpu);
        figures.push(rss);
    }
    let raw = results
        .iter()
        .map(|u| {
            json!({
                "pods": u.pods,
                "source": u.source.label(),
                "cpu_percent_of_core": u.cpu_percent,
                "peak_rss_bytes": u.peak_rss,
                "rss_anon_bytes": u.rss_anon,
                "window_secs": u.window.as_secs_f64(),
                "load": u.load,
                "churn_share": CHURN_SHARE,
                "churn_mib_per_sec_per_pod": CHURN_MIB,
            })
        })
        .collect();
    Section {
        figures,
        raw: Value::Array(raw),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_share_of_one_core() {
        assert_eq!(cpu_percent(30, 100.0, Duration::from_secs(30)), 1.0);
        assert_eq!(cpu_percent(0, 100.0, Duration::from_secs(5)), 0.0);
    }

    #[test]
    fn ebpf_is_compared_with_polling_at_the_same_density() {
        let m = Machine {
            cores: 2,
            kernel: "t".into(),
            memory_bytes: 0,
        };
        let usage = |pods, source, cpu, rss: u64| Usage {
            pods,
            source,
            cpu_percent: cpu,
            peak_rss: rss << 20,
            rss_anon: rss << 19,
            window: Duration::from_secs(30),
            load: 0.3,
        };
        let poll = SourceArg::Poll(Duration::from_secs(1));
        let section = summarize(
            &m,
            &[
                usage(1000, SourceArg::Ebpf, 0.5, 16),
                usage(1000, poll, 2.0, 20),
                usage(5000, SourceArg::Ebpf, 1.0, 30),
                usage(5000, poll, 10.0, 40),
            ],
        );
        let f = &section.figures;
        assert_eq!(f.len(), 8);
        assert_eq!(f[0].case, "1000 pods ebpf");
        assert_eq!(f[0].ratio, Some((0.25, "1000 pods poll 1s".into())));
        assert_eq!(f[1].value, 16.0);
        assert_eq!(f[1].ratio, Some((0.8, "1000 pods poll 1s".into())));
        assert_eq!(f[2].ratio, None, "the baseline has no ratio");
        assert_eq!(f[4].ratio, Some((0.1, "5000 pods poll 1s".into())));
    }
}
