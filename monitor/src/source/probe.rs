//! What the running kernel offers the agent, as plain data, and the event source that follows.
//!
//! Probing only reads (tracefs, sysfs, /proc) and creates one throw-away BPF map; the choice of
//! source is a pure function of the probed facts, so it is tested for kernels we do not run on.
//!
//! Minimum kernels: BPF ring buffer 5.8, cgroup tracepoints 4.18, PSI 4.20, memcg tracepoints
//! 6.13, fentry on the memcg stat functions 5.11 (see [`super::programs`]).
use std::{
    fmt, fs,
    path::{Path, PathBuf},
};

use aya::maps::MapType;

pub use super::hook_plan::MemcgMethod;
use super::{
    btf::{Types, VMLINUX_BTF},
    ebpf::{raw_tracepoints_usable, stat_items},
    fentry::{self, FentryTarget, FentryUnavailable},
    hook_plan::{self, HookFacts, MemcgHook},
    hook_unavailable::{HookUnavailable, TracepointUnavailable},
    programs::{PROGRAMS, ProgramSpec},
    tracefs::{ensure_tracefs, tracepoint_exists},
    tracepoint_format::{self, LayoutError},
};
use crate::cgroupfs::{CgroupVersion, MemoryHierarchy};

/// Node-wide memory pressure (CONFIG_PSI, not disabled with `psi=0`).
pub const NODE_PSI: &str = "/proc/pressure/memory";
/// Where cgroup2 is mounted: the whole tree on unified systems, or beside the v1 controllers
/// on hybrid ones. Only consulted when the memory controller itself is not on cgroup2.
const CGROUP2_MOUNTS: [&str; 2] = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"];
/// Tracepoint category of the per-cgroup memory programs, whose hook varies by kernel.
const MEMCG_CATEGORY: &str = "memcg";

/// One entry of [`PROGRAMS`] and whether this kernel has its tracepoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgramSupport {
    pub program: &'static ProgramSpec,
    pub present: bool,
    /// Why the tracepoint's record does not fit the fields the program reads (a field
    /// missing, resized or of other signedness); `None` when it fits or is absent.
    pub mismatch: Option<LayoutError>,
}

impl ProgramSupport {
    /// The program can be attached here: its tracepoint exists with the fields it reads.
    pub fn usable(&self) -> bool {
        self.present && self.mismatch.is_none()
    }
}

/// Pressure stall information for memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Psi {
    /// /proc/pressure/memory is readable.
    pub node: bool,
    /// Root of a cgroup2 mount whose cgroups have a readable memory.pressure. PSI is tracked per
    /// cgroup2 cgroup whether or not the memory controller is enabled there, so on hybrid
    /// systems this is the unified mount beside the v1 memory controller.
    pub cgroup: Option<PathBuf>,
}

impl Psi {
    /// What PSI this kernel offers, given the memory hierarchy (when one was found).
    pub fn probe(memory: Option<&MemoryHierarchy>) -> Self {
        Self {
            node: fs::read_to_string(NODE_PSI).is_ok(),
            cgroup: cgroup_psi_mount(memory),
        }
    }
}

/// Everything the agent needs to know about the running kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelFeatures {
    /// `uname -r`.
    pub release: String,
    /// /sys/kernel/btf/vmlinux exists.
    pub btf: bool,
    /// BPF_MAP_TYPE_RINGBUF can be created (or, when probing is not permitted, the kernel is
    /// at least 5.8).
    pub ring_buffer: bool,
    /// The tracefs root, or why there is none; without it every tracepoint counts as missing.
    pub tracefs: Result<PathBuf, String>,
    /// Every entry of [`PROGRAMS`], in order.
    pub programs: Vec<ProgramSupport>,
    /// Where each fentry program could attach (from BTF), or why BTF could not tell.
    pub fentry: Result<Vec<FentryTarget>, HookUnavailable>,
    /// Whether the raw memcg programs can be used (prototypes and offsets from BTF), or why
    /// not.
    pub raw_tracepoint: Result<(), HookUnavailable>,
    /// Whether BTF names every stat item the programs count, or why not (the loader's own
    /// words): without them no kernel program runs.
    pub stat_items: Result<(), String>,
    /// The memory controller, or why it was not found.
    pub memory: Result<MemoryHierarchy, String>,
    pub psi: Psi,
}

