//! The OOM race against the real peers, on whole-node memory inside a VM: earlyoom and
//! systemd-oomd (Debian 12's packages, with Debian's settings) and the agent (a hard
//! `memory.available: 10%` threshold, the share earlyoom acts at) each watch a node that a
//! hog runs out of memory, and the kernel's OOM killer alone as the baseline. Never on this
//! machine: a whole-node OOM here would kill its services. The tests crate's `oom_peers_trials` runs
//! the trials in Debian 12's own kernel (6.1) under qemu, with a fixed RAM size and no swap,
//! under the hand-made init and, for systemd-oomd, with systemd as PID 1; this module parses
//! its lines and says per peer who acted first and what each one killed.
use std::{collections::BTreeMap, path::Path};

use anyhow::{Context as _, bail};
use serde_json::{Value, json};

use super::{
    Size,
    env::{Binaries, Machine, loadavg},
    report::{Figure, Section},
};
use crate::vm;

/// The VM's RAM: small, so a trial's hog runs it out quickly even under TCG.
const MEMORY_MIB: u32 = 1024;
/// What a kill hit.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Victim {
    Hog,
    Steady,
    /// Anything else, by name.
    Other(String),
}

/// Who killed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Actor {
    Peer,
    Kernel,
}

/// One trial as the runner reported it, its kills in the order they happened.
#[derive(Debug, PartialEq)]
pub(super) struct Trial {
    pub peer: String,
    pub kills: Vec<(Actor, Victim)>,
    /// Time from the hog's start to its end, if it ended.
    pub hog_ended_ms: Option<f64>,
}

impl Trial {
    /// Who acted first, if anyone.
    pub(super) fn first(&self) -> Option<Actor> {
        self.kills.first().map(|(actor, _)| *actor)
    }

    /// Won: the peer stopped the hog, it killed no steady process, and the kernel's OOM
    /// killer never fired.
    pub(super) fn win(&self) -> bool {
        let by = |actor: Actor| self.kills.iter().filter(move |(a, _)| *a == actor);
        by(Actor::Peer).any(|(_, v)| *v == Victim::Hog)
            && by(Actor::Peer).all(|(_, v)| *v == Victim::Hog)
            && by(Actor::Kernel).next().is_none()
    }
}

/// The trials in console `text`: its `oom-peers {json}` lines.
pub(super) fn parse(text: &str) -> anyhow::Result<Vec<Trial>> {
    text.lines()
        .filter_map(|line| line.trim().strip_prefix("oom-peers "))
        .map(|json| {
            let value: Value = serde_json::from_str(json)
                .with_context(|| format!("an oom-peers line is not JSON: {json}"))?;
            trial(&value).with_context(|| format!("an oom-peers line lacks a field: {json}"))
        })
        .collect()
}

fn trial(value: &Value) -> Option<Trial> {
    let roles: BTreeMap<u32, Victim> = value["roles"]
        .as_object()?
        .iter()
        .filter_map(|(pid, role)| Some((pid.parse().ok()?, role_victim(role.as_str()?))))
        .collect();
    let mut kills: Vec<(Actor, Victim)> = Vec::new();
    for message in value["log"].as_array()? {
        let Some(kill) = kill_in(message.as_str()?, &roles) else {
            continue;
        };
        // earlyoom's SIGKILL after its SIGTERM is the same kill.
        if !kills.contains(&kill) {
            kills.push(kill);
        }
    }
    // The kernel log may have dropped records: the kill counter is the kernel's own.
    let logged = kills.iter().filter(|(a, _)| *a == Actor::Kernel).count() as u64;
    for _ in logged..value["oom_kills"].as_u64()? {
        kills.push((Actor::Kernel, Victim::Other("unlogged".into())));
    }
    Some(Trial {
        peer: value["peer"].as_str()?.to_string(),
        kills,
        hog_ended_ms: value["hog_ended_ms"].as_f64(),
    })
}

fn role_victim(role: &str) -> Victim {
    match role {
        "hog" => Victim::Hog,
        "steady" => Victim::Steady,
        other => Victim::Other(other.to_string()),
    }
}

