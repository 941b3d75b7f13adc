//! Finding each pod's cgroup: its QoS class picks the kubelet's path, the directory's inode
//! is the cgroup id kernel events carry.
//!
//! Only the pod's own directory is ever taken (see [`KubepodsCgroup::own_pod_path`]), so a
//! crafted uid cannot attribute another cgroup's memory to the pod.
//!
//! A pod whose cgroup is not there (not started yet, already gone, or a spec the kubelet
//! would place differently) is logged and returned as missing: the kubelet ranks such a pod
//! as one without stats, and so does the engine, but the agent does not choose it: it has
//! nothing on this node to reclaim.
use std::{fs, os::unix::fs::MetadataExt as _};

use k8s_openapi::api::core::v1::Pod;

use super::cgroup_path::KubepodsCgroup;
use crate::{
    cgroupfs::MemoryHierarchy,
    engine::{
        pod_facts::kubelet_uid,
        pod_request::PodQuantityError,
        printable::printable,
        qos::{QosClass, pod_qos},
    },
};

pub use crate::engine::pod_table::PodCgroup;

/// The cgroup of each pod, in the order of `pods`; `None` (logged) where it cannot be found.
pub fn resolve_pod_cgroups(
    pods: &[Pod],
    hierarchy: &MemoryHierarchy,
    kubepods: &KubepodsCgroup,
) -> Vec<Option<PodCgroup>> {
    pods.iter()
        .map(|pod| {
            find_pod_cgroup(pod, hierarchy, kubepods)
                .map_err(|reason| {
                    tracing::warn!(
                        "{reason}; not a candidate until its cgroup appears (nothing of it on \
                         this node to reclaim)"
                    );
                })
                .ok()
        })
        .collect()
}

/// One pod's cgroup, or why it cannot be found (not logged: callers that look again for a
/// pod still waiting for its cgroup stay quiet).
pub fn find_pod_cgroup(
    pod: &Pod,
    hierarchy: &MemoryHierarchy,
    kubepods: &KubepodsCgroup,
) -> Result<PodCgroup, String> {
    let name = pod.metadata.name.as_deref().unwrap_or("<unnamed>");
    let uid =
        kubelet_uid(pod).ok_or_else(|| format!("pod {}: no metadata.uid", printable(name)))?;
    find_cgroup(
        name,
        uid,
        pod_qos(pod).as_ref().copied(),
        hierarchy,
        kubepods,
    )
}

/// The cgroup of the pod `name` whose kubelet uid is `raw_uid` and whose QoS class is `qos`
/// (or why it has none), as [`find_pod_cgroup`].
pub fn find_cgroup(
    name: &str,
    raw_uid: &str,
    qos: Result<QosClass, &PodQuantityError>,
    hierarchy: &MemoryHierarchy,
    kubepods: &KubepodsCgroup,
) -> Result<PodCgroup, String> {
    let name = printable(name);
    let uid = printable(raw_uid);
    let qos =
        qos.map_err(|error| format!("pod {name} ({uid}): no QoS class, so no cgroup: {error}"))?;
    let rel = kubepods
        .own_pod_path(qos, raw_uid)
        .map_err(|error| format!("pod {name} ({uid}): {error}"))?;
    match fs::metadata(hierarchy.dir(rel.as_str())) {
        Ok(meta) if meta.is_dir() => Ok(PodCgroup {
            id: meta.ino(),
            rel,
        }),
        Ok(_) => Err(format!(
            "pod {name} ({uid}): {rel} is not a cgroup directory"
        )),
        Err(error) => Err(format!("pod {name} ({uid}): cgroup {rel}: {error}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroupfs::CgroupVersion;
    use crate::engine::ids::CgroupRel;

    #[test]
    fn present_cgroups_resolve_to_their_inode_and_absent_ones_to_none() {
        let tmp = tempfile::tempdir().unwrap();
        let hierarchy = MemoryHierarchy {
            version: CgroupVersion::V2,
            mount: tmp.path().into(),
            hierarchy_id: 0,
        };
        let burstable = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-poda_1.slice";
        let guaranteed = "/kubepods.slice/kubepods-podg_1.slice";
        for rel in [burstable, guaranteed] {
            fs::create_dir_all(hierarchy.dir(rel)).unwrap();
        }
        let pods: Vec<Pod> = [
            "metadata: {name: a, uid: a-1}\nspec: {containers: [{name: c, resources: {requests: {memory: 1Mi}}}]}",
            "metadata: {name: g, uid: g-1}\nstatus: {qosClass: Guaranteed}",
            "metadata: {name: gone, uid: z-9}",
            "metadata: {name: bad, uid: a-1}\nspec: {containers: [{name: c, resources: {requests: {memory: x}}}]}",
        ]
        .iter()
        .map(|yaml| serde_norway::from_str(yaml).unwrap())
        .collect();
        let kubepods = KubepodsCgroup::new("kubepods.slice".parse().unwrap());

        let found = resolve_pod_cgroups(&pods, &hierarchy, &kubepods);
        let ino = |rel: &str| fs::metadata(hierarchy.dir(rel)).unwrap().ino();
        assert_eq!(
            found,
            vec![
                Some(PodCgroup {
                    id: ino(burstable),
                    rel: CgroupRel::new(burstable).unwrap()
                }),
                Some(PodCgroup {
                    id: ino(guaranteed),
                    rel: CgroupRel::new(guaranteed).unwrap()
                }),
                None,
                None,
            ]
        );
    }

    #[test]
    fn a_static_pods_cgroup_is_found_under_the_kubelets_uid() {
        use crate::pods::KubepodsCgroup;
        let tmp = tempfile::tempdir().unwrap();
        let hierarchy = MemoryHierarchy {
            version: CgroupVersion::V2,
            mount: tmp.path().into(),
            hierarchy_id: 0,
        };
        let rel = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod8ac8c3a9ee4d182b8d934f20e971ada7.slice";
        fs::create_dir_all(hierarchy.dir(rel)).unwrap();
        let mirror: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "kube-apiserver-n1", "uid": "3f7d1c7e-9a51-4c1e-b1b4-5d8f2a6c0e11",
                "annotations": {"kubernetes.io/config.mirror": "8ac8c3a9ee4d182b8d934f20e971ada7"}},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"memory": "1Mi"}}}]},
        }))
        .unwrap();
        let found = find_pod_cgroup(
            &mirror,
            &hierarchy,
            &KubepodsCgroup::new("kubepods.slice".parse().unwrap()),
        )
        .expect("the mirror pod's cgroup");
        assert_eq!(found.rel, rel);
    }
}
