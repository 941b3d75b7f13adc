//! The helper processes a test starts inside its cgroups (`alloc`, `ignore_term`), killed and
//! reaped on drop, and a check whether a process still lives.
use std::{
    fs,
    io::{BufRead as _, BufReader, Write as _},
    path::Path,
    process::{Child, ChildStdin, ChildStdout, Command, Stdio},
};

use crate::{binary, cgroup_tree};

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
        Self::talk_to(
            cgroup_tree::spawn_in(&mut cmd, cgroup_dir).expect("starting the alloc helper"),
        )
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
        let child = cmd.spawn().expect("starting the alloc helper");
        let procs = cgroup_dir.join("cgroup.procs");
        fs::write(&procs, child.id().to_string())
            .unwrap_or_else(|e| panic!("moving the helper into {}: {e}", procs.display()));
        Self::talk_to(child)
    }

    /// The helper `child`, started with piped stdin and stdout.
    fn talk_to(mut child: Child) -> Self {
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

    /// Allocates and touches `mib` MiB of shared anonymous memory, which only the process's
    /// exit frees (not `process_mrelease`).
    pub fn alloc_shared(&mut self, mib: usize) {
        assert_eq!(
            self.command(&format!("shared {mib}")),
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

    /// Reads `path` through the page cache once; twice marks its pages active, which the
    /// kubelet's working set counts.
    pub fn read_file(&mut self, path: &Path) {
        assert_eq!(self.command(&format!("read {}", path.display())), "read");
    }

    /// From now on the helper reads `path` again and again: its cache is in use.
    pub fn keep_reading(&mut self, path: &Path) {
        assert_eq!(self.command(&format!("hot {}", path.display())), "hot");
    }

    /// From now on the helper handles SIGTERM and exits `ms` milliseconds after it, going on
    /// with what it was doing meanwhile (a server draining its requests).
    pub fn drain_after_term(&mut self, ms: u64) {
        assert_eq!(
            self.command(&format!("drain {ms}")),
            format!("draining {ms}")
        );
    }

    /// As [`Self::drain_after_term`], and each SIGTERM received is logged as a line of `log`
    /// (see [`sigterms_logged`]).
    pub fn drain_after_term_logging(&mut self, ms: u64, log: &Path) {
        assert_eq!(
            self.command(&format!("drain {ms} {}", log.display())),
            format!("draining {ms}")
        );
    }

    /// Waits for the helper to end (it must have been told to, or be killed).
    pub fn wait(&mut self) -> std::process::ExitStatus {
        self.child.wait().expect("waiting for the alloc helper")
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

/// How many SIGTERMs a helper told [`Allocator::drain_after_term_logging`] received so far.
pub fn sigterms_logged(log: &Path) -> usize {
    fs::read_to_string(log).map_or(0, |text| text.lines().count())
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