/// The kill a kernel log message records: the kernel's (`Killed process PID (COMM)`),
/// systemd-oomd's through journald (`systemd-oomd[PID]: Killed /pods.slice/POD.scope due to
/// ...`), or a peer's as the runner copied it (earlyoom's `sending SIGTERM to process PID
/// ...`, the agent's JSON decision naming the pod).
fn kill_in(message: &str, roles: &BTreeMap<u32, Victim>) -> Option<(Actor, Victim)> {
    let by_pod = |name: &str| match name.split_once('-').map(|(kind, _)| kind) {
        Some("hog") => Victim::Hog,
        Some("steady") => Victim::Steady,
        _ => Victim::Other(name.to_string()),
    };
    let by_pid = |rest: &str| {
        let pid: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let pid: u32 = pid.parse().ok()?;
        Some(roles.get(&pid).cloned().unwrap_or_else(|| {
            let comm = rest.split_once('(').and_then(|(_, c)| c.split_once(')'));
            Victim::Other(comm.map_or_else(|| format!("pid {pid}"), |(c, _)| c.to_string()))
        }))
    };
    if let Some(peer) = message.strip_prefix("oom-peers peer: ") {
        if let Some((_, rest)) = peer.split_once(" to process ") {
            return Some((Actor::Peer, by_pid(rest)?));
        }
        let name = peer.split_once(r#""name":""#)?.1.split('"').next()?;
        return Some((Actor::Peer, by_pod(name)));
    }
    if message.starts_with("systemd-oomd") {
        let cgroup = message.split_once("Killed ")?.1.split_whitespace().next()?;
        let unit = cgroup.rsplit('/').next()?;
        return Some((Actor::Peer, by_pod(unit.split('.').next()?)));
    }
    let (_, rest) = message.split_once("Killed process ")?;
    Some((Actor::Kernel, by_pid(rest)?))
}

/// A peer's trials summed up.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Summary {
    pub trials: usize,
    pub wins: usize,
    pub peer_first: usize,
    pub kernel_first: usize,
    /// Victims and how often, per actor.
    pub peer_killed: BTreeMap<Victim, usize>,
    pub kernel_killed: BTreeMap<Victim, usize>,
    /// Median time from the hog's start to its end.
    pub hog_ended_ms: Option<f64>,
}

/// Per peer, in the order the peers first appear.
pub(super) fn summarize(trials: &[Trial]) -> Vec<(String, Summary)> {
    let mut out: Vec<(String, Summary)> = Vec::new();
    for trial in trials {
        let at = if let Some(at) = out.iter().position(|(peer, _)| *peer == trial.peer) {
            at
        } else {
            out.push((trial.peer.clone(), Summary::default()));
            out.len() - 1
        };
        let summary = &mut out[at].1;
        summary.trials += 1;
        summary.wins += usize::from(trial.win());
        match trial.first() {
            Some(Actor::Peer) => summary.peer_first += 1,
            Some(Actor::Kernel) => summary.kernel_first += 1,
            None => {}
        }
        for (actor, victim) in &trial.kills {
            let killed = match actor {
                Actor::Peer => &mut summary.peer_killed,
                Actor::Kernel => &mut summary.kernel_killed,
            };
            *killed.entry(victim.clone()).or_default() += 1;
        }
    }
    for (peer, summary) in &mut out {
        let mut ended: Vec<f64> = trials
            .iter()
            .filter(|t| t.peer == *peer)
            .filter_map(|t| t.hog_ended_ms)
            .collect();
        ended.sort_by(f64::total_cmp);
        summary.hog_ended_ms = ended.get(ended.len() / 2).copied();
    }
    out
}

