//! What the attached kernel programs cost: the kernel's own run-time accounting per program
//! (`run_time_ns` and `run_cnt` of `bpf_prog_info`, Linux 5.1+). The kernel counts only
//! while some process holds statistics enabled, so a measurement holds a [`RunStatsWindow`]
//! around the work it measures.
use std::os::fd::OwnedFd;

use aya::sys::{Stats, SyscallError, enable_stats};

/// One program's accumulated run time and number of runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgramRuns {
    /// The program's name in the object file (its function name).
    pub program: String,
    pub run_time_ns: u64,
    pub runs: u64,
}

/// Failure to switch the kernel's run-time statistics on.
#[derive(Debug, thiserror::Error)]
#[error("enabling BPF run-time statistics (BPF_ENABLE_STATS, Linux 5.8+)")]
pub struct RunStatsError(#[source] SyscallError);

/// Run-time statistics stay enabled while this lives (as `kernel.bpf_stats_enabled=1` would,
/// but undone when the holder exits, however it exits).
pub struct RunStatsWindow {
    _fd: OwnedFd,
}

impl RunStatsWindow {
    pub fn open() -> Result<Self, RunStatsError> {
        enable_stats(Stats::RunTime)
            .map(|fd| Self { _fd: fd })
            .map_err(RunStatsError)
    }
}

/// Runs of each program between two readings of the same programs, sorted by name.
pub fn delta(before: &[ProgramRuns], after: &[ProgramRuns]) -> Vec<ProgramRuns> {
    let mut out: Vec<ProgramRuns> = after
        .iter()
        .map(|now| {
            let then = before.iter().find(|b| b.program == now.program);
            ProgramRuns {
                program: now.program.clone(),
                run_time_ns: now
                    .run_time_ns
                    .saturating_sub(then.map_or(0, |t| t.run_time_ns)),
                runs: now.runs.saturating_sub(then.map_or(0, |t| t.runs)),
            }
        })
        .collect();
    out.sort_by(|a, b| a.program.cmp(&b.program));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs(program: &str, run_time_ns: u64, runs: u64) -> ProgramRuns {
        ProgramRuns {
            program: program.into(),
            run_time_ns,
            runs,
        }
    }

    #[test]
    fn delta_is_per_program_and_sorted() {
        let before = [runs("stat", 100, 10), runs("lifecycle", 5, 1)];
        let after = [
            runs("stat", 350, 15),
            runs("lifecycle", 5, 1),
            runs("new", 7, 2),
        ];
        assert_eq!(
            delta(&before, &after),
            [
                runs("lifecycle", 0, 0),
                runs("new", 7, 2),
                runs("stat", 250, 5)
            ]
        );
    }

    #[test]
    fn a_counter_that_went_backwards_reads_as_no_runs() {
        assert_eq!(
            delta(&[runs("stat", 100, 10)], &[runs("stat", 50, 5)]),
            [runs("stat", 0, 0)]
        );
    }
}
