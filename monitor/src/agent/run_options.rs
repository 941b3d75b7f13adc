//! The flags the agent's components read after start, split once from [`AgentArgs`]: the
//! agent keeps these, never the command line, so each step sees only its own options.
use std::{path::PathBuf, time::Duration};

use super::args::{AgentArgs, GraceProjection};
use crate::{engine::attach_distance::AttachWithin, flags::OutputFormat};

/// What the running agent is configured with, one value per component.
pub(super) struct RunOptions {
    pub(super) timers: LoopTimers,
    pub(super) decisions: DecisionOptions,
    pub(super) intake: IntakeOptions,
    pub(super) pod_source: PodSourceOptions,
    /// `--allocatable-memory`: what the signals count against instead of the kubepods
    /// cgroup's limit or the node's memory, at start and at each capacity refresh.
    pub(super) allocatable_memory: Option<u64>,
    /// `--attach-within`: how near a memory threshold the stat programs run.
    pub(super) attach_within: AttachWithin,
}

/// The event loop's timers.
pub(super) struct LoopTimers {
    /// `--poll-interval`: how often cgroupfs is read when polling.
    pub(super) poll_interval: Duration,
    /// `--resync-interval`: how often the kernel's working sets are read again from cgroupfs.
    pub(super) resync_interval: Duration,
    /// `--status-interval`: how often the status line is printed (zero: never).
    pub(super) status_interval: Duration,
    /// `--duration`: when the agent stops by itself, if ever.
    pub(super) stop_after: Option<Duration>,
}

/// How a decision is reported and carried out.
pub(super) struct DecisionOptions {
    /// `--dry-run`: decisions are reported, never carried out.
    pub(super) dry_run: bool,
    /// `--grace-projection`.
    pub(super) grace_projection: GraceProjection,
    /// `--output`: how a decision is printed.
    pub(super) output: OutputFormat,
    /// `--kube`: the Eviction API stops the victim, not a kill on this node.
    pub(super) through_api: bool,
}

/// How the intake wakes to read.
pub(super) struct IntakeOptions {
    /// `--psi-stall`: the memory stall that makes a polling agent read at once (zero: off).
    pub(super) psi_stall: Duration,
    /// `--step`: how far a cgroup's stat moves before the kernel reports it.
    pub(super) step_bytes: u64,
    /// `--predict` is on: the projection needs the agent awake while memory grows.
    pub(super) predicting: bool,
}

/// Where the pods on this node come from, for the first opening and each reopening.
pub(super) struct PodSourceOptions {
    /// `--kube`: a watch of the Kubernetes API instead of a manifest directory.
    pub(super) kube: bool,
    /// `--node-name`.
    pub(super) node_name: Option<String>,
    /// `--kubeconfig`.
    pub(super) kubeconfig: Option<PathBuf>,
    /// `--pods`: the manifest directory.
    pub(super) pods_dir: Option<PathBuf>,
}

impl RunOptions {
    pub(super) fn split(args: &AgentArgs) -> Self {
        Self {
            timers: LoopTimers {
                poll_interval: args.poll_interval,
                resync_interval: args.resync_interval,
                status_interval: args.status_interval,
                stop_after: args.duration,
            },
            decisions: DecisionOptions {
                dry_run: args.dry_run,
                grace_projection: args.grace_projection,
                output: args.output,
                through_api: args.kube,
            },
            intake: IntakeOptions {
                psi_stall: args.psi_stall,
                step_bytes: args.step,
                predicting: args.predict.is_some(),
            },
            pod_source: PodSourceOptions {
                kube: args.kube,
                node_name: args.node_name.clone(),
                kubeconfig: args.kubeconfig.clone(),
                pods_dir: args.pods.clone(),
            },
            allocatable_memory: args.allocatable_memory,
            attach_within: args.attach_within,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{path::Path, time::Duration};

    use clap::Parser as _;

    use super::{GraceProjection, OutputFormat, RunOptions};
    use crate::{cli::Cli, engine::attach_distance::AttachWithin};

    fn split(argv: &[&str]) -> RunOptions {
        RunOptions::split(&Cli::parse_from([&["monitor"], argv].concat()).agent)
    }

    #[test]
    fn each_flag_reaches_its_component() {
        let o = split(&[
            "--kube",
            "--node-name",
            "node-a",
            "--kubeconfig",
            "/etc/kube.conf",
            "--dry-run",
            "--grace-projection",
            "off",
            "--output",
            "json",
            "--poll-interval",
            "250ms",
            "--resync-interval",
            "30s",
            "--status-interval",
            "5s",
            "--duration",
            "1m",
            "--psi-stall",
            "0s",
            "--step",
            "1Mi",
            "--predict",
            "100ms",
            "--allocatable-memory",
            "6Gi",
            "--attach-within",
            "always",
        ]);
        let t = &o.timers;
        assert_eq!(t.poll_interval, Duration::from_millis(250));
        assert_eq!(t.resync_interval, Duration::from_secs(30));
        assert_eq!(t.status_interval, Duration::from_secs(5));
        assert_eq!(t.stop_after, Some(Duration::from_secs(60)));
        let d = &o.decisions;
        assert!(d.dry_run && d.through_api);
        assert_eq!(d.grace_projection, GraceProjection::Off);
        assert_eq!(d.output, OutputFormat::Json);
        let i = &o.intake;
        assert_eq!(i.psi_stall, Duration::ZERO);
        assert_eq!(i.step_bytes, 1 << 20);
        assert!(i.predicting);
        let p = &o.pod_source;
        assert!(p.kube);
        assert_eq!(p.node_name.as_deref(), Some("node-a"));
        assert_eq!(p.kubeconfig.as_deref(), Some(Path::new("/etc/kube.conf")));
        assert_eq!(p.pods_dir, None);
        assert_eq!(o.allocatable_memory, Some(6 << 30));
        assert_eq!(o.attach_within, AttachWithin::Always);
    }

    #[test]
    fn defaults_reach_their_components() {
        let o = split(&["--pods", "/etc/pods"]);
        assert_eq!(o.timers.poll_interval, Duration::from_secs(1));
        assert_eq!(o.timers.resync_interval, Duration::from_secs(10));
        assert_eq!(o.timers.status_interval, Duration::ZERO);
        assert_eq!(o.timers.stop_after, None);
        assert!(!o.decisions.dry_run && !o.decisions.through_api);
        assert_eq!(o.decisions.grace_projection, GraceProjection::On);
        assert_eq!(o.decisions.output, OutputFormat::Text);
        assert_eq!(o.intake.psi_stall, Duration::from_millis(100));
        assert_eq!(o.intake.step_bytes, 256 << 10);
        assert!(!o.intake.predicting);
        assert!(!o.pod_source.kube);
        assert_eq!(
            o.pod_source.pods_dir.as_deref(),
            Some(Path::new("/etc/pods"))
        );
        assert_eq!(o.allocatable_memory, None);
        assert_eq!(o.attach_within, AttachWithin::Auto);
    }
}
