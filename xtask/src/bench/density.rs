//! Overhead at density: the agent's CPU share and peak RSS with many pods, a share of them
//! churning memory, for the eBPF source against polling every second.
//!
//! A bench-owned tree holds N burstable pods (cgroups and one PodList manifest). 10% of the
//! pods churn: `bench_load churn` processes, each serving up to 50 pod cgroups, move
//! themselves from cgroup to cgroup and map, touch and unmap 2 MiB in each, so every churning
//! pod's memory goes up and down by 2 MiB once a second. The churn runs throughout; each
//! agent is started, given a warm-up, then measured over a window: CPU from utime+stime in
//! /proc/<pid>/stat, peak RSS from VmHWM (which includes start-up).
//!
//! Memory is also measured as the kernel charges it: each agent runs in a cgroup of its own,
//! from a copy of the binary whose pages are in no cache, as in a pod started from a freshly
//! pulled image; the cgroup's peak charge holds the heap, the locked pages, the binary's page
//! cache and the kernel maps and ring buffer, which VmHWM does not show. The pods' cgroupfs
//! files are read once by the bench first (`warm_cgroupfs`), so the dentries and inodes the
//! kernel charges to their first reader go to neither agent.
use std::{
    fs,
    os::fd::AsRawFd as _,
    path::{Path, PathBuf},
    process::{Child, Command},
    time::{Duration, Instant},
};

use anyhow::Context as _;
use serde_json::{Value, json};

use super::{
    Size,
    env::{
        Agent, BenchTree, Binaries, Machine, SourceArg, clock_ticks_per_sec, limit_memory, loadavg,
        spawn_in,
    },
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
    /// The agent's cgroup's peak charge (`None` where the kernel keeps none: v2 before 5.19).
    pub charged_peak: Option<u64>,
    /// Its charge at the end of the window.
    pub charged_end: u64,
    /// What that charge is made of, from the cgroup's memory.stat.
    pub charged_parts: Option<ChargeParts>,
    pub window: Duration,
    pub load: f64,
}

pub(super) fn run(bins: &Binaries, machine: &Machine, size: Size) -> anyhow::Result<Section> {
    let secs = Duration::from_secs;
    let (sizes, warmup, window): (&[usize], _, _) = size.pick(
        (&[100], secs(1), secs(1)),
        (&[200], secs(2), secs(5)),
        (&[1000, 5000, 10_000], secs(5), secs(30)),
    );
    let mut results = Vec::new();
    for &pods in sizes {
        eprintln!("bench: density {pods} pods: creating cgroups");
        let tree = BenchTree::create(&format!("density-{pods}"), pods)?;
        warm_cgroupfs(&tree);
        let churners = start_churn(bins, &tree)?;
        let config = tree.write_config(100 * 1024)?;
        for source in [SourceArg::Ebpf, SourceArg::Poll(Duration::from_secs(1))] {
            let load = loadavg();
            eprintln!(
                "bench: density {pods} pods, {} (load {load:.2})",
                source.label()
            );
            let tag = source.label().replace(' ', "-");
            let cgroup = AgentCgroup::create(&tree, &tag)?;
            let monitor = uncached_copy(&bins.monitor, &tree.scratch.join(&tag))?;
            let agent = Agent::start_charged(
                bins,
                &monitor,
                &cgroup.dir,
                &tree,
                source,
                &config,
                "16Gi",
                &tag,
            )
            .with_context(|| format!("density {pods} pods, {}", source.label()))?;
            std::thread::sleep(warmup);
            let start = (agent.cpu_ticks()?, Instant::now());
            std::thread::sleep(window);
            let end = (agent.cpu_ticks()?, Instant::now());
            let peak_rss = agent.status_bytes("VmHWM")?;
            let rss_anon = agent.status_bytes("RssAnon")?;
            let charged_end = cgroup.charged()?;
            let charged_peak = cgroup.peak();
            let charged_parts = cgroup.parts(charged_end);
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
                charged_peak,
                charged_end,
                charged_parts,
                window: elapsed,
                load,
            });
        }
        stop_churn(churners);
        drop(tree);
    }
    Ok(summarize(machine, &results))
}

