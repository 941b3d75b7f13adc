//! Reading the machine's memory numbers: the cgroupfs seam of the agent.
//!
//! [`MachineReader`] is what the agent's shell reads through; [`Cgroupfs`] reads the real
//! files. [`read_all`] turns one sweep into plain readings for the pure core, keeping a
//! failed read (EIO, EACCES, EMFILE) apart from a cgroup that is gone: a failure keeps the
//! pod's last good value, while a vanished cgroup leaves the pod with nothing to reclaim.
use std::io;

use crate::{
    cgroupfs::{CgroupPaths, MemoryHierarchy, StatsError, procs::subtree_pids, stats},
    engine::{
        eviction_machine::{AgentCore, PodReading, ReadScope},
        ids::CgroupRel,
        pod_facts::PodRef,
        threshold::SignalObservation,
    },
    node::read::{NodeError, node_working_set, read_pid_available},
    system_clock::monotonic_ns,
};

/// The reads the agent makes of the machine.
pub(crate) trait MachineReader {
    /// Every cgroup of the memory hierarchy, with its id.
    fn scan(&self) -> io::Result<CgroupPaths>;
    /// The node's working set (root cgroup, as the kubelet computes it).
    fn node_working_set(&self) -> Result<u64, NodeError>;
    /// The working set of the cgroup `rel` (relative to the hierarchy root).
    fn working_set(&self, rel: &str) -> Result<u64, StatsError>;
    /// How many processes the subtree of `rel` holds.
    fn process_count(&self, rel: &str) -> io::Result<u64>;
    /// `pid.available`, where the kernel tells.
    fn pid_available(&self) -> Result<Option<SignalObservation>, NodeError>;
}

/// The real cgroupfs and procfs.
pub(crate) struct Cgroupfs {
    pub hierarchy: MemoryHierarchy,
}

impl MachineReader for Cgroupfs {
    fn scan(&self) -> io::Result<CgroupPaths> {
        CgroupPaths::scan(&self.hierarchy.mount)
    }

    fn node_working_set(&self) -> Result<u64, NodeError> {
        node_working_set(&self.hierarchy)
    }

    fn working_set(&self, rel: &str) -> Result<u64, StatsError> {
        stats::read(&self.hierarchy.dir(rel), self.hierarchy.version).map(|s| s.working_set())
    }

    fn process_count(&self, rel: &str) -> io::Result<u64> {
        subtree_pids(&self.hierarchy.dir(rel)).map(|pids| pids.len() as u64)
    }

    fn pid_available(&self) -> Result<Option<SignalObservation>, NodeError> {
        read_pid_available()
    }
}

/// Pods whose last read failed, so each failure episode is logged once.
#[derive(Debug, Default)]
pub(crate) struct ReadFailures {
    logged: std::collections::HashSet<String>,
}

/// Pods read between two calls of `read_all`'s `between_reads`: at 10,000 pods a full read
/// takes most of a second, in which the kernel's ring could fill many times over.
pub(crate) const PODS_PER_CHUNK: usize = 250;

/// The key of the node's own reads among the pods' uids in [`ReadFailures`] (no uid holds
/// a NUL).
const NODE_READS: &str = "\0node";

/// Reads the node's and the kubepods cgroup's working sets into `core`; after a failure the
/// last values stand, and a failure that lasts is logged once.
pub(crate) fn read_node(
    reader: &dyn MachineReader,
    core: &mut AgentCore,
    kubepods_rel: &str,
    failures: &mut ReadFailures,
) -> bool {
    // Taken before each read: kernel records sent earlier are contained in it.
    let read_ns = monotonic_ns();
    match (reader.node_working_set(), reader.working_set(kubepods_rel)) {
        (Ok(node), Ok(kubepods)) => {
            core.set_node_reading(node, kubepods, read_ns);
            if failures.logged.remove(NODE_READS) {
                tracing::info!("node memory is readable again");
            }
            true
        }
        (node, kubepods) => {
            let why = format!(
                "{:?} / {:?}",
                node.err().map(|e| e.to_string()),
                kubepods.err().map(|e| e.to_string())
            );
            if failures.logged.insert(NODE_READS.to_string()) {
                tracing::warn!(
                    "reading node memory (the last values stand until it reads again): {why}"
                );
            } else {
                tracing::debug!("reading node memory: {why}");
            }
            false
        }
    }
}