fn victims(killed: &BTreeMap<Victim, usize>) -> String {
    if killed.is_empty() {
        return "nothing".into();
    }
    killed
        .iter()
        .map(|(victim, n)| match victim {
            Victim::Hog => format!("hog x{n}"),
            Victim::Steady => format!("steady x{n}"),
            Victim::Other(name) => format!("{name} x{n}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// One row per peer, and why systemd-oomd has none when its VM failed.
pub(super) fn table(summaries: &[(String, Summary)], oomd_failure: Option<&str>) -> String {
    let mut out = format!(
        "oom-race peers, whole node ({MEMORY_MIB} MiB VM, no swap, Linux 6.1)\n\
         {:<12} {:>6} {:>5} {:>13} {:>9}  {:<20} kernel killed",
        "peer", "trials", "wins", "first (p/k)", "hog ends", "peer killed"
    );
    for (peer, s) in summaries {
        let ended = s
            .hog_ended_ms
            .map_or_else(|| "-".into(), |ms| format!("{ms:.0} ms"));
        out.push_str(&format!(
            "\n{peer:<12} {:>6} {:>5} {:>13} {ended:>9}  {:<20} {}",
            s.trials,
            s.wins,
            format!("{}/{}", s.peer_first, s.kernel_first),
            victims(&s.peer_killed),
            victims(&s.kernel_killed),
        ));
    }
    if let Some(why) = oomd_failure {
        out.push_str(&format!("\nsystemd-oomd: {why}"));
    }
    out
}

/// Debian's settings for what systemd-oomd watches, given to the slice the pods run in: those
/// its package gives every user's service manager (`user@.service`), the units holding a
/// desktop's workloads. Its package's own defaults apply too: 20 s above the limit before it
/// acts (`DefaultMemoryPressureDurationSec`), `ManagedOOMSwap=kill` on the root slice.
const PODS_SLICE: &str =
    "[Slice]\nManagedOOMMemoryPressure=kill\nManagedOOMMemoryPressureLimit=50%\n";

/// The agent once more with a threshold met about where earlyoom's is: the kubelet's
/// `memory.available` counts no kernel memory (slab, page tables, the RAM disk) as used, so
/// in this small VM it read 100-125 MiB above `MemAvailable` (each trial records both).
const AGENT_EARLIER: &str = "agent:20%";

/// Runs the peers' trials in the VM and reports them.
pub(super) fn run(bins: &Binaries, machine: &Machine, size: Size) -> anyhow::Result<Section> {
    // The kernel alone: how long the hog takes, and that the kernel does stop it.
    let (trials_n, baseline_n) = size.pick((1, 1), (2, 1), (10, 3));
    let release = bins.helpers.as_path();
    let runner = release.join("oom_peers_trials");
    let earlyoom = vm::debian_package("earlyoom")?.join("usr/bin/earlyoom");
    let (trials, baseline) = (trials_n.to_string(), baseline_n.to_string());
    let alloc = release.join("alloc");
    let env: [(&str, &Path); 3] = [
        ("MONITOR_BIN", &bins.monitor),
        ("MONITOR_ALLOC_BIN", &alloc),
        ("MONITOR_EARLYOOM_BIN", &earlyoom),
    ];
    let load = loadavg();
    eprintln!("bench: oom-race peers in the VM ({MEMORY_MIB} MiB, load {load:.2})");
    let mut console = Vec::new();
    let mut echo = |line: &str| {
        eprintln!("{line}");
        console.push(line.to_string());
    };
    let runs: [(&Path, &[&str]); 5] = [
        (&runner, &["kernel", &baseline]),
        (&runner, &["earlyoom", &trials]),
        (&runner, &["agent", &trials]),
        (&runner, &["agent-no-brake", &trials]),
        (&runner, &[AGENT_EARLIER, &trials]),
    ];
    vm::run_on_debian_kernel(MEMORY_MIB, &runs, &env, &mut echo)?;
    let oomd_runs: [(&Path, &[&str]); 1] = [(&runner, &["systemd-oomd", &trials])];
    let units = [("/etc/systemd/system/pods.slice", PODS_SLICE)];
    // A failure here leaves the other peers' figures standing, and says why.
    let oomd = vm::run_under_systemd(MEMORY_MIB, &oomd_runs, &env, &units, &mut echo)
        .err()
        .map(|e| format!("not measured: the VM with systemd as PID 1 failed: {e:#}"));
    // The smoke proves each peer's machinery runs, systemd's boot included.
    if let (Size::Smoke, Some(why)) = (size, &oomd) {
        bail!("systemd-oomd {why}");
    }
    let trials = parse(&console.join("\n"))?;
    if trials.is_empty() {
        bail!("the VM printed no oom-peers line");
    }
    let summaries = summarize(&trials);
    for (peer, summary) in &summaries {
        let asked = if peer == "kernel" {
            baseline_n
        } else {
            trials_n
        };
        size.expect_trials(&format!("peer {peer}"), summary.trials, asked)?;
    }
    for peer in [
        "kernel",
        "earlyoom",
        "agent",
        "agent-no-brake",
        AGENT_EARLIER,
        "systemd-oomd",
    ] {
        if size == Size::Smoke && !summaries.iter().any(|(p, _)| p == peer) {
            bail!("no trial of peer {peer}");
        }
    }
    println!("{}", table(&summaries, oomd.as_deref()));
    let figures = summaries
        .iter()
        .map(|(peer, s)| {
            Figure::new(
                "oom-race",
                &format!("peer {peer} (whole node, VM)"),
                "win rate",
                100.0 * s.wins as f64 / s.trials.max(1) as f64,
                "%",
            )
            .note(format!(
                "{}/{} trials; peer killed {}; kernel killed {}",
                s.wins,
                s.trials,
                victims(&s.peer_killed),
                victims(&s.kernel_killed)
            ))
            .on(machine, load)
        })
        .collect();
    let raw = json!({
        "memory_mib": MEMORY_MIB,
        "kernel": "6.1",
        "load": load,
        "peers": summaries.iter().map(|(peer, s)| json!({
            "peer": peer,
            "trials": s.trials,
            "wins": s.wins,
            "peer_first": s.peer_first,
            "kernel_first": s.kernel_first,
            "peer_killed": victims(&s.peer_killed),
            "kernel_killed": victims(&s.kernel_killed),
            "hog_ended_ms": s.hog_ended_ms,
        })).collect::<Vec<_>>(),
        "systemd_oomd_failure": oomd,
    });
    Ok(Section { figures, raw })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(peer: &str, oom_kills: u64, log: &[&str]) -> String {
        format!(
            "oom-peers {}",
            json!({
                "peer": peer,
                "trial": 0,
                "hog_mib": 900,
                "hog_ended_ms": 812.5,
                "oom_kills": oom_kills,
                "roles": {"101": "hog", "102": "steady", "103": "steady"},
                "log": log,
            })
        )
    }

    const TERM_HOG: &str = "oom-peers peer: sending SIGTERM to process 101 uid 0 \"alloc\": \
                            badness 873, VmRSS 812 MiB";
    const KILL_HOG: &str = "oom-peers peer: sending SIGKILL to process 101 uid 0 \"alloc\": \
                            badness 873, VmRSS 840 MiB";
    const KERNEL_HOG: &str = "Out of memory: Killed process 101 (alloc) total-vm:913000kB, \
                              anon-rss:880000kB, file-rss:4kB, shmem-rss:0kB, UID:0";
    const KERNEL_STEADY: &str = "Out of memory: Killed process 102 (alloc) total-vm:70000kB";
    const KERNEL_OTHER: &str = "Out of memory: Killed process 77 (earlyoom) total-vm:2000kB";
    const OOMD_HOG: &str = "systemd-oomd[212]: Killed /pods.slice/hog-0.scope due to memory \
                            pressure for /pods.slice being 71.20% > 50.00% for > 20s with \
                            reclaim activity";
    const AGENT_HOG: &str = r#"oom-peers peer: {"action":"evict","monotonic_ns":1,"namespace":"default","name":"hog-0","uid":"u"#;
    const AGENT_STEADY: &str =
        r#"oom-peers peer: {"action":"evict","namespace":"default","name":"steady-0-1"}"#;

    #[test]
    fn trials_read_who_killed_what_in_order() {
        type Kills = Vec<(Actor, Victim)>;
        let cases: [(&str, String, Kills, bool); 8] = [
            (
                "earlyoom stops the hog, SIGKILL after SIGTERM counted once",
                line("earlyoom", 0, &[TERM_HOG, KILL_HOG]),
                vec![(Actor::Peer, Victim::Hog)],
                true,
            ),
            (
                "the kernel fires before the peer's line",
                line("earlyoom", 1, &[KERNEL_HOG, TERM_HOG]),
                vec![(Actor::Kernel, Victim::Hog), (Actor::Peer, Victim::Hog)],
                false,
            ),
            (
                "the kernel alone, a steady process first",
                line("kernel", 2, &[KERNEL_STEADY, KERNEL_HOG]),
                vec![
                    (Actor::Kernel, Victim::Steady),
                    (Actor::Kernel, Victim::Hog),
                ],
                false,
            ),
            (
                "the agent's truncated decision still names its pod",
                line("agent", 0, &[AGENT_HOG]),
                vec![(Actor::Peer, Victim::Hog)],
                true,
            ),
            (
                "a peer that kills a steady pod first loses",
                line("agent", 0, &[AGENT_STEADY, AGENT_HOG]),
                vec![(Actor::Peer, Victim::Steady), (Actor::Peer, Victim::Hog)],
                false,
            ),
            (
                "systemd-oomd's kill through journald names the pod's scope",
                line("systemd-oomd", 0, &[OOMD_HOG]),
                vec![(Actor::Peer, Victim::Hog)],
                true,
            ),
            (
                "a process of no role is named by its command",
                line("kernel", 1, &[KERNEL_OTHER, "unrelated record"]),
                vec![(Actor::Kernel, Victim::Other("earlyoom".into()))],
                false,
            ),
            (
                "kills the log lost are counted from the kernel's counter",
                line("earlyoom", 1, &[TERM_HOG]),
                vec![
                    (Actor::Peer, Victim::Hog),
                    (Actor::Kernel, Victim::Other("unlogged".into())),
                ],
                false,
            ),
        ];
        for (name, text, kills, win) in cases {
            let trials = parse(&format!("[  3.1] boot noise\n{text}\r\n")).unwrap();
            assert_eq!(trials.len(), 1, "{name}");
            assert_eq!(trials[0].kills, kills, "{name}");
            assert_eq!(trials[0].win(), win, "{name}");
        }
    }

    #[test]
    fn malformed_lines_fail_loudly() {
        assert!(parse("oom-peers {not json").is_err());
        assert!(parse(r#"oom-peers {"peer":"earlyoom"}"#).is_err());
        assert!(parse("nothing here").unwrap().is_empty());
    }

    #[test]
    fn summaries_count_per_peer_in_order_of_appearance() {
        let text = [
            line("kernel", 1, &[KERNEL_HOG]),
            line("earlyoom", 0, &[TERM_HOG]),
            line("earlyoom", 1, &[KERNEL_HOG]),
        ]
        .join("\n");
        let summaries = summarize(&parse(&text).unwrap());
        let peers: Vec<&str> = summaries.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(peers, ["kernel", "earlyoom"]);
        let earlyoom = &summaries[1].1;
        assert_eq!(
            (
                earlyoom.trials,
                earlyoom.wins,
                earlyoom.peer_first,
                earlyoom.kernel_first
            ),
            (2, 1, 1, 1)
        );
        assert_eq!(earlyoom.peer_killed, BTreeMap::from([(Victim::Hog, 1)]));
        assert_eq!(earlyoom.kernel_killed, BTreeMap::from([(Victim::Hog, 1)]));
        assert_eq!(earlyoom.hog_ended_ms, Some(812.5));
        let table = table(&summaries, Some("not measured: why"));
        let row = table.lines().find(|l| l.starts_with("earlyoom")).unwrap();
        assert!(row.contains("1/1") && row.contains("hog x1"), "{table}");
        assert!(
            table.ends_with("systemd-oomd: not measured: why"),
            "{table}"
        );
    }
}
