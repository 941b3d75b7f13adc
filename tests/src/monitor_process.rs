//! The agent running as a subprocess, its output read line by line as it comes.
use std::{
    path::Path,
    process::{Command, ExitStatus},
    time::Duration,
};

use test_harness::watched_process::{Line, WatchedProcess};

use crate::monitor_bin;

/// The `monitor` binary running as a subprocess, its output read as it comes (see
/// [`WatchedProcess`]); killed and reaped on drop, its output printed when a test fails.
pub struct MonitorProcess {
    process: WatchedProcess,
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
        let process = WatchedProcess::spawn_in(Self::command(args), dir).expect("starting monitor");
        Self { process }
    }

    /// The command [`Self::start`] runs, for a test to adjust before [`Self::spawn`].
    pub fn command<S: AsRef<std::ffi::OsStr>>(args: impl IntoIterator<Item = S>) -> Command {
        let mut command = Command::new(monitor_bin());
        command.args(args).env("RUST_LOG", "info");
        command
    }

    /// Starts `command` (from [`Self::command`]) with its output read line by line.
    pub fn spawn(command: Command) -> Self {
        let process = WatchedProcess::spawn(command).expect("starting monitor");
        Self { process }
    }

    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// The next stdout line, waiting at most `timeout`; `None` on timeout or end of output.
    pub fn next_line(&self, timeout: Duration) -> Option<String> {
        Some(self.process.next_line(timeout).ok()??.text)
    }

    /// The next stdout line with the CLOCK_MONOTONIC time it was read at, waiting at most
    /// `timeout`; `None` on timeout or end of output.
    pub fn next_timed_line(&self, timeout: Duration) -> Option<Line> {
        self.process.next_line(timeout).ok()?
    }

    /// The next decision the agent prints (a JSON line), waiting at most `within`.
    pub fn next_decision(&self, within: Duration) -> serde_json::Value {
        let line = self
            .next_line(within)
            .unwrap_or_else(|| panic!("no decision within {within:?}; stderr:\n{}", self.stderr()));
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("decision {line:?} is not JSON: {e}"))
    }

    /// The first stderr line so far or within `timeout` that `matches`; `None` on timeout or
    /// once the agent exited without one.
    pub fn wait_stderr(&self, timeout: Duration, matches: impl Fn(&str) -> bool) -> Option<String> {
        self.process.wait_stderr(timeout, matches)
    }

    /// Everything written on stderr so far.
    pub fn stderr(&self) -> String {
        self.process.stderr()
    }

    /// Every stdout line so far (including those already taken by [`Self::next_line`]).
    pub fn stdout_lines(&self) -> Vec<String> {
        self.process.stdout_lines()
    }

    /// Asks the agent to stop, as a service manager would.
    pub fn terminate(&self) {
        self.process.signal(libc::SIGTERM);
    }

    /// Sends SIGINT, as Ctrl-C in a terminal does.
    pub fn interrupt(&self) {
        self.process.signal(libc::SIGINT);
    }

    /// Sends SIGHUP: the agent reads its configuration again and lists its pods anew.
    pub fn hangup(&self) {
        self.process.signal(libc::SIGHUP);
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

    /// Panics, `context` first, with how the agent ended (its exit status or the signal that
    /// killed it) and its whole stderr, unless it is still running.
    pub fn assert_running(&mut self, context: &str) {
        if let Some(status) = self.wait(Duration::ZERO) {
            panic!(
                "{context}: the agent is not running: {status}; stderr:\n{}",
                self.stderr()
            );
        }
    }

    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        self.process.running()
    }

    /// Waits for the process to exit; `None` if it is still running after `timeout`.
    pub fn wait(&mut self, timeout: Duration) -> Option<ExitStatus> {
        self.process.wait(timeout)
    }
}

impl Drop for MonitorProcess {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- monitor stdout ---\n{}", self.stdout_lines().join("\n"));
            eprintln!("--- monitor stderr ---\n{}", self.stderr());
        }
    }
}
