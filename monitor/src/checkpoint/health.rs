//! Whether the agent's checkpoint writes succeed, as the metrics and the doctor show it.

/// What the agent can say about its checkpoint, for health and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CheckpointHealth {
    /// The last write succeeded (or nothing needed writing).
    Writable,
    /// Writes fail since `for_secs` seconds; the state is kept in memory and retried.
    Failing { for_secs: u64, error: String },
}
