//! Where the kernel keeps a task's memory cgroup, from the running kernel's BTF.
//!
//! On cgroup v1 the incident programs read `task->cgroups->subsys[memory_cgrp_id]->cgroup->kn->id`
//! with `bpf_probe_read_kernel`; the member offsets differ between kernel builds, so they are
//! resolved here from the type records [`crate::source::btf`] locates, and written into `IncidentConfig`.
use monitor_common::IncidentConfig;

use crate::source::{
    btf::{self, BtfError, Types},
    struct_members::{MemberOffsets as _, OffsetError},
};

/// `IncidentConfig` with the v1 memory cgroup offsets filled in.
pub(super) fn v1_offsets(
    types: &Types<'_>,
    mut config: IncidentConfig,
) -> Result<IncidentConfig, OffsetError> {
    let subsys = types.enum_values("cgroup_subsys_id")?;
    let memory = btf::variant(&subsys, "cgroup_subsys_id", "memory_cgrp_id")?;
    config.memcg_v1 = 1;
    config.memory_subsys = u32::try_from(memory).map_err(|_| BtfError::Truncated(0))?;
    config.task_cgroups = types.member_offset("task_struct", "cgroups")?;
    config.css_set_subsys = types.member_offset("css_set", "subsys")?;
    config.css_cgroup = types.member_offset("cgroup_subsys_state", "cgroup")?;
    config.cgroup_kn = types.member_offset("cgroup", "kn")?;
    config.kernfs_id = types.member_offset("kernfs_node", "id")?;
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
        let config = v1_offsets(&Types::parse(&btf).unwrap(), IncidentConfig::EMPTY).unwrap();
        assert_eq!(config.memcg_v1, 1);
        assert!(
            config.task_cgroups > 0 && config.cgroup_kn > 0,
            "{config:?}"
        );
        assert_eq!(
            config.css_cgroup, 0,
            "css->cgroup is the first member of every kernel since 3.x"
        );
    }
}
