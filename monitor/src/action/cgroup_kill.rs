//! Ending every process of a pod's cgroup subtree, the way a runtime stops a pod: SIGTERM,
//! a grace period, then force.
//!
//! * Every process listed in the `cgroup.procs` of any cgroup in the subtree gets SIGTERM,
//!   and so does any process that shows up there during the grace period. On v1 `cgroup.procs`
//!   lists the process of every task in the cgroup, and a signal to a process reaches all its
//!   threads, so this covers every task. SIGCONT follows, as systemd sends it: a stopped
//!   process (SIGSTOP, a debugger gone) would handle SIGTERM only once continued, and so would
//!   drain for none of its grace period.
//! * Once a process's signal is queued, the freezer that holds it is thawed, no more than the
//!   pod's own processes ([`super::freezer`]): a task frozen by a v1 freezer takes not even
//!   SIGKILL, and one frozen on v2 cannot drain.
//! * After the grace period: on v2 `cgroup.kill` (kernel 5.14+), which also catches processes
//!   forking meanwhile; on v1, or without `cgroup.kill`, SIGKILL to every remaining process,
//!   repeated until the subtree is empty. Each process force ended is then reaped
//!   ([`super::reap`]): its memory comes back at once, not when its last thread exits.
//! * It returns once every `cgroup.procs` in the subtree is empty and the processes it
//!   signalled are reaped, or [`REAP_WAIT`] after the subtree emptied: an exited process
//!   leaves its cgroup at once but stays a zombie until its parent waits for it, and zombies
//!   count in the node's task count, so `pid.available` read earlier still shows the pod's
//!   processes and would lead to a second eviction ([`KillTimings::reap_wait`]). Force is
//!   always used once
//!   the grace period is over, however long the caller is willing to wait for the pod to go:
//!   a pod that ignores SIGTERM never outlives its eviction. Only processes that survive
//!   force for [`KillTimings::force_for`] are reported as left over, each with why (frozen
//!   where it could not be thawed, asleep in the kernel): their SIGKILL stays pending.
//!
//! A pid read from `cgroup.procs` may exit and be reused by an unrelated process before the
//! signal. So each process is first pinned with a pidfd, then its membership is checked in
//! /proc/<pid>/cgroup, and the signal goes through the pidfd: only a process verified to be
//! inside the subtree is ever signalled, and never pid 0, pid 1 or this agent itself.
use std::{
    collections::HashSet,
    fs,
    io::{self, Write as _},
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
    path::{Path, PathBuf},
    time::Duration,
};

use tokio::{sync::Notify, time::Instant};

use crate::{
    cgroupfs::{
        CgroupVersion, MemoryHierarchy,
        procs::{is_gone, subtree_pids},
    },
    engine::ids::is_within,
};

use super::{
    freezer::{Pinned, Thawer},
    reap::reap,
    stuck::{StuckProcess, stat_state},
};

/// How often the subtree is checked for being empty.
const POLL: Duration = Duration::from_millis(20);
/// How long an emptied subtree's signalled processes may stay zombies, after a decision on
/// `pid.available`, before the kill is reported done anyway (a parent that never waits for
/// its children).
pub const REAP_WAIT: Duration = Duration::from_secs(5);

/// How long to wait at each step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KillTimings {
    /// Time between SIGTERM and force (the pod's termination grace period, or what is left
    /// of it when an interrupted eviction is resumed).
    pub grace: Duration,
    /// How long force is repeated after the grace period before the call reports the
    /// processes that are still there and returns.
    pub force_for: Duration,
    /// How long the processes signalled may stay unreaped (zombies) once the subtree is
    /// empty: [`REAP_WAIT`] after a decision on `pid.available`, whose next reading must
    /// not count them; zero otherwise (a zombie holds no memory).
    pub reap_wait: Duration,
    /// Whether SIGTERM is sent: false when an eviction interrupted by a restart is resumed,
    /// whose SIGTERM went out before it (a second one makes many servers quit their drain).
    pub terminate: bool,
}

/// How the kill ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KillOutcome {
    /// Every `cgroup.procs` in the subtree is empty.
    Emptied,
    /// These processes were still in the subtree after force was repeated for
    /// [`KillTimings::force_for`], each with why.
    TimedOut { remaining: Vec<StuckProcess> },
}

/// What a kill did and how long it took.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KillReport {
    pub outcome: KillOutcome,
    /// From the start of the call to the subtree found empty, or to giving up.
    pub elapsed: Duration,
    /// Processes sent SIGTERM.
    pub terminated: usize,
    /// Whether the grace period ran out with processes left, so force was used.
    pub forced: bool,
}

