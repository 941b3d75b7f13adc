//! Incremental rank index against three baselines that recompute the victim per decision, at
//! 100, 1,000 and 10,000 pods. Each "update" changes one pod's working set and then asks for
//! the victim. The baselines:
//! - re-sort: what the kubelet does every eviction tick, a sort through the comparator chain
//!   with a stats lookup by uid per comparison;
//! - key sort: a full sort of precomputed keys (one key recomputed per update);
//! - min scan: one O(n) pass for the smallest precomputed key, since only the victim is needed.
//!
//! The incremental index's speedup is stated against the fastest baseline at each size.
//!
//! `cargo xtask bench ranking`, or `cargo run --release -p tests --bin ranking -- [--quick] [--json]`:
//! `--quick` runs fewer iterations; `--json` adds one JSON object as the last line of output.
//! A binary of this crate rather than a cargo bench, so it is built with the other bench helpers
//! and not again with the agent's dev-dependencies.
use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use monitor::engine::eviction_order::{Candidate, RankKey, RankPolicy, kubelet_chain, ordered_by};
use monitor::engine::kubelet_summary::PodUsage;
use monitor::engine::pod_facts::{PodFacts, PodRef};
use monitor::engine::quantity::Quantity;
use monitor::engine::rank_index::RankIndex;

const SIZES: [usize; 3] = [100, 1_000, 10_000];
const MI: u64 = 1 << 20;

/// A small deterministic generator (xorshift), so runs are comparable without a rand crate.
struct Xorshift(u64);

impl Xorshift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }
}

fn pods(count: usize, rng: &mut Xorshift) -> Vec<PodFacts> {
    (0..count)
        .map(|i| PodFacts {
            pod: PodRef {
                namespace: format!("ns-{}", i % 17),
                name: format!("pod-{i}"),
                uid: format!("uid-{i:08}"),
            },
            priority: [0, 0, 0, 100, 1000][rng.below(5) as usize],
            critical: false,
            guaranteed: false,
            memory_request: Quantity::from_units(((rng.below(16) + 1) * 64 * MI) as i64),
            ephemeral_storage_request: Quantity::ZERO,
            termination_grace_period_seconds: Some(30),
            local_volumes: Vec::new(),
            resize: None,
        })
        .collect()
}

fn working_set(rng: &mut Xorshift) -> PodUsage {
    PodUsage {
        memory_working_set_bytes: rng.below(1200) * MI,
        ..PodUsage::default()
    }
}

/// Runs `step` in batches until `budget` has passed; returns steps per second.
fn rate(budget: Duration, batch: usize, mut step: impl FnMut()) -> f64 {
    let start = Instant::now();
    let mut steps = 0usize;
    while start.elapsed() < budget {
        for _ in 0..batch {
            step();
        }
        steps += batch;
    }
    steps as f64 / start.elapsed().as_secs_f64()
}

fn incremental(facts: &[PodFacts], budget: Duration) -> f64 {
    let mut rng = Xorshift(0x9e37_79b9_7f4a_7c15);
    let mut index = RankIndex::new(RankPolicy::Memory);
    for pod in facts {
        index.upsert_pod(Arc::new(pod.clone()));
        index.update_usage(&pod.pod.uid, Some(working_set(&mut rng)));
    }
    let uids: Vec<&str> = facts.iter().map(|f| f.pod.uid.as_str()).collect();
    rate(budget, 1024, || {
        let uid = uids[rng.below(uids.len() as u64) as usize];
        index.update_usage(uid, Some(working_set(&mut rng)));
        black_box(index.victim());
    })
}

