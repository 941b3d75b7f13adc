//! The MOCK API server's `PATCH /api/v1/nodes/{node}/status`.
use std::net::TcpStream;

use super::{Request, Shared, api_objects::status_json, http_wire::respond};

/// Merges a strategic merge patch's status conditions by type, as the API server does for
/// Node conditions (their patch merge key), and answers with the Node.
pub(super) fn patch_node_status(
    out: &mut TcpStream,
    request: &Request,
    node: &str,
    shared: &Shared,
) -> std::io::Result<()> {
    let content_type_ok = request.content_type.contains("strategic-merge-patch");
    let patch: Option<serde_json::Value> = serde_json::from_str(&request.body).ok();
    let conditions = patch
        .as_ref()
        .and_then(|p| p["status"]["conditions"].as_array().cloned());
    let mut state = shared.lock();
    if node != state.node {
        drop(state);
        return respond(
            out,
            404,
            &status_json(404, "NotFound", &format!("nodes \"{node}\" not found"), ""),
        );
    }
    let (true, Some(conditions)) = (content_type_ok, conditions) else {
        drop(state);
        return respond(
            out,
            400,
            &status_json(
                400,
                "BadRequest",
                "expected a strategic merge patch of status.conditions",
                "",
            ),
        );
    };
    for condition in conditions {
        if let Some(type_) = condition["type"].as_str() {
            let merged = state
                .conditions
                .entry(type_.to_string())
                .or_insert(serde_json::json!({}));
            if let (Some(into), Some(from)) = (merged.as_object_mut(), condition.as_object()) {
                into.extend(from.clone());
            }
        }
    }
    let all: Vec<serde_json::Value> = state.conditions.values().cloned().collect();
    let body = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": state.node, "resourceVersion": state.version.to_string()},
        "status": {"conditions": all},
    })
    .to_string();
    drop(state);
    shared.changed.notify_all();
    respond(out, 200, &body)
}