/// Reads the node, the kubepods cgroup and the pods of `scope` into `core`. With
/// `classify`, the hierarchy is rewalked first and every cgroup attributed anew.
/// `between_reads` runs after the walk and after every [`PODS_PER_CHUNK`] pods (the agent
/// takes the kernel's waiting records there). Returns how many pods' processes were counted.
pub(crate) fn read_all(
    reader: &dyn MachineReader,
    core: &mut AgentCore,
    kubepods_rel: &str,
    classify: bool,
    scope: ReadScope,
    failures: &mut ReadFailures,
    between_reads: &mut dyn FnMut(),
) -> u64 {
    if classify {
        match reader.scan() {
            Ok(paths) => {
                core.clear_cgroups();
                for (id, path) in paths.iter() {
                    core.classify(id, path);
                }
            }
            Err(e) => tracing::warn!("scanning the memory hierarchy: {e}"),
        }
        between_reads();
    }
    read_node(reader, core, kubepods_rel, failures);
    let pods = core.pods_to_read(scope);
    let counted = read_pods(reader, core, &pods, failures, between_reads);
    observe_pid_available(reader, core);
    counted
}

/// Reads the node's `pid.available` into `core` (none when it cannot be read: the pid
/// signal is then not observed, as the kubelet's).
pub(crate) fn observe_pid_available(reader: &dyn MachineReader, core: &mut AgentCore) {
    core.set_pid_reading(reader.pid_available().ok().flatten());
}

/// Reads the working sets of `pods` into `core` (their processes too when a ranking counts
/// them), running `between_reads` after every [`PODS_PER_CHUNK`] pods. Returns how many
/// pods' processes were counted.
pub(crate) fn read_pods(
    reader: &dyn MachineReader,
    core: &mut AgentCore,
    pods: &[(PodRef, CgroupRel)],
    failures: &mut ReadFailures,
    between_reads: &mut dyn FnMut(),
) -> u64 {
    // Listing every pod's tasks is the larger part of a resync; skip it when no ranking
    // uses the counts.
    let count_processes = core.counts_processes();
    let mut counted = 0;
    for (read, (pod, rel)) in pods.iter().enumerate() {
        if read > 0 && read % PODS_PER_CHUNK == 0 {
            between_reads();
        }
        let uid = &pod.uid;
        let read_ns = monotonic_ns();
        let reading = match reader.working_set(rel.as_str()) {
            Ok(working_set) => {
                let processes = if count_processes {
                    counted += 1;
                    count_processes_of(reader, pod, rel)
                } else {
                    Some(0)
                };
                if failures.logged.remove(uid) {
                    tracing::info!(pod.uid = %uid, cgroup = %rel, "pod {pod}: {rel} is readable again");
                }
                PodReading::Read {
                    working_set,
                    processes,
                }
            }
            Err(StatsError::Gone(_)) => PodReading::Gone,
            Err(e) => {
                if failures.logged.insert(uid.clone()) {
                    tracing::warn!(
                        pod.uid = %uid,
                        cgroup = %rel,
                        "pod {pod}: {e}; its last good working set stands in (never read: it \
                         is not a candidate until it can be read)"
                    );
                }
                PodReading::Failed
            }
        };
        core.set_pod_reading(uid, reading, read_ns);
    }
    counted
}

/// Counts the processes of `pods` anew, their working sets untouched: the pods whose tasks
/// the kernel saw change (see [`count_processes_of`]). Returns how many pods were counted.
pub(crate) fn recount_processes(
    reader: &dyn MachineReader,
    core: &mut AgentCore,
    pods: Vec<(PodRef, CgroupRel)>,
    between_reads: &mut dyn FnMut(),
) -> u64 {
    let pods_counted = pods.len() as u64;
    for (counted, (pod, rel)) in pods.into_iter().enumerate() {
        if counted > 0 && counted % PODS_PER_CHUNK == 0 {
            between_reads();
        }
        if let Some(processes) = count_processes_of(reader, &pod, &rel) {
            core.set_pod_processes(&pod.uid, processes);
        }
    }
    pods_counted
}

