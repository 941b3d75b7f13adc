//! Frozen victims: a kill thaws what it kills, and nothing else.
//!
//! A task in a frozen cgroup v1 freezer (`freezer.state` FROZEN, or FREEZING on its way
//! there) takes no signal, not even SIGKILL, until it is thawed: its memory stays while the
//! node waits. In a frozen cgroup v2 (`cgroup.freeze`) a fatal signal still ends a task, so
//! force works, but SIGTERM is not handled and the pod cannot drain. Checkpoint tools (CRIU)
//! and pause commands (`runc pause`, `ctr task pause`, `docker pause`) freeze this way.
//!
//! So once a victim's processes have their signal queued, what freezes them is lifted, and
//! no more than that:
//! * v1: a process is frozen by its own freezer cgroup or by any ancestor of it, whichever
//!   has `freezer.self_freezing` 1 (a child of a frozen cgroup reads FROZEN too, but thawing
//!   the child changes nothing). Each of those is thawed (`THAWED` into `freezer.state`) only
//!   when every process in its subtree belongs to the victim pod, checked in /proc/PID/cgroup
//!   as for the signals, so no other process is ever thawed. When one also holds another
//!   process (a freezer shared with other pods, a frozen parent of the pod's cgroup) or
//!   cannot be written, the victim's processes alone are moved into the freezer hierarchy's
//!   root, which is never frozen: the kernel thaws a task that joins a thawed freezer cgroup.
//!   That changes no other process's freezer, and is done only where the freezer hierarchy
//!   holds no other controller (were memory mounted with it, the process would leave the
//!   pod's memory cgroup too).
//! * v2: `cgroup.freeze` 1 inside the pod's subtree is set to 0. A frozen ancestor holds
//!   other pods and is left frozen: the pod's processes cannot drain, and force ends them.
//!
//! A freezer cgroup removed meanwhile had its tasks leave it first: they are looked up again
//! at the next round. What could not be thawed is kept, to say why a process outlived force
//! ([`Thawer::diagnose`]).
use std::{
    collections::{BTreeMap, HashMap, HashSet},
    fs, io,
    os::fd::{AsRawFd as _, OwnedFd},
    path::{Path, PathBuf},
};

use super::stuck::{StuckCause, StuckProcess};
use crate::cgroupfs::{
    CgroupVersion, MemoryHierarchy,
    hierarchy::v1_controller_mount,
    procs::{is_gone, subtree_dirs, subtree_pids},
};

/// A victim's process, pinned by its pidfd, with its signal queued.
pub(crate) struct Pinned {
    pub pid: i32,
    pub fd: OwnedFd,
}

/// Thaws the frozen processes of one kill, and remembers what it could not thaw.
pub(crate) struct Thawer {
    hierarchy: MemoryHierarchy,
    /// The pod's cgroup, relative to the memory hierarchy's root.
    rel: String,
    /// The v1 freezer hierarchy's mount point, looked up once (`Some(None)`: not mounted).
    freezer_mount: Option<Option<PathBuf>>,
    /// Why a frozen cgroup could not be thawed, by its path.
    refused: HashMap<String, String>,
    /// What was logged already, so a cgroup frozen again while the kill runs is said once.
    logged: HashSet<String>,
}

impl Thawer {
    pub(crate) fn new(hierarchy: &MemoryHierarchy, rel: &str) -> Self {
        Self {
            hierarchy: hierarchy.clone(),
            rel: rel.to_string(),
            freezer_mount: None,
            refused: HashMap::new(),
            logged: HashSet::new(),
        }
    }

    /// Thaws what freezes `victims`, whose signal is queued; `owns` says whether a pid is
    /// verifiably one of the pod's processes.
    pub(crate) fn thaw(&mut self, victims: &[Pinned], owns: &dyn Fn(i32) -> bool) {
        match self.hierarchy.version {
            CgroupVersion::V1 => self.thaw_v1(victims, owns),
            CgroupVersion::V2 => self.thaw_v2(),
        }
    }

