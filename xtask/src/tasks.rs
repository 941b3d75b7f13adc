//! Build, run and test tasks: thin wrappers around cargo with the right flags.
use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::Context as _;

use crate::{
    arch::Arch,
    phases::{Phases, joined, joined_timed, timed},
    process::{cargo, status, target_dir},
};

pub(crate) fn build(release: bool) -> anyhow::Result<()> {
    let mut cmd = cargo();
    cmd.args(["build", "--package", "monitor"]);
    if release {
        cmd.arg("--release");
    }
    status(&mut cmd)
}

pub(crate) fn run(release: bool, args: &[String]) -> anyhow::Result<()> {
    let mut cmd = cargo();
    cmd.args(["run", "--quiet", "--package", "monitor", "--bin", "monitor"]);
    if release {
        cmd.arg("--release");
    }
    cmd.arg("--").args(args);
    status(&mut cmd)
}

/// `cargo xtask test`: every phase in turn, then the table of where the time went.
pub(crate) fn test(with_vm: bool) -> anyhow::Result<()> {
    let target = target_dir()?;
    crate::disk::ensure_room(&target, crate::disk::RUN_NEEDS)?;
    let free_at_start = crate::disk::free_bytes(&target)?;
    let mut phases = Phases::new();
    let result = test_phases(&mut phases, with_vm);
    eprintln!("\n{}", phases.table());
    // What a run takes from the disk, for RUN_NEEDS (its own figure, with other writers').
    if let Ok(free) = crate::disk::free_bytes(&target) {
        eprintln!(
            "disk: {} free at the start, {} at the end",
            crate::disk::gib(free_at_start),
            crate::disk::gib(free)
        );
    }
    result
}

/// What the host tests need beside the build.
struct Tools {
    validator: PathBuf,
    prometheus: PathBuf,
}

fn test_phases(phases: &mut Phases, with_vm: bool) -> anyhow::Result<()> {
    let tools = phases.run("toolchain", || toolchain(with_vm))?;
    std::thread::scope(|scope| {
        // The image's release builds hold a cargo lock of their own (the musl targets'
        // directories) and each links the whole program on one core at its end: they run
        // beside the lints and the test build, which keep the other core busy.
        let (x86_built, x86_binary) = std::sync::mpsc::channel();
        let image = scope.spawn(move || {
            timed(|| {
                crate::image::build(|arch, binary| {
                    if arch == Arch::X86_64 {
                        let _ = x86_built.send(binary.to_path_buf());
                    }
                })
            })
        });
        let beside = phases.run("lints", lints).and_then(|()| {
            // The default members: the kernel crate builds only on nightly for the BPF
            // target (monitor's build script builds it, with its own warnings shown). The
            // arm64 VMs' tests are built here too, not beside the host's timed tests.
            phases.run("build", || {
                status(cargo().args(["test", "--no-run"]))?;
                if with_vm {
                    crate::vm::build_other_arches()?;
                }
                Ok(())
            })
        });
        // The x86_64 VMs need the tests and the agent that ships (the image's static x86_64
        // binary, built first): they start once both are there, on the core the image's
        // arm64 build leaves idle while it links, instead of after the whole image.
        let x86_vms = (with_vm && beside.is_ok())
            .then(|| x86_binary.recv().ok())
            .flatten()
            .map(|binary| scope.spawn(move || vm_tests(&[Arch::X86_64], &binary)));
        let (took, built) = joined_timed(image, "the image build");
        phases.record("image (beside lints, build)", took, built.is_err());
        let image = match beside.and(built) {
            Ok(image) => image,
            Err(e) => {
                // Each VM runs to its end; its result no longer counts.
                if let Some(vms) = x86_vms {
                    let _ = vms.join();
                }
                return Err(e);
            }
        };
        tests_beside_vms(phases, scope, &tools, &image, with_vm, x86_vms)
    })
}

/// The benchmark smoke on `machines`.
fn smoke(machines: crate::bench::Machines) -> (Duration, anyhow::Result<()>) {
    timed(|| {
        crate::bench::run(
            None,
            crate::bench::Size::Smoke,
            crate::bench::Options {
                machines,
                ..crate::bench::Options::default()
            },
        )
    })
}

/// The VM tests of `arches`, each VM a row (name, time, failed), with the agent `binary`.
fn vm_tests(arches: &[Arch], binary: &Path) -> (Vec<(String, Duration, bool)>, anyhow::Result<()>) {
    let mut rows = Vec::new();
    let ran = crate::vm::run(&[], arches, Some(binary), &mut |vm, took, failed| {
        rows.push((vm.to_string(), took, failed));
    });
    (rows, ran)
}

type VmTests<'scope> =
    std::thread::ScopedJoinHandle<'scope, (Vec<(String, Duration, bool)>, anyhow::Result<()>)>;

