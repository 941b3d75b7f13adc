//! The agent's checkpointed state, without any I/O: what is kept ([`state`]), how it is
//! encoded, checksummed and versioned ([`format`](mod@format)), the decision state carried
//! into and out of it ([`decision_state`]), with the timers that must run on across a
//! restart, what an agent carries on from a file another mode wrote ([`handover`]), and the
//! shadow scorecard's own file (`scorecard_file`).
//! Reading and writing the files is the agent's (`monitor::checkpoint`).
//!
//! The design follows the kubelet's checkpoint manager: FNV-32a over a canonical dump of the
//! logical content, parsing separate from verification, and a newer version that embeds the
//! older one so that rolling the agent back does not cost its state.
mod canonical;
pub mod decision_state;
mod fnv;
pub(crate) mod format;
#[cfg(test)]
mod format_tests;
pub mod handover;
mod scorecard_file;
pub(crate) mod state;

pub use format::{
    CURRENT_VERSION, Checkpoint, CheckpointError, CheckpointV1, CheckpointV2, CheckpointV3,
    Decoded, decode, encode, migrate_to_v4, migrate_v1_to_v2, state_checksum,
};
pub use handover::{Handover, NotCarried, Origin, take_over};
pub use scorecard_file::{decode_scorecard, encode_scorecard};
pub use state::{
    AgentState, AgentStateV1, BootMarks, ConditionTransition, Counters, EvictionRecord,
    MAX_RECENT_EVICTIONS, Memory, Mode, Now, PendingEviction, SavedPod,
};
