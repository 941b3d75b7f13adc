//! `cargo xtask setup`: installs what building the kernel programs needs, skipping what is
//! present. The kernel crate is built with nightly (`-Z build-std=core` for the BPF target, so
//! rust-src) and linked by bpf-linker, which must use the same LLVM major version as nightly
//! rustc; bpf-linker is built against Debian's LLVM development packages.
use std::{
    path::PathBuf,
    process::{Command, Output},
};

use anyhow::{Context as _, bail};

use crate::process::status;

pub(crate) fn run() -> anyhow::Result<()> {
    ensure_nightly()?;
    ensure_rust_src()?;
    let llvm = nightly_llvm_major()?;
    ensure_bpf_linker(llvm)?;
    // The `monitor top` test drives the terminal view in tmux.
    ensure_debian_packages(&["tmux"])?;
    Ok(())
}

/// Adds a target's standard library to the default toolchain (the image's musl build).
pub(crate) fn ensure_rust_target(target: &str) -> anyhow::Result<()> {
    let installed = stdout_of(Command::new("rustup").args(["target", "list", "--installed"]))?;
    if installed.lines().any(|l| l.trim() == target) {
        return Ok(());
    }
    eprintln!("setup: adding the {target} target");
    status(Command::new("rustup").args(["target", "add", target]))
        .with_context(|| format!("`rustup target add {target}` is needed"))
}

/// The manifest validator, in a virtualenv under the target directory (Debian's Python
/// refuses system-wide pip installs); returns its executable. The package carries the
/// Kubernetes schemas, so validating needs no network.
pub(crate) fn ensure_kubernetes_validate(target: &std::path::Path) -> anyhow::Result<PathBuf> {
    let venv = target.join("kubernetes-validate");
    let validator = venv.join("bin/kubernetes-validate");
    if validator.exists() {
        return Ok(validator);
    }
    eprintln!(
        "setup: installing kubernetes-validate into {}",
        venv.display()
    );
    let make_venv = || status(Command::new("python3").arg("-m").arg("venv").arg(&venv));
    if make_venv().is_err() {
        ensure_debian_packages(&["python3-venv"])?;
        make_venv()?;
    }
    status(Command::new(venv.join("bin/pip")).args(["install", "--quiet", "kubernetes-validate"]))
        .context("pip install kubernetes-validate failed")?;
    Ok(validator)
}

fn output(cmd: &mut Command) -> anyhow::Result<Output> {
    cmd.output().with_context(|| format!("starting {cmd:?}"))
}

