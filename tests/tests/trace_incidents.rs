//! `monitor trace` during a real incident: a cgroup with a 64 MiB limit whose process fills
//! page cache and then allocates past the limit, so its tasks stall in memcg reclaim and the
//! OOM killer ends it. The trace runs as a subprocess and its JSON lines are checked: stalls,
//! the kill, and the PSI pressure they cause (node-wide, and per cgroup where the memory
//! controller is on cgroup2).
use std::{
    fs,
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;
use tests::{TestCgroup, Trace, binary, cgroup_tree::spawn_in, running_as_root, set_memory_limit};

const LIMIT: u64 = 64 << 20;

/// One incident at a time: each trace sees every cgroup's events, and three overruns traced
/// three times over can fill the ring buffer and drop the OOM record the tests look for.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Starts `monitor trace --output json` with extra arguments.
/// The `--duration` cap of every trace: each test interrupts its trace once its workload is
/// over, so the cap only ends a trace whose test hangs. The emulated VM takes tens of seconds
/// for what takes one or two here.
const TRACE_CAP: &str = "300s";

/// How long the last events may take to reach the trace after the workload ended: a PSI
/// trigger reports within its 2 s window, and the emulated VM runs the tracer seconds behind
/// when the stat programs are busy.
fn settle() -> Duration {
    if std::env::var_os("MONITOR_VM").is_some() {
        Duration::from_secs(6)
    } else {
        Duration::from_secs(3)
    }
}

fn start_trace(args: &[&str]) -> Trace {
    let mut all = vec!["--output", "json", "--min-stall", "1ms"];
    all.extend_from_slice(args);
    Trace::start(&all)
}

/// Ends `trace` with Ctrl-C once the last records had time to arrive; its JSON lines (the
/// summary last) and its stderr.
fn finish(trace: Trace) -> (Vec<Value>, String) {
    let (status, stdout, stderr) = trace.interrupt(settle());
    assert!(status.success(), "monitor trace failed: {stderr}");
    let lines = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}")))
        .collect();
    (lines, stderr)
}

/// An OOM kill of one of the workload's processes (the shell that becomes the allocator, or
/// its `dd`: which one the kernel picks depends on whether the page cache is reclaimable).
fn is_workload_kill(kill: &Value, shell_pid: u32) -> bool {
    kill["pid"] == shell_pid || kill["comm"] == "dd"
}

/// Inside `cgroup_dir`: writes and reads back 128 MiB of page cache (reclaimed under the
/// limit, which is where tasks stall), then allocates 96 MiB of anonymous memory, which the
/// limit cannot hold without swap. Returns the process; its pid is the OOM victim's.
fn overrun(cgroup_dir: &Path, scratch: &Path) -> Child {
    let file = scratch.join("cache");
    let commands = scratch.join("commands");
    fs::write(&commands, "alloc 96\n").unwrap();
    // `exec` keeps the shell's pid, so the spawned child's pid is the victim's.
    let script = format!(
        "dd if=/dev/zero of={f} bs=1M count=128 2>/dev/null && cat {f} >/dev/null && \
         exec {alloc} <{c}",
        f = file.display(),
        c = commands.display(),
        alloc = binary("alloc", "MONITOR_ALLOC_BIN").display()
    );
    let mut cmd = Command::new("sh");
    cmd.args(["-c", &script]).stdout(Stdio::null());
    spawn_in(&mut cmd, cgroup_dir).expect("starting the overrun")
}

/// Waits until `pid` has exited without being reaped: the state `/proc/PID/stat` gives
/// after the command's closing parenthesis is then `Z`.
fn wait_until_zombie(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.chars().next());
        if state == Some('Z') {
            return;
        }
        assert!(Instant::now() < deadline, "pid {pid} still runs: {stat}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn limited_child(cgroup: &TestCgroup, name: &str) -> std::path::PathBuf {
    let dir = cgroup.child(name);
    set_memory_limit(&dir, LIMIT).expect("setting the memory limit");
    dir
}

fn of_type<'a>(lines: &'a [Value], kind: &str) -> Vec<&'a Value> {
    lines.iter().filter(|l| l["type"] == kind).collect()
}

