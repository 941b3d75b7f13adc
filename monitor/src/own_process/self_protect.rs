//! The agent protects itself on a node short of memory, as a node's critical daemons do.
//!
//! An eviction agent that the OOM killer takes, whose code pages reclaim drops just when it
//! must act, or that picks its own pod, fails exactly when the node needs it. So at start it
//! lowers its `oom_score_adj` (-999 by default: only a task at -1000 is spared before it),
//! locks its memory with `mlockall` so reclaim never takes its pages (the ones mapped at
//! start whole, later ones as they are touched), and once it knows the pods it keeps the pod whose cgroup holds it (found from
//! `/proc/self/cgroup`) out of every ranking.
use std::{fs, io};

use crate::{
    cgroupfs::{CgroupVersion, MemoryHierarchy, procs::memory_cgroup_in_proc, stats},
    engine::units::bytes,
    engine::{eviction_machine::AgentCore, ids::is_within},
    node::read::read_memory_limit,
};

/// `oom_score_adj` the agent gives itself unless told otherwise.
pub(crate) const DEFAULT_OOM_SCORE_ADJ: i32 = -999;

const OWN_OOM_SCORE_ADJ: &str = "/proc/self/oom_score_adj";
const OWN_CGROUP: &str = "/proc/self/cgroup";

/// Parses `--oom-score-adj`: an integer in the kernel's range -1000..=1000.
pub(crate) fn parse_oom_score_adj(text: &str) -> Result<i32, String> {
    let value: i32 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not an integer (the kernel takes -1000 to 1000)"))?;
    if !(-1000..=1000).contains(&value) {
        return Err(format!(
            "{value} is outside -1000..=1000 (-1000 never OOM-killed, 1000 killed first)"
        ));
    }
    Ok(value)
}

/// Sets this process's `oom_score_adj`. Lowering it needs CAP_SYS_RESOURCE.
pub(crate) fn set_oom_score_adj(value: i32) -> io::Result<()> {
    fs::write(OWN_OOM_SCORE_ADJ, value.to_string())
}

