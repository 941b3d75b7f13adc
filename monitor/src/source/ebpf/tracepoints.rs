//! The classic tracepoint programs: each attached where this kernel has its tracepoint with
//! the fields the program reads, at the offsets the kernel's format gives.
use std::path::Path;

use aya::{Ebpf, programs::ProgramError, programs::TracePoint};

use super::{
    LoadError, MEMCG_CATEGORY, Skipped,
    attach_error::{self, AttachError},
    stat_links::StatLinks,
};
use crate::source::{
    hook_unavailable::TracepointUnavailable, programs::ProgramSpec, tracefs::tracepoint_exists,
    tracepoint_format,
};

/// Why a classic tracepoint program was not attached.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TracepointError {
    #[error(transparent)]
    Unavailable(#[from] TracepointUnavailable),
    /// The field offsets could not be written for the program.
    #[error("tracepoint {}: {source}", .program.hook())]
    Fields {
        program: &'static ProgramSpec,
        source: AttachError,
    },
    /// The kernel refused the attach (a security policy, say).
    #[error(transparent)]
    Attach(#[from] ProgramError),
}

/// Loads the given programs and attaches those whose tracepoint exists with the fields the
/// program reads, at the offsets this kernel's format gives. A program the verifier refuses
/// fails the load: the object and this kernel disagree.
pub(super) fn attach_all(
    ebpf: &mut Ebpf,
    tracefs: &Path,
    programs: impl Iterator<Item = &'static ProgramSpec>,
    stat_links: &mut StatLinks,
) -> Result<(Vec<&'static ProgramSpec>, Vec<Skipped>), LoadError> {
    let mut attached = Vec::new();
    let mut skipped = Vec::new();
    for spec in programs {
        if let Err(reason) = prepare(ebpf, tracefs, spec) {
            skipped.push(Skipped {
                program: spec,
                reason: reason.to_string(),
            });
            continue;
        }
        let program: &mut TracePoint = ebpf
            .program_mut(spec.name)
            .ok_or_else(|| LoadError::Program {
                name: spec.name,
                source: ProgramError::UnexpectedProgramType,
            })?
            .try_into()
            .map_err(|source| LoadError::Program {
                name: spec.name,
                source,
            })?;
        program.load().map_err(|source| LoadError::Program {
            name: spec.name,
            source,
        })?;
        match program.attach(spec.category, spec.tracepoint) {
            Ok(link) => {
                if spec.category == MEMCG_CATEGORY {
                    stat_links.classic(spec.name, spec.category, spec.tracepoint, link);
                }
                attached.push(spec);
            }
            Err(err) => skipped.push(Skipped {
                program: spec,
                reason: TracepointError::from(err).to_string(),
            }),
        }
    }
    Ok((attached, skipped))
}

/// Checks the program's tracepoint exists here, reads the offsets of the fields it reads
/// from this kernel's format and writes them into its `FIELDS` entry; an error says why the
/// program cannot run here.
fn prepare(
    ebpf: &mut Ebpf,
    tracefs: &Path,
    spec: &'static ProgramSpec,
) -> Result<(), TracepointError> {
    if !tracepoint_exists(tracefs, spec) {
        return Err(TracepointUnavailable::Absent { hook: spec.hook() }.into());
    }
    let Some(slot) = spec.fields_slot else {
        return Ok(());
    };
    let offsets =
        tracepoint_format::read(tracefs, spec).map_err(|source| TracepointUnavailable::Layout {
            hook: spec.hook(),
            source,
        })?;
    attach_error::write_map(ebpf, "FIELDS", slot as u32, offsets).map_err(|source| {
        TracepointError::Fields {
            program: spec,
            source,
        }
    })
}
