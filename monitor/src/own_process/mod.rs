//! The agent's own process: protected on a node short of memory ([`self_protect`]: its OOM
//! score lowered, its memory locked, its own pod kept out of every ranking) and, when asked,
//! its event thread at real-time priority ([`realtime`]).
pub(crate) mod realtime;
pub(crate) mod self_protect;