/// The host's tests, the benchmark smoke and the arm64 VMs, beside the x86_64 VMs already
/// running (`x86_vms`); then the rows of all.
fn tests_beside_vms<'scope>(
    phases: &mut Phases,
    scope: &'scope std::thread::Scope<'scope, '_>,
    tools: &Tools,
    image: &crate::image::Image,
    with_vm: bool,
    x86_vms: Option<VmTests<'scope>>,
) -> anyhow::Result<()> {
    // The VMs run beside the host's tests and the benchmark smoke: a guest waits about half
    // its time and runs at a lower priority, so the host's timings hold (see vm::qemu). The
    // smoke's cases on this machine follow the host's tests instead of running beside them:
    // their hogs fill hundreds of MiB in a blink, which the agents under test see on the node
    // and project as the OOM point coming (a grace cut short, seen with the two side by side);
    // its cases in VMs load only the cores and run beside everything. Each runs to its end
    // and is timed on its own; the row after them is the time they took together from the
    // image's end (the x86_64 VMs began before it).
    let started = Instant::now();
    // The arm64 VMs take their own static binary, which the image holds now.
    let binary = image.binary.clone();
    let arm64_vms = with_vm.then(|| scope.spawn(move || vm_tests(&[Arch::Aarch64], &binary)));
    let vm_smoke = with_vm.then(|| scope.spawn(|| smoke(crate::bench::Machines::Vms)));
    let host = timed(|| host_tests(&image.archive, tools));
    let host_smoke = smoke(crate::bench::Machines::Host);
    let mut vm_rows = Vec::new();
    let mut vm_failures = Vec::new();
    for (vms, what) in [
        (x86_vms, "the x86_64 VM tests"),
        (arm64_vms, "the arm64 VM tests"),
    ] {
        let Some(vms) = vms else { continue };
        match joined(vms, what) {
            Ok((rows, ran)) => {
                vm_rows.extend(rows);
                vm_failures.extend(ran.err());
            }
            Err(e) => vm_failures.push(e),
        }
    }
    let vm_smoke = vm_smoke.map(|smoke| {
        joined(smoke, "the VMs' benchmark smoke").unwrap_or_else(|e| (Duration::ZERO, Err(e)))
    });
    let together = started.elapsed();
    phases.record("host tests", host.0, host.1.is_err());
    phases.record(
        "benchmark smoke, this machine",
        host_smoke.0,
        host_smoke.1.is_err(),
    );
    for (vm, took, failed) in vm_rows {
        phases.record(&vm, took, failed);
    }
    let vm_smoke = vm_smoke.map_or(Ok(()), |(took, result)| {
        phases.record("benchmark smoke, in VMs", took, result.is_err());
        result
    });
    let failed = [host.1.err(), host_smoke.1.err(), vm_smoke.err()]
        .into_iter()
        .flatten()
        .chain(vm_failures)
        .collect::<Vec<_>>();
    phases.record(
        "tests (host, VMs, smoke together)",
        together,
        !failed.is_empty(),
    );
    match failed.as_slice() {
        [] => Ok(()),
        _ => anyhow::bail!(
            "{}",
            failed
                .iter()
                .map(|e| format!("{e:#}"))
                .collect::<Vec<_>>()
                .join("; ")
        ),
    }
}

/// Everything the later phases install or download, so their times are their own: the
/// toolchain pieces, the Debian packages of the image, the container and VM tests (one apt
/// run), the manifest validator, Prometheus and the VMs' kernels.
fn toolchain(with_vm: bool) -> anyhow::Result<Tools> {
    crate::setup::run()?;
    crate::setup::ensure_component("rustfmt")?;
    crate::setup::ensure_component("clippy")?;
    for arch in Arch::ALL {
        crate::setup::ensure_rust_target(arch.rust_target())?;
    }
    // The container test runs the image with Debian's podman (runc: crun refuses cgroup v1's
    // hybrid layout); the image test runs its arm64 binary under qemu's user-mode emulation.
    let packages: Vec<&str> = ["podman", "runc", "qemu-user-static"]
        .into_iter()
        .chain(crate::image::PACKAGES)
        .chain(Arch::ALL.map(Arch::c_compiler_package))
        .chain(crate::vm::PACKAGES)
        .collect();
    crate::setup::ensure_debian_packages(&packages)?;
    let validator = crate::setup::ensure_kubernetes_validate(&target_dir()?)?;
    // The monitoring test runs Debian's Prometheus server and promtool, unpacked, not installed.
    let prometheus = crate::vm::debian_package("prometheus")?;
    if with_vm {
        crate::vm::fetch_kernels()?;
    }
    Ok(Tools {
        validator,
        prometheus,
    })
}

fn lints() -> anyhow::Result<()> {
    status(cargo().args(["fmt", "--all", "--check"]))
        .context("the code is not formatted as rustfmt would: run `cargo fmt --all`")?;
    status(cargo().args(["clippy", "--all-targets", "--", "-D", "warnings"]))
        .context("clippy found something: run `cargo clippy --all-targets` and fix what it reports")
}

/// The unit and root integration tests against this kernel. A test that cannot run fails,
/// unless the machine (or the developer) gives it a reason.
fn host_tests(image: &Path, tools: &Tools) -> anyhow::Result<()> {
    let target = target_dir()?;
    let allowed = crate::skips::Allowed::here(&target.join("debug/skip_probe"))?;
    let skip_log = target.join("test-skips.log");
    let mut cmd = cargo();
    // Every failure at once: a failing test binary would otherwise hide those after it.
    cmd.args(["test", "--no-fail-fast"])
        .env("MONITOR_IMAGE", image)
        .env("KUBERNETES_VALIDATE", &tools.validator)
        .env("MONITOR_PROMETHEUS_DIR", &tools.prometheus);
    allowed.apply(&mut cmd, &skip_log)?;
    let tested = status(&mut cmd);
    for line in crate::skips::summary(&skip_log) {
        eprintln!("{line}");
    }
    tested
}
