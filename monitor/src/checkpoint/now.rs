//! Reads the clocks the checkpointed timers are carried across a restart with
//! (`engine::checkpoint::decision_state`).
use std::{io, sync::OnceLock};

use crate::{
    engine::checkpoint::Now,
    system_clock::{boot_time_ms, unix_ms_now},
};

const BOOT_ID_PATH: &str = "/proc/sys/kernel/random/boot_id";

/// Reads the wall clock, the boot id and the boot-time clock.
pub fn read_now() -> io::Result<Now> {
    Ok(Now {
        unix_ms: unix_ms_now(),
        boot_id: boot_id()?,
        boot_ms: boot_time_ms()?,
    })
}

/// The boot id, read once: it cannot change while this process lives.
fn boot_id() -> io::Result<String> {
    static BOOT_ID: OnceLock<String> = OnceLock::new();
    if let Some(id) = BOOT_ID.get() {
        return Ok(id.clone());
    }
    let id = std::fs::read_to_string(BOOT_ID_PATH)?.trim().to_owned();
    Ok(BOOT_ID.get_or_init(|| id).clone())
}

#[cfg(test)]
mod tests {
    use super::read_now;

    #[test]
    fn boot_clock_is_monotonic_and_boot_id_stable() {
        let first = read_now().unwrap();
        let second = read_now().unwrap();
        assert!(second.boot_ms >= first.boot_ms);
        assert_eq!(first.boot_id, second.boot_id);
        assert_eq!(first.boot_id.len(), 36, "a UUID: {:?}", first.boot_id);
    }
}
