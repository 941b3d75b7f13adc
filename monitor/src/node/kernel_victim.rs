//! What the kernel would do without the decision: the process its OOM killer would choose at
//! the OOM point the node is nearest (the kubepods cgroup's limit: among the pods' processes;
//! the node's memory: among all), and the pod it belongs to. An operator in dry run reads
//! "would evict A; without it the OOM killer would kill pid N of pod B".
//!
//! Reading every process's memory takes tens of milliseconds on a dense node, so it runs off
//! the agent's thread after the action has started, and is logged inside the decision's span.
use std::{fs, path::PathBuf};

use crate::{
    cgroupfs::{
        CgroupVersion,
        procs::{memory_cgroup_in_proc, subtree_pids},
    },
    engine::printable::printable,
    engine::{
        ids::deepest_within,
        oom_badness::{ProcessMemory, kernel_choice},
        oom_projection::OomDomain,
    },
    node::read::page_size,
};

/// Where to look, taken from the agent's state at the decision.
pub(crate) struct Question {
    pub(crate) domain: OomDomain,
    /// The memory the kernel scales `oom_score_adj` by in that domain.
    pub(crate) domain_bytes: u64,
    /// The kubepods cgroup's directory (its processes are the kubepods domain).
    pub(crate) kubepods_dir: PathBuf,
    pub(crate) version: CgroupVersion,
    /// Each pod's cgroup path and `namespace/name`.
    pub(crate) pods: Vec<(String, String)>,
    /// `/proc`, or a stand-in in tests.
    pub(crate) proc_root: PathBuf,
}

/// The kernel's choice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KernelVictim {
    pub(crate) pid: i32,
    pub(crate) comm: String,
    pub(crate) points: i64,
    /// `namespace/name`, when the process is in a pod's cgroup.
    pub(crate) pod: Option<String>,
}

impl Question {
    /// The process the OOM killer would choose now, if any can be.
    pub(crate) fn answer(&self) -> Option<KernelVictim> {
        self.answer_in_pages_of(page_size())
    }

    /// [`Self::answer`] on a kernel of `page`-byte pages (4 KiB; 16 or 64 KiB on some arm64
    /// kernels): the kernel counts points in its pages.
    fn answer_in_pages_of(&self, page: u64) -> Option<KernelVictim> {
        let pids = match self.domain {
            OomDomain::Kubepods => subtree_pids(&self.kubepods_dir).ok()?,
            OomDomain::Node => self.all_pids(),
        };
        let processes: Vec<ProcessMemory> = pids
            .into_iter()
            // The node's init is never chosen.
            .filter(|pid| *pid > 1)
            .filter_map(|pid| self.process(pid, page))
            .collect();
        let (chosen, points) = kernel_choice(&processes, self.domain_bytes / page)?;
        Some(KernelVictim {
            pid: chosen.pid,
            comm: chosen.comm.clone(),
            points,
            pod: self.pod_of(chosen.pid),
        })
    }

    fn all_pids(&self) -> Vec<i32> {
        let Ok(entries) = fs::read_dir(&self.proc_root) else {
            return Vec::new();
        };
        let mut pids: Vec<i32> = entries
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect();
        // The kernel walks processes in creation order; pids approximate it.
        pids.sort_unstable();
        pids
    }

    /// What `oom_badness` reads of `pid`; `None` when it exited or is a kernel thread.
    fn process(&self, pid: i32, page: u64) -> Option<ProcessMemory> {
        let dir = self.proc_root.join(pid.to_string());
        let status = fs::read_to_string(dir.join("status")).ok()?;
        let adj = fs::read_to_string(dir.join("oom_score_adj")).ok()?;
        let field = |name: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
                .map(str::trim)
        };
        let kib =
            |name: &str| -> Option<u64> { field(name)?.strip_suffix("kB")?.trim().parse().ok() };
        Some(ProcessMemory {
            pid,
            comm: field("Name").unwrap_or_default().to_string(),
            // Kernel threads have no VmRSS line.
            rss_pages: kib("VmRSS")? * 1024 / page,
            swap_pages: kib("VmSwap").unwrap_or(0) * 1024 / page,
            page_table_pages: kib("VmPTE").unwrap_or(0) * 1024 / page,
            oom_score_adj: adj.trim().parse().ok()?,
        })
    }

    fn pod_of(&self, pid: i32) -> Option<String> {
        let text = fs::read_to_string(self.proc_root.join(format!("{pid}/cgroup"))).ok()?;
        let cgroup = memory_cgroup_in_proc(&text, self.version)?;
        deepest_within(&self.pods, &cgroup).cloned()
    }
}