    fn thaw_v1(&mut self, victims: &[Pinned], owns: &dyn Fn(i32) -> bool) {
        // The victims by freezer cgroup, with whether that hierarchy holds the freezer alone.
        let mut by_cgroup: BTreeMap<String, (bool, Vec<&Pinned>)> = BTreeMap::new();
        for victim in victims {
            let Ok(text) = fs::read_to_string(format!("/proc/{}/cgroup", victim.pid)) else {
                continue;
            };
            if let Some((alone, path)) = freezer_line(&text)
                && path != "/"
            {
                let entry = by_cgroup
                    .entry(path.to_string())
                    .or_insert((alone, Vec::new()));
                entry.1.push(victim);
            }
        }
        if by_cgroup.is_empty() {
            return;
        }
        let Some(mount) = self.freezer_mount() else {
            for path in by_cgroup.keys() {
                self.refused.insert(
                    path.clone(),
                    "no cgroup v1 freezer hierarchy is mounted where the agent runs, so it \
                     can neither read nor thaw it"
                        .into(),
                );
            }
            return;
        };
        for (path, (alone, members)) in by_cgroup {
            self.thaw_freezer_cgroup(&mount, &path, alone, &members, owns);
        }
    }

    /// Thaws what freezes the victims in the freezer cgroup `path`, or moves them out of it.
    fn thaw_freezer_cgroup(
        &mut self,
        mount: &Path,
        path: &str,
        alone: bool,
        members: &[&Pinned],
        owns: &dyn Fn(i32) -> bool,
    ) {
        if path.split('/').any(|c| c == "..") {
            self.refused.insert(
                path.into(),
                "the freezer cgroup lies outside this agent's cgroup namespace".into(),
            );
            return;
        }
        let state = match read_word(&cgroup_dir(mount, path).join("freezer.state")) {
            Ok(state) => state,
            Err(e) if is_gone(&e) => return,
            Err(e) => {
                self.refused
                    .insert(path.into(), format!("reading its state: {e}"));
                return;
            }
        };
        if state == "THAWED" {
            self.refused.remove(path);
            return;
        }
        let freezing = self_freezing(mount, path);
        if freezing.is_empty() {
            // Thawed from above meanwhile: the next round reads it again.
            return;
        }
        let why_move = match freezing.iter().find_map(|c| others_in(mount, c, owns)) {
            Some((cgroup, other)) => format!(
                "freezer cgroup {cgroup} also freezes processes outside the pod ({other}), which \
                 stay frozen"
            ),
            None => match thaw_all(mount, &freezing) {
                Ok(()) => {
                    self.refused.remove(path);
                    if self.logged.insert(format!("thawed {path}")) {
                        tracing::info!(
                            freezer_cgroup = path,
                            "thawed freezer cgroup {} (it was {state}) so the processes of pod \
                             cgroup {} take their signals (a frozen process takes none, not even \
                             SIGKILL); it holds no other process",
                            freezing.join(", "),
                            self.rel
                        );
                    }
                    return;
                }
                Err(e) => format!("thawing it failed: {e}"),
            },
        };
        if !alone {
            self.refused.insert(
                path.into(),
                format!(
                    "{why_move}; its processes are not moved out either, as the freezer is \
                     mounted with other controllers"
                ),
            );
            return;
        }
        let mut moved = Vec::new();
        for member in members {
            // A pid is written, not a pidfd: only while the process lives is it still ours.
            if exited(&member.fd) {
                continue;
            }
            match fs::write(mount.join("cgroup.procs"), member.pid.to_string()) {
                Ok(()) => moved.push(member.pid),
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                Err(e) => {
                    self.refused.insert(
                        path.into(),
                        format!("{why_move}; moving its processes out failed too: {e}"),
                    );
                    return;
                }
            }
        }
        self.refused.remove(path);
        if !moved.is_empty() && self.logged.insert(format!("moved {path}")) {
            tracing::warn!(
                freezer_cgroup = path,
                "processes {moved:?} of pod cgroup {} moved out of freezer cgroup {path} \
                 ({state}) into the freezer hierarchy's root, which thaws them: {why_move}",
                self.rel
            );
        }
    }

