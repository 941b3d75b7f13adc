//! What the intake keeps between turns: the records held during a read, the fork counter's
//! arming, the pods the pod source handed out. Plain state; the steps that use it are in
//! [`super::intake`].
use super::{event_source::Batch, wake_levels::ForkArming};
use crate::pods::NodePod;

/// What the intake keeps between turns.
#[derive(Default)]
pub(super) struct Intake {
    /// Kernel records taken from the ring during a cgroupfs read, applied after it.
    pub(super) held: Batch,
    /// Whether an undecodable kernel record was logged (the kernel source counts them).
    pub(super) undecodable_logged: bool,
    /// What the kernel's fork counter was last told.
    pub(super) fork_arming: ForkArming,
}

/// The pods on this node as the pod source last handed them out (their cgroups may appear
/// later), and why the source is not open while it is opened again.
#[derive(Default)]
pub(super) struct PodsOnNode {
    pub(super) handed_out: Vec<NodePod>,
    pub(super) source_down: Option<String>,
    /// The lines last logged about pods the source holds that are not ranked.
    pub(super) left_out_logged: Vec<String>,
}
