//! The memcg stat programs' two ways in besides the classic tracepoints: raw tracepoints
//! (6.13+, the prototype checked in BTF) and fentry on the functions the tracepoints sit in
//! (5.11-6.12). Each attaches all of its programs or none: a lone one would count part of
//! the memory.
use aya::{
    Btf, Ebpf,
    maps::Array,
    programs::{FEntry, RawTracePoint, fentry::FEntryLinkId},
};
use monitor_common::MemcgOffsets;

use super::{MEMCG_CATEGORY, Skipped, stat_links::StatLinks};
use crate::source::{
    btf::Types,
    fentry::{self as fentry_targets, FentryTarget},
    programs::{FentrySpec, PROGRAMS},
};

/// What the fentry programs attach to and the offsets they read, resolved from BTF before
/// it is freed; an error says why fentry cannot be used.
pub(super) struct FentryPlan {
    pub(super) hooks: Vec<(&'static FentrySpec, &'static str)>,
    pub(super) offsets: MemcgOffsets,
}

impl FentryPlan {
    pub(super) fn resolve(types: &Types<'_>) -> Result<Self, String> {
        let targets = fentry_targets::targets(types).map_err(|e| e.to_string())?;
        let hooks = targets
            .into_iter()
            .map(|FentryTarget { program, function }| function.map(|f| (program, f)))
            .collect::<Result<_, _>>()?;
        let offsets = fentry_targets::memcg_offsets(types).map_err(|e| e.to_string())?;
        Ok(Self { hooks, offsets })
    }
}

/// Loads and attaches every fentry program of the plan, or none: a lone one would count
/// part of the memory. aya needs the kernel's BTF in its own form to name the function to
/// the kernel; it is parsed here only, and freed before returning.
pub(super) fn attach_fentry(
    ebpf: &mut Ebpf,
    plan: FentryPlan,
    stat_links: &mut StatLinks,
) -> Result<Vec<(&'static FentrySpec, &'static str)>, String> {
    Array::<_, MemcgOffsets>::try_from(
        ebpf.map_mut("MEMCG_OFFSETS")
            .ok_or("kernel map MEMCG_OFFSETS missing")?,
    )
    .and_then(|mut array| array.set(0, plan.offsets, 0))
    .map_err(|e| format!("writing MEMCG_OFFSETS: {e}"))?;
    let btf = Btf::from_sys_fs().map_err(|e| format!("reading the kernel's BTF: {e}"))?;
    let mut loaded = Vec::new();
    let mut result = Ok(());
    for (program, function) in &plan.hooks {
        match load_fentry(ebpf, program.name, function, &btf) {
            Ok(link) => loaded.push((program.name, link)),
            Err(reason) => {
                result = Err(reason);
                break;
            }
        }
    }
    if let Err(reason) = result {
        for (name, _) in loaded {
            if let Some(Ok(program)) = ebpf.program_mut(name).map(<&mut FEntry>::try_from) {
                let _ = program.unload();
            }
        }
        return Err(reason);
    }
    for (name, link) in loaded {
        stat_links.fentry(name, link);
    }
    Ok(plan.hooks)
}

fn load_fentry(
    ebpf: &mut Ebpf,
    name: &str,
    function: &str,
    btf: &Btf,
) -> Result<FEntryLinkId, String> {
    let program: &mut FEntry = ebpf
        .program_mut(name)
        .ok_or_else(|| format!("program {name} is not in the embedded object"))?
        .try_into()
        .map_err(|e| format!("program {name}: {e}"))?;
    program
        .load(function, btf)
        .map_err(|e| format!("loading fentry on {function}: {e}"))?;
    program
        .attach()
        .map_err(|e| format!("attaching fentry to {function}: {e}"))
}

/// The raw tracepoint programs and the memcg tracepoint each hooks.
const RAW_PROGRAMS: [(&str, &str); 2] = [
    ("raw_memcg_lruvec_state", "mod_memcg_lruvec_state"),
    ("raw_memcg_state", "mod_memcg_state"),
];

/// The arguments both memcg tracepoints have had since 6.13, as the raw programs read them.
const RAW_PARAMS: [&str; 3] = ["struct mem_cgroup *", "int", "int"];

/// Whether BTF gives both memcg tracepoints the arguments the raw programs read.
/// Whether the raw memcg programs can run here: the tracepoints' prototypes are the ones the
/// programs read, and the struct offsets they need resolve (the same the fentry programs use).
pub(crate) fn raw_tracepoints_usable(types: &Types<'_>) -> Result<(), String> {
    check_raw_prototypes(types)?;
    FentryPlan::resolve(types).map(|_| ())
}

fn check_raw_prototypes(types: &Types<'_>) -> Result<(), String> {
    for (_, tracepoint) in RAW_PROGRAMS {
        match types
            .tracepoint_params(tracepoint)
            .map_err(|e| e.to_string())?
        {
            Some(params) if params == RAW_PARAMS => {}
            Some(params) => {
                return Err(format!(
                    "tracepoint {tracepoint} has arguments ({}), the raw programs read ({})",
                    params.join(", "),
                    RAW_PARAMS.join(", ")
                ));
            }
            None => return Err(format!("the kernel's BTF has no tracepoint {tracepoint}")),
        }
    }
    Ok(())
}

/// Attaches both raw memcg programs, or neither (a lone one would count part of the memory).
pub(super) fn attach_raw(
    ebpf: &mut Ebpf,
    offsets: MemcgOffsets,
    stat_links: &mut StatLinks,
) -> Result<(), String> {
    Array::<_, MemcgOffsets>::try_from(
        ebpf.map_mut("MEMCG_OFFSETS")
            .ok_or("kernel map MEMCG_OFFSETS missing")?,
    )
    .and_then(|mut array| array.set(0, offsets, 0))
    .map_err(|e| format!("writing MEMCG_OFFSETS: {e}"))?;
    let mut links = Vec::new();
    for (name, tracepoint) in RAW_PROGRAMS {
        let program: &mut RawTracePoint = ebpf
            .program_mut(name)
            .ok_or_else(|| format!("program {name} is not in the embedded object"))?
            .try_into()
            .map_err(|e| format!("program {name}: {e}"))?;
        let attached = program
            .load()
            .map_err(|e| format!("loading {name}: {e}"))
            .and_then(|()| {
                program
                    .attach(tracepoint)
                    .map_err(|e| format!("attaching {name} to {tracepoint}: {e}"))
            });
        match attached {
            Ok(link) => links.push((name, tracepoint, link)),
            Err(reason) => {
                for (name, _, link) in links {
                    if let Some(Ok(program)) =
                        ebpf.program_mut(name).map(<&mut RawTracePoint>::try_from)
                    {
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

/// Says, for each memcg program not attached, why fentry could not stand in.
pub(super) fn note_fentry_failure(skipped: &mut Vec<Skipped>, reason: &str) {
    for program in PROGRAMS.iter().filter(|p| p.category == MEMCG_CATEGORY) {
        match skipped.iter_mut().find(|s| s.program.name == program.name) {
            Some(entry) => entry.reason = format!("{}; fentry: {reason}", entry.reason),
            None => skipped.push(Skipped {
                program,
                reason: format!("fentry: {reason}"),
            }),
        }
    }
}
