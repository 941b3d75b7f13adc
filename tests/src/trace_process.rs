//! `monitor trace` running as a subprocess while a test makes the kernel events it traces.
use std::{process::ExitStatus, time::Duration};

use test_harness::watched_process::WatchedProcess;

use crate::monitor_bin;

/// Starts `monitor trace` with `args` and returns once its kernel programs are attached, so
/// what the test does next is traced; [`Trace::finish`] hands back its exit status, stdout
/// and stderr.
pub struct Trace {
    process: WatchedProcess,
}

/// How long a trace given a `--duration` may take to end by itself.
const FINISH_WITHIN: Duration = Duration::from_secs(300);

impl Trace {
    pub fn start(args: &[&str]) -> Self {
        let mut command = std::process::Command::new(monitor_bin());
        command.arg("trace").args(args);
        let process = WatchedProcess::spawn(command).expect("starting monitor trace");
        // Slow machines (the emulated VM) take seconds to load the programs.
        if process
            .wait_stderr(Duration::from_secs(60), |l| l.contains("tracing with"))
            .is_none()
        {
            panic!("monitor trace did not start: {}", process.stderr());
        }
        Self { process }
    }

    /// Ends the trace as an operator's Ctrl-C does, once the `settle` the kernel's last
    /// records need to reach it has passed; its exit status, stdout and stderr. Fails when the
    /// trace is still running 30 s after the signal: Ctrl-C must end it, whatever it is doing.
    pub fn interrupt(mut self, settle: Duration) -> (ExitStatus, String, String) {
        std::thread::sleep(settle);
        self.process.signal(libc::SIGINT);
        let Some(status) = self.process.wait(Duration::from_secs(30)) else {
            panic!(
                "monitor trace still ran 30 s after SIGINT: {}",
                self.process.stderr()
            );
        };
        self.output(status)
    }

    /// Waits for the trace to end; its exit status, stdout and stderr.
    pub fn finish(mut self) -> (ExitStatus, String, String) {
        let Some(status) = self.process.wait(FINISH_WITHIN) else {
            panic!(
                "monitor trace still ran after {FINISH_WITHIN:?}: {}",
                self.process.stderr()
            );
        };
        self.output(status)
    }

    fn output(&self, status: ExitStatus) -> (ExitStatus, String, String) {
        let text = |lines: Vec<String>| lines.iter().map(|l| format!("{l}\n")).collect();
        let stderr = self.process.stderr();
        let stderr = text(stderr.lines().map(str::to_string).collect());
        (status, text(self.process.stdout_lines()), stderr)
    }
}
