//! The loop's policies with every seam faked, no root: the machine's numbers (a fake
//! reader), the actuator (requests recorded, outcomes scripted) and the checkpoint store
//! (writes counted). The tests give the agent its inputs through [`Agent::handle`], the
//! entry the loop runs. Pod cgroups are plain directories of a temporary "hierarchy", which is
//! all that finding a pod's cgroup looks at. The stat gate's policies are in [`stat_gate`],
//! kills whose processes outlive force in [`stuck`], the timed resync's paced read in
//! [`paced_read`].
use std::{
    cell::RefCell,
    collections::HashMap,
    io,
    rc::Rc,
    sync::{Arc, Mutex},
};

use clap::Parser as _;

use super::{
    checkpointer::Checkpointer,
    components::Agent,
    config_in_force::ConfigInForce,
    event_source::{Batch, KernelEvents, Source},
    input::{Input, Next},
    run_options::RunOptions,
    shadow_score::ShadowScore,
    startup::Parts,
};
use crate::{
    action::actuator::{ActionDone, ActionOutcome, ActionRequest, ActionTask, Actuator, DryRun},
    action::kubepods_brake::KubepodsBrake,
    cgroupfs::{CgroupPaths, CgroupVersion, MemoryHierarchy, StatsError},
    checkpoint::{StateError, persister::Persister},
    engine::action_path::{ActionPath, Route, Step},
    engine::{
        checkpoint::AgentState,
        decide::EvictionState,
        eviction_config::EvictionConfig,
        eviction_machine::{AgentCore, NodeCapacity},
        ids::CgroupRel,
        threshold::SignalObservation,
    },
    metrics::snapshot,
    node::machine_reader::MachineReader,
    node::read::NodeError,
    own_process::self_protect::OwnPod,
    pods::{KubepodsCgroup, NodePod},
    source::{
        ebpf::{Drops, StatLinkError, TaskCgroups},
        probe::EventSource,
    },
    system_clock::unix_ns_now,
};

mod paced_read;
mod reclaim;
mod shadow;
mod stat_gate;
mod stuck;

const MI: u64 = 1 << 20;
/// Node memory; `memory.available` is this minus the node's working set.
const NODE: u64 = 8192 * MI;

/// What the fake machine reads: the node's working set and each pod cgroup's.
#[derive(Default)]
struct Machine {
    node_working_set: u64,
    /// The node's files cannot be read.
    node_fails: bool,
    pods: HashMap<String, u64>,
    /// Reads of a pod's cgroup so far.
    pod_reads: usize,
}

#[derive(Clone, Default)]
struct FakeReader(Rc<RefCell<Machine>>);

impl MachineReader for FakeReader {
    fn scan(&self) -> io::Result<CgroupPaths> {
        Ok(CgroupPaths::default())
    }
    fn node_working_set(&self) -> Result<u64, NodeError> {
        let machine = self.0.borrow();
        if machine.node_fails {
            return Err(NodeError::Read {
                path: "/sys/fs/cgroup/memory/memory.stat".into(),
                source: io::Error::from_raw_os_error(libc::EIO),
            });
        }
        Ok(machine.node_working_set)
    }
    fn working_set(&self, rel: &str) -> Result<u64, StatsError> {
        let mut machine = self.0.borrow_mut();
        if rel == "/kubepods" {
            return Ok(machine.pods.values().sum());
        }
        machine.pod_reads += 1;
        machine
            .pods
            .get(rel)
            .copied()
            .ok_or_else(|| StatsError::Gone(rel.into()))
    }
    fn process_count(&self, rel: &str) -> io::Result<u64> {
        Ok(u64::from(self.0.borrow().pods.contains_key(rel)))
    }
    fn pid_available(&self) -> Result<Option<SignalObservation>, NodeError> {
        Ok(None)
    }
}

/// The actuator's side: the pods asked for, and the outcome each action ends with.
#[derive(Clone)]
struct FakeActuator {
    asked: Arc<Mutex<Vec<String>>>,
    outcome: fn() -> ActionOutcome,
}

impl Actuator for FakeActuator {
    fn start(&self, request: ActionRequest) -> Option<ActionTask> {
        self.asked.lock().unwrap().push(request.pod.name.clone());
        let outcome = (self.outcome)();
        Some(Box::pin(async move {
            ActionDone {
                request,
                outcome,
                path: ActionPath {
                    route: Route::Local,
                    step: Step::Kill,
                    stopped_locally: false,
                },
            }
        }))
    }
    fn route(&self, _hard: bool) -> Option<Route> {
        Some(Route::Local)
    }
}