/// Why a kill could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum KillError {
    /// Refused: the hierarchy root holds every process of the machine.
    #[error("refusing to kill the root cgroup")]
    RootCgroup,
    /// The path has `.`, `..` or empty components: it might name a cgroup other than the one
    /// it reads as, and `/proc/<pid>/cgroup` shows resolved paths only.
    #[error("refusing to kill {0:?}: not a normalised cgroup path")]
    NotNormalised(String),
    /// The pod's cgroup does not exist (any more).
    #[error("cgroup {0} does not exist")]
    NotFound(PathBuf),
    /// A cgroup directory or `cgroup.procs` could not be read.
    #[error("reading {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    /// `cgroup.kill` could not be written.
    #[error("writing {path}: {source}")]
    Write { path: PathBuf, source: io::Error },
    /// A process could not be signalled for a reason other than having exited.
    #[error("sending signal {signal} to pid {pid}: {source}")]
    Signal {
        pid: i32,
        signal: i32,
        source: io::Error,
    },
}

/// Kills every process in the cgroup `rel` (relative to the hierarchy root) and below it.
/// A notification on `force_now` ends the grace period at once (the node cannot afford the
/// rest of it).
pub async fn kill_cgroup_tree(
    hierarchy: &MemoryHierarchy,
    rel: &str,
    timings: KillTimings,
    force_now: &Notify,
) -> Result<KillReport, KillError> {
    let start = Instant::now();
    let rel = format!("/{}", rel.trim_matches('/'));
    if rel == "/" {
        return Err(KillError::RootCgroup);
    }
    if rel[1..].split('/').any(|c| matches!(c, "" | "." | "..")) {
        return Err(KillError::NotNormalised(rel));
    }
    let root = hierarchy.dir(&rel);
    if !root.is_dir() {
        return Err(KillError::NotFound(root));
    }
    let target = Target {
        hierarchy,
        rel: &rel,
        root: &root,
    };
    let mut thawer = Thawer::new(hierarchy, &rel);
    let owns = |pid| target.contains(pid);
    let mut grace_end = start + timings.grace;
    let mut terminated = HashSet::new();
    // Every process signalled, to wait for its reaping.
    let mut signalled = HashSet::new();
    let mut emptied_at = None;
    let mut forced = false;
    loop {
        let pids = target.pids()?;
        let now = Instant::now();
        let report = |outcome| KillReport {
            outcome,
            elapsed: now - start,
            terminated: terminated.len(),
            forced,
        };
        if pids.is_empty() {
            let emptied = *emptied_at.get_or_insert(now);
            signalled.retain(|&pid| is_zombie(pid));
            if signalled.is_empty() {
                return Ok(report(KillOutcome::Emptied));
            }
            if now >= emptied + timings.reap_wait {
                let mut zombies: Vec<i32> = signalled.iter().copied().collect();
                zombies.sort_unstable();
                tracing::warn!(
                    "{} processes of {rel} exited {:?} ago and are not reaped yet (zombies: \
                     their parent has not waited for them, {:?}); they still count in \
                     pid.available",
                    zombies.len(),
                    now - emptied,
                    &zombies[..zombies.len().min(8)]
                );
                return Ok(report(KillOutcome::Emptied));
            }
            tokio::time::sleep(POLL).await;
            continue;
        }
        emptied_at = None;
        signalled.extend(pids.iter().copied());
        if now < grace_end {
            let mut signalled_now = Vec::new();
            // A resumed eviction sent its SIGTERM before the restart: none a second time.
            for pid in pids.into_iter().filter(|_| timings.terminate) {
                if !terminated.contains(&pid)
                    && let Some(pinned) = target.terminate(pid)?
                {
                    terminated.insert(pid);
                    signalled_now.push(pinned);
                }
            }
            if !signalled_now.is_empty() {
                thawer.thaw(&signalled_now, &owns);
            }
        } else {
            // Force goes out at least once, however late this turn came.
            if forced && now >= grace_end + timings.force_for {
                let remaining = pids.iter().map(|&pid| thawer.diagnose(pid)).collect();
                return Ok(report(KillOutcome::TimedOut { remaining }));
            }
            forced = true;
            let killed = target.force(&pids)?;
            // Before the reaping, which frees only a process that is dying.
            thawer.thaw(&killed, &owns);
            if !killed.is_empty() {
                let killed: Vec<OwnedFd> = killed.into_iter().map(|p| p.fd).collect();
                // Off the agent's threads: reaping hundreds of MiB takes milliseconds.
                tokio::task::spawn_blocking(move || reap(&killed));
            }
        }
        let wake = if now < grace_end {
            grace_end.min(now + POLL)
        } else {
            now + POLL
        };
        tokio::select! {
            () = tokio::time::sleep_until(wake) => {}
            () = force_now.notified(), if now < grace_end => grace_end = Instant::now(),
        }
    }
}

