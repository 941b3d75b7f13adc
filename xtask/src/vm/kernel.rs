//! Debian 12's cloud kernels, 6.1 and 6.12: each downloaded once with `apt-get download`,
//! unpacked with `dpkg-deb -x`, and kept under the VM work directory. Both have BTF, the BPF
//! ring buffer and the cgroup tracepoints but not the memcg ones (6.13), so the agent counts
//! memory there with fentry; they boot without modules as long as no disk is attached (virtio
//! is modular there). ext4 is built in; the RAM disk driver `brd` is a module the initramfs
//! carries.
use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};

use crate::tasks::status;

/// A Debian kernel series the VM boots: packages `<prefix><number><suffix>`, newest number
/// taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Series {
    /// The kernel version the releases start with, e.g. `6.12`.
    pub version: &'static str,
    prefix: &'static str,
    suffix: &'static str,
    /// Directory under the VM work directory holding the unpacked package.
    dir: &'static str,
}

/// The kernels of the VM matrix: Debian 12's own (ABI-numbered) and its 6.12 from the
/// security archive.
pub const SERIES: [Series; 2] = [
    Series {
        version: "6.1",
        prefix: "linux-image-6.1.0-",
        suffix: "-cloud-amd64-unsigned",
        dir: "kernel",
    },
    Series {
        version: "6.12",
        prefix: "linux-image-6.12.",
        suffix: "+deb12-cloud-amd64-unsigned",
        dir: "kernel-6.12",
    },
];

/// What the VM boots: the kernel image and the one module it loads.
pub struct Kernel {
    pub image: PathBuf,
    /// `brd.ko`, the RAM disk driver.
    pub ramdisk_module: PathBuf,
}

/// The kernel of `series`, downloading and unpacking the package on first use.
pub fn ensure(work: &Path, series: Series) -> anyhow::Result<Kernel> {
    let image = unpacked_image(work, series)?;
    let unpacked = work.join(series.dir);
    let ramdisk_module = find_module(&unpacked, "drivers/block/brd.ko").with_context(|| {
        format!(
            "no drivers/block/brd.ko under {}; remove that directory to unpack the kernel again",
            unpacked.join("lib/modules").display()
        )
    })?;
    Ok(Kernel {
        image,
        ramdisk_module,
    })
}

/// The image under the series' directory, downloading and unpacking the package there first if
/// needed.
fn unpacked_image(work: &Path, series: Series) -> anyhow::Result<PathBuf> {
    let unpacked = &work.join(series.dir);
    if let Some(vmlinuz) = find_vmlinuz(unpacked) {
        return Ok(vmlinuz);
    }
    fs::create_dir_all(work).with_context(|| format!("creating {}", work.display()))?;
    let package = newest_package(series)?;
    eprintln!("vm-test: downloading {package}");
    status(
        Command::new("apt-get")
            .args(["download", "-q", "-o", "APT::Sandbox::User=root", &package])
            .current_dir(work),
    )?;
    let deb = fs::read_dir(work)?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("{package}_")) && n.ends_with(".deb"))
        })
        .with_context(|| {
            format!(
                "apt-get download left no {package} .deb in {}",
                work.display()
            )
        })?;
    // Unpack beside the cache and rename, so an interrupted run leaves no half kernel behind.
    let partial = work.join(format!("{}.partial", series.dir));
    let _ = fs::remove_dir_all(&partial);
    status(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&partial))?;
    fs::rename(&partial, unpacked)?;
    fs::remove_file(&deb)?;
    find_vmlinuz(unpacked).with_context(|| format!("no boot/vmlinuz-* in {}", deb.display()))
}

fn find_vmlinuz(unpacked: &Path) -> Option<PathBuf> {
    fs::read_dir(unpacked.join("boot"))
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-"))
        })
}

