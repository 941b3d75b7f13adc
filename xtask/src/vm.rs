//! `cargo xtask vm-test`: cgroup v2 and an older kernel, for real, under qemu.
//!
//! Boots each of Debian 12's cloud kernels, 6.1 and 6.12 (neither has the memcg tracepoints
//! of 6.13+: the agent counts memory there with fentry), with an initramfs holding busybox,
//! the `monitor` binary and the `tests` crate's test executables. The VM mounts cgroup2 with
//! the memory controller, runs `monitor doctor` and every test executable with `MONITOR_VM=1`
//! (and `MONITOR_VM_KERNEL` set to the series booted), and reports one result line. Everything
//! it needs is installed or downloaded here, and cached under `target/vm/`.
mod artifacts;
mod cpio;
mod init;
mod initramfs;
mod kernel;
mod packages;
mod qemu;
mod systemd;

use std::{
    path::{Path, PathBuf},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use anyhow::Context as _;

use crate::{arch::Arch, setup::ensure_debian_packages};

/// The VM's RAM unless a run asks for another size.
const MEMORY_MIB: u32 = 2048;
/// TCG emulates every instruction, and its speed follows how busy the host is: on a busy
/// host the whole suite took over 15 minutes on 6.12 (6.1 finished in about 15). A hang
/// still ends here.
const TIMEOUT: Duration = Duration::from_secs(25 * 60);
/// The target directory's place in the VM.
const GUEST_TARGET: &str = "/target";
/// Below [`GUEST_TARGET`], where files from outside the target directory go.
const ELSEWHERE: &str = "elsewhere";

/// Test files whose subject is the same on every kernel: the agent's shell over cgroup v2
/// (its inputs, endpoints, faults, checkpoint and API route), the memory brake (cgroupfs
/// files), and the fork counter (one tracepoint, attached on both, which `doctor` checks in
/// both); and reclaim before eviction, whose premise needs one kernel's LRU (said beside it).
/// Each runs on the kernel named beside it, so the two kernels' VMs, which run side by side,
/// take about as long; the rest, which depend on the memcg hooks or on each kernel's
/// tracepoints, run on both.
const ONE_VM_TESTS: [(&str, &str); 39] = [
    ("agent_kube", "6.1"),
    ("kube_clients", "6.1"),
    ("agent_faults", "6.1"),
    ("agent_checkpoint_dir", "6.1"),
    ("agent_endpoints", "6.1"),
    ("agent_log_sink", "6.1"),
    ("agent_metrics_fds", "6.1"),
    ("deploy_manifests", "6.1"),
    ("deploy_rbac", "6.1"),
    ("rollout_doc", "6.1"),
    ("agent_dry_run_handover", "6.1"),
    ("agent_frozen", "6.1"),
    ("first_hour", "6.1"),
    ("kube_events", "6.1"),
    ("agent_metrics_auth", "6.1"),
    ("container_privileges", "6.1"),
    ("top_tmux", "6.1"),
    ("agent_signals", "6.1"),
    // Moved from 6.12, the longer of the two kernels, to even them out (11:28 against 9:42).
    ("agent_memory_brake", "6.1"),
    // Its premise, cache read twice counted by the kubelet, needs the classic LRU, which 6.1
    // boots with and Debian's 6.12 replaces with the multi-generational one.
    ("agent_reclaim_first", "6.1"),
    // A step against the kernel's memory.reclaim where it answers (6.1), and, listed in
    // X86_POLL_TIER_TESTS, where it has none (5.10).
    ("cgroup_reclaim", "6.1"),
    ("agent_inflight", "6.12"),
    ("agent_pid_pressure", "6.12"),
    ("agent_checkpoint_damage", "6.12"),
    ("agent_config_watch", "6.12"),
    ("kill_frozen", "6.12"),
    ("agent_dry_run", "6.12"),
    ("agent_metrics_port", "6.12"),
    ("monitoring_manifests", "6.12"),
    ("agent_pods", "6.12"),
    ("agent_untrusted_input", "6.12"),
    ("agent_self_protect", "6.12"),
    ("agent_bounded_input", "6.12"),
    ("agent_log_json", "6.12"),
    ("agent_metrics_names", "6.12"),
    ("kill_cgroup_tree", "6.12"),
    ("monitoring_stack", "6.12"),
    ("agent_kernel_victim", "6.12"),
    ("systemd_cgroup_v2", "6.12"),
];

/// The tests of the poll tier's kernel (5.10): that the agent polls there, woken by PSI, and
/// still evicts the right pod (`doctor`, which says why it polls, runs in every VM).
const POLL_TIER_TESTS: [&str; 1] = ["agent_eviction"];
/// On x86_64's poll tier also: a reclaim step refused by a kernel without `memory.reclaim`
/// (5.19); arm64's slower emulation runs the poll tier's own tests only.
const X86_POLL_TIER_TESTS: [&str; 1] = ["cgroup_reclaim"];

/// The tests of the arm64 VMs (emulated, so a subset): `doctor` and the hook it names
/// (`cgroup_v2`), the kernel programs' events (`kernel_events`), the eviction of the right pod
/// (`agent_eviction`) and the brake (`agent_memory_brake`) on 6.12; on 6.1 and the poll tier
/// (5.10) fewer.
const ARM64_TESTS: [&str; 4] = [
    "cgroup_v2",
    "kernel_events",
    "agent_eviction",
    "agent_memory_brake",
];
/// On arm64's 6.1, which refuses fentry (the agent polls memory and keeps its other kernel
/// programs): `doctor`'s account of it and the eviction.
const ARM64_NO_FENTRY_TESTS: [&str; 2] = ["cgroup_v2", "agent_eviction"];

/// Whether `test` runs in the VM of kernel `series`: everything named on the command line;
/// on a poll tier its own tests alone; on arm64 its subset; a one-VM test in its own VM only;
/// every other test on every other kernel.
fn runs_on(test: &Path, series: kernel::Series, named: bool) -> bool {
    if named {
        return true;
    }
    let version = series.version;
    let listed = |names: &[&str]| names.iter().any(|name| is_named(test, name));
    if version == kernel::POLL_TIER {
        return listed(&POLL_TIER_TESTS)
            || (series.arch == Arch::X86_64 && listed(&X86_POLL_TIER_TESTS));
    }
    if series.arch == Arch::Aarch64 && version == kernel::ARM64_NO_FENTRY {
        return listed(&ARM64_NO_FENTRY_TESTS);
    }
    if series.arch == Arch::Aarch64 {
        return listed(&ARM64_TESTS);
    }
    ONE_VM_TESTS
        .iter()
        .find(|(name, _)| is_named(test, name))
        .is_none_or(|(_, on)| *on == version)
}

/// The VMs each kernel's tests are split across. A guest has one vCPU and waits about half
/// its time (each of the two VMs of one per kernel kept 0.4-0.6 of a host core busy), so two
/// per kernel, four in all, fill the host's two cores and halve the VM phase; they run at a
/// lower priority than the host's tests beside them (see [`qemu::boot`]).
const VMS_PER_KERNEL: usize = 2;

/// Seconds the slowest test files took in a VM (TCG, Linux 6.1 and 6.12, commit 4086f3f),
/// to split a kernel's tests into VMs of about equal length; a file not named here counts
/// [`SHORT_TEST_SECS`]. A wrong figure only unbalances the VMs.
const TEST_SECS: [(&str, u32); 26] = [
    ("agent_kube", 126),
    ("agent_eviction", 106),
    ("trace_incidents", 96),
    ("kernel_cgroup_lifecycle", 95),
    ("agent_checkpoint_damage", 68),
    ("kernel_events", 67),
    ("agent_pid_pressure", 65),
    ("agent_memory_brake", 58),
    ("agent_faults", 56),
    ("agent_inflight", 45),
    // Measured at 1c8293b: 25 s on 6.1, 44 s on 6.12.
    ("agent_shadow", 44),
    // Measured on 6.1 with its sixth test (the agent killed mid-ladder).
    ("agent_reclaim_first", 70),
    ("agent_dry_run_handover", 44),
    ("agent_dry_run", 37),
    ("agent_pods", 29),
    ("agent_checkpoint_dir", 27),
    ("systemd_cgroup_v2", 25),
    ("agent_self_protect", 24),
    ("agent_endpoints", 19),
    ("agent_untrusted_input", 19),
    ("agent_bounded_input", 16),
    ("agent_metrics_port", 16),
    ("agent_oom_race", 15),
    ("agent_config_watch", 15),
    ("agent_log_sink", 15),
    ("agent_log_json", 13),
];
/// What a test file not in [`TEST_SECS`] is taken to last.
const SHORT_TEST_SECS: u32 = 5;

/// `tests` split into at most `vms` groups of about equal length, longest first into the
/// shortest group so far; no group is empty.
fn split<'a>(tests: &[&'a Path], vms: usize) -> Vec<Vec<&'a Path>> {
    let secs = |test: &Path| {
        TEST_SECS
            .iter()
            .find(|(name, _)| is_named(test, name))
            .map_or(SHORT_TEST_SECS, |(_, secs)| *secs)
    };
    let mut longest_first = tests.to_vec();
    longest_first.sort_by_key(|test| std::cmp::Reverse(secs(test)));
    let mut groups: Vec<(u32, Vec<&Path>)> = vec![(0, Vec::new()); vms.max(1)];
    for test in longest_first {
        if let Some((total, group)) = groups.iter_mut().min_by_key(|(total, _)| *total) {
            *total += secs(test);
            group.push(test);
        }
    }
    groups
        .into_iter()
        .map(|(_, group)| group)
        .filter(|group| !group.is_empty())
        .collect()
}

