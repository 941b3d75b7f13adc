//! `raw_mark_victim`: each OOM victim's memory cgroup recorded as the kernel chooses it
//! (6.8+, the prototype checked in BTF), beside the classic `mark_victim` program.
use aya::{Ebpf, programs::RawTracePoint};

use crate::source::btf::Types;

/// The raw program that records each OOM victim's memory cgroup, and the tracepoint
/// arguments it reads (6.8+).
pub(super) const VICTIM_PROGRAM: (&str, &str) = ("raw_mark_victim", "mark_victim");
const VICTIM_PARAMS: [&str; 2] = ["struct task_struct *", "uid_t"];

/// Whether BTF gives `oom/mark_victim` the arguments `raw_mark_victim` reads.
pub(super) fn victim_prototype(types: &Types<'_>) -> Result<(), String> {
    let (_, tracepoint) = VICTIM_PROGRAM;
    match types
        .tracepoint_params(tracepoint)
        .map_err(|e| e.to_string())?
    {
        Some(params) if params == VICTIM_PARAMS => Ok(()),
        Some(params) => Err(format!(
            "tracepoint {tracepoint} has arguments ({}), the program reads ({})",
            params.join(", "),
            VICTIM_PARAMS.join(", ")
        )),
        None => Err(format!("the kernel's BTF has no tracepoint {tracepoint}")),
    }
}

/// Attaches `raw_mark_victim` beside the classic `mark_victim` program. Without it an OOM
/// kill names its victim's cgroup from /proc, which a victim that exits first no longer shows.
pub(super) fn attach_victim_cgroups(
    ebpf: &mut Ebpf,
    prototype: Result<(), String>,
) -> Result<(), String> {
    prototype?;
    let (name, tracepoint) = VICTIM_PROGRAM;
    let program: &mut RawTracePoint = ebpf
        .program_mut(name)
        .ok_or_else(|| format!("program {name} is not in the embedded object"))?
        .try_into()
        .map_err(|e| format!("program {name}: {e}"))?;
    program.load().map_err(|e| format!("loading {name}: {e}"))?;
    // The program keeps its link until the object is dropped.
    program
        .attach(tracepoint)
        .map(drop)
        .map_err(|e| format!("attaching {name} to {tracepoint}: {e}"))
}
