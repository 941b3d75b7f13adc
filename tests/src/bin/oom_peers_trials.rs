//! Trials of the whole-node OOM race for `cargo xtask bench oom-race` (root, inside the VM
//! only: every trial runs the machine out of memory, which on a real host would take its
//! services down).
//!
//!     oom_peers earlyoom|systemd-oomd|agent[:PERCENT]|agent-no-brake|kernel TRIALS
//!
//! No cgroup has a memory limit: two steady pods hold a little memory each and per trial a
//! hog pod (the `alloc` helper) is told to allocate more than the node has available, as
//! fast as it can. One peer watches the node: `earlyoom` with Debian's packaged settings
//! (its default thresholds, 10 % MemAvailable, SIGTERM, then SIGKILL at half),
//! systemd-oomd (systemd as PID 1, the pods in transient scopes of `pods.slice`, which the VM
//! gives Debian's settings for user services: `ManagedOOMMemoryPressure=kill` at 50 %), the
//! agent with a hard `memory.available` threshold of PERCENT (10 % unless given; as
//! `agent-no-brake`, 10 % with `--memory-brake off`, to tell the brake's share), or, for
//! `kernel`, nobody (the kernel's OOM killer alone, which also shows how long the hog takes
//! to run the node out). Each trial also records, before the hog starts, the node's
//! available memory by the kernel's estimate (`MemAvailable`, what earlyoom reads) and by
//! the kubelet's `memory.available` (capacity - the root cgroup's working set).
//!
//! Every line the peer writes about an action is copied into the kernel log as it arrives,
//! so the kernel log holds the peer's actions and the kernel's OOM kills in the order they
//! happened (a peer's action is logged a little after it happened, which favours the kernel);
//! systemd-oomd's own messages reach the kernel log through journald.
//! One `oom-peers {json}` line per trial on stdout: the pids of the pods' processes by role
//! and those kernel log records; the bench parses them.
use std::{
    collections::BTreeMap,
    fs::{self, File, OpenOptions},
    io::{BufRead as _, BufReader, ErrorKind, Read as _, Seek as _, SeekFrom, Write as _},
    os::unix::fs::OpenOptionsExt as _,
    process::{Child, Command, Stdio},
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

use serde_json::json;
use tests::{AgentScene, Allocator, MonitorProcess, TestPod, binary, oom_kills};

/// MiB each steady pod holds, within its request.
const STEADY_MIB: usize = 64;
/// MiB the hog asks for beyond what the node has available.
const HOG_EXTRA_MIB: u64 = 256;
/// Prefix of the kernel log records this runner writes.
const MARK: &str = "oom-peers peer: ";
/// The agent's threshold unless given: the same share of memory as earlyoom's default.
const AGENT_PERCENT: &str = "10%";

/// Who watches the node.
enum Peer {
    Earlyoom {
        child: Child,
        lines: mpsc::Receiver<String>,
    },
    /// Runs as a service of the VM's systemd; nothing to start.
    SystemdOomd,
    Agent(MonitorProcess),
    Kernel,
}

impl Peer {
    fn start(name: &str, scene: &AgentScene) -> Result<Self, String> {
        match name.split(':').next().unwrap_or_default() {
            "earlyoom" => {
                // Debian's /etc/default/earlyoom: EARLYOOM_ARGS="-r 3600".
                let mut child = Command::new(binary("earlyoom", "MONITOR_EARLYOOM_BIN"))
                    .args(["-r", "3600"])
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(|e| format!("starting earlyoom: {e}"))?;
                unprotect(child.id());
                let (tx, lines) = mpsc::channel();
                // earlyoom 1.7 reports on stdout and warns on stderr: read both.
                for stream in [
                    Box::new(child.stdout.take().expect("stdout")) as Box<dyn std::io::Read + Send>,
                    Box::new(child.stderr.take().expect("stderr")),
                ] {
                    let tx = tx.clone();
                    thread::spawn(move || {
                        for line in BufReader::new(stream).lines().map_while(Result::ok) {
                            eprintln!("earlyoom: {line}");
                            if tx.send(line).is_err() {
                                break;
                            }
                        }
                    });
                }
                Ok(Peer::Earlyoom { child, lines })
            }
            agent @ ("agent" | "agent-no-brake") => {
                // The node's allocatable is its capacity, as on a node without reservations:
                // not the scene's, which would mirror the threshold onto a small allocatable.
                let mut args = scene.agent_args(&["--duration", "1h"]);
                let at = args
                    .iter()
                    .position(|a| a == "--allocatable-memory")
                    .expect("the scene sets --allocatable-memory");
                args.drain(at..at + 2);
                if agent == "agent-no-brake" {
                    args.extend(["--memory-brake".into(), "off".into()]);
                }
                let agent = MonitorProcess::start(args);
                let ready = agent.wait_stderr(Duration::from_secs(60), |l| {
                    l.contains(" thresholds ") || l.contains("Error")
                });
                match ready {
                    Some(line) if line.contains(" thresholds ") => Ok(Peer::Agent(agent)),
                    _ => Err(format!("the agent did not start: {}", agent.stderr())),
                }
            }
            "systemd-oomd" => {
                let active = Command::new("/bin/systemctl")
                    .args(["is-active", "systemd-oomd.service"])
                    .output()
                    .map_err(|e| format!("running systemctl: {e}"))?;
                match String::from_utf8_lossy(&active.stdout).trim() {
                    "active" => Ok(Peer::SystemdOomd),
                    state => Err(format!("systemd-oomd.service is {state:?}, not active")),
                }
            }
            "kernel" => Ok(Peer::Kernel),
            other => Err(format!(
                "{other}: not earlyoom, systemd-oomd, agent or kernel"
            )),
        }
    }

    /// The peer's next line about an action, waiting at most `timeout`.
    fn next_action(&self, timeout: Duration) -> Option<String> {
        match self {
            Peer::Earlyoom { lines, .. } => {
                let line = lines.recv_timeout(timeout).ok()?;
                // `sending SIGTERM to process PID ...`, not its settings' `sending SIGTERM when`.
                (line.contains("sending SIG") && line.contains(" to process ")).then_some(line)
            }
            // Its stdout carries nothing but decisions.
            Peer::Agent(agent) => agent.next_line(timeout),
            // systemd-oomd's reach the kernel log through journald.
            Peer::SystemdOomd | Peer::Kernel => {
                thread::sleep(timeout);
                None
            }
        }
    }
}

impl Peer {
    /// Forgets every line the peer wrote so far.
    fn drain(&self) {
        match self {
            Peer::Earlyoom { lines, .. } => while lines.try_recv().is_ok() {},
            Peer::Agent(agent) => while agent.next_line(Duration::ZERO).is_some() {},
            Peer::SystemdOomd | Peer::Kernel => {}
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Peer::Earlyoom { child, .. } = self {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The kernel log from the moment it was opened on.
struct KernelLog(File);

impl KernelLog {
    fn open_at_end() -> Self {
        let mut file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open("/dev/kmsg")
            .expect("opening /dev/kmsg");
        file.seek(SeekFrom::End(0)).expect("seeking /dev/kmsg");
        Self(file)
    }

    /// The messages logged since the last call, of the records that name a killed process or
    /// a peer's action.
    fn read_kills(&mut self) -> Vec<String> {
        let mut messages = Vec::new();
        let mut record = vec![0u8; 8192];
        loop {
            match self.0.read(&mut record) {
                Ok(0) => break,
                Ok(n) => {
                    let text = String::from_utf8_lossy(&record[..n]);
                    // PRI,SEQ,TIME,FLAGS;MESSAGE, then continuation lines.
                    let message = text.split_once(';').map_or(&*text, |(_, m)| m);
                    let message = message.lines().next().unwrap_or_default();
                    // The kernel's "Killed process PID", systemd-oomd's "Killed /CGROUP".
                    if message.contains("Killed ") || message.starts_with(MARK) {
                        messages.push(message.to_string());
                    }
                }
                // Records overwritten before they were read: the next read goes on.
                Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => panic!("reading /dev/kmsg: {e}"),
            }
        }
        messages
    }
}

/// Logs a peer's action line into the kernel log (a record holds at most ~1 KiB).
fn mark(line: &str) {
    let mut text: String = format!("<6>{MARK}{line}");
    while text.len() > 900 {
        text.pop();
    }
    // Without its newline a record stays open for continuations, and readers see it only
    // once a later record closes it.
    text.push('\n');
    let _ = OpenOptions::new()
        .write(true)
        .open("/dev/kmsg")
        .and_then(|mut kmsg| kmsg.write_all(text.as_bytes()));
}

/// Starts the pod's process: in its kubepods cgroup, or under systemd-oomd in a transient
/// scope of `pods.slice` named after the pod, which a placeholder process of ours (returned)
/// holds open; the pod's process joins the scope's cgroup beside it.
fn start_pod(peer: &Peer, scene: &AgentScene, pod: &TestPod) -> (Allocator, Option<Child>) {
    if !matches!(peer, Peer::SystemdOomd) {
        let proc = scene.start_pod(pod);
        unprotect(proc.pid());
        return (proc, None);
    }
    scene.write_manifest(pod);
    let unit = format!("{}.scope", pod.name);
    let holder = Command::new("/usr/bin/systemd-run")
        .args(["--scope", "--quiet", "--slice=pods", "--unit", &unit])
        .args(["/bin/sleep", "86400"])
        .stdin(Stdio::null())
        .spawn()
        .expect("starting a scope with systemd-run");
    let dir = std::path::Path::new("/sys/fs/cgroup/pods.slice").join(&unit);
    let deadline = Instant::now() + Duration::from_secs(10);
    while fs::read_to_string(dir.join("cgroup.procs")).map_or(true, |p| p.trim().is_empty()) {
        assert!(
            Instant::now() < deadline,
            "{} did not appear",
            dir.display()
        );
        thread::sleep(Duration::from_millis(20));
    }
    unprotect(holder.id());
    let proc = Allocator::start_in(&dir);
    unprotect(proc.pid());
    (proc, Some(holder))
}

/// Gives a process started by this runner the default OOM score adjustment, instead of the
/// runner's own that it inherited.
fn unprotect(pid: u32) {
    let path = format!("/proc/{pid}/oom_score_adj");
    fs::write(&path, "0").unwrap_or_else(|e| panic!("writing {path}: {e}"));
}

/// The kubelet's `memory.available` on cgroup v2: MemTotal - (anon + file - inactive_file)
/// of the root cgroup's memory.stat.
fn kubelet_available_mib() -> i64 {
    let stat = fs::read_to_string("/sys/fs/cgroup/memory.stat").expect("the root's memory.stat");
    let field = |name: &str| -> i64 {
        stat.lines()
            .find_map(|l| {
                l.strip_prefix(name)?
                    .strip_prefix(' ')?
                    .trim()
                    .parse::<i64>()
                    .ok()
            })
            .unwrap_or_else(|| panic!("no {name} in the root's memory.stat"))
    };
    let working_set = field("anon") + field("file") - field("inactive_file");
    meminfo_mib("MemTotal") as i64 - (working_set >> 20)
}

fn meminfo_mib(field: &str) -> u64 {
    fs::read_to_string("/proc/meminfo")
        .expect("/proc/meminfo")
        .lines()
        .find_map(|l| {
            l.strip_prefix(field)?
                .strip_prefix(':')?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse::<u64>()
                .ok()
        })
        .unwrap_or_else(|| panic!("no {field} in /proc/meminfo"))
        >> 10
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: oom_peers_trials earlyoom|agent|kernel TRIALS (root, in the VM only)";
    let (peer_name, trials) = match args.as_slice() {
        [peer, trials] => match trials.parse::<usize>() {
            Ok(n) => (peer.clone(), n),
            Err(e) => exit(&format!("{trials}: {e}; {usage}")),
        },
        _ => exit(usage),
    };
    if std::env::var_os("MONITOR_VM").is_none() {
        exit("oom_peers_trials runs the whole machine out of memory: it runs only in the VM");
    }
    // Whoever the OOM killer or a peer picks, it is not this runner. Its children inherit
    // that: each is given back the default (the agent sets its own).
    fs::write("/proc/self/oom_score_adj", "-1000").expect("protecting the runner");
    let percent = match peer_name.split_once(':') {
        Some(("agent", percent)) if percent.ends_with('%') => percent,
        Some(_) => exit(&format!(
            "{peer_name}: only agent takes a threshold (agent:20%)"
        )),
        None => AGENT_PERCENT,
    };
    let scene = AgentScene::with_config(
        "oom-peers",
        &format!(
            "evictionHard:\n  memory.available: {percent}\n\
             monitor:\n  evictionInterval: 1s\n  podCleanupTimeout: 5s\n"
        ),
    );
    let peer = Peer::start(&peer_name, &scene).unwrap_or_else(|e| exit(&format!("{e}; {usage}")));
    // Let earlyoom print its settings (and the agent settle) before the first trial.
    thread::sleep(Duration::from_secs(1));
    peer.drain();
    for trial in 0..trials {
        let steady: Vec<TestPod> = (0..2)
            .map(|i| TestPod::new(&format!("steady-{trial}-{i}")).request_mib(128))
            .collect();
        let hog = TestPod::new(&format!("hog-{trial}"));
        let mut roles = BTreeMap::new();
        let mut steady_procs = Vec::new();
        let mut scopes = Vec::new();
        for pod in &steady {
            let (mut proc, scope) = start_pod(&peer, &scene, pod);
            proc.alloc(STEADY_MIB);
            roles.insert(proc.pid().to_string(), "steady");
            steady_procs.push(proc);
            scopes.extend(scope);
        }
        let (mut hog_proc, scope) = start_pod(&peer, &scene, &hog);
        scopes.extend(scope);
        roles.insert(hog_proc.pid().to_string(), "hog");
        // Let the agent learn of the new pods before the race starts.
        thread::sleep(Duration::from_millis(500));
        peer.drain();
        let (available_mib, kubelet_available_mib) =
            (meminfo_mib("MemAvailable"), kubelet_available_mib());
        let hog_mib =
            (available_mib + HOG_EXTRA_MIB).min(meminfo_mib("MemTotal").saturating_sub(64));
        let mut log = KernelLog::open_at_end();
        let kills_before = oom_kills();
        let started = Instant::now();
        let (done, hog_ended) = mpsc::channel();
        let racer = thread::spawn(move || {
            let answer = hog_proc.command(&format!("alloc {hog_mib}"));
            let _ = done.send(());
            (hog_proc, answer)
        });
        let mut actions = 0;
        let mut ended = None;
        // After the hog ended, a peer's late lines still count (earlyoom's SIGKILL).
        let settle = Duration::from_millis(1500);
        while ended.is_none_or(|at: Instant| at.elapsed() < settle)
            && started.elapsed() < Duration::from_secs(120)
        {
            if let Some(line) = peer.next_action(Duration::from_millis(5)) {
                mark(&line);
                actions += 1;
            }
            if ended.is_none() && hog_ended.try_recv().is_ok() {
                ended = Some(Instant::now());
            }
        }
        let hog_ended_ms = ended.map(|at| (at - started).as_secs_f64() * 1e3);
        let (hog_proc, answer) = racer.join().expect("the hog's thread");
        let oom_kills = oom_kills() - kills_before;
        println!(
            "oom-peers {}",
            json!({
                "peer": peer_name,
                "trial": trial,
                "hog_mib": hog_mib,
                "mem_available_mib": available_mib,
                "kubelet_available_mib": kubelet_available_mib,
                "hog_ended_ms": hog_ended_ms,
                "hog_finished": answer.starts_with("allocated"),
                "peer_actions": actions,
                "oom_kills": oom_kills,
                "roles": roles,
                "log": log.read_kills(),
            })
        );
        drop(hog_proc);
        drop(steady_procs);
        for mut scope in scopes {
            let _ = scope.kill();
            let _ = scope.wait();
        }
        for pod in steady.iter().chain([&hog]) {
            scene.remove_manifest(pod);
            scene.kubepods.remove_pod(pod.qos(), &pod.uid);
        }
        // One eviction per interval (1 s), and the page cache the OOM took comes back.
        thread::sleep(Duration::from_millis(1500));
        peer.drain();
    }
}

fn exit(message: &str) -> ! {
    eprintln!("{message}");
    std::process::exit(2)
}
