//! The agent's HTTP endpoints, HTTP/1.1 on hyper: `GET` of a path [`super::endpoints`]
//! knows answers it from the newest published snapshot, anything else 404; one request per
//! connection, so nothing waits between requests. [`super::access`] decides first who may
//! ask. The server never touches the agent's
//! state: it reads what the event loop published (see [`super::snapshot`]).
//!
//! A node in trouble is when the endpoint matters least and the agent most, so whatever
//! connects cannot take what the agent needs to decide and act:
//! * at most [`MAX_CONNECTIONS`] are served at once, fewer when the open-file limit is low
//!   (an eighth of it): further connections wait in the kernel's listen queue (up to
//!   [`LISTEN_BACKLOG`]), holding no descriptor of the agent's;
//! * a connection must send its request head within [`HEAD_TIMEOUT`] and is closed after
//!   [`CONNECTION_TIMEOUT`] whatever it does, so idle connections free their slot;
//! * a failed accept is retried after a pause that doubles up to [`ACCEPT_BACKOFF_MAX`];
//!   when the agent is out of descriptors (EMFILE, ENFILE), a descriptor held in reserve is
//!   released to accept the waiting connection and close it at once, so it neither spins nor
//!   stays queued.
use std::{
    convert::Infallible,
    fs::File,
    io,
    net::{IpAddr, SocketAddr},
    sync::Arc,
    time::Duration,
};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode, body::Incoming, header, server::conn::http1};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::{
    net::{TcpListener, TcpSocket},
    sync::Semaphore,
};

use super::{access::Access, endpoints, snapshot::AgentView};
use crate::system_clock::monotonic_ns;

/// The most connections served at once; a scraper needs one.
pub(crate) const MAX_CONNECTIONS: usize = 64;
/// How long a connection may take to send its request head.
pub(crate) const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a connection may stay open in all.
pub(crate) const CONNECTION_TIMEOUT: Duration = Duration::from_secs(10);
/// How many connections the kernel queues beyond those served (the kernel caps it at
/// `net.core.somaxconn`); past that, new connections are not answered.
pub(crate) const LISTEN_BACKLOG: u32 = 1024;
/// The first pause after a failed accept.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
/// The longest pause after failed accepts in a row.
pub(crate) const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Binds the first of `addrs` that can be bound (a host name's addresses, in the resolver's
/// order) and serves the clients `access` lets in until the task is dropped. Returns the
/// bound address (useful with port 0).
pub(crate) async fn serve(
    addrs: &[SocketAddr],
    view: AgentView,
    access: Access,
) -> io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let mut listened = Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        "no address to listen on",
    ));
    for &addr in addrs {
        listened = listen(addr);
        if listened.is_ok() {
            break;
        }
    }
    let listener = listened?;
    let bound = listener.local_addr()?;
    let limit = connection_limit(open_file_limit());
    tracing::debug!("metrics: at most {limit} connections at once");
    let task = tokio::spawn(accept_loop(listener, view, Arc::new(access), limit));
    Ok((bound, task))
}

/// A listener on `addr`, reusable at once after a restart.
fn listen(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// How many connections to serve at once under an open-file limit of `nofile`: an eighth of
/// it, at least one, at most [`MAX_CONNECTIONS`].
fn connection_limit(nofile: u64) -> usize {
    usize::try_from(nofile / 8)
        .unwrap_or(usize::MAX)
        .clamp(1, MAX_CONNECTIONS)
}

/// The soft RLIMIT_NOFILE; unlimited when it cannot be read.
fn open_file_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut limit) } == 0 {
        limit.rlim_cur
    } else {
        u64::MAX
    }
}

/// A descriptor kept open to be released when the agent runs out of them.
fn reserve() -> Option<File> {
    File::open("/dev/null").ok()
}

async fn accept_loop(listener: TcpListener, view: AgentView, access: Arc<Access>, limit: usize) {
    let slots = Arc::new(Semaphore::new(limit));
    let mut spare = reserve();
    let mut backoff = ACCEPT_BACKOFF_MIN;
    loop {
        // Wait for a free slot before accepting: until then connections stay queued in the
        // kernel, costing the agent nothing.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        match listener.accept().await {
            Ok((stream, peer)) => {
                backoff = ACCEPT_BACKOFF_MIN;
                let view = view.clone();
                let access = access.clone();
                tokio::spawn(async move {
                    let _slot = slot;
                    serve_connection(stream, peer.ip(), view, access).await;
                });
            }
            Err(error) => {
                if is_out_of_descriptors(&error) && spare.take().is_some() {
                    // One descriptor free: take the waiting connection off the queue and
                    // close it, so the same error does not come back at once.
                    if let Ok(Ok((stream, _))) =
                        tokio::time::timeout(ACCEPT_BACKOFF_MIN, listener.accept()).await
                    {
                        drop(stream);
                    }
                    spare = reserve();
                }
                tracing::warn!("metrics: accepting a connection: {error}; pausing {backoff:?}");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
            }
        }
    }
}

