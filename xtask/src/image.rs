//! `cargo xtask image`: the agent as an OCI image, assembled from files.
//!
//! The binary is built for the musl target, statically linked (the kernel programs are
//! embedded by monitor's build script as in every build), and is the image's only file: no
//! base image is pulled, buildah starts from `scratch`. The result is an OCI archive under
//! `target/image/`, rebuilt only when the binary changed, so `cargo xtask test` can call this
//! on every run.
use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};

use crate::{
    process::{cargo, status, target_dir},
    setup::{ensure_debian_packages, ensure_rust_target},
};

pub(crate) const MUSL: &str = "x86_64-unknown-linux-musl";
/// Debian packages the image needs: buildah assembles it, musl-tools gives a C compiler for
/// the musl target (ring's build script compiles C).
pub(crate) const PACKAGES: [&str; 2] = ["buildah", "musl-tools"];
/// The reference stored in the archive (`skopeo copy` uses it unless told otherwise).
pub(crate) const REFERENCE: &str = concat!("monitor:", env!("CARGO_PKG_VERSION"));

/// The image and the static binary it holds.
pub(crate) struct Image {
    pub archive: PathBuf,
    pub binary: PathBuf,
}

/// Builds the image when the binary is newer than the archive.
pub(crate) fn build() -> anyhow::Result<Image> {
    ensure_rust_target(MUSL)?;
    ensure_debian_packages(&PACKAGES)?;
    status(
        cargo()
            .env("CC_x86_64_unknown_linux_musl", "musl-gcc")
            .args([
                "build",
                "--release",
                "--package",
                "monitor",
                "--bin",
                "monitor",
                "--target",
                MUSL,
            ]),
    )?;
    let target = target_dir()?;
    let binary = target.join(MUSL).join("release/monitor");
    check_static(&binary)?;
    let archive = target.join("image/monitor.oci.tar");
    if is_newer(&archive, &binary) {
        eprintln!("image: {} is up to date", archive.display());
    } else {
        fs::create_dir_all(archive.parent().context("archive path has a parent")?)?;
        assemble(&binary, &archive)?;
        eprintln!("image: wrote {} ({REFERENCE})", archive.display());
    }
    Ok(Image { archive, binary })
}

/// `buildah from scratch`, the binary as `/monitor`, committed straight to an OCI archive
/// (nothing stays in buildah's storage but the working container, removed at the end).
fn assemble(binary: &Path, archive: &Path) -> anyhow::Result<()> {
    let out = Command::new("buildah")
        .args(["from", "scratch"])
        .output()
        .context("starting buildah")?;
    if !out.status.success() {
        bail!(
            "buildah from scratch failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let container = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let result = (|| {
        status(
            Command::new("buildah")
                .args(["copy", "--chmod", "0755", &container])
                .arg(binary)
                .arg("/monitor"),
        )?;
        status(Command::new("buildah").args([
            "config",
            "--entrypoint",
            r#"["/monitor"]"#,
            "--cmd",
            "",
            "--user",
            "0:0",
            "--env",
            "RUST_LOG=info",
            "--label",
            "org.opencontainers.image.title=monitor",
            "--label",
            concat!(
                "org.opencontainers.image.version=",
                env!("CARGO_PKG_VERSION")
            ),
            &container,
        ]))?;
        let partial = archive.with_extension("tar.partial");
        let _ = fs::remove_file(&partial);
        status(
            Command::new("buildah")
                .args(["commit", "--quiet", "--format", "oci", &container])
                .arg(format!("oci-archive:{}:{REFERENCE}", partial.display())),
        )?;
        fs::rename(&partial, archive)
            .with_context(|| format!("moving the archive to {}", archive.display()))
    })();
    let _ = Command::new("buildah").args(["rm", &container]).output();
    result
}

/// The image has no libc: a dynamically linked binary (one with an ELF interpreter) would
/// not start in it.
fn check_static(binary: &Path) -> anyhow::Result<()> {
    let elf = fs::read(binary).with_context(|| format!("reading {}", binary.display()))?;
    if has_interpreter(&elf).context("not a 64-bit ELF file")? {
        bail!(
            "{} is dynamically linked; the image has no libc to run it",
            binary.display()
        );
    }
    Ok(())
}

/// Whether a 64-bit little-endian ELF file has a PT_INTERP program header.
fn has_interpreter(elf: &[u8]) -> Option<bool> {
    const PT_INTERP: u32 = 3;
    if elf.get(..5)? != b"\x7fELF\x02" {
        return None;
    }
    let u16_at = |at: usize| Some(u16::from_le_bytes(elf.get(at..at + 2)?.try_into().ok()?));
    let phoff = u64::from_le_bytes(elf.get(0x20..0x28)?.try_into().ok()?) as usize;
    let (size, count) = (u16_at(0x36)? as usize, u16_at(0x38)? as usize);
    (0..count)
        .map(|i| {
            let at = phoff + i * size;
            Some(u32::from_le_bytes(elf.get(at..at + 4)?.try_into().ok()?))
        })
        .try_fold(false, |found, kind| Some(found || kind? == PT_INTERP))
}

fn is_newer(path: &Path, than: &Path) -> bool {
    let modified = |p: &Path| fs::metadata(p).and_then(|m| m.modified()).ok();
    matches!((modified(path), modified(than)), (Some(a), Some(b)) if a > b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpreter_detection() {
        let own = fs::read(std::env::current_exe().unwrap()).unwrap();
        // The test binary is built for the host's glibc target: dynamically linked.
        assert_eq!(has_interpreter(&own), Some(true));
        assert_eq!(has_interpreter(b"#!/bin/sh\n"), None);
        let mut no_headers = own[..64].to_vec();
        no_headers[0x38] = 0;
        no_headers[0x39] = 0;
        assert_eq!(has_interpreter(&no_headers), Some(false));
    }
}
