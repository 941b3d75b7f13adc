//! Giving a killed process's memory back at once, as Android's lmkd and earlyoom do.
//!
//! A SIGKILLed process frees its memory only once its threads have left the kernel and the
//! last of them tears down the address space; a thread stuck in a page fault or on a lock
//! holds it meanwhile, while the node stays at its OOM point. `process_mrelease` (Linux 5.15+)
//! lets the killer free the address space itself, through the pidfd it killed with.
use std::{
    io,
    os::fd::{AsRawFd as _, OwnedFd},
    sync::atomic::{AtomicBool, Ordering},
};

/// Set once the kernel has said it cannot reap (logged once).
static UNSUPPORTED_LOGGED: AtomicBool = AtomicBool::new(false);

/// `process_mrelease(pidfd, 0)`: frees the memory of a process that is being killed.
pub fn process_mrelease(pidfd: &OwnedFd) -> io::Result<()> {
    // SAFETY: a valid pidfd and no flags; the result is checked.
    let released = unsafe { libc::syscall(libc::SYS_process_mrelease, pidfd.as_raw_fd(), 0) };
    if released == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Whether this kernel has `process_mrelease`: asked with an invalid descriptor, a kernel
/// that has it says EBADF, one without says ENOSYS.
pub fn kernel_has_process_mrelease() -> bool {
    // SAFETY: an invalid descriptor is refused before anything is touched.
    let answer = unsafe { libc::syscall(libc::SYS_process_mrelease, -1, 0) };
    answer == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ENOSYS)
}

/// Reaps every process killed through `pidfds`. Nothing here fails the kill: a process that
/// is already gone (ESRCH) has nothing left, and a kernel without the call (ENOSYS) or a
/// process not yet seen dying (EINVAL) frees its memory by itself, as before.
pub fn reap(pidfds: &[OwnedFd]) {
    for pidfd in pidfds {
        match process_mrelease(pidfd) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EINVAL)) => {
                if !UNSUPPORTED_LOGGED.swap(true, Ordering::Relaxed) {
                    tracing::info!(
                        "process_mrelease after force: {e}; killed processes free their memory \
                         by themselves (logged once)"
                    );
                }
            }
            Err(e) => tracing::warn!("process_mrelease after force: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::FromRawFd as _;

    use super::*;

    const CHILD_BYTES: usize = 64 << 20;

    /// A forked child that has touched 64 MiB, killed through its pidfd and reaped: the call
    /// succeeds, or the kernel says clearly that it lacks it.
    #[test]
    fn a_killed_child_is_reaped_through_its_pidfd() {
        let mut pipe = [0; 2];
        // SAFETY: a two-element array for the pipe's ends.
        assert_eq!(unsafe { libc::pipe(pipe.as_mut_ptr()) }, 0);
        // SAFETY: the child calls only async-signal-safe functions (mmap, write, pause).
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", io::Error::last_os_error());
        if pid == 0 {
            // SAFETY: an anonymous private mapping, touched page by page, then the ready byte.
            unsafe {
                let memory = libc::mmap(
                    std::ptr::null_mut(),
                    CHILD_BYTES,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                );
                if memory != libc::MAP_FAILED {
                    libc::memset(memory, 1, CHILD_BYTES);
                }
                libc::write(pipe[1], [1u8].as_ptr().cast(), 1);
                loop {
                    libc::pause();
                }
            }
        }
        let mut ready = 0u8;
        // SAFETY: one byte into a local; the child writes it once its memory is touched.
        let read = unsafe { libc::read(pipe[0], (&raw mut ready).cast(), 1) };
        assert_eq!(read, 1, "the child's ready byte");
        // SAFETY: plain syscall with integer arguments; the result is checked.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        assert!(fd >= 0, "pidfd_open: {}", io::Error::last_os_error());
        // SAFETY: a new descriptor nobody else owns.
        let pidfd = unsafe { OwnedFd::from_raw_fd(i32::try_from(fd).unwrap()) };
        // SAFETY: a valid pidfd, a null siginfo, no flags.
        let sent = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                pidfd.as_raw_fd(),
                libc::SIGKILL,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        assert_eq!(sent, 0, "SIGKILL: {}", io::Error::last_os_error());
        match process_mrelease(&pidfd) {
            Ok(()) => assert!(kernel_has_process_mrelease()),
            // Gone before the call: nothing was left to reap.
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
                assert!(!kernel_has_process_mrelease());
                eprintln!("this kernel has no process_mrelease: {e}");
            }
            Err(e) => panic!("process_mrelease on a killed child: {e}"),
        }
        let mut status = 0;
        // SAFETY: waits for our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &raw mut status, 0) }, pid);
        assert!(libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL);
        // SAFETY: our pipe's ends, closed once.
        unsafe {
            libc::close(pipe[0]);
            libc::close(pipe[1]);
        }
    }
}