fn is_out_of_descriptors(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

/// Serves one request of the client at `peer` on `stream`, within the head and connection
/// timeouts.
async fn serve_connection(
    stream: tokio::net::TcpStream,
    peer: IpAddr,
    view: AgentView,
    access: Arc<Access>,
) {
    let service = hyper::service::service_fn(move |request| {
        let view = view.clone();
        let access = access.clone();
        async move { Ok::<_, Infallible>(answer(&request, peer, &view, &access)) }
    });
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .keep_alive(false)
        .title_case_headers(true)
        .serve_connection(TokioIo::new(stream), service);
    // Errors (a client gone, a malformed request) concern that client only.
    let _ = tokio::time::timeout(CONNECTION_TIMEOUT, connection).await;
}

fn answer(
    request: &Request<Incoming>,
    peer: IpAddr,
    view: &AgentView,
    access: &Access,
) -> Response<Full<Bytes>> {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok());
    if let Some(refusal) = access.check(request.uri().path(), peer, host) {
        return Response::builder()
            .status(refusal.status)
            .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
            .body(Full::new(Bytes::from_static(refusal.reason.as_bytes())))
            .expect("a response built from valid parts");
    }
    let found = (request.method() == hyper::Method::GET)
        .then(|| {
            endpoints::answer(
                request.uri().path(),
                &view.snapshot(),
                view.heartbeat.last(),
                monotonic_ns(),
            )
        })
        .flatten();
    let response = match found {
        Some(answer) => Response::builder()
            .status(answer.status)
            .header(header::CONTENT_TYPE, answer.content_type)
            .body(Full::new(Bytes::from(answer.body))),
        None => Response::builder()
            .status(StatusCode::NOT_FOUND)
            .body(Full::new(Bytes::new())),
    };
    response.expect("a response built from valid parts")
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::{
        io::{AsyncReadExt as _, AsyncWriteExt as _},
        net::TcpStream,
    };

    async fn start() -> (SocketAddr, tokio::task::JoinHandle<()>) {
        let (publisher, view) = crate::metrics::snapshot::channel();
        let mut snapshot = crate::metrics::snapshot::Snapshot::default();
        snapshot.metrics.events_received = 7;
        publisher.publish(snapshot);
        publisher.heartbeat.beat(monotonic_ns());
        let served = serve(&["127.0.0.1:0".parse().unwrap()], view, Access::default())
            .await
            .unwrap();
        // The publisher may go: readers keep the last snapshot.
        drop(publisher);
        served
    }

    /// Sends `parts` with a pause between them and returns the whole answer.
    async fn exchange(addr: SocketAddr, parts: &[&str]) -> String {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        for part in parts {
            stream.write_all(part.as_bytes()).await.unwrap();
            stream.flush().await.unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut out = String::new();
        tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut out))
            .await
            .expect("answered within 5 s")
            .unwrap();
        out
    }

    #[tokio::test]
    async fn requests_whole_or_split_are_answered() {
        let (addr, task) = start().await;
        let cases: [(&str, &[&str], &str); 7] = [
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
                "readiness before the first evaluation",
                &["GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"],
                "HTTP/1.1 503 Service Unavailable",
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
        ];
        for (name, parts, status) in cases {
            let answer = exchange(addr, parts).await;
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
            }
        }
        task.abort();
    }

    #[tokio::test]
    async fn a_silent_connection_is_closed_after_the_head_timeout() {
        let (addr, task) = start().await;
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
        task.abort();
    }

    #[test]
    fn the_cap_follows_the_open_file_limit() {
        let cases = [
            ("tiny limit still serves one", 4, 1),
            ("an eighth of a low limit", 256, 32),
            ("capped on an ordinary limit", 1024, MAX_CONNECTIONS),
            ("capped when unlimited", u64::MAX, MAX_CONNECTIONS),
        ];
        for (name, nofile, want) in cases {
            assert_eq!(connection_limit(nofile), want, "{name}");
        }
    }
}
