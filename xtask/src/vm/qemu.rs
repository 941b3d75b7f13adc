//! Booting the VM under qemu (TCG: KVM guests hang on some hosts) and judging its console.
use std::{
    io::{BufRead as _, BufReader},
    path::Path,
    process::{Child, Command, Stdio},
    sync::mpsc::{self, Receiver, RecvTimeoutError},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

use super::init::{Verdict, is_kernel_panic, verdict};
use crate::arch::Arch;

/// How long qemu gets to power off after printing the result.
const POWEROFF_GRACE: Duration = Duration::from_secs(30);

/// Lines of failed tests' panics repeated in the error, which is what CI prints last: the
/// console above it may be cut.
const EXCERPT_LINES: usize = 40;

/// How a run ended.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Reported(Verdict),
    Panic(String),
    Timeout,
    /// qemu closed the console without a result line.
    Exited,
}

/// Boots `kernel` (built for `arch`) with `initrd` and `memory_mib` of RAM, hands each console
/// line to `echo` and fails unless the VM reports that everything passed.
pub(super) fn boot(
    arch: Arch,
    kernel: &Path,
    initrd: &Path,
    memory_mib: u32,
    nonce: &str,
    timeout: Duration,
    mut echo: impl FnMut(&str),
) -> anyhow::Result<()> {
    // Below the host's tests in priority: they run beside the VMs in `cargo xtask test`, and
    // their agents' timings are what they check, while a guest only waits longer.
    let mut cmd = Command::new("nice");
    cmd.args(["-n", "10"])
        .args(machine(arch))
        .args(["-accel", "tcg", "-nographic", "-no-reboot"])
        .args(["-m", &memory_mib.to_string()])
        .arg("-kernel")
        .arg(kernel)
        .arg("-initrd")
        .arg(initrd)
        // panic=-1 reboots at once on a panic, which -no-reboot turns into qemu exiting.
        .args(["-append", &command_line(arch)])
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    let mut qemu = cmd.spawn().with_context(|| format!("starting {cmd:?}"))?;
    let console = qemu.stdout.take().context("qemu stdout")?;
    let (lines, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(console).split(b'\n').map_while(Result::ok) {
            let line = printable(&String::from_utf8_lossy(&line));
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let mut excerpt = FailureExcerpt::default();
    let outcome = watch(&rx, nonce, Instant::now() + timeout, |line| {
        excerpt.see(line);
        echo(line);
    });
    if matches!(outcome, Outcome::Reported(_)) {
        wait_or_kill(&mut qemu, POWEROFF_GRACE);
    } else {
        let _ = qemu.kill();
        let _ = qemu.wait();
    }
    match outcome {
        Outcome::Reported(Verdict::Pass) => Ok(()),
        Outcome::Reported(Verdict::Fail(what)) => {
            bail!("failed in the VM: {what}{}", excerpt.text())
        }
        Outcome::Panic(line) => bail!("the VM's kernel panicked: {line}"),
        Outcome::Timeout => bail!("the VM gave no result within {} s", timeout.as_secs()),
        Outcome::Exited => bail!("qemu exited without a result"),
    }
}

/// The panics of failed tests (`---- name stdout ----`, the `panicked at` line and the message
/// after it) as the console showed them, at most [`EXCERPT_LINES`].
#[derive(Default)]
struct FailureExcerpt {
    lines: Vec<String>,
    /// Lines still to keep after a `panicked at`: its message.
    message_left: usize,
}

impl FailureExcerpt {
    fn see(&mut self, line: &str) {
        if line.starts_with("stack backtrace:") {
            self.message_left = 0;
        }
        let keep = if line.contains("panicked at") {
            self.message_left = 3;
            true
        } else if line.starts_with("---- ") && line.ends_with(" ----") {
            true
        } else if self.message_left > 0 {
            self.message_left -= 1;
            true
        } else {
            false
        };
        if keep && self.lines.len() < EXCERPT_LINES {
            self.lines.push(line.to_owned());
        }
    }

    fn text(&self) -> String {
        self.lines
            .iter()
            .map(|line| format!("\n  {line}"))
            .collect()
    }
}

/// The emulator and its machine: a PC, or arm's `virt` board.
fn machine(arch: Arch) -> [&'static str; 5] {
    match arch {
        Arch::X86_64 => ["qemu-system-x86_64", "-M", "pc", "-cpu", "max"],
        // The implementation-defined pointer authentication: the architected one (QARMA) is
        // several times slower to emulate.
        Arch::Aarch64 => [
            "qemu-system-aarch64",
            "-M",
            "virt",
            "-cpu",
            "max,pauth-impdef=on",
        ],
    }
}

/// The kernel's command line: the console on the board's serial port.
fn command_line(arch: Arch) -> String {
    match arch {
        // no_timer_check: on a busy host the emulated CPU is too slow for the boot's check
        // of the IO-APIC timer, which then panics ("IO-APIC + timer doesn't work!").
        Arch::X86_64 => "console=ttyS0 panic=-1 loglevel=4 no_timer_check".into(),
        Arch::Aarch64 => "console=ttyAMA0 panic=-1 loglevel=4".into(),
    }
}

/// Echoes console lines until one decides the run.
fn watch(
    rx: &Receiver<String>,
    nonce: &str,
    deadline: Instant,
    mut echo: impl FnMut(&str),
) -> Outcome {
    loop {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) => {
                echo(&line);
                if let Some(verdict) = verdict(&line, nonce) {
                    return Outcome::Reported(verdict);
                }
                if is_kernel_panic(&line) {
                    return Outcome::Panic(line);
                }
            }
            Err(RecvTimeoutError::Timeout) => return Outcome::Timeout,
            Err(RecvTimeoutError::Disconnected) => return Outcome::Exited,
        }
    }
}

