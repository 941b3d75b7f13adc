//! The node's CPUs: online, as the agent counts them for its default stat-gate distance,
//! and possible, as the kernel sizes its per-CPU maps.

use monitor::engine::attach_distance::AttachDistance;

/// The CPUs online, counted as the agent counts them (`sysconf`).
pub fn online_cpus() -> u64 {
    // SAFETY: sysconf has no preconditions.
    u64::try_from(unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }).map_or(1, |n| n.max(1))
}

/// The CPUs the kernel's per-CPU maps have a slot for (`/sys/devices/system/cpu/possible`).
pub fn possible_cpus() -> u64 {
    cpus_in("possible")
}

/// How many CPUs a list of `/sys/devices/system/cpu` holds (`0-1`, `0,2-5`, ...).
fn cpus_in(list: &str) -> u64 {
    let path = format!("/sys/devices/system/cpu/{list}");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    text.trim()
        .split(',')
        .map(|range| match range.split_once('-') {
            Some((first, last)) => {
                last.parse::<u64>().expect("a CPU number")
                    - first.parse::<u64>().expect("a CPU number")
                    + 1
            }
            None => 1,
        })
        .sum()
}

/// MiB at or above the agent's default `--attach-within` on this node, while it has seen no
/// faster fall: the engine's distance before a read of every pod was timed (each CPU at
/// 2 GiB/s over the 100 ms guard read and a 100 ms allowance for the read; a timed read in a
/// test scene takes a few ms).
pub fn attach_distance_bound_mib() -> u64 {
    let cpus = usize::try_from(online_cpus()).unwrap_or(usize::MAX);
    AttachDistance::new(cpus).distance() >> 20
}