/// Runs the tests crate's test executables in the VMs of `arches`: those named in `only`
/// (their file names up to the hash cargo appends), or all when it is empty. The agent they
/// start on x86_64 is `agent` (the image's static release binary, in `cargo xtask test`),
/// else the debug build; on arm64 always the image's. `timed` hears how long each VM took and
/// whether it failed.
pub(crate) fn run(
    only: &[String],
    arches: &[Arch],
    agent: Option<&Path>,
    timed: &mut dyn FnMut(&str, Duration, bool),
) -> anyhow::Result<()> {
    let target = target_dir()?;
    let work = prepare(&target)?;
    let mut plans = Vec::new();
    for arch in arches {
        plans.extend(arch_plans(&work, *arch, only, agent)?);
    }
    // Every VM boots at once, single-vCPU guests sharing the host's cores instead of waiting
    // for each other (TCG makes each run take minutes); each x86_64 kernel's tests are split
    // across [`VMS_PER_KERNEL`] of them, and each VM's RAM disk holds its own tests only.
    // Every VM runs to its end even when another failed: each result is worth having.
    // Console lines are prefixed with the VM they come from.
    let mut vms = Vec::new();
    for plan in &plans {
        let mine: Vec<&Path> = plan
            .tests
            .iter()
            .map(PathBuf::as_path)
            .filter(|test| runs_on(test, plan.series, !only.is_empty()))
            .collect();
        let per_kernel = match plan.series.arch {
            Arch::X86_64 => VMS_PER_KERNEL,
            Arch::Aarch64 => 1,
        };
        let groups = split(&mine, per_kernel);
        let count = groups.len();
        let label = match plan.series.arch {
            Arch::X86_64 => format!("Linux {}", plan.series.version),
            arch @ Arch::Aarch64 => format!("Linux {} {}", plan.series.version, arch.oci()),
        };
        for (i, group) in groups.into_iter().enumerate() {
            let name = match count {
                1 => label.clone(),
                _ => format!("{label} #{}", i + 1),
            };
            let mut guest = Guest::new(&target, &work, plan.series, &plan.kernel, &plan.busybox);
            guest.initrd = format!(
                "initrd-{}-{}-{}.gz",
                plan.series.arch.oci(),
                plan.series.version,
                i + 1
            );
            let in_vm = group
                .iter()
                .map(|test| in_guest(&target, test))
                .collect::<Vec<_>>();
            // The kernel's own checks once, in its first VM.
            let runs = init::test_runs(&in_guest(&target, &plan.monitor), &in_vm, i == 0);
            let executables: Vec<&Path> = std::iter::once(plan.monitor.as_path())
                .chain(group)
                .chain(plan.helpers.iter().map(PathBuf::as_path))
                .collect();
            vms.push((name, guest, executables, runs, plan));
        }
    }
    let booted: Vec<(String, Duration, anyhow::Result<()>)> = std::thread::scope(|scope| {
        let running: Vec<_> = vms
            .iter()
            .map(|(name, guest, executables, runs, plan)| {
                let run = scope.spawn(move || {
                    let monitor = in_guest(guest.target, &plan.monitor);
                    crate::phases::timed(|| {
                        boot_plan(
                            guest,
                            executables,
                            &[("MONITOR_BIN", &monitor)],
                            Some(&in_guest(guest.target, &plan.skip_probe)),
                            runs,
                            |line| println!("[{name}] {line}"),
                        )
                    })
                });
                (name.clone(), run)
            })
            .collect();
        running
            .into_iter()
            .map(|(name, run)| {
                let (took, result) = crate::phases::joined_timed(run, "the VM's runner");
                (name, took, result)
            })
            .collect()
    });
    let mut failed = Vec::new();
    for (name, took, result) in booted {
        timed(&format!("VM {name}"), took, result.is_err());
        if let Err(e) = result {
            eprintln!("vm-test: {name}: {e:#}");
            failed.push(format!("{name}: {e:#}"));
        }
    }
    match failed.as_slice() {
        [] => Ok(()),
        _ => anyhow::bail!("the VM tests failed on {}", failed.join("; ")),
    }
}

