//! The classic tracepoint programs: each attached where this kernel has its tracepoint with
//! the fields the program reads, at the offsets the kernel's format gives.
use std::path::Path;

use aya::{Ebpf, maps::Array, programs::TracePoint};
use monitor_common::FieldOffsets;

use super::{LoadError, MEMCG_CATEGORY, Skipped, stat_links::StatLinks};
use crate::source::{
    programs::ProgramSpec,
    tracefs::{ensure_tracefs, tracepoint_exists},
    tracepoint_format,
};

/// Loads the given programs and attaches those whose tracepoint exists with the fields the
/// program reads, at the offsets this kernel's format gives.
pub(super) fn attach_all(
    ebpf: &mut Ebpf,
    programs: impl Iterator<Item = &'static ProgramSpec>,
    stat_links: &mut StatLinks,
) -> Result<(Vec<&'static ProgramSpec>, Vec<Skipped>), LoadError> {
    let tracefs = ensure_tracefs()?;
    let mut attached = Vec::new();
    let mut skipped = Vec::new();
    for spec in programs {
        if !tracepoint_exists(&tracefs, spec) {
            skipped.push(Skipped {
                program: spec,
                reason: format!("this kernel has no tracepoint {}", spec.hook()),
            });
            continue;
        }
        if let Err(reason) = write_fields(ebpf, &tracefs, spec) {
            skipped.push(Skipped {
                program: spec,
                reason: format!("tracepoint {}: {reason}", spec.hook()),
            });
            continue;
        }
        let program: &mut TracePoint = ebpf
            .program_mut(spec.name)
            .ok_or_else(|| LoadError::Program {
                name: spec.name,
                source: aya::programs::ProgramError::UnexpectedProgramType,
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
                reason: err.to_string(),
            }),
        }
    }
    Ok((attached, skipped))
}

/// Reads the offsets of the fields the program reads from this kernel's format and writes
/// them into its `FIELDS` entry; an error says why the program cannot run here.
fn write_fields(ebpf: &mut Ebpf, tracefs: &Path, spec: &ProgramSpec) -> Result<(), String> {
    let Some(slot) = spec.fields_slot else {
        return Ok(());
    };
    let offsets = tracepoint_format::read(tracefs, spec).map_err(|e| e.to_string())?;
    Array::<_, FieldOffsets>::try_from(ebpf.map_mut("FIELDS").ok_or("kernel map FIELDS missing")?)
        .and_then(|mut array| array.set(slot as u32, offsets, 0))
        .map_err(|e| format!("writing FIELDS: {e}"))
}