#[test]
fn limit_overrun_shows_stalls_then_the_oom_kill_of_that_cgroup() {
    if !running_as_root("limit_overrun_shows_stalls_then_the_oom_kill_of_that_cgroup") {
        return;
    }
    let _serial = serial();
    let cgroup = TestCgroup::create("incident");
    let dir = limited_child(&cgroup, "app");
    let app = cgroup.child_rel("app");
    let scratch = tempdir("incident");
    // Per-cgroup PSI lives in cgroup2: the limited cgroup has it when the memory controller
    // is on cgroup2 (the test VM), not on a host with the memory controller on v1.
    let cgroup_psi = dir.join("memory.pressure").exists();
    let trace = start_trace(&[
        "--duration",
        TRACE_CAP,
        "--cgroup",
        &cgroup.rel,
        "--psi-stall",
        "1ms",
    ]);
    let mut victim = overrun(&dir, &scratch);
    let pid = victim.id();
    let status = victim.wait().unwrap();
    let (lines, stderr) = finish(trace);
    let _ = fs::remove_dir_all(&scratch);
    assert!(
        !status.success(),
        "the overrun survived a 64 MiB limit: {status:?}"
    );

    let stalls = of_type(&lines, "stall");
    assert!(!stalls.is_empty(), "no reclaim stalls; stderr: {stderr}");
    for stall in &stalls {
        assert_eq!(
            stall["cgroup_path"],
            app.as_str(),
            "stall attributed elsewhere: {stall}"
        );
        assert!(
            stall["duration_ns"].as_u64().unwrap() >= 1_000_000,
            "below --min-stall: {stall}"
        );
        assert_eq!(stall["reclaim"], "memcg", "{stall}");
    }
    let kills = of_type(&lines, "oom_kill");
    assert!(
        kills
            .iter()
            .any(|k| is_workload_kill(k, pid) && k["cgroup_path"] == app.as_str()),
        "no OOM kill of pid {pid} in {app}: {kills:?}; stderr: {stderr}"
    );
    // A stall is reported when it ends, which can be after the kill it led to; compare when
    // they began.
    let time = |l: &&Value| l["monotonic_ns"].as_u64().unwrap();
    let first_kill = kills.iter().map(time).min().unwrap();
    let first_stall = stalls.iter().map(time).min().unwrap();
    assert!(first_stall < first_kill, "stalls begin before the kill");
    for line in &lines {
        if let Some(path) = line["cgroup_path"].as_str() {
            assert!(path.starts_with(&cgroup.rel), "--cgroup let through {line}");
        }
    }
    let pressure = of_type(&lines, "pressure");
    // The stalls count towards the node's PSI too, where the kernel has it.
    if Path::new("/proc/pressure/memory").exists() {
        assert!(
            pressure
                .iter()
                .any(|p| p["scope"] == "node" && p["some_total_us"].as_u64().unwrap() > 0),
            "no node PSI pressure: {pressure:?}; stderr: {stderr}"
        );
    }
    if cgroup_psi {
        assert!(
            pressure.iter().any(|p| p["scope"] == "cgroup"
                && p["cgroup_path"] == app.as_str()
                && p["some_total_us"].as_u64().unwrap() > 0),
            "no PSI pressure of {app}: {pressure:?}; stderr: {stderr}"
        );
    } else {
        eprintln!("no per-cgroup PSI for {app} here (memory controller on cgroup v1): not checked");
    }
    let summary = lines.last().unwrap();
    assert_eq!(summary["type"], "summary", "the last line is the summary");
    assert_eq!(
        summary["most_stalled"][0]["subject"],
        app.as_str(),
        "{summary}"
    );
    assert!(summary["most_stalled"][0]["stall_ns"].as_u64().unwrap() > 0);
    assert!(
        summary["oom_kills"]
            .as_array()
            .unwrap()
            .iter()
            .any(|k| is_workload_kill(k, pid)),
        "{summary}"
    );
    let total_ms: f64 = stalls
        .iter()
        .map(|s| s["duration_ns"].as_u64().unwrap() as f64 / 1e6)
        .sum();
    let max_ms = stalls
        .iter()
        .map(|s| s["duration_ns"].as_u64().unwrap() as f64 / 1e6)
        .fold(0.0, f64::max);
    eprintln!(
        "observed: {} stalls, {total_ms:.1} ms in total, longest {max_ms:.1} ms",
        stalls.len()
    );
}

