//! The timed resync over the same fakes: the node read at once, the pods a chunk at a time
//! with the loop's other inputs between, a crossing decided on between two chunks, and every
//! few resyncs the kernel map's sweep walked after the pods.
use super::*;
use crate::{engine::resync::CHUNK_PODS, source::event::KernelEvent, system_clock::monotonic_ns};

/// `hog` and `fillers` pods that stay within their requests.
fn pods(fillers: usize) -> Vec<(String, i64, u64)> {
    std::iter::once(("hog".to_string(), 100, 1100))
        .chain((0..fillers).map(|i| (format!("f{i}"), 400, 10)))
        .collect()
}

/// The stat programs stay attached: far from every threshold the default detaches them, and
/// a resync then reads every pod at once.
fn scene_of(pods: &[(String, i64, u64)], kernel: FakeKernel) -> Scene {
    let pods: Vec<(&str, i64, u64)> = pods.iter().map(|(n, r, w)| (n.as_str(), *r, *w)).collect();
    scene_with(
        Mode::Acting(|| ActionOutcome::Failed("scripted".into())),
        Some(kernel),
        &["--attach-within", "always"],
        &pods,
        4000,
    )
}

impl Scene {
    fn pod_reads(&self) -> usize {
        self.machine.0.borrow().pod_reads
    }

    /// The paced read's next chunk, as the loop takes it when due.
    fn chunk(&mut self) {
        assert_eq!(self.input(Input::ResyncChunk), Next::Go);
    }
}

#[tokio::test]
async fn a_crossing_between_two_chunks_of_a_resync_is_decided_on_before_the_read_goes_on() {
    let all = pods(3 * CHUNK_PODS);
    let mut s = scene_of(&all, FakeKernel::default());
    s.agent.evaluate(None);
    assert!(s.asked().is_empty(), "3.6 GiB available");
    let before = s.pod_reads();
    // Some changes went uncounted: this resync reads every pod.
    s.agent.resync.changes_uncounted();
    s.poll();
    assert_eq!(
        s.pod_reads(),
        before,
        "the node is read at once, no pod yet"
    );
    assert!(s.agent.resync.paced.is_some());
    s.chunk();
    assert_eq!(s.pod_reads(), before + CHUNK_PODS, "one chunk a turn");
    let due = s.agent.resync.paced_due().expect("more to read");
    assert!(
        due > tokio::time::Instant::now(),
        "the next chunk after a pause"
    );
    // The hog grows by 3.8 GiB: its record meets the threshold (392 MiB available).
    s.agent.core.classify(77, "/kubepods/burstable/poduid-hog");
    let mut batch: Batch = vec![Ok(KernelEvent::Stat {
        cgroup_id: 77,
        stat: monitor_common::Stat::Anon,
        ts_ns: monotonic_ns(),
        delta_bytes: 3800 * MI as i64,
        total_bytes: 3800 * MI as i64,
        growth_bytes: 3800 * MI as i64,
    })];
    assert_eq!(s.agent.handle(Input::Records, &mut batch), Next::Go);
    assert_eq!(s.asked(), ["hog"], "decided at once");
    assert_eq!(
        s.pod_reads(),
        before + CHUNK_PODS,
        "no more of the read before the decision"
    );
    // The read goes on where it was, to its end.
    let mut turns = 0;
    while s.agent.resync.paced.is_some() {
        s.chunk();
        turns += 1;
    }
    assert_eq!(turns, 3, "the other {} pods", all.len() - CHUNK_PODS);
    assert_eq!(s.pod_reads(), before + all.len());
    assert_eq!(s.asked(), ["hog"], "one eviction in flight");
}

#[tokio::test]
async fn a_resync_due_while_the_last_one_reads_is_left_out_and_a_full_read_ends_the_pacing() {
    let all = pods(2 * CHUNK_PODS);
    let mut s = scene_of(&all, FakeKernel::default());
    s.agent.resync.changes_uncounted();
    s.poll();
    s.chunk();
    let before = s.pod_reads();
    s.poll();
    assert_eq!(
        s.pod_reads(),
        before,
        "left out: nothing read, the read goes on"
    );
    // Every pod read at once (a rescan after lost records, new pods): the paced read ends.
    s.agent.read_cgroupfs(true);
    assert_eq!(s.pod_reads(), before + all.len());
    assert!(s.agent.resync.paced.is_none(), "nothing left to read");
}

#[tokio::test]
async fn every_sixth_resync_walks_the_hierarchy_for_the_map_sweep_after_the_pods() {
    let kernel = FakeKernel::default();
    let asked = kernel.asked.clone();
    let all = pods(CHUNK_PODS);
    let mut s = scene_of(&all, kernel);
    for resync in 1..=6 {
        s.agent.resync.changes_uncounted();
        s.poll();
        let sweeping = s
            .agent
            .resync
            .paced
            .as_ref()
            .is_some_and(|p| p.sweep.is_some());
        assert_eq!(sweeping, resync == 6, "resync {resync}");
        asked.borrow_mut().clear();
        let mut turns = 0;
        while s.agent.resync.paced.is_some() {
            s.chunk();
            turns += 1;
        }
        let removed: Vec<Asked> = asked
            .borrow()
            .iter()
            .filter(|a| matches!(a, Asked::RemoveStale { .. }))
            .cloned()
            .collect();
        if resync < 6 {
            assert_eq!(turns, 2, "resync {resync}: two chunks of pods");
            assert!(removed.is_empty());
        } else {
            // The root, kubepods, burstable and a cgroup a pod: a walk of one step.
            assert_eq!(turns, 3, "two chunks of pods, then the walk");
            assert_eq!(
                removed,
                [Asked::RemoveStale {
                    live: all.len() + 3
                }]
            );
        }
    }
}

#[tokio::test]
async fn a_pod_whose_cgroup_is_removed_during_a_paced_read_is_known_gone_and_the_read_goes_on() {
    let all = pods(2 * CHUNK_PODS);
    let mut s = scene_of(&all, FakeKernel::default());
    s.agent.resync.changes_uncounted();
    s.poll();
    let before = s.pod_reads();
    // The hog, the first candidate, is gone after the read listed it (its pod deleted).
    s.machine
        .0
        .borrow_mut()
        .pods
        .remove("/kubepods/burstable/poduid-hog");
    while s.agent.resync.paced.is_some() {
        s.chunk();
    }
    assert_eq!(
        s.pod_reads(),
        before + all.len(),
        "every listed pod was read"
    );
    // A pod with no cgroup is no candidate (the engine's tests hold that).
    assert!(
        s.agent
            .core
            .pod("uid-hog")
            .is_some_and(|row| row.cgroup.is_none()),
        "the hog's cgroup is known gone"
    );
    assert!(s.asked().is_empty(), "no threshold met, nothing decided");
}
