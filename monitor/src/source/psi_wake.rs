//! Wake-ups from pressure stall information while memory is polled.
//!
//! Without the memcg tracepoints (older kernels, or `--source poll`) the agent learns memory
//! numbers only at each poll. PSI triggers (Linux 5.2) fill the gap:
//! the kernel signals as soon as tasks stalled on memory for a set time within a window, and
//! the agent reads cgroupfs then instead of at the next poll. Watched are the node
//! (`/proc/pressure/memory`) and the kubepods cgroup's `memory.pressure` where cgroup2 has it
//! (the cgroup itself on v2; on hybrid hosts a cgroup2 twin at the same path, if any).
use std::{path::PathBuf, time::Duration};

use tokio::sync::mpsc;

use crate::{
    cgroupfs::hierarchy::MemoryHierarchy,
    engine::ids::CgroupRel,
    source::{
        pressure::{self, PressureSignal},
        probe::{NODE_PSI, Psi},
    },
};

/// Installed PSI triggers and the channel their signals arrive on.
pub(crate) struct PsiWake {
    signals: mpsc::UnboundedReceiver<PressureSignal>,
    /// The files watched, for the start-up log.
    pub watched: Vec<PathBuf>,
}

impl PsiWake {
    /// Installs triggers for `stall` within [`pressure::WINDOW`] on the node and the kubepods
    /// cgroup; files the kernel lacks or refuses are logged and skipped. Needs a tokio runtime.
    pub(crate) fn install(
        hierarchy: &MemoryHierarchy,
        kubepods_rel: &CgroupRel,
        stall: Duration,
    ) -> Self {
        let (tx, signals) = mpsc::unbounded_channel();
        let psi = Psi::probe(Some(hierarchy));
        let trigger = pressure::trigger(stall, pressure::WINDOW);
        let mut candidates = Vec::new();
        if psi.node {
            candidates.push((PathBuf::from(NODE_PSI), None));
        }
        if let Some(root) = psi.cgroup {
            let file = root.join(kubepods_rel.relative()).join("memory.pressure");
            if file.exists() {
                candidates.push((file, Some(kubepods_rel.to_string())));
            }
        }
        let mut watched = Vec::new();
        for (file, cgroup) in candidates {
            match pressure::watch(file.clone(), cgroup, &trigger, tx.clone()) {
                Ok(()) => watched.push(file),
                Err(e) => tracing::warn!("no PSI wake-ups from {}: {e}", file.display()),
            }
        }
        Self { signals, watched }
    }

    /// The next signal; never resolves once every trigger is gone.
    pub(crate) async fn next(&mut self) -> PressureSignal {
        match self.signals.recv().await {
            Some(signal) => signal,
            None => std::future::pending().await,
        }
    }
}
