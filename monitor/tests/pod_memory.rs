//! What the agent's pod source keeps per pod, counted by this test binary's own allocator:
//! reading manifests as [`NodePod`]s must keep well under 1 KiB a pod, and the peak while
//! reading must grow by no more than that a pod, however many files there are (one file's
//! Pods at a time, never the whole directory's). Whole `Pod` objects cost several KiB each,
//! which is what the agent held at 10,000 pods before. A JSON list is turned into pods as
//! it is parsed: its peak stays within a few KiB a pod (a parsed tree of the whole list took
//! 12 KiB a pod, held by the agent's locked memory long after).
//!
//! One test only in this file: the counters see every thread of the test binary.
use std::{
    alloc::{GlobalAlloc, Layout, System},
    fs,
    path::Path,
    sync::atomic::{AtomicUsize, Ordering},
};

use monitor::pods::{NodePod, manifests::load_dir_as};

/// The system allocator, counting the bytes live now and the most live since the last reset.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed on to the system allocator unchanged; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is the system allocator's.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as for alloc.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Pods per file, as the density benchmark writes them.
const FILE_PODS: usize = 1000;
/// The most a kept pod may cost, and the most the reading peak may grow by per pod.
const PER_POD: usize = 1024;
/// The most one file's read may take at its peak, per pod of the file.
const PEAK_PER_POD: usize = 4 * 1024;

/// Writes `files` PodList files of the benchmark's pods (a burstable pod with one container).
fn write_pods(dir: &Path, files: usize) {
    for file in 0..files {
        let items: Vec<serde_json::Value> = (0..FILE_PODS)
            .map(|n| {
                let i = file * FILE_PODS + n;
                serde_json::json!({
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": format!("bench-{i}"), "namespace": "bench",
                        "uid": format!("00000000-0000-4000-8000-{i:012x}")},
                    "spec": {"priority": 0, "containers": [{"name": "app", "image": "bench",
                        "resources": {"requests": {"memory": "16Mi", "cpu": "10m"}}}]},
                    "status": {"phase": "Running", "qosClass": "Burstable"},
                })
            })
            .collect();
        let list = serde_json::json!({"apiVersion": "v1", "kind": "PodList", "items": items});
        fs::write(dir.join(format!("pods-{file:03}.json")), list.to_string()).unwrap();
    }
}

/// Reads `dir` as the agent does; returns the pods, the bytes they keep and the peak above
/// what was live before.
fn read(dir: &Path) -> (usize, usize, usize) {
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let loaded = load_dir_as(dir, |pod| NodePod::from_pod(&pod)).unwrap();
    assert!(loaded.errors.is_empty(), "{:?}", loaded.errors);
    let kept = LIVE.load(Ordering::Relaxed) - before;
    let peak = PEAK.load(Ordering::Relaxed) - before;
    (loaded.pods.len(), kept, peak)
}

#[test]
fn pods_read_as_the_agent_keeps_them_cost_under_a_kib_each_and_the_peak_stays_flat() {
    let one = tempfile::tempdir().unwrap();
    let four = tempfile::tempdir().unwrap();
    write_pods(one.path(), 1);
    write_pods(four.path(), 4);

    let (pods_one, kept_one, peak_one) = read(one.path());
    let (pods_four, kept_four, peak_four) = read(four.path());
    assert_eq!((pods_one, pods_four), (FILE_PODS, 4 * FILE_PODS));
    let report = format!(
        "1 file: {kept_one} bytes kept, peak {peak_one}; 4 files: {kept_four} bytes kept, \
         peak {peak_four}"
    );
    assert!(kept_four < pods_four * PER_POD, "{report}");
    assert!(
        peak_one < FILE_PODS * PEAK_PER_POD,
        "a list's pods are taken as they are parsed, not after: {report}"
    );
    assert!(
        peak_four < peak_one + (pods_four - pods_one) * PER_POD,
        "the peak grows with the directory, not one file: {report}"
    );
    eprintln!("{report}");
}
