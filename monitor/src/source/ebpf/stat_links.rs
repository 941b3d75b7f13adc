//! The links of the memcg stat programs, kept so the agent can take them off the kernel while
//! no memory threshold is near (a page fault then runs no program of ours) and put them back
//! when one comes near.
//!
//! The programs stay loaded, and their maps with them: only the links go. Detaching and
//! attaching are one syscall per program (a few microseconds on 6.18).
use aya::{
    Ebpf,
    programs::{
        FEntry, ProgramError, RawTracePoint, TracePoint, fentry::FEntryLinkId,
        raw_trace_point::RawTracePointLinkId, trace_point::TracePointLinkId,
    },
};

/// Where a stat program hooks the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum StatHook {
    /// A raw tracepoint of this name.
    Raw(&'static str),
    /// A classic tracepoint: category and name.
    Classic(&'static str, &'static str),
    /// fentry on the function the program was loaded for.
    Fentry,
}

/// A link as aya names it for each program type.
enum Link {
    Raw(RawTracePointLinkId),
    Classic(TracePointLinkId),
    Fentry(FEntryLinkId),
}

struct StatProgram {
    name: &'static str,
    hook: StatHook,
    /// `None` while detached.
    link: Option<Link>,
}

/// The stat programs' links, attached or not: all of them or none, since one program alone
/// would count only part of a cgroup's memory.
#[derive(Default)]
pub(super) struct StatLinks {
    programs: Vec<StatProgram>,
}

/// Why the stat programs could not be attached or detached.
#[derive(Debug, thiserror::Error)]
#[error("{action} {program}: {source}")]
pub struct StatLinkError {
    action: &'static str,
    program: &'static str,
    source: ProgramError,
}

impl StatLinks {
    /// Records a stat program the loader attached.
    pub(super) fn raw(
        &mut self,
        name: &'static str,
        tracepoint: &'static str,
        link: RawTracePointLinkId,
    ) {
        self.push(name, StatHook::Raw(tracepoint), Link::Raw(link));
    }

    pub(super) fn classic(
        &mut self,
        name: &'static str,
        category: &'static str,
        tracepoint: &'static str,
        link: TracePointLinkId,
    ) {
        self.push(
            name,
            StatHook::Classic(category, tracepoint),
            Link::Classic(link),
        );
    }

    pub(super) fn fentry(&mut self, name: &'static str, link: FEntryLinkId) {
        self.push(name, StatHook::Fentry, Link::Fentry(link));
    }

    fn push(&mut self, name: &'static str, hook: StatHook, link: Link) {
        self.programs.push(StatProgram {
            name,
            hook,
            link: Some(link),
        });
    }

    /// Whether every stat program runs on its hook now; after a failed detach some may,
    /// which counts as detached (their records alone would miss part of the memory).
    pub(super) fn attached(&self) -> bool {
        self.programs.iter().all(|p| p.link.is_some())
    }

    /// Takes every stat program off its hook. The error names the first that could not be
    /// detached; the others are detached all the same.
    pub(super) fn detach(&mut self, ebpf: &mut Ebpf) -> Result<(), StatLinkError> {
        let mut first_error = None;
        for program in &mut self.programs {
            let Some(link) = program.link.take() else {
                continue;
            };
            if let Err(source) = detach_one(ebpf, program.name, link) {
                // aya forgets a link it failed to detach; the program is reattached at the
                // next attach like the others.
                first_error.get_or_insert(StatLinkError {
                    action: "detaching",
                    program: program.name,
                    source,
                });
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Puts every stat program back on its hook, or none: after a failure the ones just
    /// attached are detached again.
    pub(super) fn attach(&mut self, ebpf: &mut Ebpf) -> Result<(), StatLinkError> {
        for i in 0..self.programs.len() {
            let program = &mut self.programs[i];
            if program.link.is_some() {
                continue;
            }
            match attach_one(ebpf, program.name, program.hook) {
                Ok(link) => program.link = Some(link),
                Err(source) => {
                    let program = program.name;
                    // Best effort: whatever stays attached is detached at the next try.
                    let _ = self.detach(ebpf);
                    return Err(StatLinkError {
                        action: "attaching",
                        program,
                        source,
                    });
                }
            }
        }
        Ok(())
    }
}

fn attach_one(ebpf: &mut Ebpf, name: &'static str, hook: StatHook) -> Result<Link, ProgramError> {
    let program = ebpf
        .program_mut(name)
        .ok_or(ProgramError::UnexpectedProgramType)?;
    Ok(match hook {
        StatHook::Raw(tracepoint) => {
            Link::Raw(<&mut RawTracePoint>::try_from(program)?.attach(tracepoint)?)
        }
        StatHook::Classic(category, tracepoint) => {
            Link::Classic(<&mut TracePoint>::try_from(program)?.attach(category, tracepoint)?)
        }
        StatHook::Fentry => Link::Fentry(<&mut FEntry>::try_from(program)?.attach()?),
    })
}

fn detach_one(ebpf: &mut Ebpf, name: &'static str, link: Link) -> Result<(), ProgramError> {
    let program = ebpf
        .program_mut(name)
        .ok_or(ProgramError::UnexpectedProgramType)?;
    match link {
        Link::Raw(link) => <&mut RawTracePoint>::try_from(program)?.detach(link),
        Link::Classic(link) => <&mut TracePoint>::try_from(program)?.detach(link),
        Link::Fentry(link) => <&mut FEntry>::try_from(program)?.detach(link),
    }
}