/// Builds the tests of every architecture but the machine's for its VMs, as [`run`] will
/// find them built.
pub(crate) fn build_other_arches() -> anyhow::Result<()> {
    artifacts::build_for(Arch::Aarch64, &ARM64_TESTS).map(drop)
}

/// One kernel's VMs: what they boot and run (host paths).
struct KernelPlan {
    series: kernel::Series,
    kernel: kernel::Kernel,
    busybox: PathBuf,
    monitor: PathBuf,
    tests: Vec<PathBuf>,
    helpers: Vec<PathBuf>,
    skip_probe: PathBuf,
}

/// The plans of `arch`'s kernels, with the executables built for it: for x86_64 the host's
/// test build; for another architecture its musl build of the tests it runs (or of those
/// named in `only`) and the image's static agent.
fn arch_plans(
    work: &Path,
    arch: Arch,
    only: &[String],
    agent: Option<&Path>,
) -> anyhow::Result<Vec<KernelPlan>> {
    let series: &[kernel::Series] = match arch {
        Arch::X86_64 => &kernel::SERIES,
        Arch::Aarch64 => &kernel::ARM64_SERIES,
    };
    let (monitor, tests, helpers) = match arch {
        Arch::X86_64 => {
            let built = artifacts::build()?;
            (
                agent.map_or(built.monitor, Path::to_path_buf),
                built.tests,
                built.helpers,
            )
        }
        Arch::Aarch64 => {
            let names: Vec<&str> = if only.is_empty() {
                ARM64_TESTS.to_vec()
            } else {
                only.iter().map(String::as_str).collect()
            };
            let (tests, helpers) = artifacts::build_for(arch, &names)?;
            (crate::image::static_binary(arch)?, tests, helpers)
        }
    };
    let tests: Vec<PathBuf> = tests
        .into_iter()
        .filter(|test| only.is_empty() || only.iter().any(|name| is_named(test, name)))
        .collect();
    if tests.is_empty() {
        anyhow::bail!("no test executable is named {}", only.join(" or "));
    }
    let skip_probe = helpers
        .iter()
        .find(|path| path.file_name().is_some_and(|name| name == "skip_probe"))
        .context("the tests crate built no skip_probe")?
        .clone();
    let busybox = busybox(work, arch)?;
    series
        .iter()
        .map(|series| {
            Ok(KernelPlan {
                series: *series,
                kernel: kernel::ensure(work, *series)?,
                busybox: busybox.clone(),
                monitor: monitor.clone(),
                tests: tests.clone(),
                helpers: helpers.clone(),
                skip_probe: skip_probe.clone(),
            })
        })
        .collect()
}

