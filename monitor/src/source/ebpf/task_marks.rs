//! The memory cgroups in which tasks were created, ended or arrived, as the fork, exit and
//! attach programs mark them (`TASK_CGROUPS`), so the PID ranking re-counts only the pods
//! that changed.
use aya::maps::{Array, HashMap, MapError};
use monitor_common::WakeSlot;

use super::{KernelSource, missing_map};

/// What the kernel can tell of the cgroups whose tasks changed since the last take.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TaskCgroups {
    /// Exactly these cgroup ids (possibly none) saw a task created, ending or arriving.
    Marked(Vec<u64>),
    /// Some change may have gone unmarked (marks just turned on, the map was full, a
    /// cgroup unreadable, or the map could not be read): count every pod.
    Unknown,
}

/// Whether marks are made and whether the first take since turning them on is still ahead.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum MarkState {
    /// Userspace has not asked (or the programs cannot mark: see
    /// [`KernelSource::marks_task_cgroups`]).
    #[default]
    Off,
    /// Marks are made; the changes before they began are not among them.
    JustOn,
    On,
}

impl KernelSource {
    /// Whether the programs can mark task cgroups here: the three task programs attached and the
    /// task -> memory cgroup offsets written (the agent's and `trace`'s loads).
    pub fn marks_task_cgroups(&self) -> bool {
        self.incidents
            && [
                "sched_process_fork",
                "sched_process_exit",
                "cgroup_attach_task",
            ]
            .iter()
            .all(|name| self.attached.iter().any(|p| p.name == *name))
    }

    /// Asks the programs to mark (or stop marking) task cgroups; a repeat of the last
    /// request writes nothing. False when they cannot mark here.
    pub fn watch_task_cgroups(&mut self, on: bool) -> Result<bool, MapError> {
        if !self.marks_task_cgroups() {
            return Ok(false);
        }
        if on == (self.task_marks != MarkState::Off) {
            return Ok(true);
        }
        let mut wake =
            Array::<_, i64>::try_from(self.ebpf.map_mut("WAKE").ok_or_else(missing_map)?)?;
        wake.set(WakeSlot::TaskCgroupsOn as u32, i64::from(on), 0)?;
        if on {
            self.task_marks = MarkState::JustOn;
        } else {
            self.task_marks = MarkState::Off;
            // Left in the map they would fill it before marks come back on.
            if let Err(e) = self.drain_marks() {
                tracing::debug!("clearing the kernel's task cgroup marks: {e}");
            }
        }
        Ok(true)
    }

    /// Takes (and clears) the marks made since the last take. Each mark is removed before
    /// the caller reads the pod it names, so a change after the read is marked again. With
    /// marks off, `Unknown` without a look at the kernel's maps.
    pub fn take_task_cgroups(&mut self) -> TaskCgroups {
        let state = self.task_marks;
        match state {
            MarkState::Off => return TaskCgroups::Unknown,
            MarkState::JustOn => self.task_marks = MarkState::On,
            MarkState::On => {}
        }
        match self.drain_marks() {
            Ok((marked, false)) if state == MarkState::On => TaskCgroups::Marked(marked),
            Ok(_) => TaskCgroups::Unknown,
            Err(e) => {
                tracing::debug!("reading the kernel's task cgroup marks: {e}");
                TaskCgroups::Unknown
            }
        }
    }

    /// The marked ids, removed from the map, and whether a mark was lost since the last drain.
    fn drain_marks(&mut self) -> Result<(Vec<u64>, bool), MapError> {
        let mut wake =
            Array::<_, i64>::try_from(self.ebpf.map_mut("WAKE").ok_or_else(missing_map)?)?;
        // Cleared first: a mark lost from now on is seen at the next drain.
        let lost = wake.get(&(WakeSlot::TaskCgroupsLost as u32), 0)? != 0;
        if lost {
            wake.set(WakeSlot::TaskCgroupsLost as u32, 0, 0)?;
        }
        let mut marks = HashMap::<_, u64, u8>::try_from(
            self.ebpf.map_mut("TASK_CGROUPS").ok_or_else(missing_map)?,
        )?;
        let ids: Vec<u64> = marks.keys().collect::<Result<_, _>>()?;
        for id in &ids {
            match marks.remove(id) {
                Err(MapError::SyscallError(e))
                    if e.io_error.raw_os_error() == Some(libc::ENOENT) => {}
                other => other?,
            }
        }
        Ok((ids, lost))
    }
}
