//! Support for the end-to-end tests: root checks, test-owned cgroups that are removed even when
//! a test fails, and processes that allocate real memory inside them.
use std::{
    fs,
    io::{self, BufRead as _, BufReader, Read as _, Write as _},
    net::{SocketAddr, TcpStream},
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
    process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio},
    sync::{
        Arc, Condvar, Mutex,
        atomic::{AtomicUsize, Ordering},
        mpsc,
    },
    time::{Duration, Instant},
};

use monitor::cgroupfs::{CgroupVersion, MemoryHierarchy};

/// Cgroup trees owned by a test, shared with xtask.
pub use test_cgroups as cgroup_tree;
pub mod kube_api;
pub mod mounts;
pub mod stand_in_kubelet;

/// Set to skip the tests that need root instead of failing them.
pub const SKIP_ROOT_TESTS: &str = "MONITOR_SKIP_ROOT_TESTS";

/// True when the test may run. Not being root fails the test, so a green run means every
/// test ran; with [`SKIP_ROOT_TESTS`] set (never in CI, which runs as root) it is skipped with
/// a visible message instead.
pub fn running_as_root(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    let opted_out = std::env::var_os(SKIP_ROOT_TESTS).is_some();
    assert!(
        opted_out && std::env::var_os("CI").is_none(),
        "{test} needs root (real cgroups and kernel programs); run the tests as root, or set \
         {SKIP_ROOT_TESTS}=1 outside CI to skip them"
    );
    eprintln!("SKIP: {test} needs root ({SKIP_ROOT_TESTS} is set)");
    false
}

/// A cgroup created by a test under the memory hierarchy, with its children; removed on drop
/// after killing whatever still runs inside.
pub struct TestCgroup {
    pub hierarchy: MemoryHierarchy,
    /// Path below the hierarchy root, e.g. `/monitor-test-1234-trace`.
    pub rel: String,
    pub dir: PathBuf,
}

impl TestCgroup {
    /// Creates `/<name>-<pid>` below the memory hierarchy's root.
    pub fn create(name: &str) -> Self {
        let hierarchy = MemoryHierarchy::discover().expect("memory controller");
        let rel = format!("/monitor-test-{}-{name}", std::process::id());
        let dir = hierarchy.dir(&rel);
        if dir.exists() {
            cgroup_tree::remove_tree(&dir);
        }
        fs::create_dir(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        if hierarchy.version == CgroupVersion::V2 {
            // Children need the memory controller delegated; processes go into children.
            fs::write(dir.join("cgroup.subtree_control"), "+memory")
                .unwrap_or_else(|e| panic!("delegating memory in {}: {e}", dir.display()));
        }
        Self {
            hierarchy,
            rel,
            dir,
        }
    }

    /// Creates a child cgroup (`a/b` allowed) and returns its directory. On v2 the levels
    /// above it delegate the memory controller; the child itself can hold processes.
    pub fn child(&self, name: &str) -> PathBuf {
        let v2 = self.hierarchy.version == CgroupVersion::V2;
        cgroup_tree::create_dirs(&self.dir, name, v2)
            .unwrap_or_else(|e| panic!("creating {}: {e}", self.dir.join(name).display()))
    }

    /// Relative path of a child, as kernel events name it.
    pub fn child_rel(&self, name: &str) -> String {
        format!("{}/{name}", self.rel)
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        cgroup_tree::remove_tree(&self.dir);
    }
}

/// Kernel OOM kills so far (machine-wide; a v1 parent cgroup does not count its children's).
pub fn oom_kills() -> u64 {
    fs::read_to_string("/proc/vmstat")
        .expect("/proc/vmstat")
        .lines()
        .find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse().ok())
        .unwrap_or(0)
}

/// The cgroup id of a cgroup directory: its inode number.
pub fn cgroup_id(dir: &Path) -> u64 {
    fs::metadata(dir).expect("cgroup directory").ino()
}

