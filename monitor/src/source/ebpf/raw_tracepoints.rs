//! The raw memcg programs (6.13+): the memcg tracepoints hooked as raw tracepoints, their
//! prototype checked in BTF, no record filled per update. Both attach, or neither: a lone
//! one would count part of the memory.
use aya::{
    Ebpf,
    programs::{RawTracePoint, raw_trace_point::RawTracePointLinkId},
};
use monitor_common::MemcgOffsets;

use super::{
    attach_error::{self, AttachError},
    fentry_hooks::FentryHooks,
    stat_links::StatLinks,
};
use crate::source::{btf::Types, hook_unavailable::HookUnavailable, tracepoint_prototype};

/// The raw programs and the memcg tracepoint each hooks.
const RAW_PROGRAMS: [(&str, &str); 2] = [
    ("raw_memcg_lruvec_state", "mod_memcg_lruvec_state"),
    ("raw_memcg_state", "mod_memcg_state"),
];

/// The arguments both memcg tracepoints have had since 6.13, as the raw programs read them.
const RAW_PARAMS: [&str; 3] = ["struct mem_cgroup *", "int", "int"];

/// Why a raw tracepoint program (the memcg ones, or `raw_mark_victim`) was not attached.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RawTracepointError {
    #[error(transparent)]
    Unavailable(#[from] HookUnavailable),
    #[error(transparent)]
    Attach(#[from] AttachError),
}

/// The raw memcg programs, ready to attach: their prototypes checked and the struct offsets
/// they read resolved from BTF.
pub(super) struct RawTracepoints {
    offsets: MemcgOffsets,
}

impl RawTracepoints {
    /// Checks BTF: the tracepoints' prototypes are the ones the programs read, and the
    /// offsets they share with the fentry programs resolve (so does the rest of that plan).
    pub(super) fn resolve(types: &Types<'_>) -> Result<Self, HookUnavailable> {
        for (_, tracepoint) in RAW_PROGRAMS {
            tracepoint_prototype::check(types, tracepoint, &RAW_PARAMS, "the raw programs read")?;
        }
        let offsets = FentryHooks::resolve(types)?.offsets;
        Ok(Self { offsets })
    }

    /// Attaches both programs, or neither.
    pub(super) fn attach(
        self,
        ebpf: &mut Ebpf,
        stat_links: &mut StatLinks,
    ) -> Result<(), AttachError> {
        attach_error::write_map(ebpf, "MEMCG_OFFSETS", 0, self.offsets)?;
        let mut links = Vec::new();
        for (name, tracepoint) in RAW_PROGRAMS {
            match attach_raw(ebpf, name, tracepoint) {
                Ok(link) => links.push((name, tracepoint, link)),
                Err(reason) => {
                    for (name, _, link) in links {
                        if let Ok(program) = attach_error::program::<RawTracePoint>(ebpf, name) {
                            let _ = program.detach(link);
                        }
                    }
                    return Err(reason);
                }
            }
        }
        for (name, tracepoint, link) in links {
            stat_links.raw(name, tracepoint, link);
        }
        Ok(())
    }
}

/// Whether the raw memcg programs can run here, for `monitor doctor`.
pub(crate) fn raw_tracepoints_usable(types: &Types<'_>) -> Result<(), HookUnavailable> {
    RawTracepoints::resolve(types).map(drop)
}

/// Loads the raw program `name` and attaches it to `tracepoint`.
pub(super) fn attach_raw(
    ebpf: &mut Ebpf,
    name: &'static str,
    tracepoint: &'static str,
) -> Result<RawTracePointLinkId, AttachError> {
    let program: &mut RawTracePoint = attach_error::program(ebpf, name)?;
    program
        .load()
        .map_err(|source| AttachError::Load { name, source })?;
    program
        .attach(tracepoint)
        .map_err(|source| AttachError::Attach {
            name,
            target: tracepoint,
            source,
        })
}
