//! Loading the object without aya parsing the kernel's BTF.
//!
//! `EbpfLoader::new` always parses `/sys/kernel/btf/vmlinux` (about 17 MiB of heap on 6.18,
//! the largest part of the agent's peak memory), even when told afterwards to use no BTF, and
//! these programs need no CO-RE relocation. So the load runs on a short-lived thread with a
//! mount namespace of its own in which that file reads as empty: aya finds no BTF and moves
//! on. The namespace ends with the thread and is never visible to the rest of the node. Where
//! it cannot be made (no CAP_SYS_ADMIN), aya parses the BTF as usual and only memory is lost.
use std::{ffi::CStr, io, ptr};

use aya::{Ebpf, EbpfError, EbpfLoader};

use super::VMLINUX_BTF;

/// Loads `object` with BTF relocation off, hiding the kernel's BTF from aya where possible,
/// its per-cgroup map sized to `cgroup_map_entries` and the map of removed cgroups to a
/// quarter of that.
pub(super) fn load(object: &[u8], cgroup_map_entries: u32) -> Result<Ebpf, EbpfError> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                if let Err(e) = hide_kernel_btf() {
                    tracing::debug!("aya parses the kernel's BTF anyway: {e}");
                }
                EbpfLoader::new()
                    .btf(None)
                    .map_max_entries("CGROUP_STATS", cgroup_map_entries)
                    .map_max_entries("REMOVED", cgroup_map_entries / 4)
                    .load(object)
            })
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// Bind-mounts /dev/null over the kernel's BTF in a mount namespace for this thread alone.
fn hide_kernel_btf() -> io::Result<()> {
    // CLONE_FS gives the thread its own root and working directory, which a new mount
    // namespace needs in a multi-threaded process.
    // SAFETY: unshare only changes this thread's namespace membership.
    check(unsafe { libc::unshare(libc::CLONE_FS | libc::CLONE_NEWNS) })?;
    // Private first, so the bind mount cannot propagate back to the node's namespace.
    mount(c"none", c"/", libc::MS_REC | libc::MS_PRIVATE)?;
    let target = std::ffi::CString::new(VMLINUX_BTF).map_err(io::Error::other)?;
    mount(c"/dev/null", &target, libc::MS_BIND)
}

fn mount(source: &CStr, target: &CStr, flags: libc::c_ulong) -> io::Result<()> {
    // SAFETY: both paths are NUL-terminated; no filesystem type or data is passed.
    check(unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            ptr::null(),
            flags,
            ptr::null(),
        )
    })
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The namespace stays with the loading thread: the node's view of the file is untouched.
    #[test]
    fn the_kernel_btf_stays_visible_outside_the_loading_thread() {
        let Ok(before) = std::fs::metadata(VMLINUX_BTF) else {
            test_skip::cannot_run(test_skip::Reason::Btf, &format!("no {VMLINUX_BTF}"));
            return;
        };
        let hidden = std::thread::spawn(|| {
            hide_kernel_btf().map(|()| std::fs::metadata(VMLINUX_BTF).unwrap().len())
        })
        .join()
        .unwrap();
        match hidden {
            Ok(len) => assert_eq!(len, 0, "the loading thread still sees the BTF"),
            // A mount namespace of its own needs CAP_SYS_ADMIN.
            Err(e) => test_skip::cannot_run(
                test_skip::Reason::Root,
                &format!("no mount namespace here ({e})"),
            ),
        }
        assert_eq!(std::fs::metadata(VMLINUX_BTF).unwrap().len(), before.len());
    }
}
