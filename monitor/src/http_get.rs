//! One `GET` for the commands that read a running agent (`monitor top`, `monitor probe`),
//! bounded in each way whoever answers at the address could abuse: the whole exchange within
//! a deadline (a server sending a byte a second is cut off at it), the answer's head within
//! [`MAX_HEAD_BYTES`], its body within the caller's limit (a `Content-Length` beyond it is
//! refused before any of the body is read). HTTP/1.1, `Connection: close`, read until the
//! `Content-Length` or the end of the stream; chunked answers (which the agent never sends)
//! are refused.
use std::{
    io::{self, Read, Write},
    net::{SocketAddr, TcpStream},
    os::unix::net::UnixStream,
    path::PathBuf,
    time::{Duration, Instant},
};

/// The largest answer head read.
pub(crate) const MAX_HEAD_BYTES: usize = 16 << 10;

/// Where the agent answers.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    Tcp(SocketAddr),
    /// Its probe socket (`--probe-socket`).
    Unix(PathBuf),
}

/// An answer: its status and body.
#[derive(Debug)]
pub(crate) struct Reply {
    pub status: u16,
    pub body: Vec<u8>,
}

/// Why there is no answer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum GetError {
    #[error("connecting: {0}")]
    Connect(io::Error),
    #[error("{0}")]
    Io(io::Error),
    #[error("no complete answer within {0:?}")]
    TimedOut(Duration),
    #[error("an answer head over {MAX_HEAD_BYTES} bytes; not read further")]
    HeadTooLarge,
    #[error("an answer body over {limit} bytes; not read further")]
    BodyTooLarge { limit: usize },
    #[error("not an HTTP answer: {0}")]
    Malformed(&'static str),
}

enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    fn set_timeouts(&self, left: Duration) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s
                .set_read_timeout(Some(left))
                .and_then(|()| s.set_write_timeout(Some(left))),
            Stream::Unix(s) => s
                .set_read_timeout(Some(left))
                .and_then(|()| s.set_write_timeout(Some(left))),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.flush(),
            Stream::Unix(s) => s.flush(),
        }
    }
}

/// The stream and the deadline every read and write is held to.
struct Exchange {
    stream: Stream,
    deadline: Instant,
    within: Duration,
}

impl Exchange {
    fn left(&self) -> Result<Duration, GetError> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            Err(GetError::TimedOut(self.within))
        } else {
            Ok(left)
        }
    }

    fn timed(&self, error: io::Error) -> GetError {
        match error.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => GetError::TimedOut(self.within),
            _ => GetError::Io(error),
        }
    }

    /// Reads what comes next into `into`, at most `room` bytes; 0 at the end of the stream.
    fn read_some(&mut self, into: &mut Vec<u8>, room: usize) -> Result<usize, GetError> {
        let left = self.left()?;
        self.stream.set_timeouts(left).map_err(GetError::Io)?;
        let mut chunk = [0u8; 8192];
        let want = room.min(chunk.len());
        let n = loop {
            match self.stream.read(&mut chunk[..want]) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                other => break other.map_err(|e| self.timed(e))?,
            }
        };
        into.extend_from_slice(&chunk[..n]);
        Ok(n)
    }
}

/// `GET path` at `target`, answered within `within` with a body of at most `max_body` bytes.
pub(crate) fn get(
    target: &Target,
    path: &str,
    within: Duration,
    max_body: usize,
) -> Result<Reply, GetError> {
    let deadline = Instant::now() + within;
    let (stream, host) = match target {
        Target::Tcp(addr) => (
            Stream::Tcp(TcpStream::connect_timeout(addr, within).map_err(GetError::Connect)?),
            addr.to_string(),
        ),
        Target::Unix(path) => (
            Stream::Unix(UnixStream::connect(path).map_err(GetError::Connect)?),
            "localhost".to_string(),
        ),
    };
    let mut exchange = Exchange {
        stream,
        deadline,
        within,
    };
    exchange
        .stream
        .set_timeouts(exchange.left()?)
        .map_err(GetError::Io)?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    exchange
        .stream
        .write_all(request.as_bytes())
        .map_err(|e| exchange.timed(e))?;

    let mut buf = Vec::with_capacity(4096);
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        if buf.len() > MAX_HEAD_BYTES {
            return Err(GetError::HeadTooLarge);
        }
        let room = MAX_HEAD_BYTES + 1 - buf.len();
        if exchange.read_some(&mut buf, room)? == 0 {
            return Err(GetError::Malformed(
                "the connection closed before the head ended",
            ));
        }
    };
    let head = std::str::from_utf8(&buf[..head_end])
        .map_err(|_| GetError::Malformed("a head that is not text"))?;
    let (status, length) = parse_head(head)?;
    if length.is_some_and(|l| l > max_body) {
        return Err(GetError::BodyTooLarge { limit: max_body });
    }
    let mut body = buf.split_off(head_end + 4);
    drop(buf);
    let want = length.unwrap_or(max_body + 1);
    while body.len() < want {
        let room = want - body.len();
        if exchange.read_some(&mut body, room)? == 0 {
            if length.is_some() {
                return Err(GetError::Malformed(
                    "the connection closed before the body ended",
                ));
            }
            break;
        }
    }
    body.truncate(want);
    if body.len() > max_body {
        return Err(GetError::BodyTooLarge { limit: max_body });
    }
    Ok(Reply { status, body })
}

