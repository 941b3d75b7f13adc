//! Whom the kernel's OOM killer would kill: its `oom_badness` and victim selection, on plain
//! numbers, so a decision can name what happens without it.
//!
//! As `mm/oom_kill.c` (5.x-6.18): a process scores its resident pages (anon, file and shmem),
//! its swap entries and its page tables in pages, plus `oom_score_adj` thousandths of the OOM
//! domain's pages (the node's RAM and swap, or the memory cgroup's limit); a score of
//! `OOM_SCORE_ADJ_MIN` (-1000) is never chosen, nor is a process without memory (a kernel
//! thread). The highest score is chosen, the later of equal scores in the kernel's walk.

/// `OOM_SCORE_ADJ_MIN`: the process is never chosen.
pub(crate) const OOM_SCORE_ADJ_MIN: i32 = -1000;

/// What `oom_badness` reads of a process, in pages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessMemory {
    pub pid: i32,
    pub comm: String,
    /// Resident anon, file and shmem pages (`get_mm_rss`).
    pub rss_pages: u64,
    pub swap_pages: u64,
    pub page_table_pages: u64,
    pub oom_score_adj: i32,
}

/// The score the kernel gives `process` in an OOM domain of `total_pages`; `None` when it
/// would never be chosen.
pub(crate) fn badness(process: &ProcessMemory, total_pages: u64) -> Option<i64> {
    if process.oom_score_adj <= OOM_SCORE_ADJ_MIN || process.rss_pages == 0 {
        return None;
    }
    let pages = process.rss_pages + process.swap_pages + process.page_table_pages;
    let pages = i64::try_from(pages).unwrap_or(i64::MAX);
    // The kernel divides first: `adj *= totalpages / 1000`.
    let per_mille = i64::try_from(total_pages / 1000).unwrap_or(i64::MAX);
    Some(pages.saturating_add(i64::from(process.oom_score_adj).saturating_mul(per_mille)))
}

/// The process the OOM killer would choose among `processes` (in the kernel's walk order),
/// with its score.
pub fn kernel_choice(
    processes: &[ProcessMemory],
    total_pages: u64,
) -> Option<(&ProcessMemory, i64)> {
    processes
        .iter()
        .filter_map(|p| Some((p, badness(p, total_pages)?)))
        // max_by_key keeps the last of equal maxima, as the kernel's `points < chosen` does.
        .max_by_key(|(_, points)| *points)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process(pid: i32, rss_pages: u64, oom_score_adj: i32) -> ProcessMemory {
        ProcessMemory {
            pid,
            comm: format!("p{pid}"),
            rss_pages,
            swap_pages: 0,
            page_table_pages: 0,
            oom_score_adj,
        }
    }

    #[test]
    fn scores_as_the_kernel_does() {
        let total = 1_000_000;
        let cases = [
            ("resident pages alone", process(1, 500, 0), Some(500)),
            (
                "swap and page tables count",
                ProcessMemory {
                    swap_pages: 20,
                    page_table_pages: 3,
                    ..process(2, 500, 0)
                },
                Some(523),
            ),
            (
                "a positive adj adds thousandths of the domain",
                process(3, 500, 10),
                Some(10_500),
            ),
            (
                "a negative adj can go below zero",
                process(4, 500, -1),
                Some(-500),
            ),
            ("-1000 is never chosen", process(5, 500, -1000), None),
            ("no memory: a kernel thread", process(6, 0, 0), None),
        ];
        for (name, p, expected) in cases {
            assert_eq!(badness(&p, total), expected, "{name}");
        }
        assert_eq!(
            badness(&process(7, 1, 1), 1999),
            Some(2),
            "the domain is divided by 1000 before the multiplication"
        );
    }

    #[test]
    fn chooses_the_highest_score_and_the_later_of_equals() {
        let total = 100_000;
        let cases: [(&str, Vec<ProcessMemory>, Option<i32>); 5] = [
            ("nothing to choose", vec![], None),
            (
                "the largest",
                vec![process(1, 10, 0), process(2, 30, 0), process(3, 20, 0)],
                Some(2),
            ),
            (
                "adj outweighs size",
                vec![process(1, 1000, 0), process(2, 10, 100)],
                Some(2),
            ),
            (
                "protected processes are passed over",
                vec![process(1, 1000, -1000), process(2, 10, 0)],
                Some(2),
            ),
            (
                "equal scores: the later in the walk",
                vec![process(1, 10, 0), process(2, 10, 0)],
                Some(2),
            ),
        ];
        for (name, processes, expected) in cases {
            assert_eq!(
                kernel_choice(&processes, total).map(|(p, _)| p.pid),
                expected,
                "{name}"
            );
        }
    }
}
