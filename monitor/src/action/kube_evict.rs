//! Evicting a pod through the Kubernetes API: a policy/v1 Eviction, which the API server
//! checks against the pod's PodDisruptionBudgets before it deletes the pod with the grace
//! period asked for. The kubelet then stops the containers; the agent sees the pod leave
//! its watch.
//!
//! With [`KubeEvictor::deleting`], the pod is deleted with the grace period instead, as the
//! kubelet's node-pressure eviction stops pods whatever their budgets say.
//!
//! The Eviction is built here rather than with kube-rs' `Api::evict`, whose request body
//! names the field `delete_options`, which the API server ignores; the grace period would
//! be lost.
use k8s_openapi::{
    api::policy::v1::Eviction,
    apimachinery::pkg::apis::meta::v1::{DeleteOptions, ObjectMeta, Preconditions},
};
use kube::{
    Api, Client, Config,
    api::{DeleteParams, PostParams},
    core::Status,
};

use crate::engine::pod_facts::PodRef;

/// Why an eviction was not done. None is retried here, nor by the client: the decision step
/// hears each at once (a budget's refusal makes it move on to the next candidate).
#[derive(Debug, thiserror::Error)]
pub enum EvictError {
    /// 429: a PodDisruptionBudget allows no disruption now.
    #[error("eviction of {pod} refused by a PodDisruptionBudget: {message}")]
    DisruptionBudget { pod: String, message: String },
    /// 404: the pod is already gone.
    #[error("{pod} no longer exists")]
    NotFound { pod: String },
    /// 409: the name now belongs to a new pod (the uid precondition failed).
    #[error("{pod} was replaced by a pod of the same name; not evicted: {message}")]
    Replaced { pod: String, message: String },
    /// Any other failure: API server unreachable, RBAC, ... The error is shown, not chained:
    /// kube-rs' messages already repeat their causes.
    #[error(
        "evicting {pod}: {error} (the agent needs RBAC create on pods/eviction, or delete on \
         pods with --ignore-disruption-budgets)"
    )]
    Api { pod: String, error: kube::Error },
}

/// Creates Evictions (or deletes pods) with one client.
#[derive(Clone)]
pub struct KubeEvictor {
    client: Client,
    /// Delete the pod instead of asking for an Eviction: PodDisruptionBudgets are ignored.
    delete: bool,
}

impl KubeEvictor {
    /// A client for `config` that sends each Eviction once. kube-rs' client would retry a
    /// 429 up to 15 times with growing delays, taking it for throttling; to an Eviction it
    /// is a PodDisruptionBudget's answer, which the decision step must hear at once.
    pub fn new(mut config: Config) -> Result<Self, kube::Error> {
        config.default_retry = false;
        Ok(Self {
            client: crate::kube_client::client(config)?,
            delete: false,
        })
    }

    /// This evictor deleting pods (DELETE with the grace period and the uid precondition)
    /// instead of creating Evictions, like the kubelet's node-pressure eviction, which
    /// ignores PodDisruptionBudgets.
    pub fn deleting(self) -> Self {
        Self {
            delete: true,
            ..self
        }
    }

    /// The client, for the agent's other requests (Events, node status).
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// Asks the API server to evict `pod` with `grace_period_seconds`. The pod's uid is a
    /// precondition, so a same-named successor (a StatefulSet's) is never evicted instead.
    pub async fn evict(&self, pod: &PodRef, grace_period_seconds: i64) -> Result<(), EvictError> {
        let api: Api<k8s_openapi::api::core::v1::Pod> =
            Api::namespaced(self.client.clone(), &pod.namespace);
        let result: Result<(), kube::Error> = if self.delete {
            let params = DeleteParams {
                grace_period_seconds: Some(u32::try_from(grace_period_seconds).unwrap_or(0)),
                preconditions: Some(kube::api::Preconditions {
                    uid: Some(pod.uid.clone()),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            api.delete(&pod.name, &params).await.map(drop)
        } else {
            api.create_subresource::<_, Status>(
                "eviction",
                &pod.name,
                &PostParams::default(),
                &eviction(pod, grace_period_seconds),
            )
            .await
            .map(drop)
        };
        let name = pod.to_string();
        match result {
            Ok(()) => Ok(()),
            Err(kube::Error::Api(status)) => Err(match status.code {
                429 => EvictError::DisruptionBudget {
                    pod: name,
                    message: describe(&status),
                },
                404 => EvictError::NotFound { pod: name },
                409 => EvictError::Replaced {
                    pod: name,
                    message: describe(&status),
                },
                _ => EvictError::Api {
                    pod: name,
                    error: kube::Error::Api(status),
                },
            }),
            Err(error) => Err(EvictError::Api { pod: name, error }),
        }
    }
}

/// The Eviction for `pod`.
fn eviction(pod: &PodRef, grace_period_seconds: i64) -> Eviction {
    Eviction {
        metadata: ObjectMeta {
            name: Some(pod.name.clone()),
            namespace: Some(pod.namespace.clone()),
            ..ObjectMeta::default()
        },
        delete_options: Some(DeleteOptions {
            grace_period_seconds: Some(grace_period_seconds),
            preconditions: Some(Preconditions {
                uid: Some(pod.uid.clone()),
                ..Preconditions::default()
            }),
            ..DeleteOptions::default()
        }),
    }
}

/// The server's message with the causes it gives (for a PDB, which budget and why).
fn describe(status: &Status) -> String {
    let causes: Vec<&str> = status
        .details
        .iter()
        .flat_map(|d| &d.causes)
        .map(|c| c.message.as_str())
        .filter(|m| !m.is_empty())
        .collect();
    if causes.is_empty() {
        status.message.clone()
    } else {
        format!("{} ({})", status.message, causes.join("; "))
    }
}
