//! `cargo xtask vm-test`: cgroup v2 and an older kernel, for real, under qemu.
//!
//! Boots Debian's 6.1 cloud kernel (no memcg tracepoints, unlike the 6.8+ kernels the full
//! kernel source needs) with an initramfs holding busybox, the `monitor` binary and the `tests`
//! crate's test executables. The VM mounts cgroup2 with the memory controller, runs
//! `monitor doctor` and every test executable with `MONITOR_VM=1`, and reports one result
//! line. Everything it needs is installed or downloaded here, and cached under
//! `target/vm/`.
mod artifacts;
mod cpio;
mod init;
mod initramfs;
mod kernel;
mod qemu;

use std::{
    path::{Path, PathBuf},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use anyhow::Context as _;

use crate::setup::ensure_debian_packages;

/// TCG emulates every instruction; the whole run normally takes a fraction of this.
const TIMEOUT: Duration = Duration::from_secs(15 * 60);

pub fn run() -> anyhow::Result<()> {
    ensure_debian_packages(&["qemu-system-x86".into(), "busybox-static".into()])?;
    let work = target_dir()?.join("vm");
    let kernel = kernel::ensure(&work)?;
    let built = artifacts::build()?;
    let nonce = nonce();
    let init = init::script(&init::Plan {
        nonce: &nonce,
        monitor: &built.monitor,
        tests: &built.tests,
    });
    let executables: Vec<&Path> = std::iter::once(&built.monitor)
        .chain(&built.tests)
        .chain(&built.helpers)
        .map(PathBuf::as_path)
        .collect();
    let initrd = work.join("initrd.gz");
    initramfs::write(&initrd, &init, &executables)?;
    eprintln!("vm-test: booting {} (TCG)", kernel.display());
    qemu::boot(&kernel, &initrd, &nonce, TIMEOUT)
}

/// cargo's target directory: xtask runs from `<target>/<profile>/xtask`.
fn target_dir() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("locating the xtask executable")?;
    exe.parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .context("xtask runs from outside a cargo target directory")
}

/// Distinguishes this run's result line from anything printed before or by the tests.
fn nonce() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{nanos:x}-{:x}", std::process::id())
}
