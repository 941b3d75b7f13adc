//! Eviction signals and the node conditions they drive, named exactly as in the kubelet's
//! configuration file.
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// An eviction signal. The declaration order is the order the decision step considers
/// signals in when several thresholds are met: memory first, as the kubelet does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Signal {
    /// `memory.available`: node capacity minus the node's working set.
    #[serde(rename = "memory.available")]
    MemoryAvailable,
    /// `allocatableMemory.available`: allocatable memory minus the pods cgroup's working set.
    #[serde(rename = "allocatableMemory.available")]
    AllocatableMemoryAvailable,
    /// `nodefs.available`: free bytes on the kubelet's root filesystem.
    #[serde(rename = "nodefs.available")]
    NodeFsAvailable,
    /// `nodefs.inodesFree`: free inodes on the kubelet's root filesystem.
    #[serde(rename = "nodefs.inodesFree")]
    NodeFsInodesFree,
    /// `imagefs.available`: free bytes on the container runtime's image filesystem.
    #[serde(rename = "imagefs.available")]
    ImageFsAvailable,
    /// `imagefs.inodesFree`: free inodes on the image filesystem.
    #[serde(rename = "imagefs.inodesFree")]
    ImageFsInodesFree,
    /// `pid.available`: the pid limit minus running processes.
    #[serde(rename = "pid.available")]
    PidAvailable,
}

/// A node condition the kubelet reports while a threshold is met.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum NodeCondition {
    /// Set by the memory signals.
    MemoryPressure,
    /// Set by the nodefs and imagefs signals.
    DiskPressure,
    /// Set by `pid.available`.
    #[serde(rename = "PIDPressure")]
    PidPressure,
}

/// The spelling of a signal that is not one of ours.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown eviction signal {0:?} (expected one of {known})", known = Signal::ALL.map(Signal::as_str).join(", "))]
pub struct UnknownSignal(pub(crate) String);

impl Signal {
    /// Every signal, in decision order.
    pub(crate) const ALL: [Signal; 7] = [
        Signal::MemoryAvailable,
        Signal::AllocatableMemoryAvailable,
        Signal::NodeFsAvailable,
        Signal::NodeFsInodesFree,
        Signal::ImageFsAvailable,
        Signal::ImageFsInodesFree,
        Signal::PidAvailable,
    ];

    /// The kubelet's name for the signal.
    pub const fn as_str(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "memory.available",
            Signal::AllocatableMemoryAvailable => "allocatableMemory.available",
            Signal::NodeFsAvailable => "nodefs.available",
            Signal::NodeFsInodesFree => "nodefs.inodesFree",
            Signal::ImageFsAvailable => "imagefs.available",
            Signal::ImageFsInodesFree => "imagefs.inodesFree",
            Signal::PidAvailable => "pid.available",
        }
    }

    /// The node condition reported while a threshold on this signal is met.
    pub const fn node_condition(self) -> NodeCondition {
        match self {
            Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable => {
                NodeCondition::MemoryPressure
            }
            Signal::PidAvailable => NodeCondition::PidPressure,
            _ => NodeCondition::DiskPressure,
        }
    }

    /// The resource the kubelet names in its eviction message for this signal.
    pub(crate) const fn resource_name(self) -> &'static str {
        match self {
            Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable => "memory",
            Signal::NodeFsAvailable | Signal::ImageFsAvailable => "ephemeral-storage",
            Signal::NodeFsInodesFree | Signal::ImageFsInodesFree => "inodes",
            Signal::PidAvailable => "pids",
        }
    }
}

impl FromStr for Signal {
    type Err = UnknownSignal;

    fn from_str(text: &str) -> Result<Signal, UnknownSignal> {
        Signal::ALL
            .into_iter()
            .find(|signal| signal.as_str() == text)
            .ok_or_else(|| UnknownSignal(text.to_string()))
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for NodeCondition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NodeCondition::MemoryPressure => "MemoryPressure",
            NodeCondition::DiskPressure => "DiskPressure",
            NodeCondition::PidPressure => "PIDPressure",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_map_to_conditions() {
        struct Case {
            name: &'static str,
            text: &'static str,
            condition: NodeCondition,
        }
        let cases = [
            Case {
                name: "memory",
                text: "memory.available",
                condition: NodeCondition::MemoryPressure,
            },
            Case {
                name: "allocatable",
                text: "allocatableMemory.available",
                condition: NodeCondition::MemoryPressure,
            },
            Case {
                name: "nodefs",
                text: "nodefs.available",
                condition: NodeCondition::DiskPressure,
            },
            Case {
                name: "nodefs inodes",
                text: "nodefs.inodesFree",
                condition: NodeCondition::DiskPressure,
            },
            Case {
                name: "imagefs",
                text: "imagefs.available",
                condition: NodeCondition::DiskPressure,
            },
            Case {
                name: "imagefs inodes",
                text: "imagefs.inodesFree",
                condition: NodeCondition::DiskPressure,
            },
            Case {
                name: "pid",
                text: "pid.available",
                condition: NodeCondition::PidPressure,
            },
        ];
        for case in cases {
            let signal: Signal = case.text.parse().expect(case.name);
            assert_eq!(signal.to_string(), case.text, "case {:?}", case.name);
            assert_eq!(
                signal.node_condition(),
                case.condition,
                "case {:?}",
                case.name
            );
            let json = serde_json::to_string(&signal).expect(case.name);
            assert_eq!(json, format!("{:?}", case.text), "case {:?}", case.name);
        }
        assert_eq!(
            "memory.free".parse::<Signal>(),
            Err(UnknownSignal("memory.free".into()))
        );
        assert_eq!(NodeCondition::PidPressure.to_string(), "PIDPressure");
    }
}
