//! The API objects the mock answers with, as the API server renders them.
use crate::TestPod;

/// What the API server answers an Eviction with.
pub(super) fn eviction_answer(status: u16, pod: &str) -> String {
    match status {
        200 | 201 => {
            format!(
                r#"{{"kind":"Status","apiVersion":"v1","metadata":{{}},"status":"Success","code":{status}}}"#
            )
        }
        429 => status_json(
            429,
            "TooManyRequests",
            "Cannot evict pod as it would violate the pod's disruption budget.",
            &format!(
                r#","details":{{"causes":[{{"reason":"DisruptionBudget","message":"The disruption budget {pod}-pdb needs 1 healthy pods and has 1 currently"}}]}}"#
            ),
        ),
        404 => status_json(404, "NotFound", &format!("pods \"{pod}\" not found"), ""),
        _ => status_json(status, "InternalError", "mock failure", ""),
    }
}

/// A failure Status; `extra` is appended inside the object (`,"details":...`).
pub(super) fn status_json(code: u16, reason: &str, message: &str, extra: &str) -> String {
    format!(
        r#"{{"kind":"Status","apiVersion":"v1","metadata":{{}},"status":"Failure","message":"{message}","reason":"{reason}","code":{code}{extra}}}"#
    )
}

/// The pod as the API server would serve it, bound to `node`, running.
pub(super) fn pod_json(pod: &TestPod, node: &str, version: u64) -> String {
    let resources = pod.memory_request_mib.map_or(String::new(), |mib| {
        format!(r#","resources":{{"requests":{{"memory":"{mib}Mi"}}}}"#)
    });
    let priority = pod
        .priority
        .map_or(String::new(), |p| format!(r#","priority":{p}"#));
    format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{}","namespace":"default","uid":"{}","resourceVersion":"{version}"}},"spec":{{"nodeName":"{node}"{priority},"containers":[{{"name":"main","image":"registry.k8s.io/pause:3.9"{resources}}}]}},"status":{{"phase":"Running"}}}}"#,
        pod.name, pod.uid
    )
}

/// A Summary API answer for `node` with each pod's working set in MiB, as the kubelet serves
/// it through the node proxy.
pub fn summary_json(node: &str, pods: &[(&TestPod, u64)]) -> String {
    let pods: Vec<serde_json::Value> = pods
        .iter()
        .map(|(pod, mib)| {
            serde_json::json!({
                "podRef": {"name": pod.name, "namespace": "default", "uid": pod.uid},
                "memory": {"workingSetBytes": mib << 20, "usageBytes": mib << 20},
            })
        })
        .collect();
    serde_json::json!({"node": {"nodeName": node}, "pods": pods}).to_string()
}