/// `relative` (below `kernel/`) in the one version directory under `lib/modules`. Kernels
/// from 6.12 ship modules xz-compressed, which busybox's insmod cannot load: those are
/// decompressed beside the original once.
fn find_module(unpacked: &Path, relative: &str) -> Option<PathBuf> {
    let module = fs::read_dir(unpacked.join("lib/modules"))
        .ok()?
        .flatten()
        .map(|version| version.path().join("kernel").join(relative))
        .find(|module| module.is_file() || compressed(module).is_file())?;
    if !module.is_file() {
        status(Command::new("xz").arg("-dk").arg(compressed(&module))).ok()?;
    }
    Some(module)
}

fn compressed(module: &Path) -> PathBuf {
    let mut name = module.as_os_str().to_owned();
    name.push(".xz");
    PathBuf::from(name)
}

/// The newest package of `series` apt knows, refreshing the package lists if it knows none.
fn newest_package(series: Series) -> anyhow::Result<String> {
    let pattern = format!(
        "^{}[0-9]+{}$",
        regex_quote(series.prefix),
        regex_quote(series.suffix)
    );
    let search = || -> anyhow::Result<Option<String>> {
        let out = Command::new("apt-cache")
            .args(["search", "--names-only", &pattern])
            .output()
            .context("running apt-cache search")?;
        Ok(newest(&String::from_utf8_lossy(&out.stdout), series))
    };
    if let Some(package) = search()? {
        return Ok(package);
    }
    status(Command::new("apt-get").args(["update", "-qq"]))?;
    match search()? {
        Some(package) => Ok(package),
        None => bail!(
            "apt knows no {}N{} package; is this Debian 12 with its security archive?",
            series.prefix,
            series.suffix
        ),
    }
}

/// `text` with the regex metacharacters package names can hold (`.` and `+`) escaped.
fn regex_quote(text: &str) -> String {
    text.replace('.', r"\.").replace('+', r"\+")
}

/// The package with the highest number in `apt-cache search` output.
fn newest(search_output: &str, series: Series) -> Option<String> {
    search_output
        .lines()
        .filter_map(|line| {
            let name = line.split_whitespace().next()?;
            let number: u32 = name
                .strip_prefix(series.prefix)?
                .strip_suffix(series.suffix)?
                .parse()
                .ok()?;
            Some((number, name.to_string()))
        })
        .max()
        .map(|(_, name)| name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn highest_abi_wins_numerically() {
        let out = "linux-image-6.1.0-9-cloud-amd64-unsigned - Linux 6.1 for x86-64 cloud\n\
            linux-image-6.1.0-57-cloud-amd64-unsigned - Linux 6.1 for x86-64 cloud\n\
            linux-image-6.1.0-10-cloud-amd64-unsigned - Linux 6.1 for x86-64 cloud\n";
        assert_eq!(
            newest(out, SERIES[0]).as_deref(),
            Some("linux-image-6.1.0-57-cloud-amd64-unsigned")
        );
        assert_eq!(newest("", SERIES[0]), None);
        assert_eq!(newest(out, SERIES[1]), None, "6.1 is not 6.12");
    }

    #[test]
    fn the_6_12_series_is_numbered_by_its_point_release() {
        let out = "linux-image-6.12.9+deb12-cloud-amd64-unsigned - Linux 6.12 for x86-64 cloud\n\
            linux-image-6.12.117+deb12-cloud-amd64-unsigned - Linux 6.12 for x86-64 cloud\n\
            linux-image-6.12.117+deb12-amd64-unsigned - Linux 6.12 for 64-bit PCs\n";
        assert_eq!(
            newest(out, SERIES[1]).as_deref(),
            Some("linux-image-6.12.117+deb12-cloud-amd64-unsigned")
        );
        assert_eq!(newest(out, SERIES[0]), None);
    }

    #[test]
    fn other_flavours_are_ignored() {
        let out = "linux-image-6.1.0-57-amd64-unsigned - Linux 6.1 for 64-bit PCs\n\
            linux-image-6.1.0-57-cloud-amd64-dbg - debug symbols\n";
        assert_eq!(newest(out, SERIES[0]), None);
    }
}
