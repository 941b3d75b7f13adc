//! Opt-in real-time priority for the agent's event thread (`--realtime-priority N`).
//!
//! On a node whose CPUs are busy, a record from the kernel can wait for the event thread to
//! be scheduled behind ordinary tasks; SCHED_FIFO lets that thread run as soon as it is woken.
//! Only the thread that runs the event loop gets it: `SCHED_RESET_ON_FORK` keeps every thread
//! and process it starts later at the normal policy. Off by default, because a real-time
//! thread that spins would starve the CPU it runs on (the kernel's RT throttling,
//! `kernel.sched_rt_runtime_us`, still leaves other tasks 5 % by default).
use std::io;

/// Why the event thread could not be made real-time.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RealtimeError {
    /// The kernel refused: no CAP_SYS_NICE and an RLIMIT_RTPRIO below the priority, or a
    /// cgroup v1 cpu controller giving the agent's cgroup no real-time runtime.
    #[error(
        "SCHED_FIFO priority {priority} refused: it needs CAP_SYS_NICE or an \
         RLIMIT_RTPRIO of at least {priority} (`ulimit -r`), and under a cgroup v1 cpu \
         controller a nonzero cpu.rt_runtime_us for the agent's cgroup; or run without \
         --realtime-priority"
    )]
    NotPermitted { priority: u8, source: io::Error },
    /// Any other failure of sched_setscheduler.
    #[error("setting SCHED_FIFO priority {priority}")]
    Other { priority: u8, source: io::Error },
}

/// Parses `--realtime-priority`: a SCHED_FIFO priority, 1 (lowest) to 99.
pub(crate) fn parse_realtime_priority(text: &str) -> Result<u8, String> {
    let value: u8 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a SCHED_FIFO priority (1 to 99)"))?;
    if !(1..=99).contains(&value) {
        return Err(format!(
            "{value} is outside 1..=99 (1 is the lowest real-time priority, 99 the highest)"
        ));
    }
    Ok(value)
}

/// Puts the calling thread under SCHED_FIFO at `priority`; threads it creates afterwards
/// start at the normal policy.
pub(crate) fn make_current_thread_realtime(priority: u8) -> Result<(), RealtimeError> {
    // musl's sched_param has more fields than glibc's (sporadic-server ones the kernel
    // ignores), so it is zeroed rather than written out field by field.
    // SAFETY: sched_param is plain integers, for which all zeroes is a valid value.
    let mut param: libc::sched_param = unsafe { std::mem::zeroed() };
    param.sched_priority = i32::from(priority);
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param for the call.
    let rc = unsafe {
        libc::sched_setscheduler(
            0,
            libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK,
            &raw const param,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    Err(classify(priority, io::Error::last_os_error()))
}

fn classify(priority: u8, source: io::Error) -> RealtimeError {
    if source.raw_os_error() == Some(libc::EPERM) {
        RealtimeError::NotPermitted { priority, source }
    } else {
        RealtimeError::Other { priority, source }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priorities_parse_within_the_fifo_range() {
        let cases = [
            ("lowest", "1", Ok(1)),
            ("highest", "99", Ok(99)),
            ("spaces", " 10 ", Ok(10)),
            ("zero is not real-time", "0", Err("outside 1..=99")),
            ("above the range", "100", Err("outside 1..=99")),
            ("not a number", "high", Err("not a SCHED_FIFO priority")),
            ("negative", "-5", Err("not a SCHED_FIFO priority")),
        ];
        for (name, text, want) in cases {
            match (parse_realtime_priority(text), want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{name}"),
                (Err(got), Err(want)) => assert!(got.contains(want), "{name}: {got}"),
                (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn a_refusal_says_what_is_needed() {
        let err = classify(10, io::Error::from_raw_os_error(libc::EPERM));
        assert!(matches!(err, RealtimeError::NotPermitted { .. }));
        let text = err.to_string();
        assert!(text.contains("CAP_SYS_NICE"), "{text}");
        assert!(text.contains("RLIMIT_RTPRIO of at least 10"), "{text}");
        let other = classify(10, io::Error::from_raw_os_error(libc::EINVAL));
        assert!(matches!(other, RealtimeError::Other { .. }));
    }

    /// On a thread of its own, which ends with the test: the policy changes for that thread
    /// only, and a thread it starts is back at the normal policy.
    #[test]
    fn the_calling_thread_alone_becomes_fifo() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            test_skip::cannot_run(test_skip::Reason::Root, "SCHED_FIFO needs CAP_SYS_NICE");
            return;
        }
        let (own, child) = std::thread::spawn(|| {
            make_current_thread_realtime(5).expect("root may use SCHED_FIFO");
            // SAFETY: pid 0 is the calling thread.
            let own = unsafe { libc::sched_getscheduler(0) };
            let child = std::thread::spawn(|| unsafe { libc::sched_getscheduler(0) })
                .join()
                .unwrap();
            (own, child)
        })
        .join()
        .unwrap();
        assert_eq!(own & !libc::SCHED_RESET_ON_FORK, libc::SCHED_FIFO);
        assert_eq!(child, libc::SCHED_OTHER);
        // SAFETY: as above.
        assert_eq!(unsafe { libc::sched_getscheduler(0) }, libc::SCHED_OTHER);
    }
}
