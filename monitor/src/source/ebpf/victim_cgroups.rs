//! `raw_mark_victim`: each OOM victim's memory cgroup recorded as the kernel chooses it
//! (6.8+, the prototype checked in BTF), beside the classic `mark_victim` program.
use aya::Ebpf;

use super::raw_tracepoints::{RawTracepointError, attach_raw};
use crate::source::{
    btf::Types,
    hook_unavailable::HookUnavailable,
    tracepoint_prototype::{self, PrototypeError},
};

/// The raw program that records each OOM victim's memory cgroup, and the tracepoint
/// arguments it reads (6.8+).
pub(super) const VICTIM_PROGRAM: (&str, &str) = ("raw_mark_victim", "mark_victim");
const VICTIM_PARAMS: [&str; 2] = ["struct task_struct *", "uid_t"];

/// Whether BTF gives `oom/mark_victim` the arguments `raw_mark_victim` reads.
pub(super) fn victim_prototype(types: &Types<'_>) -> Result<(), PrototypeError> {
    tracepoint_prototype::check(types, VICTIM_PROGRAM.1, &VICTIM_PARAMS, "the program reads")
}

/// Attaches `raw_mark_victim` beside the classic `mark_victim` program. Without it an OOM
/// kill names its victim's cgroup from /proc, which a victim that exits first no longer shows.
pub(super) fn attach_victim_cgroups(
    ebpf: &mut Ebpf,
    prototype: Result<(), PrototypeError>,
) -> Result<(), RawTracepointError> {
    prototype.map_err(HookUnavailable::from)?;
    let (name, tracepoint) = VICTIM_PROGRAM;
    // The program keeps its link until the object is dropped.
    attach_raw(ebpf, name, tracepoint)?;
    Ok(())
}