/// Limits the memory of the cgroup `dir` (v1 `memory.limit_in_bytes`, v2 `memory.max`).
pub fn set_memory_limit(dir: &Path, bytes: u64) -> io::Result<()> {
    fs::write(dir.join("memory.limit_in_bytes"), bytes.to_string())
        .or_else(|_| fs::write(dir.join("memory.max"), bytes.to_string()))
}

/// Path of a workspace binary: from `env_var` when set (the VM test sets it), else next to the
/// running test executable's `deps` directory, where cargo puts the workspace's binaries.
pub fn binary(name: &str, env_var: &str) -> PathBuf {
    if let Some(path) = std::env::var_os(env_var) {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("test executable path");
    let target_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test executable lives in target/<profile>/deps");
    let path = target_dir.join(name);
    assert!(
        path.exists(),
        "{} not built; run the tests through cargo",
        path.display()
    );
    path
}

/// Starts `monitor trace` with `args` and returns once its kernel programs are attached, so
/// what the test does next is traced. Its stdout stays piped; its stderr is collected and
/// handed back with the exit status by [`Trace::finish`].
pub struct Trace {
    child: Child,
    stderr: std::thread::JoinHandle<String>,
}

impl Trace {
    pub fn start(args: &[&str]) -> Self {
        let mut child = Command::new(monitor_bin())
            .arg("trace")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting monitor trace");
        let (ready_tx, ready_rx) = mpsc::channel();
        let stderr = BufReader::new(child.stderr.take().expect("piped stderr"));
        let stderr = std::thread::spawn(move || {
            let mut all = String::new();
            for line in stderr.lines().map_while(Result::ok) {
                if line.contains("tracing with") {
                    let _ = ready_tx.send(());
                }
                all.push_str(&line);
                all.push('\n');
            }
            all
        });
        // Slow machines (the emulated VM) take seconds to load the programs.
        if ready_rx.recv_timeout(Duration::from_secs(60)).is_err() {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "monitor trace did not start: {}",
                stderr.join().unwrap_or_default()
            );
        }
        Self { child, stderr }
    }

    /// Waits for the trace to end; its exit status, stdout and stderr.
    pub fn finish(self) -> (ExitStatus, String, String) {
        let out = self
            .child
            .wait_with_output()
            .expect("waiting for monitor trace");
        let stderr = self.stderr.join().unwrap_or_default();
        (
            out.status,
            String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr,
        )
    }
}

/// The `monitor` binary under test.
pub fn monitor_bin() -> PathBuf {
    binary("monitor", "MONITOR_BIN")
}

/// A running `alloc` helper inside a cgroup.
pub struct Allocator {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Allocator {
    /// Starts the helper inside `cgroup_dir` (it joins the cgroup before exec).
    pub fn start_in(cgroup_dir: &Path) -> Self {
        let mut cmd = Command::new(binary("alloc", "MONITOR_ALLOC_BIN"));
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
        let mut child =
            cgroup_tree::spawn_in(&mut cmd, cgroup_dir).expect("starting the alloc helper");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        Self {
            child,
            stdin,
            stdout,
        }
    }

