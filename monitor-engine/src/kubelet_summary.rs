//! Pod usage as ranking needs it, and the kubelet's Summary API (`/stats/summary`) as one
//! source of it.
use std::collections::{BTreeMap, HashMap};

use serde::Deserialize;

use super::pod_facts::PodFacts;
use super::signal::Signal;
use super::threshold::SignalObservation;

/// Bytes and inodes used on one filesystem.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FsUsage {
    /// Bytes used.
    pub(crate) used_bytes: u64,
    /// Inodes used.
    pub(crate) inodes_used: u64,
}

impl FsUsage {
    fn add(self, other: FsUsage) -> FsUsage {
        FsUsage {
            used_bytes: self.used_bytes.saturating_add(other.used_bytes),
            inodes_used: self.inodes_used.saturating_add(other.inodes_used),
        }
    }
}

/// A pod's current usage. Absent fields in the source count as zero, as in the kubelet;
/// a pod with no stats at all is represented by `None` where a `PodUsage` is expected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PodUsage {
    /// Working set (usage minus inactive file cache) in bytes.
    pub memory_working_set_bytes: u64,
    /// Processes (threads count as the kernel counts tasks).
    pub process_count: u64,
    /// Containers' writable layers, summed.
    pub rootfs: FsUsage,
    /// Containers' logs, summed.
    pub logs: FsUsage,
    /// The pod's local volumes (see `PodFacts::local_volumes`), summed.
    pub local_volumes: FsUsage,
}

/// The parts of the Summary API this agent reads. Unknown fields are ignored.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Node-level stats (required: a summary always has them, and their absence is how a
    /// wrong file is told apart).
    pub(crate) node: NodeStats,
    /// One entry per pod the kubelet has stats for.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub(crate) pods: Vec<PodStats>,
}

/// Node-level stats from the Summary API.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NodeStats {
    /// The node's name.
    #[serde(default)]
    pub(crate) node_name: String,
    /// Node memory.
    pub(crate) memory: Option<MemoryStats>,
    /// The kubelet's root filesystem (nodefs).
    pub(crate) fs: Option<FsStats>,
    /// The container runtime's filesystems.
    pub(crate) runtime: Option<RuntimeStats>,
    /// Process limits.
    pub(crate) rlimit: Option<RlimitStats>,
    /// System containers; the one named `pods` gives allocatable memory.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub(crate) system_containers: Vec<ContainerStats>,
}

/// Runtime filesystems.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RuntimeStats {
    /// The image filesystem (imagefs).
    pub(crate) image_fs: Option<FsStats>,
}

/// Process limit stats.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct RlimitStats {
    /// `maxpid`: the node's pid limit.
    pub(crate) maxpid: Option<i64>,
    /// `curproc`: processes running.
    pub(crate) curproc: Option<i64>,
}

/// Memory stats.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MemoryStats {
    /// Available bytes.
    pub(crate) available_bytes: Option<u64>,
    /// Working set bytes.
    pub(crate) working_set_bytes: Option<u64>,
}

/// Filesystem stats (also the shape of a volume entry).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FsStats {
    /// Available bytes.
    pub(crate) available_bytes: Option<u64>,
    /// Capacity in bytes.
    pub(crate) capacity_bytes: Option<u64>,
    /// Bytes used.
    pub(crate) used_bytes: Option<u64>,
    /// Free inodes.
    pub(crate) inodes_free: Option<u64>,
    /// Total inodes.
    pub(crate) inodes: Option<u64>,
    /// Inodes used.
    pub(crate) inodes_used: Option<u64>,
}

impl FsStats {
    fn usage(&self) -> FsUsage {
        FsUsage {
            used_bytes: self.used_bytes.unwrap_or(0),
            inodes_used: self.inodes_used.unwrap_or(0),
        }
    }
}

/// Identity of a pod in the Summary API (its `podRef`).
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct SummaryPodRef {
    /// Uid, the key stats are matched by.
    #[serde(default)]
    pub(crate) uid: String,
}

/// One pod's stats.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PodStats {
    /// Which pod.
    pub(crate) pod_ref: SummaryPodRef,
    /// Pod memory.
    pub(crate) memory: Option<MemoryStats>,
    /// Per-container stats.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub(crate) containers: Vec<ContainerStats>,
    /// Volumes, each with filesystem stats and a name.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub(crate) volume: Vec<VolumeStats>,
    /// Process stats (the kubelet spells this field in snake case).
    #[serde(rename = "process_stats")]
    pub(crate) process_stats: Option<ProcessStats>,
}

/// A volume's stats.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct VolumeStats {
    /// The volume's name in the pod spec.
    #[serde(default)]
    pub(crate) name: String,
    /// Its usage.
    #[serde(flatten)]
    pub(crate) fs: FsStats,
}