/// A pod's process count for the ranking: none when its cgroup is gone, `None` (the last
/// count stands, the next mark or resync counts again) when the count failed: a failed
/// count read as 0 would rank the pod last for PIDs, a fork bomb included.
fn count_processes_of(reader: &dyn MachineReader, pod: &PodRef, rel: &CgroupRel) -> Option<u64> {
    match reader.process_count(rel.as_str()) {
        Ok(processes) => Some(processes),
        Err(e) if crate::cgroupfs::procs::is_gone(&e) => Some(0),
        Err(e) => {
            tracing::debug!(pod.uid = %pod.uid, "pod {pod}: counting its processes: {e}");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::{
        engine::{
            decide::EvictionState,
            eviction_config::EvictionConfig,
            eviction_machine::NodeCapacity,
            instant::{ManualClock, MonoInstant},
            pod_facts::PodFacts,
        },
        pods::PodCgroup,
    };

    const MI: u64 = 1 << 20;

    /// A pod cgroup's read: its working set, or the error the read fails with.
    type FakeRead = Result<u64, fn() -> StatsError>;

    /// cgroupfs as a table of reads by path; a path not in it is gone.
    struct FakeCgroupfs {
        pods: HashMap<&'static str, FakeRead>,
        /// The kubepods cgroup's working set; `None`: its read fails with EIO.
        kubepods: Option<u64>,
    }

    impl MachineReader for FakeCgroupfs {
        fn scan(&self) -> io::Result<CgroupPaths> {
            Ok(CgroupPaths::default())
        }
        fn node_working_set(&self) -> Result<u64, NodeError> {
            Ok(2048 * MI)
        }
        fn working_set(&self, rel: &str) -> Result<u64, StatsError> {
            if rel == "/kubepods" {
                return self.kubepods.ok_or_else(|| StatsError::Io {
                    path: "/kubepods/memory.stat".into(),
                    source: io::Error::from_raw_os_error(libc::EIO),
                });
            }
            match self.pods.get(rel) {
                Some(Ok(ws)) => Ok(*ws),
                Some(Err(error)) => Err(error()),
                None => Err(StatsError::Gone(rel.into())),
            }
        }
        fn process_count(&self, _rel: &str) -> io::Result<u64> {
            Ok(1)
        }
        fn pid_available(&self) -> Result<Option<SignalObservation>, NodeError> {
            Ok(None)
        }
    }

    fn pod(name: &str, request_mi: i64) -> (PodFacts, Option<PodCgroup>) {
        let facts = PodFacts::named(name).with_memory_request(request_mi << 20);
        let cgroup = PodCgroup {
            id: 0,
            rel: CgroupRel::new(&format!("/kubepods/{name}")).unwrap(),
        };
        (facts, Some(cgroup))
    }

    /// A core for an 8 GiB node with 1 GiB allocatable, kubepods at `/kubepods`.
    fn core_with(config_yaml: &str) -> AgentCore {
        let capacity = NodeCapacity {
            memory_bytes: 8192 * MI,
            allocatable_memory_bytes: 1024 * MI,
            kubepods_limit: None,
        };
        AgentCore::new(
            EvictionConfig::from_yaml(config_yaml).unwrap(),
            capacity,
            CgroupRel::new("/kubepods").unwrap(),
            EvictionState::default(),
        )
    }

    #[test]
    fn a_long_read_lets_the_caller_take_kernel_records_after_the_walk_and_every_chunk() {
        let names: Vec<String> = (0..=(2 * PODS_PER_CHUNK))
            .map(|i| format!("p{i}"))
            .collect();
        let mut core = core_with("");
        core.set_pods(names.iter().map(|n| pod(n, 100)).collect());
        let fs = FakeCgroupfs {
            pods: names
                .iter()
                .map(|n| {
                    let path: &'static str = format!("/kubepods/{n}").leak();
                    (path, Ok(10 * MI))
                })
                .collect(),
            kubepods: Some(950 * MI),
        };
        for (classify, expected) in [(false, 2), (true, 3)] {
            let mut calls = 0;
            read_all(
                &fs,
                &mut core,
                "/kubepods",
                classify,
                ReadScope::All,
                &mut ReadFailures::default(),
                &mut || calls += 1,
            );
            assert_eq!(
                calls,
                expected,
                "classify {classify}: {} pods in chunks of {PODS_PER_CHUNK}",
                names.len()
            );
        }
    }

    #[test]
    fn an_unreadable_pod_is_not_the_victim_and_a_vanished_one_has_nothing_to_reclaim() {
        let mut core = core_with("evictionHard:\n  allocatableMemory.available: 100Mi\n");
        // "eio" and "gone" are within their requests, but as missing stats they would rank
        // first; "hog" is 900Mi over a 100Mi request.
        core.set_pods(vec![pod("eio", 600), pod("gone", 600), pod("hog", 100)]);
        let fs = FakeCgroupfs {
            pods: HashMap::from([
                (
                    "/kubepods/eio",
                    Err((|| StatsError::Io {
                        path: "/kubepods/eio/memory.stat".into(),
                        source: io::Error::from_raw_os_error(libc::EIO),
                    }) as fn() -> StatsError),
                ),
                ("/kubepods/hog", Ok(900 * MI)),
            ]),
            kubepods: Some(950 * MI),
        };
        let mut failures = ReadFailures::default();
        for _ in 0..3 {
            read_all(
                &fs,
                &mut core,
                "/kubepods",
                false,
                ReadScope::All,
                &mut failures,
                &mut || {},
            );
        }
        assert_eq!(core.read_failures(), 3, "every failed read is counted");
        assert_eq!(failures.logged.len(), 1, "and logged once");
        let clock = ManualClock::new(MonoInstant::from_millis(1_000));
        let decision = core.decide(&clock);
        assert_eq!(
            decision.eviction().map(|e| e.pod.name.as_str()),
            Some("hog")
        );
    }

    /// Process counts by pod cgroup, each count asked recorded; nothing else may be read.
    struct ProcessCounts {
        counts: HashMap<&'static str, Result<u64, i32>>,
        asked: std::cell::RefCell<Vec<String>>,
    }

    impl MachineReader for ProcessCounts {
        fn scan(&self) -> io::Result<CgroupPaths> {
            unreachable!("a re-count walks no hierarchy")
        }
        fn node_working_set(&self) -> Result<u64, NodeError> {
            unreachable!("a re-count reads no working set")
        }
        fn working_set(&self, _rel: &str) -> Result<u64, StatsError> {
            unreachable!("a re-count reads no working set")
        }
        fn process_count(&self, rel: &str) -> io::Result<u64> {
            self.asked.borrow_mut().push(rel.to_string());
            match self.counts.get(rel) {
                Some(Ok(n)) => Ok(*n),
                Some(Err(errno)) => Err(io::Error::from_raw_os_error(*errno)),
                None => Err(io::Error::from_raw_os_error(libc::ENOENT)),
            }
        }
        fn pid_available(&self) -> Result<Option<SignalObservation>, NodeError> {
            unreachable!("read by the caller")
        }
    }

    /// The PID ranking's order, pod names first to last.
    fn pid_order(core: &AgentCore) -> Vec<String> {
        core.ranking(crate::engine::signal::Signal::PidAvailable)
            .iter()
            .map(|(facts, _)| facts.pod.name.clone())
            .collect()
    }

    #[test]
    fn only_the_pods_whose_cgroups_the_kernel_marked_are_counted_again() {
        let mut core = core_with("evictionHard:\n  pid.available: 10%\n");
        core.set_pods(vec![pod("quiet", 100), pod("bomb", 100), pod("gone", 100)]);
        core.classify(1, "/");
        core.classify(11, "/kubepods/quiet/ctr");
        core.classify(12, "/kubepods/bomb/ctr");
        core.classify(13, "/kubepods/bomb");
        core.classify(14, "/kubepods/gone/ctr");
        core.classify(20, "/system.slice/sshd.service");
        let before = ProcessCounts {
            counts: HashMap::from([
                ("/kubepods/quiet", Ok(40)),
                ("/kubepods/bomb", Ok(3)),
                ("/kubepods/gone", Ok(20)),
            ]),
            asked: Default::default(),
        };
        for name in ["quiet", "bomb", "gone"] {
            let rel = CgroupRel::new(&format!("/kubepods/{name}")).unwrap();
            core.set_pod_reading(
                name,
                PodReading::Read {
                    working_set: 10 * MI,
                    processes: Some(before.process_count(rel.as_str()).unwrap()),
                },
                1,
            );
        }
        assert_eq!(pid_order(&core), ["quiet", "gone", "bomb"]);
        // The bomb forked in both its cgroups, the gone pod's last task ended, sshd forked.
        let marked = core
            .pods_holding(&[12, 20, 13, 14, 1, 12])
            .expect("every marked cgroup is known");
        let names: Vec<&str> = marked.iter().map(|(pod, _)| pod.name.as_str()).collect();
        assert_eq!(names, ["bomb", "gone"], "each marked pod once, no other");
        let after = ProcessCounts {
            counts: HashMap::from([("/kubepods/bomb", Ok(900)), ("/kubepods/quiet", Ok(41))]),
            asked: Default::default(),
        };
        let mut between = 0;
        assert_eq!(
            recount_processes(&after, &mut core, marked, &mut || between += 1),
            2
        );
        assert_eq!(*after.asked.borrow(), ["/kubepods/bomb", "/kubepods/gone"]);
        assert_eq!(between, 0, "two pods fit one chunk");
        assert_eq!(
            pid_order(&core),
            ["bomb", "quiet", "gone"],
            "the bomb first, the emptied pod last, the quiet pod's count not read again"
        );
        // A failed count keeps the last one.
        let failing = ProcessCounts {
            counts: HashMap::from([("/kubepods/bomb", Err(libc::EMFILE))]),
            asked: Default::default(),
        };
        let marked = core.pods_holding(&[12]).unwrap();
        recount_processes(&failing, &mut core, marked, &mut || {});
        assert_eq!(pid_order(&core), ["bomb", "quiet", "gone"]);
        assert_eq!(
            core.pods_holding(&[12, 99]),
            None,
            "a cgroup not classified yet could be any pod's: count them all"
        );
    }

    /// Every pod read at 10 MiB, its processes counted as [`ProcessCounts`] says.
    struct CountedPods(ProcessCounts);

    impl MachineReader for CountedPods {
        fn scan(&self) -> io::Result<CgroupPaths> {
            Ok(CgroupPaths::default())
        }
        fn node_working_set(&self) -> Result<u64, NodeError> {
            Ok(2048 * MI)
        }
        fn working_set(&self, _rel: &str) -> Result<u64, StatsError> {
            Ok(10 * MI)
        }
        fn process_count(&self, rel: &str) -> io::Result<u64> {
            self.0.process_count(rel)
        }
        fn pid_available(&self) -> Result<Option<SignalObservation>, NodeError> {
            Ok(None)
        }
    }

    #[test]
    fn a_resync_whose_process_count_fails_keeps_the_last_count_and_a_gone_pod_counts_none() {
        let mut core = core_with("evictionHard:\n  pid.available: 10%\n");
        core.set_pods(vec![pod("bomb", 100), pod("quiet", 100), pod("ended", 100)]);
        let read = |counts: HashMap<&'static str, Result<u64, i32>>, core: &mut AgentCore| {
            let reader = CountedPods(ProcessCounts {
                counts,
                asked: Default::default(),
            });
            let mut failures = ReadFailures::default();
            let counted = read_all(
                &reader,
                core,
                "/kubepods",
                false,
                ReadScope::All,
                &mut failures,
                &mut || {},
            );
            assert_eq!(
                counted, 3,
                "every pod's processes are counted at a full read"
            );
        };
        read(
            HashMap::from([
                ("/kubepods/bomb", Ok(900)),
                ("/kubepods/quiet", Ok(40)),
                ("/kubepods/ended", Ok(60)),
            ]),
            &mut core,
        );
        assert_eq!(pid_order(&core), ["bomb", "ended", "quiet"]);
        // EMFILE on the bomb's cgroup.procs; the ended pod's cgroup went between the reads.
        read(
            HashMap::from([
                ("/kubepods/bomb", Err(libc::EMFILE)),
                ("/kubepods/quiet", Ok(40)),
            ]),
            &mut core,
        );
        assert_eq!(
            pid_order(&core),
            ["bomb", "quiet", "ended"],
            "the bomb keeps its 900 (a failed count read as 0 would rank it last), the gone \
             pod counts none"
        );
    }

    #[test]
    fn a_failing_node_read_keeps_the_last_values_and_is_logged_once_per_episode() {
        let mut core = core_with("evictionHard:\n  allocatableMemory.available: 100Mi\n");
        let mut fs = FakeCgroupfs {
            pods: HashMap::new(),
            kubepods: Some(950 * MI),
        };
        let mut failures = ReadFailures::default();
        read_node(&fs, &mut core, "/kubepods", &mut failures);
        // 1024Mi allocatable - 950Mi - the 100Mi threshold: already met.
        assert_eq!(core.memory_headroom(), Some(0));
        fs.kubepods = Some(500 * MI);
        read_node(&fs, &mut core, "/kubepods", &mut failures);
        assert_eq!(core.memory_headroom(), Some(424 * MI));
        fs.kubepods = None;
        for _ in 0..3 {
            read_node(&fs, &mut core, "/kubepods", &mut failures);
        }
        assert_eq!(
            core.memory_headroom(),
            Some(424 * MI),
            "the last good reading stands"
        );
        assert_eq!(failures.logged.len(), 1, "one episode, one entry");
        fs.kubepods = Some(600 * MI);
        read_node(&fs, &mut core, "/kubepods", &mut failures);
        assert!(
            failures.logged.is_empty(),
            "the episode ends with a good read"
        );
        assert_eq!(core.memory_headroom(), Some(324 * MI));
    }
}