    /// Starts the helper as user `uid` inside `cgroup_dir`: it is moved there once running
    /// (an unprivileged process cannot join a root-owned cgroup itself), before it is told
    /// to allocate anything.
    pub fn start_as(cgroup_dir: &Path, uid: u32) -> Self {
        use std::os::unix::process::CommandExt as _;
        let mut cmd = Command::new(binary("alloc", "MONITOR_ALLOC_BIN"));
        cmd.uid(uid)
            .gid(uid)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        let mut child = cmd.spawn().expect("starting the alloc helper");
        let procs = cgroup_dir.join("cgroup.procs");
        fs::write(&procs, child.id().to_string())
            .unwrap_or_else(|e| panic!("moving the helper into {}: {e}", procs.display()));
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        Self {
            child,
            stdin,
            stdout,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends a command and returns the helper's answer.
    pub fn command(&mut self, command: &str) -> String {
        writeln!(self.stdin, "{command}").expect("writing to the alloc helper");
        self.stdin.flush().expect("flushing");
        let mut answer = String::new();
        self.stdout
            .read_line(&mut answer)
            .expect("reading the alloc helper");
        answer.trim().to_string()
    }

    /// Allocates and touches `mib` MiB.
    pub fn alloc(&mut self, mib: usize) {
        assert_eq!(
            self.command(&format!("alloc {mib}")),
            format!("allocated {mib}")
        );
    }

    /// Writes `mib` MiB to `path` and syncs it: clean page cache charged to the cgroup, which
    /// reclaim can take back.
    pub fn cache(&mut self, mib: usize, path: &Path) {
        assert_eq!(
            self.command(&format!("cache {mib} {}", path.display())),
            format!("cached {mib}")
        );
    }

    /// Frees everything allocated.
    pub fn free(&mut self) {
        assert_eq!(self.command("free"), "freed");
    }
}

impl Drop for Allocator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A running `ignore_term` helper inside a cgroup: it ignores SIGTERM, so only SIGKILL ends
/// it. Killed and reaped on drop.
pub struct TermIgnorer {
    child: Child,
}

impl TermIgnorer {
    /// Starts the helper inside `cgroup_dir` and waits until it ignores SIGTERM.
    pub fn start_in(cgroup_dir: &Path) -> Self {
        let mut cmd = Command::new(binary("ignore_term", "MONITOR_IGNORE_TERM_BIN"));
        cmd.stdout(Stdio::piped());
        let mut child =
            cgroup_tree::spawn_in(&mut cmd, cgroup_dir).expect("starting the ignore_term helper");
        let mut ready = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut ready)
            .expect("reading the ignore_term helper");
        assert_eq!(ready.trim(), "ready");
        Self { child }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for TermIgnorer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub use cgroup_tree::pids_in as cgroup_pids;

/// Creates a cgroup directory (its parent must exist); with `distribute`, also enables the
/// memory controller for its children, which on v2 they need for their memory files.
/// The kubelet's QoS classes, which place a pod's cgroup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Qos {
    Guaranteed,
    Burstable,
    BestEffort,
}

/// A kubepods tree below a test cgroup, named like the kubelet's cgroupfs driver does:
/// `kubepods/pod<uid>`, `kubepods/burstable/pod<uid>`, `kubepods/besteffort/pod<uid>`.
/// Removed with the test cgroup.
pub struct Kubepods {
    /// The kubepods cgroup below the hierarchy root, for `--kubepods-cgroup`.
    pub rel: String,
    pub dir: PathBuf,
    v2: bool,
}

impl Kubepods {
    /// Creates `kubepods` with its `burstable` and `besteffort` levels below `cgroup`.
    pub fn create(cgroup: &TestCgroup) -> Self {
        cgroup.child("kubepods/burstable");
        cgroup.child("kubepods/besteffort");
        Self {
            rel: cgroup.child_rel("kubepods"),
            dir: cgroup.dir.join("kubepods"),
            v2: cgroup.hierarchy.version == CgroupVersion::V2,
        }
    }

    /// The pod cgroup's directory for a pod (not created).
    pub fn pod_dir(&self, qos: Qos, uid: &str) -> PathBuf {
        self.dir.join(match qos {
            Qos::Guaranteed => format!("pod{uid}"),
            Qos::Burstable => format!("burstable/pod{uid}"),
            Qos::BestEffort => format!("besteffort/pod{uid}"),
        })
    }

    /// Creates the pod cgroup and one container cgroup in it, as a runtime would, and
    /// returns the container's directory (where the pod's processes go).
    pub fn create_pod(&self, qos: Qos, uid: &str) -> PathBuf {
        let pod = self.pod_dir(qos, uid);
        let rel = pod
            .strip_prefix(&self.dir)
            .expect("pod below kubepods")
            .join("container");
        cgroup_tree::create_dirs(&self.dir, &rel.to_string_lossy(), self.v2)
            .unwrap_or_else(|e| panic!("creating {}: {e}", pod.display()))
    }

    /// Kills the pod's processes and removes its cgroups, as the kubelet does once a pod is
    /// gone.
    pub fn remove_pod(&self, qos: Qos, uid: &str) {
        cgroup_tree::remove_tree(&self.pod_dir(qos, uid));
    }
}

/// A pod for a manifests directory: burstable with a memory request, best-effort without.
#[derive(Clone, Debug)]
pub struct TestPod {
    pub name: String,
    pub uid: String,
    pub memory_request_mib: Option<u64>,
    pub priority: Option<i32>,
    /// Carries `kubernetes.io/config.source: file`, like a static pod.
    pub static_pod: bool,
}

impl TestPod {
    /// A pod named `name` with a uid of the API server's shape (a UUID) made from the name.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_string(),
            uid: uid_for(name),
            memory_request_mib: None,
            priority: None,
            static_pod: false,
        }
    }

