//! The memory brake's rules (cgroup v2 only). When a hard memory threshold evicts a pod,
//! `memory.high` is set at the usage, of the kubepods cgroup or of each pod's (the agent's
//! `--memory-brake`): the pods' growth is then throttled by reclaim, never OOM-killed
//! (`memory.high` never calls the OOM killer, a limit would), so a victim that handles
//! SIGTERM can use its grace period. It is lifted once no eviction is in flight and no memory
//! threshold is met, and after [`HELD_AT_MOST`] whatever happens: a brake holds every pod on
//! the node.
//!
//! The values found before the brake are recorded on disk before it is set, so an agent
//! killed while it holds the brake lifts it at its next start, restoring them exactly.
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::memory_signals::MemoryLimit;

/// The longest a brake stays on: long enough for an eviction interval and a grace period
/// (the next eviction takes the pod that grows when the first victim freed too little), short
/// enough that a node whose evictions fail is not throttled for good.
pub const HELD_AT_MOST: Duration = Duration::from_secs(30);

/// Room left above the usage read just before the brake is set: growth in the microseconds
/// between that read and the write would otherwise make the write itself reclaim.
pub(crate) const SLACK_BYTES: u64 = 4 << 20;

/// What the loop tells the brake after each decision step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BrakeInputs {
    /// A hard memory threshold decided an eviction that is being acted on (not a dry run).
    pub hard_memory_eviction: bool,
    /// An eviction is in flight, or a memory threshold is met.
    pub pressure: bool,
    /// Monotonic now.
    pub now_ns: u64,
}

/// What the brake does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrakeMove {
    /// Nothing changes.
    Keep,
    /// Set it.
    Engage,
    /// Lift it, for this reason.
    Lift(LiftReason),
}

/// Why a brake is lifted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LiftReason {
    /// No eviction in flight and no memory threshold met: the victim's memory is back.
    Recovered,
    /// Held for [`HELD_AT_MOST`].
    HeldTooLong,
    /// The agent stops: it never leaves a brake behind.
    AgentStops,
}

impl LiftReason {
    /// For the log line.
    pub fn as_str(self) -> &'static str {
        match self {
            LiftReason::Recovered => "no eviction in flight and no memory threshold met",
            LiftReason::HeldTooLong => "held for the longest it may be",
            LiftReason::AgentStops => "the agent stops",
        }
    }
}

/// The brake's next move, given since when it is held (`None`: not held).
pub fn brake_move(held_since_ns: Option<u64>, inputs: BrakeInputs) -> BrakeMove {
    match held_since_ns {
        None if inputs.hard_memory_eviction => BrakeMove::Engage,
        None => BrakeMove::Keep,
        Some(since) if inputs.now_ns.saturating_sub(since) >= HELD_AT_MOST.as_nanos() as u64 => {
            BrakeMove::Lift(LiftReason::HeldTooLong)
        }
        Some(_) if !inputs.pressure => BrakeMove::Lift(LiftReason::Recovered),
        Some(_) => BrakeMove::Keep,
    }
}

/// The `memory.high` a brake sets: the usage plus [`SLACK_BYTES`], page-aligned, never above
/// a `memory.high` already set (the kubelet's MemoryQoS may set one), and never at or above
/// the limit, where it would hold nothing back. `None` when there is nothing to hold: the
/// value already set is lower.
pub fn brake_level(usage: u64, previous: MemoryLimit, limit: MemoryLimit) -> Option<u64> {
    const PAGE: u64 = 4096;
    let up = |bytes: u64| bytes.div_ceil(PAGE).saturating_mul(PAGE);
    let level = up(usage.saturating_add(SLACK_BYTES));
    let level = match limit {
        MemoryLimit::Bytes(limit) if level >= limit => up(usage),
        _ => level,
    };
    match previous {
        MemoryLimit::Bytes(previous) if previous <= level => None,
        _ => Some(level),
    }
}

/// The most cgroups one brake may hold: a node's pods, with room to spare. A record naming
/// more is not the agent's.
pub(crate) const MOST_CGROUPS: usize = 65_536;

/// One cgroup a brake holds: enough to restore its `memory.high` after a crash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrakeEntry {
    /// The cgroup, relative to the memory hierarchy's mount: the kubepods cgroup or a pod's.
    pub cgroup: String,
    /// `memory.high` as it was read before the brake, verbatim (`max` or bytes).
    pub previous: String,
    /// The value the brake wrote.
    pub set: u64,
}

/// What a held brake leaves on disk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrakeRecord {
    pub entries: Vec<BrakeEntry>,
}

