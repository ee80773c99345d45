//! The `/metrics` and `/healthz` HTTP endpoint on `metrics.listener`.
//!
//! A deliberately small HTTP/1.1 server: one request per connection (`Connection: close`),
//! GET or HEAD only, the request head capped at [`MAX_HEAD`] bytes and [`READ_TIMEOUT`], at most
//! [`MAX_CONNECTIONS`] scrapes at once (more are closed at once). Prometheus and curl need nothing
//! more, and it keeps an HTTP framework out of the broker.
//!
//! Routes: `/metrics` (Prometheus text format 0.0.4), `/healthz`, anything else 404. A
//! dedicated controller (`process.roles=controller`) answers `/healthz` with its quorum status
//! as JSON: 200 while it knows a leader, 503 while it does not. A broker (a single node too,
//! the one voter of its own quorum) answers with its membership as JSON
//! (`Broker::cluster_health`): 200 while it knows the active controller and is registered and
//! unfenced, 503 otherwise.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusHandle;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::broker::Broker;

/// Largest request head read; Prometheus sends a few hundred bytes.
pub const MAX_HEAD: usize = 8 * 1024;
/// How long a client may take to send its request head.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Concurrent scrapes served.
pub const MAX_CONNECTIONS: usize = 16;

/// Binds `host:port`; prints `sluice metrics listening on http://ADDR` on stderr (tests and
/// scripts read it to find a port-0 listener).
pub async fn bind(addr: &str) -> std::io::Result<TcpListener> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    eprintln!("sluice metrics listening on http://{local}");
    tracing::info!(addr = %local, "metrics listening");
    Ok(listener)
}

/// What the endpoint reports on.
#[derive(Clone)]
pub enum Source {
    Broker { broker: Arc<Broker>, handle: Option<PrometheusHandle> },
    /// A dedicated controller: `/healthz` is `health()`: (healthy, JSON body).
    Controller { health: Arc<dyn Fn() -> (bool, String) + Send + Sync> },
}

/// Serves until the task is aborted.
pub async fn serve(listener: TcpListener, source: Source) {
    let limit = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut backoff = Duration::from_millis(10);
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(x) => {
                backoff = Duration::from_millis(10);
                x
            }
            Err(e) => {
                tracing::error!(error = %e, "metrics accept failed; backing off");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        let Ok(permit) = limit.clone().try_acquire_owned() else {
            tracing::warn!(%peer, limit = MAX_CONNECTIONS, "too many concurrent metrics scrapes; closing");
            continue;
        };
        let source = source.clone();
        tokio::spawn(async move {
            if let Err(e) = serve_one(stream, peer, source).await {
                tracing::debug!(%peer, error = %e, "metrics connection failed");
            }
            drop(permit);
        });
    }
}

/// Parsed request line, or why it was refused.
#[derive(Debug, PartialEq, Eq)]
enum Request<'a> {
    Get { path: &'a str, head_only: bool },
    BadMethod,
    Malformed,
}

fn parse_request_line(head: &str) -> Request<'_> {
    let line = head.lines().next().unwrap_or("");
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next()) else {
        return Request::Malformed;
    };
    if !version.starts_with("HTTP/1.") {
        return Request::Malformed;
    }
    let path = target.split('?').next().unwrap_or("");
    match method {
        "GET" => Request::Get { path, head_only: false },
        "HEAD" => Request::Get { path, head_only: true },
        _ => Request::BadMethod,
    }
}

async fn serve_one(mut stream: TcpStream, peer: SocketAddr, source: Source) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let read = tokio::time::timeout(READ_TIMEOUT, async {
        let mut chunk = [0u8; 1024];
        loop {
            if buf.windows(4).any(|w| w == b"\r\n\r\n") || buf.windows(2).any(|w| w == b"\n\n") {
                return Ok::<bool, std::io::Error>(true);
            }
            if buf.len() >= MAX_HEAD {
                return Ok(false);
            }
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Ok(false);
            }
            buf.extend_from_slice(&chunk[..n.min(MAX_HEAD - buf.len())]);
        }
    })
    .await;
    let complete = match read {
        Ok(r) => r?,
        Err(_) => {
            tracing::debug!(%peer, "metrics request head timed out");
            return Ok(());
        }
    };
    let head = String::from_utf8_lossy(&buf);
    let (status, content_type, body, head_only) = match (complete, parse_request_line(&head)) {
        (false, _) | (_, Request::Malformed) => ("400 Bad Request", "text/plain", "bad request\n".to_string(), false),
        (_, Request::BadMethod) => ("405 Method Not Allowed", "text/plain", "only GET and HEAD\n".to_string(), false),
        (_, Request::Get { path, head_only }) => match (path, &source) {
            ("/healthz", Source::Controller { health }) => {
                let (healthy, body) = health();
                let status = if healthy { "200 OK" } else { "503 Service Unavailable" };
                (status, "application/json", body + "\n", head_only)
            }
            ("/metrics", Source::Broker { broker, handle }) => {
                let (b, handle) = (broker.clone(), handle.clone());
                let text = tokio::task::spawn_blocking(move || super::render(&b, handle.as_ref()))
                    .await
                    .unwrap_or_else(|e| format!("# rendering failed: {e}\n"));
                ("200 OK", "text/plain; version=0.0.4; charset=utf-8", text, head_only)
            }
            ("/healthz", Source::Broker { broker, .. }) => match broker.cluster_health() {
                Some((healthy, body)) => {
                    let status = if healthy { "200 OK" } else { "503 Service Unavailable" };
                    (status, "application/json", body + "\n", head_only)
                }
                None => ("200 OK", "text/plain", "ok\n".to_string(), head_only),
            },
            _ => ("404 Not Found", "text/plain", "not found; try /metrics\n".to_string(), head_only),
        },
    };
    let header = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(header.as_bytes()).await?;
    if !head_only {
        stream.write_all(body.as_bytes()).await?;
    }
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_lines_parse() {
        assert_eq!(parse_request_line("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"), Request::Get { path: "/metrics", head_only: false });
        assert_eq!(parse_request_line("HEAD /healthz?x=1 HTTP/1.0\r\n\r\n"), Request::Get { path: "/healthz", head_only: true });
        assert_eq!(parse_request_line("POST /metrics HTTP/1.1\r\n\r\n"), Request::BadMethod);
        assert_eq!(parse_request_line("GET /metrics\r\n\r\n"), Request::Malformed);
        assert_eq!(parse_request_line(""), Request::Malformed);
    }
}
