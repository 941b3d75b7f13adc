//! Builds the kernel programs (`monitor-ebpf`) for the BPF target and leaves the object in
//! OUT_DIR, where `source::ebpf` embeds it.
//!
//! Every build of `monitor` (clippy's check, the debug build, the release and musl builds)
//! has its own OUT_DIR, but the kernel object depends only on the target's architecture and
//! byte order. So the inner build runs in one directory per architecture under the cargo
//! target directory, shared by all of them, and each build copies the object from there: the
//! BPF crate and `core` are compiled once, not once per profile.
//!
//! The inner cargo build reports every crate it compiles as a build-script warning, about a
//! hundred lines on a first build. So the build runs in a child process of this script whose
//! output is held back: on success only one line says the kernel programs were built (plus
//! any compiler warnings, which are worth seeing); on failure everything is shown.
use std::{
    fs,
    io::Write as _,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context as _, anyhow, bail};
use aya_build::Toolchain;

/// Set in the child that runs the inner build.
const INNER: &str = "MONITOR_BUILD_EBPF_INNER";
/// What the inner cargo prints to say how far it got, not what is wrong.
const PROGRESS: &[&str] = &[
    "Compiling ",
    "Finished ",
    "Fresh ",
    "Downloading ",
    "Downloaded ",
    "Updating ",
    "Locking ",
    "Adding ",
    "Blocking ",
];

fn main() -> anyhow::Result<()> {
    if std::env::var_os(INNER).is_some() {
        return build_ebpf();
    }
    let started = Instant::now();
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").context("OUT_DIR is not set")?);
    let shared = shared_dir(&out_dir)?;
    fs::create_dir_all(&shared).with_context(|| format!("creating {}", shared.display()))?;
    // Builds of several profiles may run at once: one builds and copies at a time.
    let lock = fs::File::create(shared.join(".lock"))?;
    lock.lock()
        .with_context(|| format!("locking {}", shared.display()))?;
    let exe = std::env::current_exe().context("finding the build script")?;
    let output = Command::new(&exe)
        .env(INNER, "1")
        .env("OUT_DIR", &shared)
        .output()
        .with_context(|| format!("running {}", exe.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        // Cargo shows a failed build script's whole output.
        print!("{stdout}");
        std::io::stderr().write_all(&output.stderr)?;
        bail!("building the kernel programs failed: {}", output.status);
    }
    let mut hidden = 0;
    for line in stdout.lines() {
        match line.strip_prefix("cargo:warning=") {
            Some(message) if is_progress(message) => hidden += 1,
            _ => println!("{line}"),
        }
    }
    fs::copy(shared.join(OBJECT), out_dir.join(OBJECT))
        .with_context(|| format!("copying the kernel object from {}", shared.display()))?;
    println!(
        "cargo:warning=built the kernel programs (monitor-ebpf) in {} in {}; {hidden} progress \
         lines hidden",
        seconds(started.elapsed()),
        shared.display()
    );
    Ok(())
}

/// The kernel object's file name (monitor-ebpf's binary).
const OBJECT: &str = "monitor";

/// `bpf/<arch>-<endian>` in the cargo target directory (the outermost ancestor of OUT_DIR
/// that holds cargo's CACHEDIR.TAG: a `--target` build's `target/<triple>/` holds one too);
/// OUT_DIR itself where none is found.
fn shared_dir(out_dir: &Path) -> anyhow::Result<PathBuf> {
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").context("CARGO_CFG_TARGET_ARCH")?;
    let endian = std::env::var("CARGO_CFG_TARGET_ENDIAN").context("CARGO_CFG_TARGET_ENDIAN")?;
    let root = out_dir
        .ancestors()
        .filter(|dir| dir.join("CACHEDIR.TAG").is_file())
        .last();
    Ok(match root {
        Some(root) => root.join("bpf").join(format!("{arch}-{endian}")),
        None => out_dir.to_path_buf(),
    })
}

fn is_progress(message: &str) -> bool {
    let message = message.trim_start();
    PROGRESS.iter().any(|p| message.starts_with(p))
}

fn seconds(elapsed: Duration) -> String {
    format!("{:.0}s", elapsed.as_secs_f64())
}

fn build_ebpf() -> anyhow::Result<()> {
    let cargo_metadata::Metadata { packages, .. } = cargo_metadata::MetadataCommand::new()
        .no_deps()
        .exec()
        .context("reading workspace metadata")?;
    let ebpf = packages
        .into_iter()
        .find(|p| p.name.as_str() == "monitor-ebpf")
        .ok_or_else(|| anyhow!("package monitor-ebpf not found in the workspace"))?;
    let root_dir = ebpf
        .manifest_path
        .parent()
        .ok_or_else(|| anyhow!("{} has no parent directory", ebpf.manifest_path))?;
    aya_build::build_ebpf(
        [aya_build::Package {
            name: ebpf.name.as_str(),
            root_dir: root_dir.as_str(),
            ..Default::default()
        }],
        Toolchain::default(),
    )
}
