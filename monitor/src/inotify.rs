//! inotify on tokio's reactor, for the watches of the manifests directory and of the
//! configuration files: a change is seen as soon as the kernel reports it, without polling.
use std::{
    ffi::CString,
    io,
    os::{
        fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
        unix::ffi::OsStrExt as _,
    },
    path::Path,
};

use tokio::io::{Interest, unix::AsyncFd};

/// One inotify instance and its watches.
pub(crate) struct Inotify {
    fd: AsyncFd<OwnedFd>,
}

impl Inotify {
    /// A new instance, non-blocking and closed on exec. Must be called inside a tokio
    /// runtime. Fails with EMFILE when the user's `fs.inotify.max_user_instances` is reached.
    pub(crate) fn new() -> io::Result<Self> {
        // SAFETY: no pointers passed; the result is checked.
        let raw = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a new descriptor owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: the AsyncFd owns the OwnedFd, which stays open until both are dropped.
        let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }?;
        Ok(Self { fd })
    }

    /// Watches `path` for the events of `mask`.
    pub(crate) fn add_watch(&self, path: &Path, mask: u32) -> io::Result<()> {
        let path = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: `path` is a valid NUL-terminated string that outlives the call.
        let watch = unsafe { libc::inotify_add_watch(self.fd.as_raw_fd(), path.as_ptr(), mask) };
        if watch < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Waits until events are queued, then drains all of them, so a burst is one wake-up;
    /// the masks of the burst, or'ed. Cancel-safe: what a cancelled wait left queued is
    /// read by the next.
    pub(crate) async fn next_burst(&self) -> io::Result<u32> {
        let mut buffer = [0u8; 4096];
        let mut masks = None;
        loop {
            let mut guard = self.fd.readable().await?;
            loop {
                let read = guard.try_io(|fd| {
                    // SAFETY: reads into a buffer we own, at most its length.
                    let n = unsafe {
                        libc::read(fd.as_raw_fd(), buffer.as_mut_ptr().cast(), buffer.len())
                    };
                    if n < 0 {
                        Err(io::Error::last_os_error())
                    } else {
                        Ok(n as usize)
                    }
                });
                match read {
                    Ok(Ok(n)) => {
                        let seen = event_masks(&buffer[..n]).fold(0, |all, mask| all | mask);
                        masks = Some(masks.unwrap_or(0) | seen);
                    }
                    Ok(Err(error)) => return Err(error),
                    // Queue empty: readiness was cleared by try_io.
                    Err(_would_block) => match masks {
                        Some(masks) => return Ok(masks),
                        None => break,
                    },
                }
            }
        }
    }
}

/// The masks of the `struct inotify_event` records in `bytes`: wd (4 bytes), mask (4),
/// cookie (4), name length (4), then the name.
fn event_masks(bytes: &[u8]) -> impl Iterator<Item = u32> + '_ {
    let field = |at: usize| {
        bytes
            .get(at..at + 4)
            .map(|b| u32::from_ne_bytes(b.try_into().expect("4 bytes")))
    };
    let mut offset = 0;
    std::iter::from_fn(move || {
        let mask = field(offset + 4)?;
        let name_len = field(offset + 12)? as usize;
        offset += 16 + name_len;
        Some(mask)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_records_are_split_by_name_length() {
        let record = |mask: u32, name: &[u8]| {
            let mut bytes = Vec::new();
            for field in [1u32, mask, 0, name.len() as u32] {
                bytes.extend(field.to_ne_bytes());
            }
            bytes.extend(name);
            bytes
        };
        let mut bytes = record(libc::IN_CLOSE_WRITE, b"a.yaml\0\0\0\0\0\0\0\0\0\0");
        bytes.extend(record(libc::IN_DELETE_SELF, b""));
        let masks: Vec<u32> = event_masks(&bytes).collect();
        assert_eq!(masks, [libc::IN_CLOSE_WRITE, libc::IN_DELETE_SELF]);
    }
}
