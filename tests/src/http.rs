//! The agent's HTTP endpoints as a test reaches them over loopback.
use std::{
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpStream},
    time::Duration,
};

use crate::MonitorProcess;

/// The address a running agent logged it serves its endpoints on (`--metrics-addr` with
/// port 0 picks a free one).
pub fn metrics_addr(agent: &MonitorProcess) -> SocketAddr {
    let line = agent
        .wait_stderr(Duration::from_secs(30), |l| {
            l.contains("metrics at http://")
        })
        .expect("the bound address is logged");
    line.split("metrics at http://")
        .nth(1)
        .and_then(|rest| rest.strip_suffix("/metrics"))
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
}

/// The value of a metric without labels in an exposition, if present.
pub fn metric(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// `GET path` over loopback, answered body included (the connection is closed after it).
/// A connection reset is retried a few times: on the emulated VM a fresh connection to a
/// just-started server is sometimes reset before the request goes out.
pub fn http_get(addr: SocketAddr, path: &str) -> String {
    http_get_as(addr, path, &addr.to_string())
}

/// [`http_get`] with `host` as the `Host` header.
pub fn http_get_as(addr: SocketAddr, path: &str, host: &str) -> String {
    let mut last_error = None;
    for _ in 0..5 {
        match try_http_get(addr, path, host) {
            Ok(answer) => return answer,
            Err(e) => last_error = Some(e),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("GET http://{addr}{path}: {last_error:?}")
}

fn try_http_get(addr: SocketAddr, path: &str, host: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    Ok(answer)
}
