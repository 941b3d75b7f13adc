//! A process that allocates real memory on command, for the end-to-end tests.
//!
//! Reads commands from stdin, one per line, and answers each on stdout once done:
//! - `alloc MIB`: maps MIB MiB of anonymous memory and touches every page -> `allocated MIB`
//! - `shared MIB`: the same in a shared anonymous mapping (shmem, as a database's shared
//!   buffers), which only the process's exit frees: `process_mrelease` reaps private memory
//!   only -> `allocated MIB`
//! - `cache MIB PATH`: writes MIB MiB to the file PATH and syncs it, leaving that much clean
//!   page cache charged to the process's cgroup -> `cached MIB`
//! - `read PATH`: reads the file PATH through the page cache once (twice marks its pages
//!   active, which the kubelet's working set counts) -> `read`
//! - `hot PATH`: from now on reads PATH again and again in a thread: cache in use -> `hot`
//! - `free`: unmaps everything allocated so far -> `freed`
//! - `drain MS [LOG]`: handles SIGTERM as a server that drains does: it goes on with what it
//!   was doing (an `alloc` keeps allocating) and exits with status 0 MS milliseconds after the
//!   first SIGTERM; only SIGKILL ends it sooner. With LOG, each SIGTERM received appends a line
//!   `SIGTERM` to that file, so a test can count the waves -> `draining MS`
//! - `exit` or end of input: exits.
use std::{
    fs::{File, OpenOptions},
    io::{self, BufRead as _, Read as _, Write as _},
    os::fd::IntoRawFd as _,
    sync::atomic::{AtomicBool, AtomicI32, Ordering},
    time::Duration,
};

/// Set by the SIGTERM handler installed by `drain`.
static TERMINATED: AtomicBool = AtomicBool::new(false);
/// The file each SIGTERM is logged to (an open descriptor, or -1).
static TERM_LOG: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_sigterm(_: libc::c_int) {
    TERMINATED.store(true, Ordering::SeqCst);
    let fd = TERM_LOG.load(Ordering::SeqCst);
    if fd >= 0 {
        let line = b"SIGTERM\n";
        // SAFETY: write(2) is async-signal-safe; the buffer is valid for its length.
        unsafe { libc::write(fd, line.as_ptr().cast(), line.len()) };
    }
}

/// Handles SIGTERM from now on and exits `ms` milliseconds after the first; logs each to
/// `log` when given.
fn drain(ms: usize, log: Option<&str>) {
    if let Some(path) = log {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .expect("opening the SIGTERM log");
        TERM_LOG.store(file.into_raw_fd(), Ordering::SeqCst);
    }
    // SAFETY: the handler only stores to atomics and calls write(2), both async-signal-safe.
    unsafe { libc::signal(libc::SIGTERM, on_sigterm as *const () as libc::sighandler_t) };
    std::thread::spawn(move || {
        while !TERMINATED.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(ms as u64));
        // SAFETY: ends the process at once, as a drained server would.
        unsafe { libc::_exit(0) };
    });
}

fn main() {
    let page = page_size();
    let mut mappings: Vec<(*mut libc::c_void, usize)> = Vec::new();
    let mut out = io::stdout();
    for line in io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let mut words = line.split_whitespace();
        match (words.next(), words.next().map(str::parse::<usize>)) {
            (Some(kind @ ("alloc" | "shared")), Some(Ok(mib))) => {
                let len = mib << 20;
                let sharing = if kind == "shared" {
                    libc::MAP_SHARED
                } else {
                    libc::MAP_PRIVATE
                };
                // SAFETY: anonymous mapping, checked below.
                let addr = unsafe {
                    libc::mmap(
                        std::ptr::null_mut(),
                        len,
                        libc::PROT_READ | libc::PROT_WRITE,
                        sharing | libc::MAP_ANONYMOUS,
                        -1,
                        0,
                    )
                };
                assert_ne!(addr, libc::MAP_FAILED, "mmap of {mib} MiB failed");
                for offset in (0..len).step_by(page) {
                    // SAFETY: inside the mapping just created.
                    unsafe { addr.cast::<u8>().add(offset).write_volatile(1) };
                }
                mappings.push((addr, len));
                writeln!(out, "allocated {mib}").unwrap();
            }
            (Some("cache"), Some(Ok(mib))) => {
                let path = words.next().expect("cache MIB PATH");
                let mut file = File::create(path).expect("creating the cache file");
                let chunk = vec![1u8; 1 << 20];
                for _ in 0..mib {
                    file.write_all(&chunk).expect("writing the cache file");
                }
                // Clean pages: reclaim drops them without writeback.
                file.sync_all().expect("syncing the cache file");
                writeln!(out, "cached {mib}").unwrap();
            }
            (Some("read"), Some(_)) => {
                let path = line.split_whitespace().nth(1).expect("read PATH");
                read_through(path);
                writeln!(out, "read").unwrap();
            }
            (Some("hot"), Some(_)) => {
                // Its cache is its working set: read again and again, so reclaimed pages
                // fault straight back in.
                let path = line
                    .split_whitespace()
                    .nth(1)
                    .expect("hot PATH")
                    .to_string();
                std::thread::spawn(move || {
                    loop {
                        read_through(&path);
                    }
                });
                writeln!(out, "hot").unwrap();
            }
            (Some("drain"), Some(Ok(ms))) => {
                drain(ms, words.next());
                writeln!(out, "draining {ms}").unwrap();
            }
            (Some("free"), None) => {
                for (addr, len) in mappings.drain(..) {
                    // SAFETY: unmapping a mapping this process created.
                    unsafe { libc::munmap(addr, len) };
                }
                writeln!(out, "freed").unwrap();
            }
            (Some("exit"), None) => break,
            _ => writeln!(out, "error: unknown command {line:?}").unwrap(),
        }
        out.flush().unwrap();
    }
}

/// Reads the whole file through the page cache (a second read marks its pages active).
fn read_through(path: &str) {
    let mut file = File::open(path).expect("opening the cache file");
    let mut chunk = vec![0u8; 1 << 20];
    while file.read(&mut chunk).expect("reading the cache file") > 0 {}
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096)
}
