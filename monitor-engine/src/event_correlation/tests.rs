//! client-go's correlator rules, one occurrence at a time.
use super::*;

const S: u64 = NANOS_PER_SECOND;

fn pod(name: &str) -> Involved {
    Involved {
        kind: "Pod".into(),
        api_version: "v1".into(),
        namespace: "jobs".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
    }
}

fn occurrence<'a>(object: &'a Involved, message: &'a str) -> Occurrence<'a> {
    Occurrence {
        object,
        type_: "Warning",
        reason: "EvictionDryRun",
        message,
    }
}

/// What a case expects: created or patched with this name, count and message; or skipped.
#[derive(Debug)]
enum Want {
    Create(&'static str, &'static str),
    Patch(&'static str, u32, &'static str),
    Skip,
}

/// The name of an Event first written for `object` at second `at`.
fn name(object: &str, at: u64) -> String {
    format!("{object}.{:x}", at * S)
}

/// Runs `(second, pod, message, want)` in order on one correlator; `want`'s names are
/// `pod@second` of the Event's first write.
fn run(steps: &[(u64, &str, &str, Want)]) {
    let mut correlator = EventCorrelator::new("monitor", "node-a");
    let objects: HashMap<&str, Involved> = steps.iter().map(|(_, p, _, _)| (*p, pod(p))).collect();
    for (i, (at, object, message, want)) in steps.iter().enumerate() {
        let got = correlator.correlate(&occurrence(&objects[object], message), at * S);
        let named = |written: &str| {
            let (object, second) = written.split_once('@').expect("pod@second");
            name(object, second.parse().expect("a second"))
        };
        match (want, &got) {
            (Want::Create(written, text), Correlated::Create(w)) => {
                assert_eq!(
                    (w.name.clone(), w.count, w.message.as_str(), w.first_ns),
                    (named(written), 1, *text, at * S),
                    "step {i}"
                );
            }
            (Want::Patch(written, count, text), Correlated::Patch(w)) => {
                assert_eq!(
                    (w.name.clone(), w.count, w.message.as_str(), w.last_ns),
                    (named(written), *count, *text, at * S),
                    "step {i}"
                );
            }
            (Want::Skip, Correlated::Skip) => {}
            _ => panic!("step {i}: want {want:?}, got {got:?}"),
        }
    }
}

#[test]
fn the_same_event_again_is_one_event_counted() {
    run(&[
        (
            100,
            "hog",
            "low on memory",
            Want::Create("hog@100", "low on memory"),
        ),
        (
            105,
            "hog",
            "low on memory",
            Want::Patch("hog@100", 2, "low on memory"),
        ),
        (
            110,
            "hog",
            "low on memory",
            Want::Patch("hog@100", 3, "low on memory"),
        ),
        // Another pod is another series; the first goes on where it was, however late.
        (
            111,
            "calm",
            "low on memory",
            Want::Create("calm@111", "low on memory"),
        ),
        (
            5000,
            "hog",
            "low on memory",
            Want::Patch("hog@100", 4, "low on memory"),
        ),
    ]);
}

#[test]
fn ten_distinct_messages_within_ten_minutes_are_combined() {
    const M: [&str; 11] = [
        "m0", "m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8", "m9", "m10",
    ];
    let mut steps: Vec<(u64, &str, &str, Want)> = Vec::new();
    let names = [
        "hog@0", "hog@5", "hog@10", "hog@15", "hog@20", "hog@25", "hog@30", "hog@35", "hog@40",
    ];
    for (i, written) in names.into_iter().enumerate() {
        steps.push((5 * i as u64, "hog", M[i], Want::Create(written, M[i])));
    }
    steps.extend([
        // The tenth distinct message starts the combined Event; the next ones count on it.
        (
            45,
            "hog",
            M[9],
            Want::Create("hog@45", "(combined from similar events): m9"),
        ),
        (
            50,
            "hog",
            M[10],
            Want::Patch("hog@45", 2, "(combined from similar events): m10"),
        ),
        // A message still among the nine remembered counts on its own Event.
        (55, "hog", M[8], Want::Patch("hog@40", 2, "m8")),
        // Ten minutes without one: the messages are forgotten, a new one stands alone.
        (656, "hog", "m11", Want::Create("hog@656", "m11")),
    ]);
    run(&steps);
}

#[test]
fn a_source_writes_25_events_about_an_object_then_one_every_five_minutes() {
    let mut steps: Vec<(u64, &str, &str, Want)> =
        vec![(0, "hog", "same", Want::Create("hog@0", "same"))];
    let counts: [u32; 24] = std::array::from_fn(|i| i as u32 + 2);
    for count in counts {
        steps.push((
            u64::from(count),
            "hog",
            "same",
            Want::Patch("hog@0", count, "same"),
        ));
    }
    steps.extend([
        // The 26th within the burst is held back, as the 27th; both are counted.
        (26, "hog", "same", Want::Skip),
        (27, "hog", "same", Want::Skip),
        // Another object has a bucket of its own.
        (28, "calm", "same", Want::Create("calm@28", "same")),
        // Five minutes refill one token: the next write carries the held ones' count.
        (25 + 300, "hog", "same", Want::Patch("hog@0", 28, "same")),
        (25 + 301, "hog", "same", Want::Skip),
    ]);
    run(&steps);
}

#[test]
fn each_cache_keeps_at_most_its_entries_the_oldest_going_first() {
    let mut correlator = EventCorrelator::new("monitor", "node-a");
    let first = pod("p0");
    let written = |c: &mut EventCorrelator, object: &Involved, at: u64| {
        c.correlate(&occurrence(object, "same"), at * S)
    };
    assert!(matches!(
        written(&mut correlator, &first, 0),
        Correlated::Create(_)
    ));
    for i in 1..=CACHE_ENTRIES as u64 {
        written(&mut correlator, &pod(&format!("p{i}")), i);
    }
    for cache in [
        correlator.aggregates.entries.len(),
        correlator.written.entries.len(),
        correlator.buckets.entries.len(),
    ] {
        assert_eq!(cache, CACHE_ENTRIES);
    }
    // The first pod's series was the least recently used: forgotten, it starts anew.
    let again = written(&mut correlator, &first, 10_000);
    assert!(
        matches!(&again, Correlated::Create(w) if w.name == name("p0", 10_000)),
        "{again:?}"
    );
}
