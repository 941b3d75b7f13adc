//! The kernel's BTF file as bytes, without a copy where the kernel allows it.
//!
//! `/sys/kernel/btf/vmlinux` is 5-6 MiB. Read into the heap, it is charged to the agent's
//! memory cgroup and sets most of the agent's peak charge at start-up. Since Linux 6.16 sysfs
//! lets it be mapped read-only, and the bytes are then the kernel's own pages; older kernels
//! refuse the map and the file is read.
use std::{fs::File, io, ops::Deref, os::fd::AsRawFd as _, path::Path, ptr::NonNull};

/// The file's bytes: a read-only mapping, or a heap copy.
pub(crate) enum BtfBytes {
    Mapped { addr: NonNull<u8>, len: usize },
    Read(Vec<u8>),
}

impl BtfBytes {
    pub(crate) fn open(path: &Path) -> io::Result<Self> {
        let file = File::open(path)?;
        let len = usize::try_from(file.metadata()?.len()).map_err(io::Error::other)?;
        if len > 0 {
            // SAFETY: a new read-only private mapping of a file this function opened; the
            // kernel checks the arguments, and Drop unmaps it.
            let addr = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE,
                    file.as_raw_fd(),
                    0,
                )
            };
            if addr != libc::MAP_FAILED
                && let Some(addr) = NonNull::new(addr.cast::<u8>())
            {
                return Ok(Self::Mapped { addr, len });
            }
        }
        std::fs::read(path).map(Self::Read)
    }

    /// Whether the bytes are the kernel's pages rather than a copy.
    pub(crate) fn is_mapped(&self) -> bool {
        matches!(self, Self::Mapped { .. })
    }
}

impl Deref for BtfBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            // SAFETY: the mapping is `len` readable bytes for as long as `self` lives, and
            // nothing writes to it (private and read-only).
            Self::Mapped { addr, len } => unsafe {
                std::slice::from_raw_parts(addr.as_ptr(), *len)
            },
            Self::Read(bytes) => bytes,
        }
    }
}

impl Drop for BtfBytes {
    fn drop(&mut self) {
        if let Self::Mapped { addr, len } = self {
            // SAFETY: the mapping made in `open`, unmapped once.
            unsafe { libc::munmap(addr.as_ptr().cast(), *len) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapped_or_read_the_bytes_are_the_file() {
        let Ok(expected) = std::fs::read("/sys/kernel/btf/vmlinux") else {
            test_skip::cannot_run(test_skip::Reason::Btf, "no /sys/kernel/btf/vmlinux");
            return;
        };
        let bytes = BtfBytes::open(Path::new("/sys/kernel/btf/vmlinux")).unwrap();
        assert_eq!(&bytes[..], &expected[..], "mapped: {}", bytes.is_mapped());
    }

    #[test]
    fn an_ordinary_file_and_an_empty_one() {
        let dir = std::env::temp_dir().join(format!("monitor-btf-bytes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (full, empty) = (dir.join("full"), dir.join("empty"));
        std::fs::write(&full, b"\x9f\xeb\x01\x00rest").unwrap();
        std::fs::write(&empty, b"").unwrap();
        let full_bytes = BtfBytes::open(&full).unwrap();
        let empty_bytes = BtfBytes::open(&empty).unwrap();
        let missing = BtfBytes::open(&dir.join("missing"));
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(&full_bytes[..], b"\x9f\xeb\x01\x00rest");
        assert!(full_bytes.is_mapped(), "a regular file maps");
        assert!(empty_bytes.is_empty() && !empty_bytes.is_mapped());
        assert!(missing.is_err());
    }
}
