//! The test command's disk budget. A whole run leaves about 9 GiB under the target directory
//! (the debug tests, two static release builds, the VMs' kernels and initramfs) and writes the
//! image's layers beside it; a disk that fills mid-run fails as an I/O error in whichever step
//! came last (once buildah's commit, 16 minutes in). The run checks first and says so at once.
use std::path::Path;

use anyhow::Context as _;

/// What a run from a clean clone needs free, with room for the toolchain's first install.
pub(crate) const RUN_NEEDS: u64 = 16 << 30;

/// Free bytes (for an unprivileged writer) on the file system that holds `path`, or its
/// nearest existing ancestor (a fresh clone has no target directory yet).
pub(crate) fn free_bytes(path: &Path) -> anyhow::Result<u64> {
    let existing = path
        .ancestors()
        .find(|a| a.is_dir())
        .with_context(|| format!("{}: no existing ancestor", path.display()))?;
    let c_path = std::ffi::CString::new(existing.as_os_str().as_encoded_bytes())
        .with_context(|| format!("{}: a NUL byte in the path", existing.display()))?;
    // SAFETY: statvfs fills the zeroed struct we own from a NUL-terminated path.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c_path.as_ptr(), &raw mut stat) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("statvfs {}", existing.display()));
    }
    Ok(stat.f_bavail.saturating_mul(stat.f_frsize))
}

/// Fails, naming both figures, when the file system holding `path` has less than `needed` free.
pub(crate) fn ensure_room(path: &Path, needed: u64) -> anyhow::Result<()> {
    let free = free_bytes(path)?;
    match shortfall(free, needed) {
        None => Ok(()),
        Some(said) => anyhow::bail!("{said} on the file system of {}", path.display()),
    }
}

fn shortfall(free: u64, needed: u64) -> Option<String> {
    (free < needed).then(|| {
        format!(
            "{} free, and a test run needs {}: free some space first",
            gib(free),
            gib(needed)
        )
    })
}

pub(crate) fn gib(bytes: u64) -> String {
    #[expect(
        clippy::cast_precision_loss,
        reason = "a figure for people, to a tenth"
    )]
    let gib = bytes as f64 / f64::from(1u32 << 30);
    format!("{gib:.1} GiB")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_enough_says_nothing() {
        assert_eq!(shortfall(20 << 30, RUN_NEEDS), None);
        assert_eq!(shortfall(RUN_NEEDS, RUN_NEEDS), None);
    }

    #[test]
    fn too_little_names_both_figures() {
        assert_eq!(
            shortfall(RUN_NEEDS - (1 << 30) / 2, RUN_NEEDS).as_deref(),
            Some("15.5 GiB free, and a test run needs 16.0 GiB: free some space first")
        );
    }

    #[test]
    fn a_path_still_to_be_made_is_measured_where_it_would_be() {
        let dir = std::env::temp_dir();
        let not_yet = dir.join("no-such-directory-yet/target");
        // Other writers move the figure between the two reads: a few MiB, not a disk.
        let (there, here) = (free_bytes(&not_yet).unwrap(), free_bytes(&dir).unwrap());
        assert!(there.abs_diff(here) < 256 << 20, "{there} vs {here}");
    }
}
