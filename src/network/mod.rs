//! Listeners and connection tasks.
//!
//! Owns binding the configured listeners, accepting connections within `max.connections` and
//! `max.connections.per.ip`, and running one task per connection ([`connection`]). It does not
//! interpret requests beyond framing and the request header.
//!
//! # Failure behaviour
//! - Accept errors (e.g. out of file descriptors) are logged and retried with backoff; the
//!   listener never exits on its own.
//! - A connection over a limit is closed at once and logged; others are unaffected.
//! - Shutdown: [`Server::run`] returns when the shutdown signal fires; open connections are
//!   dropped with the runtime.

pub mod client;
pub mod connection;
pub mod idle_poll;
pub mod send;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::api::fetch_session::FetchSessionCache;
use crate::broker::Broker;
use crate::config::Endpoint;

/// Failure to bind a listener.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {endpoint}")]
pub struct BindError {
    pub endpoint: String,
    #[source]
    pub source: std::io::Error,
}

/// Bound listeners, ready to accept.
pub struct Server {
    broker: Arc<Broker>,
    listeners: Vec<(Endpoint, TcpListener)>,
    connections: Arc<Semaphore>,
    per_ip: Arc<Mutex<HashMap<IpAddr, usize>>>,
    fetch_sessions: Arc<FetchSessionCache>,
}

/// Counts a connection against its IP until dropped.
struct IpSlot {
    ip: IpAddr,
    table: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        let mut t = self.table.lock();
        if let Some(n) = t.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                t.remove(&self.ip);
            }
        }
    }
}

impl Server {
    /// Binds every listener; port 0 gets a free port. Advertised endpoints are set on the broker
    /// from `advertised.listeners`, or from what was bound.
    pub async fn bind(broker: Arc<Broker>) -> Result<Server, BindError> {
        let mut listeners = Vec::new();
        let mut bound = Vec::new();
        for ep in &broker.config.listeners {
            // In a cluster the controller listener carries the quorum (bound by `cluster::node`).
            if broker.cluster().is_some() && broker.config.controller_listener_names.contains(&ep.name) {
                continue;
            }
            // "localhost" binds the IPv4 loopback: resolving it may yield ::1 first, and the
            // clients that resolve it to 127.0.0.1 would then find nothing listening.
            let host = match ep.host.as_str() {
                "" => "0.0.0.0",
                "localhost" => "127.0.0.1",
                h => h,
            };
            let listener = TcpListener::bind((host, ep.port))
                .await
                .map_err(|source| BindError { endpoint: ep.to_string(), source })?;
            let local = listener.local_addr().map_err(|source| BindError { endpoint: ep.to_string(), source })?;
            let actual = Endpoint { name: ep.name.clone(), host: ep.host.clone(), port: local.port() };
            // Tests and scripts read this line to find a port-0 listener.
            eprintln!("sluice listening on {}://{}", ep.name, local);
            tracing::info!(listener = %ep.name, addr = %local, "listening");
            bound.push(actual.clone());
            listeners.push((actual, listener));
        }
        let advertised: Vec<Endpoint> = if broker.config.advertised_listeners.is_empty() {
            bound
                .into_iter()
                .map(|mut e| {
                    if e.host.is_empty() || e.host == "0.0.0.0" || e.host == "::" {
                        e.host = "localhost".into();
                    }
                    e
                })
                .collect()
        } else {
            broker
                .config
                .advertised_listeners
                .iter()
                .map(|a| {
                    let mut a = a.clone();
                    if a.port == 0 {
                        if let Some(b) = listeners.iter().find(|(b, _)| b.name == a.name) {
                            a.port = b.0.port;
                        }
                    }
                    a
                })
                .collect()
        };
        broker.set_advertised(advertised);
        let max = broker.config.max_connections.min(Semaphore::MAX_PERMITS);
        let sessions = broker.config.fetch_session_cache_slots;
        Ok(Server {
            broker,
            listeners,
            connections: Arc::new(Semaphore::new(max)),
            per_ip: Arc::new(Mutex::new(HashMap::new())),
            fetch_sessions: Arc::new(FetchSessionCache::new(sessions)),
        })
    }

    /// Addresses actually bound, in listener order.
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.listeners.iter().filter_map(|(_, l)| l.local_addr().ok()).collect()
    }

    /// Accepts until `shutdown` resolves.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()>) {
        let mut tasks = tokio::task::JoinSet::new();
        for (endpoint, listener) in self.listeners {
            let ctx = AcceptContext {
                broker: self.broker.clone(),
                connections: self.connections.clone(),
                per_ip: self.per_ip.clone(),
                fetch_sessions: self.fetch_sessions.clone(),
            };
            tasks.spawn(accept_loop(endpoint, listener, ctx));
        }
        shutdown.await;
        tasks.abort_all();
    }
}

#[derive(Clone)]
struct AcceptContext {
    broker: Arc<Broker>,
    connections: Arc<Semaphore>,
    per_ip: Arc<Mutex<HashMap<IpAddr, usize>>>,
    fetch_sessions: Arc<FetchSessionCache>,
}

