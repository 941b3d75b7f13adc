//! Build, run and test tasks: thin wrappers around cargo with the right flags.
use anyhow::Context as _;

use crate::process::{cargo, status, target_dir};

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

pub(crate) fn test(with_vm: bool) -> anyhow::Result<()> {
    crate::setup::ensure_component("rustfmt")?;
    status(cargo().args(["fmt", "--all", "--check"]))
        .context("the code is not formatted as rustfmt would: run `cargo fmt --all`")?;
    // The default members, as for the build: the kernel crate builds only on nightly for the
    // BPF target (monitor's build script builds it, with its own warnings shown).
    crate::setup::ensure_component("clippy")?;
    status(cargo().args(["clippy", "--all-targets", "--", "-D", "warnings"])).context(
        "clippy found something: run `cargo clippy --all-targets` and fix what it reports",
    )?;
    // The container test runs the image with Debian's podman (runc: crun refuses cgroup v1's
    // hybrid layout); the deploy/ test validates the manifests.
    let image = crate::image::build()?;
    crate::setup::ensure_debian_packages(&["podman", "runc"].map(String::from))?;
    let validator = crate::setup::ensure_kubernetes_validate(&target_dir()?)?;
    // The monitoring test runs Debian's Prometheus server and promtool, unpacked, not installed.
    let prometheus = crate::vm::debian_package("prometheus")?;
    // A test that cannot run fails, unless the machine (or the developer) gives it a reason.
    let allowed = crate::skips::Allowed::here()?;
    let skip_log = target_dir()?.join("test-skips.log");
    // The default members: the workspace without the BPF-target kernel crate.
    let mut cmd = cargo();
    cmd.args(["test"])
        .env("MONITOR_IMAGE", image)
        .env("KUBERNETES_VALIDATE", validator)
        .env("MONITOR_PROMETHEUS_DIR", prometheus);
    allowed.apply(&mut cmd, &skip_log)?;
    let tested = status(&mut cmd);
    for line in crate::skips::summary(&skip_log) {
        eprintln!("{line}");
    }
    tested?;
    if with_vm {
        crate::vm::run(&[])?;
    }
    crate::bench::run(None, true, false, Vec::new())?;
    Ok(())
}
