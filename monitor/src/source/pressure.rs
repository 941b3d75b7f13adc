//! Memory pressure stall information (PSI): node-wide (/proc/pressure/memory) and per cgroup2
//! cgroup (memory.pressure; kernel 4.20, triggers 5.2).
//!
//! Rather than polling, each file gets a PSI trigger (`some <stall µs> <window µs>`): the
//! kernel signals POLLPRI when tasks stalled on memory for longer than the threshold within
//! the window, at most once per window. The watcher waits for that through tokio's `AsyncFd`
//! and then reads the averages. On hosts with the memory controller on cgroup v1, PSI still
//! lives in the cgroup2 mount, for the v2 cgroup with the same path.
use std::{
    fs::{File, OpenOptions},
    io::{self, Write as _},
    os::unix::fs::OpenOptionsExt as _,
    path::PathBuf,
    time::Duration,
};

use tokio::{
    io::{Interest, unix::AsyncFd},
    sync::mpsc,
};

/// The `some` and `full` lines of a pressure file.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Pressure {
    /// Share of the last 10 s in which at least one task stalled on memory, in percent.
    pub some_avg10: f64,
    /// Share of the last 10 s in which all non-idle tasks stalled at once, in percent.
    pub full_avg10: f64,
    pub some_avg60: f64,
    /// Total stall time of `some`, in microseconds.
    pub some_total_us: u64,
}

/// Why a pressure file could not be parsed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PressureError {
    /// The `some` line is missing or malformed.
    #[error("no `some avg10=.. avg60=.. avg300=.. total=..` line")]
    NoSome,
}

/// Parses the text of a PSI file. `full` is absent on old kernels' node file; it reads as 0.
pub fn parse(text: &str) -> Result<Pressure, PressureError> {
    let line = |kind: &str| {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(kind))
    };
    let value = |line: &str, key: &str| {
        line.split_whitespace()
            .find_map(|field| field.strip_prefix(key)?.strip_prefix('='))
            .map(str::to_string)
    };
    let some = line("some").ok_or(PressureError::NoSome)?;
    let float = |l: &str, key| value(l, key).and_then(|v| v.parse::<f64>().ok());
    Ok(Pressure {
        some_avg10: float(some, "avg10").ok_or(PressureError::NoSome)?,
        some_avg60: float(some, "avg60").ok_or(PressureError::NoSome)?,
        some_total_us: value(some, "total")
            .and_then(|v| v.parse().ok())
            .ok_or(PressureError::NoSome)?,
        full_avg10: line("full").and_then(|l| float(l, "avg10")).unwrap_or(0.0),
    })
}

/// The trigger window: the kernel signals at most once per window. Kernels since 6.5 accept
/// triggers without CAP_SYS_RESOURCE (as in containers) only with windows in multiples of 2 s.
pub const WINDOW: Duration = Duration::from_secs(2);

/// The trigger line for a stall threshold within a window. The kernel accepts windows from
/// 500 ms to 10 s and thresholds up to the window.
pub fn trigger(stall: Duration, window: Duration) -> String {
    let window_us = window.as_micros().clamp(500_000, 10_000_000);
    format!(
        "some {} {}\0",
        stall.as_micros().clamp(1, window_us),
        window_us
    )
}

/// A pressure signal: which file, and its values when it fired.
#[derive(Clone, Debug, PartialEq)]
pub struct PressureSignal {
    /// `None` for the node, else the cgroup path below the hierarchy root.
    pub cgroup: Option<String>,
    pub pressure: Pressure,
}

/// Installs a trigger on `file` and sends a signal through `tx` each time it fires, until the
/// receiver is gone. Must be called inside a tokio runtime.
pub fn watch(
    file: PathBuf,
    cgroup: Option<String>,
    trigger: &str,
    tx: mpsc::UnboundedSender<PressureSignal>,
) -> io::Result<()> {
    let mut fd: File = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&file)?;
    fd.write_all(trigger.as_bytes())?;
    // SAFETY: the AsyncFd owns the file, which keeps the descriptor open while registered.
    let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::PRIORITY) }
        .map_err(io::Error::from)?;
    tokio::spawn(async move {
        loop {
            let Ok(mut guard) = fd.ready(Interest::PRIORITY).await else {
                return;
            };
            guard.clear_ready();
            // The trigger fd only signals; the averages are read afresh.
            let Ok(pressure) = std::fs::read_to_string(&file)
                .map_err(|_| ())
                .and_then(|t| parse(&t).map_err(|_| ()))
            else {
                return;
            };
            if tx
                .send(PressureSignal {
                    cgroup: cgroup.clone(),
                    pressure,
                })
                .is_err()
            {
                return;
            }
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pressure_files_by_case() {
        let cases: [(&str, &str, Result<Pressure, PressureError>); 4] = [
            (
                "cgroup file",
                "some avg10=12.50 avg60=3.00 avg300=0.50 total=123456\nfull avg10=4.25 avg60=1.00 avg300=0.10 total=999\n",
                Ok(Pressure {
                    some_avg10: 12.5,
                    full_avg10: 4.25,
                    some_avg60: 3.0,
                    some_total_us: 123456,
                }),
            ),
            (
                "old node file without full",
                "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
                Ok(Pressure::default()),
            ),
            ("empty", "", Err(PressureError::NoSome)),
            (
                "garbled",
                "some avg10=x avg60=0 avg300=0 total=1\n",
                Err(PressureError::NoSome),
            ),
        ];
        for (name, text, expected) in cases {
            assert_eq!(parse(text), expected, "{name}");
        }
    }

    #[test]
    fn triggers_stay_within_the_kernel_limits() {
        let cases = [
            (
                "default",
                Duration::from_millis(150),
                Duration::from_secs(1),
                "some 150000 1000000\0",
            ),
            (
                "window too short",
                Duration::from_millis(100),
                Duration::from_millis(100),
                "some 100000 500000\0",
            ),
            (
                "threshold above window",
                Duration::from_secs(3),
                Duration::from_secs(2),
                "some 2000000 2000000\0",
            ),
        ];
        for (name, stall, window, expected) in cases {
            assert_eq!(trigger(stall, window), expected, "{name}");
        }
    }
}
