use super::*;

const S: u64 = NANOS_PER_SECOND;
const T0: u64 = 1_800_000_000 * S;
const MEMORY_100MI: &str = "The node was low on resource: memory. Threshold quantity: 100Mi, \
                            available: 50Mi. Container c was using 300Mi, request is 100Mi, has \
                            larger consumption of memory. ";

fn pod(name: &str) -> PodRef {
    PodRef {
        namespace: "shop".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
    }
}

fn named(name: &str, at_ns: u64) -> Named {
    Named {
        pod: pod(name),
        at_ns,
        message: MEMORY_100MI.into(),
        keys: format!("{name}: exceeds its request"),
    }
}

fn evicted(name: &str, at_ns: u64, message: &str) -> KubeletEviction {
    KubeletEviction {
        pod: pod(name),
        at_ns,
        message: message.into(),
        keys: Some(format!("{name}: within its request")),
    }
}

fn killed(name: Option<&str>, at_ns: u64, own_limit: bool) -> KernelKill {
    KernelKill {
        pod: name.map(pod),
        pid: 4242,
        comm: "hog".into(),
        at_ns,
        own_limit,
    }
}

fn shadow() -> Shadow {
    Shadow::resume(Scorecard::begun(T0), MATCH_WINDOW_NS)
}

/// What happened, in order, and the tick that ends it.
enum Step {
    Decide(&'static str, u64),
    Kubelet(&'static str, u64),
    Kernel(Option<&'static str>, u64, bool),
    Tick(u64),
}

fn run(steps: &[Step]) -> (Shadow, Vec<Scored>) {
    let mut shadow = shadow();
    let mut scored = Vec::new();
    for step in steps {
        scored.extend(match *step {
            Step::Decide(name, at) => shadow.decided(named(name, at)),
            Step::Kubelet(name, at) => shadow.kubelet_evicted(evicted(name, at, MEMORY_100MI)),
            Step::Kernel(name, at, own) => shadow.kernel_killed(killed(name, at, own)),
            Step::Tick(at) => shadow.tick(at),
        });
    }
    (shadow, scored)
}

fn at(seconds: u64) -> u64 {
    T0 + seconds * S
}

fn ms(millis: u64) -> u64 {
    T0 + millis * 1_000_000
}

#[test]
fn each_outcome_is_counted_with_its_lead_time() {
    use Step::*;
    let late_window = MATCH_WINDOW_NS / S + 1;
    let cases: Vec<(&str, Vec<Step>, Vec<Scored>)> = vec![
        (
            "the kubelet evicts the pod the agent named 8.1 s before",
            vec![
                Decide("a", ms(10_000)),
                Decide("a", ms(20_000)),
                Kubelet("a", ms(18_100)),
            ],
            vec![Scored {
                outcome: Outcome::SamePod,
                lead_ns: Some(8_100_000_000),
            }],
        ),
        (
            "a naming within the kubelet's clock resolution after its whole second is not late",
            vec![Decide("a", ms(10_700)), Kubelet("a", at(10))],
            vec![Scored {
                outcome: Outcome::SamePod,
                lead_ns: Some(-700_000_000),
            }],
        ),
        (
            "the kubelet evicts another pod than the one named",
            vec![Decide("a", at(10)), Kubelet("b", at(15))],
            vec![Scored {
                outcome: Outcome::DifferentPod,
                lead_ns: None,
            }],
        ),
        (
            "the agent names the kubelet's pod 3 s after its eviction",
            vec![Kubelet("a", at(10)), Decide("a", at(13))],
            vec![Scored {
                outcome: Outcome::Late,
                lead_ns: Some(-3 * S as i64),
            }],
        ),
        (
            "no naming within the window after the kubelet's eviction",
            vec![Kubelet("a", at(10)), Tick(at(10 + late_window))],
            vec![Scored {
                outcome: Outcome::Missed,
                lead_ns: None,
            }],
        ),
        (
            "a naming of another pod does not make a kubelet eviction late",
            vec![
                Kubelet("a", at(10)),
                Decide("b", at(12)),
                Tick(at(10 + late_window)),
            ],
            vec![Scored {
                outcome: Outcome::Missed,
                lead_ns: None,
            }],
        ),
        (
            "the kernel kills 2.3 s after the episode began",
            vec![Decide("a", ms(1_000)), Kernel(Some("a"), ms(3_300), false)],
            vec![Scored {
                outcome: Outcome::KernelForeseen,
                lead_ns: Some(2_300_000_000),
            }],
        ),
        (
            "a kill outside every pod is foreseen by the episode too",
            vec![Decide("a", at(1)), Kernel(None, at(2), false)],
            vec![Scored {
                outcome: Outcome::KernelForeseen,
                lead_ns: Some(S as i64),
            }],
        ),
        (
            "the agent decides 1 s after the kernel's kill",
            vec![Kernel(Some("a"), at(5), false), Decide("a", at(6))],
            vec![Scored {
                outcome: Outcome::KernelLate,
                lead_ns: Some(-(S as i64)),
            }],
        ),
        (
            "a kill nobody decided on",
            vec![Kernel(Some("a"), at(5), false), Tick(at(5 + late_window))],
            vec![Scored {
                outcome: Outcome::KernelUnforeseen,
                lead_ns: None,
            }],
        ),
        (
            "a kill at a pod's own limit is counted aside, even during an episode",
            vec![Decide("b", at(1)), Kernel(Some("a"), at(2), true)],
            vec![Scored {
                outcome: Outcome::KernelOwnLimit,
                lead_ns: None,
            }],
        ),
        (
            "an episode with no eviction and no kill ends as nothing happened",
            vec![
                Decide("a", at(1)),
                Decide("a", at(30)),
                Tick(at(30 + late_window)),
            ],
            vec![Scored {
                outcome: Outcome::NothingHappened,
                lead_ns: None,
            }],
        ),
        (
            "an episode is not over within its window",
            vec![Decide("a", at(1)), Tick(at(1 + MATCH_WINDOW_NS / S))],
            vec![],
        ),
        (
            "a decision past the window begins a new episode and ends the old",
            vec![
                Decide("a", at(1)),
                Decide("a", at(2 + late_window)),
                Kubelet("a", at(3 + late_window)),
            ],
            vec![
                Scored {
                    outcome: Outcome::NothingHappened,
                    lead_ns: None,
                },
                Scored {
                    outcome: Outcome::SamePod,
                    lead_ns: Some(S as i64),
                },
            ],
        ),
        (
            "two kubelet evictions in one episode: the named pod, then the next one named",
            vec![
                Decide("a", at(1)),
                Kubelet("a", at(5)),
                Decide("b", at(6)),
                Kubelet("b", at(16)),
            ],
            vec![
                Scored {
                    outcome: Outcome::SamePod,
                    lead_ns: Some(4 * S as i64),
                },
                Scored {
                    outcome: Outcome::SamePod,
                    lead_ns: Some(10 * S as i64),
                },
            ],
        ),
        (
            "the kubelet's Event arrives after the agent named the pod only after it",
            vec![Decide("a", at(13)), Kubelet("a", at(10))],
            vec![Scored {
                outcome: Outcome::Late,
                lead_ns: Some(-3 * S as i64),
            }],
        ),
        (
            "an Event of another pod before the episode waits, and is missed",
            vec![
                Decide("a", at(13)),
                Kubelet("b", at(10)),
                Tick(at(10 + late_window)),
            ],
            vec![Scored {
                outcome: Outcome::Missed,
                lead_ns: None,
            }],
        ),
        (
            "a kill's record read after a decision that came after it",
            vec![Decide("a", at(6)), Kernel(Some("a"), at(5), false)],
            vec![Scored {
                outcome: Outcome::KernelLate,
                lead_ns: Some(-(S as i64)),
            }],
        ),
        (
            "an eviction matched to an episode keeps it from ending as nothing happened",
            vec![
                Decide("a", at(1)),
                Kubelet("a", at(2)),
                Tick(at(2 + late_window + 1)),
            ],
            vec![Scored {
                outcome: Outcome::SamePod,
                lead_ns: Some(S as i64),
            }],
        ),
    ];
    for (name, steps, expected) in cases {
        let (shadow, scored) = run(&steps);
        assert_eq!(scored, expected, "{name}");
        for outcome in Outcome::ALL {
            let want = expected.iter().filter(|s| s.outcome == outcome).count() as u64;
            assert_eq!(
                shadow.card().count(outcome),
                want,
                "{name}: count of {outcome:?}"
            );
        }
    }
}

#[test]
fn a_kubelet_eviction_is_counted_once_and_only_after_the_scorecard_began() {
    let mut shadow = shadow();
    shadow.decided(named("a", at(1)));
    assert_eq!(
        shadow
            .kubelet_evicted(evicted("a", at(2), MEMORY_100MI))
            .len(),
        1
    );
    // The watch lists it again after a reconnect.
    assert!(
        shadow
            .kubelet_evicted(evicted("a", at(2), MEMORY_100MI))
            .is_empty()
    );
    // An eviction from before the scorecard began.
    assert!(
        shadow
            .kubelet_evicted(evicted("b", T0 - S, MEMORY_100MI))
            .is_empty()
    );
    assert_eq!(shadow.card().kubelet_evictions(), 1);
    // Restored from the checkpoint, it still knows.
    let mut restored = Shadow::resume(shadow.card().clone(), MATCH_WINDOW_NS);
    assert!(
        restored
            .kubelet_evicted(evicted("a", at(2), MEMORY_100MI))
            .is_empty()
    );
}

#[test]
fn a_different_pod_says_why_from_both_messages_and_both_keys() {
    let cases = [
        (
            "same threshold: the orders differ",
            MEMORY_100MI.to_string(),
            Verdict::SameThreshold,
        ),
        (
            "the same quantity in other units",
            MEMORY_100MI.replace("100Mi", "104857600"),
            Verdict::SameThreshold,
        ),
        (
            "another threshold",
            MEMORY_100MI.replace("100Mi", "500Mi"),
            Verdict::OtherThreshold {
                kubelet: "500Mi".into(),
                agent: "100Mi".into(),
            },
        ),
        (
            "disk",
            "The node was low on resource: ephemeral-storage. Threshold quantity: 10Gi, \
             available: 1Gi. "
                .to_string(),
            Verdict::OtherResource {
                kubelet: "ephemeral-storage".into(),
                agent: "memory".into(),
            },
        ),
        (
            "not the kubelet's words",
            "Preempted by the scheduler".to_string(),
            Verdict::Unreadable,
        ),
    ];
    for (name, message, verdict) in cases {
        let mut shadow = shadow();
        shadow.decided(named("a", at(1)));
        shadow.kubelet_evicted(evicted("b", at(3), &message));
        let line = shadow.card().lines.back().expect("a line");
        assert_eq!(line.verdict.as_ref(), Some(&verdict), "{name}");
        assert_eq!(
            (line.acted_on.as_str(), line.named.as_str()),
            ("shop/b", "shop/a"),
            "{name}"
        );
        assert!(
            line.detail.starts_with(&verdict.explain()),
            "{name}: {}",
            line.detail
        );
        for keys in ["a: exceeds its request", "b: within its request"] {
            assert!(
                line.detail.contains(keys),
                "{name}: {keys} in {}",
                line.detail
            );
        }
    }
    assert!(
        Verdict::OtherResource {
            kubelet: "ephemeral-storage".into(),
            agent: "memory".into()
        }
        .explain()
        .contains("does not act on disk")
    );
}

#[test]
fn hostile_names_and_messages_are_printed_escaped_and_lists_stay_bounded() {
    let mut shadow = shadow();
    let hostile = "\u{1b}[2Jevil\nline";
    for i in 0..(KEPT_LINES as u64 + 10) {
        let mut n = named("a", at(1 + i * 1000));
        n.pod.name = hostile.into();
        n.pod.uid = format!("uid-{i}");
        shadow.decided(n);
        let mut e = evicted("x", at(2 + i * 1000), hostile);
        e.pod.uid = format!("uid-{i}");
        shadow.kubelet_evicted(e);
    }
    let huge = "x".repeat(1 << 20);
    shadow.decided(named("big", at(100_000)));
    shadow.kubelet_evicted(evicted("big", at(100_001), &huge));
    let card = shadow.card();
    assert_eq!(card.lines.len(), KEPT_LINES);
    let last = card.lines.back().unwrap();
    assert_eq!(
        (last.outcome, last.acted_on.as_str()),
        (Outcome::SamePod, "shop/big")
    );
    assert!(
        last.detail.len() < 2 * KEPT_TEXT,
        "a message clipped: {}",
        last.detail.len()
    );
    assert_eq!(card.count(Outcome::SamePod), KEPT_LINES as u64 + 11);
    let text = shadow
        .report(Some("node\u{7}"), at(100_000))
        .text(&|ns| ns.to_string());
    assert!(
        !text.contains('\u{1b}') && !text.contains('\u{7}'),
        "{text}"
    );
    assert!(!text.contains("evil\nline"), "{text}");
}

#[test]
fn the_report_reads_like_the_issue_asks() {
    let (shadow, _) = run(&[
        Step::Decide("a", ms(1_000)),
        Step::Kernel(None, ms(3_300), false),
        Step::Kubelet("a", ms(9_100)),
        Step::Decide("b", ms(10_000)),
        Step::Kubelet("c", ms(15_000)),
    ]);
    let text = shadow
        .report(Some("node-1"), at(3600))
        .text(&|ns| format!("t{}", (ns - T0) / S));
    let expected = [
        "shadow scorecard of node-1 since t0 (1h 0m)",
        "kubelet evictions 2: named first 1 (same pod), 1 different pods, 0 named late, 0 missed; \
         agreement 50.0 %; lead time median 8.1 s",
        "kernel OOM kills 1: foreseen 1 (median 2.3 s before), named after 0, not foreseen 0",
        "decisions nobody acted on: 0",
        "not final yet: an episode of decisions open, 0 waiting",
        "different pods:\n  t15 different_pod: kubelet acted on shop/c, the agent named shop/b; the same",
    ];
    for line in expected {
        assert!(text.contains(line), "{line:?} in:\n{text}");
    }
}

#[test]
fn medians_of_lead_times() {
    let cases: [(&str, &[i64], Option<i64>); 4] = [
        ("none", &[], None),
        ("one", &[5], Some(5)),
        ("odd", &[9, 1, 5], Some(5)),
        ("even: the mean of the middle two", &[1, 3, 5, 100], Some(4)),
    ];
    for (name, leads, want) in cases {
        assert_eq!(median(&leads.iter().copied().collect()), want, "{name}");
    }
}

#[test]
fn a_replay_of_events_matches_as_the_agent_does() {
    // A dry run's Event series on a (first and last time), the kubelet's eviction of a 8 s
    // after the first; an eviction of c long after, which nobody named.
    let decisions = vec![named("a", at(1)), named("a", at(20))];
    let evictions = vec![
        evicted("c", at(600), MEMORY_100MI),
        evicted("a", at(9), MEMORY_100MI),
    ];
    let shadow = replay(decisions, evictions, at(3600), MATCH_WINDOW_NS);
    let card = shadow.card();
    assert_eq!(card.count(Outcome::SamePod), 1);
    assert_eq!(card.count(Outcome::Missed), 1);
    assert_eq!(card.kubelet_leads_ns, [8 * S as i64]);
    assert_eq!(shadow.report(None, at(3600)).waiting, 0, "all final");
}

#[test]
fn reports_share_the_scorecard_and_an_outcome_leaves_a_published_one_as_it_was() {
    let mut shadow = shadow();
    shadow.decided(named("a", at(1)));
    let published = shadow.report(None, at(2));
    assert!(
        Arc::ptr_eq(&published.scorecard, &shadow.report(None, at(3)).scorecard),
        "publishing copies nothing"
    );
    shadow.kubelet_evicted(evicted("a", at(5), MEMORY_100MI));
    assert_eq!(
        published.scorecard.count(Outcome::SamePod),
        0,
        "the reader's stays"
    );
    assert_eq!(shadow.card().count(Outcome::SamePod), 1);
}
