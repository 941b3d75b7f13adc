//! Starting the agent: the configuration, the node's capacity, the checkpoint, the event
//! source, the endpoints and the actuator the flags ask for, put together into an [`Agent`].

use std::sync::Arc;

use anyhow::bail;
use tokio::time::Instant;

use super::{
    actions::Actions,
    args::{AgentArgs, MemoryBrake, MetricsAuth},
    checkpointer::Checkpointer,
    components::Agent,
    config_in_force::ConfigInForce,
    event_source::Source,
    intake_state::{Intake, PodsOnNode},
    publish::Visibility,
    resync::ResyncSchedule,
    run_options::RunOptions,
    shadow_score::ShadowScore,
    stat_programs::StatPrograms,
};
use crate::{
    action::actuator::{Actuator, CgroupKiller, DryRun, KubeApi},
    action::kubepods_brake::{BrakeScope, KubepodsBrake},
    action::local_first::LocalFirst,
    action::reclaim_first::{CgroupfsReclaimer, ReclaimFirst},
    action::{
        KubeEvictor,
        kube_event::{EventReason, EventRecorder},
    },
    cgroupfs::{CgroupVersion, MemoryHierarchy, reclaim},
    checkpoint::{AtStart, StateManager, persister::Persister, read_now},
    engine::cause::CauseLog,
    engine::checkpoint::{Mode, decision_state},
    engine::eviction_machine::{AgentCore, NodeCapacity},
    engine::memory_signals::{MemoryLimit, allocatable_bytes},
    engine::reclaim_ladder::EPISODE_BUDGET,
    engine::units::bytes,
    metrics::{
        access::{Access, Remote},
        connection::Shared,
        server,
        snapshot::{self, Publisher},
        token_gate::TokenGate,
        token_review::KubeReviewer,
    },
    node::read::{online_cpus, page_size, read_mem_total, read_memory_limit},
    node::{
        machine_reader::{Cgroupfs, MachineReader, ReadFailures},
        status::NodeStatusPublisher,
    },
    own_process::self_protect::{OwnMemory, OwnPod},
    pods::KubepodsCgroup,
    system_clock::unix_ns_now,
};

/// The totals the signals are computed against: `--allocatable-memory` when given, else the
/// kubepods cgroup's limit, else the node's memory.
fn node_capacity(
    allocatable: Option<u64>,
    memory: u64,
    kubepods_limit: MemoryLimit,
) -> NodeCapacity {
    NodeCapacity {
        memory_bytes: memory,
        allocatable_memory_bytes: allocatable_bytes(allocatable, kubepods_limit, memory),
        kubepods_limit: kubepods_limit.bytes(),
    }
}

/// What start-up opens on the machine (or a unit test fakes) for [`Agent::assemble`].
pub(super) struct Parts {
    pub(super) options: RunOptions,
    pub(super) config: ConfigInForce,
    pub(super) hierarchy: MemoryHierarchy,
    pub(super) kubepods: KubepodsCgroup,
    pub(super) core: AgentCore,
    pub(super) source: Source,
    pub(super) reader: Box<dyn MachineReader>,
    pub(super) checkpoint: Checkpointer<Box<dyn Persister>>,
    pub(super) publisher: Publisher,
    pub(super) actuator: Box<dyn Actuator>,
    pub(super) node_status: Option<NodeStatusPublisher>,
    pub(super) own_pod: OwnPod,
    pub(super) brake: KubepodsBrake,
    pub(super) shadow: Option<ShadowScore>,
    pub(super) reclaim_first: Option<ReclaimFirst>,
}

/// `--reclaim-first` on this node, or `None` with the reason logged: a refused flag costs
/// the ladder, never the agent its run (it evicts as without the flag).
fn reclaim_first(
    asked: bool,
    dry_run: bool,
    hierarchy: &MemoryHierarchy,
    kubepods: &KubepodsCgroup,
) -> Option<ReclaimFirst> {
    if !asked {
        return None;
    }
    let dir = hierarchy.dir(kubepods.rel.as_str());
    if let Err(reason) = reclaim::refusal(hierarchy.version, &dir) {
        tracing::error!(
            "--reclaim-first refused on this node: {reason}; evictions go ahead as the \
             kubelet's, with no reclaim first"
        );
        return None;
    }
    tracing::info!(
        "--reclaim-first: page cache is taken back through memory.reclaim before an eviction \
         (at most {} and {:?} a pressure episode){}",
        bytes(i64::try_from(EPISODE_BUDGET.bytes).unwrap_or(i64::MAX)),
        EPISODE_BUDGET.time,
        if dry_run {
            "; dry-run: each decision says what it would take, nothing is written"
        } else {
            ""
        }
    );
    Some(ReclaimFirst::new(Arc::new(CgroupfsReclaimer {
        mount: hierarchy.mount.clone(),
        page_size: page_size(),
    })))
}