    /// Unfreezes the pod's own cgroups; a frozen cgroup above the pod is said, not touched.
    fn thaw_v2(&mut self) {
        let pod_dir = self.hierarchy.dir(&self.rel);
        for dir in subtree_dirs(&pod_dir).unwrap_or_default() {
            let freeze = dir.join("cgroup.freeze");
            if read_word(&freeze).is_ok_and(|w| w == "1") {
                let cgroup = self.rel_of(&dir);
                match fs::write(&freeze, "0") {
                    Ok(()) => {
                        self.refused.remove(&cgroup);
                        if self.logged.insert(format!("thawed {cgroup}")) {
                            tracing::info!(
                                frozen_cgroup = %cgroup,
                                "thawed cgroup {cgroup} (cgroup.freeze was 1), so the \
                                 processes of pod cgroup {} handle SIGTERM and drain",
                                self.rel
                            );
                        }
                    }
                    Err(e) if is_gone(&e) => {}
                    Err(e) => {
                        self.refused
                            .insert(cgroup, format!("thawing it failed: {e}"));
                    }
                }
            }
        }
        let mut above = self.rel.as_str();
        while let Some((parent, _)) = above.rsplit_once('/')
            && !parent.is_empty()
        {
            above = parent;
            if read_word(&self.hierarchy.dir(parent).join("cgroup.freeze")).is_ok_and(|w| w == "1")
                && self.logged.insert(format!("frozen above {parent}"))
            {
                tracing::warn!(
                    frozen_cgroup = parent,
                    "cgroup {parent} above pod cgroup {} is frozen (cgroup.freeze 1) and \
                     holds more than this pod: left frozen, so the pod's processes handle \
                     SIGTERM only once it is thawed; force ends them anyway",
                    self.rel
                );
            }
        }
    }

    /// Why `pid` outlived force: frozen where it could not be thawed, asleep in the kernel,
    /// or the state /proc says.
    pub(crate) fn diagnose(&self, pid: i32) -> StuckProcess {
        let proc_file = |name: &str| {
            fs::read_to_string(format!("/proc/{pid}/{name}")).map(|s| s.trim().to_string())
        };
        let comm = proc_file("comm").unwrap_or_default();
        let frozen = proc_file("cgroup")
            .ok()
            .and_then(|text| self.frozen_cause(&text));
        let cause = frozen.unwrap_or_else(|| {
            let state = proc_file("stat")
                .ok()
                .and_then(|stat| super::stuck::stat_state(&stat))
                .unwrap_or('?');
            match state {
                'D' => StuckCause::Uninterruptible {
                    wchan: proc_file("wchan").unwrap_or_default(),
                },
                state => StuckCause::Other { state },
            }
        });
        StuckProcess { pid, comm, cause }
    }

    /// The process is frozen, as its /proc/PID/cgroup text places it: why it stayed so.
    fn frozen_cause(&self, proc_cgroup: &str) -> Option<StuckCause> {
        let (cgroup, state) = match self.hierarchy.version {
            CgroupVersion::V1 => {
                let (_, path) = freezer_line(proc_cgroup).filter(|(_, path)| *path != "/")?;
                let state = self
                    .freezer_mount
                    .clone()
                    .flatten()
                    .and_then(|mount| {
                        read_word(&cgroup_dir(&mount, path).join("freezer.state")).ok()
                    })
                    .unwrap_or_else(|| "state unknown".into());
                (path.to_string(), state)
            }
            CgroupVersion::V2 => {
                let path = proc_cgroup.lines().find_map(|l| l.strip_prefix("0::"))?;
                let events = fs::read_to_string(self.hierarchy.dir(path).join("cgroup.events"));
                let frozen = events.is_ok_and(|e| e.lines().any(|l| l == "frozen 1"));
                (
                    path.to_string(),
                    if frozen { "frozen" } else { "THAWED" }.into(),
                )
            }
        };
        let why = self.refused.get(&cgroup).cloned();
        if why.is_none() && matches!(state.as_str(), "THAWED" | "state unknown") {
            return None;
        }
        Some(StuckCause::Frozen {
            why: why.unwrap_or_else(|| "frozen again after it was thawed".into()),
            cgroup,
            state,
        })
    }

