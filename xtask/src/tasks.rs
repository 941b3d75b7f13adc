//! Build, run and test tasks: thin wrappers around cargo with the right flags.
use std::process::Command;

use anyhow::{Context as _, bail};

/// Runs a command, failing with its rendering when it does not exit 0.
pub fn status(cmd: &mut Command) -> anyhow::Result<()> {
    let status = cmd.status().with_context(|| format!("starting {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed: {status}");
    }
    Ok(())
}

pub fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// The workspace's target directory (CARGO_TARGET_DIR when set).
pub fn target_dir() -> anyhow::Result<std::path::PathBuf> {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return Ok(dir.into());
    }
    // xtask lives one level below the workspace root.
    let manifest = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let root = manifest.parent().context("xtask has no parent directory")?;
    Ok(root.join("target"))
}

pub fn build(release: bool) -> anyhow::Result<()> {
    let mut cmd = cargo();
    cmd.args(["build", "--package", "monitor"]);
    if release {
        cmd.arg("--release");
    }
    status(&mut cmd)
}

pub fn run(release: bool, args: &[String]) -> anyhow::Result<()> {
    let mut cmd = cargo();
    cmd.args(["run", "--quiet", "--package", "monitor", "--bin", "monitor"]);
    if release {
        cmd.arg("--release");
    }
    cmd.arg("--").args(args);
    status(&mut cmd)
}

pub fn test(with_vm: bool) -> anyhow::Result<()> {
    // The container test runs the image with Debian's podman (runc: crun refuses cgroup v1's
    // hybrid layout); the deploy/ test validates the manifests.
    let image = crate::image::build()?;
    crate::setup::ensure_debian_packages(&["podman", "runc"].map(String::from))?;
    let validator = crate::setup::ensure_kubernetes_validate(&target_dir()?)?;
    // The default members: the workspace without the BPF-target kernel crate.
    status(
        cargo()
            .args(["test"])
            .env("MONITOR_IMAGE", image)
            .env("KUBERNETES_VALIDATE", validator),
    )?;
    if with_vm {
        crate::vm::run()?;
    }
    crate::bench::run(None, true, false, Vec::new())?;
    Ok(())
}
