//! A VM with systemd as PID 1, for peers that only run under it (systemd-oomd): Debian 12's
//! `systemd` and `systemd-oomd` packages, of the release this machine runs (so the shared
//! libraries `ldd` finds here are the ones they were built with), unpacked into the initramfs
//! beside busybox. `/init` hands over to systemd, which boots to a target of its own that
//! starts systemd-oomd and one oneshot service running the usual plan script
//! ([`super::init::script`]): its result line and `poweroff -f` end the run as under the
//! hand-made init. journald forwards every message to the kernel log, so a daemon's actions
//! and the kernel's OOM kills can be read there in the order they happened.
use std::{
    fs,
    io::Read as _,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};

use super::packages;

/// The unit systemd boots to.
const TARGET: &str = "vm-run.target";
/// Where the plan script lives in the VM.
const PLAN: &str = "/vm-run.sh";

/// `/init`: systemd as PID 1, booting to [`TARGET`] with its status lines off the console.
pub(super) fn init() -> String {
    format!("#!/bin/busybox sh\nexec /lib/systemd/systemd --unit={TARGET} --show-status=false\n")
}

/// What the initramfs needs beyond the usual, as (host, guest) paths.
pub(super) struct Files {
    /// ELF files: their libraries follow them in.
    pub executables: Vec<(PathBuf, PathBuf)>,
    pub files: Vec<(PathBuf, PathBuf)>,
}

/// The packages' files and the generated ones: `plan` is the plan script, `units` (guest
/// path, text) extra configuration (unit files, drop-ins). Generated files are written below
/// `work/systemd`.
pub(super) fn files(work: &Path, plan: &str, units: &[(&str, &str)]) -> anyhow::Result<Files> {
    let version = installed_version("systemd")?;
    let mut out = Files {
        executables: Vec::new(),
        files: Vec::new(),
    };
    for package in ["systemd", "systemd-oomd"] {
        let root = packages::unpacked(work, &format!("{package}={version}"))?;
        collect(&root, &root, &mut out)?;
    }
    let generated = work.join("systemd");
    let _ = fs::remove_dir_all(&generated);
    let target = "[Unit]\nDescription=The VM's run\nWants=systemd-oomd.service vm-run.service\n\
                  After=systemd-oomd.service\n";
    let service = format!(
        "[Unit]\nAfter=systemd-oomd.service\n[Service]\nType=oneshot\n\
         ExecStart=/bin/sh {PLAN}\nStandardOutput=tty\nStandardError=tty\n\
         TTYPath=/dev/console\n"
    );
    let fixed: [(&str, &str); 7] = [
        (PLAN, plan),
        (&format!("/etc/systemd/system/{TARGET}"), target),
        ("/etc/systemd/system/vm-run.service", &service),
        (
            "/etc/systemd/journald.conf.d/vm-run.conf",
            "[Journal]\nForwardToKMsg=yes\nMaxLevelKMsg=debug\n",
        ),
        // systemd-oomd runs as its own user; systemd wants a machine id and an os-release.
        (
            "/etc/passwd",
            "root:x:0:0:root:/root:/bin/sh\nsystemd-oom:x:998:998::/:/bin/false\n",
        ),
        ("/etc/group", "root:x:0:\nsystemd-oom:x:998:\n"),
        ("/etc/os-release", "ID=debian\nVERSION_ID=12\n"),
    ];
    let machine_id = [("/etc/machine-id", "6f6f6d2d70656572732d766d2d72756e\n")];
    for (guest, text) in fixed.iter().chain(&machine_id).chain(units) {
        let host = generated.join(guest.trim_start_matches('/'));
        fs::create_dir_all(host.parent().context("a generated file has no directory")?)?;
        fs::write(&host, text).with_context(|| format!("writing {}", host.display()))?;
        out.files.push((host, PathBuf::from(guest)));
    }
    Ok(out)
}

/// The version of `package` installed on this machine.
fn installed_version(package: &str) -> anyhow::Result<String> {
    let out = Command::new("dpkg-query")
        .args(["-W", "-f=${Version}", package])
        .output()
        .context("running dpkg-query")?;
    let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || version.is_empty() {
        bail!(
            "this machine has no {package} package installed, whose libraries the VM's \
             {package} would use"
        );
    }
    Ok(version)
}

/// Every regular file below `dir` (symlinks, such as unit aliases, are left out), sorted into
/// ELF executables and other files, at its path below `root` in the VM.
fn collect(root: &Path, dir: &Path, out: &mut Files) -> anyhow::Result<()> {
    for entry in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let path = entry.path();
        if kind.is_dir() {
            collect(root, &path, out)?;
        } else if kind.is_file() {
            let guest = Path::new("/").join(path.strip_prefix(root)?);
            if path.starts_with(root.join("usr/share")) {
                continue; // documentation, completions, D-Bus policy
            }
            let mut magic = [0u8; 4];
            let elf = fs::File::open(&path)
                .and_then(|mut f| f.read_exact(&mut magic))
                .is_ok()
                && magic == *b"\x7fELF";
            let list = if elf {
                &mut out.executables
            } else {
                &mut out.files
            };
            list.push((path, guest));
        }
    }
    Ok(())
}