/// Where the agent's memory numbers and cgroup lifecycle come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum EventSource {
    /// Everything from the kernel programs through the ring buffer.
    #[serde(rename = "ebpf")]
    Ebpf,
    /// Cgroup creation and removal from the kernel; memory numbers by polling cgroupfs.
    #[serde(rename = "ebpf+poll")]
    EbpfPoll,
    /// Everything by polling cgroupfs.
    #[serde(rename = "poll")]
    Poll,
}

impl fmt::Display for EventSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EventSource::Ebpf => "ebpf",
            EventSource::EbpfPoll => "ebpf+poll",
            EventSource::Poll => "poll",
        })
    }
}

impl KernelFeatures {
    /// Probes the running kernel, mounting tracefs if needed. Never fails: what cannot be
    /// probed is recorded as missing, with the reason where there is one.
    pub fn probe() -> Self {
        let release = running_release();
        let tracefs = ensure_tracefs().map_err(|e| e.to_string());
        let programs = PROGRAMS
            .iter()
            .map(|program| match tracefs.as_deref() {
                Ok(root) if tracepoint_exists(root, program) => ProgramSupport {
                    program,
                    present: true,
                    mismatch: tracepoint_format::read(root, program).err(),
                },
                _ => ProgramSupport {
                    program,
                    present: false,
                    mismatch: None,
                },
            })
            .collect();
        let BtfFacts {
            fentry,
            raw_tracepoint,
            stat_items,
        } = probe_btf();
        let memory = MemoryHierarchy::discover().map_err(|e| e.to_string());
        let psi = Psi::probe(memory.as_ref().ok());
        Self {
            ring_buffer: ring_buffer_supported(&release),
            release,
            btf: Path::new(VMLINUX_BTF).exists(),
            tracefs,
            programs,
            fentry,
            raw_tracepoint,
            stat_items,
            memory,
            psi,
        }
    }

    /// What this kernel offers each memcg hook.
    pub(crate) fn hook_facts(&self) -> HookFacts {
        let memcg: Vec<_> = self
            .programs
            .iter()
            .filter(|p| p.program.category == MEMCG_CATEGORY)
            .collect();
        let tracepoint = match memcg.iter().find(|p| !p.usable()) {
            None => Ok(()),
            Some(p) => {
                let hook = p.program.hook();
                Err(match p.mismatch.clone() {
                    Some(source) => TracepointUnavailable::Layout { hook, source },
                    None => TracepointUnavailable::Absent { hook },
                }
                .into())
            }
        };
        let fentry = match &self.fentry {
            Ok(targets) => match targets.iter().find_map(|t| t.function.as_ref().err()) {
                None => Ok(()),
                Some(why) => Err(FentryUnavailable::from(why.clone()).into()),
            },
            Err(why) => Err(why.clone()),
        };
        HookFacts {
            raw_tracepoint: self.raw_tracepoint.clone(),
            tracepoint,
            fentry,
        }
    }

    /// How the memcg programs hook this kernel by default, from the plan the loader follows
    /// ([`hook_plan::choose`]); `None` when memory is polled.
    pub fn memcg_method(&self) -> Option<MemcgMethod> {
        // No hook counts what the programs cannot name.
        self.stat_items.as_ref().ok()?;
        hook_plan::choose(MemcgHook::Auto, &self.hook_facts())
    }

    /// The source the agent will use. Every kernel path needs BTF (the loader resolves stat
    /// item numbers from it) and the ring buffer (the programs deliver records through it).
    pub fn source(&self) -> EventSource {
        let all_present = |wanted: fn(&ProgramSpec) -> bool| {
            self.programs
                .iter()
                .filter(|p| wanted(p.program))
                .all(ProgramSupport::usable)
        };
        if !self.btf || !self.ring_buffer || self.stat_items.is_err() || !all_present(is_lifecycle)
        {
            EventSource::Poll
        } else if self.memcg_method().is_some() {
            EventSource::Ebpf
        } else {
            EventSource::EbpfPoll
        }
    }