/// A console line without terminal control: the firmware resets and clears the screen, which
/// would wipe the terminal that runs the test.
fn printable(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            // CSI: ESC [ parameters, then one final byte in @..~; other escapes are two chars.
            '\x1b' => {
                if chars.next() == Some('[') {
                    chars.by_ref().find(|c| ('@'..='~').contains(c));
                }
            }
            '\t' => out.push(c),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

fn wait_or_kill(qemu: &mut Child, grace: Duration) {
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = qemu.try_wait() {
            return;
        }
        thread::sleep(Duration::from_millis(100));
    }
    eprintln!("vm-test: qemu did not power off; killing it");
    let _ = qemu.kill();
    let _ = qemu.wait();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(lines: &[&str], keep_open: bool) -> (Outcome, Vec<String>) {
        let (tx, rx) = mpsc::channel();
        for line in lines {
            tx.send(line.to_string()).unwrap();
        }
        let _open = keep_open.then_some(tx);
        let mut echoed = Vec::new();
        let deadline = Instant::now() + Duration::from_millis(50);
        let outcome = watch(&rx, "n0nce", deadline, |l| echoed.push(l.to_string()));
        (outcome, echoed)
    }

    #[test]
    fn a_failed_test_s_panic_is_kept_for_the_error() {
        let mut excerpt = FailureExcerpt::default();
        for line in [
            "test a ... ok",
            "agent: log line",
            "---- evicts_the_hog stdout ----",
            "agent: more log",
            "thread 'evicts_the_hog' panicked at tests/x.rs:1:2:",
            "the hog was not evicted",
            "left: 1",
            "stack backtrace:",
            "   0: __rustc::rust_begin_unwind",
        ] {
            excerpt.see(line);
        }
        assert_eq!(
            excerpt.text(),
            "\n  ---- evicts_the_hog stdout ----\n  thread 'evicts_the_hog' panicked at \
             tests/x.rs:1:2:\n  the hog was not evicted\n  left: 1"
        );
        for _ in 0..100 {
            excerpt.see("---- many ----");
        }
        assert_eq!(excerpt.lines.len(), EXCERPT_LINES);
    }

    #[test]
    fn terminal_control_is_dropped() {
        let firmware = "\x1bc\x1b[?7l\x1b[2J\x1b[0mSeaBIOS (version 1.16)\r";
        assert_eq!(printable(firmware), "SeaBIOS (version 1.16)");
        assert_eq!(printable("a\tb"), "a\tb");
    }

    #[test]
    fn result_line_decides_and_everything_before_is_echoed() {
        let (outcome, echoed) = run(&["booting", "VM-TEST-RESULT n0nce pass", "after"], false);
        assert_eq!(outcome, Outcome::Reported(Verdict::Pass));
        assert_eq!(echoed, ["booting", "VM-TEST-RESULT n0nce pass"]);
    }

    #[test]
    fn panic_fails_before_any_result() {
        let panic = "Kernel panic - not syncing: Attempted to kill init!";
        assert_eq!(run(&[panic], true).0, Outcome::Panic(panic.into()));
    }

    #[test]
    fn silence_times_out_and_a_closed_console_is_an_exit() {
        assert_eq!(run(&["booting"], true).0, Outcome::Timeout);
        assert_eq!(
            run(&["VM-TEST-RESULT other pass"], false).0,
            Outcome::Exited
        );
    }
}