/// The subtree being killed.
struct Target<'a> {
    hierarchy: &'a MemoryHierarchy,
    rel: &'a str,
    root: &'a Path,
}

impl Target<'_> {
    /// Every process in the subtree, sorted. Cgroups removed meanwhile count as empty.
    fn pids(&self) -> Result<Vec<i32>, KillError> {
        subtree_pids(self.root).map_err(|source| KillError::Read {
            path: self.root.to_path_buf(),
            source,
        })
    }

    /// Ends the remaining processes: `cgroup.kill` on v2 where the kernel has it, else
    /// SIGKILL; returns the processes it ended, for the thaw and [`reap`].
    fn force(&self, pids: &[i32]) -> Result<Vec<Pinned>, KillError> {
        let signal_error = |pid, source| KillError::Signal {
            pid,
            signal: libc::SIGKILL,
            source,
        };
        let mut pinned = Vec::with_capacity(pids.len());
        for &pid in pids {
            if let Some(pidfd) = self.pin(pid).map_err(|e| signal_error(pid, e))? {
                pinned.push((pid, pidfd));
            }
        }
        if self.hierarchy.version == CgroupVersion::V2 {
            let path = self.root.join("cgroup.kill");
            // Opened without O_CREAT: on a kernel without it (before 5.14) cgroupfs refuses
            // to create the file (EACCES), and only its absence (ENOENT) says to signal.
            let written = fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .and_then(|mut file| file.write_all(b"1"));
            match written {
                Ok(()) => {
                    return Ok(pinned
                        .into_iter()
                        .map(|(pid, fd)| Pinned { pid, fd })
                        .collect());
                }
                // Older kernel without cgroup.kill: fall back to signals.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) if is_gone(&e) => return Ok(Vec::new()),
                Err(source) => return Err(KillError::Write { path, source }),
            }
        }
        let mut killed = Vec::with_capacity(pinned.len());
        for (pid, fd) in pinned {
            if send(&fd, libc::SIGKILL).map_err(|e| signal_error(pid, e))? {
                killed.push(Pinned { pid, fd });
            }
        }
        Ok(killed)
    }

    /// Sends SIGTERM, then SIGCONT, to `pid` if it is verifiably inside the subtree; the
    /// process pinned, or `None` when it was not signalled (exited, or not ours).
    fn terminate(&self, pid: i32) -> Result<Option<Pinned>, KillError> {
        let signal_error = |signal, source| KillError::Signal {
            pid,
            signal,
            source,
        };
        let Some(fd) = self.pin(pid).map_err(|e| signal_error(libc::SIGTERM, e))? else {
            return Ok(None);
        };
        if !send(&fd, libc::SIGTERM).map_err(|e| signal_error(libc::SIGTERM, e))? {
            return Ok(None);
        }
        send(&fd, libc::SIGCONT).map_err(|e| signal_error(libc::SIGCONT, e))?;
        Ok(Some(Pinned { pid, fd }))
    }

    /// A pidfd pinning `pid` once it is verified inside the subtree; `None` for a process
    /// that exited, is not ours, or is pid 0, pid 1 or this agent.
    fn pin(&self, pid: i32) -> io::Result<Option<OwnedFd>> {
        // SAFETY: getpid has no preconditions.
        if pid <= 1 || pid == unsafe { libc::getpid() } {
            return Ok(None);
        }
        let Some(pidfd) = pidfd_open(pid)? else {
            return Ok(None);
        };
        Ok(self.contains(pid).then_some(pidfd))
    }

    /// Whether /proc/<pid>/cgroup puts the process inside the subtree, for this hierarchy.
    fn contains(&self, pid: i32) -> bool {
        let Ok(text) = fs::read_to_string(format!("/proc/{pid}/cgroup")) else {
            return false;
        };
        member_path(&text, self.hierarchy.version).is_some_and(|path| is_within(path, self.rel))
    }
}

/// The memory cgroup path in /proc/<pid>/cgroup text: the v1 line whose controllers include
/// `memory`, or the v2 line with hierarchy id 0.
fn member_path(proc_cgroup: &str, version: CgroupVersion) -> Option<&str> {
    proc_cgroup.lines().find_map(|line| {
        let mut fields = line.splitn(3, ':');
        let (id, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        let ours = match version {
            CgroupVersion::V1 => controllers.split(',').any(|c| c == "memory"),
            CgroupVersion::V2 => id == "0" && controllers.is_empty(),
        };
        ours.then_some(path)
    })
}

/// Whether `pid` has exited but is not reaped: state `Z` in /proc/<pid>/stat. A pid reused
/// since by a live process is not.
fn is_zombie(pid: i32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| stat_state(&stat) == Some('Z'))
}

