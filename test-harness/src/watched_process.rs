//! A child process (the agent, `monitor trace`) whose stdout and stderr are read line by line
//! as they come, by two threads, so it never blocks on a full pipe and a test or bench can
//! wait for a line with a deadline. Killed and reaped on drop.
use std::{
    io::{self, BufRead as _, BufReader, Read},
    path::Path,
    process::{Child, Command, ExitStatus, Stdio},
    sync::{Arc, Condvar, Mutex, mpsc},
    time::{Duration, Instant},
};

use crate::cgroup_tree;

/// A stdout line and the reader's CLOCK_MONOTONIC when it arrived (the benches compare it
/// with the agent's own timestamps).
#[derive(Clone, Debug)]
pub struct Line {
    pub text: String,
    pub read_ns: u64,
}

/// The stdout channel ended: the process closed its output or exited.
#[derive(Debug)]
pub struct OutputClosed;

/// Lines of one stream so far, shared with the thread reading them.
#[derive(Default)]
struct Lines {
    state: Mutex<LinesState>,
    added: Condvar,
}

#[derive(Default)]
struct LinesState {
    lines: Vec<String>,
    /// The stream reached its end: no line will be added.
    ended: bool,
}

impl Lines {
    fn push(&self, line: String) {
        self.state.lock().unwrap().lines.push(line);
        self.added.notify_all();
    }

    fn end(&self) {
        self.state.lock().unwrap().ended = true;
        self.added.notify_all();
    }

    /// Waits until the stream ended, at most until `deadline`.
    fn wait_end(&self, deadline: Instant) {
        let mut state = self.state.lock().unwrap();
        while !state.ended {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                return;
            };
            state = self.added.wait_timeout(state, left).unwrap().0;
        }
    }
}

/// How long the last lines may take to arrive once the process exited: a grandchild that
/// inherited its stdout could hold the pipe open for as long as it lives.
const LAST_LINES_WITHIN: Duration = Duration::from_secs(5);

/// A running child process with its output read as it comes.
pub struct WatchedProcess {
    child: Child,
    stdout: mpsc::Receiver<Line>,
    stdout_seen: Arc<Lines>,
    stderr: Arc<Lines>,
}

impl WatchedProcess {
    /// Starts `command` with stdin closed and stdout and stderr read line by line.
    pub fn spawn(mut command: Command) -> io::Result<Self> {
        Ok(Self::read_output(piped(&mut command).spawn()?))
    }

    /// As [`Self::spawn`], the process inside the cgroup `dir` from its first instruction,
    /// so the kernel charges it there.
    pub fn spawn_in(mut command: Command, dir: &Path) -> io::Result<Self> {
        Ok(Self::read_output(cgroup_tree::spawn_in(
            piped(&mut command),
            dir,
        )?))
    }

