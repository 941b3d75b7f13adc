//! What the benchmarks run against: the machine, bench-owned cgroup trees with pod
//! manifests, the agent as a child process, and the load helper.
use std::{
    fs,
    io::{BufRead as _, BufReader, Write as _},
    path::{Path, PathBuf},
    process::{Child, ChildStdin, ChildStdout, Command, Stdio},
    time::Duration,
};

use anyhow::{Context as _, bail};
use serde_json::json;
use test_harness::watched_process::WatchedProcess;
pub(super) use test_harness::watched_process::{Line, monotonic_ns};

/// Cores, kernel release and memory of the machine the figures come from.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Machine {
    pub cores: usize,
    pub kernel: String,
    pub memory_bytes: u64,
}

impl Machine {
    pub(super) fn read() -> Self {
        let kernel = fs::read_to_string("/proc/sys/kernel/osrelease")
            .map_or_else(|_| "unknown".into(), |s| s.trim().to_string());
        let memory_bytes = fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                let line = m.lines().find(|l| l.starts_with("MemTotal:"))?;
                line.split_whitespace().nth(1)?.parse::<u64>().ok()
            })
            .map_or(0, |kib| kib * 1024);
        Self {
            cores: std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
            kernel,
            memory_bytes,
        }
    }

    pub(super) fn describe(&self) -> String {
        format!("{} cores, {}", self.cores, self.kernel)
    }
}

