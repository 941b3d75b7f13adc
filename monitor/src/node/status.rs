//! The agent's pressure state as conditions of the Node, as node-problem-detector publishes
//! its own: a strategic merge patch of nodes/NODE/status whose conditions (merged by type)
//! are the agent's alone, `MonitorMemoryPressure` and `MonitorPIDPressure`. The kubelet's
//! `MemoryPressure` and `PIDPressure` are never written: the kubelet owns them, and the
//! scheduler's taints follow them.
//!
//! A background task patches when the state changes, and every [`HEARTBEAT`] otherwise so
//! `lastHeartbeatTime` says the agent is alive; a failed patch is logged once per run of
//! failures and retried after [`RETRY`]. The decision step only hands over the state.
use std::time::Duration;

use k8s_openapi::{api::core::v1::Node, jiff::Timestamp};
use kube::{
    Api, Client,
    api::{Patch, PatchParams},
};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::engine::signal::NodeCondition;

/// How often the conditions are patched while they do not change.
pub(crate) const HEARTBEAT: Duration = Duration::from_secs(60);
/// How long after a failed patch it is tried again.
pub(crate) const RETRY: Duration = Duration::from_secs(5);

/// The conditions the agent publishes, and the kubelet's condition each one mirrors.
const PUBLISHED: [(NodeCondition, &str); 2] = [
    (NodeCondition::MemoryPressure, "MonitorMemoryPressure"),
    (NodeCondition::PidPressure, "MonitorPIDPressure"),
];

/// Hands the decision step's node conditions to the publishing task.
pub(crate) struct NodeStatusPublisher {
    conditions: watch::Sender<Vec<NodeCondition>>,
}

impl NodeStatusPublisher {
    /// Starts the task that patches `node`'s status; it publishes no pressure at once.
    pub(crate) fn spawn(client: Client, node: &str) -> Self {
        let (conditions, changes) = watch::channel(Vec::new());
        let api: Api<Node> = Api::all(client);
        tokio::spawn(publish(api, node.to_string(), changes));
        Self { conditions }
    }

    /// The node conditions the decision step reports now.
    pub(crate) fn set(&self, conditions: &[NodeCondition]) {
        self.conditions.send_if_modified(|current| {
            let changed = current.as_slice() != conditions;
            if changed {
                *current = conditions.to_vec();
            }
            changed
        });
    }
}

/// Patches on every change and heartbeat until the publisher is dropped.
async fn publish(api: Api<Node>, node: String, mut changes: watch::Receiver<Vec<NodeCondition>>) {
    let mut transitions = Transitions::default();
    let mut failing = false;
    loop {
        let current = changes.borrow_and_update().clone();
        let now = Timestamp::now();
        let patch = status_patch(transitions.update(&current, now), now);
        let wait = match api
            .patch_status(&node, &PatchParams::default(), &Patch::Strategic(patch))
            .await
        {
            Ok(_) => {
                if failing {
                    tracing::info!("node {node}: conditions published again");
                }
                failing = false;
                HEARTBEAT
            }
            Err(error) => {
                if !failing {
                    tracing::warn!(
                        "node {node}: publishing the agent's conditions: {error} (the agent \
                         needs RBAC patch on nodes/status); retrying every {RETRY:?}"
                    );
                }
                failing = true;
                RETRY
            }
        };
        tokio::select! {
            changed = changes.changed() => if changed.is_err() { return },
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// When each published condition last changed status.
#[derive(Default)]
struct Transitions {
    last: Vec<(NodeCondition, bool, Timestamp)>,
}

impl Transitions {
    /// Each published condition's status under `current` and when it took it.
    fn update(&mut self, current: &[NodeCondition], now: Timestamp) -> Vec<(bool, Timestamp)> {
        PUBLISHED
            .iter()
            .map(|(condition, _)| {
                let on = current.contains(condition);
                if let Some((_, was, at)) = self.last.iter_mut().find(|(c, _, _)| c == condition) {
                    if *was != on {
                        (*was, *at) = (on, now);
                    }
                    (on, *at)
                } else {
                    self.last.push((*condition, on, now));
                    (on, now)
                }
            })
            .collect()
    }
}

/// The strategic merge patch for the published conditions: `statuses` holds each one's
/// status (true: pressure) and transition time, in [`PUBLISHED`] order.
fn status_patch(statuses: Vec<(bool, Timestamp)>, now: Timestamp) -> Value {
    let conditions: Vec<Value> = PUBLISHED
        .iter()
        .zip(statuses)
        .map(|((condition, type_), (on, since))| {
            let (status, reason, message) = if on {
                (
                    "True",
                    format!("{condition}ThresholdMet"),
                    format!(
                        "an eviction threshold of the {condition} signals is met, or was \
                         within the pressure transition period"
                    ),
                )
            } else {
                (
                    "False",
                    format!("No{condition}"),
                    format!("no eviction threshold of the {condition} signals is met"),
                )
            };
            json!({
                "type": type_,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": now.to_string(),
                "lastTransitionTime": since.to_string(),
            })
        })
        .collect();
    json!({"status": {"conditions": conditions}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_are_the_agents_own_and_keep_their_transition_time() {
        let t0: Timestamp = "2026-12-01T08:00:00Z".parse().unwrap();
        let t1: Timestamp = "2026-12-01T08:01:00Z".parse().unwrap();
        let t2: Timestamp = "2026-12-01T08:02:00Z".parse().unwrap();
        let mut transitions = Transitions::default();
        let cases = [
            (
                "start, no pressure",
                vec![],
                t0,
                ["False", "False"],
                [t0, t0],
            ),
            (
                "memory pressure",
                vec![NodeCondition::MemoryPressure],
                t1,
                ["True", "False"],
                [t1, t0],
            ),
            (
                "heartbeat, unchanged",
                vec![NodeCondition::MemoryPressure],
                t2,
                ["True", "False"],
                [t1, t0],
            ),
        ];
        for (name, current, now, statuses, since) in cases {
            let patch = status_patch(transitions.update(&current, now), now);
            let conditions = patch["status"]["conditions"].as_array().unwrap();
            let types: Vec<&str> = conditions
                .iter()
                .map(|c| c["type"].as_str().unwrap())
                .collect();
            assert_eq!(
                types,
                ["MonitorMemoryPressure", "MonitorPIDPressure"],
                "{name}"
            );
            for (i, condition) in conditions.iter().enumerate() {
                assert_eq!(condition["status"], statuses[i], "{name}: {condition}");
                assert_eq!(
                    condition["lastTransitionTime"],
                    since[i].to_string(),
                    "{name}"
                );
                assert_eq!(condition["lastHeartbeatTime"], now.to_string(), "{name}");
            }
        }
    }
}
