//! Where the kernel keeps a task's memory cgroup, from the running kernel's BTF.
//!
//! On cgroup v1 the incident programs read `task->cgroups->subsys[memory_cgrp_id]->cgroup->kn->id`
//! with `bpf_probe_read_kernel` for the current task, and on either version for the OOM
//! victim's task (with `task->pid` to key it); the member offsets differ between kernel builds,
//! so they are resolved here from the type records [`crate::source::btf`] locates, and written
//! into `IncidentConfig`.
use monitor_common::IncidentConfig;

use crate::source::{
    btf::{self, BtfError, Types},
    struct_members::{MemberOffsets as _, OffsetError},
};

/// `IncidentConfig` with the task -> memory cgroup offsets filled in; `memcg_v1` says the
/// current task's cgroup must be found that way too (the memory controller is on v1).
pub(super) fn task_offsets(
    types: &Types<'_>,
    mut config: IncidentConfig,
    memcg_v1: bool,
) -> Result<IncidentConfig, OffsetError> {
    let subsys = types.enum_values("cgroup_subsys_id")?;
    let memory = btf::variant(&subsys, "cgroup_subsys_id", "memory_cgrp_id")?;
    config.memcg_v1 = u32::from(memcg_v1);
    config.memory_subsys = u32::try_from(memory).map_err(|_| BtfError::Truncated(0))?;
    config.task_cgroups = types.member_offset("task_struct", "cgroups")?;
    config.css_set_subsys = types.member_offset("css_set", "subsys")?;
    config.css_cgroup = types.member_offset("cgroup_subsys_state", "cgroup")?;
    config.cgroup_kn = types.member_offset("cgroup", "kn")?;
    config.kernfs_id = types.member_offset("kernfs_node", "id")?;
    config.task_pid = types.member_offset("task_struct", "pid")?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_kernel_has_the_task_to_memcg_chain() {
        let Ok(btf) = std::fs::read("/sys/kernel/btf/vmlinux") else {
            test_skip::cannot_run(test_skip::Reason::Btf, "no /sys/kernel/btf/vmlinux");
            return;
        };
        let types = Types::parse(&btf).unwrap();
        let config = task_offsets(&types, IncidentConfig::EMPTY, true).unwrap();
        assert_eq!(config.memcg_v1, 1);
        assert!(
            config.task_cgroups > 0 && config.cgroup_kn > 0 && config.task_pid > 0,
            "{config:?}"
        );
        let v2 = task_offsets(&types, IncidentConfig::EMPTY, false).unwrap();
        assert_eq!(v2.memcg_v1, 0, "v2 asks the kernel for the current cgroup");
        assert_eq!(v2.task_pid, config.task_pid);
        assert_eq!(
            config.css_cgroup, 0,
            "css->cgroup is the first member of every kernel since 3.x"
        );
    }
}
