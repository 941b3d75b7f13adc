//! A bounded fork bomb, as the PID benchmark and tests start one inside a pod.
use std::{ffi::CString, io::Read as _, os::fd::FromRawFd as _, path::PathBuf, thread::JoinHandle};

use monitor::system_clock::monotonic_ns;

/// A fork bomb in the cgroups whose `cgroup.procs` files are `procs`: a parent that moves
/// itself in and forks idle children as fast as it can until a fork fails (a pids cgroup's
/// limit) or it made `most`, dying at SIGTERM as a shell would; its children ignore SIGTERM
/// and go at force. Returns the parent's pid, and a thread that hands back (pid, time the
/// fork returned) of every child once the parent is gone.
pub fn fork_bomb(
    procs: &[PathBuf],
    most: usize,
) -> (libc::pid_t, JoinHandle<Vec<(libc::pid_t, u64)>>) {
    let paths: Vec<CString> = procs
        .iter()
        .map(|p| CString::new(p.as_os_str().as_encoded_bytes()).expect("a path without NUL"))
        .collect();
    let mut fds = [0; 2];
    // SAFETY: pipe writes two descriptors into the array it is given.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe");
    let [read_end, write_end] = fds;
    // SAFETY: the child calls only async-signal-safe functions (open, write, close, fork,
    // clock_gettime, signal, pause, _exit) on memory prepared before the fork. The test
    // process has other threads, but nothing they hold is touched after the fork.
    let parent = unsafe { libc::fork() };
    if parent == 0 {
        unsafe {
            libc::close(read_end);
            for path in &paths {
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY);
                if fd < 0 || libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                    libc::_exit(1);
                }
                libc::close(fd);
            }
            for _ in 0..most {
                let child = libc::fork();
                if child == 0 {
                    libc::close(write_end);
                    libc::signal(libc::SIGTERM, libc::SIG_IGN);
                    loop {
                        libc::pause();
                    }
                }
                if child < 0 {
                    break;
                }
                // clock_gettime underneath: async-signal-safe.
                let ns = monotonic_ns();
                let mut record = [0u8; 12];
                record[..4].copy_from_slice(&child.to_ne_bytes());
                record[4..].copy_from_slice(&ns.to_ne_bytes());
                libc::write(write_end, record.as_ptr().cast(), record.len());
            }
            loop {
                libc::pause();
            }
        }
    }
    assert!(parent > 0, "fork: {}", std::io::Error::last_os_error());
    // SAFETY: closing this process's copy of the write end; the read end is owned below.
    unsafe { libc::close(write_end) };
    // SAFETY: a descriptor nobody else owns.
    let mut pipe = unsafe { std::fs::File::from_raw_fd(read_end) };
    let records = std::thread::spawn(move || {
        let mut data = Vec::new();
        // Ends when the parent is gone: its children closed their copies at birth.
        let _ = pipe.read_to_end(&mut data);
        data.chunks_exact(12)
            .map(|r| {
                let pid = libc::pid_t::from_ne_bytes(r[..4].try_into().unwrap_or_default());
                let ns = u64::from_ne_bytes(r[4..].try_into().unwrap_or_default());
                (pid, ns)
            })
            .collect()
    });
    (parent, records)
}

/// Reaps `pid`, a child or an orphan this subreaper adopted (zombies count in
/// `pid.available`).
pub fn reap(pid: libc::pid_t) {
    // SAFETY: waiting for a process of this run.
    unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
}

/// [`reap`], once `pid` exits within `within`; `false` when it is still running then
/// (a test then fails instead of waiting forever).
pub fn reap_within(pid: libc::pid_t, within: std::time::Duration) -> bool {
    let deadline = std::time::Instant::now() + within;
    loop {
        // SAFETY: waiting for a process of this run, without blocking.
        let reaped = unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
        if reaped != 0 {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
