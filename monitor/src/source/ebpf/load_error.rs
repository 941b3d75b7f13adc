//! Why loading failed, or sweeping the kernel's aggregates did.
use std::io;

use crate::source::{
    btf::{BtfError, VMLINUX_BTF},
    struct_members::OffsetError,
    tracefs::TracefsError,
};

/// Why the kernel programs could not be loaded. Each message says what is needed.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// Not running with the privileges BPF needs.
    #[error(
        "loading the kernel programs needs root (or CAP_BPF, CAP_PERFMON and CAP_SYS_RESOURCE): \
         they are attached to kernel tracepoints. Run this command as root"
    )]
    NotRoot,
    /// The kernel has no BTF, so the stat item numbers cannot be resolved.
    #[error(
        "this kernel exposes no BTF at {VMLINUX_BTF}; the kernel programs need a kernel built \
         with CONFIG_DEBUG_INFO_BTF=y to find the memory statistics they count. `monitor doctor` \
         shows what this kernel offers instead"
    )]
    NoBtf,
    /// Tracepoints cannot be attached without tracefs.
    #[error(transparent)]
    Tracefs(#[from] TracefsError),
    /// The BTF did not describe the stat items.
    #[error("reading stat item numbers from the kernel's BTF: {0}")]
    Btf(#[from] BtfError),
    /// The object or its maps failed to load.
    #[error("loading the kernel object: {0}")]
    Object(#[from] aya::EbpfError),
    /// On cgroup v1 the incident programs need struct offsets to find a task's memory cgroup.
    #[error(
        "finding where this kernel keeps a task's memory cgroup (needed on cgroup v1 to \
         attribute stalls and OOM kills): {0}"
    )]
    TaskMemcg(#[from] OffsetError),
    /// A map is missing or has another type than expected.
    #[error("kernel map {name}: {source}")]
    Map {
        name: &'static str,
        source: aya::maps::MapError,
    },
    /// The verifier or the kernel rejected a program.
    #[error("kernel program {name}: {source}")]
    Program {
        name: &'static str,
        source: aya::programs::ProgramError,
    },
    /// The ring buffer could not be registered with the runtime's poller.
    #[error("watching the kernel ring buffer: {0}")]
    Poll(io::Error),
    /// None of the programs could be attached.
    #[error("no kernel program could be attached: {0}")]
    NothingAttached(String),
}
