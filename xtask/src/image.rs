//! `cargo xtask image`: the agent as an OCI image index for linux/amd64 and linux/arm64,
//! assembled from files.
//!
//! Each binary is built for its architecture's musl target, statically linked (the kernel
//! programs are embedded by monitor's build script as in every build), and is its image's only
//! file: no base image is pulled, buildah starts from `scratch`. The result is one OCI archive
//! under `target/image/` whose index names both platforms, so a container runtime takes the
//! node's own; it is rebuilt only when a binary changed, so `cargo xtask test` can call this
//! on every run.
use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};

use crate::{
    arch::{Arch, check_static},
    process::{cargo, status, target_dir},
    setup::{ensure_debian_packages, ensure_rust_target},
};

/// Debian's buildah assembles the image.
pub(crate) const PACKAGES: [&str; 1] = ["buildah"];
/// The reference stored in the archive (`skopeo copy` uses it unless told otherwise).
pub(crate) const REFERENCE: &str = concat!("monitor:", env!("CARGO_PKG_VERSION"));

/// The image and the static binary it holds for this machine.
pub(crate) struct Image {
    pub archive: PathBuf,
    pub binary: PathBuf,
}

/// Builds the static binary of every architecture (`built` is told of each as it is there,
/// this machine's first), then the image index when a binary is newer than the archive.
pub(crate) fn build(mut built: impl FnMut(Arch, &Path)) -> anyhow::Result<Image> {
    ensure_debian_packages(&PACKAGES)?;
    let binaries = Arch::ALL
        .into_iter()
        .map(|arch| {
            let binary = static_binary(arch)?;
            built(arch, &binary);
            Ok((arch, binary))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let archive = target_dir()?.join("image/monitor.oci.tar");
    if binaries
        .iter()
        .all(|(_, binary)| is_newer(&archive, binary))
    {
        eprintln!("image: {} is up to date", archive.display());
    } else {
        fs::create_dir_all(archive.parent().context("archive path has a parent")?)?;
        assemble(&binaries, &archive)?;
        eprintln!(
            "image: wrote {} ({REFERENCE}, {})",
            archive.display(),
            Arch::ALL.map(Arch::oci).join(", ")
        );
    }
    let binary = binaries
        .into_iter()
        .find_map(|(arch, binary)| (arch == Arch::X86_64).then_some(binary))
        .context("no binary for this machine")?;
    Ok(Image { archive, binary })
}

/// `monitor` for `arch`, release, statically linked with its kernel programs embedded (the
/// BPF target follows the build target's byte order); installs the target and its C compiler
/// first.
pub(crate) fn static_binary(arch: Arch) -> anyhow::Result<PathBuf> {
    let target = arch.rust_target();
    ensure_rust_target(target)?;
    ensure_debian_packages(&[arch.c_compiler_package()])?;
    let mut cmd = cargo();
    arch.cross_env(&mut cmd);
    cmd.args([
        "build",
        "--release",
        "--package",
        "monitor",
        "--bin",
        "monitor",
    ])
    .args(["--target", target]);
    status(&mut cmd)?;
    let binary = target_dir()?.join(target).join("release/monitor");
    check_static(&binary, arch)?;
    Ok(binary)
}

/// One `buildah from scratch` image per architecture, the binary as `/monitor`, gathered in a
/// manifest list and pushed with every image to an OCI archive: its index points at the list,
/// which names each image's platform. Nothing stays in buildah's storage.
fn assemble(binaries: &[(Arch, PathBuf)], archive: &Path) -> anyhow::Result<()> {
    let list = format!("monitor-index-{}", std::process::id());
    buildah(&["manifest", "create", &list])?;
    let mut images = Vec::new();
    let result = (|| {
        for (arch, binary) in binaries {
            let image = single_image(*arch, binary)?;
            images.push(image.clone());
            buildah(&[
                "manifest",
                "add",
                &list,
                &format!("containers-storage:{image}"),
            ])?;
        }
        let partial = archive.with_extension("tar.partial");
        let _ = fs::remove_file(&partial);
        buildah(&[
            "manifest",
            "push",
            "--quiet",
            "--all",
            "--format",
            "oci",
            &list,
            &format!("oci-archive:{}:{REFERENCE}", partial.display()),
        ])?;
        fs::rename(&partial, archive)
            .with_context(|| format!("moving the archive to {}", archive.display()))
    })();
    let _ = Command::new("buildah")
        .args(["manifest", "rm", &list])
        .output();
    for image in images {
        let _ = Command::new("buildah").args(["rmi", &image]).output();
    }
    result
}

/// The image of one architecture, committed to buildah's storage; returns its id.
fn single_image(arch: Arch, binary: &Path) -> anyhow::Result<String> {
    let container = buildah(&["from", "--arch", arch.oci(), "scratch"])?;
    let result = (|| {
        status(
            Command::new("buildah")
                .args(["copy", "--chmod", "0755", &container])
                .arg(binary)
                .arg("/monitor"),
        )?;
        buildah(&[
            "config",
            "--arch",
            arch.oci(),
            "--os",
            "linux",
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
        ])?;
        buildah(&["commit", "--quiet", "--format", "oci", &container])
    })();
    let _ = Command::new("buildah").args(["rm", &container]).output();
    result
}

/// Runs buildah with `args`; returns what it printed, trimmed.
fn buildah(args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("buildah")
        .args(args)
        .output()
        .context("starting buildah")?;
    if !out.status.success() {
        bail!(
            "buildah {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn is_newer(path: &Path, than: &Path) -> bool {
    let modified = |p: &Path| fs::metadata(p).and_then(|m| m.modified()).ok();
    matches!((modified(path), modified(than)), (Some(a), Some(b)) if a > b)
}
