//! Where the fentry stat programs attach and how they find a memory cgroup's id, from the
//! running kernel's BTF.
//!
//! A program attaches to the first of its candidate functions that BTF lists with the
//! prototype the program reads (see [`FentrySpec`]); a function missing from BTF was either
//! never built or inlined everywhere, and either way cannot be attached to.
use monitor_common::MemcgOffsets;

use super::{
    btf::{BtfError, Types},
    probe::{kernel_version, running_release},
    programs::{FENTRY_PROGRAMS, FentrySpec},
    struct_members::{MemberOffsets as _, OffsetError},
};

/// One fentry program and the function it can attach to here, or why none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FentryTarget {
    pub program: &'static FentrySpec,
    pub function: Result<&'static str, TargetError>,
}

/// Why an fentry program has no function to attach to here.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum TargetError {
    /// None of its functions is in BTF: never built, or inlined everywhere.
    #[error("the kernel's BTF has none of {} (inlined, or a kernel before {})", .program.functions.join(", "), .program.since)]
    Absent { program: &'static FentrySpec },
    /// Functions of its names exist with other parameters (spelled `name(types)`).
    #[error("{} has another prototype than the program reads", .seen.join(", "))]
    OtherPrototype { seen: Vec<String> },
}

/// Why BTF offers the fentry programs no hook: every program needs its function, and the
/// member offsets they read must resolve.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum FentryUnavailable {
    #[error(transparent)]
    Arch(#[from] ArchRefusal),
    #[error(transparent)]
    Btf(#[from] BtfError),
    #[error(transparent)]
    Offsets(#[from] OffsetError),
    #[error(transparent)]
    Target(#[from] TargetError),
}

/// Why this kernel refuses fentry on its functions whatever its BTF says: arm64 attaches BPF
/// trampolines to kernel functions through ftrace's direct calls, which it got in 6.4
/// (`DYNAMIC_FTRACE_WITH_DIRECT_CALLS`); before, the attach fails with ENOTSUPP (errno 524,
/// seen on Debian 12's arm64 6.1 in the VM tests).
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "arm64 kernels attach fentry to kernel functions from 6.4 (ftrace direct calls); this one \
     is {release}"
)]
pub struct ArchRefusal {
    release: String,
}

/// The refusal of a kernel `release` running on `arch` (as Rust names it), if it refuses.
pub(crate) fn arch_refusal(arch: &str, release: &str) -> Option<ArchRefusal> {
    let too_old = kernel_version(release).is_some_and(|version| version < (6, 4));
    (arch == "aarch64" && too_old).then(|| ArchRefusal {
        release: release.to_string(),
    })
}

/// Every fentry program's target in this kernel, or why it refuses fentry: what the loader
/// attaches to and what `doctor` reports, from one place.
pub(crate) fn targets(types: &Types<'_>) -> Result<Vec<FentryTarget>, FentryUnavailable> {
    if let Some(refusal) = arch_refusal(std::env::consts::ARCH, &running_release()) {
        return Err(refusal.into());
    }
    FENTRY_PROGRAMS
        .iter()
        .map(|program| {
            Ok(FentryTarget {
                program,
                function: target(types, program)?,
            })
        })
        .collect()
}

fn target(
    types: &Types<'_>,
    program: &'static FentrySpec,
) -> Result<Result<&'static str, TargetError>, BtfError> {
    let mut seen = Vec::new();
    for function in program.functions {
        match types.function_params(function)? {
            Some(params) if program.accepts(&params) => return Ok(Ok(function)),
            Some(params) => seen.push(format!("{function}({})", params.join(", "))),
            None => {}
        }
    }
    Ok(Err(if seen.is_empty() {
        TargetError::Absent { program }
    } else {
        TargetError::OtherPrototype { seen }
    }))
}

/// The member offsets from which the programs reach `memcg->css.cgroup->kn->id`.
pub(crate) fn memcg_offsets(types: &Types<'_>) -> Result<MemcgOffsets, OffsetError> {
    Ok(MemcgOffsets {
        pn_lruvec: types.member_offset("mem_cgroup_per_node", "lruvec")?,
        pn_memcg: types.member_offset("mem_cgroup_per_node", "memcg")?,
        memcg_cgroup: types.member_offset("mem_cgroup", "css")?
            + types.member_offset("cgroup_subsys_state", "cgroup")?,
        cgroup_kn: types.member_offset("cgroup", "kn")?,
        kernfs_id: types.member_offset("kernfs_node", "id")?,
        valid: 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::btf::VMLINUX_BTF;

    #[test]
    fn arm64_kernels_before_6_4_refuse_fentry_and_no_x86_64_kernel_does() {
        let cases = [
            ("Debian 12 arm64", "aarch64", "6.1.0-57-cloud-arm64", true),
            ("Ubuntu 22.04 arm64", "aarch64", "5.15.0-1051-aws", true),
            ("6.3 arm64", "aarch64", "6.3.13", true),
            ("6.4 arm64: direct calls", "aarch64", "6.4.0", false),
            (
                "Debian 12's 6.12 arm64",
                "aarch64",
                "6.12.118+deb12-cloud-arm64",
                false,
            ),
            ("x86_64 6.1", "x86_64", "6.1.0-57-cloud-amd64", false),
            (
                "a release not understood: left to the attach",
                "aarch64",
                "unknown",
                false,
            ),
        ];
        for (name, arch, release, refused) in cases {
            let refusal = arch_refusal(arch, release);
            assert_eq!(refusal.is_some(), refused, "{name}");
            if let Some(refusal) = refusal {
                assert_eq!(
                    refusal.to_string(),
                    format!(
                        "arm64 kernels attach fentry to kernel functions from 6.4 (ftrace \
                         direct calls); this one is {release}"
                    ),
                    "{name}"
                );
            }
        }
    }

    /// On the running kernel: each program finds a function (6.13+ and 5.11-6.12 both have
    /// one by some name) and the offsets resolve.
    #[test]
    fn the_running_kernel_has_a_target_for_each_program() {
        let Ok(btf) = std::fs::read(VMLINUX_BTF) else {
            test_skip::cannot_run(test_skip::Reason::Btf, "no /sys/kernel/btf/vmlinux");
            return;
        };
        let types = Types::parse(&btf).unwrap();
        for target in targets(&types).unwrap() {
            assert!(target.function.is_ok(), "{target:?}");
        }
        let offsets = memcg_offsets(&types).unwrap();
        assert_ne!(offsets.pn_lruvec, offsets.pn_memcg, "{offsets:?}");
    }
}
