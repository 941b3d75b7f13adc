//! Decoding ring-buffer records into [`KernelEvent`]s.
use monitor_common::{
    CgroupEvent, EventKind, ForkEvent, KswapdEvent, OomEvent, PATH_MAX, StallEvent, Stat, StatEvent,
};

use crate::engine::incident::Reclaim;

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
        /// Working-set growth of all cgroups counted by the kernel up to this record.
        growth_bytes: i64,
    },
    /// A cgroup was created.
    Mkdir {
        cgroup_id: u64,
        ts_ns: u64,
        path: String,
    },
    /// A cgroup was removed.
    Rmdir {
        cgroup_id: u64,
        ts_ns: u64,
        path: String,
    },
    /// A task spent at least the configured minimum in reclaim.
    Stall {
        reclaim: Reclaim,
        pid: u32,
        tid: u32,
        comm: String,
        /// Memory cgroup of the stalled task.
        cgroup_id: u64,
        /// CLOCK_MONOTONIC nanoseconds when reclaim began.
        start_ns: u64,
        duration_ns: u64,
        nr_reclaimed: u64,
    },
    /// kswapd of a NUMA node woke up (`awake`) or went to sleep.
    Kswapd {
        awake: bool,
        nid: i32,
        order: i32,
        ts_ns: u64,
    },
    /// The OOM killer chose a victim.
    OomKill {
        pid: u32,
        comm: String,
        /// Memory cgroup of the task that invoked the OOM killer.
        trigger_cgroup_id: u64,
        ts_ns: u64,
        anon_rss_kb: u64,
        file_rss_kb: u64,
        shmem_rss_kb: u64,
        oom_score_adj: i32,
    },
    /// Tasks were created up to the level the agent armed: `pid.available` may have reached
    /// a threshold (see `monitor_common::WakeSlot::ForkWakeAt`).
    Forks {
        /// Tasks created since the programs were attached.
        forks: i64,
        ts_ns: u64,
    },
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
                growth_bytes: ev.growth_bytes,
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
                KernelEvent::Mkdir {
                    cgroup_id,
                    ts_ns,
                    path,
                }
            } else {
                KernelEvent::Rmdir {
                    cgroup_id,
                    ts_ns,
                    path,
                }
            })
        }
        kind @ (EventKind::DirectStall | EventKind::MemcgStall) => {
            let ev: StallEvent = read(record)?;
            Ok(KernelEvent::Stall {
                reclaim: if kind == EventKind::DirectStall {
                    Reclaim::Direct
                } else {
                    Reclaim::Memcg
                },
                pid: ev.pid,
                tid: ev.tid,
                comm: c_string(&ev.comm),
                cgroup_id: ev.cgroup_id,
                start_ns: ev.start_ns,
                duration_ns: ev.duration_ns,
                nr_reclaimed: ev.nr_reclaimed,
            })
        }
        kind @ (EventKind::KswapdWake | EventKind::KswapdSleep) => {
            let ev: KswapdEvent = read(record)?;
            Ok(KernelEvent::Kswapd {
                awake: kind == EventKind::KswapdWake,
                nid: ev.nid,
                order: ev.order,
                ts_ns: ev.ts_ns,
            })
        }
        EventKind::OomVictim => {
            let ev: OomEvent = read(record)?;
            Ok(KernelEvent::OomKill {
                pid: ev.pid,
                comm: c_string(&ev.comm),
                trigger_cgroup_id: ev.trigger_cgroup_id,
                ts_ns: ev.ts_ns,
                anon_rss_kb: ev.anon_rss_kb,
                file_rss_kb: ev.file_rss_kb,
                shmem_rss_kb: ev.shmem_rss_kb,
                oom_score_adj: ev.oom_score_adj,
            })
        }
        EventKind::Forks => {
            let ev: ForkEvent = read(record)?;
            Ok(KernelEvent::Forks {
                forks: ev.forks,
                ts_ns: ev.ts_ns,
            })
        }
    }
}

