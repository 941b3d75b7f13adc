//! The agent: the components the event loop composes, each with its own state. The loop is
//! in [`super::run`](mod@super::run), its steps in the files named after what they do.
use super::{
    actions::Actions,
    checkpointer::Checkpointer,
    config_in_force::ConfigInForce,
    event_source::Source,
    intake_state::{Intake, PodsOnNode},
    publish::Visibility,
    resync::ResyncSchedule,
    run_options::{DecisionOptions, IntakeOptions, LoopTimers, PodSourceOptions},
    shadow_score::ShadowScore,
    stat_programs::StatPrograms,
};
use crate::{
    action::{kubepods_brake::KubepodsBrake, reclaim_first::ReclaimFirst},
    cgroupfs::MemoryHierarchy,
    checkpoint::persister::Persister,
    engine::{cause::CauseLog, eviction_machine::AgentCore},
    node::machine_reader::{MachineReader, ReadFailures},
    own_process::self_protect::{OwnMemory, OwnPod},
    pods::KubepodsCgroup,
};

/// Everything the loop owns: what start-up opened (or a unit test faked) and the state of
/// each component.
pub(super) struct Agent {
    /// The loop's timers (`--poll-interval`, `--resync-interval`, ...).
    pub(super) timers: LoopTimers,
    /// How decisions are reported and carried out (`--dry-run`, `--output`, ...).
    pub(super) decisions: DecisionOptions,
    /// How the intake wakes to read (`--step`, `--psi-stall`, `--predict`).
    pub(super) intake_options: IntakeOptions,
    /// Where the pods come from, for reopening the source and placing pods on this node.
    pub(super) pod_source: PodSourceOptions,
    /// `--allocatable-memory`, for each capacity refresh.
    pub(super) allocatable_memory: Option<u64>,
    /// The configuration in force (the engine holds it decoded), its files and since when.
    pub(super) config: ConfigInForce,
    pub(super) hierarchy: MemoryHierarchy,
    pub(super) kubepods: KubepodsCgroup,
    pub(super) core: AgentCore,
    pub(super) source: Source,
    /// The machine's memory numbers (cgroupfs), a fake in the loop's unit tests.
    pub(super) reader: Box<dyn MachineReader>,
    pub(super) read_failures: ReadFailures,
    pub(super) checkpoint: Checkpointer<Box<dyn Persister>>,
    /// What readers see: metrics, the published snapshot, recent decisions, node conditions.
    pub(super) visibility: Visibility,
    /// The pods as the pod source last handed them out, and whether it is open.
    pub(super) pods: PodsOnNode,
    /// Dry-run, a cgroup kill, or the Eviction API (`--kube`: the kubelet stops the pod),
    /// and the evictions in progress.
    pub(super) actions: Actions,
    /// What the intake keeps between turns: records held during a read, the fork counter's
    /// arming, the sweep's count.
    pub(super) intake: Intake,
    /// Which pods each timed resync reads.
    pub(super) resync: ResyncSchedule,
    /// Stalls and bursts, to say what led to a decision.
    pub(super) causes: CauseLog,
    /// The pod that runs this agent, never a candidate.
    pub(super) own_pod: OwnPod,
    /// The agent's own memory cgroup against its limit.
    pub(super) own_memory: OwnMemory,
    /// How near a memory threshold the stat programs run (`--attach-within`).
    pub(super) stat_programs: StatPrograms,
    /// The kubepods cgroup's memory brake (cgroup v2), lifted when the agent drops.
    pub(super) brake: KubepodsBrake,
    /// A dry run's shadow scorecard (`None`: an acting agent).
    pub(super) shadow: Option<ShadowScore>,
    /// Reclaim before eviction (`--reclaim-first`; `None`: off or refused on this node).
    pub(super) reclaim_first: Option<ReclaimFirst>,
}
