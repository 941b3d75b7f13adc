//! One-shot reads from the Kubernetes API for the commands that look at a node once
//! (`monitor rank --kube`, `monitor trace --kube`): the node's active pods, listed as the
//! agent's watch lists them, and its kubelet's Summary API through the API server's node
//! proxy, the answer `kubectl get --raw /api/v1/nodes/NODE/proxy/stats/summary` prints.
use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Client, Config, api::ListParams};

use super::{
    kube_watch::node_field_selector,
    validate::{is_dns1123_subdomain, validate_pod},
};
use crate::engine::{
    kubelet_view::{Standing, standing},
    printable::printable,
};

/// Why a read from the API failed. kube-rs' errors repeat their causes, so they are shown,
/// not chained.
#[derive(Debug, thiserror::Error)]
pub enum KubeQueryError {
    /// The node name is not a DNS-1123 subdomain, as every Node's name is.
    #[error("node name {0:?} is not a DNS-1123 subdomain")]
    NodeName(String),
    /// The client could not be built from the configuration (TLS or proxy settings).
    #[error("Kubernetes API client: {0}")]
    Client(kube::Error),
    /// Listing the node's pods failed.
    #[error("listing the pods on node {node}: {error} (this needs RBAC list on pods)")]
    Pods { node: String, error: kube::Error },
    /// The Summary API could not be read through the node proxy.
    #[error(
        "reading the Summary API of node {node} through the API server: {error} (this needs \
         RBAC get on nodes/proxy)"
    )]
    Summary { node: String, error: kube::Error },
}

/// A client for one-shot reads.
pub fn client(config: Config) -> Result<Client, KubeQueryError> {
    crate::kube_client::client(config).map_err(KubeQueryError::Client)
}

/// The active pods bound to `node`. A pod whose identifiers are not of Kubernetes' shape is
/// logged and left out, as the agent's watch does.
pub async fn node_pods(client: &Client, node: &str) -> Result<Vec<Pod>, KubeQueryError> {
    check_node_name(node)?;
    let params = ListParams::default().fields(&node_field_selector(node));
    let list = Api::<Pod>::all(client.clone())
        .list(&params)
        .await
        .map_err(|error| KubeQueryError::Pods {
            node: node.to_string(),
            error,
        })?;
    let mut pods = Vec::with_capacity(list.items.len());
    for pod in list.items {
        if let Err(reason) = validate_pod(&pod) {
            let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
            let name = pod.metadata.name.as_deref().unwrap_or("<unnamed>");
            tracing::warn!(
                "skipped: pod {}/{} from the API: {reason}",
                printable(namespace),
                printable(name)
            );
        } else if standing(&pod, Some(node)) == Standing::Active {
            pods.push(pod);
        }
    }
    Ok(pods)
}

/// A node name goes into a URL path: it must be one a Node can have.
fn check_node_name(node: &str) -> Result<(), KubeQueryError> {
    if is_dns1123_subdomain(node) {
        Ok(())
    } else {
        Err(KubeQueryError::NodeName(node.to_string()))
    }
}

/// The Summary API of `node`, as the kubelet answers it.
pub async fn node_summary(client: &Client, node: &str) -> Result<String, KubeQueryError> {
    check_node_name(node)?;
    let failed = |error| KubeQueryError::Summary {
        node: node.to_string(),
        error,
    };
    let request = http::Request::get(format!("/api/v1/nodes/{node}/proxy/stats/summary"))
        .body(Vec::new())
        .map_err(|e| failed(kube::Error::HttpError(e)))?;
    client.request_text(request).await.map_err(failed)
}
