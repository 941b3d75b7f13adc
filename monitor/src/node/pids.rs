//! `pid.available` as the kubelet computes it (`pkg/kubelet/stats/pidlimit`):
//! * the maximum is the smaller of `kernel.pid_max` and `kernel.threads-max`, both system-wide
//!   task limits; whichever could be read counts;
//! * the count is the number of tasks (threads included) after the `/` in the fourth field of
//!   /proc/loadavg, which the kubelet prefers to sysinfo(2) because that truncates above 65535.
use crate::engine::threshold::SignalObservation;

/// The task limit from the values of /proc/sys/kernel/pid_max and threads-max, when any.
pub(crate) fn max_pids(pid_max: Option<i64>, threads_max: Option<i64>) -> Option<i64> {
    pid_max.into_iter().chain(threads_max).min()
}

/// Parses a /proc/sys single-number file.
pub(crate) fn parse_limit(text: &str) -> Option<i64> {
    text.trim().parse().ok()
}

/// The task count from /proc/loadavg text, e.g. `1.36 3.49 4.53 2/3518 3715089`.
pub(crate) fn parse_loadavg_tasks(loadavg: &str) -> Option<i64> {
    let fields: Vec<&str> = loadavg.split_whitespace().collect();
    if fields.len() < 5 {
        return None;
    }
    let (_running, total) = fields[3].split_once('/')?;
    total.parse().ok()
}

/// `pid.available`: the limit minus the tasks, with the limit as capacity.
pub(crate) fn pid_available(max_pids: i64, tasks: i64) -> SignalObservation {
    SignalObservation {
        available: max_pids.saturating_sub(tasks),
        capacity: max_pids,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_is_the_smaller_readable_limit() {
        let cases = [
            ("pid_max smaller", Some(32768), Some(126_000), Some(32768)),
            (
                "threads-max smaller",
                Some(4_194_304),
                Some(126_000),
                Some(126_000),
            ),
            ("only pid_max", Some(4_194_304), None, Some(4_194_304)),
            ("neither", None, None, None),
        ];
        for (name, pid_max, threads_max, want) in cases {
            assert_eq!(max_pids(pid_max, threads_max), want, "{name}");
        }
        assert_eq!(parse_limit("4194304\n"), Some(4_194_304));
        assert_eq!(parse_limit(""), None);
    }

    #[test]
    fn loadavg_gives_the_total_task_count() {
        let cases = [
            ("usual", "1.36 3.49 4.53 2/3518 3715089\n", Some(3518)),
            (
                "above sysinfo's 16 bits",
                "0.00 0.01 0.05 1/70000 12\n",
                Some(70000),
            ),
            ("too few fields", "1.36 3.49 4.53 2/3518\n", None),
            ("no slash", "1.36 3.49 4.53 3518 3715089\n", None),
        ];
        for (name, text, want) in cases {
            assert_eq!(parse_loadavg_tasks(text), want, "{name}");
        }
    }

    #[test]
    fn available_is_limit_minus_tasks() {
        assert_eq!(
            pid_available(32768, 3518),
            SignalObservation {
                available: 29250,
                capacity: 32768
            }
        );
        assert_eq!(
            pid_available(100, 120).available,
            -20,
            "over the limit goes negative"
        );
    }
}