    pub fn request_mib(mut self, mib: u64) -> Self {
        self.memory_request_mib = Some(mib);
        self
    }

    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = Some(priority);
        self
    }

    pub fn static_pod(mut self) -> Self {
        self.static_pod = true;
        self
    }

    pub fn qos(&self) -> Qos {
        if self.memory_request_mib.is_some() {
            Qos::Burstable
        } else {
            Qos::BestEffort
        }
    }

    /// The pod as a YAML manifest.
    pub fn manifest(&self) -> String {
        let mut text = format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {}\n  namespace: default\n  uid: {}\n",
            self.name, self.uid
        );
        if self.static_pod {
            text.push_str("  annotations:\n    kubernetes.io/config.source: file\n");
        }
        text.push_str("spec:\n");
        if let Some(priority) = self.priority {
            text.push_str(&format!("  priority: {priority}\n"));
        }
        text.push_str("  containers:\n  - name: main\n    image: registry.k8s.io/pause:3.9\n");
        if let Some(mib) = self.memory_request_mib {
            text.push_str(&format!(
                "    resources:\n      requests:\n        memory: {mib}Mi\n"
            ));
        }
        text
    }

    /// Writes the manifest as `<name>.yaml` into `dir` and returns its path.
    pub fn write_to(&self, dir: &Path) -> PathBuf {
        let path = dir.join(format!("{}.yaml", self.name));
        fs::write(&path, self.manifest())
            .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        path
    }
}

/// A UUID made from `name` (FNV-1a), the same for the same name: the agent accepts only
/// uids of the API server's shape.
pub fn uid_for(name: &str) -> String {
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        hash >> 32,
        (hash >> 16) & 0xffff,
        hash & 0xfff,
        (hash >> 52) & 0xfff,
        hash & 0xffff_ffff_ffff
    )
}

/// A directory below the system's temporary directory, removed with its content on drop.
pub struct TempDir {
    pub path: PathBuf,
}

