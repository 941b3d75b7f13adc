//! The node's CPUs: online, as the agent counts them for its default stat-gate distance,
//! and possible, as the kernel sizes its per-CPU maps.

/// The CPUs online (`/sys/devices/system/cpu/online`).
pub fn online_cpus() -> u64 {
    cpus_in("online")
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

/// MiB above the agent's default `--attach-within` on this node, while it has seen no faster
/// fall: each CPU at 2 GiB/s over 200 ms, the 100 ms guard read and as long again for a read
/// of every pod (a few ms in a test scene).
pub fn attach_distance_bound_mib() -> u64 {
    online_cpus() * 2048 / 5
}
