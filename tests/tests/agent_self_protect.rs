//! The agent protects itself (root only): it lowers its own OOM score, locks its memory, and
//! when it runs inside a pod that pod is never its victim, even where the kubelet's order
//! would rank it first.
use std::{fs, time::Duration};

use tests::{
    AgentScene, MonitorProcess, Reason, TestPod, cannot_run, has_cap_sys_resource, http_get,
    metric, metrics_addr, process_alive, running_as_root, set_memory_limit,
};

/// How long a decision may take to show up once the threshold is crossed (a slow VM
/// included).
const DECIDE: Duration = Duration::from_secs(20);
const KILL: Duration = Duration::from_secs(15);

/// A field of /proc/<pid>/status, in kB.
fn status_kb(pid: u32, field: &str) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).expect("process status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in {status}"))
}

/// The agent runs with `want` as its oom_score_adj; below 0 without the capability to set it,
/// it must have said so instead.
fn assert_oom_score_adj(agent: &MonitorProcess, want: i32) {
    let adj = fs::read_to_string(format!("/proc/{}/oom_score_adj", agent.pid())).unwrap();
    // Lowering an oom_score_adj below 0 needs CAP_SYS_RESOURCE, which some containers drop
    // even for root.
    if want < 0 && !has_cap_sys_resource() {
        cannot_run(
            Reason::CapSysResource,
            &format!("oom_score_adj {want} cannot be set; checking the warning"),
        );
        assert_eq!(adj.trim(), "0");
        assert!(
            agent
                .stderr()
                .contains(&format!("could not set oom_score_adj {want}")),
            "no warning: {}",
            agent.stderr()
        );
        return;
    }
    assert_eq!(adj.trim(), want.to_string(), "the agent's oom_score_adj");
}

#[test]
fn an_agent_inside_a_best_effort_pod_evicts_another_pod_and_not_its_own() {
    if !running_as_root("an_agent_inside_a_best_effort_pod_evicts_another_pod_and_not_its_own") {
        return;
    }
    let scene = AgentScene::new("self-protect", "10s", "10s");
    // Best-effort at priority 0: over its (absent) request and least important, so first in
    // the kubelet's order; the hog runs at priority 1000.
    let own = TestPod::new("agent");
    let hog = TestPod::new("hog").request_mib(10).priority(1000);
    scene.write_manifest(&own);
    let container = scene.kubepods.create_pod(own.qos(), &own.uid);
    let mut agent = scene.start_agent_in(&[], &container);
    let mut sidecar = tests::Allocator::start_in(&container);
    sidecar.alloc(30);
    assert_oom_score_adj(&agent, -999);
    assert!(
        status_kb(agent.pid(), "VmLck") > 0,
        "the agent's memory is not locked: {}",
        agent.stderr()
    );
    let mut hog_proc = scene.start_pod(&hog);
    // Evicted while it allocates: the answer may never come.
    hog_proc.command("alloc 200");

    let decision = agent.next_decision(DECIDE);
    assert_eq!(decision["action"], "evict", "{decision:#}");
    assert_eq!(decision["name"], hog.name.as_str(), "{decision:#}");
    scene.wait_until_empty(&hog, KILL);
    assert!(process_alive(agent.pid()), "the agent is gone");
    assert!(
        process_alive(sidecar.pid()),
        "the agent's sidecar was killed"
    );
    let notes = agent
        .stderr()
        .lines()
        .filter(|l| l.contains("never a candidate"))
        .count();
    assert_eq!(notes, 1, "the exclusion is logged once: {}", agent.stderr());
    agent.stop();
}

#[test]
fn oom_score_adj_and_memory_locking_follow_the_flags() {
    if !running_as_root("oom_score_adj_and_memory_locking_follow_the_flags") {
        return;
    }
    let scene = AgentScene::new("self-protect-flags", "10s", "10s");
    // Raising needs no privilege, so this runs wherever the test does.
    let args = ["--oom-score-adj", "500", "--no-mlock", "--duration", "2s"];
    let mut agent = scene.start_agent(&args);
    assert_oom_score_adj(&agent, 500);
    assert_eq!(
        status_kb(agent.pid(), "VmLck"),
        0,
        "locked despite --no-mlock"
    );
    let status = agent
        .wait(Duration::from_secs(10))
        .expect("the agent exits");
    assert!(status.success(), "{status}: {}", agent.stderr());
}

/// The memory cgroup's charge (`memory.usage_in_bytes` on v1, `memory.current` on v2).
fn charge_of(cgroup: &std::path::Path) -> u64 {
    fs::read_to_string(cgroup.join("memory.usage_in_bytes"))
        .or_else(|_| fs::read_to_string(cgroup.join("memory.current")))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// The charge once two reads half a second apart differ by less than 256 KiB (at most ten
/// seconds of reads).
fn settled_charge(cgroup: &std::path::Path) -> u64 {
    let mut last = charge_of(cgroup);
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(500));
        let now = charge_of(cgroup);
        if now.abs_diff(last) < 256 << 10 {
            return now;
        }
        last = now;
    }
    last
}

