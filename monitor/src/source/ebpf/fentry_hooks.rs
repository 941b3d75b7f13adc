//! The fentry memcg programs (5.11-6.12): fentry on the functions the memcg tracepoints were
//! later placed in. All attach, or none: a lone one would count part of the memory.
use aya::{
    Btf, BtfError, Ebpf,
    programs::{FEntry, fentry::FEntryLinkId},
};
use monitor_common::MemcgOffsets;

use super::{
    attach_error::{self, AttachError},
    stat_links::StatLinks,
};
use crate::source::{
    btf::Types,
    fentry::{self, FentryTarget, FentryUnavailable},
    programs::FentrySpec,
};

/// Why the fentry programs were not attached.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FentryError {
    #[error(transparent)]
    Unavailable(#[from] FentryUnavailable),
    /// aya names the function to the kernel from its own parse of the kernel's BTF.
    #[error("reading the kernel's BTF: {0}")]
    KernelBtf(#[from] BtfError),
    #[error(transparent)]
    Attach(#[from] AttachError),
}

/// What the fentry programs attach to and the offsets they read, resolved from BTF before
/// it is freed.
pub(super) struct FentryHooks {
    hooks: Vec<(&'static FentrySpec, &'static str)>,
    pub(super) offsets: MemcgOffsets,
}

impl FentryHooks {
    pub(super) fn resolve(types: &Types<'_>) -> Result<Self, FentryUnavailable> {
        let hooks = fentry::targets(types)?
            .into_iter()
            .map(|FentryTarget { program, function }| function.map(|f| (program, f)))
            .collect::<Result<_, _>>()?;
        let offsets = fentry::memcg_offsets(types)?;
        Ok(Self { hooks, offsets })
    }

    /// Loads and attaches every program, or none, and returns each with its function. aya
    /// needs the kernel's BTF in its own form to name the function to the kernel; it is
    /// parsed here only, and freed before returning.
    pub(super) fn attach(
        self,
        ebpf: &mut Ebpf,
        stat_links: &mut StatLinks,
    ) -> Result<Vec<(&'static FentrySpec, &'static str)>, FentryError> {
        attach_error::write_map(ebpf, "MEMCG_OFFSETS", 0, self.offsets)?;
        let btf = Btf::from_sys_fs()?;
        let mut loaded = Vec::new();
        for (program, function) in &self.hooks {
            match load_fentry(ebpf, program.name, function, &btf) {
                Ok(link) => loaded.push((program.name, link)),
                Err(reason) => {
                    for (name, _) in loaded {
                        if let Ok(program) = attach_error::program::<FEntry>(ebpf, name) {
                            let _ = program.unload();
                        }
                    }
                    return Err(reason.into());
                }
            }
        }
        for (name, link) in loaded {
            stat_links.fentry(name, link);
        }
        Ok(self.hooks)
    }
}

fn load_fentry(
    ebpf: &mut Ebpf,
    name: &'static str,
    function: &'static str,
    btf: &Btf,
) -> Result<FEntryLinkId, AttachError> {
    let program: &mut FEntry = attach_error::program(ebpf, name)?;
    program
        .load(function, btf)
        .map_err(|source| AttachError::LoadFentry { function, source })?;
    program
        .attach()
        .map_err(|source| AttachError::AttachFentry { function, source })
}
