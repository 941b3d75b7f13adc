//! The pods on this node and their cgroups: manifests from a directory (reloaded on change)
//! or the Kubernetes API (watched), each pod's QoS class, and its cgroup by the kubelet's
//! naming rules; and the kubelet's own evictions of them, from its Events.
pub mod cgroup_path;
mod dir_fingerprint;
pub mod dir_watch;
pub mod kube_query;
pub mod kube_watch;
pub(crate) mod kubelet_evictions;
pub mod manifest_dir;
mod manifest_document;
pub mod manifests;
pub mod node_pod;
pub mod resolve;
pub mod source;
pub mod validate;

pub use cgroup_path::{CgroupDriver, DetectError, KubepodsCgroup};
pub use dir_watch::{ManifestWatcher, WatchError};
pub use kube_watch::{KubeWatchError, KubeWatcher};
pub use manifests::{Loaded, LoadedPods, ManifestError, load_dir};
pub use node_pod::NodePod;
pub use resolve::{PodCgroup, find_cgroup, find_pod_cgroup, resolve_pod_cgroups};
pub use source::{PodSource, PodSourceError};