impl TempDir {
    pub fn new(name: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("monitor-test-{}-{name}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).unwrap_or_else(|e| panic!("creating {}: {e}", path.display()));
        Self { path }
    }

    /// A path inside the directory.
    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// Lines a child process wrote on one stream, shared with the thread reading them.
#[derive(Default)]
struct Lines {
    lines: Mutex<Vec<String>>,
    added: Condvar,
}

/// The `monitor` binary running as a subprocess. Its stdout and stderr are read line by line
/// as they come by two threads; the process is killed and reaped on drop, and its output is
/// printed when a test fails.
pub struct MonitorProcess {
    child: Child,
    stdout: mpsc::Receiver<String>,
    stdout_seen: Arc<Lines>,
    stderr: Arc<Lines>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl MonitorProcess {
    /// Starts `monitor ARGS` with info logging on stderr.
    pub fn start<S: AsRef<std::ffi::OsStr>>(args: impl IntoIterator<Item = S>) -> Self {
        Self::spawn(Self::command(args))
    }

    /// Like [`Self::start`], with `configure` applied to the command first (limits,
    /// capabilities dropped before exec).
    pub fn start_with<S: AsRef<std::ffi::OsStr>>(
        args: impl IntoIterator<Item = S>,
        configure: impl FnOnce(&mut Command),
    ) -> Self {
        let mut command = Self::command(args);
        configure(&mut command);
        Self::spawn(command)
    }

    /// As [`Self::start`], with the process inside the cgroup `dir` from its first instruction.
    pub fn start_in<S: AsRef<std::ffi::OsStr>>(
        args: impl IntoIterator<Item = S>,
        dir: &Path,
    ) -> Self {
        let mut command = Self::piped(Self::command(args));
        Self::read_output(cgroup_tree::spawn_in(&mut command, dir))
    }

    /// The command [`Self::start`] runs, for a test to adjust before [`Self::spawn`].
    pub fn command<S: AsRef<std::ffi::OsStr>>(args: impl IntoIterator<Item = S>) -> Command {
        let mut command = Command::new(monitor_bin());
        command.args(args).env("RUST_LOG", "info");
        command
    }

    /// Starts `command` (from [`Self::command`]) with its output read line by line.
    pub fn spawn(command: Command) -> Self {
        Self::read_output(Self::piped(command).spawn())
    }

    fn piped(mut command: Command) -> Command {
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    }

    fn read_output(child: io::Result<Child>) -> Self {
        let mut child = child.expect("starting monitor");
        let (tx, stdout) = mpsc::channel();
        let stdout_seen = Arc::new(Lines::default());
        let seen = stdout_seen.clone();
        let out = child.stdout.take().expect("stdout");
        let stdout_reader = std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                push_line(&seen, line.clone());
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Lines::default());
        let lines = stderr.clone();
        let err = child.stderr.take().expect("stderr");
        let stderr_reader = std::thread::spawn(move || {
            for line in BufReader::new(err).lines() {
                let Ok(line) = line else { break };
                push_line(&lines, line);
            }
        });
        Self {
            child,
            stdout,
            stdout_seen,
            stderr,
            readers: vec![stdout_reader, stderr_reader],
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The next stdout line, waiting at most `timeout`; `None` on timeout or end of output.
    pub fn next_line(&self, timeout: Duration) -> Option<String> {
        self.stdout.recv_timeout(timeout).ok()
    }

    /// The next decision the agent prints (a JSON line), waiting at most `within`.
    pub fn next_decision(&self, within: Duration) -> serde_json::Value {
        let line = self
            .next_line(within)
            .unwrap_or_else(|| panic!("no decision within {within:?}; stderr:\n{}", self.stderr()));
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("decision {line:?} is not JSON: {e}"))
    }

    /// The first stderr line so far or within `timeout` that `matches`.
    pub fn wait_stderr(&self, timeout: Duration, matches: impl Fn(&str) -> bool) -> Option<String> {
        let deadline = Instant::now() + timeout;
        let mut lines = self.stderr.lines.lock().unwrap();
        loop {
            if let Some(line) = lines.iter().find(|l| matches(l)) {
                return Some(line.clone());
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            lines = self.stderr.added.wait_timeout(lines, left).unwrap().0;
        }
    }

    /// Everything written on stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lines.lock().unwrap().join("\n")
    }

    /// Every stdout line so far (including those already taken by [`Self::next_line`]).
    pub fn stdout_lines(&self) -> Vec<String> {
        self.stdout_seen.lines.lock().unwrap().clone()
    }

    /// Asks the agent to stop, as a service manager would.
    pub fn terminate(&self) {
        // SAFETY: signalling the child this value owns, which is not reaped before drop.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
    }

    /// Stops the agent with SIGTERM and asserts that it exits with status 0.
    pub fn stop(&mut self) {
        self.terminate();
        let status = self
            .wait(Duration::from_secs(10))
            .expect("the agent stops on SIGTERM");
        assert!(
            status.success(),
            "exit status {status}; stderr:\n{}",
            self.stderr()
        );
    }

    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        self.child
            .try_wait()
            .expect("checking on monitor")
            .is_none()
    }

    /// Waits for the process to exit; `None` if it is still running after `timeout`.
    pub fn wait(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("waiting for monitor") {
                // The pipes are closed: the readers end once they took the last lines.
                for reader in self.readers.drain(..) {
                    let _ = reader.join();
                }
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn push_line(lines: &Lines, line: String) {
    lines.lines.lock().unwrap().push(line);
    lines.added.notify_all();
}

impl Drop for MonitorProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- monitor stdout ---\n{}", self.stdout_lines().join("\n"));
            eprintln!("--- monitor stderr ---\n{}", self.stderr());
        }
    }
}

/// The address a running agent logged it serves its endpoints on (`--metrics-addr` with
/// port 0 picks a free one).
pub fn metrics_addr(agent: &MonitorProcess) -> SocketAddr {
    let line = agent
        .wait_stderr(Duration::from_secs(30), |l| {
            l.contains("metrics at http://")
        })
        .expect("the bound address is logged");
    line.split("metrics at http://")
        .nth(1)
        .and_then(|rest| rest.strip_suffix("/metrics"))
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
}

/// `GET path` over loopback, answered body included (the connection is closed after it).
/// A connection reset is retried a few times: on the emulated VM a fresh connection to a
/// just-started server is sometimes reset before the request goes out.
pub fn http_get(addr: SocketAddr, path: &str) -> String {
    let mut last_error = None;
    for _ in 0..5 {
        match try_http_get(addr, path) {
            Ok(answer) => return answer,
            Err(e) => last_error = Some(e),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("GET http://{addr}{path}: {last_error:?}")
}

fn try_http_get(addr: SocketAddr, path: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    Ok(answer)
}

/// True while process `pid` exists and is not a zombie.
pub fn process_alive(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit(')')
                .next()
                .map(|rest| rest.trim_start().to_string())
        })
        .is_some_and(|rest| !rest.starts_with('Z') && !rest.starts_with('X'))
}

/// One agent's world in a test: a kubepods tree below a test cgroup, a manifests directory,
/// a checkpoint directory and a configuration file. The agent sees pressure once the
/// kubepods working set passes [`AgentScene::PRESSURE_ABOVE_MIB`].
pub struct AgentScene {
    pub cgroup: TestCgroup,
    pub kubepods: Kubepods,
    pub manifests: TempDir,
    pub checkpoint: TempDir,
    pub config: PathBuf,
    _files: TempDir,
}

impl AgentScene {
    /// `--allocatable-memory`.
    pub const ALLOCATABLE: &str = "300Mi";
    /// The hard `allocatableMemory.available` threshold.
    pub const THRESHOLD: &str = "100Mi";
    /// Kubepods working set above which the threshold is met.
    pub const PRESSURE_ABOVE_MIB: u64 = 200;

    /// A scene whose configuration has the given `evictionInterval` and `podCleanupTimeout`
    /// (Go durations).
    pub fn new(name: &str, eviction_interval: &str, pod_cleanup_timeout: &str) -> Self {
        Self::with_config(
            name,
            &format!(
                "evictionHard:\n  allocatableMemory.available: {}\n\
                 monitor:\n  evictionInterval: {eviction_interval}\n  \
                 podCleanupTimeout: {pod_cleanup_timeout}\n",
                Self::THRESHOLD
            ),
        )
    }

    /// A scene whose KubeletConfiguration holds `eviction_fields` (YAML lines).
    pub fn with_config(name: &str, eviction_fields: &str) -> Self {
        let cgroup = TestCgroup::create(name);
        let kubepods = Kubepods::create(&cgroup);
        let files = TempDir::new(&format!("{name}-files"));
        let config = files.join("kubelet-config.yaml");
        fs::write(
            &config,
            format!(
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
                 {eviction_fields}"
            ),
        )
        .expect("writing the configuration");
        Self {
            cgroup,
            kubepods,
            manifests: TempDir::new(&format!("{name}-pods")),
            checkpoint: TempDir::new(&format!("{name}-state")),
            config,
            _files: files,
        }
    }

    /// Writes the pod's manifest.
    pub fn write_manifest(&self, pod: &TestPod) -> PathBuf {
        pod.write_to(&self.manifests.path)
    }

    /// Removes the pod's manifest.
    pub fn remove_manifest(&self, pod: &TestPod) {
        let path = self.manifests.join(&format!("{}.yaml", pod.name));
        fs::remove_file(&path).unwrap_or_else(|e| panic!("removing {}: {e}", path.display()));
    }

    /// The pod's cgroup directory.
    pub fn pod_dir(&self, pod: &TestPod) -> PathBuf {
        self.kubepods.pod_dir(pod.qos(), &pod.uid)
    }

    /// Creates the pod's cgroup (with a container cgroup) and starts an allocator in the
    /// container.
    pub fn run_pod(&self, pod: &TestPod) -> Allocator {
        Allocator::start_in(&self.kubepods.create_pod(pod.qos(), &pod.uid))
    }

    /// Writes the manifest, creates the cgroup and starts an allocator in it.
    pub fn start_pod(&self, pod: &TestPod) -> Allocator {
        self.write_manifest(pod);
        self.run_pod(pod)
    }

    /// Waits until the pod's cgroup subtree holds no process.
    pub fn wait_until_empty(&self, pod: &TestPod, within: Duration) {
        let deadline = Instant::now() + within;
        while !self.pod_pids(pod).is_empty() {
            assert!(
                Instant::now() < deadline,
                "{} still has processes {:?} after {within:?}",
                pod.name,
                self.pod_pids(pod)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Pids in the pod's cgroup subtree (empty when it is gone).
    pub fn pod_pids(&self, pod: &TestPod) -> Vec<i32> {
        cgroup_tree::subtree_pids(&self.pod_dir(pod))
    }

    /// The agent's flags for this scene: JSON decisions, no metrics, and unless `extra` sets
    /// them `--source auto` with a short poll interval, `--duration` 60s and this scene's
    /// checkpoint directory.
    pub fn agent_args(&self, extra: &[&str]) -> Vec<String> {
        let path = |p: &Path| p.display().to_string();
        let mut args: Vec<String> = [
            "--pods",
            &path(&self.manifests.path),
            "--kubepods-cgroup",
            &self.kubepods.rel,
            "--allocatable-memory",
            Self::ALLOCATABLE,
            "--config",
            &path(&self.config),
            "--output",
            "json",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if !extra.contains(&"--checkpoint-dir") {
            args.extend(["--checkpoint-dir".into(), path(&self.checkpoint.path)]);
        }
        for (flag, default) in [("--source", "auto"), ("--poll-interval", "200ms")] {
            if !extra.contains(&flag) {
                args.extend([flag.to_string(), default.to_string()]);
            }
        }
        if !extra.contains(&"--metrics-addr") {
            args.push("--no-metrics".into());
        }
        if !extra.contains(&"--duration") {
            args.extend(["--duration".into(), "60s".into()]);
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    }

    /// Starts the agent on this scene and waits until it runs: its manifest watch is set up,
    /// its kernel programs attached, and it has logged its configuration.
    pub fn start_agent(&self, extra: &[&str]) -> MonitorProcess {
        self.start_agent_with(extra, |_| {})
    }

    /// [`Self::start_agent`] with the command configured first (see
    /// [`MonitorProcess::start_with`]).
    pub fn start_agent_with(
        &self,
        extra: &[&str],
        configure: impl FnOnce(&mut Command),
    ) -> MonitorProcess {
        Self::until_ready(MonitorProcess::start_with(
            self.agent_args(extra),
            configure,
        ))
    }

    /// As [`Self::start_agent`], with the agent inside the cgroup `dir`.
    pub fn start_agent_in(&self, extra: &[&str], dir: &Path) -> MonitorProcess {
        Self::until_ready(MonitorProcess::start_in(self.agent_args(extra), dir))
    }

    /// Starts the agent with `--kube` on this scene, its pods served by the (mock) API server
    /// of `kubeconfig` for `node`, and waits until it knows them.
    pub fn start_kube_agent(
        &self,
        kubeconfig: &Path,
        node: &str,
        extra: &[&str],
    ) -> MonitorProcess {
        let mut args = self.agent_args(extra);
        // --kube replaces the scene's manifests directory.
        let at = args.iter().position(|a| a == "--pods").expect("--pods");
        args.drain(at..at + 2);
        args.extend(
            ["--kube", "--node-name", node, "--kubeconfig"]
                .map(String::from)
                .into_iter()
                .chain([kubeconfig.display().to_string()]),
        );
        let agent = MonitorProcess::start(args);
        let ready = agent.wait_stderr(Duration::from_secs(20), |l| {
            l.contains("pods: ") && l.contains(" known") || l.contains("monitor: ")
        });
        assert!(
            ready.as_deref().is_some_and(|l| l.contains(" known")),
            "the agent did not start: {}",
            agent.stderr()
        );
        agent
    }

    fn until_ready(agent: MonitorProcess) -> MonitorProcess {
        let ready = agent.wait_stderr(Duration::from_secs(30), |l| {
            l.contains(" source ") && l.contains(" thresholds ") || l.contains("Error")
        });
        assert!(
            ready.as_deref().is_some_and(|l| l.contains(" thresholds ")),
            "the agent did not start: {}",
            agent.stderr()
        );
        agent
    }
}

/// Runs `f` on a thread of its own inside a new network namespace whose loopback interface
/// is up, so a test can serve and connect on 127.0.0.1 wherever it runs (the test VM brings
/// no interface up) without touching the machine's own network. Processes started by `f`
/// share the namespace, which goes away with the last of them.
pub fn in_own_network_namespace<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                // SAFETY: changes the network namespace of this thread only.
                let unshared = unsafe { libc::unshare(libc::CLONE_NEWNET) };
                assert_eq!(
                    unshared,
                    0,
                    "unshare(CLONE_NEWNET): {}",
                    std::io::Error::last_os_error()
                );
                loopback_up();
                f()
            })
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// Sets the `lo` interface of the current network namespace up.
fn loopback_up() {
    // SAFETY: a plain datagram socket used only for the interface ioctls below, closed at
    // the end; `ifreq` is plain data, zeroed before use and only read after the kernel
    // filled it.
    unsafe {
        let socket = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        assert!(socket >= 0, "socket: {}", std::io::Error::last_os_error());
        let mut request: libc::ifreq = std::mem::zeroed();
        for (to, from) in request.ifr_name.iter_mut().zip(b"lo\0") {
            *to = *from as libc::c_char;
        }
        let got = libc::ioctl(socket, libc::SIOCGIFFLAGS, &mut request);
        let error = std::io::Error::last_os_error();
        assert_eq!(got, 0, "SIOCGIFFLAGS lo: {error}");
        request.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        let set = libc::ioctl(socket, libc::SIOCSIFFLAGS, &request);
        let error = std::io::Error::last_os_error();
        libc::close(socket);
        assert_eq!(set, 0, "SIOCSIFFLAGS lo: {error}");
    }
}