#[test]
fn cgroup_filter_selects_exactly_the_requested_cgroup() {
    if !running_as_root("cgroup_filter_selects_exactly_the_requested_cgroup") {
        return;
    }
    let _serial = serial();
    let cgroup = TestCgroup::create("incident-filter");
    let watched = limited_child(&cgroup, "watched");
    let other = limited_child(&cgroup, "other");
    let (watched_rel, other_rel) = (cgroup.child_rel("watched"), cgroup.child_rel("other"));
    let scratch = tempdir("filter");
    let trace = start_trace(&["--duration", TRACE_CAP, "--cgroup", &watched_rel]);
    let (a, b) = (scratch.join("a"), scratch.join("b"));
    fs::create_dir_all(&a).unwrap();
    fs::create_dir_all(&b).unwrap();
    let mut first = overrun(&other, &b);
    first.wait().unwrap();
    let mut second = overrun(&watched, &a);
    let watched_pid = second.id();
    second.wait().unwrap();
    let (lines, stderr) = finish(trace);
    let _ = fs::remove_dir_all(&scratch);
    assert!(
        of_type(&lines, "oom_kill")
            .iter()
            .any(|k| is_workload_kill(k, watched_pid)),
        "the watched cgroup's kill is missing: {:?}; stderr: {stderr}",
        of_type(&lines, "oom_kill")
    );
    for line in &lines {
        if let Some(path) = line["cgroup_path"].as_str() {
            assert_eq!(
                path, watched_rel,
                "filter let through {other_rel}'s line or another: {line}"
            );
        }
    }
}

/// A scratch directory for page-cache files, outside any test cgroup's limits.
fn tempdir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("monitor-test-{}-{name}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn pod_attribution_and_pod_filter_name_the_pod() {
    if !running_as_root("pod_attribution_and_pod_filter_name_the_pod") {
        return;
    }
    let _serial = serial();
    let cgroup = TestCgroup::create("incident-pods");
    let uid = "5f0c6a1e-0000-4000-8000-00000000beef";
    let pod_dir = limited_child(&cgroup, &format!("kubepods/burstable/pod{uid}"));
    let sibling = limited_child(&cgroup, "kubepods/burstable/podother");
    let scratch = tempdir("pods");
    let manifests = scratch.join("manifests");
    fs::create_dir_all(&manifests).unwrap();
    // Burstable: requests without equal limits.
    fs::write(
        manifests.join("web.yaml"),
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  namespace: shop\n  uid: {uid}\n\
             spec:\n  containers:\n  - name: app\n    image: app\n    resources:\n      requests:\n        memory: 32Mi\n"
        ),
    )
    .unwrap();
    let kubepods = format!("{}/kubepods", cgroup.rel);
    let trace = start_trace(&[
        "--duration",
        TRACE_CAP,
        "--pods",
        manifests.to_str().unwrap(),
        "--kubepods-cgroup",
        &kubepods,
        "--pod",
        "shop/web",
    ]);
    let (a, b) = (scratch.join("a"), scratch.join("b"));
    fs::create_dir_all(&a).unwrap();
    fs::create_dir_all(&b).unwrap();
    overrun(&sibling, &b).wait().unwrap();
    let mut victim = overrun(&pod_dir, &a);
    let pid = victim.id();
    victim.wait().unwrap();
    let (lines, stderr) = finish(trace);
    let _ = fs::remove_dir_all(&scratch);
    let attributed: Vec<&Value> = lines
        .iter()
        .filter(|l| l.get("cgroup_path").is_some() && l["type"] != "summary")
        .collect();
    assert!(
        !attributed.is_empty(),
        "nothing shown for the pod; stderr: {stderr}"
    );
    for line in &attributed {
        assert_eq!(line["pod"]["namespace"], "shop", "--pod let through {line}");
        assert_eq!(line["pod"]["name"], "web", "{line}");
        assert_eq!(line["pod"]["uid"], uid, "{line}");
    }
    assert!(
        of_type(&lines, "oom_kill")
            .iter()
            .any(|k| is_workload_kill(k, pid)),
        "the pod's OOM kill is missing; stderr: {stderr}"
    );
    let summary = lines.last().unwrap();
    assert_eq!(
        summary["most_stalled"][0]["subject"], "shop/web",
        "{summary}"
    );
}

