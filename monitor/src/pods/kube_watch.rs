//! The pods bound to this node, from the Kubernetes API: one list, then a watch from the
//! list's resourceVersion, through kube-rs' watcher. It re-lists when the version has
//! expired (410 Gone), resumes a broken watch from the last version seen, and backs off
//! between failed attempts.
//!
//! The API server filters with the field selector `spec.nodeName=<node>` and leaves out
//! finished pods (phase Succeeded or Failed), which the kubelet no longer counts as active:
//! a pod that finishes leaves the watch as if deleted.
//!
//! [`KubeWatcher`] mirrors [`ManifestWatcher`](super::ManifestWatcher): `start` hands out the
//! first full pod set, `next_change` the next one that differs in what the agent acts on.
//! Each pod is kept as a [`NodePod`], taken from the Pod as it arrives.
use std::{collections::BTreeMap, path::Path, pin::Pin};

use futures::{Stream, StreamExt as _};
use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api, Config,
    config::{InferConfigError, KubeConfigOptions, Kubeconfig, KubeconfigError},
    runtime::{WatchStreamExt as _, watcher},
};

use super::{
    manifests::Loaded,
    node_pod::{NodePod, split_by_standing},
    validate::validate_pod,
};
use crate::engine::printable::printable;

/// Why the API could not be reached, or the watch stopped.
///
/// kube-rs' errors repeat their causes in their own messages, so they are shown, not chained
/// as sources: a chain would print each cause twice.
#[derive(Debug, thiserror::Error)]
pub enum KubeWatchError {
    /// No kubeconfig was found and the process does not run in a pod with a service account.
    #[error("no Kubernetes API configuration: {0}")]
    Infer(InferConfigError),
    /// The kubeconfig given could not be read or used.
    #[error("kubeconfig {path}: {error}")]
    Kubeconfig {
        path: String,
        error: KubeconfigError,
    },
    /// The client could not be built from the configuration (TLS or proxy settings).
    #[error("Kubernetes API client: {0}")]
    Client(kube::Error),
    /// The first list of the node's pods failed; the agent does not start blind.
    #[error(
        "listing the pods on node {node}: {error} (the agent needs RBAC list and watch on \
         pods)"
    )]
    InitialList { node: String, error: watcher::Error },
    /// The watch stream ended, which kube-rs' watcher never does while it is polled.
    #[error("the watch of the pods on node {node} ended")]
    Ended { node: String },
}

/// How to reach the API server: `kubeconfig` when given, else what kubectl would use
/// (KUBECONFIG, `~/.kube/config`), else the in-cluster service account.
pub async fn api_config(kubeconfig: Option<&Path>) -> Result<Config, KubeWatchError> {
    match kubeconfig {
        Some(path) => {
            let kubeconfig_error = |error| KubeWatchError::Kubeconfig {
                path: path.display().to_string(),
                error,
            };
            let file = Kubeconfig::read_from(path).map_err(kubeconfig_error)?;
            Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
                .await
                .map_err(kubeconfig_error)
        }
        None => Config::infer().await.map_err(KubeWatchError::Infer),
    }
}

/// The field selector for the active pods bound to `node`.
pub(super) fn node_field_selector(node: &str) -> String {
    format!("spec.nodeName={node},status.phase!=Succeeded,status.phase!=Failed")
}

type PodEvents = Pin<Box<dyn Stream<Item = Result<watcher::Event<Pod>, watcher::Error>> + Send>>;

/// Watches the pods bound to one node.
pub struct KubeWatcher {
    node: String,
    events: PodEvents,
    /// The pods as last handed out, by `metadata.uid`.
    pods: BTreeMap<String, NodePod>,
    /// A re-list in progress: the pods listed so far, swapped in whole when it completes so
    /// a half-done list never looks like deletions.
    relisting: Option<BTreeMap<String, NodePod>>,
}

