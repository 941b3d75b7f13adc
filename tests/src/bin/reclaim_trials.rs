//! Trials of reclaim before eviction for `cargo xtask bench reclaim` (root, cgroup v2): a
//! reader requesting 10Mi whose working set is 150Mi of file cache it wrote and read twice
//! (so the kubelet counts it) beside a 100Mi pod; 80Mi of anonymous memory in that pod takes
//! the pods past a hard `allocatableMemory.available<100Mi` (300Mi allocatable, as the
//! end-to-end scenes). A trial counts the agent's evictions and the kernel's OOM kills in the
//! next `WATCH`, when the pods' working set first passed the threshold's level (read every
//! millisecond from the kubepods cgroup, as the kubelet counts it) and, when the reader was
//! evicted, when its cgroup was empty, both from the allocation's start.
//!
//!     reclaim_trials idle|hot TRIALS [--reclaim-first]
//!
//! `idle`: the reader leaves its cache alone once read; `hot`: it reads the file again and
//! again (its cache is its working set, refaulting at once). One JSON object per trial on
//! stdout, naming the arguments it ran with.
use std::{
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use monitor::cgroupfs::{CgroupVersion, stats};
use serde_json::json;
use tests::{AgentScene, TempDir, TestPod, scene_decisions::alive};

/// How long a trial watches for evictions after the allocation that crosses.
const WATCH: Duration = Duration::from_secs(6);

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: reclaim_trials idle|hot TRIALS [--reclaim-first]";
    let (hot, trials, flag) = match args.as_slice() {
        [case, trials, rest @ ..]
            if ["idle", "hot"].contains(&case.as_str())
                && rest.iter().all(|f| f == "--reclaim-first") =>
        {
            let Ok(trials) = trials.parse::<usize>() else {
                eprintln!("{trials}: not a count; {usage}");
                std::process::exit(2);
            };
            (case == "hot", trials, !rest.is_empty())
        }
        _ => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    };
    for trial in 0..trials {
        let result = run_trial(trial, hot, flag);
        println!(
            "{}",
            json!({
                "trial": trial,
                "args": args,
                "evicted": result.evicted,
                "oom_kills": result.oom_kills,
                "crossed_ms": result.crossed_ms,
                "reader_gone_ms": result.reader_gone_ms,
                "reclaim_first": result.reclaim_first,
            })
        );
    }
}

struct Outcome {
    evicted: Vec<String>,
    oom_kills: u64,
    crossed_ms: Option<f64>,
    reader_gone_ms: Option<f64>,
    reclaim_first: Option<String>,
}

fn run_trial(trial: usize, hot: bool, flag: bool) -> Outcome {
    let scene = AgentScene::new(&format!("reclaim-bench-{trial}"), "1s", "5s");
    let files = TempDir::new(&format!("reclaim-bench-{trial}-cache"));
    let extra: &[&str] = if flag { &["--reclaim-first"] } else { &[] };
    let mut agent = scene.start_agent(extra);
    let reader = TestPod::new("reader").request_mib(10);
    let anon = TestPod::new("anon").request_mib(100);
    let mut reader_proc = scene.start_pod(&reader);
    let mut anon_proc = scene.start_pod(&anon);
    let cache = files.join("cache");
    reader_proc.cache(150, &cache);
    reader_proc.read_file(&cache);
    reader_proc.read_file(&cache);
    if hot {
        reader_proc.keep_reading(&cache);
    }
    // Let the agent read the pods before the crossing.
    thread::sleep(Duration::from_millis(500));
    let before = scene.kubepods.oom_kills();
    let started = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let crossing = watch_for_crossing(scene.kubepods.dir.clone(), started, Arc::clone(&stop));
    // Kubelet-exact, the other pod may be evicted too (the dead reader's cache stays charged),
    // before its allocation is over in a slow VM: its answer is then cut short.
    let _ = anon_proc.command("alloc 80");
    let mut evicted = Vec::new();
    let mut reclaim_first = None;
    let mut reader_gone_ms = None;
    let deadline = started + WATCH;
    while Instant::now() < deadline {
        if reader_gone_ms.is_none() && !alive(&reader_proc) {
            reader_gone_ms = Some(started.elapsed().as_secs_f64() * 1e3);
        }
        if let Some(line) = agent.next_line(Duration::from_millis(10)) {
            let decision: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
            if let Some(name) = decision["name"].as_str() {
                evicted.push(name.to_string());
                reclaim_first = decision["reclaim_first"].as_str().map(str::to_owned);
            }
        }
    }
    let oom_kills = scene.kubepods.oom_kills() - before;
    stop.store(true, Ordering::Relaxed);
    let crossed_ms = crossing.join().expect("the crossing's watcher");
    agent.stop();
    Outcome {
        evicted,
        oom_kills,
        crossed_ms,
        reader_gone_ms,
        reclaim_first,
    }
}

/// Reads the kubepods working set every millisecond until it passes the threshold's level or
/// `stop`; the milliseconds from `started` to the first reading above it.
fn watch_for_crossing(
    kubepods: PathBuf,
    started: Instant,
    stop: Arc<AtomicBool>,
) -> thread::JoinHandle<Option<f64>> {
    let level = AgentScene::PRESSURE_ABOVE_MIB << 20;
    thread::spawn(move || {
        let current = kubepods.join("memory.current");
        while !stop.load(Ordering::Relaxed) {
            // The working set is at most memory.current, which is cheap to read: memory.stat
            // only once that is past the level.
            let usage: u64 = std::fs::read_to_string(&current)
                .ok()
                .and_then(|text| text.trim().parse().ok())
                .expect("the kubepods' memory.current");
            if usage > level
                && stats::read(&kubepods, CgroupVersion::V2)
                    .expect("the kubepods' memory")
                    .working_set()
                    > level
            {
                return Some(started.elapsed().as_secs_f64() * 1e3);
            }
            thread::sleep(Duration::from_millis(1));
        }
        None
    })
}
