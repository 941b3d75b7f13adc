//! One `GET` of a running agent's endpoint, for `monitor top` and `monitor config --agent`:
//! bounded in time and in size, the error in words.
use std::{
    io::{Read as _, Write as _},
    net::TcpStream,
    time::Duration,
};

use crate::flags::HostPort;

/// How long one read of the agent may take.
pub(crate) const READ_TIMEOUT: Duration = Duration::from_secs(2);
/// The largest answer read: the agent's views are a few hundred KiB at most.
const MAX_ANSWER_BYTES: u64 = 8 << 20;

/// The body of `GET path` at `addr` when the agent answers 200.
pub(crate) fn get(addr: &HostPort, path: &str) -> Result<String, String> {
    let mut stream = connect(addr)?;
    stream
        .set_read_timeout(Some(READ_TIMEOUT))
        .map_err(|e| e.to_string())?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut answer = String::new();
    stream
        .take(MAX_ANSWER_BYTES + 1)
        .read_to_string(&mut answer)
        .map_err(|e| e.to_string())?;
    if answer.len() as u64 > MAX_ANSWER_BYTES {
        return Err(format!("an answer over {MAX_ANSWER_BYTES} bytes"));
    }
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .ok_or("an incomplete answer")?;
    let status = head.lines().next().unwrap_or_default();
    if !status.starts_with("HTTP/1.1 200") {
        return Err(format!("the agent answered {status:?}"));
    }
    Ok(body.to_string())
}

/// Connects to the first of `addr`'s addresses that answers; the last error otherwise.
fn connect(addr: &HostPort) -> Result<TcpStream, String> {
    let mut error = String::from("no address");
    for each in addr.addrs() {
        match TcpStream::connect_timeout(each, READ_TIMEOUT) {
            Ok(stream) => return Ok(stream),
            Err(e) => error = format!("{each}: {e}"),
        }
    }
    Err(error)
}
