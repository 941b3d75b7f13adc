//! One connection, one request, HTTP/1.1 on hyper: `GET` of a path [`super::endpoints`]
//! knows answers it from the newest published snapshot, anything else 404. Every part is
//! bounded: the request head must arrive within [`HEAD_TIMEOUT`] and hold at most
//! [`MAX_HEAD_BYTES`] in [`MAX_HEADERS`] headers (else 431), and the whole exchange ends
//! within [`REQUEST_TIMEOUT`] of the connection; the connection closes after the answer. On the network,
//! [`super::access`] decides who may ask and [`super::token_gate`] checks tokens; on the
//! probe socket only `/healthz` and `/readyz` are served.
use std::{
    convert::Infallible,
    io,
    net::IpAddr,
    os::fd::{AsRawFd as _, RawFd},
    sync::Arc,
    time::Duration,
};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode, body::Incoming, header, server::conn::http1};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::{
    io::{AsyncRead, AsyncWrite, Interest},
    net::{TcpStream, UnixStream},
    time::Instant,
};

use super::{
    access::{Access, Refusal, Verdict},
    endpoint_stats::{Denial, EndpointStats},
    endpoints,
    snapshot::AgentView,
    token_gate::{GateAnswer, TokenGate},
    token_review::KubeReviewer,
};
use crate::system_clock::monotonic_ns;

/// How long a connection may take to send its request head.
pub(crate) const HEAD_TIMEOUT: Duration = Duration::from_secs(2);
/// How long one request may take in all, from the connection to the last byte of the answer.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest request head (request line and headers); a bearer token is about 1 KiB.
pub(crate) const MAX_HEAD_BYTES: usize = 16 << 10;
/// The most headers in a request.
pub(crate) const MAX_HEADERS: usize = 32;

/// What every connection needs to answer.
pub(crate) struct Shared {
    pub view: AgentView,
    pub access: Access,
    pub stats: Arc<EndpointStats>,
    /// Checks bearer tokens with `--metrics-auth kube`.
    pub gate: Option<TokenGate<KubeReviewer>>,
}

/// Where a connection comes from.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Peer {
    /// A client at this address on the network.
    Network(IpAddr),
    /// A process in the agent's pod (the probe socket): probes only.
    ProbeSocket,
}

/// Serves one request of `client` on `stream`. Until its request head is in the kernel's
/// buffer the connection holds nothing but the socket (a slow client costs a descriptor and
/// a few hundred bytes, not a parser and its buffer); `on_head` is called once it is.
pub(crate) async fn serve_network(
    stream: TcpStream,
    client: IpAddr,
    shared: Arc<Shared>,
    on_head: impl FnOnce(),
) {
    let deadline = Instant::now() + REQUEST_TIMEOUT;
    if !matches!(
        tokio::time::timeout(HEAD_TIMEOUT, head_in_buffer(&stream)).await,
        Ok(Ok(()))
    ) {
        return;
    }
    on_head();
    http(stream, Peer::Network(client), shared, deadline).await;
}

/// Serves one request on the probe socket.
pub(crate) async fn serve_probe(stream: UnixStream, shared: Arc<Shared>) {
    http(
        stream,
        Peer::ProbeSocket,
        shared,
        Instant::now() + REQUEST_TIMEOUT,
    )
    .await;
}

/// Waits until the kernel's buffer holds the whole request head, more than a head may
/// hold, or the end of the stream (the client closed or reset it), without taking any of it.
async fn head_in_buffer(stream: &TcpStream) -> io::Result<()> {
    loop {
        let ready = stream.ready(Interest::READABLE).await?;
        // The end of the stream stays signalled: hyper reads what came and sees it.
        if ready.is_read_closed() || ready.is_error() {
            return Ok(());
        }
        // A look that finds no head yet says WouldBlock, which clears the readiness: the
        // next wait lasts until more bytes arrive.
        match stream.try_io(Interest::READABLE, || peek_for_head(stream.as_raw_fd())) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
        // Never a turn of this loop without giving the others theirs.
        tokio::task::consume_budget().await;
    }
}