/// Busybox for `arch`'s VMs: the machine's own, or Debian's static build for `arch`.
fn busybox(work: &Path, arch: Arch) -> anyhow::Result<PathBuf> {
    match arch {
        Arch::X86_64 => Ok(PathBuf::from("/bin/busybox")),
        arch @ Arch::Aarch64 => {
            Ok(packages::unpacked_for(work, "busybox-static", arch)?.join("bin/busybox"))
        }
    }
}

/// Boots the kernel that has both memcg hooks (see [`kernel::BOTH_HOOKS`]) to run `program`
/// with `args` (an executable of this target directory), `env` exported as guest paths; each
/// console line goes to `echo`. Fails unless the program succeeded.
pub(crate) fn run_on_both_hooks_kernel(
    program: &Path,
    args: &[&str],
    env: &[(&str, &Path)],
    echo: impl FnMut(&str),
) -> anyhow::Result<()> {
    run_programs(
        kernel::BOTH_HOOKS,
        MEMORY_MIB,
        &[(program, args)],
        env,
        echo,
    )
}

/// Boots Debian 12's own kernel (6.1) with `memory_mib` of RAM and no swap to run each
/// (program, args) of `runs` in turn, as [`run_on_both_hooks_kernel`] runs one. Fails unless
/// every run succeeded.
pub(crate) fn run_on_debian_kernel(
    memory_mib: u32,
    runs: &[(&Path, &[&str])],
    env: &[(&str, &Path)],
    echo: impl FnMut(&str),
) -> anyhow::Result<()> {
    run_programs(kernel::SERIES[0], memory_mib, runs, env, echo)
}

