//! `monitor trace` running as a subprocess while a test makes the kernel events it traces.
use std::{
    io::{BufRead as _, BufReader, Read as _},
    process::{Child, Command, ExitStatus, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use crate::monitor_bin;

/// Starts `monitor trace` with `args` and returns once its kernel programs are attached, so
/// what the test does next is traced. Its stdout stays piped; its stderr is collected and
/// handed back with the exit status by [`Trace::finish`].
pub struct Trace {
    child: Child,
    // Both read as they come, so a trace that prints a lot never blocks on a full pipe.
    stdout: std::thread::JoinHandle<String>,
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
        let mut stdout = child.stdout.take().expect("piped stdout");
        let stdout = std::thread::spawn(move || {
            let mut all = String::new();
            let _ = stdout.read_to_string(&mut all);
            all
        });
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
        Self {
            child,
            stdout,
            stderr,
        }
    }

    /// Ends the trace as an operator's Ctrl-C does, once the `settle` the kernel's last
    /// records need to reach it has passed; its exit status, stdout and stderr. Fails when the
    /// trace is still running 30 s after the signal: Ctrl-C must end it, whatever it is doing.
    pub fn interrupt(mut self, settle: Duration) -> (ExitStatus, String, String) {
        std::thread::sleep(settle);
        // SAFETY: kill(2) on the pid of a child this handle has not reaped yet.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(30);
        while self
            .child
            .try_wait()
            .expect("waiting for monitor trace")
            .is_none()
        {
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "monitor trace still ran 30 s after SIGINT: {}",
                    self.stderr.join().unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.finish()
    }

    /// Waits for the trace to end; its exit status, stdout and stderr.
    pub fn finish(mut self) -> (ExitStatus, String, String) {
        let status = self.child.wait().expect("waiting for monitor trace");
        (
            status,
            self.stdout.join().unwrap_or_default(),
            self.stderr.join().unwrap_or_default(),
        )
    }
}