/// The 1-minute load average.
pub(super) fn loadavg() -> f64 {
    fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

pub(super) fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A small deterministic generator for jitter (xorshift64).
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn seeded() -> Self {
        Self(monotonic_ns() | 1)
    }

    /// Uniform in `[0, 1)`.
    pub(super) fn unit(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The binaries the benchmarks run: the release build, or the test build for the smoke.
pub(super) struct Binaries {
    pub monitor: PathBuf,
    /// The build's directory of the trial runners and load helpers: the build's own, also
    /// when `--agent` names a monitor binary elsewhere.
    pub helpers: PathBuf,
    pub load: PathBuf,
    /// The memcg hook comparison's helper (see `hooks`).
    pub hook_cost: PathBuf,
    /// The empty program on the memcg raw tracepoints (see `kernel`).
    pub hook_floor: PathBuf,
    /// The ranking micro-benchmark (see `ranking`).
    pub ranking: PathBuf,
    /// Flags added to every agent started (`cargo xtask bench --agent-flag`).
    pub agent_flags: Vec<String>,
}

impl Binaries {
    /// Next to xtask's own target directory: xtask runs from `<target>/<profile>/xtask`.
    /// `agent` replaces the build's `monitor` (`cargo xtask bench --agent`).
    pub(super) fn locate(
        size: super::Size,
        agent: Option<PathBuf>,
        agent_flags: Vec<String>,
    ) -> anyhow::Result<Self> {
        let exe = std::env::current_exe().context("locating the xtask executable")?;
        let target = exe
            .parent()
            .and_then(Path::parent)
            .context("xtask runs from outside a cargo target directory")?;
        let release = target.join(size.pick("debug", "release", "release"));
        let monitor = match agent {
            // Absolute: the agents run from other directories.
            Some(path) => fs::canonicalize(&path)
                .ok()
                .filter(|p| p.is_file())
                .with_context(|| {
                    format!(
                        "--agent {}: not a file (the path of a monitor binary)",
                        path.display()
                    )
                })?,
            None => release.join("monitor"),
        };
        Ok(Self {
            monitor,
            load: release.join("bench_load"),
            hook_cost: release.join("hook_cost"),
            hook_floor: release.join("hook_floor"),
            ranking: release.join("ranking_timings"),
            helpers: release,
            agent_flags,
        })
    }
}

/// The memory controller's hierarchy: its mount and whether it is cgroup v2.
#[derive(Clone, Debug)]
pub(super) struct Hierarchy {
    pub mount: PathBuf,
    pub v2: bool,
}

impl Hierarchy {
    pub(super) fn discover() -> anyhow::Result<Self> {
        let (mount, v2) = test_harness::cgroup_tree::memory_mount()?;
        Ok(Self { mount, v2 })
    }

    /// Working set as the agent and the kubelet compute it: usage minus inactive file.
    pub(super) fn working_set(&self, dir: &Path) -> anyhow::Result<u64> {
        let (usage_file, inactive) = if self.v2 {
            ("memory.current", "inactive_file")
        } else {
            ("memory.usage_in_bytes", "total_inactive_file")
        };
        let usage: u64 = fs::read_to_string(dir.join(usage_file))
            .with_context(|| format!("reading {}", dir.join(usage_file).display()))?
            .trim()
            .parse()?;
        let stat = fs::read_to_string(dir.join("memory.stat"))?;
        let inactive = stat
            .lines()
            .find_map(|l| {
                l.strip_prefix(inactive)?
                    .strip_prefix(' ')?
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .unwrap_or(0);
        Ok(usage.saturating_sub(inactive))
    }
}

/// A bench-owned cgroup `/monitor-bench-<pid>-<name>` holding `kubepods/burstable/pod<uid>`
/// cgroups and a manifests directory; everything is removed on drop, after killing whatever
/// still runs inside.
pub(super) struct BenchTree {
    pub hierarchy: Hierarchy,
    /// The tree's root directory in the hierarchy.
    pub dir: PathBuf,
    /// `--kubepods-cgroup` for the agent.
    pub kubepods_rel: String,
    /// Scratch directory: manifests, config, checkpoints, logs.
    pub scratch: PathBuf,
    pub uids: Vec<String>,
}

impl BenchTree {
    /// Creates the tree with `pods` burstable pods, their cgroups and one manifest file.
    pub(super) fn create(name: &str, pods: usize) -> anyhow::Result<Self> {
        let hierarchy = Hierarchy::discover()?;
        let rel = format!("/monitor-bench-{}-{name}", std::process::id());
        let dir = hierarchy.mount.join(rel.trim_start_matches('/'));
        let scratch =
            std::env::temp_dir().join(format!("monitor-bench-{}-{name}", std::process::id()));
        let mut tree = Self {
            hierarchy,
            dir: dir.clone(),
            kubepods_rel: format!("{rel}/kubepods"),
            scratch: scratch.clone(),
            uids: Vec::new(),
        };
        // From here on, drop removes whatever was created, also on failure.
        test_harness::cgroup_tree::create_dirs(
            &tree.hierarchy.mount,
            &format!("{}/kubepods/burstable", rel.trim_start_matches('/')),
            tree.hierarchy.v2,
        )
        .with_context(|| format!("creating {}", dir.display()))?;
        fs::create_dir_all(scratch.join("pods"))?;
        let mut items = Vec::with_capacity(pods);
        for i in 0..pods {
            let uid = pod_uid(i);
            let pod_dir = tree.pod_dir(&uid);
            fs::create_dir(&pod_dir).with_context(|| format!("creating {}", pod_dir.display()))?;
            items.push(pod_manifest(i, &uid));
            tree.uids.push(uid);
        }
        // The agent reads manifest files of at most 1 MiB: a few hundred bytes a pod, so
        // one PodList file per POD_LIST_FILE_PODS pods.
        for (n, chunk) in items.chunks(POD_LIST_FILE_PODS).enumerate() {
            let list = json!({ "apiVersion": "v1", "kind": "PodList", "items": chunk });
            fs::write(
                scratch.join(format!("pods/pods-{n:03}.json")),
                list.to_string(),
            )?;
        }
        Ok(tree)
    }

    pub(super) fn pod_dir(&self, uid: &str) -> PathBuf {
        self.dir.join(format!("kubepods/burstable/pod{uid}"))
    }

    pub(super) fn kubepods_dir(&self) -> PathBuf {
        self.dir.join("kubepods")
    }

    pub(super) fn pods_dir(&self) -> PathBuf {
        self.scratch.join("pods")
    }

    /// Writes a KubeletConfiguration with one hard `allocatableMemory.available` threshold and
    /// short eviction gates, so trials can repeat.
    pub(super) fn write_config(&self, threshold_kib: u64) -> anyhow::Result<PathBuf> {
        let path = self.scratch.join("kubelet.yaml");
        fs::write(
            &path,
            format!(
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
                 evictionHard: {{allocatableMemory.available: \"{threshold_kib}Ki\"}}\n\
                 monitor: {{evictionInterval: 100ms, podCleanupTimeout: 100ms}}\n"
            ),
        )?;
        Ok(path)
    }
}

impl Drop for BenchTree {
    fn drop(&mut self) {
        test_harness::cgroup_tree::remove_tree(&self.dir);
        let _ = fs::remove_dir_all(&self.scratch);
    }
}

/// Pods per PodList file of a bench tree.
const POD_LIST_FILE_PODS: usize = 1000;

/// `00000000-0000-4000-8000-<i>`: valid, distinct and recognisable pod uids.
pub(super) fn pod_uid(i: usize) -> String {
    format!("00000000-0000-4000-8000-{i:012x}")
}

fn pod_manifest(i: usize, uid: &str) -> serde_json::Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": format!("bench-{i}"), "namespace": "bench", "uid": uid },
        "spec": {
            "priority": 0,
            "containers": [{
                "name": "app",
                "image": "bench",
                "resources": { "requests": { "memory": "16Mi", "cpu": "10m" } }
            }]
        },
        "status": { "phase": "Running", "qosClass": "Burstable" }
    })
}

/// Starts `cmd` inside `cgroup_dir`: it joins the cgroup before exec.
/// Sets the memory limit of the cgroup `dir` (`memory.max` on v2, `memory.limit_in_bytes` on
/// v1).
pub(super) fn limit_memory(dir: &Path, v2: bool, bytes: u64) -> anyhow::Result<()> {
    let file = if v2 {
        "memory.max"
    } else {
        "memory.limit_in_bytes"
    };
    fs::write(dir.join(file), bytes.to_string())
        .with_context(|| format!("limiting {}", dir.display()))
}

pub(super) fn spawn_in(cmd: &mut Command, cgroup_dir: &Path) -> anyhow::Result<Child> {
    test_harness::cgroup_tree::spawn_in(cmd, cgroup_dir)
        .with_context(|| format!("starting {cmd:?}"))
}

/// The agent as a child process: stdout lines (stamped with the bench's CLOCK_MONOTONIC
/// when read) and stderr read as they come.
pub(super) struct Agent {
    process: WatchedProcess,
}

/// Which binary an agent runs, and in which cgroup (`None`: the bench's own).
struct Run<'a> {
    monitor: &'a Path,
    cgroup: Option<&'a Path>,
}

/// How the agent reads memory.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum SourceArg {
    Ebpf,
    Poll(Duration),
}

impl SourceArg {
    pub(super) fn label(&self) -> String {
        match self {
            SourceArg::Ebpf => "ebpf".into(),
            SourceArg::Poll(d) if d.as_millis() < 1000 => format!("poll {}ms", d.as_millis()),
            SourceArg::Poll(d) => format!("poll {}s", d.as_secs()),
        }
    }

    fn args(&self) -> Vec<String> {
        match self {
            SourceArg::Ebpf => vec!["--source".into(), "ebpf".into()],
            SourceArg::Poll(d) => vec![
                "--source".into(),
                "poll".into(),
                "--poll-interval".into(),
                format!("{}ms", d.as_millis()),
            ],
        }
    }
}

/// The benches measure the agent with its stat programs on their hooks (the latency, the
/// kernel's cost, density under churn), so they pin `--attach-within always` unless `extra`
/// says otherwise: with the default `auto`, a threshold as far as most benches put it would
/// detach them. The overhead bench measures the default itself.
fn pin_stat_programs(extra: &[&str]) -> &'static [&'static str] {
    if extra.contains(&"--attach-within") {
        &[]
    } else {
        &["--attach-within", "always"]
    }
}