    /// The tracepoint programs the loader should attach for [`Self::source`] (with fentry,
    /// the memcg programs are attached to functions instead).
    pub fn programs_to_attach(&self) -> Vec<&'static ProgramSpec> {
        let wanted: fn(&ProgramSpec) -> bool = match (self.source(), self.memcg_method()) {
            (EventSource::Ebpf, Some(MemcgMethod::RawTracepoint | MemcgMethod::Tracepoint)) => {
                |_| true
            }
            (EventSource::Ebpf | EventSource::EbpfPoll, _) => is_not_memcg,
            (EventSource::Poll, _) => |_| false,
        };
        self.programs
            .iter()
            .filter(|p| wanted(p.program))
            .map(|p| p.program)
            .collect()
    }
}

/// What the running kernel's BTF says, parsed once (see [`KernelFeatures`]).
struct BtfFacts {
    fentry: Result<Vec<FentryTarget>, HookUnavailable>,
    raw_tracepoint: Result<(), HookUnavailable>,
    stat_items: Result<(), String>,
}

/// The fentry programs' targets, whether the raw memcg programs can be used and whether the
/// stat items are named, from the running kernel's BTF.
fn probe_btf() -> BtfFacts {
    let unusable = |why: HookUnavailable| BtfFacts {
        fentry: Err(why.clone()),
        raw_tracepoint: Err(why.clone()),
        stat_items: Err(why.to_string()),
    };
    let types = match fs::read(VMLINUX_BTF) {
        Ok(btf) => btf,
        Err(e) => {
            return unusable(HookUnavailable::NoBtf(format!(
                "reading {VMLINUX_BTF}: {e}"
            )));
        }
    };
    let unparsable = |e| HookUnavailable::from(FentryUnavailable::from(e));
    match Types::parse(&types) {
        Ok(types) => {
            // Only whether they resolve matters here; the loader fills its own.
            let mut config = monitor_common::Config::EMPTY;
            BtfFacts {
                fentry: fentry::targets(&types).map_err(HookUnavailable::from),
                raw_tracepoint: raw_tracepoints_usable(&types),
                stat_items: stat_items(&types, &mut config).map_err(|e| e.to_string()),
            }
        }
        Err(e) => unusable(unparsable(e)),
    }
}

/// The cgroup lifecycle programs, without which the kernel paths are not used.
fn is_lifecycle(program: &ProgramSpec) -> bool {
    program.category == "cgroup"
}

/// The programs attached whatever the memcg hook: the cgroup lifecycle and the task counters.
fn is_not_memcg(program: &ProgramSpec) -> bool {
    program.category != MEMCG_CATEGORY
}

/// A cgroup2 root with memory PSI: the memory hierarchy itself on unified systems, else a
/// cgroup2 mount at one of the usual places.
fn cgroup_psi_mount(memory: Option<&MemoryHierarchy>) -> Option<PathBuf> {
    let v2_memory = memory
        .filter(|h| h.version == CgroupVersion::V2)
        .map(|h| h.mount.clone());
    v2_memory
        .into_iter()
        .chain(CGROUP2_MOUNTS.into_iter().map(PathBuf::from))
        .find(|root| fs::read_to_string(root.join("memory.pressure")).is_ok())
}

fn ring_buffer_supported(release: &str) -> bool {
    match aya::sys::is_map_supported(MapType::RingBuf) {
        Ok(supported) => supported,
        // Creating the probe map needs privileges; without them trust the version that added
        // the ring buffer.
        Err(_) => kernel_version(release).is_some_and(|version| version >= (5, 8)),
    }
}

/// The running kernel's release (`uname -r`), or `unknown`.
pub(crate) fn running_release() -> String {
    fs::read_to_string("/proc/sys/kernel/osrelease")
        .map_or_else(|_| "unknown".into(), |r| r.trim().to_string())
}