impl KubeWatcher {
    /// Lists the pods on `node` and starts watching them. Fails when the first list fails
    /// (API server unreachable, RBAC), so a misconfigured agent stops with the reason.
    pub async fn start(
        config: Config,
        node: &str,
    ) -> Result<(Self, Loaded<NodePod>), KubeWatchError> {
        let client = crate::kube_client::client(config).map_err(KubeWatchError::Client)?;
        let config = watcher::Config::default().fields(&node_field_selector(node));
        let events = watcher(Api::<Pod>::all(client), config)
            .default_backoff()
            .boxed();
        let mut this = Self {
            node: node.to_string(),
            events,
            pods: BTreeMap::new(),
            relisting: None,
        };
        loop {
            match this.events.next().await {
                Some(Ok(event)) => {
                    let done = matches!(event, watcher::Event::InitDone);
                    this.apply(event);
                    if done {
                        let first = this.loaded();
                        return Ok((this, first));
                    }
                }
                Some(Err(error)) => {
                    return Err(KubeWatchError::InitialList {
                        node: this.node,
                        error,
                    });
                }
                None => return Err(KubeWatchError::Ended { node: this.node }),
            }
        }
    }

    /// Waits for an event that changes the pod set and returns the new full set. Errors of
    /// the watch are logged and retried with backoff, since the pods already known stay
    /// the best knowledge the agent has. Cancel-safe: an event is applied in the same poll
    /// that receives it.
    pub async fn next_change(&mut self) -> Result<Loaded<NodePod>, KubeWatchError> {
        loop {
            match self.events.next().await {
                Some(Ok(event)) => {
                    if self.apply(event) {
                        return Ok(self.loaded());
                    }
                }
                Some(Err(error)) => {
                    tracing::warn!("watching the pods on node {}: {error}; retrying", self.node);
                }
                None => {
                    return Err(KubeWatchError::Ended {
                        node: self.node.clone(),
                    });
                }
            }
        }
    }

    /// Applies one watcher event; true when the pod set changed. A pod whose identifiers are
    /// not of Kubernetes' shape is logged and left out, as a manifest file's would be.
    fn apply(&mut self, event: watcher::Event<Pod>) -> bool {
        if let watcher::Event::InitApply(pod) | watcher::Event::Apply(pod) = &event
            && let Err(reason) = validate_pod(pod)
        {
            let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
            let name = pod.metadata.name.as_deref().unwrap_or("<unnamed>");
            tracing::warn!(
                "skipped: pod {}/{} from the API: {reason}",
                printable(namespace),
                printable(name)
            );
            return false;
        }
        match event {
            watcher::Event::Init => {
                self.relisting = Some(BTreeMap::new());
                false
            }
            watcher::Event::InitApply(pod) => {
                if let (Some(listed), Some(uid)) = (&mut self.relisting, pod.metadata.uid.clone()) {
                    listed.insert(uid, NodePod::from_pod(&pod));
                }
                false
            }
            watcher::Event::InitDone => {
                let listed = self.relisting.take().unwrap_or_default();
                let changed = listed != self.pods;
                self.pods = listed;
                changed
            }
            watcher::Event::Apply(pod) => {
                // The API server always sets a uid; a pod without one could not be matched
                // to its cgroup anyway.
                let Some(uid) = pod.metadata.uid.clone() else {
                    return false;
                };
                let pod = NodePod::from_pod(&pod);
                if self.pods.get(&uid) == Some(&pod) {
                    return false;
                }
                self.pods.insert(uid, pod);
                true
            }
            watcher::Event::Delete(pod) => pod
                .metadata
                .uid
                .as_ref()
                .is_some_and(|uid| self.pods.remove(uid).is_some()),
        }
    }