/// `GET path` at the first of `addrs` that takes the connection (a host name's addresses, in
/// the resolver's order), as [`get`].
pub(crate) fn get_first(
    addrs: &[SocketAddr],
    path: &str,
    within: Duration,
    max_body: usize,
) -> Result<Reply, GetError> {
    let mut refused = GetError::Connect(io::Error::new(io::ErrorKind::InvalidInput, "no address"));
    for &addr in addrs {
        match get(&Target::Tcp(addr), path, within, max_body) {
            Err(GetError::Connect(e)) => {
                refused = GetError::Connect(io::Error::new(e.kind(), format!("{addr}: {e}")));
            }
            answered => return answered,
        }
    }
    Err(refused)
}

/// The status and the `Content-Length` of an answer head.
fn parse_head(head: &str) -> Result<(u16, Option<usize>), GetError> {
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .strip_prefix("HTTP/1.")
        .and_then(|rest| rest.get(2..5))
        .and_then(|code| code.parse().ok())
        .ok_or(GetError::Malformed("no HTTP/1.x status line"))?;
    let mut length = None;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            return Err(GetError::Malformed("a header line without a colon"));
        };
        if name.eq_ignore_ascii_case("content-length") {
            length = Some(
                value
                    .trim()
                    .parse()
                    .map_err(|_| GetError::Malformed("a Content-Length that is not a number"))?,
            );
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(GetError::Malformed("a chunked answer"));
        }
    }
    Ok((status, length))
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;

    use super::*;

    /// A server on loopback that answers one connection with `answer`, written in pieces of
    /// `piece` bytes with `pause` between them, or forever when `forever`.
    fn stranger(answer: Vec<u8>, piece: usize, pause: Duration) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut request = [0u8; 1024];
            let _ = stream.read(&mut request);
            for part in answer.chunks(piece) {
                if stream.write_all(part).is_err() {
                    return;
                }
                std::thread::sleep(pause);
            }
        });
        addr
    }

    fn answer(head: &str, body: &[u8]) -> Vec<u8> {
        let mut out = head.as_bytes().to_vec();
        out.extend_from_slice(body);
        out
    }

    /// A name, what the stranger answers, in pieces of how many bytes, with what pause
    /// between them, and the body or the error wanted.
    type Case = (
        &'static str,
        Vec<u8>,
        usize,
        Duration,
        Result<&'static str, &'static str>,
    );

    #[test]
    fn each_bound_holds_whatever_answers() {
        let second = Duration::from_secs(1);
        let big = vec![b'x'; 3 << 20];
        let cases: [Case; 7] = [
            (
                "an answer within the bounds",
                answer("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", b"hello"),
                1 << 20,
                Duration::ZERO,
                Ok("hello"),
            ),
            (
                "no Content-Length: read to the end",
                answer("HTTP/1.0 503 Service Unavailable\r\n\r\n", b"not ready"),
                1 << 20,
                Duration::ZERO,
                Ok("not ready"),
            ),
            (
                "a Content-Length over the limit: refused unread",
                answer("HTTP/1.1 200 OK\r\nContent-Length: 268435456\r\n\r\n", b""),
                1 << 20,
                Duration::ZERO,
                Err("an answer body over 1048576 bytes"),
            ),
            (
                "a body over the limit without a length",
                answer("HTTP/1.1 200 OK\r\n\r\n", &big),
                1 << 20,
                Duration::ZERO,
                Err("an answer body over 1048576 bytes"),
            ),
            (
                "a head that never ends",
                answer("HTTP/1.1 200 OK\r\n", &big),
                1 << 20,
                Duration::ZERO,
                Err("an answer head over 16384 bytes"),
            ),
            (
                "a byte at a time",
                answer(
                    "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n",
                    &[b'y'; 100],
                ),
                1,
                Duration::from_millis(20),
                Err("no complete answer within 1s"),
            ),
            (
                "chunked",
                answer(
                    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
                    b"5\r\nhello",
                ),
                1 << 20,
                Duration::ZERO,
                Err("a chunked answer"),
            ),
        ];
        for (name, reply, piece, pause, want) in cases {
            let addr = stranger(reply, piece.min(64 << 10), pause);
            let started = Instant::now();
            let got = get(&Target::Tcp(addr), "/debug/ranking", second, 1 << 20);
            assert!(
                started.elapsed() < second * 2,
                "{name}: {:?}",
                started.elapsed()
            );
            match (got, want) {
                (Ok(reply), Ok(body)) => assert_eq!(reply.body, body.as_bytes(), "{name}"),
                (Err(error), Err(text)) => {
                    assert!(error.to_string().contains(text), "{name}: {error}");
                }
                (got, want) => panic!("{name}: {got:?}, wanted {want:?}"),
            }
        }
    }
}
