//! The server with real sockets on loopback: requests whole or split, the head timeout, a
//! head too large, the probe socket's paths, and an address taken by another process.
use std::net::TcpListener as StdListener;

use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::{TcpStream, UnixStream},
};

use super::*;
use crate::metrics::{
    access::Access,
    connection::HEAD_TIMEOUT,
    snapshot::{self, Publisher, Readiness, Snapshot},
};
use crate::{checkpoint::health::CheckpointHealth, system_clock::monotonic_ns};

/// A loopback address whose port was free a moment ago.
fn free_addr() -> SocketAddr {
    let listener = StdListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

/// Starts the server on `addr` (and `probe`), with a ready agent's snapshot published.
fn start_on(addr: Option<SocketAddr>, probe: Option<PathBuf>) -> (Publisher, Arc<EndpointStats>) {
    let (publisher, view) = snapshot::channel();
    let mut snapshot = Snapshot::default();
    snapshot.metrics.events_received = 7;
    snapshot.readiness = Readiness {
        source: Some("poll".into()),
        pods: Ok(1),
        checkpoint: Some(CheckpointHealth::Writable),
    };
    publisher.publish(snapshot);
    publisher.heartbeat.beat(monotonic_ns());
    let stats = Arc::new(EndpointStats::default());
    start(
        addr.map(|addr| vec![addr]),
        probe,
        Shared {
            view,
            access: Access::default(),
            stats: stats.clone(),
            gate: None,
        },
    );
    (publisher, stats)
}

/// Sends `parts` with a pause between them and returns the whole answer.
async fn exchange<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    mut stream: S,
    parts: &[&str],
) -> String {
    for part in parts {
        stream.write_all(part.as_bytes()).await.unwrap();
        stream.flush().await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut out))
        .await
        .expect("answered within 5 s")
        .unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

async fn get(addr: SocketAddr, parts: &[&str]) -> String {
    let stream = TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    exchange(stream, parts).await
}

#[tokio::test]
async fn requests_whole_or_split_are_answered() {
    let addr = free_addr();
    let _agent = start_on(Some(addr), None);
    let cases: [(&str, &[&str], &str); 8] = [
        (
            "one segment",
            &["GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"],
            "HTTP/1.1 200 OK",
        ),
        (
            "split inside the request line",
            &["GET /met", "rics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"],
            "HTTP/1.1 200 OK",
        ),
        (
            "split before the blank line",
            &["GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n", "\r\n"],
            "HTTP/1.1 200 OK",
        ),
        (
            "health",
            &["GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"],
            "HTTP/1.1 200 OK",
        ),
        (
            "readiness",
            &["GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"],
            "HTTP/1.1 200 OK",
        ),
        (
            "another path",
            &["GET /other HTTP/1.1\r\nHost: localhost\r\n\r\n"],
            "HTTP/1.1 404 Not Found",
        ),
        (
            "a Host naming someone else",
            &["GET /metrics HTTP/1.1\r\nHost: evil.example:9753\r\n\r\n"],
            "HTTP/1.1 421 Misdirected Request",
        ),
        (
            "a head larger than the limit",
            &[&format!(
                "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: {}\r\n\r\n",
                "a".repeat(connection::MAX_HEAD_BYTES)
            )],
            "HTTP/1.1 431 Request Header Fields Too Large",
        ),
    ];
    for (name, parts, status) in cases {
        let answer = get(addr, parts).await;
        assert!(answer.starts_with(status), "{name}: {answer}");
        if name.contains("segment") || name.starts_with("split") {
            assert!(
                answer.contains("\r\nContent-Type: text/plain; version=0.0.4\r\n"),
                "{name}: {answer}"
            );
            assert!(
                answer.contains("\nmonitor_events_received_total 7\n"),
                "{name}: {answer}"
            );
            assert!(
                answer.contains("\nmonitor_metrics_bind_failures_total 0\n"),
                "{name}: {answer}"
            );
        }
    }
}

#[tokio::test]
async fn a_silent_connection_is_closed_after_the_head_timeout() {
    let addr = free_addr();
    let _agent = start_on(Some(addr), None);
    let mut idle = TcpStream::connect(addr).await.unwrap();
    let started = std::time::Instant::now();
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(HEAD_TIMEOUT * 2, idle.read_to_end(&mut rest)).await;
    assert!(closed.is_ok(), "still open after twice the head timeout");
    assert!(
        started.elapsed()
            >= HEAD_TIMEOUT
                .checked_sub(Duration::from_millis(100))
                .unwrap()
    );
}

