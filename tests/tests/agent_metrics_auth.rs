//! `--metrics-auth kube` end to end (root only): the real agent with `--kube` on a kubepods
//! tree of real cgroups, its pods and its token reviews served by a MOCK API server
//! ([`MockKubeApi`]: TokenReview authenticates the tokens the test gave a user,
//! SubjectAccessReview allows what it granted), in a network namespace of the test's own. A
//! client at a second, non-loopback address of the namespace stands for Prometheus on
//! another host: without a token, with a bad one, with one whose user may not get the path,
//! and with one that may; a flood of bad tokens; the API server gone. Loopback clients need
//! no token, and the probes answer anyone.
use std::{
    io::{Read as _, Write as _},
    net::{Ipv4Addr, SocketAddr, TcpStream},
    time::{Duration, Instant},
};

use tests::{
    AgentScene, TestPod, add_loopback_alias, in_own_network_namespace, kube_api::MockKubeApi,
    metrics_addr, running_as_root,
};

const NODE: &str = "node-a";

/// The status code, the head and the body of `GET path` with `token` as a bearer token.
fn get(addr: SocketAddr, path: &str, token: Option<&str>) -> (u16, String, String) {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let authorization = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{authorization}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("an answer");
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {answer:?}"));
    (status, head.to_string(), body.to_string())
}

#[test]
fn pod_data_goes_only_to_loopback_and_to_tokens_rbac_allows() {
    if !running_as_root("pod_data_goes_only_to_loopback_and_to_tokens_rbac_allows") {
        return;
    }
    let scene = AgentScene::new("metrics-auth", "10s", "10s");
    let pod = TestPod::new("private-pod").request_mib(10);
    in_own_network_namespace(|| {
        let elsewhere = Ipv4Addr::new(10, 200, 0, 1);
        add_loopback_alias(elsewhere);
        // Started in the namespace, so the agent reaches it.
        let api = MockKubeApi::start(NODE);
        api.apply_pod(&pod);
        api.accept_token(
            "prometheus-token",
            "system:serviceaccount:monitoring:prometheus",
        );
        api.grant_get("system:serviceaccount:monitoring:prometheus", "/metrics");
        api.accept_token("debug-token", "alice");
        api.grant_get("alice", "/debug/ranking");
        api.accept_token("nobody-token", "system:serviceaccount:default:nobody");
        api.accept_token("late-token", "system:serviceaccount:monitoring:prometheus");
        let (_files, kubeconfig) = api.kubeconfig_in("metrics-auth-kubeconfig");
        let mut agent = scene.start_kube_agent(
            &kubeconfig,
            NODE,
            &[
                "--dry-run",
                "--metrics-addr",
                "0.0.0.0:0",
                "--metrics-auth",
                "kube",
            ],
        );
        let port = metrics_addr(&agent).port();
        let remote = SocketAddr::from((elsewhere, port));
        let local = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let _pod_proc = scene.start_pod(&pod);
        // The pod is in the ranking (loopback, no token).
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let (status, _, body) = get(local, "/debug/ranking", None);
            assert_eq!(status, 200, "{body}");
            if body.contains("private-pod") {
                break;
            }
            assert!(Instant::now() < deadline, "never ranked: {body}");
            std::thread::sleep(Duration::from_millis(200));
        }

        let cases = [
            // (who, path, token, status)
            ("no token", "/metrics", None, 401),
            ("no token, the ranking", "/debug/ranking", None, 401),
            (
                "a token the API server does not know",
                "/metrics",
                Some("forged"),
                401,
            ),
            (
                "a user without the permission",
                "/metrics",
                Some("nobody-token"),
                403,
            ),
            (
                "a user allowed /metrics only",
                "/debug/ranking",
                Some("prometheus-token"),
                403,
            ),
            (
                "a user allowed /metrics",
                "/metrics",
                Some("prometheus-token"),
                200,
            ),
            (
                "a user allowed the ranking",
                "/debug/ranking",
                Some("debug-token"),
                200,
            ),
            ("the liveness probe, no token", "/healthz", None, 200),
            ("the readiness probe, no token", "/readyz", None, 200),
        ];
        for (who, path, token, want) in cases {
            let (status, head, body) = get(remote, path, token);
            assert_eq!(status, want, "{who}: {head}\n{body}");
            if status != 200 {
                assert!(!body.contains("private-pod"), "{who}: {body}");
                assert!(!body.contains("monitor_"), "{who}: {body}");
            }
            if status == 401 {
                assert!(
                    head.contains("\r\nWww-Authenticate: Bearer"),
                    "{who}: {head}"
                );
            }
        }
        let (_, _, body) = get(remote, "/debug/ranking", Some("debug-token"));
        assert!(body.contains("private-pod"), "{body}");
        let (_, _, body) = get(remote, "/metrics", Some("prometheus-token"));
        assert!(body.contains("\nmonitor_pods_ranked 1\n"), "{body}");

        // Answers are kept: the same tokens again cost the API server nothing.
        let reviews = api.token_reviews();
        for _ in 0..10 {
            assert_eq!(get(remote, "/metrics", Some("prometheus-token")).0, 200);
            assert_eq!(get(remote, "/metrics", Some("forged")).0, 401);
        }
        assert_eq!(api.token_reviews(), reviews, "answers were not kept");

        // A flood of new bad tokens: reviewed at 10 a second after a burst of 20, the rest
        // refused (429) without asking.
        let flood_started = Instant::now();
        let mut throttled = 0;
        for i in 0..200 {
            let (status, _, body) = get(remote, "/metrics", Some(&format!("forged-{i}")));
            assert!(status == 401 || status == 429, "{status}: {body}");
            throttled += usize::from(status == 429);
        }
        let asked = api.token_reviews() - reviews;
        let allowance = 20 + (flood_started.elapsed().as_secs_f64() * 10.0).ceil() as usize;
        eprintln!(
            "200 bad tokens in {:?}: {asked} reviews, {throttled} refused unasked",
            flood_started.elapsed()
        );
        assert!(asked <= allowance, "{asked} reviews for 200 bad tokens");
        assert!(throttled > 0);

        // Loopback clients need no token.
        let (status, _, body) = get(local, "/metrics", None);
        assert_eq!(status, 200, "{body}");

        // The API server gone: a token not yet checked is refused, saying so in the log
        // (after the flood, once the pace allows a review again).
        drop(api);
        std::thread::sleep(Duration::from_millis(300));
        let (status, _, body) = get(remote, "/metrics", Some("late-token"));
        assert_eq!(status, 503, "{body}");
        assert!(body.contains("could not be checked"), "{body}");
        let line = agent
            .wait_stderr(Duration::from_secs(5), |l| {
                l.contains("cannot check a client's token with the API server")
            })
            .expect("the failed review is logged");
        eprintln!("{line}");
        let (status, _, body) = get(local, "/metrics", None);
        assert_eq!(status, 200, "loopback still served: {body}");
        assert!(
            body.contains("monitor_metrics_requests_denied_total{reason=\"unavailable\"} 1"),
            "{body}"
        );
        agent.stop();
    });
}
