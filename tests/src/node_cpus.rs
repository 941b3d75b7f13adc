//! The node's CPUs, as the agent counts them for its default stat-gate distance.

/// The CPUs online (`/sys/devices/system/cpu/online`).
pub fn online_cpus() -> u64 {
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").expect("online CPUs");
    online
        .trim()
        .split(',')
        .map(|range| match range.split_once('-') {
            Some((a, b)) => b.parse::<u64>().unwrap() - a.parse::<u64>().unwrap() + 1,
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