    fn read_output(mut child: Child) -> Self {
        let (tx, stdout) = mpsc::channel();
        let stdout_seen = Arc::new(Lines::default());
        let seen = stdout_seen.clone();
        let out = child.stdout.take().expect("piped stdout");
        std::thread::spawn(move || {
            read_lines(out, |text| {
                seen.push(text.clone());
                // The receiver may be gone (the owner dropped); keep reading so the child
                // never blocks on a full pipe.
                let _ = tx.send(Line {
                    text,
                    read_ns: monotonic_ns(),
                });
            });
            seen.end();
        });
        let stderr = Arc::new(Lines::default());
        let lines = stderr.clone();
        let err = child.stderr.take().expect("piped stderr");
        std::thread::spawn(move || {
            read_lines(err, |line| lines.push(line));
            lines.end();
        });
        Self {
            child,
            stdout,
            stdout_seen,
            stderr,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The next stdout line, waiting at most `timeout`: `Ok(None)` on timeout,
    /// [`OutputClosed`] once stdout ended and every line was taken.
    pub fn next_line(&self, timeout: Duration) -> Result<Option<Line>, OutputClosed> {
        match self.stdout.recv_timeout(timeout) {
            Ok(line) => Ok(Some(line)),
            Err(mpsc::RecvTimeoutError::Timeout) => Ok(None),
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(OutputClosed),
        }
    }

    /// The stdout lines that arrived and were not taken yet, without waiting.
    pub fn take_lines(&self) -> Vec<Line> {
        self.stdout.try_iter().collect()
    }

    /// The first stderr line so far or within `timeout` that `matches`; `None` on timeout or
    /// when stderr ended (the process exited) without one.
    pub fn wait_stderr(&self, timeout: Duration, matches: impl Fn(&str) -> bool) -> Option<String> {
        let deadline = Instant::now() + timeout;
        let mut state = self.stderr.state.lock().unwrap();
        loop {
            if let Some(line) = state.lines.iter().find(|l| matches(l)) {
                return Some(line.clone());
            }
            if state.ended {
                return None;
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            state = self.stderr.added.wait_timeout(state, left).unwrap().0;
        }
    }

    /// Everything written on stderr so far, one line each.
    pub fn stderr(&self) -> String {
        self.stderr.state.lock().unwrap().lines.join("\n")
    }

    /// Every stdout line so far (including those already taken by [`Self::next_line`]).
    pub fn stdout_lines(&self) -> Vec<String> {
        self.stdout_seen.state.lock().unwrap().lines.clone()
    }

    /// Sends `signal` to the process.
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on the pid of a child this value owns and reaps only on drop or
        // after its exit was seen, so the pid cannot have been reused.
        unsafe { libc::kill(self.child.id() as i32, signal) };
    }

    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        self.child
            .try_wait()
            .expect("checking on a child process")
            .is_none()
    }

    /// Waits for the process to exit; `None` if it is still running after `timeout`. Once it
    /// exited, every line it wrote has been read (unless a grandchild holds its output open
    /// for more than [`LAST_LINES_WITHIN`]).
    pub fn wait(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("waiting for a child process") {
                let last = Instant::now() + LAST_LINES_WITHIN;
                self.stdout_seen.wait_end(last);
                self.stderr.wait_end(last);
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, as a service manager stops a service; SIGKILL when it is still running after
    /// `grace`. The exit status, `None` when it took SIGKILL.
    pub fn stop(&mut self, grace: Duration) -> Option<ExitStatus> {
        if let Ok(Some(status)) = self.child.try_wait() {
            return Some(status);
        }
        self.signal(libc::SIGTERM);
        let status = self.wait(grace);
        if status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        status
    }
}

impl Drop for WatchedProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn piped(command: &mut Command) -> &mut Command {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
}

fn read_lines(stream: impl Read, mut each: impl FnMut(String)) {
    for line in BufReader::new(stream).lines() {
        let Ok(line) = line else { break };
        each(line);
    }
}

/// CLOCK_MONOTONIC in nanoseconds, the clock the agent stamps its records with.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shell(script: &str) -> WatchedProcess {
        let mut command = Command::new("sh");
        command.args(["-c", script]);
        WatchedProcess::spawn(command).expect("sh")
    }

    #[test]
    fn lines_arrive_as_written_and_the_end_is_told_from_a_timeout() {
        let mut p = shell("echo one; echo err >&2; sleep 0.3; echo two");
        let one = p.next_line(Duration::from_secs(5)).unwrap().unwrap();
        assert_eq!(one.text, "one");
        assert!(one.read_ns > 0);
        assert!(p.next_line(Duration::from_millis(50)).unwrap().is_none());
        assert_eq!(
            p.wait_stderr(Duration::from_secs(5), |l| l == "err")
                .as_deref(),
            Some("err")
        );
        let status = p.wait(Duration::from_secs(5)).expect("sh exits");
        assert!(status.success());
        assert_eq!(p.take_lines().len(), 1, "the line written after the wait");
        assert!(p.next_line(Duration::from_secs(1)).is_err());
        assert_eq!(p.stdout_lines(), ["one", "two"]);
    }

    #[test]
    fn waiting_for_a_stderr_line_ends_when_the_process_does() {
        let p = shell("echo started >&2; exit 3");
        let begun = Instant::now();
        assert_eq!(
            p.wait_stderr(Duration::from_secs(60), |l| l == "ready"),
            None
        );
        assert!(
            begun.elapsed() < Duration::from_secs(30),
            "not the whole timeout"
        );
        assert_eq!(p.stderr(), "started");
    }

    #[test]
    fn a_grandchild_holding_the_output_does_not_hold_the_wait() {
        let mut p = shell("sleep 30 & echo parent done");
        let begun = Instant::now();
        assert!(p.wait(Duration::from_secs(20)).expect("sh exits").success());
        assert!(begun.elapsed() < Duration::from_secs(20));
        assert_eq!(p.stdout_lines(), ["parent done"]);
    }

    #[test]
    fn stop_terminates_and_kills_what_ignores_sigterm() {
        let mut polite = shell("exec sleep 30");
        let status = polite
            .stop(Duration::from_secs(10))
            .expect("sh ends at SIGTERM");
        assert!(!status.success());
        let mut stubborn = shell("trap '' TERM; echo armed; while :; do sleep 0.05; done");
        stubborn.next_line(Duration::from_secs(5)).unwrap().unwrap();
        assert!(stubborn.stop(Duration::from_millis(300)).is_none());
        assert!(!stubborn.running());
    }
}
