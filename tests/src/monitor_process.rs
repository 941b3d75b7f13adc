//! The agent running as a subprocess, its output read line by line as it comes.
use std::{
    io::{self, BufRead as _, BufReader},
    path::Path,
    process::{Child, Command, ExitStatus, Stdio},
    sync::{Arc, Condvar, Mutex, mpsc},
    time::{Duration, Instant},
};

use crate::{cgroup_tree, monitor_bin};

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

    /// Sends SIGINT, as Ctrl-C in a terminal does.
    pub fn interrupt(&self) {
        // SAFETY: signalling the child this value owns, which is not reaped before drop.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
    }

    /// Sends SIGHUP: the agent reads its configuration again and lists its pods anew.
    pub fn hangup(&self) {
        // SAFETY: signalling the child this value owns, which is not reaped before drop.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGHUP) };
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
