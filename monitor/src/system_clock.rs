//! The system clocks the agent reads. Kernel event timestamps (`bpf_ktime_get_ns`) are
//! CLOCK_MONOTONIC; decisions run on CLOCK_BOOTTIME, which keeps counting through suspend and
//! is shared by every process until reboot, so remembered instants survive agent restarts.
use std::{
    io,
    time::{SystemTime, UNIX_EPOCH},
};

use crate::engine::instant::{Clock, MonoInstant};

fn clock_ns(clock: libc::clockid_t) -> io::Result<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    if unsafe { libc::clock_gettime(clock, &raw mut ts) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // Neither clock is ever negative.
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
    Ok(secs * 1_000_000_000 + nanos)
}

/// CLOCK_MONOTONIC in nanoseconds, the clock of kernel event timestamps.
pub fn monotonic_ns() -> u64 {
    // CLOCK_MONOTONIC cannot fail on Linux.
    clock_ns(libc::CLOCK_MONOTONIC).unwrap_or(0)
}

/// CPU time the calling thread has used, in nanoseconds (CLOCK_THREAD_CPUTIME_ID): what
/// a step cost, whatever the CPU limit or the other tasks made it wait.
pub fn thread_cpu_ns() -> u64 {
    // Cannot fail for the calling thread.
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID).unwrap_or(0)
}

/// CLOCK_BOOTTIME in milliseconds.
pub fn boot_time_ms() -> io::Result<u64> {
    Ok(clock_ns(libc::CLOCK_BOOTTIME)? / 1_000_000)
}

/// The wall clock in unix milliseconds; 0 if it is set before 1970.
pub fn unix_ms_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        })
}

/// The wall clock in unix nanoseconds; 0 if it is set before 1970.
pub fn unix_ns_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
        })
}

/// The wall-clock time of a CLOCK_MONOTONIC instant of the past (a kernel event's).
pub fn unix_ns_of_monotonic(monotonic: u64) -> u64 {
    unix_ns_now().saturating_sub(monotonic_ns().saturating_sub(monotonic))
}

/// The decision step's clock: CLOCK_BOOTTIME.
#[derive(Clone, Copy, Debug, Default)]
pub struct BootClock;

impl Clock for BootClock {
    fn now(&self) -> MonoInstant {
        MonoInstant::from_millis(boot_time_ms().unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_move_forward() {
        let (m1, b1) = (monotonic_ns(), BootClock.now());
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert!(monotonic_ns() >= m1 + 5_000_000);
        assert!(BootClock.now().saturating_since(b1) >= std::time::Duration::from_millis(5));
    }

    #[test]
    fn the_thread_s_cpu_clock_counts_work_not_sleep() {
        let before = thread_cpu_ns();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let slept = thread_cpu_ns() - before;
        assert!(slept < 5_000_000, "sleeping 20 ms took {slept} ns of CPU");
        // Work moves it, however long other tasks hold the CPU meanwhile.
        let (before, started) = (thread_cpu_ns(), monotonic_ns());
        let mut x = 0u64;
        while thread_cpu_ns() - before < 5_000_000 {
            x = std::hint::black_box(x.wrapping_add(1));
            assert!(
                monotonic_ns() - started < 10_000_000_000,
                "5 ms of work never counted"
            );
        }
    }
}
