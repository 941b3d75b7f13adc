//! Reads the clocks the continuity helpers need.
use std::io;

use crate::{
    clock::{boot_time_ms, unix_ms_now},
    engine::checkpoint::Now,
};

const BOOT_ID_PATH: &str = "/proc/sys/kernel/random/boot_id";

/// Reads the wall clock, the boot id and the boot-time clock.
pub fn read_now() -> io::Result<Now> {
    Ok(Now {
        unix_ms: unix_ms_now(),
        boot_id: std::fs::read_to_string(BOOT_ID_PATH)?.trim().to_owned(),
        boot_ms: boot_time_ms()?,
    })
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