/// A container's stats.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct ContainerStats {
    /// Container name.
    #[serde(default)]
    pub(crate) name: String,
    /// Memory.
    pub(crate) memory: Option<MemoryStats>,
    /// Writable layer.
    pub(crate) rootfs: Option<FsStats>,
    /// Logs.
    pub(crate) logs: Option<FsStats>,
}

/// Process stats.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct ProcessStats {
    /// Number of processes.
    pub(crate) process_count: Option<u64>,
}

/// A list the kubelet's Go types hold as a slice: `null` (a nil slice) is an empty list.
fn null_as_empty<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<Vec<T>>::deserialize(deserializer)?.unwrap_or_default())
}

/// A file that is not the Summary API's JSON.
#[derive(Debug, thiserror::Error)]
pub enum SummaryError {
    /// Not JSON at all.
    #[error("not JSON: {0}")]
    NotJson(serde_json::Error),
    /// JSON, but not an object (`[]`, a string).
    #[error("not Summary API JSON: the file holds {0}, not an object with \"node\" and \"pods\"")]
    NotAnObject(&'static str),
    /// An API error (`kind: Status`) saved in place of the summary, like a 404 for a node
    /// name that does not exist.
    #[error("not Summary API JSON but an API error (Status {code}): {message}")]
    ApiStatus {
        /// The HTTP status code the Status carries.
        code: i64,
        /// Its message.
        message: String,
    },
    /// Another Kubernetes object, such as a PodList given for the wrong flag.
    #[error("not Summary API JSON but a {0} object")]
    OtherKind(String),
    /// An object without the `node` stats every summary has.
    #[error(
        "not Summary API JSON: no \"node\" object (expected the output of /api/v1/nodes/NODE/proxy/stats/summary)"
    )]
    NoNode,
    /// A summary whose fields have the wrong shape.
    #[error("not Summary API JSON: {0}")]
    Shape(serde_json::Error),
}

impl Summary {
    /// Parses Summary API JSON, refusing anything else with what it is instead. A leading
    /// UTF-8 byte order mark is skipped.
    pub fn from_json(text: &str) -> Result<Summary, SummaryError> {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let value: serde_json::Value = serde_json::from_str(text).map_err(SummaryError::NotJson)?;
        let object = match &value {
            serde_json::Value::Object(object) => object,
            serde_json::Value::Array(_) => return Err(SummaryError::NotAnObject("an array")),
            serde_json::Value::Null => return Err(SummaryError::NotAnObject("null")),
            _ => return Err(SummaryError::NotAnObject("a single value")),
        };
        match object.get("kind").and_then(|k| k.as_str()) {
            Some("Status") => {
                return Err(SummaryError::ApiStatus {
                    code: object
                        .get("code")
                        .and_then(serde_json::Value::as_i64)
                        .unwrap_or(0),
                    message: object
                        .get("message")
                        .and_then(|m| m.as_str())
                        .unwrap_or("(no message)")
                        .to_string(),
                });
            }
            Some(kind) => return Err(SummaryError::OtherKind(kind.to_string())),
            None => {}
        }
        if !object.get("node").is_some_and(serde_json::Value::is_object) {
            return Err(SummaryError::NoNode);
        }
        // Parsed again from the text, so shape errors name their line and column.
        serde_json::from_str(text).map_err(SummaryError::Shape)
    }

    /// Pod stats keyed by uid, the kubelet's only matching rule.
    pub(crate) fn pods_by_uid(&self) -> HashMap<&str, &PodStats> {
        self.pods
            .iter()
            .map(|p| (p.pod_ref.uid.as_str(), p))
            .collect()
    }

    /// Signal observations as the kubelet's `makeSignalObservations` derives them; signals
    /// whose inputs are missing are left out.
    pub(crate) fn observations(&self) -> BTreeMap<Signal, SignalObservation> {
        let mut observations = BTreeMap::new();
        let node = &self.node;
        let clamp = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let mut observe = |signal, available: Option<u64>, capacity: Option<u64>| {
            if let (Some(available), Some(capacity)) = (available, capacity) {
                observations.insert(
                    signal,
                    SignalObservation {
                        available: clamp(available),
                        capacity: clamp(capacity),
                    },
                );
            }
        };
        let memory_capacity =
            |m: &MemoryStats| Some(m.available_bytes?.saturating_add(m.working_set_bytes?));
        if let Some(memory) = &node.memory {
            observe(
                Signal::MemoryAvailable,
                memory.available_bytes,
                memory_capacity(memory),
            );
        }
        if let Some(memory) = node
            .system_containers
            .iter()
            .find(|c| c.name == "pods")
            .and_then(|c| c.memory.as_ref())
        {
            observe(
                Signal::AllocatableMemoryAvailable,
                memory.available_bytes,
                memory_capacity(memory),
            );
        }
        if let Some(fs) = &node.fs {
            observe(
                Signal::NodeFsAvailable,
                fs.available_bytes,
                fs.capacity_bytes,
            );
            observe(Signal::NodeFsInodesFree, fs.inodes_free, fs.inodes);
        }
        if let Some(fs) = node.runtime.as_ref().and_then(|r| r.image_fs.as_ref()) {
            observe(
                Signal::ImageFsAvailable,
                fs.available_bytes,
                fs.capacity_bytes,
            );
            observe(Signal::ImageFsInodesFree, fs.inodes_free, fs.inodes);
        }
        if let Some(RlimitStats {
            maxpid: Some(max),
            curproc: Some(running),
        }) = node.rlimit
        {
            observations.insert(
                Signal::PidAvailable,
                SignalObservation {
                    available: max.saturating_sub(running),
                    capacity: max,
                },
            );
        }
        observations
    }
}

