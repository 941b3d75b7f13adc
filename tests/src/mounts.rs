//! Filesystems a test mounts for itself (a tiny tmpfs to fill, a read-only bind mount), unmounted
//! on drop even when the test fails.
use std::{
    path::{Path, PathBuf},
    process::Command,
};

/// A mount made by the test; lazily unmounted on drop.
pub struct Mount {
    pub target: PathBuf,
}

impl Mount {
    /// A tmpfs of `size` (mount's syntax: `64k`) on the existing directory `target`.
    pub fn tmpfs(target: &Path, size: &str) -> Self {
        run(Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(target));
        Self {
            target: target.to_path_buf(),
        }
    }

    /// `source` bind-mounted read-only on the existing directory `target`.
    pub fn read_only_bind(source: &Path, target: &Path) -> Self {
        run(Command::new("mount").arg("--bind").arg(source).arg(target));
        let mount = Self {
            target: target.to_path_buf(),
        };
        run(Command::new("mount")
            .args(["-o", "remount,bind,ro"])
            .arg(target));
        mount
    }

    /// Fills the filesystem until a write fails for lack of space.
    pub fn fill(&self) {
        let filler = self.target.join("filler");
        // dd stops with ENOSPC once the filesystem is full; that is the point.
        let _ = Command::new("dd")
            .arg("if=/dev/zero")
            .arg(format!("of={}", filler.display()))
            .args(["bs=4k", "status=none"])
            .status();
        assert!(
            std::fs::write(self.target.join("probe"), vec![0u8; 8192]).is_err(),
            "{} is not full",
            self.target.display()
        );
    }

    /// Makes room again.
    pub fn make_room(&self) {
        std::fs::remove_file(self.target.join("filler")).expect("removing the filler");
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.target).status();
    }
}

fn run(cmd: &mut Command) {
    let status = cmd.status().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(status.success(), "{cmd:?}: {status}");
}
