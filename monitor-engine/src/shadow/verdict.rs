//! Why the kubelet evicted another pod than the agent named, from the two messages, which
//! are in the same words (the kubelet's `evictionMessage`): "The node was low on resource:
//! memory. Threshold quantity: 100Mi, available: 50Mi. ...". A different resource or
//! threshold is a configuration difference; the same ones with another pod, an order that
//! differs, which the ranking keys of both pods explain or a bug does.
use std::str::FromStr as _;

use serde::{Deserialize, Serialize};

use crate::printable::printable;
use crate::quantity::Quantity;

const RESOURCE: &str = "The node was low on resource: ";
const THRESHOLD: &str = "Threshold quantity: ";

/// The difference between the agent's decision and the kubelet's eviction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Verdict {
    /// Under pressure on another resource (the agent never acts on disk).
    OtherResource { kubelet: String, agent: String },
    /// The same resource at another threshold: the two configurations differ.
    OtherThreshold { kubelet: String, agent: String },
    /// The same resource and threshold: the two orders differ.
    SameThreshold,
    /// A message not in the kubelet's words.
    Unreadable,
}

impl Verdict {
    /// Compares the agent's decision message with the kubelet's Event message.
    pub fn of(agent: &str, kubelet: &str) -> Verdict {
        let (Some(agent_resource), Some(kubelet_resource)) = (resource(agent), resource(kubelet))
        else {
            return Verdict::Unreadable;
        };
        if agent_resource != kubelet_resource {
            return Verdict::OtherResource {
                kubelet: short(kubelet_resource),
                agent: short(agent_resource),
            };
        }
        match (threshold(agent), threshold(kubelet)) {
            (Some(a), Some(k)) if same_quantity(a, k) => Verdict::SameThreshold,
            (a, k) => Verdict::OtherThreshold {
                kubelet: short(k.unwrap_or("none said")),
                agent: short(a.unwrap_or("none said")),
            },
        }
    }

    /// In words, with what to do about it.
    pub fn explain(&self) -> String {
        match self {
            Verdict::OtherResource { kubelet, agent } => format!(
                "configuration: the kubelet acted on {}, the agent on {}{}",
                printable(kubelet),
                printable(agent),
                if kubelet == "ephemeral-storage" {
                    " (the agent does not act on disk)"
                } else {
                    ""
                }
            ),
            Verdict::OtherThreshold { kubelet, agent } => format!(
                "configuration: the kubelet's threshold is {}, the agent's {} (compare `monitor \
                 config --agent` with the kubelet's configz)",
                printable(kubelet),
                printable(agent)
            ),
            Verdict::SameThreshold => "the same resource and threshold, another pod: the two \
                                       orders differ; if the keys below do not explain it, \
                                       report it as a bug"
                .to_string(),
            Verdict::Unreadable => {
                "the kubelet's message does not say its resource and threshold".to_string()
            }
        }
    }
}

/// A resource or a quantity as a verdict keeps it: a hostile message's is cut short.
fn short(text: &str) -> String {
    text.chars().take(64).collect()
}

/// The text after `prefix` up to the next ". " (or ", ").
fn field<'a>(message: &'a str, prefix: &str, end: &str) -> Option<&'a str> {
    let start = message.find(prefix)? + prefix.len();
    let rest = &message[start..];
    let value = &rest[..rest.find(end).unwrap_or(rest.len())];
    (!value.is_empty()).then_some(value.trim_end_matches('.'))
}

fn resource(message: &str) -> Option<&str> {
    field(message, RESOURCE, ". ")
}

fn threshold(message: &str) -> Option<&str> {
    field(message, THRESHOLD, ", ")
}

/// Equal as quantities (`100Mi` and `104857600`), or as strings when either does not parse.
fn same_quantity(a: &str, b: &str) -> bool {
    match (Quantity::from_str(a), Quantity::from_str(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}
