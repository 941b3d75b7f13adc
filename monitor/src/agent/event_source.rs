//! Where the agent's numbers come from, as the probe names it ([`EventSource`]), with the
//! kernel programs when any are loaded: everything from the kernel, cgroup lifecycle from
//! the kernel and memory by polling, or polling alone.
use std::{io, time::Duration};

use super::args::{AgentArgs, SourceMode};
use crate::{
    cgroupfs::MemoryHierarchy,
    source::{
        ebpf::{IncidentOptions, KernelSource, LoadOptions},
        event::{DecodeError, KernelEvent},
        probe::EventSource,
    },
};

/// Kernel records as one read hands them over.
pub(super) type Batch = Vec<Result<KernelEvent, DecodeError>>;

/// The agent's event source.
pub(super) struct Source {
    pub kind: EventSource,
    /// The loaded kernel programs; `None` when polling alone.
    pub kernel: Option<KernelSource>,
}

impl Source {
    /// Opens what `--source` asks for; with `auto`, polling when the kernel programs cannot
    /// load.
    pub(super) fn open(args: &AgentArgs, hierarchy: &MemoryHierarchy) -> anyhow::Result<Source> {
        if args.source == SourceMode::Poll {
            return Ok(Source::polling());
        }
        let options = LoadOptions {
            step_bytes: args.step,
            hierarchy_id: hierarchy.hierarchy_id,
            memcg_hook: args.memcg_hook,
            budget_pages: args.per_cpu_budget,
        };
        // Reclaim stalls of at least 1 ms are kept to explain decisions, as `monitor trace`
        // shows them.
        let incidents = IncidentOptions {
            min_stall: Duration::from_millis(1),
        };
        match KernelSource::load_with_incidents(options, incidents) {
            Ok(kernel) => {
                for skipped in kernel.skipped() {
                    tracing::warn!(
                        "not attached: {} ({}); {}",
                        skipped.program.hook(),
                        skipped.reason,
                        skipped.program.fallback
                    );
                }
                let kind = if kernel.tracks_memory() {
                    EventSource::Ebpf
                } else {
                    EventSource::EbpfPoll
                };
                Ok(Source {
                    kind,
                    kernel: Some(kernel),
                })
            }
            Err(e) if args.source == SourceMode::Auto => {
                tracing::warn!("kernel programs unavailable, polling cgroupfs instead: {e}");
                Ok(Source::polling())
            }
            Err(e) => Err(e.into()),
        }
    }

    fn polling() -> Source {
        Source {
            kind: EventSource::Poll,
            kernel: None,
        }
    }

    /// Whether the kernel programs can report memory numbers, attached now or not.
    pub(super) fn has_stat_programs(&self) -> bool {
        self.kind == EventSource::Ebpf
    }

    /// Whether memory numbers come from the kernel between resyncs now: the stat programs
    /// are loaded and attached (`--attach-within` detaches them while no threshold is near).
    pub(super) fn memory_from_kernel(&self) -> bool {
        self.has_stat_programs()
            && self
                .kernel
                .as_ref()
                .is_some_and(KernelSource::stats_attached)
    }

    /// The kernel programs, when they report memory numbers now.
    pub(super) fn memory_kernel(&mut self) -> Option<&mut KernelSource> {
        if !self.memory_from_kernel() {
            return None;
        }
        self.kernel.as_mut()
    }

    /// The next batch of kernel records; never resolves when polling alone. Cancel-safe.
    pub(super) async fn next_batch(&mut self, batch: &mut Batch) -> io::Result<()> {
        match self.kernel.as_mut() {
            Some(kernel) => kernel.next_batch(batch).await,
            None => std::future::pending().await,
        }
    }

    /// In words, for the start-up line and the status endpoint.
    pub(super) fn describe(&self, poll: Duration) -> String {
        let programs = |k: &KernelSource| {
            format!(
                "{}/{} kernel programs",
                k.attached().len(),
                k.attached().len() + k.skipped().len()
            )
        };
        match (self.kind, &self.kernel) {
            (EventSource::Ebpf, Some(k)) => format!("ebpf ({})", programs(k)),
            (EventSource::EbpfPoll, Some(k)) => {
                format!("ebpf+poll ({}; memory polled every {poll:?})", programs(k))
            }
            _ => format!("poll (cgroupfs every {poll:?})"),
        }
    }
}
