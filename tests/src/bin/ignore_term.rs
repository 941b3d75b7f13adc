//! A process that ignores SIGTERM, for the cgroup kill tests: only SIGKILL ends it.
//!
//! Prints `ready` once SIGTERM is ignored, then waits for signals forever.
use std::io::Write as _;

fn main() {
    // SAFETY: setting a signal disposition to SIG_IGN has no preconditions.
    unsafe { libc::signal(libc::SIGTERM, libc::SIG_IGN) };
    let mut out = std::io::stdout();
    writeln!(out, "ready").unwrap();
    out.flush().unwrap();
    loop {
        // SAFETY: pause has no preconditions; it returns only after a handled signal.
        unsafe { libc::pause() };
    }
}
