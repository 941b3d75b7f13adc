//! The VM's root filesystem: busybox with its applets, `/init`, the executables under test,
//! the shared libraries `ldd` says they load and the kernel modules init loads. Written as
//! gzip-compressed cpio.
//!
//! Executables lose their debug info on the way in: it is nine tenths of a debug build, and
//! unpacking it under TCG took longer than the tests. Symbols stay, so backtraces keep function
//! names, and panic messages keep their source locations.
use std::{
    fs,
    io::Write as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context as _, bail};

use super::cpio::Tree;
use crate::{arch::Arch, process::status};

/// Busybox in the VM, and the machine's own, whose applet list names the links (an arm64
/// VM's busybox is the same Debian package for arm64).
const BUSYBOX: &str = "/bin/busybox";
/// The CA bundle: a node has one, and the Kubernetes client refuses to start without any
/// root certificate even when it talks plain HTTP to the tests' mock API server.
const CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// Writes the initramfs of an `arch` VM to `out`, with `busybox` (a host path, built for
/// `arch`); `executables` and `modules` are (host path, path in the VM).
pub(super) fn write(
    out: &Path,
    init: &str,
    (arch, busybox): (Arch, &Path),
    executables: &[(&Path, PathBuf)],
    modules: &[(&Path, PathBuf)],
) -> anyhow::Result<()> {
    let stripped = out.with_extension("stripped");
    let mut tree = Tree::default();
    for dir in ["dev", "proc", "sys", "tmp"] {
        tree.dir(dir);
    }
    tree.file("init", 0o755, init.as_bytes().to_vec());
    add_file(&mut tree, busybox, Path::new(BUSYBOX))?;
    add_file(&mut tree, Path::new(CA_BUNDLE), Path::new(CA_BUNDLE))?;
    for (host, guest) in modules {
        add_file(&mut tree, host, guest)?;
    }
    for applet in busybox_applets()? {
        tree.symlink(&format!("bin/{applet}"), "busybox");
    }
    let mut libraries = Vec::new();
    for (host, guest) in executables {
        status(
            Command::new(strip(arch))
                .arg("--strip-debug")
                .arg("-o")
                .arg(&stripped)
                .arg(host),
        )?;
        add_file(&mut tree, &stripped, guest)?;
        libraries.extend(shared_libraries(host)?);
    }
    fs::remove_file(&stripped)?;
    libraries.sort();
    libraries.dedup();
    for lib in &libraries {
        // Stored under the name the loader asks for, with the content of what it links to.
        add_file(&mut tree, lib, lib)?;
    }
    let mut archive = Vec::new();
    tree.write(&mut archive)?;
    gzip(&archive, out)
}

/// binutils' strip for `arch` (the cross one comes with the C cross compiler).
fn strip(arch: Arch) -> &'static str {
    match arch {
        Arch::X86_64 => "strip",
        Arch::Aarch64 => "aarch64-linux-gnu-strip",
    }
}

fn add_file(tree: &mut Tree, host: &Path, guest: &Path) -> anyhow::Result<()> {
    let data = fs::read(host).with_context(|| format!("reading {}", host.display()))?;
    tree.file(&guest.to_string_lossy(), 0o755, data);
    Ok(())
}

fn busybox_applets() -> anyhow::Result<Vec<String>> {
    let out = Command::new(BUSYBOX)
        .arg("--list")
        .output()
        .with_context(|| format!("running {BUSYBOX} --list"))?;
    if !out.status.success() {
        bail!("{BUSYBOX} --list failed: {}", out.status);
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|a| !a.is_empty() && *a != "busybox")
        .map(str::to_string)
        .collect())
}

fn shared_libraries(exe: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let out = Command::new("ldd")
        .arg(exe)
        .output()
        .with_context(|| format!("running ldd {}", exe.display()))?;
    // ldd exits 1 for static executables, with "not a dynamic executable".
    parse_ldd(&String::from_utf8_lossy(&out.stdout))
        .with_context(|| format!("shared libraries of {}", exe.display()))
}

/// The files `ldd` output names; the vDSO has none and is skipped.
fn parse_ldd(output: &str) -> anyhow::Result<Vec<PathBuf>> {
    let mut paths = Vec::new();
    for line in output.lines() {
        let line = line.trim();
        let path = match line.split_once("=>") {
            Some((name, resolved)) => {
                let resolved = resolved.trim();
                if resolved.starts_with("not found") {
                    bail!("{} is not installed", name.trim());
                }
                resolved.split_whitespace().next()
            }
            None => line.split_whitespace().next(),
        };
        if let Some(path) = path.filter(|p| p.starts_with('/')) {
            paths.push(PathBuf::from(path));
        }
    }
    Ok(paths)
}

/// Compresses with the system's gzip (fast level: the archive is rebuilt every run).
fn gzip(data: &[u8], out: &Path) -> anyhow::Result<()> {
    let file = fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
    let mut child = Command::new("gzip")
        .arg("-1")
        .stdin(Stdio::piped())
        .stdout(file)
        .spawn()
        .context("starting gzip")?;
    child
        .stdin
        .take()
        .context("gzip stdin")?
        .write_all(data)
        .context("writing to gzip")?;
    let status = child.wait()?;
    if !status.success() {
        bail!("gzip failed: {status}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_paths_without_the_vdso() {
        let out = "\tlinux-vdso.so.1 (0x00007ffd5b1f2000)\n\
            \tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007f90df3d2000)\n\
            \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f90dea1e000)\n\
            \t/lib64/ld-linux-x86-64.so.2 (0x00007f90df408000)\n";
        assert_eq!(
            parse_ldd(out).unwrap(),
            [
                "/lib/x86_64-linux-gnu/libgcc_s.so.1",
                "/lib/x86_64-linux-gnu/libc.so.6",
                "/lib64/ld-linux-x86-64.so.2"
            ]
            .map(PathBuf::from)
        );
    }

    #[test]
    fn static_executables_need_nothing() {
        assert!(
            parse_ldd("\tnot a dynamic executable\n")
                .unwrap()
                .is_empty()
        );
        assert!(parse_ldd("\tstatically linked\n").unwrap().is_empty());
    }

    #[test]
    fn missing_libraries_fail() {
        let err = parse_ldd("\tlibfoo.so.1 => not found\n").unwrap_err();
        assert_eq!(err.to_string(), "libfoo.so.1 is not installed");
    }
}
