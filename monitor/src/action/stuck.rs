//! Processes that outlived force, and why: said in the log and counted by cause, so an
//! operator sees why a victim's memory did not come back.
use std::fmt;

/// A process still in the pod's cgroup after force was repeated for its whole time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StuckProcess {
    pub pid: i32,
    /// Its command (/proc/PID/comm), empty once it is gone.
    pub comm: String,
    pub cause: StuckCause,
}

/// Why force did not end a process. SIGKILL stays pending in each case: the process ends
/// once it leaves that state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StuckCause {
    /// Its freezer (v1 `freezer.state`, v2 `cgroup.freeze`) holds it and was not thawed.
    Frozen {
        /// The frozen cgroup, as /proc/PID/cgroup names it.
        cgroup: String,
        /// Its state (FROZEN, FREEZING), or that it could not be read.
        state: String,
        /// Why it was not thawed.
        why: String,
    },
    /// Asleep in the kernel without taking signals (state D), at `wchan`.
    Uninterruptible { wchan: String },
    /// Anything else, by the state letter of /proc/PID/stat (`?`: unreadable).
    Other { state: char },
}

impl StuckCause {
    /// A short name, for the metric's `cause` label.
    pub fn label(&self) -> &'static str {
        match self {
            StuckCause::Frozen { .. } => "frozen",
            StuckCause::Uninterruptible { .. } => "uninterruptible",
            StuckCause::Other { .. } => "other",
        }
    }
}

impl fmt::Display for StuckProcess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pid {} ({}) ", self.pid, self.comm)?;
        match &self.cause {
            StuckCause::Frozen { cgroup, state, why } => {
                write!(f, "frozen in cgroup {cgroup} ({state}): {why}")
            }
            StuckCause::Uninterruptible { wchan } if wchan.is_empty() || wchan == "0" => {
                f.write_str("in uninterruptible sleep in the kernel (D)")
            }
            StuckCause::Uninterruptible { wchan } => {
                write!(f, "in uninterruptible sleep in the kernel (D, at {wchan})")
            }
            StuckCause::Other { state } => write!(f, "in state {state}"),
        }
    }
}

/// The state field of /proc/<pid>/stat text: after the command, which is in parentheses and
/// may itself hold `)`.
pub(super) fn stat_state(stat: &str) -> Option<char> {
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_cause_is_said_in_words_and_labelled() {
        let cases = [
            (
                StuckCause::Frozen {
                    cgroup: "/pause".into(),
                    state: "FROZEN".into(),
                    why: "thawing it failed: Read-only file system".into(),
                },
                "frozen",
                "pid 7 (java) frozen in cgroup /pause (FROZEN): thawing it failed: Read-only file \
                 system",
            ),
            (
                StuckCause::Uninterruptible {
                    wchan: "nfs_wait_bit_killable".into(),
                },
                "uninterruptible",
                "pid 7 (java) in uninterruptible sleep in the kernel (D, at nfs_wait_bit_killable)",
            ),
            (
                StuckCause::Uninterruptible { wchan: "0".into() },
                "uninterruptible",
                "pid 7 (java) in uninterruptible sleep in the kernel (D)",
            ),
            (
                StuckCause::Other { state: 'R' },
                "other",
                "pid 7 (java) in state R",
            ),
        ];
        for (cause, label, text) in cases {
            assert_eq!(cause.label(), label);
            let stuck = StuckProcess {
                pid: 7,
                comm: "java".into(),
                cause,
            };
            assert_eq!(stuck.to_string(), text);
        }
    }

    #[test]
    fn the_state_is_read_after_the_command_whatever_it_holds() {
        assert_eq!(stat_state("42 (sleep) Z 1 42 42 0"), Some('Z'));
        assert_eq!(stat_state("42 (a) b) (c) S 1 42"), Some('S'));
        assert_eq!(stat_state("42 (no end"), None);
    }
}