/// Sends `signal` through a pidfd; false when the process has already exited.
fn send(pidfd: &OwnedFd, signal: i32) -> io::Result<bool> {
    // SAFETY: a valid pidfd, a null siginfo (as for kill(2)), no flags.
    let sent = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    match sent {
        0 => Ok(true),
        _ => match io::Error::last_os_error() {
            e if e.raw_os_error() == Some(libc::ESRCH) => Ok(false),
            e => Err(e),
        },
    }
}

/// A pidfd pinning `pid`, or `None` when the process has already exited.
fn pidfd_open(pid: i32) -> io::Result<Option<OwnedFd>> {
    // SAFETY: plain syscall with integer arguments; the result is checked.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        let error = io::Error::last_os_error();
        return if error.raw_os_error() == Some(libc::ESRCH) {
            Ok(None)
        } else {
            Err(error)
        };
    }
    // SAFETY: a new descriptor nobody else owns.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(fd as i32) }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_process_is_no_zombie_and_an_unreaped_child_is() {
        assert!(!is_zombie(std::process::id() as i32));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !is_zombie(pid) {
            assert!(std::time::Instant::now() < deadline, "never a zombie");
            std::thread::sleep(Duration::from_millis(5));
        }
        child.wait().unwrap();
        assert!(!is_zombie(pid), "reaped");
    }

    #[test]
    fn membership_is_read_from_the_memory_line() {
        let v1 = "12:pids:/user.slice\n4:memory:/kubepods/burstable/pod1\n1:name=systemd:/x\n0::/init.scope\n";
        let combined = "7:cpu,memory:/kubepods/pod2\n";
        let v2 = "0::/kubepods.slice/kubepods-pod3.slice/cri-containerd-abc.scope\n";
        let cases = [
            (
                "v1 memory line",
                v1,
                CgroupVersion::V1,
                Some("/kubepods/burstable/pod1"),
            ),
            (
                "v1 co-mounted controllers",
                combined,
                CgroupVersion::V1,
                Some("/kubepods/pod2"),
            ),
            (
                "v2 unified line",
                v1,
                CgroupVersion::V2,
                Some("/init.scope"),
            ),
            (
                "v2 only",
                v2,
                CgroupVersion::V2,
                Some("/kubepods.slice/kubepods-pod3.slice/cri-containerd-abc.scope"),
            ),
            ("v1 without memory", v2, CgroupVersion::V1, None),
        ];
        for (name, text, version, want) in cases {
            assert_eq!(member_path(text, version), want, "{name}");
        }
    }

    #[tokio::test]
    async fn the_root_cgroup_and_missing_cgroups_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let hierarchy = MemoryHierarchy {
            version: CgroupVersion::V2,
            mount: tmp.path().into(),
            hierarchy_id: 0,
        };
        let timings = KillTimings {
            grace: Duration::ZERO,
            force_for: Duration::ZERO,
            reap_wait: Duration::ZERO,
            terminate: true,
        };
        for root in ["/", "", "//"] {
            let refused = kill_cgroup_tree(&hierarchy, root, timings, &Notify::new()).await;
            assert!(
                matches!(refused, Err(KillError::RootCgroup)),
                "{root:?}: {refused:?}"
            );
        }
        for crafted in [
            "/kubepods/podx/../../outside",
            "/kubepods/./podx",
            "/kubepods//podx",
        ] {
            let refused = kill_cgroup_tree(&hierarchy, crafted, timings, &Notify::new()).await;
            assert!(
                matches!(refused, Err(KillError::NotNormalised(_))),
                "{crafted:?}: {refused:?}"
            );
        }
        let missing = kill_cgroup_tree(&hierarchy, "/kubepods/podx", timings, &Notify::new()).await;
        assert!(
            matches!(missing, Err(KillError::NotFound(_))),
            "{missing:?}"
        );
    }

    #[test]
    fn pid_one_and_this_process_are_never_signalled() {
        let hierarchy = MemoryHierarchy {
            version: CgroupVersion::V2,
            mount: "/".into(),
            hierarchy_id: 0,
        };
        // The whole hierarchy as the target: only the pid guard can refuse.
        let target = Target {
            hierarchy: &hierarchy,
            rel: "/",
            root: Path::new("/"),
        };
        for pid in [0, 1, std::process::id() as i32] {
            assert!(target.pin(pid).unwrap().is_none(), "pid {pid}");
        }
    }
}