impl Agent {
    /// Reads the node's memory and the kubepods cgroup's limit again (at each resync): the
    /// kubelet sets that limit from the node's allocatable memory, which changes with its
    /// reservations, and the grace projection and the kernel's choice follow it. A failed
    /// read keeps the last values.
    pub(super) fn refresh_capacity(&mut self) {
        let dir = self.hierarchy.dir(&self.kubepods.rel);
        let (Ok(memory), Ok(limit)) = (
            read_mem_total(),
            read_memory_limit(&dir, self.hierarchy.version),
        ) else {
            return;
        };
        let capacity = node_capacity(self.allocatable_memory, memory, limit);
        let old = self.core.capacity();
        if capacity != old {
            let limit = |l: Option<u64>| l.map_or_else(|| "none".into(), |b| bytes(b as i64));
            tracing::info!(
                "node capacity changed: memory {} -> {}, kubepods limit {} -> {}, allocatable {} -> {}",
                bytes(old.memory_bytes as i64),
                bytes(capacity.memory_bytes as i64),
                limit(old.kubepods_limit),
                limit(capacity.kubepods_limit),
                bytes(old.allocatable_memory_bytes as i64),
                bytes(capacity.allocatable_memory_bytes as i64),
            );
            self.core.set_capacity(capacity);
            self.stat_programs.forget_mark();
        }
    }

    /// The agent the flags ask for: `args` are read here, at start, and what the running
    /// agent needs of them comes split in `options`.
    pub(super) async fn start(
        args: &AgentArgs,
        options: RunOptions,
        evictor: Option<KubeEvictor>,
    ) -> anyhow::Result<Self> {
        let sources = args.config_sources();
        let loaded = crate::config_file::load(&sources)?;
        tracing::info!(
            "configuration: {} ({}); thresholds {}",
            sources.describe(),
            loaded.checksum,
            loaded.config.thresholds_line()
        );
        for note in &loaded.notes {
            tracing::warn!("{note}");
        }
        let in_force = ConfigInForce::new(sources, &loaded);
        let config = loaded.config;
        let hierarchy = MemoryHierarchy::discover()?;
        let kubepods = match &args.kubepods_cgroup {
            Some(rel) => KubepodsCgroup::new(rel.clone()),
            None => KubepodsCgroup::detect(&hierarchy.mount)?,
        };
        let kubepods_dir = hierarchy.dir(&kubepods.rel);
        if !kubepods_dir.is_dir() {
            bail!("kubepods cgroup {} does not exist", kubepods_dir.display());
        }
        let memory = read_mem_total()?;
        let kubepods_limit = read_memory_limit(&kubepods_dir, hierarchy.version)?;
        let capacity = node_capacity(options.allocatable_memory, memory, kubepods_limit);
        let at_start = if args.reset_state {
            AtStart::Reset
        } else {
            AtStart::Load
        };
        let mode = Mode::from_dry_run(args.dry_run);
        let opened = StateManager::open(&args.checkpoint_dir, mode, at_start)?;
        let (saved, startup) = (opened.state, opened.startup);
        let path = opened.manager.path();
        let damaged = startup.damage().is_some();
        if damaged {
            tracing::error!("checkpoint {}: {startup}", path.display());
        } else {
            tracing::info!("checkpoint {}: {startup}", path.display());
        }
        for not_carried in &opened.not_carried {
            tracing::warn!("checkpoint {}: {not_carried}", path.display());
        }
        // Before anything else is logged: a checkpoint that cannot be written is said first.
        let persister: Box<dyn Persister> = Box::new(opened.manager);
        let mut checkpoint = match &opened.write_problem {
            None => Checkpointer::new(persister, saved, mode),
            Some(problem) => {
                Checkpointer::failing_since_start(persister, saved, mode, problem, Instant::now())
            }
        };
        // Under the checkpoint directory's lock: no other agent holds this record.
        let brake = KubepodsBrake::new(
            hierarchy.mount.clone(),
            kubepods.rel.as_ref(),
            match args.memory_brake {
                _ if hierarchy.version != CgroupVersion::V2 || args.dry_run => None,
                MemoryBrake::Kubepods => Some(BrakeScope::Kubepods),
                MemoryBrake::Pods => Some(BrakeScope::Pods),
                MemoryBrake::Off => None,
            },
            &args.checkpoint_dir,
        );
        brake.recover();
        let state = decision_state::restore(checkpoint.own(), &read_now()?);
        let source = Source::open(args, &hierarchy)?;
        tracing::info!(
            "kubepods {} ({:?} driver, cgroup {}), memory {} (allocatable {}), source {}, thresholds {}{}",
            kubepods.rel,
            kubepods.driver,
            hierarchy.version,
            bytes(memory as i64),
            bytes(capacity.allocatable_memory_bytes as i64),
            source.describe(args.poll_interval),
            config.thresholds_line(),
            if args.dry_run {
                "; dry-run: no process will be signalled"
            } else {
                ""
            }
        );
        let (publisher, view) = snapshot::channel();
        // Never a reason not to start: an address that cannot be bound is tried again in
        // the background while the agent protects the node.
        server::start(
            (!args.no_metrics).then(|| args.metrics_addr.addrs().to_vec()),
            args.probe_socket.clone(),
            Shared {
                view,
                access: Access {
                    remote: match (args.metrics_allow_remote, args.metrics_auth) {
                        (true, _) => Remote::Anyone,
                        (false, MetricsAuth::Kube) => Remote::Authorized,
                        (false, MetricsAuth::Loopback) => Remote::Closed,
                    },
                    allowed_hosts: args.metrics_allowed_host.clone(),
                },
                stats: Arc::default(),
                gate: evictor
                    .as_ref()
                    .filter(|_| args.metrics_auth == MetricsAuth::Kube)
                    .map(|evictor| {
                        TokenGate::new(KubeReviewer {
                            client: evictor.client(),
                        })
                    }),
            },
        );
        let mut core = AgentCore::new(config, capacity, kubepods.rel.clone(), state);
        core.set_predict_lead(args.predict);
        if let Some(lead) = args.predict {
            tracing::info!(
                "--predict {}ms: a hard memory threshold is acted on when the last 50ms of \
                 growth would cross it within that time, before it is met",
                lead.as_millis()
            );
        }
        let unobserved = core.unobserved_signals();
        if !unobserved.is_empty() {
            let names: Vec<String> = unobserved.iter().map(ToString::to_string).collect();
            tracing::warn!(
                "thresholds on {} are not acted on: the agent observes only memory.available, \
                 allocatableMemory.available and pid.available (the kubelet enforces the rest)",
                names.join(", ")
            );
        }
        let node = args.node_name.as_deref().unwrap_or_default();
        // A dry run writes nothing to the cluster unless asked to: no writer then.
        let events = evictor
            .as_ref()
            .filter(|_| !args.dry_run || args.dry_run_events)
            .map(|evictor| EventRecorder::spawn(evictor.client(), node));
        // A dry run writes nothing to the cluster unless asked to.
        let node_status = evictor
            .as_ref()
            .filter(|_| !args.dry_run || args.dry_run_events)
            .map(|evictor| NodeStatusPublisher::spawn(evictor.client(), node));
        if let Some(events) = events.as_ref().filter(|_| damaged && node_status.is_some()) {
            events.record_on_node(
                EventReason::CheckpointDamaged,
                &format!("{}: {startup}", path.display()),
            );
        }
        let reclaim_events = events.clone();
        let actuator: Box<dyn Actuator> = match (evictor, events) {
            (_, events) if args.dry_run => Box::new(DryRun { events }),
            (Some(evictor), Some(events)) => Box::new(LocalFirst {
                killer: CgroupKiller {
                    hierarchy: hierarchy.clone(),
                },
                api: KubeApi {
                    evictor: if args.ignore_disruption_budgets {
                        evictor.deleting()
                    } else {
                        evictor
                    },
                    events,
                },
                hard_action: args.hard_action.kube_hard_action,
            }),
            _ => Box::new(CgroupKiller {
                hierarchy: hierarchy.clone(),
            }),
        };
        let own_pod = OwnPod::detect(hierarchy.version);
        let reader = Box::new(Cgroupfs {
            hierarchy: hierarchy.clone(),
        });
        if damaged {
            checkpoint.found_damaged_at_start();
        }
        let shadow = args.dry_run.then(|| {
            ShadowScore::open(
                &args.checkpoint_dir,
                args.node_name.as_deref(),
                u64::try_from(args.shadow_window.as_nanos()).unwrap_or(u64::MAX),
                unix_ns_now(),
            )
        });
        let reclaim_first = reclaim_first(args.reclaim_first, args.dry_run, &hierarchy, &kubepods)
            .map(|reclaim| reclaim.with_events(reclaim_events));
        Ok(Self::assemble(Parts {
            options,
            config: in_force,
            hierarchy,
            kubepods,
            core,
            source,
            reader,
            checkpoint,
            publisher,
            actuator,
            node_status,
            own_pod,
            brake,
            shadow,
            reclaim_first,
        }))
    }

