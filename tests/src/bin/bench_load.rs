//! Load generator for `cargo xtask bench`: allocates real memory in the cgroup it runs in and
//! reports CLOCK_MONOTONIC at the moments that matter.
//!
//! `bench_load step` reads commands from stdin, one per line, and answers each on stdout:
//! - `alloc BYTES`: maps BYTES of anonymous memory and touches every page (kept) -> `ok`
//! - `cross BYTES AT`: maps BYTES and touches every page in order, reading CLOCK_MONOTONIC
//!   right after touching the page at byte offset AT (the page that crosses the threshold) ->
//!   `crossed <ns at AT> <ns at the end> <ns per page>`
//! - `race BYTES AT`: as `cross`, but answers `crossed <ns at AT>` as soon as the page at AT
//!   is touched, then `done <ns at the end>` once every page is: a hog the agent kills while
//!   it still allocates has told when it crossed (the `starved` bench)
//! - `free last` / `free all`: unmaps the newest mapping / every mapping -> `freed`
//! - `exit` or end of input: exits.
//!
//! `bench_load churn MIB RATE CGROUP_DIR...` moves itself through the cgroups in turn; in each
//! it maps MIB MiB, touches it and unmaps it, RATE times per second in total, until killed.
//!
//! `bench_load faults MIB ROUNDS` maps MIB MiB (small pages only), touches every page and
//! unmaps it, ROUNDS times, and prints `faults <pages> <CPU ns per page> <wall ns per page>`.
//! The CPU time is this thread's own (the faults are handled in its context): time spent
//! waiting for a CPU that other work holds is not counted, so the figure moves less with load.
//!
//! `bench_load heap MIB` grows a heap of MIB MiB in 1 MiB blocks, writing every byte, as a
//! program building its data does, and exits.
use std::{
    io::{self, BufRead as _, Write as _},
    time::{Duration, Instant},
};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("step") => step(),
        Some("churn") if args.len() >= 4 => {
            let mib: usize = args[1].parse().expect("MIB");
            let rate: f64 = args[2].parse().expect("RATE");
            churn(mib, rate, &args[3..]);
        }
        Some("faults") if args.len() == 3 => {
            let mib: usize = args[1].parse().expect("MIB");
            let rounds: usize = args[2].parse().expect("ROUNDS");
            faults(mib, rounds);
        }
        Some("heap") if args.len() == 2 => heap(args[1].parse().expect("MIB")),
        _ => {
            eprintln!(
                "usage: bench_load step | churn MIB RATE CGROUP_DIR... | faults MIB ROUNDS | heap MIB"
            );
            std::process::exit(2);
        }
    }
}

fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out pointer; both clocks used here always exist.
    unsafe { libc::clock_gettime(clock, &raw mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096)
}

/// An anonymous private mapping of `len` bytes (not yet touched).
fn map(len: usize) -> *mut u8 {
    // SAFETY: anonymous private mapping, checked below.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(addr, libc::MAP_FAILED, "mmap of {len} bytes failed");
    addr.cast()
}

fn unmap(addr: *mut u8, len: usize) {
    // SAFETY: unmapping a mapping this process created.
    unsafe { libc::munmap(addr.cast(), len) };
}

/// Touches the pages of `[from, to)` in order.
fn touch(addr: *mut u8, from: usize, to: usize, page: usize) {
    for offset in (from..to).step_by(page) {
        // SAFETY: inside a mapping of at least `to` bytes.
        unsafe { addr.add(offset).write_volatile(1) };
    }
}

fn step() {
    let page = page_size();
    let mut mappings: Vec<(*mut u8, usize)> = Vec::new();
    let mut out = io::stdout();
    for line in io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let words: Vec<&str> = line.split_whitespace().collect();
        let bytes = |i: usize| words.get(i).and_then(|w| w.parse::<usize>().ok());
        let answer = match (words.first().copied(), bytes(1), bytes(2)) {
            (Some("alloc"), Some(len), None) => {
                let len = len.next_multiple_of(page).max(page);
                let addr = map(len);
                touch(addr, 0, len, page);
                mappings.push((addr, len));
                "ok".to_string()
            }
            (Some("cross"), Some(len), Some(at)) => {
                let len = len.next_multiple_of(page).max(page);
                let at = (at / page * page).min(len - page);
                let addr = map(len);
                let start = monotonic_ns();
                touch(addr, 0, at + page, page);
                let crossed = monotonic_ns();
                touch(addr, at + page, len, page);
                let end = monotonic_ns();
                mappings.push((addr, len));
                let per_page = (end - start) / (len / page) as u64;
                format!("crossed {crossed} {end} {per_page}")
            }
            (Some("race"), Some(len), Some(at)) => {
                let len = len.next_multiple_of(page).max(page);
                let at = (at / page * page).min(len - page);
                let addr = map(len);
                mappings.push((addr, len));
                touch(addr, 0, at + page, page);
                writeln!(out, "crossed {}", monotonic_ns()).unwrap();
                out.flush().unwrap();
                touch(addr, at + page, len, page);
                format!("done {}", monotonic_ns())
            }
            (Some("free"), None, None) if words.get(1) == Some(&"last") => {
                if let Some((addr, len)) = mappings.pop() {
                    unmap(addr, len);
                }
                "freed".to_string()
            }
            (Some("free"), None, None) if words.get(1) == Some(&"all") => {
                for (addr, len) in mappings.drain(..) {
                    unmap(addr, len);
                }
                "freed".to_string()
            }
            (Some("exit"), None, None) => break,
            _ => format!("error: unknown command {line:?}"),
        };
        writeln!(out, "{answer}").unwrap();
        out.flush().unwrap();
    }
}

fn churn(mib: usize, rate: f64, cgroups: &[String]) {
    let page = page_size();
    let len = mib << 20;
    let period = Duration::from_secs_f64(1.0 / rate.max(0.001));
    let mut next = Instant::now();
    for dir in cgroups.iter().cycle() {
        // Charges follow the process: pages touched now belong to this cgroup, and are
        // uncharged from it when unmapped.
        if std::fs::write(format!("{dir}/cgroup.procs"), "0").is_err() {
            continue;
        }
        let addr = map(len);
        touch(addr, 0, len, page);
        unmap(addr, len);
        next += period;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else if now - next > Duration::from_secs(1) {
            next = now; // fell behind: do not try to catch up in a burst
        }
    }
}

fn heap(mib: usize) {
    let blocks: Vec<Vec<u8>> = (0..mib).map(|i| vec![(i as u8) | 1; 1 << 20]).collect();
    std::hint::black_box(&blocks);
}

fn faults(mib: usize, rounds: usize) {
    let page = page_size();
    let len = mib << 20;
    let start = monotonic_ns();
    let cpu_start = clock_ns(libc::CLOCK_THREAD_CPUTIME_ID);
    for _ in 0..rounds {
        let addr = map(len);
        // One fault per page whatever the THP setting: a huge page would take the place of
        // 512 faults (and of their memcg stat updates) on kernels that enable THP always.
        // SAFETY: advice on a mapping this process just created; failure only leaves THP on.
        unsafe { libc::madvise(addr.cast(), len, libc::MADV_NOHUGEPAGE) };
        touch(addr, 0, len, page);
        unmap(addr, len);
    }
    let cpu = clock_ns(libc::CLOCK_THREAD_CPUTIME_ID) - cpu_start;
    let elapsed = monotonic_ns() - start;
    let pages = (len / page * rounds) as u64;
    println!(
        "faults {pages} {:.1} {:.1}",
        cpu as f64 / pages as f64,
        elapsed as f64 / pages as f64
    );
}