/// What the loop asked of the fake kernel, in order.
#[derive(Clone, Debug, PartialEq)]
enum Asked {
    /// A wake-up level: the growth the kernel may count before it wakes the agent.
    WakeAfter(Option<u64>),
    ReadPending,
    Attach,
    Detach,
    /// The map sweep's end: its walk found these cgroups.
    RemoveStale {
        live: usize,
    },
}

/// Kernel programs that record what they are asked; `reached` makes every new wake-up
/// level one the kernel has already counted (the records are waiting in the ring).
#[derive(Clone, Default)]
struct FakeKernel {
    asked: Rc<RefCell<Vec<Asked>>>,
    reached: bool,
    detached: Rc<RefCell<bool>>,
    /// The memory cgroup the kernel recorded for every OOM victim.
    victim_cgroup: Option<u64>,
}

impl KernelEvents for FakeKernel {
    fn next_batch<'a>(
        &'a mut self,
        _out: &'a mut Batch,
    ) -> std::pin::Pin<Box<dyn Future<Output = io::Result<()>> + 'a>> {
        Box::pin(std::future::pending())
    }
    fn read_pending(&mut self, _out: &mut Batch) -> usize {
        self.asked.borrow_mut().push(Asked::ReadPending);
        0
    }
    fn hold_pending(&mut self, _out: &mut Batch, _limit: usize) -> usize {
        0
    }
    fn wake_after_growth(&mut self, headroom: Option<u64>) -> Result<bool, aya::maps::MapError> {
        self.asked.borrow_mut().push(Asked::WakeAfter(headroom));
        Ok(self.reached)
    }
    fn wake_after_forks(&mut self, _tasks: Option<u64>) -> Result<bool, aya::maps::MapError> {
        Ok(false)
    }
    fn watch_task_cgroups(&mut self, _on: bool) -> Result<bool, aya::maps::MapError> {
        Ok(false)
    }
    fn take_task_cgroups(&mut self) -> TaskCgroups {
        TaskCgroups::Unknown
    }
    fn new_drops(&mut self) -> Drops {
        Drops::default()
    }
    fn tracked_cgroups(&self) -> Result<Vec<u64>, aya::maps::MapError> {
        Ok(Vec::new())
    }
    fn remove_stale(
        &mut self,
        _tracked: Vec<u64>,
        live: &CgroupPaths,
    ) -> Result<usize, aya::maps::MapError> {
        self.asked
            .borrow_mut()
            .push(Asked::RemoveStale { live: live.len() });
        Ok(0)
    }
    fn stats_attached(&self) -> bool {
        !*self.detached.borrow()
    }
    fn attach_stats(&mut self) -> Result<(), StatLinkError> {
        self.asked.borrow_mut().push(Asked::Attach);
        *self.detached.borrow_mut() = false;
        Ok(())
    }
    fn detach_stats(&mut self) -> Result<(), StatLinkError> {
        self.asked.borrow_mut().push(Asked::Detach);
        *self.detached.borrow_mut() = true;
        Ok(())
    }
    fn programs(&self) -> (usize, usize) {
        (14, 14)
    }
    fn oom_victim_cgroup(&self, _pid: u32) -> Option<u64> {
        self.victim_cgroup
    }
}

/// Checkpoint writes counted: as the real store, a state equal to the last one written is
/// not written again.
#[derive(Clone, Default)]
struct Disk(Rc<RefCell<Vec<AgentState>>>);

impl Persister for Disk {
    fn save(&mut self, state: &AgentState) -> Result<bool, StateError> {
        let mut written = self.0.borrow_mut();
        if written.last() == Some(state) {
            return Ok(false);
        }
        written.push(state.clone());
        Ok(true)
    }
}

struct Scene {
    agent: Agent,
    machine: FakeReader,
    /// The cgroupfs side of `--reclaim-first`, when the scene's flags name it.
    reclaimer: reclaim::FakeReclaimer,
    asked: Arc<Mutex<Vec<String>>>,
    disk: Disk,
    /// The hierarchy's directories; removed on drop.
    mount: tempfile::TempDir,
}

/// Whether the agent acts (each action ending as scripted) or runs `--dry-run`.
enum Mode {
    Acting(fn() -> ActionOutcome),
    DryRun,
}

/// An agent on an 8 GiB node with a hard `memory.available<500Mi`, no eviction interval,
/// `pods` (name, request MiB, working set MiB) listed and read, the node's working set
/// `node_mib`.
fn scene(mode: Mode, pods: &[(&str, i64, u64)], node_mib: u64) -> Scene {
    scene_with(mode, None, &[], pods, node_mib)
}