fn peek_for_head(fd: RawFd) -> io::Result<()> {
    let mut buf = [0u8; MAX_HEAD_BYTES];
    // SAFETY: recv writes at most `buf.len()` bytes into the buffer we own; MSG_PEEK leaves
    // them in the socket for hyper.
    let n = unsafe {
        libc::recv(
            fd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    let n = usize::try_from(n).map_err(|_| io::Error::last_os_error())?;
    let head = &buf[..n];
    let ended = head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n");
    if n == 0 || n == buf.len() || ended {
        Ok(())
    } else {
        Err(io::ErrorKind::WouldBlock.into())
    }
}

/// Answers one request on `io` by `deadline`, hyper parsing it within the bounds above.
async fn http<I>(io: I, peer: Peer, shared: Arc<Shared>, deadline: Instant)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |request| {
        let shared = shared.clone();
        async move { Ok::<_, Infallible>(answer(request, peer, &shared).await) }
    });
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .max_header_size(MAX_HEAD_BYTES)
        .max_headers(MAX_HEADERS)
        .max_buf_size(MAX_HEAD_BYTES)
        .keep_alive(false)
        .title_case_headers(true)
        .serve_connection(TokioIo::new(io), service);
    // Errors (a client gone, a malformed request) concern that client only.
    let _ = tokio::time::timeout_at(deadline, connection).await;
}

async fn answer(request: Request<Incoming>, peer: Peer, shared: &Shared) -> Response<Full<Bytes>> {
    let path = request.uri().path();
    let client = match peer {
        Peer::ProbeSocket if matches!(path, "/healthz" | "/readyz") => None,
        Peer::ProbeSocket => return not_found(),
        Peer::Network(client) => Some(client),
    };
    if let Some(client) = client {
        let header = |name| request.headers().get(name).and_then(|h| h.to_str().ok());
        let verdict = shared.access.check(
            path,
            client,
            header(header::HOST),
            header(header::AUTHORIZATION),
        );
        let refusal = match verdict {
            Verdict::Serve => None,
            Verdict::Refuse(refusal) => Some(refusal),
            Verdict::Review { token } => match &shared.gate {
                Some(gate) => refusal_for(gate.check(token, path).await),
                None => refusal_for(GateAnswer::Unavailable),
            },
        };
        if let Some(refusal) = refusal {
            if let Some(denial) = refusal.denial {
                shared.stats.denied(denial);
            }
            return refused(&refusal);
        }
    }
    let found = (request.method() == hyper::Method::GET)
        .then(|| {
            endpoints::answer(
                path,
                &shared.view.snapshot(),
                shared.view.heartbeat.last(),
                monotonic_ns(),
                &shared.stats,
            )
        })
        .flatten();
    match found {
        Some(answer) => Response::builder()
            .status(answer.status)
            .header(header::CONTENT_TYPE, answer.content_type)
            .body(Full::new(Bytes::from(answer.body)))
            .expect("a response built from valid parts"),
        None => not_found(),
    }
}

/// The refusal for what the token gate said, `None` when allowed.
fn refusal_for(answer: GateAnswer) -> Option<Refusal> {
    let (status, reason, denial) = match answer {
        GateAnswer::Allowed => return None,
        GateAnswer::Unauthenticated => {
            return Some(Refusal::unauthenticated(
                "the API server does not authenticate this token\n",
                Denial::BadToken,
            ));
        }
        GateAnswer::Forbidden => (
            StatusCode::FORBIDDEN,
            "RBAC does not allow this token's user to get this path (a nonResourceURL)\n",
            Denial::Forbidden,
        ),
        GateAnswer::Unavailable => (
            StatusCode::SERVICE_UNAVAILABLE,
            "the token could not be checked with the API server now; try again\n",
            Denial::Unavailable,
        ),
        GateAnswer::Throttled => (
            StatusCode::TOO_MANY_REQUESTS,
            "too many tokens to check now; try again\n",
            Denial::Throttled,
        ),
    };
    Some(Refusal {
        status,
        reason,
        denial: Some(denial),
    })
}

fn refused(refusal: &Refusal) -> Response<Full<Bytes>> {
    let mut response = Response::builder()
        .status(refusal.status)
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8");
    if refusal.status == StatusCode::UNAUTHORIZED {
        response = response.header(header::WWW_AUTHENTICATE, "Bearer");
    }
    response
        .body(Full::new(Bytes::from_static(refusal.reason.as_bytes())))
        .expect("a response built from valid parts")
}

fn not_found() -> Response<Full<Bytes>> {
    Response::builder()
        .status(StatusCode::NOT_FOUND)
        .body(Full::new(Bytes::new()))
        .expect("a response built from valid parts")
}