/// The agent's memory limit while measured: far above what it takes, so only the charge is
/// measured, never a reclaim.
const AGENT_LIMIT: u64 = 1 << 30;

/// Reads each pod's cgroup files once from the bench's own process, as the kubelet's
/// cAdvisor does on a node. The kernel charges the dentries and inodes of a cgroupfs file
/// (about 3.3 KiB a pod for three files, reclaimable) to the first process that opens it:
/// without this, whichever agent ran first at a size carried them and the second did not.
fn warm_cgroupfs(tree: &BenchTree) {
    let files: &[&str] = if tree.hierarchy.v2 {
        &[
            "memory.stat",
            "memory.current",
            "memory.max",
            "cgroup.procs",
        ]
    } else {
        &[
            "memory.stat",
            "memory.usage_in_bytes",
            "memory.limit_in_bytes",
            "cgroup.procs",
        ]
    };
    for uid in &tree.uids {
        let dir = tree.pod_dir(uid);
        for file in files {
            let _ = fs::read(dir.join(file));
        }
    }
}

/// A cgroup of the bench tree holding one agent, as its pod's cgroup would.
struct AgentCgroup {
    dir: PathBuf,
    v2: bool,
}

impl AgentCgroup {
    fn create(tree: &BenchTree, tag: &str) -> anyhow::Result<Self> {
        let v2 = tree.hierarchy.v2;
        let dir = test_harness::cgroup_tree::create_dirs(&tree.dir, &format!("agent-{tag}"), v2)
            .with_context(|| format!("creating the agent's cgroup in {}", tree.dir.display()))?;
        limit_memory(&dir, v2, AGENT_LIMIT)?;
        Ok(Self { dir, v2 })
    }

    fn read(&self, file: &str) -> anyhow::Result<u64> {
        let path = self.dir.join(file);
        let text =
            fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        text.trim()
            .parse()
            .with_context(|| format!("{}: {text:?}", path.display()))
    }

    fn charged(&self) -> anyhow::Result<u64> {
        self.read(if self.v2 {
            "memory.current"
        } else {
            "memory.usage_in_bytes"
        })
    }

    fn parts(&self, charged: u64) -> Option<ChargeParts> {
        let stat = fs::read_to_string(self.dir.join("memory.stat")).ok()?;
        ChargeParts::from_stat(&stat, self.v2, charged)
    }

    fn peak(&self) -> Option<u64> {
        self.read(if self.v2 {
            "memory.peak"
        } else {
            "memory.max_usage_in_bytes"
        })
        .ok()
    }
}

/// A cgroup's charge by kind, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ChargeParts {
    /// Heap and stacks.
    pub anon: u64,
    /// Page cache: the binary's pages, locked by mlockall.
    pub file: u64,
    /// The rest: kernel maps, ring buffer, slab (the cgroupfs dentries and inodes the agent
    /// opened among it), page tables.
    pub kernel: u64,
}

impl ChargeParts {
    /// From memory.stat: v1's `rss` and `cache`, v2's `anon` and `file`; the kernel's part is
    /// what `charged` holds beyond them.
    fn from_stat(stat: &str, v2: bool, charged: u64) -> Option<Self> {
        let field = |name: &str| {
            stat.lines().find_map(|line| {
                let (key, value) = line.split_once(' ')?;
                (key == name).then(|| value.trim().parse::<u64>().ok())?
            })
        };
        let (anon, file) = if v2 {
            (field("anon")?, field("file")?)
        } else {
            (field("rss")?, field("cache")?)
        };
        Some(Self {
            anon,
            file,
            kernel: charged.saturating_sub(anon + file),
        })
    }
}

