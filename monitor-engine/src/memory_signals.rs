//! The memory signals from their inputs, as the kubelet's `makeSignalObservations` derives
//! them from the Summary API:
//! * `memory.available` = capacity - node working set, capacity being `MemTotal`;
//! * `allocatableMemory.available` = allocatable - working set of the kubepods cgroup, with
//!   allocatable as capacity.
//!
//! The kubelet computes these in unsigned arithmetic; here a working set above the capacity
//! gives a negative `available`, which meets every threshold, instead of wrapping around.
use crate::threshold::SignalObservation;

/// Memory limits above this are "unlimited", as the kubelet's `isMemoryUnlimited` has it: the
/// kernel rounds an unset v1 limit to a page multiple just below 2^63.
pub(crate) const UNLIMITED_ABOVE: u64 = 1 << 62;

/// A cgroup's memory limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryLimit {
    Bytes(u64),
    Unlimited,
}

impl MemoryLimit {
    /// The limit in bytes, `None` when there is none.
    pub fn bytes(self) -> Option<u64> {
        match self {
            MemoryLimit::Bytes(bytes) => Some(bytes),
            MemoryLimit::Unlimited => None,
        }
    }
}

/// Parses v1 `memory.limit_in_bytes` or v2 `memory.max`.
pub fn parse_memory_limit(text: &str) -> Option<MemoryLimit> {
    match text.trim() {
        "max" => Some(MemoryLimit::Unlimited),
        number => match number.parse::<u64>().ok()? {
            bytes if bytes > UNLIMITED_ABOVE => Some(MemoryLimit::Unlimited),
            bytes => Some(MemoryLimit::Bytes(bytes)),
        },
    }
}

/// `MemTotal` from /proc/meminfo text, in bytes.
pub fn parse_mem_total(meminfo: &str) -> Option<u64> {
    meminfo.lines().find_map(|line| {
        let value = line.strip_prefix("MemTotal:")?.trim();
        let kib: u64 = value
            .strip_suffix("kB")
            .unwrap_or(value)
            .trim()
            .parse()
            .ok()?;
        kib.checked_mul(1024)
    })
}

/// Allocatable memory: the value given explicitly, else the kubepods cgroup's limit (the
/// kubelet sets it to allocatable), else, with no limit, the whole capacity.
pub fn allocatable_bytes(explicit: Option<u64>, kubepods_limit: MemoryLimit, capacity: u64) -> u64 {
    match (explicit, kubepods_limit) {
        (Some(bytes), _) | (None, MemoryLimit::Bytes(bytes)) => bytes,
        (None, MemoryLimit::Unlimited) => capacity,
    }
}

/// `memory.available` from `MemTotal` and the node's working set.
pub(crate) fn memory_available(capacity: u64, node_working_set: u64) -> SignalObservation {
    observation(capacity, node_working_set)
}

/// `allocatableMemory.available` from allocatable memory and the kubepods working set.
pub(crate) fn allocatable_memory_available(
    allocatable: u64,
    kubepods_working_set: u64,
) -> SignalObservation {
    observation(allocatable, kubepods_working_set)
}

fn observation(capacity: u64, working_set: u64) -> SignalObservation {
    let signed = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    SignalObservation {
        available: signed(capacity).saturating_sub(signed(working_set)),
        capacity: signed(capacity),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn limits_parse_like_the_kubelet_reads_them() {
        let cases: [(&str, &str, Option<MemoryLimit>); 6] = [
            ("v2 unset", "max\n", Some(MemoryLimit::Unlimited)),
            (
                "v1 unset",
                "9223372036854771712\n",
                Some(MemoryLimit::Unlimited),
            ),
            ("set", "8589934592\n", Some(MemoryLimit::Bytes(8 << 30))),
            (
                "exactly 2^62 is still a limit",
                "4611686018427387904",
                Some(MemoryLimit::Bytes(1 << 62)),
            ),
            ("garbage", "lots", None),
            ("negative", "-1", None),
        ];
        for (name, text, limit) in cases {
            assert_eq!(parse_memory_limit(text), limit, "{name}");
        }
    }

    #[test]
    fn mem_total_is_read_in_bytes() {
        let meminfo = "MemTotal:       16315060 kB\nMemFree:         1000000 kB\n\
                       MemAvailable:   12000000 kB\n";
        assert_eq!(parse_mem_total(meminfo), Some(16_315_060 * 1024));
        assert_eq!(parse_mem_total("MemFree: 1 kB\n"), None, "missing line");
        assert_eq!(parse_mem_total("MemTotal: many kB\n"), None, "not a number");
    }

    #[test]
    fn allocatable_prefers_explicit_then_limit_then_capacity() {
        let capacity = 8192 * MIB;
        let cases = [
            (
                "explicit wins",
                Some(100 * MIB),
                MemoryLimit::Bytes(7000 * MIB),
                100 * MIB,
            ),
            (
                "kubepods limit",
                None,
                MemoryLimit::Bytes(7000 * MIB),
                7000 * MIB,
            ),
            (
                "unlimited means capacity",
                None,
                MemoryLimit::Unlimited,
                capacity,
            ),
        ];
        for (name, explicit, limit, want) in cases {
            assert_eq!(allocatable_bytes(explicit, limit, capacity), want, "{name}");
        }
    }

    #[test]
    fn observations_keep_capacity_and_go_negative() {
        let cases = [
            ("plenty", 8192 * MIB, 1024 * MIB, (7168 * MIB) as i64),
            ("exhausted", 1024 * MIB, 1024 * MIB, 0),
            (
                "over capacity",
                1024 * MIB,
                1100 * MIB,
                -((76 * MIB) as i64),
            ),
        ];
        for (name, capacity, working_set, available) in cases {
            let node = memory_available(capacity, working_set);
            assert_eq!(
                node,
                SignalObservation {
                    available,
                    capacity: capacity as i64
                },
                "{name}"
            );
            assert_eq!(
                allocatable_memory_available(capacity, working_set),
                node,
                "{name}"
            );
        }
    }
}
