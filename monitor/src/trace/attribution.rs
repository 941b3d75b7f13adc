//! Who an event is about: a cgroup, and the pod owning it when a pod source is given.
//!
//! Pods come from a manifests directory through the pods module; the trace only needs the
//! mapping from a cgroup path to a pod, which [`PodLookup`] abstracts so the trace stays pure
//! and testable.
use serde::Serialize;

use crate::{engine::ids::deepest_within, engine::printable::printable};

/// A pod, as an SRE names it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub(crate) struct PodIdentity {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// Maps a cgroup to the pod that owns it.
pub(crate) trait PodLookup {
    /// The pod whose cgroup is `cgroup_path` or one of its ancestors (containers live below
    /// their pod's cgroup).
    fn pod_of(&self, cgroup_path: &str) -> Option<&PodIdentity>;
}

/// Pods with their cgroup paths (relative to the memory hierarchy root).
#[derive(Clone, Debug, Default)]
pub(crate) struct PodCgroups {
    pods: Vec<(String, PodIdentity)>,
}

impl PodCgroups {
    pub(crate) fn insert(&mut self, cgroup_path: String, pod: PodIdentity) {
        self.pods.push((cgroup_path, pod));
    }

    /// Pods and their cgroup paths.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, &PodIdentity)> {
        self.pods.iter().map(|(path, pod)| (path.as_str(), pod))
    }
}

impl PodLookup for PodCgroups {
    fn pod_of(&self, cgroup_path: &str) -> Option<&PodIdentity> {
        // The deepest match wins, should pod cgroups ever nest.
        deepest_within(&self.pods, cgroup_path)
    }
}

/// What an event is attributed to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Subject {
    pub cgroup_id: u64,
    /// Path below the memory hierarchy root; `None` for a cgroup the trace has not seen.
    pub cgroup_path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodIdentity>,
}

impl Subject {
    /// `namespace/name` of the pod, else the cgroup path, else the id: what a person reads,
    /// with control characters escaped so it stays on its line.
    pub(crate) fn label(&self) -> String {
        match (&self.pod, &self.cgroup_path) {
            (Some(pod), _) => format!("{}/{}", printable(&pod.namespace), printable(&pod.name)),
            (None, Some(path)) => printable(path).into_owned(),
            (None, None) => format!("<cgroup id {}>", self.cgroup_id),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str) -> PodIdentity {
        PodIdentity {
            namespace: "ns".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
        }
    }

    #[test]
    fn cgroups_map_to_the_deepest_owning_pod() {
        let mut pods = PodCgroups::default();
        pods.insert("/kubepods/burstable/poda".into(), pod("a"));
        pods.insert("/kubepods/podb".into(), pod("b"));
        let cases = [
            ("pod cgroup itself", "/kubepods/burstable/poda", Some("a")),
            (
                "container below the pod",
                "/kubepods/burstable/poda/c1",
                Some("a"),
            ),
            ("guaranteed pod", "/kubepods/podb/c", Some("b")),
            (
                "sibling with a common prefix",
                "/kubepods/burstable/poda2",
                None,
            ),
            ("qos level", "/kubepods/burstable", None),
        ];
        for (name, path, expected) in cases {
            assert_eq!(
                pods.pod_of(path).map(|p| p.name.as_str()),
                expected,
                "{name}"
            );
        }
    }

    #[test]
    fn labels_prefer_the_pod() {
        let mut subject = Subject {
            cgroup_id: 7,
            cgroup_path: None,
            pod: None,
        };
        assert_eq!(subject.label(), "<cgroup id 7>");
        subject.cgroup_path = Some("/a".into());
        assert_eq!(subject.label(), "/a");
        subject.pod = Some(pod("a"));
        assert_eq!(subject.label(), "ns/a");
    }

    #[test]
    fn labels_escape_control_characters() {
        let mut subject = Subject {
            cgroup_id: 7,
            cgroup_path: Some("/a\nstall forged".into()),
            pod: None,
        };
        assert_eq!(subject.label(), "/a\\nstall forged");
        subject.pod = Some(pod("b\rc"));
        assert_eq!(subject.label(), "ns/b\\rc");
    }
}