impl KernelVictim {
    /// `without it, the OOM killer would kill pid 812 (java) of pod shop/cache at the
    /// kubepods cgroup's limit`
    pub(crate) fn text(&self, domain: OomDomain) -> String {
        let owner = match &self.pod {
            Some(pod) => format!("of pod {pod}"),
            None => "outside any pod".to_string(),
        };
        let at = match domain {
            OomDomain::Kubepods => "at the kubepods cgroup's limit",
            OomDomain::Node => "at the node's memory",
        };
        format!(
            "without it, the OOM killer would kill pid {} ({}) {owner} {at}",
            self.pid,
            printable(&self.comm)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A /proc stand-in with the given processes: (pid, name, VmRSS kB, adj, memory cgroup).
    fn fake_proc(name: &str, processes: &[(i32, &str, Option<u64>, i32, &str)]) -> PathBuf {
        let root = std::env::temp_dir().join(format!(
            "monitor-kernel-victim-{}-{name}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&root);
        for (pid, comm, rss, adj, cgroup) in processes {
            let dir = root.join(pid.to_string());
            fs::create_dir_all(&dir).unwrap();
            let rss = rss.map(|kb| format!("VmRSS:\t{kb} kB\nVmPTE:\t8 kB\n"));
            fs::write(
                dir.join("status"),
                format!("Name:\t{comm}\nTgid:\t{pid}\n{}", rss.unwrap_or_default()),
            )
            .unwrap();
            fs::write(dir.join("oom_score_adj"), format!("{adj}\n")).unwrap();
            fs::write(dir.join("cgroup"), format!("4:memory:{cgroup}\n")).unwrap();
        }
        root
    }

    fn question(proc_root: PathBuf) -> Question {
        Question {
            domain: OomDomain::Node,
            domain_bytes: 8 << 30,
            kubepods_dir: PathBuf::from("/nonexistent"),
            version: CgroupVersion::V1,
            pods: vec![
                ("/kubepods/burstable/poda".into(), "shop/web".into()),
                ("/kubepods/besteffort/podb".into(), "shop/batch".into()),
            ],
            proc_root,
        }
    }

    #[test]
    fn the_node_domain_names_the_largest_process_and_its_pod() {
        let root = fake_proc(
            "node",
            &[
                (1, "init", Some(900_000), 0, "/"),
                (50, "kthreadd", None, 0, "/"),
                (300, "sshd", Some(8_000), -1000, "/system.slice"),
                (400, "java", Some(600_000), 0, "/kubepods/burstable/poda/c1"),
                (
                    500,
                    "batch",
                    Some(100_000),
                    0,
                    "/kubepods/besteffort/podb/c2",
                ),
            ],
        );
        let victim = question(root.clone()).answer();
        fs::remove_dir_all(&root).unwrap();
        let victim = victim.expect("a process to choose");
        assert_eq!(
            (victim.pid, victim.comm.as_str()),
            (400, "java"),
            "init is never chosen"
        );
        assert_eq!(victim.pod.as_deref(), Some("shop/web"));
        assert_eq!(
            victim.text(OomDomain::Node),
            "without it, the OOM killer would kill pid 400 (java) of pod shop/web at the node's memory"
        );
    }

    #[test]
    fn oom_score_adj_can_decide_and_a_process_outside_pods_says_so() {
        let root = fake_proc(
            "adj",
            &[
                (
                    400,
                    "java",
                    Some(600_000),
                    -998,
                    "/kubepods/burstable/poda/c1",
                ),
                (700, "agent", Some(1_000), 0, "/system.slice/x"),
            ],
        );
        let victim = question(root.clone()).answer().unwrap();
        fs::remove_dir_all(&root).unwrap();
        assert_eq!(victim.pid, 700, "-998 of 8 GiB outweighs 600 MB");
        assert_eq!(victim.pod, None);
        assert_eq!(
            victim.text(OomDomain::Kubepods),
            "without it, the OOM killer would kill pid 700 (agent) outside any pod at the \
             kubepods cgroup's limit"
        );
    }

    #[test]
    fn the_choice_and_its_points_hold_in_64_kib_pages() {
        // Sizes in whole 64 KiB pages, as /proc shows them on such a kernel.
        let root = fake_proc(
            "64k",
            &[
                (
                    400,
                    "java",
                    Some(1_048_576),
                    0,
                    "/kubepods/burstable/poda/c1",
                ),
                (
                    500,
                    "batch",
                    Some(614_400),
                    500,
                    "/kubepods/besteffort/podb/c1",
                ),
            ],
        );
        let q = question(root.clone());
        let small = q.answer_in_pages_of(4096).unwrap();
        let large = q.answer_in_pages_of(64 * 1024).unwrap();
        fs::remove_dir_all(&root).unwrap();
        // 600 MiB and half of 8 GiB for its adj outweigh 1 GiB, whatever the page size.
        assert_eq!((small.pid, large.pid), (500, 500));
        assert_eq!(small.pod.as_deref(), Some("shop/batch"));
        // Pages of memory and of page tables (8 KiB: nothing in 64 KiB pages, as the
        // kernel's division rounds), plus adj x (total pages / 1000), divided first as the
        // kernel divides.
        let points = |page: i64, table_pages: i64| {
            614_400 * 1024 / page + table_pages + 500 * ((8 << 30) / page / 1000)
        };
        assert_eq!(small.points, points(4096, 2));
        assert_eq!(large.points, points(64 * 1024, 0));
        assert_eq!((small.points, large.points), (1_202_102, 75_100));
    }

    #[test]
    fn nothing_to_choose() {
        let root = fake_proc("none", &[(50, "kthreadd", None, 0, "/")]);
        let victim = question(root.clone()).answer();
        fs::remove_dir_all(&root).unwrap();
        assert_eq!(victim, None);
    }
}
