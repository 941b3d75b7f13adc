//! `monitor trace` running as a subprocess while a test makes the kernel events it traces.
use std::{
    io::{BufRead as _, BufReader},
    process::{Child, Command, ExitStatus, Stdio},
    sync::mpsc,
    time::Duration,
};

use crate::monitor_bin;

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
