//! The agent's checkpointed state on disk: a directory of atomically written files
//! ([`store`]), the manager that loads the state at start and saves it when it changed
//! ([`manager`]), the seam the agent writes through (`persister`) and what it says about its
//! writes (`health`). The agent's checkpointer (`agent/checkpointer.rs`) keeps the state and
//! outlives failed writes. Encoding, checksums and versions are pure code in
//! [`crate::engine::checkpoint`].
//!
//! At start the agent calls [`StateManager::open`] (with [`AtStart::Reset`] when run with
//! `--reset-state`), then [`StateManager::save_if_changed`] after each change.
pub mod dir_lock;
pub(crate) mod health;
pub mod key;
pub mod manager;
pub mod now;
pub(crate) mod persister;
pub mod store;
pub mod wall_time;

pub use key::{AGENT_STATE_KEY, Key, KeyError};
pub use manager::{AtStart, Opened, Startup, StateError, StateManager};
pub use now::read_now;
pub use store::{FileStore, StoreError};

/// Where the agent keeps its checkpoints unless told otherwise.
pub const DEFAULT_CHECKPOINT_DIR: &str = "/var/lib/monitor/checkpoints";