    /// The agent from what start-up opened (or a unit test faked), every other part of its
    /// state empty.
    pub(super) fn assemble(parts: Parts) -> Self {
        let options = parts.options;
        let stat_programs = StatPrograms::new(options.attach_within, online_cpus());
        let mut visibility = Visibility::new(parts.publisher, parts.node_status);
        visibility.metrics.shadow = parts.shadow.as_ref().map(ShadowScore::metrics);
        Self {
            timers: options.timers,
            decisions: options.decisions,
            intake_options: options.intake,
            pod_source: options.pod_source,
            allocatable_memory: options.allocatable_memory,
            config: parts.config,
            hierarchy: parts.hierarchy,
            kubepods: parts.kubepods,
            core: parts.core,
            source: parts.source,
            reader: parts.reader,
            read_failures: ReadFailures::default(),
            checkpoint: parts.checkpoint,
            visibility,
            pods: PodsOnNode::default(),
            actions: Actions::new(parts.actuator),
            intake: Intake::default(),
            resync: ResyncSchedule::default(),
            causes: CauseLog::default(),
            own_memory: OwnMemory::default(),
            own_pod: parts.own_pod,
            stat_programs,
            brake: parts.brake,
            shadow: parts.shadow,
            reclaim_first: parts.reclaim_first,
        }
    }
}