/// A copy of `binary` in `dir` whose pages are in no cache: the agent's own page faults read
/// it in and are charged to its cgroup.
fn uncached_copy(binary: &Path, dir: &Path) -> anyhow::Result<PathBuf> {
    fs::create_dir_all(dir)?;
    let copy = dir.join("monitor");
    fs::copy(binary, &copy).with_context(|| format!("copying {}", binary.display()))?;
    let file = fs::File::open(&copy)?;
    file.sync_all()?;
    // SAFETY: advice about a file this process opened; no memory is passed.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        anyhow::bail!(
            "dropping {} from the page cache: {}",
            copy.display(),
            std::io::Error::from_raw_os_error(rc)
        );
    }
    Ok(copy)
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1 << 20)
}

/// Ticks over a window as percent of one core.
pub(super) fn cpu_percent(ticks: u64, ticks_per_sec: f64, window: Duration) -> f64 {
    ticks as f64 / ticks_per_sec / window.as_secs_f64() * 100.0
}

pub(super) fn start_churn(bins: &Binaries, tree: &BenchTree) -> anyhow::Result<Vec<Child>> {
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
        children.push(spawn_in(&mut cmd, Path::new(&group[0]))?);
    }
    eprintln!(
        "bench: {churning} of {} pods churn {CHURN_MIB} MiB/s each ({} helper processes)",
        tree.uids.len(),
        children.len()
    );
    Ok(children)
}

pub(super) fn stop_churn(children: Vec<Child>) {
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
        let charged = Figure::new(
            "density",
            &case,
            "peak charged",
            usage.charged_peak.unwrap_or(usage.charged_end) as f64 / f64::from(1 << 20),
            "MiB",
        )
        .note(format!(
            "memory cgroup {}, {:.1} MiB at the end{}",
            if usage.charged_peak.is_some() {
                "peak"
            } else {
                "at the end (no peak kept)"
            },
            mib(usage.charged_end),
            usage
                .charged_parts
                .map(|p| format!(
                    ": anon {:.1}, file {:.1}, kernel {:.1}",
                    mib(p.anon),
                    mib(p.file),
                    mib(p.kernel)
                ))
                .unwrap_or_default()
        ))
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
        figures.push(charged);
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
                "charged_peak_bytes": u.charged_peak,
                "charged_end_bytes": u.charged_end,
                "charged_end_anon_bytes": u.charged_parts.map(|p| p.anon),
                "charged_end_file_bytes": u.charged_parts.map(|p| p.file),
                "charged_end_kernel_bytes": u.charged_parts.map(|p| p.kernel),
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
            charged_peak: Some((rss + 10) << 20),
            charged_end: (rss + 8) << 20,
            charged_parts: Some(ChargeParts {
                anon: rss << 19,
                file: 4 << 20,
                kernel: 4 << 20,
            }),
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
        assert_eq!(f.len(), 12);
        assert_eq!(f[0].case, "1000 pods ebpf");
        assert_eq!(f[0].ratio, Some((0.25, "1000 pods poll 1s".into())));
        assert_eq!(f[1].value, 16.0);
        assert_eq!(f[1].ratio, Some((0.8, "1000 pods poll 1s".into())));
        assert_eq!(f[2].metric, "peak charged");
        assert_eq!(f[2].value, 26.0, "the cgroup's peak, not VmHWM");
        assert_eq!(f[3].ratio, None, "the baseline has no ratio");
        assert_eq!(f[6].ratio, Some((0.1, "5000 pods poll 1s".into())));
        assert!(
            f[2].note.ends_with("anon 8.0, file 4.0, kernel 4.0"),
            "{}",
            f[2].note
        );
    }

    #[test]
    fn charge_parts_by_cgroup_version() {
        let v1 = "cache 8388608\nrss 16777216\nrss_huge 0\nmapped_file 4096\n";
        let v2 = "anon 16777216\nfile 8388608\nkernel 1048576\n";
        let expected = Some(ChargeParts {
            anon: 16 << 20,
            file: 8 << 20,
            kernel: 8 << 20,
        });
        assert_eq!(ChargeParts::from_stat(v1, false, 32 << 20), expected, "v1");
        assert_eq!(ChargeParts::from_stat(v2, true, 32 << 20), expected, "v2");
        assert_eq!(
            ChargeParts::from_stat("", true, 1),
            None,
            "no memory.stat fields"
        );
    }
}
