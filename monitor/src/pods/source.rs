//! Where the agent learns the pods on this node: a manifests directory or the Kubernetes
//! API. Both hand out the full pod set after each change, so the agent treats them alike.
use super::{
    dir_watch::{ManifestWatcher, WatchError},
    kube_watch::{KubeWatchError, KubeWatcher},
    manifests::Loaded,
    node_pod::NodePod,
};

/// The agent's source of pods.
pub enum PodSource {
    /// `--pods DIR`.
    Dir(ManifestWatcher),
    /// `--kube`.
    Kube(KubeWatcher),
}

/// Why a pod source stopped.
#[derive(Debug, thiserror::Error)]
pub enum PodSourceError {
    /// The manifests directory could not be watched or read.
    #[error(transparent)]
    Dir(#[from] WatchError),
    /// The Kubernetes API watch ended.
    #[error(transparent)]
    Kube(#[from] KubeWatchError),
}

impl PodSource {
    /// Waits for a change of the pod set and returns the new full set. Cancel-safe.
    pub async fn next_change(&mut self) -> Result<Loaded<NodePod>, PodSourceError> {
        Ok(match self {
            PodSource::Dir(watcher) => watcher.next_change().await?,
            PodSource::Kube(watcher) => watcher.next_change().await?,
        })
    }
}
