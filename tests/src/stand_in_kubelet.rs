//! A STAND-IN for the kubelet, since no real one runs here: once the [`MockKubeApi`] has
//! accepted a pod's eviction, it waits a reaction delay (a real kubelet's pod workers react
//! to the deletion within tens to hundreds of milliseconds), stops the pod's processes and
//! removes its cgroup, then deletes the pod from the mock (the watch's `DELETED`), as the
//! kubelet does once the pod's containers are gone. The grace period is not waited out: the
//! test pods do not handle SIGTERM, so they would die at once either way.
use std::{
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use crate::{TestPod, cgroup_tree, kube_api::MockKubeApi};

/// The stand-in kubelet; stops acting on drop.
pub struct StandInKubelet {
    done: Arc<AtomicBool>,
    thread: Option<JoinHandle<Vec<(String, Instant)>>>,
}

impl StandInKubelet {
    /// Acts on accepted evictions of `pods` (each with its pod cgroup directory) after
    /// `reaction`.
    pub fn start(api: Arc<MockKubeApi>, pods: Vec<(TestPod, PathBuf)>, reaction: Duration) -> Self {
        let done = Arc::new(AtomicBool::new(false));
        let stop = done.clone();
        let thread = std::thread::spawn(move || {
            let mut stopped = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let accepted = api.accepted_evictions();
                for (pod, dir) in &pods {
                    let known = stopped.iter().any(|(name, _)| name == &pod.name);
                    if known || !accepted.contains(&pod.name) {
                        continue;
                    }
                    std::thread::sleep(reaction);
                    cgroup_tree::remove_tree(dir);
                    api.delete_pod(pod);
                    stopped.push((pod.name.clone(), Instant::now()));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            stopped
        });
        Self {
            done,
            thread: Some(thread),
        }
    }

    /// Stops acting; the pods it stopped, each with the instant it did.
    pub fn finish(mut self) -> Vec<(String, Instant)> {
        self.done.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for StandInKubelet {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