fn stdout_of(cmd: &mut Command) -> anyhow::Result<String> {
    let out = output(cmd)?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn ensure_nightly() -> anyhow::Result<()> {
    let toolchains = stdout_of(Command::new("rustup").args(["toolchain", "list"]))
        .context("rustup is needed to build the kernel programs; install it from rustup.rs")?;
    if toolchains.lines().any(|l| l.starts_with("nightly")) {
        return Ok(());
    }
    eprintln!("setup: installing the nightly toolchain");
    status(Command::new("rustup").args(["toolchain", "install", "nightly", "--profile", "minimal"]))
        .context("the kernel programs need a nightly toolchain: `rustup toolchain install nightly`")
}

fn ensure_rust_src() -> anyhow::Result<()> {
    let installed = stdout_of(Command::new("rustup").args([
        "component",
        "list",
        "--toolchain",
        "nightly",
        "--installed",
    ]))?;
    if installed.lines().any(|l| l.starts_with("rust-src")) {
        return Ok(());
    }
    eprintln!("setup: adding rust-src to nightly");
    status(Command::new("rustup").args(["component", "add", "rust-src", "--toolchain", "nightly"]))
        .context("`rustup component add rust-src --toolchain nightly` is needed")
}

/// A rustup component (rustfmt, clippy) on the default toolchain, for the checks
/// `cargo xtask test` starts with.
pub(crate) fn ensure_component(name: &str) -> anyhow::Result<()> {
    let installed = stdout_of(Command::new("rustup").args(["component", "list", "--installed"]))?;
    if installed.lines().any(|l| l.starts_with(name)) {
        return Ok(());
    }
    eprintln!("setup: adding {name}");
    status(Command::new("rustup").args(["component", "add", name]))
        .with_context(|| format!("`rustup component add {name}` is needed"))
}

/// LLVM major version of nightly rustc, from `rustc +nightly -vV`.
fn nightly_llvm_major() -> anyhow::Result<u32> {
    let verbose = stdout_of(Command::new("rustup").args(["run", "nightly", "rustc", "-vV"]))?;
    parse_llvm_major(&verbose)
        .with_context(|| format!("no `LLVM version:` line in `rustc +nightly -vV`:\n{verbose}"))
}

fn parse_llvm_major(rustc_verbose: &str) -> Option<u32> {
    let version = rustc_verbose
        .lines()
        .find_map(|l| l.strip_prefix("LLVM version:"))?;
    version.trim().split('.').next()?.parse().ok()
}

fn ensure_bpf_linker(llvm: u32) -> anyhow::Result<()> {
    if let Some(linker) = find_on_path("bpf-linker") {
        match linked_llvm_major(&linker) {
            Some(found) if found != llvm => eprintln!(
                "setup: {} uses LLVM {found} but nightly rustc uses LLVM {llvm}; rebuilding it",
                linker.display()
            ),
            _ => return Ok(()),
        }
    }
    ensure_llvm_packages(llvm)?;
    eprintln!("setup: building bpf-linker against LLVM {llvm} (takes a few minutes)");
    let prefix = format!("/usr/lib/llvm-{llvm}");
    let path = format!("{prefix}/bin:{}", std::env::var("PATH").unwrap_or_default());
    status(
        Command::new("cargo")
            .args(["install", "bpf-linker", "--force", "--no-default-features"])
            .args(["--features", &format!("llvm-{llvm}")])
            .env("PATH", path)
            .env("LLVM_PREFIX", &prefix),
    )
    .with_context(|| {
        format!(
            "building bpf-linker failed; by hand: PATH={prefix}/bin:$PATH LLVM_PREFIX={prefix} \
             cargo install bpf-linker --no-default-features --features llvm-{llvm}"
        )
    })
}

/// LLVM major of a dynamically linked bpf-linker, from the libLLVM it loads.
fn linked_llvm_major(linker: &PathBuf) -> Option<u32> {
    let ldd = stdout_of(Command::new("ldd").arg(linker)).ok()?;
    ldd.lines().find_map(|line| {
        let lib = line.split_whitespace().next()?;
        let version = lib
            .strip_prefix("libLLVM.so.")
            .or_else(|| lib.strip_prefix("libLLVM-"))?;
        version
            .trim_end_matches(".so")
            .split('.')
            .next()?
            .parse()
            .ok()
    })
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// Debian packages bpf-linker's build needs.
fn llvm_packages(llvm: u32) -> Vec<String> {
    vec![
        format!("llvm-{llvm}-dev"),
        format!("libpolly-{llvm}-dev"),
        "libzstd-dev".into(),
        "zlib1g-dev".into(),
    ]
}

fn ensure_llvm_packages(llvm: u32) -> anyhow::Result<()> {
    let packages = llvm_packages(llvm);
    ensure_debian_packages(&packages.iter().map(String::as_str).collect::<Vec<_>>())
}

/// Installs the Debian packages that are not installed yet; needs root for apt-get.
pub(crate) fn ensure_debian_packages(packages: &[&str]) -> anyhow::Result<()> {
    let missing: Vec<&str> = packages
        .iter()
        .copied()
        .filter(|p| !debian_package_installed(p))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let list = missing.join(" ");
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc_geteuid() } != 0 {
        bail!(
            "missing Debian packages: {list}\ninstall them as root: apt-get update && apt-get install -y {list}"
        );
    }
    eprintln!("setup: installing {list}");
    status(Command::new("apt-get").args(["update", "-qq"]))?;
    status(
        Command::new("apt-get")
            .args(["install", "-y", "-qq"])
            .args(&missing)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )
    .with_context(|| format!("apt-get install {list} failed"))
}

fn debian_package_installed(name: &str) -> bool {
    stdout_of(Command::new("dpkg-query").args(["-W", "-f", "${Status}", name]))
        .is_ok_and(|s| s.contains("install ok installed"))
}

unsafe extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llvm_major_from_rustc_verbose() {
        let out =
            "rustc 1.97.0-nightly (e50aa6fba 2026-05-19)\nbinary: rustc\nLLVM version: 22.1.2\n";
        assert_eq!(parse_llvm_major(out), Some(22));
        assert_eq!(parse_llvm_major("rustc 1.0\n"), None);
    }

    #[test]
    fn llvm_packages_follow_the_major() {
        assert_eq!(llvm_packages(22)[0], "llvm-22-dev");
        assert_eq!(llvm_packages(21)[1], "libpolly-21-dev");
    }
}
