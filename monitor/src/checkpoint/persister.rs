//! The seam between the agent and its checkpoint file: the [`StateManager`] in the agent, a
//! fake in tests.
use super::{StateError, StateManager};
use crate::engine::checkpoint::AgentState;

/// Where checkpoints go: the real store, or a fake in tests.
pub(crate) trait Persister {
    /// Writes `state` unless the store already holds it; true when it wrote.
    fn save(&mut self, state: &AgentState) -> Result<bool, StateError>;
}

impl<P: Persister + ?Sized> Persister for Box<P> {
    fn save(&mut self, state: &AgentState) -> Result<bool, StateError> {
        (**self).save(state)
    }
}

impl Persister for StateManager {
    fn save(&mut self, state: &AgentState) -> Result<bool, StateError> {
        self.save_if_changed(state)
    }
}