/// The kernel charges the agent's cgroup for more than its RSS (its kernel maps, locked
/// pages, page cache); the agent publishes that charge and its limit and says loudly, once,
/// when the charge nears the limit, and again when it is back within.
#[test]
fn the_agent_publishes_its_own_memory_charge_and_says_when_it_nears_its_limit() {
    if !running_as_root("the_agent_publishes_its_own_memory_charge") {
        return;
    }
    const ROOMY: u64 = 256 << 20;
    let scene = AgentScene::new("own-memory", "10s", "10s");
    let own = scene.cgroup.child("agent");
    set_memory_limit(&own, ROOMY).unwrap();
    let mut agent = scene.start_agent_in(
        &["--metrics-addr", "127.0.0.1:0", "--resync-interval", "1s"],
        &own,
    );
    let addr = metrics_addr(&agent);
    // The endpoint serves from its start; the agent's first snapshot follows its first read.
    let mut metrics = http_get(addr, "/metrics");
    for _ in 0..50 {
        if metric(&metrics, "monitor_own_memory_charged_bytes").is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        metrics = http_get(addr, "/metrics");
    }
    let charged = metric(&metrics, "monitor_own_memory_charged_bytes")
        .unwrap_or_else(|| panic!("no charge published in 5 s:\n{metrics}"));
    assert_eq!(
        metric(&metrics, "monitor_own_memory_limit_bytes"),
        Some(ROOMY)
    );
    let charged_by_kernel = settled_charge(&own);
    // At least its heap, stacks and page tables: about 4 MiB in a VM, whose RAM disk's pages
    // (the agent's binary) were charged to the root when the kernel unpacked it.
    assert!(
        charged > 2 << 20 && charged.abs_diff(charged_by_kernel) < 8 << 20,
        "published {charged}, the cgroup says {charged_by_kernel}"
    );
    assert!(
        !agent.stderr().contains("memory cgroup"),
        "{}",
        agent.stderr()
    );

    // A limit the charge is 85% of: near it (80% and above), with room left for the agent to
    // run on. Taken from the settled charge, for the kernel frees the programs' load-time
    // memory a while after they load.
    let tight = (settled_charge(&own) * 100 / 85).next_multiple_of(4096);
    set_memory_limit(&own, tight).unwrap();
    agent
        .wait_stderr(Duration::from_secs(10), |l| {
            l.contains("ERROR") && l.contains("memory cgroup") && l.contains("of its")
        })
        .unwrap_or_else(|| panic!("no error near the limit:\n{}", agent.stderr()));
    set_memory_limit(&own, ROOMY).unwrap();
    agent
        .wait_stderr(Duration::from_secs(10), |l| {
            l.contains("again, within its limit")
        })
        .unwrap_or_else(|| panic!("not said back within:\n{}", agent.stderr()));
    assert_eq!(
        agent
            .stderr()
            .lines()
            .filter(|l| l.contains("ERROR") && l.contains("memory cgroup"))
            .count(),
        1,
        "once per episode:\n{}",
        agent.stderr()
    );
    agent.assert_running("after the pressure");
}

/// One mapping of `/proc/<pid>/smaps`: its path (empty when anonymous), its size and what of
/// it is resident (kB), and its flags (`lo` locked, `lf` locked as touched).
struct Mapping {
    path: String,
    size_kb: u64,
    resident_kb: u64,
    flags: Vec<String>,
}

fn mappings(pid: u32) -> Vec<Mapping> {
    let smaps = fs::read_to_string(format!("/proc/{pid}/smaps")).expect("smaps");
    let mut all: Vec<Mapping> = Vec::new();
    for line in smaps.lines() {
        let field = |name: &str| {
            line.strip_prefix(name)
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        };
        if let Some(kb) = field("Size:") {
            all.last_mut().expect("a mapping's head").size_kb = kb;
        } else if let Some(kb) = field("Rss:") {
            all.last_mut().expect("a mapping's head").resident_kb = kb;
        } else if let Some(flags) = line.strip_prefix("VmFlags:") {
            all.last_mut().expect("a mapping's head").flags =
                flags.split_whitespace().map(String::from).collect();
        } else if line.split_whitespace().next().is_some_and(|a| {
            a.contains('-') && a.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
        }) {
            all.push(Mapping {
                path: line.split_whitespace().nth(5).unwrap_or("").to_string(),
                size_kb: 0,
                resident_kb: 0,
                flags: Vec::new(),
            });
        }
    }
    all
}

/// The binary's pages are all resident and locked from the start (the eviction path that
/// has not run yet is never read back from disk under pressure), while what is mapped later
/// (a thread's stack, an allocator's reserve) is locked page by page as it is touched, not
/// charged whole.
#[test]
fn the_agent_s_code_is_locked_whole_and_later_mappings_as_they_are_touched() {
    if !running_as_root("the_agent_s_code_is_locked_whole") {
        return;
    }
    let scene = AgentScene::new("lock-on-fault", "10s", "10s");
    let mut agent = scene.start_agent(&[]);
    let exe = fs::read_link(format!("/proc/{}/exe", agent.pid())).unwrap();
    let all = mappings(agent.pid());
    let code: Vec<&Mapping> = all
        .iter()
        .filter(|m| m.path == exe.to_string_lossy())
        .collect();
    assert!(!code.is_empty(), "no mapping of {}", exe.display());
    for m in &code {
        assert!(
            m.flags.iter().any(|f| f == "lo") && m.resident_kb == m.size_kb,
            "{} mapped {} kB, {} kB resident, flags {:?}",
            m.path,
            m.size_kb,
            m.resident_kb,
            m.flags
        );
    }
    let on_fault: Vec<&Mapping> = all
        .iter()
        .filter(|m| m.path.is_empty() && m.flags.iter().any(|f| f == "lf"))
        .collect();
    assert!(
        // Prefaulted whole (MCL_FUTURE without MCL_ONFAULT), every one would be resident.
        on_fault.iter().any(|m| m.resident_kb < m.size_kb),
        "no later mapping is locked only where touched: {:?}",
        on_fault
            .iter()
            .map(|m| (m.size_kb, m.resident_kb))
            .collect::<Vec<_>>()
    );
    // Read at start-up, maybe before the loop handles SIGTERM: any end will do.
    agent.terminate();
    agent.wait(Duration::from_secs(10)).expect("the agent ends");
}