/// As [`run_on_debian_kernel`] on Debian 12's 6.12 built for `arch` (fentry on both).
pub(crate) fn run_on_6_12(
    arch: Arch,
    memory_mib: u32,
    runs: &[(&Path, &[&str])],
    env: &[(&str, &Path)],
    echo: impl FnMut(&str),
) -> anyhow::Result<()> {
    let series = match arch {
        Arch::X86_64 => kernel::SERIES[1],
        Arch::Aarch64 => kernel::ARM64_SERIES[0],
    };
    run_programs(series, memory_mib, runs, env, echo)
}

/// The tests crate's helper executables of the test build for `arch` (the machine's own, or
/// the arm64 VMs' musl build).
pub(crate) fn test_helpers(arch: Arch) -> anyhow::Result<Vec<PathBuf>> {
    match arch {
        Arch::X86_64 => Ok(artifacts::build()?.helpers),
        Arch::Aarch64 => Ok(artifacts::build_for(arch, &ARM64_TESTS)?.1),
    }
}

/// As [`run_on_debian_kernel`], with systemd as PID 1 and systemd-oomd running (see
/// [`systemd`]); `units` are extra configuration files, (path in the VM, text).
pub(crate) fn run_under_systemd(
    memory_mib: u32,
    runs: &[(&Path, &[&str])],
    env: &[(&str, &Path)],
    units: &[(&str, &str)],
    echo: impl FnMut(&str),
) -> anyhow::Result<()> {
    let target = target_dir()?;
    let work = prepare(&target)?;
    let series = kernel::SERIES[0];
    let kernel = kernel::ensure(&work, series)?;
    let (runs, executables) = plan_runs(&target, runs, env)?;
    let guest_env = guest_env(&target, env);
    let guest_env: Vec<(&str, &Path)> = guest_env
        .iter()
        .map(|(name, path)| (*name, path.as_path()))
        .collect();
    let nonce = nonce();
    let plan = init::script(&init::Plan {
        nonce: &nonce,
        kernel: series.version,
        arch: series.arch.oci(),
        env: &guest_env,
        skip_probe: None,
        runs: &runs,
    });
    let image = systemd::files(&work, &plan, units)?;
    let mut all: Vec<(&Path, PathBuf)> = executables
        .iter()
        .map(|host| (*host, in_guest(&target, host)))
        .collect();
    all.extend(
        image
            .executables
            .iter()
            .map(|(h, g)| (h.as_path(), g.clone())),
    );
    let mut files: Vec<(&Path, PathBuf)> = image
        .files
        .iter()
        .map(|(h, g)| (h.as_path(), g.clone()))
        .collect();
    files.push((
        kernel.ramdisk_module.as_path(),
        PathBuf::from(init::RAMDISK_MODULE),
    ));
    let initrd = work.join("initrd-systemd.gz");
    let busybox = busybox(&work, series.arch)?;
    initramfs::write(
        &initrd,
        &systemd::init(),
        (series.arch, &busybox),
        &all,
        &files,
    )?;
    eprintln!("vm: booting {} with systemd (TCG)", kernel.image.display());
    qemu::boot(
        series.arch,
        &kernel.image,
        &initrd,
        memory_mib,
        &nonce,
        TIMEOUT,
        echo,
    )
}