#[tokio::test]
async fn the_probe_socket_answers_probes_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("probe.sock");
    // A socket left by an agent that ended is replaced.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    let _agent = start_on(None, Some(path.clone()));
    let ask = |request: &'static str| {
        let path = path.clone();
        async move { exchange(UnixStream::connect(&path).await.unwrap(), &[request]).await }
    };
    let answer = ask("GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    assert!(answer.contains("ok: event loop turned"), "{answer}");
    let answer = ask("GET /readyz HTTP/1.1\r\nHost: localhost\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    for private in ["/metrics", "/debug/ranking"] {
        let request = format!("GET {private} HTTP/1.1\r\nHost: localhost\r\n\r\n").leak();
        let answer = ask(request).await;
        assert!(answer.starts_with("HTTP/1.1 404"), "{private}: {answer}");
    }
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);

    // Any other file at the path is left alone.
    let other = dir.path().join("not-a-socket");
    std::fs::write(&other, "keep me").unwrap();
    let error = bind_probe_socket(&other).unwrap_err();
    assert!(error.to_string().contains("not a socket"), "{error}");
    assert_eq!(std::fs::read_to_string(&other).unwrap(), "keep me");
}

#[tokio::test]
async fn a_taken_address_is_served_once_it_is_free_and_readyz_says_why_meanwhile() {
    let stranger = StdListener::bind("127.0.0.1:0").unwrap();
    let addr = stranger.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let probe = dir.path().join("probe.sock");
    let (_publisher, stats) = start_on(Some(addr), Some(probe.clone()));
    let readyz = || async {
        let stream = UnixStream::connect(&probe).await.unwrap();
        exchange(stream, &["GET /readyz HTTP/1.1\r\nHost: localhost\r\n\r\n"]).await
    };
    let answer = readyz().await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(
        answer.contains(&format!(
            "metrics address not served: the metrics address {addr}: Address already in use"
        )),
        "{answer}"
    );
    drop(stranger);
    // The next attempt comes 1 s after the first.
    let freed = std::time::Instant::now();
    loop {
        if TcpStream::connect(addr).await.is_ok() {
            break;
        }
        assert!(
            freed.elapsed() < BIND_RETRY_MIN * 3,
            "not served {:?} after the address was freed",
            freed.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let answer = get(addr, &["GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"]).await;
    assert!(
        answer.contains("\nmonitor_metrics_bind_failures_total 1\n"),
        "{answer}"
    );
    assert_eq!(stats.not_listening(), None);
    assert!(readyz().await.starts_with("HTTP/1.1 200"));
}

#[tokio::test]
async fn health_probes_are_answered_at_once_among_slow_and_silent_connections() {
    let addr = free_addr();
    let _agent = start_on(Some(addr), None);
    // 150 that never send, 150 that send half a request head.
    let mut slow = Vec::new();
    for i in 0..300 {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        if i % 2 == 0 {
            stream
                .write_all(b"GET /metrics HTTP/1.1\r\nHost: 12")
                .await
                .unwrap();
        }
        slow.push(stream);
    }
    let mut took = Vec::new();
    for _ in 0..20 {
        let started = std::time::Instant::now();
        let answer = get(addr, &["GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"]).await;
        took.push(started.elapsed());
        assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    }
    let slowest = took.iter().max().unwrap();
    assert!(
        *slowest < Duration::from_millis(500),
        "probes took {took:?} among 300 slow connections"
    );
    drop(slow);
}

#[tokio::test]
async fn clients_that_close_after_half_a_head_do_not_stall_the_endpoint() {
    let addr = free_addr();
    let _agent = start_on(Some(addr), None);
    for _ in 0..20 {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: 12")
            .await
            .unwrap();
        // The end of the stream after half a head: it stays signalled to the reader.
        stream.shutdown().await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let answer = tokio::time::timeout(
        Duration::from_secs(2),
        get(addr, &["GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"]),
    )
    .await
    .expect("answered: the endpoint is not stuck on the half heads");
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
}

#[test]
fn the_cap_follows_the_open_file_limit() {
    let cases = [
        ("tiny limit still serves one", 2, 1),
        ("a quarter of a low limit", 256, 64),
        ("capped on an ordinary limit", 4096, MAX_CONNECTIONS),
        ("capped when unlimited", u64::MAX, MAX_CONNECTIONS),
    ];
    for (name, nofile, want) in cases {
        assert_eq!(connection_cap(nofile), want, "{name}");
    }
}
