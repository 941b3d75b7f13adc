//! The node's PID headroom as the tests and benches compare it with the agent's.
use std::fs;

/// `pid.available` as the kubelet computes it: the lower of `pid_max` and `threads-max`,
/// less the tasks in /proc/loadavg.
pub fn pid_available_now() -> i64 {
    let number = |path: &str| -> i64 {
        fs::read_to_string(path)
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or_else(|| panic!("reading {path}"))
    };
    let max = number("/proc/sys/kernel/pid_max").min(number("/proc/sys/kernel/threads-max"));
    let loadavg = fs::read_to_string("/proc/loadavg").expect("reading /proc/loadavg");
    let tasks: i64 = loadavg
        .split_whitespace()
        .nth(3)
        .and_then(|f| f.split('/').nth(1))
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no task count in {loadavg:?}"));
    max - tasks
}