#[test]
fn trace_kube_attributes_events_to_the_pods_the_api_server_lists() {
    if !running_as_root("trace_kube_attributes_events_to_the_pods_the_api_server_lists") {
        return;
    }
    let _serial = serial();
    // A MOCK API server: no real one can run here.
    let api = tests::kube_api::MockKubeApi::start("node-a");
    let web = tests::TestPod::new("web").request_mib(32);
    api.apply_pod(&web);
    let cgroup = TestCgroup::create("incident-kube-pods");
    let pod_dir = limited_child(&cgroup, &format!("kubepods/burstable/pod{}", web.uid));
    let scratch = tempdir("kube-pods");
    let kubeconfig = scratch.join("kubeconfig");
    api.write_kubeconfig(&kubeconfig);
    let kubepods = format!("{}/kubepods", cgroup.rel);
    // No manifests directory: the pods come from the API.
    let trace = start_trace(&[
        "--duration",
        TRACE_CAP,
        "--kube",
        "--node-name",
        "node-a",
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--kubepods-cgroup",
        &kubepods,
        "--pod",
        "default/web",
    ]);
    let work = scratch.join("a");
    fs::create_dir_all(&work).unwrap();
    overrun(&pod_dir, &work).wait().unwrap();
    let (lines, stderr) = finish(trace);
    let _ = fs::remove_dir_all(&scratch);
    let attributed: Vec<&Value> = lines
        .iter()
        .filter(|l| l.get("cgroup_path").is_some() && l["type"] != "summary")
        .collect();
    assert!(
        !attributed.is_empty(),
        "nothing shown for the pod; stderr: {stderr}"
    );
    for line in &attributed {
        assert_eq!(line["pod"]["namespace"], "default", "{line}");
        assert_eq!(line["pod"]["name"], "web", "{line}");
        assert_eq!(line["pod"]["uid"], web.uid.as_str(), "{line}");
    }
    assert!(
        api.requests().iter().any(|r| r.path() == "/api/v1/pods"),
        "the pods were listed"
    );
}

/// An OOM storm: 40 cgroups of 16 MiB, each with a process that allocates 64 MiB at once, so
/// 40 OOM kills land within a second or two. A victim leaves its cgroup as it exits (its
/// `/proc/PID/cgroup` then names the root until it is reaped), often before the trace reads
/// it: every kill must still name its own cgroup, which the kernel program records at the kill.
#[test]
fn every_kill_of_an_oom_storm_names_its_own_cgroup() {
    if !running_as_root("every_kill_of_an_oom_storm_names_its_own_cgroup") {
        return;
    }
    const VICTIMS: usize = 40;
    let _serial = serial();
    let cgroup = TestCgroup::create("storm");
    let dirs: Vec<_> = (0..VICTIMS)
        .map(|i| {
            let dir = cgroup.child(&format!("c{i}"));
            set_memory_limit(&dir, 16 << 20).expect("setting the memory limit");
            dir
        })
        .collect();
    let trace = start_trace(&["--duration", TRACE_CAP, "--cgroup", &cgroup.rel]);
    let alloc = binary("alloc", "MONITOR_ALLOC_BIN");
    let mut victims: Vec<(u32, String, Child)> = dirs
        .iter()
        .enumerate()
        .map(|(i, dir)| {
            let mut cmd = Command::new(&alloc);
            cmd.stdin(Stdio::piped()).stdout(Stdio::null());
            let child = spawn_in(&mut cmd, dir).expect("starting a victim");
            (child.id(), cgroup.child_rel(&format!("c{i}")), child)
        })
        .collect();
    // All start allocating together.
    for (_, _, child) in &mut victims {
        use std::io::Write as _;
        let _ = child.stdin.take().unwrap().write_all(b"alloc 64\n");
    }
    // Reaped only after the trace: a parent slow to reap (a shell, a container shim) leaves
    // each victim a zombie, whose `/proc/PID/cgroup` names the root.
    for (pid, _, _) in &victims {
        wait_until_zombie(*pid);
    }
    let (lines, stderr) = finish(trace);
    for (_, _, child) in &mut victims {
        let status = child.wait().unwrap();
        assert!(!status.success(), "a victim outlived its limit: {status:?}");
    }
    let kills = of_type(&lines, "oom_kill");
    let mut wrong = Vec::new();
    for (pid, rel, _) in &victims {
        let named: Vec<_> = kills.iter().filter(|k| k["pid"] == *pid).collect();
        if named.len() != 1 || named[0]["cgroup_path"] != rel.as_str() {
            wrong.push(format!("pid {pid} of {rel}: {named:?}"));
        }
    }
    let mut sources = std::collections::BTreeMap::new();
    for kill in &kills {
        *sources
            .entry(kill["cgroup_source"].as_str().unwrap_or("?"))
            .or_insert(0) += 1;
    }
    eprintln!(
        "observed: {} kills, by cgroup source {sources:?}",
        kills.len()
    );
    assert!(
        wrong.is_empty(),
        "{} of {VICTIMS} kills missing or named elsewhere:\n{}\nstderr: {stderr}",
        wrong.len(),
        wrong.join("\n")
    );
}
