//! The programs' configuration maps' contents: stat item numbers from BTF, the page size,
//! the per-CPU budget, and the incident programs' settings.
use monitor_common::{Config, IncidentConfig, NO_ITEM, NSTATS, Stat};

use super::{IncidentOptions, LoadError, LoadOptions, default_budget_pages, memcg_offsets};
use crate::{
    node::read::page_size,
    source::btf::{self, Types},
};

/// The programs' configuration for this kernel: its stat item numbers ([`stat_items`]) and
/// the options.
pub(super) fn config_for(btf: &Types<'_>, options: LoadOptions) -> Result<Config, LoadError> {
    let mut config = Config::EMPTY;
    stat_items(btf, &mut config)?;
    config.step_bytes = options.step_bytes.max(1);
    config.page_size = page_size();
    config.hierarchy_id = options.hierarchy_id;
    config.budget_pages = options.budget_pages.unwrap_or_else(|| {
        default_budget_pages(config.step_bytes, config.page_size, possible_cpus())
    });
    Ok(config)
}

/// Fills in the kernel's item numbers of the tracked stats, from BTF: they differ between
/// kernels, and a kernel without one (5.10 has no `MEMCG_KMEM`; it came in 5.11) cannot run
/// the programs, which the loader says and `monitor doctor` predicts.
pub(crate) fn stat_items(btf: &Types<'_>, config: &mut Config) -> Result<(), LoadError> {
    let node = btf.enum_values("node_stat_item")?;
    let memcg = btf.enum_values("memcg_stat_item")?;
    for stat in Stat::ALL {
        let slot = stat as usize;
        let (lruvec, memcg_item) = match stat {
            Stat::Anon => (Some("NR_ANON_MAPPED"), None),
            Stat::File => (Some("NR_FILE_PAGES"), None),
            Stat::InactiveFile => (Some("NR_INACTIVE_FILE"), None),
            Stat::ActiveFile => (Some("NR_ACTIVE_FILE"), None),
            Stat::Kernel => (None, Some("MEMCG_KMEM")),
        };
        config.lruvec_items[slot] = match lruvec {
            Some(name) => item(btf::variant(&node, "node_stat_item", name)?),
            None => NO_ITEM,
        };
        config.memcg_items[slot] = match memcg_item {
            Some(name) => item(btf::variant(&memcg, "memcg_stat_item", name)?),
            None => NO_ITEM,
        };
    }
    debug_assert_eq!(config.lruvec_items.len(), NSTATS);
    Ok(())
}

/// The incident programs' settings. A memory controller on its own v1 hierarchy (id > 0) needs
/// the task -> memory cgroup offsets for the current task; on v2 the programs ask the kernel
/// for its cgroup id. The OOM victim's program needs them on both.
pub(super) fn incident_config_for(
    btf: &Types<'_>,
    options: LoadOptions,
    incidents: IncidentOptions,
) -> Result<IncidentConfig, LoadError> {
    let mut config = IncidentConfig::EMPTY;
    config.min_stall_ns = u64::try_from(incidents.min_stall.as_nanos())
        .unwrap_or(u64::MAX)
        .max(1);
    Ok(memcg_offsets::task_offsets(
        btf,
        config,
        options.hierarchy_id > 0,
    )?)
}

fn item(value: i64) -> i32 {
    i32::try_from(value).unwrap_or(NO_ITEM)
}

/// CPUs the per-CPU maps have a slot for; 1 if the kernel does not say (a budget too small
/// costs speed, never accuracy).
fn possible_cpus() -> usize {
    aya::util::nr_cpus().unwrap_or(1)
}