/// Why a record on disk is not restored.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RecordError {
    /// Not JSON of the record's shape.
    #[error("the brake record is not readable: {0}")]
    Undecodable(String),
    /// A previous value that `memory.high` would not take back as written.
    #[error("the brake record's previous value {0:?} is neither `max` nor a number of bytes")]
    BadPrevious(String),
    /// A cgroup outside this agent's kubepods cgroup.
    #[error("the brake record names cgroup {recorded}, outside this agent's {ours}")]
    OtherCgroup { recorded: String, ours: String },
    /// More cgroups than a node has pods.
    #[error("the brake record names {0} cgroups, more than a brake holds")]
    TooMany(usize),
}

impl BrakeRecord {
    /// The record as stored.
    pub fn encode(&self) -> Vec<u8> {
        // Strings and numbers always serialise.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// A stored record, checked before anything is written back from it: each previous value
    /// must be one `memory.high` takes, and each cgroup `ours` (the kubepods cgroup) or below
    /// it. A lone entry is the record of an agent that braked only the kubepods cgroup.
    pub fn decode(data: &[u8], ours: &str) -> Result<Self, RecordError> {
        let record = match serde_json::from_slice::<BrakeRecord>(data) {
            Ok(record) => record,
            Err(e) => match serde_json::from_slice::<BrakeEntry>(data) {
                Ok(entry) => BrakeRecord {
                    entries: vec![entry],
                },
                Err(_) => return Err(RecordError::Undecodable(e.to_string())),
            },
        };
        if record.entries.len() > MOST_CGROUPS {
            return Err(RecordError::TooMany(record.entries.len()));
        }
        for entry in &record.entries {
            let previous = entry.previous.trim();
            if previous != "max"
                && (previous.is_empty() || !previous.bytes().all(|b| b.is_ascii_digit()))
            {
                return Err(RecordError::BadPrevious(entry.previous.clone()));
            }
            if !within(&entry.cgroup, ours) {
                return Err(RecordError::OtherCgroup {
                    recorded: entry.cgroup.clone(),
                    ours: ours.to_string(),
                });
            }
        }
        Ok(record)
    }
}

/// Whether `cgroup` is `ours` or a cgroup below it, by plain names only (no `.`, `..` or
/// empty step that could lead out of it).
fn within(cgroup: &str, ours: &str) -> bool {
    let ours = ours.trim_matches('/');
    let cgroup = cgroup.trim_start_matches('/');
    let below = if ours.is_empty() {
        Some(cgroup)
    } else if cgroup == ours {
        return true;
    } else {
        cgroup
            .strip_prefix(ours)
            .and_then(|rest| rest.strip_prefix('/'))
    };
    below.is_some_and(|rest| {
        !rest.is_empty()
            && rest
                .split('/')
                .all(|step| !step.is_empty() && step != "." && step != ".." && !step.contains('\0'))
    })
}

/// Whether a `memory.high` read now is still the brake's (nobody changed it since), so
/// restoring the recorded value undoes only the brake.
pub fn still_ours(current: &str, entry: &BrakeEntry) -> bool {
    current.trim().parse::<u64>().ok() == Some(entry.set)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const S: u64 = 1_000_000_000;

    fn inputs(hard_memory_eviction: bool, pressure: bool, now_s: u64) -> BrakeInputs {
        BrakeInputs {
            hard_memory_eviction,
            pressure,
            now_ns: now_s * S,
        }
    }

    #[test]
    fn brake_moves() {
        let bound = HELD_AT_MOST.as_secs();
        let cases = [
            (
                "idle node, nothing held",
                None,
                inputs(false, false, 5),
                BrakeMove::Keep,
            ),
            (
                "threshold met, no eviction yet",
                None,
                inputs(false, true, 5),
                BrakeMove::Keep,
            ),
            (
                "hard memory eviction engages",
                None,
                inputs(true, true, 5),
                BrakeMove::Engage,
            ),
            (
                "held while the victim drains",
                Some(5),
                inputs(false, true, 6),
                BrakeMove::Keep,
            ),
            (
                "a second eviction under the brake keeps it",
                Some(5),
                inputs(true, true, 15),
                BrakeMove::Keep,
            ),
            (
                "the victim's memory is back",
                Some(5),
                inputs(false, false, 6),
                BrakeMove::Lift(LiftReason::Recovered),
            ),
            (
                "held at most the bound, pressure or not",
                Some(5),
                inputs(false, true, 5 + bound),
                BrakeMove::Lift(LiftReason::HeldTooLong),
            ),
            (
                "the bound wins over a new eviction",
                Some(5),
                inputs(true, true, 5 + bound + 1),
                BrakeMove::Lift(LiftReason::HeldTooLong),
            ),
            (
                "a clock that went back holds on",
                Some(50),
                inputs(false, true, 10),
                BrakeMove::Keep,
            ),
        ];
        for (name, held, inputs, want) in cases {
            assert_eq!(brake_move(held.map(|s| s * S), inputs), want, "{name}");
        }
    }

    #[test]
    fn brake_levels() {
        let cases = [
            (
                "usage plus the slack, page-aligned",
                1000 * MIB + 1,
                MemoryLimit::Unlimited,
                MemoryLimit::Bytes(2000 * MIB),
                Some(1004 * MIB + 4096),
            ),
            (
                "a kubelet's memory.high above the level stays the bound",
                1000 * MIB,
                MemoryLimit::Bytes(1500 * MIB),
                MemoryLimit::Unlimited,
                Some(1004 * MIB),
            ),
            (
                "a memory.high already below the level: nothing to hold",
                1000 * MIB,
                MemoryLimit::Bytes(1002 * MIB),
                MemoryLimit::Unlimited,
                None,
            ),
            (
                "within the slack of the limit: at the usage itself",
                1000 * MIB,
                MemoryLimit::Unlimited,
                MemoryLimit::Bytes(1002 * MIB),
                Some(1000 * MIB),
            ),
            (
                "a hostile usage saturates",
                u64::MAX,
                MemoryLimit::Unlimited,
                MemoryLimit::Unlimited,
                Some(u64::MAX),
            ),
        ];
        for (name, usage, previous, limit, want) in cases {
            assert_eq!(brake_level(usage, previous, limit), want, "{name}");
        }
    }

    fn entry(cgroup: &str, previous: &str, set: u64) -> BrakeEntry {
        BrakeEntry {
            cgroup: cgroup.into(),
            previous: previous.into(),
            set,
        }
    }

    #[test]
    fn records_round_trip_and_hostile_ones_are_refused() {
        let record = BrakeRecord {
            entries: vec![
                entry("kubepods.slice/kubepods-pod1.slice", "max", 1004 * MIB),
                entry(
                    "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod2.slice",
                    "1572864000",
                    4096,
                ),
            ],
        };
        assert_eq!(
            BrakeRecord::decode(&record.encode(), "kubepods.slice"),
            Ok(record.clone())
        );
        assert_eq!(
            BrakeRecord::decode(
                br#"{"cgroup":"kubepods.slice","previous":"max","set":4096}"#,
                "kubepods.slice"
            ),
            Ok(BrakeRecord {
                entries: vec![entry("kubepods.slice", "max", 4096)]
            }),
            "a record of the kubepods brake alone, as agents before per-pod brakes wrote it"
        );
        let many = BrakeRecord {
            entries: vec![entry("kubepods.slice", "max", 1); MOST_CGROUPS + 1],
        };
        let refused = [
            ("not JSON", b"{".to_vec()),
            (
                "a previous value that is a command",
                br#"{"cgroup":"kubepods.slice","previous":"max\n+memory","set":1}"#.to_vec(),
            ),
            (
                "an empty previous value",
                br#"{"entries":[{"cgroup":"kubepods.slice","previous":"","set":1}]}"#.to_vec(),
            ),
            (
                "another cgroup",
                br#"{"cgroup":"../../system.slice","previous":"max","set":1}"#.to_vec(),
            ),
            (
                "a way out of kubepods",
                br#"{"entries":[{"cgroup":"kubepods.slice/../system.slice","previous":"max","set":1}]}"#.to_vec(),
            ),
            (
                "a sibling sharing the prefix",
                br#"{"entries":[{"cgroup":"kubepods.slice2/x","previous":"max","set":1}]}"#.to_vec(),
            ),
            (
                "a set value that is not a number",
                br#"{"cgroup":"kubepods.slice","previous":"max","set":"x"}"#.to_vec(),
            ),
            ("more cgroups than a brake holds", many.encode()),
        ];
        for (name, data) in refused {
            assert!(
                BrakeRecord::decode(&data, "kubepods.slice").is_err(),
                "{name}"
            );
        }
    }

    #[test]
    fn only_the_brakes_own_value_is_undone() {
        let entry = entry("kubepods", "max", 4096);
        assert!(still_ours("4096\n", &entry));
        assert!(!still_ours("8192\n", &entry), "changed since");
        assert!(!still_ours("max\n", &entry), "lifted by someone else");
    }
}