async fn accept_loop(endpoint: Endpoint, listener: TcpListener, ctx: AcceptContext) {
    let mut backoff = Duration::from_millis(10);
    let name: Arc<str> = Arc::from(endpoint.name.as_str());
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(x) => {
                backoff = Duration::from_millis(10);
                x
            }
            Err(e) => {
                tracing::error!(listener = %endpoint.name, error = %e, "accept failed; backing off");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        let Ok(permit) = ctx.connections.clone().try_acquire_owned() else {
            tracing::warn!(%peer, limit = ctx.broker.config.max_connections, "max.connections reached; closing new connection");
            crate::metrics::connection_closed(crate::metrics::CloseReason::Limit);
            continue;
        };
        let slot = {
            let mut t = ctx.per_ip.lock();
            let n = t.entry(peer.ip()).or_insert(0);
            if *n >= ctx.broker.config.max_connections_per_ip {
                tracing::warn!(%peer, limit = ctx.broker.config.max_connections_per_ip, "max.connections.per.ip reached; closing new connection");
                crate::metrics::connection_closed(crate::metrics::CloseReason::Limit);
                continue;
            }
            *n += 1;
            IpSlot { ip: peer.ip(), table: ctx.per_ip.clone() }
        };
        let _ = stream.set_nodelay(true);
        if let Some(bytes) = ctx.broker.config.socket_send_buffer_bytes {
            if let Err(e) = set_send_buffer(&stream, bytes) {
                tracing::debug!(%peer, error = %e, "could not set SO_SNDBUF (socket.send.buffer.bytes)");
            }
        }
        if let Some(bytes) = ctx.broker.config.socket_receive_buffer_bytes {
            if let Err(e) = set_receive_buffer(&stream, bytes) {
                tracing::debug!(%peer, error = %e, "could not set SO_RCVBUF (socket.receive.buffer.bytes)");
            }
        }
        let broker = ctx.broker.clone();
        let sessions = ctx.fetch_sessions.clone();
        let name = name.clone();
        tokio::spawn(async move {
            connection::serve(stream, peer, name, broker, sessions).await;
            drop(slot);
            drop(permit);
        });
    }
}

/// Sets SO_SNDBUF (`socket.send.buffer.bytes`, Kafka's default 102400), which also turns off
/// the kernel's autotuning of the send buffer. On a 2-core VM, a raw fetch loop reading 1 GiB from
/// the page cache cost the broker about half the CPU with 102400 as with the autotuned buffer
/// (loopback delivery in `sendfile`; see bench/METHOD.md, "Fetch: socket send buffer").
fn set_send_buffer(stream: &tokio::net::TcpStream, bytes: usize) -> std::io::Result<()> {
    socket2::SockRef::from(stream).set_send_buffer_size(bytes)
}

/// Sets SO_RCVBUF (`socket.receive.buffer.bytes`, only when set; see
/// `BrokerConfig::socket_receive_buffer_bytes` for why sluice's default is the kernel's).
fn set_receive_buffer(stream: &tokio::net::TcpStream, bytes: usize) -> std::io::Result<()> {
    socket2::SockRef::from(stream).set_recv_buffer_size(bytes)
}

/// `setsockopt` of an `int` option on a socket this process holds open.
fn set_int_option(fd: std::os::fd::RawFd, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> std::io::Result<()> {
    // SAFETY: setsockopt reads `size_of::<c_int>()` bytes from a live local; a bad fd or
    // option is an error return, not undefined behaviour.
    let r = unsafe {
        libc::setsockopt(fd, level, name, (&value as *const libc::c_int).cast(), std::mem::size_of::<libc::c_int>() as libc::socklen_t)
    };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Whether the running kernel is Linux `major.minor` or later (false where `uname` says
/// otherwise or cannot be read).
fn linux_at_least(major: u32, minor: u32) -> bool {
    // SAFETY: uname fills the zeroed struct it is given; its strings are NUL-terminated.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    if unsafe { libc::uname(&mut u) } != 0 {
        return false;
    }
    // SAFETY: both fields are NUL-terminated arrays inside `u`.
    let (sys, release) = unsafe { (std::ffi::CStr::from_ptr(u.sysname.as_ptr()), std::ffi::CStr::from_ptr(u.release.as_ptr())) };
    sys.to_bytes() == b"Linux" && release_at_least(&release.to_string_lossy(), major, minor)
}

/// `release` (e.g. "6.1.0-18-amd64") is `major.minor` or later.
fn release_at_least(release: &str, major: u32, minor: u32) -> bool {
    let mut parts = release.split(|c: char| !c.is_ascii_digit()).map(|p| p.parse::<u32>());
    match (parts.next(), parts.next()) {
        (Some(Ok(a)), Some(Ok(b))) => (a, b) >= (major, minor),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_releases_compare_by_major_then_minor() {
        for (release, at_least_5_10) in
            [("6.1.0-18-amd64", true), ("5.10.0", true), ("5.9.16", false), ("4.19.0-26-amd64", false), ("5.15", true), ("junk", false), ("", false)]
        {
            assert_eq!(release_at_least(release, 5, 10), at_least_5_10, "{release}");
        }
    }

    #[tokio::test]
    async fn socket_buffer_keys_set_so_sndbuf_and_so_rcvbuf_of_an_accepted_connection() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let _client = tokio::net::TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        let sock = socket2::SockRef::from(&accepted);
        type Set = fn(&tokio::net::TcpStream, usize) -> std::io::Result<()>;
        type Get = fn(&socket2::SockRef<'_>) -> std::io::Result<usize>;
        let buffers: [(Set, Get); 2] =
            [(set_send_buffer, |s| s.send_buffer_size()), (set_receive_buffer, |s| s.recv_buffer_size())];
        for (set, get) in buffers {
            // Linux doubles the value asked for, to leave room for its bookkeeping. Both values
            // are below net.core.wmem_max / rmem_max's usual 212992, which caps what an
            // unprivileged value gets.
            for bytes in [65_536, 100_000] {
                set(&accepted, bytes).unwrap();
                assert_eq!(get(&sock).unwrap(), 2 * bytes);
            }
        }
    }
}
