//! Reading the ring buffer: waiting for records through tokio's `AsyncFd`, draining what
//! waits without a wake-up, and the growth level at which stat records wake the reader.
use std::io;

use aya::maps::{Array, MapData, RingBuf};
use monitor_common::WakeSlot;

use super::{KernelSource, missing_map};
use crate::source::event::{DecodeError, KernelEvent, decode};

impl KernelSource {
    /// Waits until the kernel has records, then appends all available ones to `out`.
    /// Records that fail to decode are returned as errors in place, so nothing is dropped
    /// silently.
    pub async fn next_batch(
        &mut self,
        out: &mut Vec<Result<KernelEvent, DecodeError>>,
    ) -> io::Result<()> {
        loop {
            let mut guard = self.ring.readable_mut().await?;
            let read = Self::drain(
                guard.get_inner_mut(),
                &mut self.growth_seen,
                &mut self.undecodable,
                out,
                usize::MAX,
            );
            guard.clear_ready();
            if read > 0 {
                return Ok(());
            }
        }
    }

    /// Appends the records waiting in the ring without waiting for a wake-up (records sent
    /// below the wake-up level wait there until read); returns how many.
    pub fn read_pending(&mut self, out: &mut Vec<Result<KernelEvent, DecodeError>>) -> usize {
        Self::drain(
            self.ring.get_mut(),
            &mut self.growth_seen,
            &mut self.undecodable,
            out,
            usize::MAX,
        )
    }

    /// Moves the records waiting in the ring to `out` while `out` holds fewer than `limit`
    /// and has room or can get it, so a long cgroupfs read does not leave the ring to fill;
    /// returns how many. Without memory to grow `out`, the rest stay in the ring.
    pub fn hold_pending(
        &mut self,
        out: &mut Vec<Result<KernelEvent, DecodeError>>,
        limit: usize,
    ) -> usize {
        let before = out.len();
        while out.len() < limit {
            if out.len() == out.capacity() && out.try_reserve(out.len().max(1024)).is_err() {
                break;
            }
            let read = Self::drain(
                self.ring.get_mut(),
                &mut self.growth_seen,
                &mut self.undecodable,
                out,
                out.capacity().min(limit),
            );
            if read == 0 {
                break;
            }
        }
        out.len() - before
    }

    /// Decodes records into `out` until the ring is empty or `out` holds `limit`.
    fn drain(
        ring: &mut RingBuf<MapData>,
        growth_seen: &mut i64,
        undecodable: &mut u64,
        out: &mut Vec<Result<KernelEvent, DecodeError>>,
        limit: usize,
    ) -> usize {
        let before = out.len();
        while out.len() < limit
            && let Some(record) = ring.next()
        {
            let event = decode(&record);
            match event {
                Ok(KernelEvent::Stat { growth_bytes, .. }) => {
                    *growth_seen = (*growth_seen).max(growth_bytes);
                }
                Err(_) => *undecodable += 1,
                Ok(_) => {}
            }
            out.push(event);
        }
        out.len() - before
    }

    /// Lets stat records wake the reader only once working sets may have grown by `headroom`
    /// bytes beyond what the records read so far carried (`None`: never for that reason;
    /// the caller reads on its own timer). Returns true when the level was lowered to growth
    /// the kernel has already counted, whose records sent no wake-up: read the ring now.
    pub fn wake_after_growth(
        &mut self,
        headroom: Option<u64>,
    ) -> Result<bool, aya::maps::MapError> {
        let wake_at = match headroom {
            // At least 1: 0 would mean "every record wakes", which is the safe reading anyway.
            Some(bytes) => self
                .growth_seen
                .saturating_add(i64::try_from(bytes).unwrap_or(i64::MAX))
                .max(1),
            None => i64::MAX,
        };
        let previous = self.wake_at.replace(wake_at);
        if previous == Some(wake_at) {
            return Ok(false);
        }
        let mut wake =
            Array::<_, i64>::try_from(self.ebpf.map_mut("WAKE").ok_or_else(missing_map)?)?;
        wake.set(WakeSlot::WakeAt as u32, wake_at, 0)?;
        // Records at or above the previous level were sent with a wake-up; only a lower level
        // can leave some that reached it waiting.
        let lowered = previous.is_some_and(|p| wake_at < p);
        Ok(lowered && wake.get(&(WakeSlot::Growth as u32), 0)? >= wake_at)
    }

    /// Arms the fork counter: one record, with a wake-up, once `tasks` more tasks have been
    /// created from now (`None`: disarmed). Returns true when that many were created between
    /// reading the count and arming (a fork bomb outruns a syscall): read `pid.available` now,
    /// for the record will not come.
    pub fn wake_after_forks(&mut self, tasks: Option<u64>) -> Result<bool, aya::maps::MapError> {
        let mut wake =
            Array::<_, i64>::try_from(self.ebpf.map_mut("WAKE").ok_or_else(missing_map)?)?;
        let Some(tasks) = tasks else {
            wake.set(WakeSlot::ForkWakeAt as u32, 0, 0)?;
            return Ok(false);
        };
        let forks = wake.get(&(WakeSlot::Forks as u32), 0)?;
        // At least 1: 0 means disarmed.
        let wake_at = forks
            .saturating_add(i64::try_from(tasks).unwrap_or(i64::MAX))
            .max(1);
        wake.set(WakeSlot::ForkWakeAt as u32, wake_at, 0)?;
        Ok(wake.get(&(WakeSlot::Forks as u32), 0)? >= wake_at)
    }
}