impl Agent {
    /// Starts `monitor --dry-run` on the tree and waits until it has loaded the pods.
    pub(super) fn start(
        bins: &Binaries,
        tree: &BenchTree,
        source: SourceArg,
        config: &Path,
        allocatable: &str,
        tag: &str,
    ) -> anyhow::Result<Self> {
        Self::start_with(bins, tree, source, &[], config, allocatable, tag)
    }

    /// As [`Self::start`], with `extra` flags for the agent.
    pub(super) fn start_with(
        bins: &Binaries,
        tree: &BenchTree,
        source: SourceArg,
        extra: &[&str],
        config: &Path,
        allocatable: &str,
        tag: &str,
    ) -> anyhow::Result<Self> {
        let run = Run {
            monitor: &bins.monitor,
            cgroup: None,
        };
        Self::launch(bins, run, tree, source, extra, config, allocatable, tag)
    }

    /// As [`Self::start`], running the `monitor` binary given inside the cgroup `cgroup`, so
    /// the kernel charges it there as it would in its pod.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn start_charged(
        bins: &Binaries,
        monitor: &Path,
        cgroup: &Path,
        tree: &BenchTree,
        source: SourceArg,
        config: &Path,
        allocatable: &str,
        tag: &str,
    ) -> anyhow::Result<Self> {
        let run = Run {
            monitor,
            cgroup: Some(cgroup),
        };
        Self::launch(bins, run, tree, source, &[], config, allocatable, tag)
    }

    #[allow(clippy::too_many_arguments)]
    fn launch(
        bins: &Binaries,
        run: Run<'_>,
        tree: &BenchTree,
        source: SourceArg,
        extra: &[&str],
        config: &Path,
        allocatable: &str,
        tag: &str,
    ) -> anyhow::Result<Self> {
        let checkpoint = tree.scratch.join(format!("checkpoint-{tag}"));
        let mut cmd = Command::new(run.monitor);
        cmd.arg("--dry-run")
            .arg("--pods")
            .arg(tree.pods_dir())
            .args(["--kubepods-cgroup", &tree.kubepods_rel])
            .args(["--allocatable-memory", allocatable])
            .arg("--config")
            .arg(config)
            .args(source.args())
            .args(extra)
            .args(&bins.agent_flags)
            .args(pin_stat_programs(extra))
            .arg("--checkpoint-dir")
            .arg(&checkpoint)
            .args(["--output", "json", "--no-metrics"])
            .env("RUST_LOG", "info");
        let started = match run.cgroup {
            Some(dir) => WatchedProcess::spawn_in(cmd, dir),
            None => WatchedProcess::spawn(cmd),
        };
        let process = started.with_context(|| format!("starting {}", run.monitor.display()))?;
        let agent = Self { process };
        agent.wait_for_log("pods: ", Duration::from_secs(120))?;
        Ok(agent)
    }

    pub(super) fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Waits until the agent logs a line containing `needle`; fails when it exits first.
    pub(super) fn wait_for_log(&self, needle: &str, timeout: Duration) -> anyhow::Result<()> {
        match self.process.wait_stderr(timeout, |l| l.contains(needle)) {
            Some(_) => Ok(()),
            None => bail!(
                "no {needle:?} from the agent within {timeout:?} (or it exited):\n{}",
                self.log_text()
            ),
        }
    }

    /// Everything the agent logged so far.
    pub(super) fn log_text(&self) -> String {
        self.process.stderr()
    }

    /// The next stdout line, or `None` after `timeout`.
    pub(super) fn next_line(&self, timeout: Duration) -> anyhow::Result<Option<Line>> {
        self.process
            .next_line(timeout)
            .map_err(|_| anyhow::anyhow!("the agent closed its output:\n{}", self.log_text()))
    }

    /// Lines already read, without waiting.
    pub(super) fn drain(&self) -> Vec<Line> {
        self.process.take_lines()
    }

    /// utime + stime in clock ticks, from /proc/<pid>/stat.
    pub(super) fn cpu_ticks(&self) -> anyhow::Result<u64> {
        proc_cpu_ticks(self.pid())
    }

    /// A field of /proc/<pid>/status in bytes (`VmHWM`, `VmRSS`).
    pub(super) fn status_bytes(&self, field: &str) -> anyhow::Result<u64> {
        let status = fs::read_to_string(format!("/proc/{}/status", self.pid()))?;
        status
            .lines()
            .find_map(|l| {
                let rest = l.strip_prefix(field)?.strip_prefix(':')?;
                rest.split_whitespace().next()?.parse::<u64>().ok()
            })
            .map(|kib| kib * 1024)
            .with_context(|| format!("no {field} in /proc/{}/status", self.pid()))
    }

    /// SIGTERM, then SIGKILL if it has not exited within 10 s; what it logged.
    pub(super) fn stop(mut self) -> anyhow::Result<String> {
        self.process.stop(Duration::from_secs(10));
        Ok(self.log_text())
    }
}