/// Locks this process's memory: every page mapped now (the binary's code and data, all of
/// it, so the eviction path that has not run yet is never read back from disk under
/// pressure), and later mappings page by page as they are touched (`MCL_ONFAULT`, as lmkd
/// and earlyoom do): a thread's stack or an allocator's reserve is charged only for what it
/// uses, not locked whole. Fails with EPERM without CAP_IPC_LOCK, or ENOMEM when the
/// mappings exceed RLIMIT_MEMLOCK for an unprivileged user; EINVAL from a kernel before 4.4
/// (no `MCL_ONFAULT`) falls back to locking later mappings whole.
pub(crate) fn lock_memory() -> io::Result<()> {
    // SAFETY: mlockall only changes how the kernel treats this process's pages.
    if unsafe { libc::mlockall(libc::MCL_CURRENT) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // Without MCL_CURRENT this call leaves the mappings just locked as they are.
    // SAFETY: as above.
    if unsafe { libc::mlockall(libc::MCL_FUTURE | libc::MCL_ONFAULT) } == 0 {
        return Ok(());
    }
    let error = io::Error::last_os_error();
    if error.raw_os_error() != Some(libc::EINVAL) {
        return Err(error);
    }
    // SAFETY: as above.
    if unsafe { libc::mlockall(libc::MCL_FUTURE) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Applies the process-wide protections at start, logging what could not be done: the agent
/// still runs without them, as an ordinary process.
pub(crate) fn protect_process(oom_score_adj: i32, lock: bool) {
    match set_oom_score_adj(oom_score_adj) {
        Ok(()) => tracing::info!("oom_score_adj {oom_score_adj}"),
        Err(e) => tracing::warn!(
            "could not set oom_score_adj {oom_score_adj} ({e}): the OOM killer may pick this \
             agent like any other process; lowering it needs CAP_SYS_RESOURCE"
        ),
    }
    if !lock {
        tracing::info!("memory not locked (--no-mlock): reclaim may page this agent out");
        return;
    }
    match lock_memory() {
        Ok(()) => tracing::info!("memory locked (mlockall)"),
        Err(e) => tracing::warn!(
            "could not lock memory with mlockall ({e}): under pressure reclaim may page this \
             agent out and slow its reaction; it needs CAP_IPC_LOCK or a RLIMIT_MEMLOCK above \
             its size (`ulimit -l`), or pass --no-mlock to run unlocked without this warning"
        ),
    }
}

/// Share of its own memory limit above which the agent says it may be OOM-killed.
const OWN_LIMIT_NEAR: f64 = 0.8;

/// The agent's own memory cgroup, as the kernel charges it: the heap, locked pages, the
/// kernel maps and ring buffer, and the binary's page cache all count against its limit, so
/// a limit sized from RSS alone gets the agent OOM-killed at start-up on a busy node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OwnCharge {
    pub charged: u64,
    /// `None`: no limit.
    pub limit: Option<u64>,
}

impl OwnCharge {
    /// Whether the charge is within [`OWN_LIMIT_NEAR`] of the limit.
    pub(crate) fn near_limit(&self) -> bool {
        self.limit
            .is_some_and(|limit| self.charged as f64 >= limit as f64 * OWN_LIMIT_NEAR)
    }
}

/// Watches the agent's own charge against its limit; logs once per episode near it.
#[derive(Debug, Default)]
pub(crate) struct OwnMemory {
    near: bool,
}

impl OwnMemory {
    /// Reads the charge of the agent's memory cgroup (`None` when it cannot be read, or the
    /// agent is in the root cgroup) and says loudly when it nears the limit.
    pub(crate) fn check(&mut self, hierarchy: &MemoryHierarchy, own: &OwnPod) -> Option<OwnCharge> {
        let rel = own.cgroup.as_deref().filter(|rel| *rel != "/")?;
        let dir = hierarchy.dir(rel);
        let charged = stats::read(&dir, hierarchy.version).ok()?.usage;
        let limit = read_memory_limit(&dir, hierarchy.version).ok()?.bytes();
        let charge = OwnCharge { charged, limit };
        let near = charge.near_limit();
        if near && !self.near {
            tracing::error!(
                "this agent's memory cgroup {rel} is charged {} of its {} limit: the kernel \
                 may OOM-kill it or refuse its kernel maps, and the node loses its eviction \
                 agent; raise the limit (docs/operating.md: \"Memory\")",
                bytes(charged as i64),
                bytes(limit.unwrap_or(0) as i64)
            );
        } else if !near && self.near {
            tracing::info!(
                "this agent's memory cgroup is charged {} again, within its limit",
                bytes(charged as i64)
            );
        }
        self.near = near;
        Some(charge)
    }
}

/// The pod whose cgroup holds the agent, kept out of the rankings.
#[derive(Debug, Default)]
pub(crate) struct OwnPod {
    /// The agent's memory cgroup, relative to the hierarchy root; `None` when unknown.
    cgroup: Option<String>,
    /// The uid last excluded, so the log says it once.
    excluded: Option<String>,
}

impl OwnPod {
    /// Reads the agent's own memory cgroup.
    pub(crate) fn detect(version: CgroupVersion) -> Self {
        let cgroup = match fs::read_to_string(OWN_CGROUP) {
            Ok(text) => memory_cgroup_in_proc(&text, version),
            Err(e) => {
                tracing::warn!(
                    "reading {OWN_CGROUP}: {e}; cannot tell whether this agent runs in a pod"
                );
                None
            }
        };
        Self {
            cgroup,
            excluded: None,
        }
    }

    /// The uid among `pods` (uid, cgroup path) whose cgroup holds the agent's.
    pub(crate) fn find<'a>(
        &self,
        pods: impl Iterator<Item = (&'a str, &'a str)>,
    ) -> Option<&'a str> {
        let own = self.cgroup.as_deref()?;
        pods.filter(|(_, rel)| *rel != "/" && is_within(own, rel))
            // The deepest match, should one pod's path contain another's.
            .max_by_key(|(_, rel)| rel.len())
            .map(|(uid, _)| uid)
    }

    /// Whether the cgroup `rel` holds the agent (its own pod's, or above).
    pub(crate) fn holds(&self, rel: &str) -> bool {
        self.cgroup
            .as_deref()
            .is_some_and(|own| rel != "/" && is_within(own, rel))
    }

    /// Keeps the agent's own pod out of every decision of `core` (it keeps its place in the
    /// ranking, as the kubelet would rank it); logs once per pod.
    pub(crate) fn exclude_from(&mut self, core: &mut AgentCore) {
        let own = self
            .find(core.pods().filter_map(|p| {
                p.cgroup
                    .as_ref()
                    .map(|c| (p.facts.pod.uid.as_str(), c.rel.as_str()))
            }))
            .map(str::to_string);
        let Some(uid) = own else { return };
        if self.excluded.as_deref() != Some(uid.as_str()) {
            let name = core
                .pod(&uid)
                .map_or_else(|| uid.clone(), |p| p.facts.pod.to_string());
            tracing::info!(
                "this agent runs in pod {name} (cgroup {}): never a candidate for eviction",
                self.cgroup.as_deref().unwrap_or_default()
            );
        }
        core.exclude(&uid);
        self.excluded = Some(uid);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_charge_is_near_the_limit_from_four_fifths_of_it() {
        let charge = |charged, limit| OwnCharge { charged, limit };
        assert!(!charge(79, Some(100)).near_limit());
        assert!(charge(80, Some(100)).near_limit());
        assert!(charge(120, Some(100)).near_limit());
        assert!(!charge(u64::MAX, None).near_limit(), "no limit, never near");
    }

    use super::*;

    #[test]
    fn oom_score_adj_values() {
        let cases = [
            ("default", "-999", Ok(-999)),
            ("lowest", "-1000", Ok(-1000)),
            ("highest", "1000", Ok(1000)),
            ("zero", "0", Ok(0)),
            ("below the range", "-1001", Err("outside")),
            ("above the range", "1001", Err("outside")),
            ("not a number", "low", Err("not an integer")),
            ("empty", "", Err("not an integer")),
        ];
        for (name, text, want) in cases {
            match (parse_oom_score_adj(text), want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{name}"),
                (Err(got), Err(want)) => assert!(got.contains(want), "{name}: {got}"),
                (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn memory_cgroup_from_proc_self_cgroup() {
        let v1 = "12:pids:/user.slice\n\
                  7:cpu,cpuacct:/kubepods/besteffort/podabc/ctr\n\
                  4:memory:/kubepods/besteffort/podabc/ctr\n\
                  1:name=systemd:/kubepods/besteffort/podabc/ctr\n\
                  0::/system.slice/agent.service\n";
        let v2 = "0::/kubepods.slice/kubepods-burstable.slice/x.scope\n";
        let cases = [
            (
                "v1 memory line",
                v1,
                CgroupVersion::V1,
                Some("/kubepods/besteffort/podabc/ctr"),
            ),
            (
                "hybrid: v2 wants the unified line",
                v1,
                CgroupVersion::V2,
                Some("/system.slice/agent.service"),
            ),
            (
                "v2",
                v2,
                CgroupVersion::V2,
                Some("/kubepods.slice/kubepods-burstable.slice/x.scope"),
            ),
            (
                "v2 text has no memory controller line",
                v2,
                CgroupVersion::V1,
                None,
            ),
            (
                "memory among several controllers",
                "3:memory,hugetlb:/a\n",
                CgroupVersion::V1,
                Some("/a"),
            ),
            (
                "memory as a prefix only",
                "3:memoryx:/a\n",
                CgroupVersion::V1,
                None,
            ),
            ("empty", "", CgroupVersion::V2, None),
        ];
        for (name, text, version, want) in cases {
            assert_eq!(
                memory_cgroup_in_proc(text, version).as_deref(),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn own_pod_is_the_one_whose_cgroup_holds_the_agent() {
        let own = |cgroup: &str| OwnPod {
            cgroup: Some(cgroup.into()),
            excluded: None,
        };
        let pods = [
            ("a", "/kubepods/besteffort/poda"),
            ("ab", "/kubepods/besteffort/podab"),
            ("b", "/kubepods/burstable/podb"),
        ];
        let cases = [
            (
                "in a container of pod a",
                "/kubepods/besteffort/poda/ctr",
                Some("a"),
            ),
            (
                "in pod a's own cgroup",
                "/kubepods/besteffort/poda",
                Some("a"),
            ),
            (
                "a longer name is another pod",
                "/kubepods/besteffort/podab/c",
                Some("ab"),
            ),
            ("outside kubepods", "/system.slice/monitor.service", None),
            ("in kubepods but no pod", "/kubepods/besteffort", None),
        ];
        for (name, cgroup, want) in cases {
            assert_eq!(own(cgroup).find(pods.iter().copied()), want, "{name}");
        }
        assert_eq!(
            OwnPod::default().find(pods.iter().copied()),
            None,
            "own cgroup unknown"
        );
        assert_eq!(
            own("/anything").find([("root", "/")].into_iter()),
            None,
            "a pod at the hierarchy root would hold everything"
        );
    }
}