/// As [`scene`], the memory read from `kernel` (stat programs attached) and `flags` added.
fn scene_with(
    mode: Mode,
    kernel: Option<FakeKernel>,
    flags: &[&'static str],
    pods: &[(&str, i64, u64)],
    node_mib: u64,
) -> Scene {
    let mount = tempfile::tempdir().unwrap();
    let machine = FakeReader::default();
    let asked = Arc::new(Mutex::new(Vec::new()));
    let disk = Disk::default();
    let mut argv = vec!["monitor", "--pods", "/nonexistent"];
    let actuator: Box<dyn Actuator> = match mode {
        Mode::Acting(outcome) => Box::new(FakeActuator {
            asked: asked.clone(),
            outcome,
        }),
        Mode::DryRun => {
            argv.push("--dry-run");
            Box::new(DryRun { events: None })
        }
    };
    argv.extend_from_slice(flags);
    let options = RunOptions::split(&crate::cli::Cli::parse_from(argv).agent);
    let source = match kernel {
        None => Source::polling(),
        Some(kernel) => Source {
            kind: EventSource::Ebpf,
            kernel: Some(Box::new(kernel)),
            fallback: None,
        },
    };
    let kubepods = KubepodsCgroup::new(CgroupRel::new("/kubepods").unwrap());
    let config = EvictionConfig::from_yaml(
        "evictionHard:\n  memory.available: 500Mi\nmonitor:\n  evictionInterval: 0s\n",
    )
    .unwrap();
    let capacity = NodeCapacity {
        memory_bytes: NODE,
        allocatable_memory_bytes: NODE,
        kubepods_limit: None,
    };
    let in_force = ConfigInForce::new(
        Default::default(),
        &crate::config_file::LoadedConfig {
            config: config.clone(),
            written: Default::default(),
            checksum: "sha256:test".into(),
            notes: Vec::new(),
        },
    );
    let core = AgentCore::new(
        config,
        capacity,
        kubepods.rel.clone(),
        EvictionState::default(),
    );
    let hierarchy = MemoryHierarchy {
        version: CgroupVersion::V1,
        mount: mount.path().into(),
        hierarchy_id: 0,
    };
    let persister: Box<dyn Persister> = Box::new(disk.clone());
    let mode = crate::engine::checkpoint::Mode::from_dry_run(options.decisions.dry_run);
    // A dry run's scorecard in the scene's directory, matching within a second.
    let shadow = options
        .decisions
        .dry_run
        .then(|| ShadowScore::open(mount.path(), Some("node-1"), 1_000_000_000, unix_ns_now()));
    let reclaimer = reclaim::FakeReclaimer::default();
    let reclaim_first = flags
        .contains(&"--reclaim-first")
        .then(|| crate::action::reclaim_first::ReclaimFirst::new(Arc::new(reclaimer.clone())));
    let mut agent = Agent::assemble(Parts {
        brake: KubepodsBrake::new(mount.path().into(), "/kubepods", None, mount.path()),
        options,
        config: in_force,
        hierarchy,
        kubepods,
        core,
        source,
        reader: Box::new(machine.clone()),
        checkpoint: Checkpointer::new(persister, AgentState::default(), mode),
        publisher: snapshot::channel().0,
        actuator,
        node_status: None,
        own_pod: OwnPod::default(),
        shadow,
        reclaim_first,
    });
    let mut listed = Vec::new();
    {
        let mut m = machine.0.borrow_mut();
        m.node_working_set = node_mib * MI;
        for (name, request_mib, working_set_mib) in pods {
            let uid = format!("uid-{name}");
            let rel = format!("/kubepods/burstable/pod{uid}");
            std::fs::create_dir_all(mount.path().join(&rel[1..])).unwrap();
            m.pods.insert(rel, working_set_mib * MI);
            listed.push(node_pod(name, &uid, *request_mib));
        }
    }
    agent.apply_pods(listed);
    Scene {
        agent,
        machine,
        reclaimer,
        asked,
        disk,
        mount,
    }
}

/// A running burstable pod requesting `request_mib`.
fn node_pod(name: &str, uid: &str, request_mib: i64) -> NodePod {
    let pod = serde_json::json!({
        "metadata": {"name": name, "namespace": "default", "uid": uid},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {
            "memory": format!("{request_mib}Mi")
        }}}]},
        "status": {"phase": "Running"}
    });
    NodePod::from_pod(&serde_json::from_value(pod).unwrap())
}

