//! How long a forced victim's memory takes to come back (root): a 500 MiB victim in its own
//! cgroup is killed through a pidfd, with and without `process_mrelease` right after, and the
//! time from SIGKILL until the cgroup's memory usage is near zero is taken, trials alternating.
//!
//!     reap_time TRIALS
//!
//! Prints the load, then one JSON object per side with every trial and the median (ms).
use std::{
    fs,
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
    path::Path,
    time::{Duration, Instant},
};

use monitor::action::reap::process_mrelease;
use serde_json::json;
use tests::{Allocator, TestCgroup, set_memory_limit};

const VICTIM_MIB: usize = 500;
/// Usage at or below this counts as given back (page tables and the like may linger).
const BACK_AT_BYTES: u64 = 2 << 20;

fn usage(dir: &Path) -> u64 {
    let read = |file: &str| fs::read_to_string(dir.join(file)).ok();
    read("memory.usage_in_bytes")
        .or_else(|| read("memory.current"))
        .and_then(|t| t.trim().parse().ok())
        .expect("the cgroup's memory usage")
}

/// One trial: milliseconds from SIGKILL to the memory back.
fn trial(cgroup: &TestCgroup, reap: bool) -> f64 {
    let dir = cgroup.child("victim");
    set_memory_limit(&dir, (VICTIM_MIB as u64 + 64) << 20).expect("limiting the victim");
    let mut victim = Allocator::start_in(&dir);
    victim.alloc(VICTIM_MIB);
    // SAFETY: plain syscalls with integer arguments; results checked.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, victim.pid(), 0) };
    assert!(fd >= 0, "pidfd_open: {}", std::io::Error::last_os_error());
    // SAFETY: a new descriptor nobody else owns.
    let pidfd = unsafe { OwnedFd::from_raw_fd(i32::try_from(fd).unwrap()) };
    let start = Instant::now();
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
    assert_eq!(sent, 0, "SIGKILL: {}", std::io::Error::last_os_error());
    if reap && let Err(e) = process_mrelease(&pidfd) {
        eprintln!("process_mrelease: {e}");
    }
    while usage(&dir) > BACK_AT_BYTES {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "memory not back in 10 s"
        );
        std::hint::spin_loop();
    }
    let ms = start.elapsed().as_secs_f64() * 1e3;
    drop(victim);
    let _ = fs::remove_dir(&dir);
    ms
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let trials: usize = std::env::args()
        .nth(1)
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| {
            eprintln!("usage: reap_time TRIALS");
            std::process::exit(2);
        });
    let load = fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load {}", load.trim());
    let cgroup = TestCgroup::create("reap-time");
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for _ in 0..trials {
        with.push(trial(&cgroup, true));
        without.push(trial(&cgroup, false));
    }
    for (side, times) in [("process_mrelease", with), ("exit only", without)] {
        println!(
            "{}",
            json!({ "side": side, "median_ms": median(times.clone()), "trials_ms": times })
        );
    }
}
