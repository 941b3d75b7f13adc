//! Support for the end-to-end tests: root checks, test-owned cgroups that are removed even when
//! a test fails, and processes that allocate real memory inside them.
use std::{
    fs,
    io::{BufRead as _, BufReader, Write as _},
    os::unix::{fs::MetadataExt as _, process::CommandExt as _},
    path::{Path, PathBuf},
    process::{Child, ChildStdin, ChildStdout, Command, Stdio},
    time::{Duration, Instant},
};

use monitor::cgroupfs::{CgroupVersion, MemoryHierarchy};

/// True when the test may run. Outside CI a test that needs root is skipped with a visible
/// message; in CI (which runs as root) not being root fails the test.
pub fn running_as_root(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    assert!(std::env::var_os("CI").is_none(), "{test} needs root, and CI runs as root");
    eprintln!("SKIP: {test} needs root");
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
            remove_tree(&dir);
        }
        fs::create_dir(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        if hierarchy.version == CgroupVersion::V2 {
            // Children need the memory controller enabled in their parent.
            let _ = fs::write(dir.join("cgroup.subtree_control"), "+memory");
        }
        Self { hierarchy, rel, dir }
    }

    /// Creates a child cgroup (`a/b` allowed) and returns its directory.
    pub fn child(&self, name: &str) -> PathBuf {
        let dir = self.dir.join(name);
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        dir
    }

    /// Relative path of a child, as kernel events name it.
    pub fn child_rel(&self, name: &str) -> String {
        format!("{}/{name}", self.rel)
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        remove_tree(&self.dir);
    }
}

/// The cgroup id of a cgroup directory: its inode number.
pub fn cgroup_id(dir: &Path) -> u64 {
    fs::metadata(dir).expect("cgroup directory").ino()
}

/// Kills every process in the subtree and removes its cgroups, deepest first.
fn remove_tree(dir: &Path) {
    let mut dirs = Vec::new();
    collect_dirs(dir, &mut dirs);
    for d in &dirs {
        for pid in pids_in(d) {
            // SAFETY: signalling a process of a test-owned cgroup.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
    dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    let deadline = Instant::now() + Duration::from_secs(10);
    for d in dirs {
        while fs::remove_dir(&d).is_err() && d.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn collect_dirs(dir: &Path, out: &mut Vec<PathBuf>) {
    if !dir.is_dir() {
        return;
    }
    out.push(dir.to_path_buf());
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            collect_dirs(&entry.path(), out);
        }
    }
}

fn pids_in(dir: &Path) -> Vec<i32> {
    fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
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
    assert!(path.exists(), "{} not built; run the tests through cargo", path.display());
    path
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
        let procs = cgroup_dir.join("cgroup.procs");
        let mut cmd = Command::new(binary("alloc", "MONITOR_ALLOC_BIN"));
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
        // SAFETY: only async-signal-safe work (open/write via std's thin wrappers) before exec.
        unsafe {
            cmd.pre_exec(move || fs::write(&procs, "0"));
        }
        let mut child = cmd.spawn().expect("starting the alloc helper");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        Self { child, stdin, stdout }
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
        assert_eq!(self.command(&format!("alloc {mib}")), format!("allocated {mib}"));
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
        let procs = cgroup_dir.join("cgroup.procs");
        let mut cmd = Command::new(binary("ignore_term", "MONITOR_IGNORE_TERM_BIN"));
        cmd.stdout(Stdio::piped());
        // SAFETY: only async-signal-safe work (open/write via std's thin wrappers) before exec.
        unsafe {
            cmd.pre_exec(move || fs::write(&procs, "0"));
        }
        let mut child = cmd.spawn().expect("starting the ignore_term helper");
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

/// Pids listed in a cgroup's `cgroup.procs` (empty when the cgroup is gone).
pub fn cgroup_pids(cgroup_dir: &Path) -> Vec<i32> {
    pids_in(cgroup_dir)
}