impl Scene {
    fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap().clone()
    }

    /// Gives the agent one input, as the loop does.
    fn input(&mut self, input: Input) -> Next {
        self.agent.handle(input, &mut Batch::new())
    }

    /// The timed read: every number read when polling, then a decision step.
    fn poll(&mut self) {
        assert_eq!(self.input(Input::Resync), Next::Go);
    }

    /// Takes the action in flight back when it finished, as the loop does (a decision step
    /// follows, which may start the next).
    async fn finish_actions(&mut self) {
        assert!(self.agent.actions.running(), "no action in flight");
        let done = self.agent.actions.next_done().await;
        assert!(done.is_some(), "the action task failed");
        assert_eq!(self.input(Input::ActionDone(done)), Next::Go);
    }
}

#[tokio::test]
async fn the_first_input_that_meets_a_threshold_is_decided_on_and_the_pod_asked_for_once() {
    // 1,000 MiB above its request against 100 MiB: the kubelet's order takes `hog` first.
    let pods = [("hog", 100, 1100), ("steady", 400, 300)];
    let mut s = scene(
        Mode::Acting(|| ActionOutcome::Failed("scripted".into())),
        &pods,
        4000,
    );
    s.agent.evaluate(None);
    assert!(s.asked().is_empty(), "3.6 GiB available: nothing to do");
    s.machine.0.borrow_mut().node_working_set = NODE - 300 * MI;
    s.poll();
    assert_eq!(s.asked(), ["hog"]);
    // Its action still runs: no other input decides again, on it or on another pod.
    s.poll();
    assert_eq!(s.input(Input::DecideAgain), Next::Go);
    assert_eq!(s.asked(), ["hog"], "one eviction in flight");
    // It failed: the wait lifts, and the same pod (still the first) is asked for again.
    s.finish_actions().await;
    assert_eq!(s.asked(), ["hog", "hog"]);
}

#[tokio::test]
async fn a_pod_found_gone_is_over_and_the_next_one_is_chosen_not_it_again() {
    let pods = [("hog", 100, 1100), ("steady", 400, 600)];
    let mut s = scene(Mode::Acting(|| ActionOutcome::Gone), &pods, 8192 - 300);
    s.agent.evaluate(None);
    assert_eq!(s.asked(), ["hog"]);
    // Its processes are gone; the node is still short.
    s.machine
        .0
        .borrow_mut()
        .pods
        .remove("/kubepods/burstable/poduid-hog");
    s.finish_actions().await;
    assert_eq!(s.asked(), ["hog", "steady"]);
    let saved = s.disk.0.borrow();
    let last = saved.last().unwrap();
    assert_eq!(
        last.acting
            .v1
            .last_eviction
            .as_ref()
            .map(|e| e.pod.name.as_str()),
        Some("steady"),
        "each eviction reached the checkpoint before its action ran"
    );
}

#[tokio::test]
async fn evaluations_that_change_nothing_write_no_checkpoint() {
    let pods = [("web", 100, 200)];
    let mut s = scene(Mode::Acting(|| ActionOutcome::Gone), &pods, 2000);
    s.agent.evaluate(None);
    let written = s.disk.0.borrow().len();
    assert!(written >= 1, "the first state is written");
    for _ in 0..20 {
        s.poll();
    }
    assert_eq!(s.disk.0.borrow().len(), written);
    s.machine.0.borrow_mut().node_working_set = NODE - 300 * MI;
    s.poll();
    assert_eq!(
        s.disk.0.borrow().len(),
        written + 1,
        "the eviction is written"
    );
}

#[tokio::test]
async fn a_dry_run_decides_signals_no_one_and_waits_for_no_grace_period() {
    let pods = [("hog", 100, 1100), ("steady", 400, 300)];
    let mut s = scene(Mode::DryRun, &pods, 8192 - 300);
    s.agent.evaluate(None);
    s.poll();
    let decided: Vec<(&str, String)> = s
        .agent
        .visibility
        .decisions
        .to_vec()
        .iter()
        .map(|d| (d.report.action, d.report.name.clone()))
        .collect();
    assert_eq!(
        decided,
        [("would_evict", "hog".to_string())],
        "one decision, waited on like a real one"
    );
    assert!(!s.agent.actions.running(), "nothing was started");
    let pending = s.agent.core.state().awaiting_cleanup.clone();
    assert_eq!(
        pending.map(|p| p.grace_period_seconds),
        Some(0),
        "nothing was signalled: only the cleanup timeout is waited out, not the pod's grace"
    );
    // Nothing it decides changes the node: it decides again when the wait ends, with no
    // reading needed to wake it; once the pressure is gone, it does not.
    assert!(
        s.agent
            .actions
            .decide_again
            .is_some_and(|at| at > tokio::time::Instant::now()),
        "decided again once the wait ends"
    );
    s.machine.0.borrow_mut().node_working_set = 1024 * MI;
    s.poll();
    assert_eq!(s.agent.actions.decide_again, None, "no threshold met");
}

