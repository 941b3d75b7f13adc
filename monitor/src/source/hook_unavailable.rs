//! Why this kernel offers a memcg hook no way in, as facts from BTF and tracefs: what
//! `monitor doctor` reports for each hook the plan passes over, and what the loader logs
//! when it passes over the same hook.
use super::{
    fentry::FentryUnavailable, tracepoint_format::LayoutError, tracepoint_prototype::PrototypeError,
};

/// Why a memcg hook cannot be used here, whichever kind it is.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum HookUnavailable {
    /// The kernel's BTF could not be read, so neither BTF hook can be checked.
    #[error("{0}")]
    NoBtf(String),
    /// A raw tracepoint's prototype is not the one its program reads.
    #[error(transparent)]
    Prototype(#[from] PrototypeError),
    #[error(transparent)]
    Tracepoint(#[from] TracepointUnavailable),
    /// Also why the raw memcg programs cannot run: they read the fentry programs' offsets.
    #[error(transparent)]
    Fentry(#[from] FentryUnavailable),
}

/// Why a classic tracepoint program cannot run here.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum TracepointUnavailable {
    /// tracefs does not list the tracepoint (`category/name`).
    #[error("this kernel has no tracepoint {hook}")]
    Absent { hook: String },
    /// The tracepoint's record lacks a field the program reads, or has it in another form.
    #[error("tracepoint {hook}: {source}")]
    Layout { hook: String, source: LayoutError },
}
