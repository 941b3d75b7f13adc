//! A dry run's shadow scorecard over the same fakes: its decision, the kernel's OOM kill of a
//! pod's process and the kubelet's eviction are matched, counted in the metrics, published on
//! `/debug/shadow` and saved in the scorecard's own file, which a restarted agent carries on.
use std::fs;

use super::*;
use crate::{
    engine::{
        checkpoint::decode_scorecard,
        pod_facts::PodRef,
        shadow::{KubeletEviction, Outcome},
    },
    source::event::KernelEvent,
    system_clock::monotonic_ns,
};

fn oom_kill(pid: u32) -> Batch {
    vec![Ok(KernelEvent::OomKill {
        pid,
        comm: "hog".into(),
        trigger_cgroup_id: 77,
        ts_ns: monotonic_ns(),
        anon_rss_kb: 1 << 20,
        file_rss_kb: 0,
        shmem_rss_kb: 0,
        oom_score_adj: 0,
    })]
}

fn count(s: &Scene, outcome: Outcome) -> u64 {
    s.agent
        .shadow
        .as_ref()
        .unwrap()
        .report(unix_ns_now())
        .scorecard
        .count(outcome)
}

#[tokio::test]
async fn a_dry_runs_decision_is_matched_with_the_kernels_kill_and_the_kubelets_eviction() {
    let kernel = FakeKernel {
        victim_cgroup: Some(77),
        ..FakeKernel::default()
    };
    let pods = [("hog", 100, 1100), ("steady", 4000, 300)];
    let mut s = scene_with(Mode::DryRun, Some(kernel), &[], &pods, 8192 - 300);
    s.agent.core.classify(77, "/kubepods/burstable/poduid-hog");
    let pod_dir = s.mount.path().join("kubepods/burstable/poduid-hog");
    fs::create_dir_all(&pod_dir).unwrap();
    fs::write(pod_dir.join("memory.failcnt"), "0\n").unwrap();
    s.agent.evaluate(None);
    assert!(s.asked().is_empty(), "a dry run evicts nothing");

    // The kernel kills the hog's process at the kubepods limit: the decision foresaw it.
    let mut batch = oom_kill(u32::MAX - 1);
    assert_eq!(s.agent.handle(Input::Records, &mut batch), Next::Go);
    assert_eq!(count(&s, Outcome::KernelForeseen), 1);
    let line = s.agent.shadow.as_ref().unwrap().report(0).scorecard.lines[0].clone();
    assert_eq!(
        line.acted_on, "default/hog",
        "attributed by the kernel's cgroup id"
    );

    // Then at its own limit (its failcnt grew): counted aside.
    fs::write(pod_dir.join("memory.failcnt"), "3\n").unwrap();
    let mut batch = oom_kill(u32::MAX - 1);
    assert_eq!(s.agent.handle(Input::Records, &mut batch), Next::Go);
    assert_eq!(count(&s, Outcome::KernelOwnLimit), 1);

    // The kubelet evicts the pod the agent named.
    let hog = s.agent.core.pod("uid-hog").unwrap().facts.pod.clone();
    let eviction = KubeletEviction {
        pod: hog,
        at_ns: unix_ns_now(),
        message: "The node was low on resource: memory. ".into(),
        keys: None,
    };
    assert_eq!(s.input(Input::KubeletEvicted(eviction)), Next::Go);
    assert_eq!(count(&s, Outcome::SamePod), 1);

    let metrics = s.agent.visibility.metrics.render();
    for (outcome, value) in [("same_pod", 1), ("kernel_foreseen", 1), ("missed", 0)] {
        let sample = format!("monitor_shadow_outcomes_total{{outcome=\"{outcome}\"}} {value}\n");
        assert!(metrics.contains(&sample), "{sample} in {metrics}");
    }
    assert!(
        metrics.contains("monitor_shadow_lead_seconds_count{against=\"kubelet\"} 1\n"),
        "{metrics}"
    );

    // The scorecard's own file holds it, and an agent started again carries it on.
    let saved = fs::read(s.mount.path().join("shadow_scorecard")).expect("written");
    let card = decode_scorecard(&saved).unwrap();
    assert_eq!(card.count(Outcome::SamePod), 1);
    assert_eq!(card.counted_evictions, ["uid-hog"]);
    let again = ShadowScore::open(s.mount.path(), Some("node-1"), 1_000_000_000, unix_ns_now());
    assert_eq!(*again.report(0).scorecard, card);
    let restored = crate::metrics::exposition::Metrics {
        shadow: Some(again.metrics()),
        ..Default::default()
    };
    assert!(
        restored.render().contains("{outcome=\"same_pod\"} 1\n"),
        "counts go on"
    );
}

#[tokio::test]
async fn an_acting_agent_keeps_no_scorecard() {
    let mut s = scene(
        Mode::Acting(|| ActionOutcome::Failed("scripted".into())),
        &[],
        4000,
    );
    assert!(s.agent.shadow.is_none());
    let eviction = KubeletEviction {
        pod: PodRef {
            namespace: "default".into(),
            name: "x".into(),
            uid: "uid-x".into(),
        },
        at_ns: unix_ns_now(),
        message: String::new(),
        keys: None,
    };
    assert_eq!(s.input(Input::KubeletEvicted(eviction)), Next::Go);
    assert!(
        !s.agent
            .visibility
            .metrics
            .render()
            .contains("monitor_shadow")
    );
}

#[test]
fn a_damaged_scorecard_is_set_aside_and_a_new_one_begins() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("shadow_scorecard"), b"{\"version\":1,").unwrap();
    let score = ShadowScore::open(dir.path(), None, 1, 42);
    assert_eq!(score.report(0).scorecard.since_ns, 42, "begun anew");
    let aside: Vec<String> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("shadow_scorecard.corrupt-"))
        .collect();
    assert_eq!(aside.len(), 1, "kept, not deleted");
}

#[tokio::test]
async fn a_scorecard_that_cannot_be_written_is_kept_counting_and_written_once_it_can() {
    let dir = tempfile::tempdir().unwrap();
    let gone = dir.path().join("gone");
    fs::create_dir(&gone).unwrap();
    let mut score = ShadowScore::open(&gone, None, 1_000_000_000, unix_ns_now());
    let mut metrics = score.metrics();
    // The checkpoint directory vanishes (unmounted, removed): the write fails, the agent
    // keeps the scorecard in memory and goes on.
    fs::remove_dir(&gone).unwrap();
    let eviction = |uid: &str| KubeletEviction {
        pod: PodRef {
            namespace: "default".into(),
            name: uid.into(),
            uid: uid.into(),
        },
        at_ns: unix_ns_now(),
        message: String::new(),
        keys: None,
    };
    score.kubelet_evicted(eviction("a"), &mut metrics);
    score.tick(unix_ns_now() + 2_000_000_000, &mut metrics);
    assert_eq!(score.report(0).scorecard.count(Outcome::Missed), 1);
    assert!(!gone.exists());
    // Back: the next turn writes what was kept.
    fs::create_dir(&gone).unwrap();
    score.tick(unix_ns_now() + 3_000_000_000, &mut metrics);
    let saved = decode_scorecard(&fs::read(gone.join("shadow_scorecard")).unwrap()).unwrap();
    assert_eq!(saved.count(Outcome::Missed), 1);
}
