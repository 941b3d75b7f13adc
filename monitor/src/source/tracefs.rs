//! tracefs, where the kernel lists its tracepoints and their record formats: found, or mounted
//! when it is reachable nowhere, and asked whether a program's tracepoint exists.
use std::{
    ffi::CString,
    fs, io,
    path::{Path, PathBuf},
};

use super::programs::ProgramSpec;

/// Where tracefs is mounted on current systems, and where we mount it when it is not.
pub const TRACEFS: &str = "/sys/kernel/tracing";
/// Where older systems reach tracefs, through debugfs.
const DEBUGFS_TRACING: &str = "/sys/kernel/debug/tracing";
/// Why tracefs could not be made available.
#[derive(Debug, thiserror::Error)]
pub enum TracefsError {
    /// tracefs is not mounted and mounting it failed (not root, or a kernel without tracing).
    #[error(
        "tracefs is not mounted and mounting it at {TRACEFS} failed: {0}; as root: \
         mount -t tracefs nodev {TRACEFS}"
    )]
    Mount(io::Error),
    /// tracefs is mounted but only root may read it.
    #[error("tracefs at {0} is readable by root only; run as root")]
    NotPermitted(PathBuf),
}

/// Returns the tracefs root, mounting tracefs at [`TRACEFS`] when it is reachable nowhere.
pub fn ensure_tracefs() -> Result<PathBuf, TracefsError> {
    for root in [TRACEFS, DEBUGFS_TRACING].map(PathBuf::from) {
        match fs::metadata(root.join("events")) {
            Ok(events) if events.is_dir() => return Ok(root),
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                return Err(TracefsError::NotPermitted(root));
            }
            _ => {}
        }
    }
    let c = |s: &str| CString::new(s).expect("constant without NUL");
    let (source, target, fstype) = (c("nodev"), c(TRACEFS), c("tracefs"));
    // SAFETY: all pointers are valid NUL-terminated strings for the duration of the call, and
    // tracefs takes no mount data.
    let rc = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(TracefsError::Mount(io::Error::last_os_error()));
    }
    Ok(PathBuf::from(TRACEFS))
}

/// Whether the tracepoint a program hooks exists under the tracefs root.
pub fn tracepoint_exists(tracefs: &Path, program: &ProgramSpec) -> bool {
    tracefs
        .join("events")
        .join(program.category)
        .join(program.tracepoint)
        .is_dir()
}