/// The plan's runs, with the executables they and `env` name (host paths).
fn plan_runs<'a>(
    target: &Path,
    programs: &[(&'a Path, &[&str])],
    env: &[(&str, &'a Path)],
) -> anyhow::Result<(Vec<init::Run>, Vec<&'a Path>)> {
    let runs = programs
        .iter()
        .map(|(program, args)| {
            let name = program
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
            Ok(init::Run::new(&name, &in_guest(target, program), args))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut executables: Vec<&Path> = programs
        .iter()
        .map(|(program, _)| *program)
        .chain(env.iter().map(|(_, host)| *host))
        .collect();
    executables.sort();
    executables.dedup();
    Ok((runs, executables))
}

/// `env` with guest paths.
fn guest_env<'a>(target: &Path, env: &[(&'a str, &Path)]) -> Vec<(&'a str, PathBuf)> {
    env.iter()
        .map(|(name, host)| (*name, in_guest(target, host)))
        .collect()
}

fn run_programs(
    series: kernel::Series,
    memory_mib: u32,
    programs: &[(&Path, &[&str])],
    env: &[(&str, &Path)],
    echo: impl FnMut(&str),
) -> anyhow::Result<()> {
    let target = target_dir()?;
    let work = prepare(&target)?;
    let kernel = kernel::ensure(&work, series)?;
    let guest_env = guest_env(&target, env);
    let guest_env: Vec<(&str, &Path)> = guest_env
        .iter()
        .map(|(name, path)| (*name, path.as_path()))
        .collect();
    let (runs, executables) = plan_runs(&target, programs, env)?;
    let busybox = busybox(&work, series.arch)?;
    let mut guest = Guest::new(&target, &work, series, &kernel, &busybox);
    guest.memory_mib = memory_mib;
    boot_plan(&guest, &executables, &guest_env, None, &runs, echo)
}

/// The unpacked root of Debian's `package`, for a run to carry into the VM (see
/// [`packages::unpacked`]).
pub(crate) fn debian_package(package: &str) -> anyhow::Result<PathBuf> {
    packages::unpacked(&prepare(&target_dir()?)?, package)
}

/// The Debian packages the VMs need.
pub(crate) const PACKAGES: [&str; 6] = [
    "qemu-system-x86",
    "qemu-system-arm",
    "busybox-static",
    "binutils",
    "ca-certificates",
    // Decompresses the RAM disk module of kernels from 6.12.
    "xz-utils",
];

/// The packages the VM needs, installed; the VM work directory under `target`.
fn prepare(target: &Path) -> anyhow::Result<PathBuf> {
    ensure_debian_packages(&PACKAGES)?;
    Ok(target.join("vm"))
}

/// The test matrix's kernels, and busybox for each architecture, downloaded and unpacked
/// where they are not yet.
pub(crate) fn fetch_kernels() -> anyhow::Result<()> {
    let work = prepare(&target_dir()?)?;
    for series in kernel::SERIES.into_iter().chain(kernel::ARM64_SERIES) {
        kernel::ensure(&work, series)?;
    }
    for arch in Arch::ALL {
        busybox(&work, arch)?;
    }
    Ok(())
}

/// Where and on what a plan boots.
struct Guest<'a> {
    target: &'a Path,
    work: &'a Path,
    series: kernel::Series,
    kernel: &'a kernel::Kernel,
    /// Busybox built for the series' architecture.
    busybox: &'a Path,
    memory_mib: u32,
    /// The RAM disk's file in the work directory: one per VM booted at once.
    initrd: String,
}

impl<'a> Guest<'a> {
    fn new(
        target: &'a Path,
        work: &'a Path,
        series: kernel::Series,
        kernel: &'a kernel::Kernel,
        busybox: &'a Path,
    ) -> Self {
        Self {
            target,
            work,
            series,
            kernel,
            busybox,
            memory_mib: MEMORY_MIB,
            initrd: format!("initrd-{}-{}.gz", series.arch.oci(), series.version),
        }
    }
}

/// Writes the initramfs for `runs` (with `executables`, host paths of this target directory)
/// and boots `guest` on it; with `skip_probe` (a guest path) the runs are tests, which may skip
/// for the reasons it finds in the VM.
fn boot_plan(
    guest: &Guest<'_>,
    executables: &[&Path],
    env: &[(&str, &Path)],
    skip_probe: Option<&Path>,
    runs: &[init::Run],
    echo: impl FnMut(&str),
) -> anyhow::Result<()> {
    let nonce = nonce();
    let init = init::script(&init::Plan {
        nonce: &nonce,
        kernel: guest.series.version,
        arch: guest.series.arch.oci(),
        env,
        skip_probe,
        runs,
    });
    let executables = executables
        .iter()
        .map(|host| (*host, in_guest(guest.target, host)))
        .collect::<Vec<_>>();
    let initrd = guest.work.join(&guest.initrd);
    let modules = [(
        guest.kernel.ramdisk_module.as_path(),
        PathBuf::from(init::RAMDISK_MODULE),
    )];
    let arch = guest.series.arch;
    initramfs::write(
        &initrd,
        &init,
        (arch, guest.busybox),
        &executables,
        &modules,
    )?;
    eprintln!("vm: booting {} (TCG)", guest.kernel.image.display());
    qemu::boot(
        arch,
        &guest.kernel.image,
        &initrd,
        guest.memory_mib,
        &nonce,
        TIMEOUT,
        echo,
    )
}

/// cargo's target directory: xtask runs from `<target>/<profile>/xtask`.
fn target_dir() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("locating the xtask executable")?;
    exe.parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .context("xtask runs from outside a cargo target directory")
}

