//! Debian packages for the VM that the machine does not install: each is downloaded once with
//! `apt-get download` and unpacked with `dpkg-deb -x` below the VM work directory, so what
//! runs in the VM is Debian's build, and the machine itself stays untouched.
use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::Context as _;

use super::kernel::AptOptions;
use crate::{arch::Arch, process::status};

/// The unpacked root of `package` (its files below it as below `/`), unpacking it first
/// when absent.
pub(super) fn unpacked(work: &Path, package: &str) -> anyhow::Result<PathBuf> {
    unpacked_from(work, package, package, &AptOptions::system())
}

/// [`unpacked`] for another architecture than the machine's, through apt's lists of it.
pub(super) fn unpacked_for(work: &Path, package: &str, arch: Arch) -> anyhow::Result<PathBuf> {
    let apt = AptOptions::for_arch(work, arch)?;
    apt.fetch_lists_once()?;
    unpacked_from(work, package, &format!("{package}-{}", arch.oci()), &apt)
}

fn unpacked_from(
    work: &Path,
    package: &str,
    dir: &str,
    apt: &AptOptions,
) -> anyhow::Result<PathBuf> {
    let root = work.join("packages").join(dir);
    if root.is_dir() {
        return Ok(root);
    }
    let downloads = work.join("packages").join(format!("{dir}.download"));
    let _ = fs::remove_dir_all(&downloads);
    fs::create_dir_all(&downloads).with_context(|| format!("creating {}", downloads.display()))?;
    eprintln!("vm: downloading Debian's {package}");
    status(
        Command::new("apt-get")
            .args(["download", "-q", "-o", "APT::Sandbox::User=root"])
            .args(&apt.args)
            .arg(package)
            .current_dir(&downloads),
    )?;
    let deb = fs::read_dir(&downloads)?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .with_context(|| format!("apt-get download left no .deb of {package}"))?;
    let partial = root.with_extension("partial");
    let _ = fs::remove_dir_all(&partial);
    status(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&partial))?;
    fs::rename(&partial, &root)?;
    fs::remove_dir_all(&downloads)?;
    Ok(root)
}