/// (major, minor) of a release string such as `6.1.0-57-cloud-amd64`.
pub fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(['.', '-']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::source::tracefs::TRACEFS;

    /// Facts where the tracepoints of the programs `present` selects exist.
    pub(crate) fn facts(
        btf: bool,
        ring_buffer: bool,
        present: impl Fn(&ProgramSpec) -> bool,
    ) -> KernelFeatures {
        KernelFeatures {
            release: "test".into(),
            btf,
            ring_buffer,
            tracefs: Ok(TRACEFS.into()),
            programs: PROGRAMS
                .iter()
                .map(|program| ProgramSupport {
                    program,
                    present: present(program),
                    mismatch: None,
                })
                .collect(),
            fentry: Err(HookUnavailable::NoBtf("not probed in this test".into())),
            raw_tracepoint: Err(HookUnavailable::NoBtf("not probed in this test".into())),
            stat_items: Ok(()),
            memory: Ok(MemoryHierarchy {
                version: CgroupVersion::V2,
                mount: "/sys/fs/cgroup".into(),
                hierarchy_id: 0,
            }),
            psi: Psi {
                node: true,
                cgroup: Some("/sys/fs/cgroup".into()),
            },
        }
    }

    fn all(_: &ProgramSpec) -> bool {
        true
    }

    /// Kernels 6.1-6.12: the cgroup and sched tracepoints but none of the memcg ones (6.13).
    fn without_memcg(program: &ProgramSpec) -> bool {
        program.category != "memcg"
    }

    fn names(programs: Vec<&ProgramSpec>) -> Vec<&str> {
        programs.iter().map(|p| p.name).collect()
    }

    #[test]
    fn kernel_6_18_host_uses_every_program() {
        let host = facts(true, true, all);
        assert_eq!(host.source(), EventSource::Ebpf);
        assert_eq!(host.programs_to_attach().len(), PROGRAMS.len());
    }

    #[test]
    fn kernel_6_1_without_memcg_tracepoints_polls_memory() {
        let vm = facts(true, true, without_memcg);
        assert_eq!(vm.source(), EventSource::EbpfPoll);
        assert_eq!(
            names(vm.programs_to_attach()),
            [
                "cgroup_mkdir",
                "cgroup_rmdir",
                "sched_process_fork",
                "sched_process_exit",
                "cgroup_attach_task"
            ]
        );
    }

    /// 6.1 and 6.12: no memcg tracepoints, but BTF lists the functions they went into.
    pub(crate) fn with_fentry(mut features: KernelFeatures) -> KernelFeatures {
        features.fentry = Ok(crate::source::programs::FENTRY_PROGRAMS
            .iter()
            .map(|program| FentryTarget {
                program,
                function: Ok(program.functions[0]),
            })
            .collect());
        features
    }

    #[test]
    fn kernels_before_6_13_count_memory_with_fentry() {
        let vm = with_fentry(facts(true, true, without_memcg));
        assert_eq!(vm.memcg_method(), Some(MemcgMethod::Fentry));
        assert_eq!(vm.source(), EventSource::Ebpf);
        assert_eq!(
            names(vm.programs_to_attach()),
            [
                "cgroup_mkdir",
                "cgroup_rmdir",
                "sched_process_fork",
                "sched_process_exit",
                "cgroup_attach_task"
            ],
            "the memcg programs go to functions, not tracepoints"
        );
    }

    #[test]
    fn raw_tracepoints_win_where_btf_gives_their_prototype() {
        let mut host = with_fentry(facts(true, true, all));
        host.raw_tracepoint = Ok(());
        assert_eq!(host.memcg_method(), Some(MemcgMethod::RawTracepoint));
        assert_eq!(host.source(), EventSource::Ebpf);
        assert_eq!(host.programs_to_attach().len(), PROGRAMS.len());
    }

    #[test]
    fn tracepoints_win_over_fentry() {
        let host = with_fentry(facts(true, true, all));
        assert_eq!(host.memcg_method(), Some(MemcgMethod::Tracepoint));
        assert_eq!(host.programs_to_attach().len(), PROGRAMS.len());
    }

    #[test]
    fn one_function_missing_from_btf_polls_memory() {
        let mut vm = with_fentry(facts(true, true, without_memcg));
        if let Ok(targets) = &mut vm.fentry {
            targets[1].function = Err(fentry::TargetError::Absent {
                program: targets[1].program,
            });
        }
        assert_eq!(vm.memcg_method(), None);
        assert_eq!(vm.source(), EventSource::EbpfPoll);
    }

    #[test]
    fn no_btf_polls_even_with_every_tracepoint() {
        let no_btf = facts(false, true, all);
        assert_eq!(no_btf.source(), EventSource::Poll);
        assert!(no_btf.programs_to_attach().is_empty());
    }

    #[test]
    fn no_ring_buffer_polls() {
        assert_eq!(facts(true, false, all).source(), EventSource::Poll);
        assert_eq!(
            facts(true, false, without_memcg).source(),
            EventSource::Poll
        );
    }

    #[test]
    fn one_missing_lifecycle_tracepoint_polls() {
        let partial = facts(true, true, |p| p.name != "cgroup_rmdir");
        assert_eq!(partial.source(), EventSource::Poll);
    }

    #[test]
    fn one_missing_memcg_tracepoint_keeps_lifecycle_events() {
        let partial = facts(true, true, |p| p.name != "mod_memcg_lruvec_state");
        assert_eq!(partial.source(), EventSource::EbpfPoll);
        assert_eq!(
            names(partial.programs_to_attach()),
            [
                "cgroup_mkdir",
                "cgroup_rmdir",
                "sched_process_fork",
                "sched_process_exit",
                "cgroup_attach_task"
            ],
            "a lone memcg program would count what is polled anyway"
        );
    }

    #[test]
    fn a_memcg_tracepoint_with_other_fields_is_not_used() {
        let mut host = facts(true, true, all);
        host.programs[1].mismatch = Some(LayoutError::Size {
            field: "val",
            want: 4,
            got: 8,
        });
        assert_eq!(host.memcg_method(), None);
        assert_eq!(host.source(), EventSource::EbpfPoll);
        assert_eq!(
            names(with_fentry(host).programs_to_attach()),
            [
                "cgroup_mkdir",
                "cgroup_rmdir",
                "sched_process_fork",
                "sched_process_exit",
                "cgroup_attach_task"
            ],
            "fentry stands in for tracepoints whose records do not fit"
        );
    }

    #[test]
    fn no_tracepoints_polls() {
        let none = facts(true, true, |_| false);
        assert_eq!(none.source(), EventSource::Poll);
        assert!(none.programs_to_attach().is_empty());
    }

    #[test]
    fn source_names_match_the_json_names() {
        for source in [EventSource::Ebpf, EventSource::EbpfPoll, EventSource::Poll] {
            let json = serde_json::to_string(&source).unwrap();
            assert_eq!(json, format!("\"{source}\""));
        }
    }

    #[test]
    fn kernel_versions_from_release_strings() {
        assert_eq!(kernel_version("6.1.0-57-cloud-amd64"), Some((6, 1)));
        assert_eq!(kernel_version("6.18.44-fc-v669"), Some((6, 18)));
        assert_eq!(kernel_version("5.8"), Some((5, 8)));
        assert_eq!(kernel_version("unknown"), None);
    }

    #[test]
    fn tracepoints_are_directories_under_events() {
        let tmp = tempfile::tempdir().unwrap();
        let mkdir = PROGRAMS.iter().find(|p| p.name == "cgroup_mkdir").unwrap();
        assert!(!tracepoint_exists(tmp.path(), mkdir));
        fs::create_dir_all(tmp.path().join("events/cgroup/cgroup_mkdir")).unwrap();
        assert!(tracepoint_exists(tmp.path(), mkdir));
    }
}