/// Where a file lives in the VM: below a fixed root, so a checkout under /tmp or another place
/// the VM mounts over does not matter, and, for the target directory's files, with its layout
/// kept, so tests find helper binaries next to themselves. A file from elsewhere (an older
/// agent given to `cargo xtask bench --agent`) keeps its whole path below `elsewhere/`.
fn in_guest(target: &Path, host: &Path) -> PathBuf {
    match host.strip_prefix(target) {
        Ok(relative) => Path::new(GUEST_TARGET).join(relative),
        Err(_) => Path::new(GUEST_TARGET)
            .join(ELSEWHERE)
            .join(host.strip_prefix("/").unwrap_or(host)),
    }
}

/// Whether `test`, a test executable cargo named `NAME-HASH`, is `name`'s.
fn is_named(test: &Path, name: &str) -> bool {
    test.file_name()
        .and_then(|file| file.to_str())
        .and_then(|file| file.rsplit_once('-'))
        .is_some_and(|(stem, _)| stem == name)
}

/// Distinguishes this run's result line from anything printed before or by the tests.
fn nonce() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{nanos:x}-{:x}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_executables_are_picked_by_their_name_without_the_hash() {
        let test = Path::new("/t/debug/deps/trace_incidents-cae68c70234783b9");
        assert!(is_named(test, "trace_incidents"));
        assert!(!is_named(test, "trace"));
        assert!(!is_named(test, "trace_incidents-cae68c70234783b9"));
        assert!(!is_named(Path::new("/t/debug/deps/nohash"), "nohash"));
    }

    #[test]
    fn one_vm_tests_run_in_their_vm_the_rest_in_every_vm() {
        let [x86_6_1, x86_6_12, x86_5_10] = kernel::SERIES;
        let [arm_6_12, arm_6_1, arm_5_10] = kernel::ARM64_SERIES;
        assert_eq!(x86_5_10.version, kernel::POLL_TIER);
        assert_eq!(arm_5_10.version, kernel::POLL_TIER);
        let kube = Path::new("/t/debug/deps/agent_kube-1f2e");
        assert!(runs_on(kube, x86_6_1, false));
        assert!(!runs_on(kube, x86_6_12, false));
        assert!(runs_on(kube, x86_6_12, true), "named: everywhere");
        let hooks = Path::new("/t/debug/deps/kernel_events-1f2e");
        assert!(runs_on(hooks, x86_6_1, false) && runs_on(hooks, x86_6_12, false));
        // The poll tier runs its own tests alone, unless a test is named.
        let eviction = Path::new("/t/debug/deps/agent_eviction-1f2e");
        assert!(runs_on(eviction, x86_5_10, false));
        assert!(!runs_on(hooks, x86_5_10, false) && !runs_on(kube, x86_5_10, false));
        assert!(runs_on(hooks, x86_5_10, true));
        let reclaim = Path::new("/t/debug/deps/cgroup_reclaim-1f2e");
        assert!(runs_on(reclaim, x86_5_10, false) && !runs_on(reclaim, arm_5_10, false));
        // arm64: its subset; without fentry and on the poll tier fewer.
        assert!(runs_on(hooks, arm_6_12, false) && runs_on(eviction, arm_6_12, false));
        assert!(!runs_on(kube, arm_6_12, false));
        assert_eq!(arm_6_1.version, kernel::ARM64_NO_FENTRY);
        assert!(runs_on(eviction, arm_6_1, false) && !runs_on(hooks, arm_6_1, false));
        assert!(runs_on(eviction, arm_5_10, false) && !runs_on(hooks, arm_5_10, false));
        assert!(runs_on(hooks, arm_5_10, true));
        let files = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/tests");
        for name in POLL_TIER_TESTS
            .iter()
            .chain(&X86_POLL_TIER_TESTS)
            .chain(&ARM64_TESTS)
        {
            assert!(
                files.join(format!("{name}.rs")).is_file(),
                "{name} is no test file"
            );
        }
        assert!(
            POLL_TIER_TESTS
                .iter()
                .all(|name| ARM64_TESTS.contains(name)),
            "the arm64 build holds the poll tier's tests"
        );
        let versions: Vec<&str> = kernel::SERIES.iter().map(|s| s.version).collect();
        for (name, on) in ONE_VM_TESTS {
            assert!(versions.contains(&on), "{name}: no {on} VM");
            assert!(
                files.join(format!("{name}.rs")).is_file(),
                "{name} is no test file: it would run in every VM"
            );
        }
    }

    #[test]
    fn a_kernel_s_tests_are_split_into_vms_of_about_equal_length() {
        let tests: Vec<PathBuf> = [
            "agent_kube",
            "agent_eviction",
            "trace_incidents",
            "kernel_events",
            "cgroup_v2",
            "kill_frozen",
        ]
        .iter()
        .map(|name| PathBuf::from(format!("/t/debug/deps/{name}-1f2e")))
        .collect();
        let tests: Vec<&Path> = tests.iter().map(PathBuf::as_path).collect();
        let groups = split(&tests, 2);
        let names = |group: &[&Path]| -> Vec<String> {
            group
                .iter()
                .map(|test| test.file_name().unwrap().to_string_lossy().into_owned())
                .collect()
        };
        // Longest first into the shorter VM: 126 + 67 + 5 + 5 = 203 against 106 + 96 = 202.
        assert_eq!(
            names(&groups[0]),
            [
                "agent_kube-1f2e",
                "kernel_events-1f2e",
                "cgroup_v2-1f2e",
                "kill_frozen-1f2e"
            ]
        );
        assert_eq!(
            names(&groups[1]),
            ["agent_eviction-1f2e", "trace_incidents-1f2e"]
        );
        assert_eq!(split(&tests[..1], 2).len(), 1, "no empty VM");
        assert_eq!(split(&tests, 1).concat().len(), tests.len());
        for (name, _) in TEST_SECS {
            assert!(
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join(format!("../tests/tests/{name}.rs"))
                    .is_file(),
                "{name} is no test file"
            );
        }
    }

    #[test]
    fn guest_paths_keep_the_layout_below_a_fixed_root() {
        let target = Path::new("/tmp/clone/target");
        assert_eq!(
            in_guest(
                target,
                Path::new("/tmp/clone/target/debug/deps/cgroup_v2-1f2e")
            ),
            Path::new("/target/debug/deps/cgroup_v2-1f2e")
        );
        assert_eq!(
            in_guest(target, Path::new("/tmp/older/monitor")),
            Path::new("/target/elsewhere/tmp/older/monitor")
        );
    }
}
