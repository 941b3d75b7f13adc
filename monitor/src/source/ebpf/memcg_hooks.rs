//! The memcg stat programs' hook: the loader walks the plan ([`hook_plan::candidates`]),
//! trying each hook kind in turn until one attaches its programs. Each kind is resolved
//! from BTF while it is parsed, and attached once the object is loaded.
use std::path::Path;

use aya::Ebpf;

use super::{
    LoadError, MEMCG_CATEGORY, Skipped,
    fentry_hooks::{FentryError, FentryHooks},
    raw_tracepoints::{RawTracepointError, RawTracepoints},
    stat_links::StatLinks,
    tracepoints::attach_all,
};
use crate::source::{
    btf::Types,
    fentry::FentryUnavailable,
    hook_plan::{self, MemcgHook, MemcgMethod},
    hook_unavailable::HookUnavailable,
    programs::{FentrySpec, PROGRAMS, ProgramSpec},
};

/// One hook kind of the plan, as far as BTF could prepare it.
enum Candidate {
    Raw(Result<RawTracepoints, HookUnavailable>),
    /// Checked against tracefs when attached.
    Classic,
    Fentry(Result<FentryHooks, FentryUnavailable>),
}

/// The hook kinds to try, in the plan's order.
pub(super) struct MemcgPlan(Vec<Candidate>);

/// What walking the plan attached, and why the memcg programs not attached were not.
#[derive(Default)]
pub(super) struct MemcgAttached {
    pub(super) attached: Vec<&'static ProgramSpec>,
    pub(super) skipped: Vec<Skipped>,
    /// The fentry programs attached and their functions; empty unless fentry was used.
    pub(super) fentry: Vec<(&'static FentrySpec, &'static str)>,
}

impl MemcgPlan {
    /// Resolves each kind `asked` may use from BTF, before it is freed.
    pub(super) fn resolve(asked: MemcgHook, types: &Types<'_>) -> Self {
        Self(
            hook_plan::candidates(asked)
                .iter()
                .map(|method| match method {
                    MemcgMethod::RawTracepoint => Candidate::Raw(RawTracepoints::resolve(types)),
                    MemcgMethod::Tracepoint => Candidate::Classic,
                    MemcgMethod::Fentry => Candidate::Fentry(FentryHooks::resolve(types)),
                })
                .collect(),
        )
    }

    /// Attaches the first kind that can be; none is no error (memory is then polled).
    pub(super) fn attach(
        self,
        ebpf: &mut Ebpf,
        tracefs: &Path,
        stat_links: &mut StatLinks,
    ) -> Result<MemcgAttached, LoadError> {
        let mut out = MemcgAttached::default();
        for candidate in self.0 {
            match candidate {
                Candidate::Raw(raw) => match attach_raw(raw, ebpf, stat_links) {
                    Ok(()) => {
                        tracing::info!(
                            "memory stats come from raw tracepoints on the memcg tracepoints"
                        );
                        out.attached.extend(memcg_programs());
                        break;
                    }
                    Err(reason) => tracing::info!(
                        "raw memcg tracepoints not attached ({reason}): trying the classic ones"
                    ),
                },
                Candidate::Classic => {
                    let (attached, skipped) =
                        attach_all(ebpf, tracefs, memcg_programs(), stat_links)?;
                    out.skipped = skipped;
                    // One program alone counts part of the memory, as it always has.
                    if !attached.is_empty() {
                        out.attached = attached;
                        break;
                    }
                }
                Candidate::Fentry(fentry) => match attach_fentry(fentry, ebpf, stat_links) {
                    Ok(hooked) => {
                        let functions: Vec<&str> = hooked.iter().map(|(_, f)| *f).collect();
                        tracing::info!(
                            "no memcg tracepoints here: memory stats come from fentry on {}",
                            functions.join(", ")
                        );
                        for (program, _) in &hooked {
                            out.skipped.retain(|s| s.program.name != program.replaces);
                            out.attached
                                .extend(PROGRAMS.iter().filter(|p| p.name == program.replaces));
                        }
                        out.fentry = hooked;
                        break;
                    }
                    Err(reason) => note_fentry_failure(&mut out.skipped, &reason),
                },
            }
        }
        Ok(out)
    }
}

fn attach_raw(
    raw: Result<RawTracepoints, HookUnavailable>,
    ebpf: &mut Ebpf,
    stat_links: &mut StatLinks,
) -> Result<(), RawTracepointError> {
    Ok(raw?.attach(ebpf, stat_links)?)
}

fn attach_fentry(
    fentry: Result<FentryHooks, FentryUnavailable>,
    ebpf: &mut Ebpf,
    stat_links: &mut StatLinks,
) -> Result<Vec<(&'static FentrySpec, &'static str)>, FentryError> {
    fentry?.attach(ebpf, stat_links)
}

/// The classic tracepoint programs of the memcg stats.
fn memcg_programs() -> impl Iterator<Item = &'static ProgramSpec> {
    PROGRAMS.iter().filter(|p| p.category == MEMCG_CATEGORY)
}

/// Says, for each memcg program not attached, why fentry could not stand in.
fn note_fentry_failure(skipped: &mut Vec<Skipped>, reason: &FentryError) {
    for program in memcg_programs() {
        match skipped.iter_mut().find(|s| s.program.name == program.name) {
            Some(entry) => entry.reason = format!("{}; fentry: {reason}", entry.reason),
            None => skipped.push(Skipped {
                program,
                reason: format!("fentry: {reason}"),
            }),
        }
    }
}
