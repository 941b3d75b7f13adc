//! The shadow scorecard of a dry run ([`crate::engine::shadow`]): the agent's decisions, the
//! kernel's OOM kills and (with --kube) the kubelet's evictions fed to the matcher, each
//! outcome made final counted in the metrics, and the scorecard kept in its own checkpoint
//! file beside the agent's state, so it survives restarts and an agent rolled back to a
//! version without it reads its state as before.
use std::{collections::HashMap, path::Path};

use crate::{
    cgroupfs::{CgroupVersion, limit_hits::limit_hits},
    checkpoint::{
        FileStore, Key, StoreError,
        manager::{SET_ASIDE_KEPT, SET_ASIDE_MARKER},
        wall_time,
    },
    engine::{
        checkpoint::{decode_scorecard, encode_scorecard},
        pod_facts::PodRef,
        printable::printable,
        shadow::{KernelKill, KubeletEviction, Named, Scorecard, Scored, Shadow, ShadowReport},
    },
    metrics::exposition::ShadowMetrics,
    system_clock::unix_ms_now,
};

/// The scorecard's file in the checkpoint directory.
pub(super) const SCORECARD_KEY: &str = "shadow_scorecard";

/// The matcher, where its scorecard is kept, and each pod's hits of its own limit.
pub(super) struct ShadowScore {
    shadow: Shadow,
    node: Option<String>,
    store: FileStore,
    /// The scorecard changed since it was last written.
    unsaved: bool,
    /// The last write failed (logged once until one succeeds).
    write_failed: bool,
    /// Each pod's count of hits of its own memory limit when last read.
    limit_hits: HashMap<String, u64>,
}

impl ShadowScore {
    /// The scorecard in `dir` (begun now when there is none; a damaged one is set aside,
    /// said, and begun anew), matching within `window_ns`.
    pub(super) fn open(dir: &Path, node: Option<&str>, window_ns: u64, now_ns: u64) -> Self {
        let store = FileStore::at(dir);
        let key = key();
        let card = match store.read(&key) {
            Ok(bytes) => match decode_scorecard(&bytes) {
                Ok(card) => {
                    tracing::info!(
                        "shadow scorecard carried on from {} ({} kubelet evictions, {} outcomes \
                         in all)",
                        store.path_of(&key).display(),
                        card.kubelet_evictions(),
                        card.counts.values().sum::<u64>()
                    );
                    card
                }
                Err(problem) => {
                    let suffix = format!("{SET_ASIDE_MARKER}{}", wall_time::compact(unix_ms_now()));
                    let aside = store.move_aside(&key, &suffix).map_or_else(
                        |e| format!("could not be set aside ({e})"),
                        |path| format!("set aside as {}", path.display()),
                    );
                    // As many kept as of the agent's state, the oldest and the newest first.
                    if let Err(e) = store.prune_set_aside(&key, SET_ASIDE_MARKER, SET_ASIDE_KEPT) {
                        tracing::warn!("removing old damaged shadow scorecards: {e}");
                    }
                    tracing::warn!(
                        "the shadow scorecard {} is damaged ({problem}): {aside}; a new one \
                         begins",
                        store.path_of(&key).display()
                    );
                    Scorecard::begun(now_ns)
                }
            },
            Err(StoreError::NotFound { .. }) => Scorecard::begun(now_ns),
            Err(e) => {
                tracing::warn!("reading the shadow scorecard: {e}; a new one begins");
                Scorecard::begun(now_ns)
            }
        };
        Self {
            shadow: Shadow::resume(card, window_ns),
            node: node.map(String::from),
            store,
            unsaved: false,
            write_failed: false,
            limit_hits: HashMap::new(),
        }
    }

    /// The metrics of the scorecard as it stands (its counts survive restarts).
    pub(super) fn metrics(&self) -> ShadowMetrics {
        ShadowMetrics::counting_from(self.shadow.card())
    }

