//! Builds the kernel programs (`monitor-ebpf`) for the BPF target and leaves the object in
//! OUT_DIR, where `source::ebpf` embeds it.
//!
//! The inner cargo build reports every crate it compiles as a build-script warning, about a
//! hundred lines on a first build. So the build runs in a child process of this script whose
//! output is held back: on success only one line says the kernel programs were built (plus
//! any compiler warnings, which are worth seeing); on failure everything is shown.
use std::{
    io::Write as _,
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
    let exe = std::env::current_exe().context("finding the build script")?;
    let output = Command::new(&exe)
        .env(INNER, "1")
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
    println!(
        "cargo:warning=built the kernel programs (monitor-ebpf) in {}; {hidden} progress lines \
         hidden",
        seconds(started.elapsed())
    );
    Ok(())
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