/// The kubelet's way: stats in a map keyed by uid, the chain run over all pods each time.
fn resort(facts: &[PodFacts], budget: Duration) -> f64 {
    let mut rng = Xorshift(0x9e37_79b9_7f4a_7c15);
    let mut stats: HashMap<&str, PodUsage> = facts
        .iter()
        .map(|f| (f.pod.uid.as_str(), working_set(&mut rng)))
        .collect();
    let uids: Vec<&str> = facts.iter().map(|f| f.pod.uid.as_str()).collect();
    let chain = kubelet_chain(RankPolicy::Memory);
    let mut order: Vec<&PodFacts> = facts.iter().collect();
    rate(budget, 1, || {
        let uid = uids[rng.below(uids.len() as u64) as usize];
        stats.insert(uid, working_set(&mut rng));
        order.sort_by(|a, b| {
            let a = Candidate {
                facts: a,
                usage: stats.get(a.pod.uid.as_str()),
            };
            let b = Candidate {
                facts: b,
                usage: stats.get(b.pod.uid.as_str()),
            };
            ordered_by(&chain, &a, &b)
        });
        black_box(order.first());
    })
}

/// Every pod's key, precomputed; an update recomputes only the changed pod's.
fn keys(facts: &[PodFacts], rng: &mut Xorshift) -> Vec<RankKey> {
    facts
        .iter()
        .map(|f| {
            RankKey::new(
                RankPolicy::Memory,
                Arc::new(f.clone()),
                Some(&working_set(rng)),
            )
        })
        .collect()
}

/// Changes one random pod's working set and recomputes its key.
fn update_key(keys: &mut [RankKey], rng: &mut Xorshift) {
    let i = rng.below(keys.len() as u64) as usize;
    let facts = keys[i].facts().clone();
    keys[i] = RankKey::new(RankPolicy::Memory, facts, Some(&working_set(rng)));
}

/// A full sort of precomputed keys per decision, from the pods' listing order each time as
/// a fresh sort would start (sorting the previous order again would be a different
/// algorithm: insertion of one changed element).
fn key_sort(facts: &[PodFacts], budget: Duration) -> f64 {
    let mut rng = Xorshift(0x9e37_79b9_7f4a_7c15);
    let mut keys = keys(facts, &mut rng);
    let mut order: Vec<usize> = Vec::with_capacity(keys.len());
    rate(budget, 1, || {
        update_key(&mut keys, &mut rng);
        order.clear();
        order.extend(0..keys.len());
        order.sort_unstable_by(|&a, &b| keys[a].cmp(&keys[b]));
        black_box(order.first());
    })
}

/// The smallest precomputed key per decision: O(n), no ordering kept.
fn min_scan(facts: &[PodFacts], budget: Duration) -> f64 {
    let mut rng = Xorshift(0x9e37_79b9_7f4a_7c15);
    let mut keys = keys(facts, &mut rng);
    rate(budget, 16, || {
        update_key(&mut keys, &mut rng);
        black_box(keys.iter().min().map(RankKey::facts));
    })
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let json = args.iter().any(|a| a == "--json");
    let budget = Duration::from_millis(if quick { 150 } else { 1500 });

    println!("ranking: updates/s (one pod's working set changes, then the victim is read)");
    println!(
        "{:>8}  {:>14}  {:>12}  {:>12}  {:>12}  {:>22}",
        "pods", "incremental", "re-sort", "key sort", "min scan", "speedup vs fastest"
    );
    let mut results = Vec::new();
    for size in SIZES {
        let facts = pods(size, &mut Xorshift(size as u64 | 1));
        let fast = incremental(&facts, budget);
        let slow = resort(&facts, budget);
        let sorted = key_sort(&facts, budget);
        let scanned = min_scan(&facts, budget);
        let (best_name, best) = [
            ("re-sort", slow),
            ("key sort", sorted),
            ("min scan", scanned),
        ]
        .into_iter()
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .expect("three baselines");
        let speedup = fast / best;
        println!(
            "{size:>8}  {fast:>14.0}  {slow:>12.0}  {sorted:>12.0}  {scanned:>12.0}  {speedup:>10.1}x ({best_name})"
        );
        results.push(serde_json::json!({
            "pods": size,
            "incremental_updates_per_sec": fast.round(),
            "resort_updates_per_sec": slow.round(),
            "key_sort_updates_per_sec": sorted.round(),
            "min_scan_updates_per_sec": scanned.round(),
            "fastest_baseline": best_name,
            "speedup": (speedup * 10.0).round() / 10.0,
        }));
    }
    if json {
        println!(
            "{}",
            serde_json::json!({ "bench": "ranking", "quick": quick, "results": results })
        );
    }
}