    pub(super) fn report(&self, now_ns: u64) -> ShadowReport {
        self.shadow.report(self.node.as_deref(), now_ns)
    }

    pub(super) fn decided(&mut self, named: Named, metrics: &mut ShadowMetrics) {
        let scored = self.shadow.decided(named);
        self.take(&scored, metrics);
    }

    pub(super) fn kubelet_evicted(
        &mut self,
        eviction: KubeletEviction,
        metrics: &mut ShadowMetrics,
    ) {
        let pod = eviction.pod.clone();
        let scored = self.shadow.kubelet_evicted(eviction);
        if scored.is_empty() {
            tracing::debug!("the kubelet's eviction of {pod} is counted already");
        }
        self.take(&scored, metrics);
    }

    /// The kernel killed `pid` in `pod` (`pod_dir`: its cgroup); the kill was at the pod's own
    /// limit when the pod's count of hits of it grew since it was last read (for a pod not
    /// read before: since it began).
    pub(super) fn kernel_killed(
        &mut self,
        mut kill: KernelKill,
        pod_dir: Option<(&PodRef, &Path, CgroupVersion)>,
        metrics: &mut ShadowMetrics,
    ) {
        if let Some((pod, dir, version)) = pod_dir {
            match limit_hits(dir, version) {
                Ok(hits) => {
                    let before = self.limit_hits.insert(pod.uid.clone(), hits).unwrap_or(0);
                    kill.own_limit = hits > before;
                }
                Err(e) => tracing::debug!(
                    "reading how often {pod} hit its own limit: {e}; its OOM kill counts as \
                     under node pressure"
                ),
            }
        }
        let scored = self.shadow.kernel_killed(kill);
        self.take(&scored, metrics);
    }

    pub(super) fn tick(&mut self, now_ns: u64, metrics: &mut ShadowMetrics) {
        let scored = self.shadow.tick(now_ns);
        self.take(&scored, metrics);
        if self.unsaved {
            self.save();
        }
    }

    /// Forgets the counts of limit hits of pods no longer on the node.
    pub(super) fn keep_pods(&mut self, on_node: impl Fn(&str) -> bool) {
        self.limit_hits.retain(|uid, _| on_node(uid));
    }

    fn take(&mut self, scored: &[Scored], metrics: &mut ShadowMetrics) {
        // The lines of these outcomes are the newest, in the same order.
        let lines = &self.shadow.card().lines;
        let first_line = lines.len().saturating_sub(scored.len());
        for (one, line) in scored.iter().zip(lines.iter().skip(first_line)) {
            metrics.observe(*one);
            tracing::info!(
                shadow.outcome = one.outcome.as_str(),
                shadow.lead_ms = one.lead_ns.map(|ns| ns / 1_000_000),
                "shadow scorecard: {} ({} acted on {}, the agent named {}): {}",
                one.outcome.as_str(),
                one.outcome.against(),
                printable(&line.acted_on),
                printable(&line.named),
                printable(&line.detail)
            );
        }
        if !scored.is_empty() {
            self.unsaved = true;
            self.save();
        }
    }

    /// Writes the scorecard; a failure is logged (once until a write succeeds) and the write
    /// is tried again at the next change or turn.
    fn save(&mut self) {
        let result = encode_scorecard(self.shadow.card())
            .map_err(|e| e.to_string())
            .and_then(|bytes| self.store.write(&key(), &bytes).map_err(|e| e.to_string()));
        match result {
            Ok(()) => {
                if self.write_failed {
                    tracing::info!("the shadow scorecard is written again");
                }
                self.unsaved = false;
                self.write_failed = false;
            }
            Err(e) => {
                if !self.write_failed {
                    tracing::warn!(
                        "writing the shadow scorecard: {e}; kept in memory, written again at \
                         the next change"
                    );
                }
                self.write_failed = true;
            }
        }
    }
}

fn key() -> Key {
    Key::new(SCORECARD_KEY).expect("a valid checkpoint key")
}
