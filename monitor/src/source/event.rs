//! Decoding ring-buffer records into [`KernelEvent`]s.
use monitor_common::{CgroupEvent, EventKind, PATH_MAX, Stat, StatEvent};

/// A record from the kernel programs, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KernelEvent {
    /// A cgroup's stat moved by at least the configured step.
    Stat {
        cgroup_id: u64,
        stat: Stat,
        /// CLOCK_MONOTONIC nanoseconds.
        ts_ns: u64,
        /// Bytes since the previous event for this cgroup and stat.
        delta_bytes: i64,
        /// Bytes accumulated since the programs were attached.
        total_bytes: i64,
    },
    /// A cgroup was created.
    Mkdir { cgroup_id: u64, ts_ns: u64, path: String },
    /// A cgroup was removed.
    Rmdir { cgroup_id: u64, ts_ns: u64, path: String },
}

/// Why a record could not be decoded; a mismatch between kernel object and agent.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("ring-buffer record of {0} bytes is too short")]
    Short(usize),
    #[error("ring-buffer record has unknown kind {0}")]
    UnknownKind(u32),
    #[error("stat event names unknown stat slot {0}")]
    UnknownStat(u32),
}

/// Decodes one record.
pub fn decode(record: &[u8]) -> Result<KernelEvent, DecodeError> {
    let kind_bytes: [u8; 4] = record
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .ok_or(DecodeError::Short(record.len()))?;
    let raw_kind = u32::from_ne_bytes(kind_bytes);
    match EventKind::from_raw(raw_kind).ok_or(DecodeError::UnknownKind(raw_kind))? {
        EventKind::Stat => {
            let ev: StatEvent = read(record)?;
            Ok(KernelEvent::Stat {
                cgroup_id: ev.cgroup_id,
                stat: Stat::from_slot(ev.stat).ok_or(DecodeError::UnknownStat(ev.stat))?,
                ts_ns: ev.ts_ns,
                delta_bytes: ev.delta_bytes,
                total_bytes: ev.total_bytes,
            })
        }
        kind @ (EventKind::Mkdir | EventKind::Rmdir) => {
            let ev: CgroupEvent = read(record)?;
            let len = (ev.path_len as usize).min(PATH_MAX);
            let path = String::from_utf8_lossy(&ev.path[..len])
                .trim_end_matches('\0')
                .to_string();
            let (cgroup_id, ts_ns) = (ev.cgroup_id, ev.ts_ns);
            Ok(if kind == EventKind::Mkdir {
                KernelEvent::Mkdir { cgroup_id, ts_ns, path }
            } else {
                KernelEvent::Rmdir { cgroup_id, ts_ns, path }
            })
        }
    }
}

/// Copies a plain-data record out of possibly unaligned ring-buffer bytes.
fn read<T: aya::Pod>(record: &[u8]) -> Result<T, DecodeError> {
    if record.len() < size_of::<T>() {
        return Err(DecodeError::Short(record.len()));
    }
    // SAFETY: the length is checked and T is plain data valid for any bit pattern.
    Ok(unsafe { std::ptr::read_unaligned(record.as_ptr().cast::<T>()) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_of<T>(value: &T) -> Vec<u8> {
        // SAFETY: reading a plain-data value's bytes.
        unsafe { std::slice::from_raw_parts((value as *const T).cast::<u8>(), size_of::<T>()) }
            .to_vec()
    }

    #[test]
    fn stat_record_round_trips() {
        let ev = StatEvent {
            kind: EventKind::Stat as u32,
            stat: Stat::InactiveFile as u32,
            cgroup_id: 4242,
            ts_ns: 77,
            delta_bytes: -1 << 20,
            total_bytes: 3 << 20,
        };
        assert_eq!(
            decode(&bytes_of(&ev)),
            Ok(KernelEvent::Stat {
                cgroup_id: 4242,
                stat: Stat::InactiveFile,
                ts_ns: 77,
                delta_bytes: -1 << 20,
                total_bytes: 3 << 20,
            })
        );
    }

    #[test]
    fn cgroup_record_carries_the_path() {
        let mut ev = CgroupEvent {
            kind: EventKind::Rmdir as u32,
            level: 2,
            cgroup_id: 9,
            ts_ns: 5,
            hierarchy_id: 4,
            path_len: 6,
            path: [0; PATH_MAX],
        };
        ev.path[..7].copy_from_slice(b"/a/pod\0");
        assert_eq!(
            decode(&bytes_of(&ev)),
            Ok(KernelEvent::Rmdir { cgroup_id: 9, ts_ns: 5, path: "/a/pod".into() })
        );
    }

    #[test]
    fn malformed_records_are_rejected() {
        assert_eq!(decode(&[1, 0]), Err(DecodeError::Short(2)));
        assert_eq!(decode(&[9, 0, 0, 0]), Err(DecodeError::UnknownKind(9)));
        assert_eq!(decode(&[1, 0, 0, 0, 0, 0]), Err(DecodeError::Short(6)));
        let bad_slot = StatEvent {
            kind: EventKind::Stat as u32,
            stat: 99,
            cgroup_id: 1,
            ts_ns: 1,
            delta_bytes: 0,
            total_bytes: 0,
        };
        assert_eq!(decode(&bytes_of(&bad_slot)), Err(DecodeError::UnknownStat(99)));
    }
}