    /// The pods the kubelet counts as active, and those it does not with why. The field
    /// selector already asks for the active ones; checking again keeps a server that ignores
    /// part of a selector from adding pods.
    fn loaded(&self) -> Loaded<NodePod> {
        let (pods, left_out) =
            split_by_standing(self.pods.values().cloned(), Some(&self.node), false);
        Loaded {
            pods,
            errors: Vec::new(),
            left_out,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::rank_report::LeftOutReason;

    fn pod(name: &str, node: Option<&str>, phase: &str) -> Pod {
        // A uid of the API server's shape, distinct per name.
        let n = name
            .bytes()
            .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
        let uid = format!("00000000-0000-4000-8000-{:012x}", n & 0xffff_ffff_ffff);
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "uid": uid},
            "spec": {"nodeName": node, "containers": []},
            "status": {"phase": phase},
        }))
        .expect("test pod")
    }

    #[test]
    fn hands_out_only_the_nodes_active_pods_whatever_the_server_sends() {
        let mut watcher = KubeWatcher {
            node: "n1".into(),
            events: futures::stream::empty().boxed(),
            pods: BTreeMap::new(),
            relisting: None,
        };
        watcher.apply(watcher::Event::Init);
        for listed in [
            pod("running", Some("n1"), "Running"),
            pod("pending-here", Some("n1"), "Pending"),
            pod("unscheduled", None, "Pending"),
            pod("elsewhere", Some("n2"), "Running"),
            pod("done", Some("n1"), "Succeeded"),
            pod("failed", Some("n1"), "Failed"),
        ] {
            watcher.apply(watcher::Event::InitApply(listed));
        }
        assert!(watcher.apply(watcher::Event::InitDone));
        let mut names: Vec<String> = watcher
            .loaded()
            .pods
            .iter()
            .filter_map(|p| p.facts.as_ref().ok().map(|f| f.pod.name.clone()))
            .collect();
        names.sort();
        assert_eq!(names, ["pending-here", "running"]);
        let mut left_out: Vec<(String, LeftOutReason)> = watcher
            .loaded()
            .left_out
            .into_iter()
            .map(|pod| (pod.name, pod.reason))
            .collect();
        left_out.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            left_out,
            [
                ("done".into(), LeftOutReason::Finished),
                ("elsewhere".into(), LeftOutReason::OtherNode),
                ("failed".into(), LeftOutReason::Finished),
                ("unscheduled".into(), LeftOutReason::NotScheduled),
            ]
        );
    }

    /// A resize the kubelet defers changes only the pod's status; the watch hands out the
    /// pod set again, and the pod ranks on its allocation (1.33+ shape: the condition, and
    /// the allocation in the status's resources).
    #[test]
    fn a_deferred_resize_is_a_change_ranked_on_the_allocation() {
        let mut watcher = KubeWatcher {
            node: "n1".into(),
            events: futures::stream::empty().boxed(),
            pods: BTreeMap::new(),
            relisting: None,
        };
        let resized = |status: serde_json::Value| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "web", "uid": "00000000-0000-4000-8000-000000000001"},
                "spec": {"nodeName": "n1", "containers": [{"name": "app",
                    "resources": {"requests": {"memory": "1Gi"}}}]},
                "status": status,
            }))
            .expect("test pod")
        };
        let request = |watcher: &KubeWatcher| {
            let loaded = watcher.loaded();
            loaded.pods[0].facts.as_ref().expect("facts").memory_request
        };
        let running = serde_json::json!([{"name": "app", "ready": true, "restartCount": 0,
            "image": "web:1", "imageID": "",
            "resources": {"requests": {"memory": "512Mi"}}}]);
        assert!(
            watcher.apply(watcher::Event::Apply(resized(serde_json::json!({
            "phase": "Running", "containerStatuses": running.clone()}))))
        );
        assert_eq!(
            request(&watcher).ceil_units(),
            1 << 30,
            "no resize pending: the spec"
        );
        assert!(watcher.apply(watcher::Event::Apply(resized(serde_json::json!({
            "phase": "Running", "containerStatuses": running,
            "conditions": [{"type": "PodResizePending", "status": "True", "reason": "Deferred"}]})))));
        assert_eq!(
            request(&watcher).ceil_units(),
            512 << 20,
            "deferred: the allocation"
        );
    }
}