/// utime + stime of a process in clock ticks.
pub(super) fn proc_cpu_ticks(pid: u32) -> anyhow::Result<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_cpu_ticks(&stat).with_context(|| format!("parsing /proc/{pid}/stat"))
}

/// utime (field 14) + stime (field 15) of a /proc/<pid>/stat line; the command name in
/// parentheses may contain spaces.
pub(super) fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    // after_comm starts at field 3 (state).
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

pub(super) fn clock_ticks_per_sec() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 { ticks as f64 } else { 100.0 }
}

/// The `bench_load step` helper inside a cgroup.
pub(super) struct Stepper {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Stepper {
    pub(super) fn start_in(bins: &Binaries, cgroup_dir: &Path) -> anyhow::Result<Self> {
        let mut cmd = Command::new(&bins.load);
        cmd.arg("step").stdin(Stdio::piped()).stdout(Stdio::piped());
        let mut child = spawn_in(&mut cmd, cgroup_dir)?;
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        Ok(Self {
            child,
            stdin,
            stdout,
        })
    }

    pub(super) fn command(&mut self, command: &str) -> anyhow::Result<String> {
        writeln!(self.stdin, "{command}")?;
        self.stdin.flush()?;
        let mut answer = String::new();
        self.stdout.read_line(&mut answer)?;
        if answer.is_empty() {
            bail!("the load helper exited on {command:?}");
        }
        Ok(answer.trim().to_string())
    }
}

impl Drop for Stepper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sets a sysctl through /proc/sys and puts the previous value back on drop.
pub(super) struct SysctlGuard {
    path: PathBuf,
    previous: String,
}

impl SysctlGuard {
    pub(super) fn set(name: &str, value: &str) -> anyhow::Result<Self> {
        let path = PathBuf::from("/proc/sys").join(name.replace('.', "/"));
        let previous = fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?
            .trim()
            .to_string();
        fs::write(&path, value).with_context(|| format!("setting {name}={value}"))?;
        Ok(Self { path, previous })
    }
}

impl Drop for SysctlGuard {
    fn drop(&mut self) {
        let _ = fs::write(&self.path, &self.previous);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--agent` replaces the agent alone: the trial runners stay the build's, which an
    /// older agent's directory does not hold.
    #[test]
    fn an_agent_from_elsewhere_keeps_the_builds_helpers() {
        let elsewhere = std::env::temp_dir().join(format!("bench-agent-{}", std::process::id()));
        fs::create_dir_all(&elsewhere).unwrap();
        let agent = elsewhere.join("monitor");
        fs::write(&agent, b"").unwrap();
        let own = Binaries::locate(super::super::Size::Quick, None, Vec::new()).unwrap();
        let other = Binaries::locate(super::super::Size::Quick, Some(agent.clone()), Vec::new());
        fs::remove_dir_all(&elsewhere).unwrap();
        let other = other.unwrap();
        assert_eq!(
            other.monitor,
            fs::canonicalize(std::env::temp_dir())
                .unwrap()
                .join(elsewhere.file_name().unwrap())
                .join("monitor")
        );
        assert_eq!(other.helpers, own.helpers);
        assert_eq!(own.monitor, own.helpers.join("monitor"));
        assert!(
            own.helpers.ends_with("release"),
            "{}",
            own.helpers.display()
        );
    }

    #[test]
    fn cpu_ticks_survive_spaces_in_the_command() {
        let stat =
            "4242 (tokio rt (x)) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 75 0 0 20 0 2 0 100 0 0";
        assert_eq!(parse_cpu_ticks(stat), Some(325));
        assert_eq!(parse_cpu_ticks("garbage"), None);
    }

    #[test]
    fn sources_are_labelled_like_the_kubelet_periods() {
        assert_eq!(SourceArg::Ebpf.label(), "ebpf");
        assert_eq!(
            SourceArg::Poll(Duration::from_millis(100)).label(),
            "poll 100ms"
        );
        assert_eq!(SourceArg::Poll(Duration::from_secs(10)).label(), "poll 10s");
        assert_eq!(
            SourceArg::Poll(Duration::from_secs(1)).args(),
            ["--source", "poll", "--poll-interval", "1000ms"]
        );
    }

    #[test]
    fn pod_uids_are_distinct_and_well_formed() {
        assert_eq!(pod_uid(255), "00000000-0000-4000-8000-0000000000ff");
        assert_ne!(pod_uid(1), pod_uid(2));
    }

    #[test]
    fn jitter_is_in_the_unit_interval() {
        let mut rng = Rng(7);
        for _ in 0..1000 {
            let x = rng.unit();
            assert!((0.0..1.0).contains(&x));
        }
    }
}
