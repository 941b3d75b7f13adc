//! The agent's HTTP endpoints end to end (root only): the real `monitor` binary on a kubepods
//! tree of real cgroups, serving on loopback in a network namespace of the test's own, asked
//! `/healthz`, `/readyz` and `/debug/ranking` while a real process pushes a pod over the
//! scene's hard `allocatableMemory.available<100Mi` threshold, while its checkpoint
//! directory is a full tmpfs, and while a pod floods it with kernel records; and who may ask
//! what: a client at a second, non-loopback address of the namespace, and a request naming
//! another host.
use std::{
    fs,
    net::{Ipv4Addr, SocketAddr},
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

use serde_json::Value;
use tests::{
    AgentScene, TempDir, TestPod, add_loopback_alias, http_get_as, in_own_network_namespace,
    metrics_addr, mounts::Mount, running_as_root,
};

/// How long a decision may take once the threshold is crossed (a slow VM included).
const DECIDE: Duration = Duration::from_secs(20);
const MIB: i64 = 1 << 20;

/// Clears the flag it holds when dropped.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

/// The status line and the body of `GET path`.
fn get(addr: SocketAddr, path: &str) -> (String, String) {
    get_as(addr, path, &addr.to_string())
}

/// [`get`] with `host` as the `Host` header.
fn get_as(addr: SocketAddr, path: &str, host: &str) -> (String, String) {
    let answer = http_get_as(addr, path, host);
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no head in {answer:?}"));
    let status = head.lines().next().unwrap_or_default().to_string();
    (status, body.to_string())
}

/// Asks `path` until its answer starts with `status`, for at most `within`.
fn wait_for(addr: SocketAddr, path: &str, status: &str, within: Duration) -> String {
    let deadline = Instant::now() + within;
    loop {
        let (got, body) = get(addr, path);
        if got.starts_with(status) {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "{path} still answers {got} after {within:?}: {body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn health_readiness_and_the_ranking_answer_and_a_full_checkpoint_disk_is_not_ready() {
    if !running_as_root("health_readiness_and_the_ranking_answer") {
        return;
    }
    let scene = AgentScene::new("agent-endpoints", "10s", "5s");
    let disk = TempDir::new("agent-endpoints-disk");
    let mount = Mount::tmpfs(&disk.path, "64k");
    let state_dir = disk.join("state");
    fs::create_dir(&state_dir).unwrap();
    let state = state_dir.display().to_string();
    let over = TestPod::new("over").request_mib(20);
    let calm = TestPod::new("calm").request_mib(100);
    in_own_network_namespace(|| {
        let mut agent = scene.start_agent(&[
            "--dry-run",
            "--metrics-addr",
            "127.0.0.1:0",
            "--checkpoint-dir",
            &state,
            // Counters are checkpointed at each resync: the full disk shows within a second.
            "--resync-interval",
            "1s",
        ]);
        let addr = metrics_addr(&agent);
        let _calm_proc = scene.start_pod(&calm);
        let mut over_proc = scene.start_pod(&over);
        over_proc.alloc(230);
        let decision = agent.next_decision(DECIDE);
        assert_eq!(decision["name"], "over", "{decision:#}");

        let (status, body) = get(addr, "/healthz");
        assert!(status.starts_with("HTTP/1.1 200"), "{status}: {body}");
        assert!(body.starts_with("ok: event loop turned"), "{body}");
        let body = wait_for(addr, "/readyz", "HTTP/1.1 200", Duration::from_secs(5));
        assert!(body.contains("2 pods known"), "{body}");
        assert!(body.contains("checkpoint writable"), "{body}");

        let (status, body) = get(addr, "/debug/ranking");
        assert!(status.starts_with("HTTP/1.1 200"), "{status}: {body}");
        let view: Value = serde_json::from_str(&body).expect("JSON");
        let signal = view["signals"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["signal"] == "allocatableMemory.available")
            .unwrap_or_else(|| panic!("no allocatable signal: {view:#}"));
        assert_eq!(signal["capacity"], 300 * MIB, "{signal:#}");
        assert!(
            signal["available"].as_i64().unwrap() < 100 * MIB,
            "{signal:#}"
        );
        assert_eq!(signal["thresholds"][0]["kind"], "hard", "{signal:#}");
        assert_eq!(signal["thresholds"][0]["value"], 100 * MIB, "{signal:#}");
        assert_eq!(signal["thresholds"][0]["met"], true, "{signal:#}");
        let ranking = view["rankings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["signal"] == "allocatableMemory.available")
            .unwrap_or_else(|| panic!("no allocatable ranking: {view:#}"));
        assert_eq!(ranking["podsTotal"], 2, "{ranking:#}");
        let (first, second) = (&ranking["head"][0], &ranking["head"][1]);
        assert_eq!(first["name"], "over", "{ranking:#}");
        assert_eq!(first["exceedsRequest"], true, "{ranking:#}");
        assert_eq!(first["priority"], 0, "{ranking:#}");
        assert!(
            first["aboveRequest"].as_i64().unwrap() > 150 * MIB,
            "{ranking:#}"
        );
        assert_eq!(first["why"], "exceeds its request", "{ranking:#}");
        assert_eq!(second["name"], "calm", "{ranking:#}");
        assert_eq!(
            second["why"], "within its request; after #1: pods over their request go first",
            "{ranking:#}"
        );
        let last = view["decisions"].as_array().unwrap().last().cloned();
        let last = last.unwrap_or_else(|| panic!("no decision listed: {view:#}"));
        assert_eq!(last["name"], "over", "{last:#}");
        assert_eq!(last["action"], "would_evict", "{last:#}");
        assert!(
            last["text"]
                .as_str()
                .unwrap()
                .starts_with("would evict default/over"),
            "{last:#}"
        );
        assert!(
            view["source"]["description"]
                .as_str()
                .unwrap()
                .starts_with("ebpf"),
            "{view:#}"
        );
        assert!(
            view["source"]["eventsReceived"].as_u64().unwrap() > 0,
            "{view:#}"
        );

        // The checkpoint disk fills: not ready, naming why; healthy all the same.
        mount.fill();
        let body = wait_for(addr, "/readyz", "HTTP/1.1 503", Duration::from_secs(20));
        assert!(body.contains("checkpoint not writable for"), "{body}");
        assert!(body.contains("No space left on device"), "{body}");
        let (status, body) = get(addr, "/healthz");
        assert!(status.starts_with("HTTP/1.1 200"), "{status}: {body}");

        mount.make_room();
        let body = wait_for(addr, "/readyz", "HTTP/1.1 200", Duration::from_secs(20));
        assert!(body.contains("checkpoint writable"), "{body}");
        agent.stop();
    });
}

#[test]
fn pods_are_shown_to_loopback_clients_only_and_never_to_another_host_name() {
    if !running_as_root("pods_are_shown_to_loopback_clients_only") {
        return;
    }
    let scene = AgentScene::new("agent-endpoints-access", "10s", "5s");
    let pod = TestPod::new("private").request_mib(10);
    in_own_network_namespace(|| {
        let off_host = Ipv4Addr::new(10, 200, 0, 1);
        add_loopback_alias(off_host);
        // Every address, as the DaemonSet binds it.
        let mut agent = scene.start_agent(&["--dry-run", "--metrics-addr", "0.0.0.0:0"]);
        let port = metrics_addr(&agent).port();
        let local = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let remote = SocketAddr::from((off_host, port));
        let _pod_proc = scene.start_pod(&pod);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let (status, body) = get(local, "/debug/ranking");
            assert!(status.starts_with("HTTP/1.1 200"), "{status}: {body}");
            if body.contains(&pod.uid) || body.contains("\"private\"") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the ranking never lists the pod: {body}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        let (status, body) = get(local, "/metrics");
        assert!(status.starts_with("HTTP/1.1 200"), "{status}: {body}");

        // A client at the other address: the probes answer, the pods stay hidden.
        for path in ["/debug/ranking", "/metrics"] {
            let (status, body) = get(remote, path);
            assert!(
                status.starts_with("HTTP/1.1 403"),
                "{path}: {status}: {body}"
            );
            assert!(body.contains("loopback clients only"), "{path}: {body}");
        }
        let (status, body) = get(remote, "/healthz");
        assert!(status.starts_with("HTTP/1.1 200"), "{status}: {body}");
        let (status, body) = get(remote, "/readyz");
        assert!(
            status.starts_with("HTTP/1.1 200") || status.starts_with("HTTP/1.1 503"),
            "{status}: {body}"
        );

        // A page whose name was rebound to this address asks from loopback, with its name.
        for path in ["/debug/ranking", "/metrics", "/healthz"] {
            let (status, body) = get_as(local, path, &format!("evil.example:{port}"));
            assert!(
                status.starts_with("HTTP/1.1 421"),
                "{path}: {status}: {body}"
            );
        }
        let (status, body) = get_as(local, "/debug/ranking", &format!("localhost:{port}"));
        assert!(status.starts_with("HTTP/1.1 200"), "{status}: {body}");
        agent.stop();
    });
}

#[test]
fn an_idle_agent_that_polls_rarely_stays_healthy() {
    if !running_as_root("an_idle_agent_that_polls_rarely_stays_healthy") {
        return;
    }
    let scene = AgentScene::new("agent-endpoints-idle", "10s", "5s");
    in_own_network_namespace(|| {
        // Nothing arrives between polls 30 s apart (and no PSI wake-ups): only the loop's
        // own tick turns it.
        let mut agent = scene.start_agent(&[
            "--metrics-addr",
            "127.0.0.1:0",
            "--source",
            "poll",
            "--poll-interval",
            "30s",
            "--psi-stall",
            "0s",
        ]);
        let addr = metrics_addr(&agent);
        std::thread::sleep(Duration::from_secs(7));
        let (status, body) = get(addr, "/healthz");
        assert!(status.starts_with("HTTP/1.1 200"), "{status}: {body}");
        let body = wait_for(addr, "/readyz", "HTTP/1.1 200", Duration::from_secs(5));
        assert!(body.contains("source poll"), "{body}");
        assert!(body.contains("0 pods known"), "{body}");
        agent.stop();
    });
}

#[test]
fn a_flood_of_kernel_records_neither_stalls_the_loop_nor_delays_its_exit() {
    if !running_as_root("a_flood_of_kernel_records_neither_stalls_the_loop_nor_delays_its_exit") {
        return;
    }
    if std::env::var_os("MONITOR_VM").is_some() {
        // An emulated CPU faults pages in too slowly to send a flood.
        tests::cannot_run(
            tests::Reason::HostOnly,
            "the emulated VM cannot send records fast enough to flood the agent",
        );
        return;
    }
    let scene = AgentScene::new("agent-endpoints-flood", "10s", "5s");
    let churn = TestPod::new("churn").request_mib(100);
    in_own_network_namespace(|| {
        // A record for every 4 KiB page, added at once: a pod mapping and unmapping 64 MiB in
        // a loop sends hundreds of thousands of records a second, more than the ring holds,
        // and after 100 MiB of growth every record may wake the agent.
        let mut agent = scene.start_agent(&[
            "--dry-run",
            "--metrics-addr",
            "127.0.0.1:0",
            "--step",
            "4Ki",
            "--per-cpu-budget",
            "1",
        ]);
        let addr = metrics_addr(&agent);
        let mut pod = scene.start_pod(&churn);
        let flooding = AtomicBool::new(true);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                while flooding.load(Ordering::Relaxed) {
                    pod.alloc(64);
                    pod.free();
                }
            });
            // Ends the flood however this closure ends, so a failed assertion does not
            // leave the scope waiting for the allocating thread.
            let _stop = StopOnDrop(&flooding);
            let mut slowest_turn_ms = 0;
            let until = Instant::now() + Duration::from_secs(8);
            while Instant::now() < until {
                let (status, body) = get(addr, "/healthz");
                assert!(status.starts_with("HTTP/1.1 200"), "{status}: {body}");
                let turned_ms: u64 = body
                    .strip_prefix("ok: event loop turned ")
                    .and_then(|rest| rest.split("ms").next())
                    .and_then(|ms| ms.parse().ok())
                    .unwrap_or_else(|| panic!("no turn in {body:?}"));
                slowest_turn_ms = slowest_turn_ms.max(turned_ms);
                std::thread::sleep(Duration::from_millis(100));
            }
            let (_, metrics) = get(addr, "/metrics");
            let sample = |name: &str| -> f64 {
                metrics
                    .lines()
                    .find(|l| l.starts_with(&format!("{name} ")))
                    .and_then(|l| l.rsplit(' ').next())
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| panic!("no sample {name} in\n{metrics}"))
            };
            let (received, lost) = (
                sample("monitor_events_received_total"),
                sample("monitor_events_lost_total"),
            );
            assert!(
                received + lost > 100_000.0,
                "no flood to test with: {received} records received, {lost} lost"
            );
            assert!(
                slowest_turn_ms < 3_000,
                "the loop went {slowest_turn_ms} ms without turning under the flood \
                 ({received} records received, {lost} lost)"
            );
            // SIGTERM while the records still pour in.
            agent.terminate();
            let exited = agent.wait(Duration::from_secs(5));
            assert!(
                exited.is_some_and(|status| status.success()),
                "the agent did not exit within 5 s of SIGTERM under the flood: {exited:?}"
            );
            eprintln!(
                "flood: {received} records received, {lost} lost, slowest turn {slowest_turn_ms} ms"
            );
        });
    });
}