/// The text before the first NUL of a kernel string buffer.
fn c_string(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
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
    use monitor_common::COMM_LEN;

    use super::*;

    fn bytes_of<T>(value: &T) -> Vec<u8> {
        // SAFETY: reading a plain-data value's bytes.
        unsafe {
            std::slice::from_raw_parts(std::ptr::from_ref::<T>(value).cast::<u8>(), size_of::<T>())
        }
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
            growth_bytes: 9 << 20,
        };
        assert_eq!(
            decode(&bytes_of(&ev)),
            Ok(KernelEvent::Stat {
                cgroup_id: 4242,
                stat: Stat::InactiveFile,
                ts_ns: 77,
                delta_bytes: -1 << 20,
                total_bytes: 3 << 20,
                growth_bytes: 9 << 20,
            })
        );
    }

    #[test]
    fn fork_record_round_trips_and_a_short_one_is_refused() {
        let ev = ForkEvent {
            kind: EventKind::Forks as u32,
            _pad: 0,
            forks: 31_337,
            ts_ns: 88,
        };
        let bytes = bytes_of(&ev);
        assert_eq!(
            decode(&bytes),
            Ok(KernelEvent::Forks {
                forks: 31_337,
                ts_ns: 88
            })
        );
        assert_eq!(decode(&bytes[..20]), Err(DecodeError::Short(20)));
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
            Ok(KernelEvent::Rmdir {
                cgroup_id: 9,
                ts_ns: 5,
                path: "/a/pod".into()
            })
        );
    }

    #[test]
    fn incident_records_decode_by_kind() {
        let mut comm = [0; COMM_LEN];
        comm[..5].copy_from_slice(b"alloc");
        let stall = StallEvent {
            kind: EventKind::MemcgStall as u32,
            pid: 10,
            tid: 11,
            _pad: 0,
            cgroup_id: 42,
            start_ns: 100,
            duration_ns: 5_000_000,
            nr_reclaimed: 32,
            comm,
        };
        let kswapd = KswapdEvent {
            kind: EventKind::KswapdSleep as u32,
            nid: 1,
            order: 0,
            _pad: 0,
            ts_ns: 9,
        };
        let oom = OomEvent {
            kind: EventKind::OomVictim as u32,
            pid: 10,
            trigger_cgroup_id: 42,
            ts_ns: 200,
            anon_rss_kb: 65536,
            file_rss_kb: 2,
            shmem_rss_kb: 3,
            oom_score_adj: -1000,
            _pad: 0,
            comm,
        };
        let cases: [(&str, Vec<u8>, KernelEvent); 3] = [
            (
                "memcg stall",
                bytes_of(&stall),
                KernelEvent::Stall {
                    reclaim: Reclaim::Memcg,
                    pid: 10,
                    tid: 11,
                    comm: "alloc".into(),
                    cgroup_id: 42,
                    start_ns: 100,
                    duration_ns: 5_000_000,
                    nr_reclaimed: 32,
                },
            ),
            (
                "kswapd sleep",
                bytes_of(&kswapd),
                KernelEvent::Kswapd {
                    awake: false,
                    nid: 1,
                    order: 0,
                    ts_ns: 9,
                },
            ),
            (
                "oom victim",
                bytes_of(&oom),
                KernelEvent::OomKill {
                    pid: 10,
                    comm: "alloc".into(),
                    trigger_cgroup_id: 42,
                    ts_ns: 200,
                    anon_rss_kb: 65536,
                    file_rss_kb: 2,
                    shmem_rss_kb: 3,
                    oom_score_adj: -1000,
                },
            ),
        ];
        for (name, record, expected) in cases {
            assert_eq!(decode(&record), Ok(expected), "{name}");
            assert_eq!(
                decode(&record[..record.len() - 1]),
                Err(DecodeError::Short(record.len() - 1)),
                "{name} truncated"
            );
        }
    }

    #[test]
    fn malformed_records_are_rejected() {
        assert_eq!(decode(&[1, 0]), Err(DecodeError::Short(2)));
        assert_eq!(decode(&[99, 0, 0, 0]), Err(DecodeError::UnknownKind(99)));
        assert_eq!(decode(&[1, 0, 0, 0, 0, 0]), Err(DecodeError::Short(6)));
        let bad_slot = StatEvent {
            kind: EventKind::Stat as u32,
            stat: 99,
            cgroup_id: 1,
            ts_ns: 1,
            delta_bytes: 0,
            total_bytes: 0,
            growth_bytes: 0,
        };
        assert_eq!(
            decode(&bytes_of(&bad_slot)),
            Err(DecodeError::UnknownStat(99))
        );
    }
}
