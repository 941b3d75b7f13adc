//! A timed resync's paced read: its pods read a chunk at a time, with pauses between, and the
//! kernel map's sweep walked after them. Which pods each resync reads, the chunks' sizes and
//! the pauses are the engine's rules ([`crate::engine::resync`]); this holds the read under
//! way.
use crate::{
    cgroupfs::paths::CgroupWalk,
    engine::{
        eviction_machine::ReadScope,
        ids::CgroupRel,
        pod_facts::PodRef,
        resync::{CHUNK_PODS, ResyncCadence},
    },
};

/// The timed resyncs: which pods each reads, and the one whose pods are being read.
#[derive(Debug, Default)]
pub(crate) struct ResyncSchedule {
    /// Each resync's scope and when the kernel's map is swept.
    pub(crate) cadence: ResyncCadence,
    /// The timed resync whose pods are being read, chunk by chunk.
    pub(crate) paced: Option<PacedRead>,
}

/// A timed resync's pods, read [`CHUNK_PODS`] at a time with pauses between (see
/// [`crate::engine::resync::pause_after`]).
#[derive(Debug)]
pub(crate) struct PacedRead {
    pods: Vec<(PodRef, CgroupRel)>,
    next: usize,
    /// When the next chunk is read.
    pub(crate) due: tokio::time::Instant,
    pub(crate) scope: ReadScope,
    /// The pods whose tasks the kernel saw change, taken before the read: their processes
    /// are counted at its end.
    pub(crate) marked: Option<Vec<(PodRef, CgroupRel)>>,
    /// Every few resyncs, the kernel map's sweep, walked after the pods are read.
    pub(crate) sweep: Option<MapSweep>,
}

/// A sweep of the kernel's per-cgroup map: the cgroups it held when the sweep began, and the
/// walk of the hierarchy that tells which of them are gone.
#[derive(Debug)]
pub(crate) struct MapSweep {
    pub(crate) tracked: Vec<u64>,
    pub(crate) walk: CgroupWalk,
}

impl PacedRead {
    pub(crate) fn new(
        pods: Vec<(PodRef, CgroupRel)>,
        scope: ReadScope,
        marked: Option<Vec<(PodRef, CgroupRel)>>,
    ) -> Self {
        Self {
            pods,
            next: 0,
            due: tokio::time::Instant::now(),
            scope,
            marked,
            sweep: None,
        }
    }

    /// The next chunk's pods (empty once all are read).
    pub(crate) fn next_chunk(&mut self) -> &[(PodRef, CgroupRel)] {
        let start = self.next;
        self.next = (start + CHUNK_PODS).min(self.pods.len());
        &self.pods[start..self.next]
    }

    /// Whether every pod is read.
    pub(crate) fn pods_read(&self) -> bool {
        self.next >= self.pods.len()
    }

    /// Every pod was read by another read: only the sweep, if any, is left to do.
    fn skip_pods(&mut self) {
        self.next = self.pods.len();
        self.marked = None;
    }
}

impl ResyncSchedule {
    /// The scope of the read about to happen (see [`ResyncCadence::take_scope`]).
    pub(crate) fn take_scope(&mut self, classify: bool) -> ReadScope {
        self.cadence.take_scope(classify)
    }

    /// Another read took every pod: the paced read under way reads none of them again, but
    /// its sweep, if it has one, goes on.
    pub(crate) fn pods_read_elsewhere(&mut self) {
        if let Some(paced) = &mut self.paced {
            paced.skip_pods();
            if paced.sweep.is_none() {
                self.paced = None;
            }
        }
    }

    /// When the paced read under way reads its next chunk.
    pub(crate) fn paced_due(&self) -> Option<tokio::time::Instant> {
        self.paced.as_ref().map(|p| p.due)
    }

    /// Some changes were not counted by the kernel: the next timed resync reads every pod.
    pub(crate) fn changes_uncounted(&mut self) {
        self.cadence.changes_uncounted();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_paced_read_goes_chunk_by_chunk() {
        let pods: Vec<(PodRef, CgroupRel)> = (0..=2 * CHUNK_PODS)
            .map(|i| {
                let rel = CgroupRel::new(&format!("/kubepods/pod{i}")).unwrap();
                let pod = PodRef {
                    namespace: "default".into(),
                    name: format!("p{i}"),
                    uid: format!("p{i}"),
                };
                (pod, rel)
            })
            .collect();
        let mut read = PacedRead::new(pods, ReadScope::All, None);
        let sizes: Vec<usize> =
            std::iter::from_fn(|| (!read.pods_read()).then(|| read.next_chunk().len())).collect();
        assert_eq!(sizes, [CHUNK_PODS, CHUNK_PODS, 1]);
        assert!(read.next_chunk().is_empty(), "nothing after the end");
    }
}