impl PodUsage {
    /// Reduces a pod's Summary API stats to what ranking uses. Local volume usage counts
    /// only the volumes the pod spec declares as local, like the kubelet's `podDiskUsage`.
    pub(crate) fn from_summary(stats: &PodStats, facts: &PodFacts) -> PodUsage {
        let container_fs = |pick: fn(&ContainerStats) -> Option<&FsStats>| {
            stats
                .containers
                .iter()
                .filter_map(pick)
                .map(FsStats::usage)
                .fold(FsUsage::default(), FsUsage::add)
        };
        let local_volumes = facts
            .local_volumes
            .iter()
            .filter_map(|name| stats.volume.iter().find(|v| &v.name == name))
            .map(|v| v.fs.usage())
            .fold(FsUsage::default(), FsUsage::add);
        PodUsage {
            memory_working_set_bytes: stats
                .memory
                .as_ref()
                .and_then(|m| m.working_set_bytes)
                .unwrap_or(0),
            process_count: stats
                .process_stats
                .as_ref()
                .and_then(|p| p.process_count)
                .unwrap_or(0),
            rootfs: container_fs(|c| c.rootfs.as_ref()),
            logs: container_fs(|c| c.logs.as_ref()),
            local_volumes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUMMARY: &str = r#"{
      "node": {
        "nodeName": "node-1",
        "memory": {"availableBytes": 1000, "workingSetBytes": 3000},
        "fs": {"availableBytes": 50, "capacityBytes": 500, "inodesFree": 7, "inodes": 70},
        "runtime": {"imageFs": {"availableBytes": 60, "capacityBytes": 600}},
        "rlimit": {"maxpid": 4096, "curproc": 100},
        "systemContainers": [{"name": "pods", "memory": {"availableBytes": 10, "workingSetBytes": 90}}]
      },
      "pods": [{
        "podRef": {"name": "web", "namespace": "shop", "uid": "u1"},
        "memory": {"workingSetBytes": 123},
        "process_stats": {"process_count": 9},
        "containers": [
          {"name": "a", "rootfs": {"usedBytes": 10, "inodesUsed": 1}, "logs": {"usedBytes": 5, "inodesUsed": 2}},
          {"name": "b", "rootfs": {"usedBytes": 20}}
        ],
        "volume": [
          {"name": "scratch", "usedBytes": 100, "inodesUsed": 4},
          {"name": "token", "usedBytes": 1000}
        ],
        "ephemeral-storage": {"usedBytes": 1135}
      }]
    }"#;

    #[test]
    fn reduces_pod_stats_and_node_observations() {
        let summary = Summary::from_json(SUMMARY).expect("summary");
        let facts = PodFacts::named("web")
            .with_namespace("shop")
            .with_uid("u1")
            .with_local_volumes(&["scratch"]);
        let by_uid = summary.pods_by_uid();
        let usage = PodUsage::from_summary(by_uid.get("u1").expect("pod stats"), &facts);
        assert_eq!(
            usage,
            PodUsage {
                memory_working_set_bytes: 123,
                process_count: 9,
                rootfs: FsUsage {
                    used_bytes: 30,
                    inodes_used: 1
                },
                logs: FsUsage {
                    used_bytes: 5,
                    inodes_used: 2
                },
                local_volumes: FsUsage {
                    used_bytes: 100,
                    inodes_used: 4
                },
            }
        );
        assert!(!by_uid.contains_key("other"));

        let observed = summary.observations();
        let expect = |available, capacity| {
            Some(SignalObservation {
                available,
                capacity,
            })
        };
        assert_eq!(
            observed.get(&Signal::MemoryAvailable).copied(),
            expect(1000, 4000)
        );
        assert_eq!(
            observed.get(&Signal::AllocatableMemoryAvailable).copied(),
            expect(10, 100)
        );
        assert_eq!(
            observed.get(&Signal::NodeFsAvailable).copied(),
            expect(50, 500)
        );
        assert_eq!(
            observed.get(&Signal::NodeFsInodesFree).copied(),
            expect(7, 70)
        );
        assert_eq!(
            observed.get(&Signal::ImageFsAvailable).copied(),
            expect(60, 600)
        );
        assert_eq!(observed.get(&Signal::ImageFsInodesFree), None);
        assert_eq!(
            observed.get(&Signal::PidAvailable).copied(),
            expect(3996, 4096)
        );
    }
}
