//! A minimal HTTP/1.1 endpoint for Prometheus scrapes: `GET /metrics` answers the exposition,
//! anything else 404. One request per connection, so no keep-alive bookkeeping.
use std::{net::SocketAddr, sync::Arc};

use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::TcpListener,
    sync::Mutex,
};

use super::Metrics;

/// Binds `addr` and serves until the task is dropped. Returns the bound address (useful with
/// port 0).
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<Mutex<Metrics>>,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                continue;
            };
            let metrics = metrics.clone();
            tokio::spawn(async move {
                let mut request = [0u8; 1024];
                let Ok(n) = stream.read(&mut request).await else {
                    return;
                };
                let head = String::from_utf8_lossy(&request[..n]);
                let response = match head.split_whitespace().take(2).collect::<Vec<_>>()[..] {
                    ["GET", "/metrics"] => {
                        let body = metrics.lock().await.render();
                        format!(
                            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n\
                             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            body.len()
                        )
                    }
                    _ => "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                        .to_string(),
                };
                let _ = stream.write_all(response.as_bytes()).await;
            });
        }
    });
    Ok((bound, task))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpStream;

    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut out = String::new();
        stream.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn serves_metrics_on_loopback() {
        let metrics = Arc::new(Mutex::new(Metrics::default()));
        metrics.lock().await.events_received = 7;
        let (addr, task) = serve("127.0.0.1:0".parse().unwrap(), metrics.clone())
            .await
            .unwrap();
        let answer = get(addr, "/metrics").await;
        assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
        assert!(
            answer.contains("\nmonitor_events_received_total 7\n"),
            "{answer}"
        );
        assert!(get(addr, "/other").await.starts_with("HTTP/1.1 404"));
        task.abort();
    }
}