#[tokio::test]
async fn the_wake_up_level_follows_the_threshold_and_a_level_already_reached_is_read_at_once_within_bounds()
 {
    let kernel = FakeKernel::default();
    let asked = kernel.asked.clone();
    let pods = [("web", 100, 200)];
    let mut s = scene_with(Mode::DryRun, Some(kernel), &[], &pods, 4000);
    let mut batch = Batch::new();
    asked.borrow_mut().clear();
    assert_eq!(s.agent.handle(Input::Turn, &mut batch), Next::Go);
    let levels: Vec<u64> = asked
        .borrow()
        .iter()
        .filter_map(|a| match a {
            Asked::WakeAfter(Some(bytes)) => Some(*bytes),
            _ => None,
        })
        .collect();
    // 4,192 MiB available, the threshold at 500 MiB: the kernel may count about 3.6 GiB,
    // less a margin of a few steps, before it wakes the agent.
    assert_eq!(levels.len(), 1, "{:?}", asked.borrow());
    assert!(
        (3_600 * MI..3_692 * MI).contains(&levels[0]),
        "{} MiB",
        levels[0] / MI
    );
    assert!(
        !asked.borrow().contains(&Asked::ReadPending),
        "nothing was waiting"
    );
    // A flood: every level set was already reached. The waiting records are read at once,
    // but at most REARM_ROUNDS times before the loop takes its other inputs again.
    let flood = FakeKernel {
        reached: true,
        ..FakeKernel::default()
    };
    let asked = flood.asked.clone();
    let mut s = scene_with(Mode::DryRun, Some(flood), &[], &pods, 4000);
    asked.borrow_mut().clear();
    assert_eq!(s.agent.handle(Input::Turn, &mut batch), Next::Go);
    let reads = asked
        .borrow()
        .iter()
        .filter(|a| **a == Asked::ReadPending)
        .count();
    assert_eq!(reads, super::wake_levels::REARM_ROUNDS);
}

#[tokio::test]
async fn a_failed_pod_source_leaves_the_known_pods_decided_on_and_is_opened_again_after_a_pause() {
    use crate::pods::{Loaded, PodSourceError, WatchError};
    use tokio::time::{Duration, Instant};

    let pods = [("hog", 100, 1100), ("steady", 400, 300)];
    let mut s = scene(Mode::DryRun, &pods, 4000);
    let failed = PodSourceError::Dir(WatchError::DirectoryGone {
        dir: "/etc/kubernetes/manifests".into(),
    });
    let before = Instant::now();
    let Next::ReopenPodSource(at) = s.input(Input::PodSourceFailed(failed)) else {
        panic!("a failed pod source is not opened again");
    };
    assert!(
        (before + Duration::from_secs(5)..=Instant::now() + Duration::from_secs(5)).contains(&at),
        "opened again after a pause"
    );
    assert!(s.agent.pods.source_down.is_some(), "not ready, with why");
    // The node crosses meanwhile: the pods known are decided on.
    s.machine.0.borrow_mut().node_working_set = NODE - 300 * MI;
    s.poll();
    let named: Vec<String> = s
        .agent
        .visibility
        .decisions
        .to_vec()
        .iter()
        .map(|d| d.report.name.clone())
        .collect();
    assert_eq!(named, ["hog"]);
    // Opening it again fails: another pause.
    assert!(matches!(
        s.input(Input::PodSourceStillDown(anyhow::anyhow!("Too many open files"))),
        Next::ReopenPodSource(at) if at > Instant::now()
    ));
    // Open again: ready, its pod set taken.
    let loaded = Loaded {
        pods: vec![node_pod("steady", "uid-steady", 400)],
        errors: Vec::new(),
        left_out: Vec::new(),
    };
    assert_eq!(s.input(Input::PodSourceReopened(loaded)), Next::Go);
    assert!(s.agent.pods.source_down.is_none());
    assert_eq!(s.agent.pods.handed_out.len(), 1);
    // SIGHUP lists the pods again at once.
    assert!(matches!(
        s.input(Input::Hangup),
        Next::ReopenPodSource(at) if at <= Instant::now()
    ));
}