    fn freezer_mount(&mut self) -> Option<PathBuf> {
        self.freezer_mount
            .get_or_insert_with(|| {
                let mountinfo = fs::read_to_string("/proc/self/mountinfo").ok()?;
                v1_controller_mount(&mountinfo, "freezer")
            })
            .clone()
    }

    /// A directory of the memory hierarchy as a cgroup path.
    fn rel_of(&self, dir: &Path) -> String {
        let below = dir.strip_prefix(&self.hierarchy.mount).unwrap_or(dir);
        format!("/{}", below.display())
    }
}

/// The freezer line of /proc/PID/cgroup text: whether its hierarchy holds the freezer alone,
/// and the path.
fn freezer_line(proc_cgroup: &str) -> Option<(bool, &str)> {
    proc_cgroup.lines().find_map(|line| {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        controllers
            .split(',')
            .any(|c| c == "freezer")
            .then_some((controllers == "freezer", path))
    })
}

/// The freezer cgroups whose own freezing holds tasks of `path`: it and its ancestors with
/// `freezer.self_freezing` 1, from the top; `path` alone where the kernel lacks that file.
fn self_freezing(mount: &Path, path: &str) -> Vec<String> {
    let mut chain = Vec::new();
    let mut at = path;
    loop {
        match read_word(&cgroup_dir(mount, at).join("freezer.self_freezing")) {
            Ok(word) if word == "1" => chain.push(at.to_string()),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound && at == path => {
                chain.push(at.to_string());
            }
            Err(_) => {}
        }
        match at.rsplit_once('/') {
            Some((parent, _)) if !parent.is_empty() => at = parent,
            _ => break,
        }
    }
    chain.reverse();
    chain
}

/// `(cgroup, which)` when the freezer cgroup `cgroup`'s subtree holds a process that is not
/// the pod's (the first found: a freezer over the whole node is not read through), or
/// cannot be listed.
fn others_in(mount: &Path, cgroup: &str, owns: &dyn Fn(i32) -> bool) -> Option<(String, String)> {
    let other = match subtree_pids(&cgroup_dir(mount, cgroup)) {
        Ok(pids) => pids
            .into_iter()
            .find(|&pid| !owns(pid))
            .map(|pid| format!("pid {pid} among them")),
        Err(e) => Some(format!("its processes cannot be listed: {e}")),
    };
    other.map(|other| (cgroup.to_string(), other))
}

/// Writes THAWED into each freezer cgroup; one removed meanwhile has nothing left to thaw.
fn thaw_all(mount: &Path, cgroups: &[String]) -> io::Result<()> {
    for cgroup in cgroups {
        let state = cgroup_dir(mount, cgroup).join("freezer.state");
        match fs::write(&state, "THAWED") {
            Ok(()) => {}
            Err(e) if is_gone(&e) => {}
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("writing {}: {e}", state.display()),
                ));
            }
        }
    }
    Ok(())
}

/// The directory of the freezer cgroup `path` (as /proc/PID/cgroup names it).
fn cgroup_dir(mount: &Path, path: &str) -> PathBuf {
    mount.join(path.trim_start_matches('/'))
}

/// A cgroup file's content, trimmed.
fn read_word(path: &Path) -> io::Result<String> {
    fs::read_to_string(path).map(|s| s.trim().to_string())
}

/// Whether the process behind `pidfd` has exited (its pidfd polls readable).
fn exited(pidfd: &OwnedFd) -> bool {
    let mut poll = libc::pollfd {
        fd: pidfd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no waiting.
    let ready = unsafe { libc::poll(&raw mut poll, 1, 0) };
    ready > 0 && poll.revents & libc::POLLIN != 0
}

#[cfg(test)]
mod tests;
