//! One client connection: read frames, run requests in arrival order, write responses.
//!
//! Requests on a connection are handled one at a time in order, as Kafka does (clients rely on
//! responses arriving in request order); clients get parallelism from several connections and
//! from pipelining, which the read buffer absorbs. One exception: an acks=all produce waiting
//! for its fsyncs (`flush.acks.all`) is answered by a task of its own ([`Dispatch::Later`]), and
//! the requests behind it are handled meanwhile, so that one producer's pipelined batches share
//! an fsync. Their responses are held and written in request order, at most
//! [`MAX_HELD_RESPONSES`] of them; past that the connection reads no further request until the
//! oldest is written.
//!
//! # Invariants
//! - The read buffer grows by at most [`MAX_READ_RESERVE`] beyond the bytes that have arrived,
//!   and never past one validated frame; a frame size that is negative or above
//!   `socket.request.max.bytes` closes the connection before anything is reserved for it.
//! - Nothing a client sends ends the process: unknown api keys and unsupported versions close
//!   this connection only (ApiVersions gets Kafka's v0 UNSUPPORTED_VERSION answer instead).
//! - Responses are flushed when no further complete request is already buffered, so a burst of
//!   pipelined requests costs one write.
//!
//! # Waking for the rest of a large frame
//! A frame [`WAKE_FOR_REST_FROM`] or more short of complete sets the socket's receive low-water
//! mark (`SO_RCVLOWAT`) to what is missing, so the connection is woken once the rest has arrived
//! rather than for every piece of it: a producer's 1 MiB request reaches the broker in several
//! pieces, and each wake-up of an idle broker thread costs a context switch (on a VM, an exit to
//! the hypervisor as well). The mark goes back to 1 byte for smaller remainders. The kernel caps
//! the mark (half of `tcp_rmem`'s maximum) and wakes the reader anyway when the receive buffer or
//! window is full, so a frame larger than the buffer still arrives, a piece at a time; a
//! connection closed mid-frame still wakes its reader. The wake-up on a full window needs Linux
//! 5.10 (the fix titled "tcp: fix SO_RCVLOWAT hangs with fat skbs"): on older kernels, and where
//! the option cannot be set, the connection reads as before (the latter said once per connection
//! at debug level).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use kafka_protocol::messages::ApiKey;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufWriter};
use tokio::net::TcpStream;
use tokio::task::{JoinError, JoinHandle};

use crate::api::{self, api_versions, fetch_session::FetchSessionCache, versions, Dispatch, RequestContext};
use crate::broker::Broker;
use crate::metrics::{self, CloseReason, RequestTimes};
use crate::protocol::frame::{self, FrameCheck};

use super::send::ResponseWriter;

/// Initial read buffer; grows only to the size of a validated frame.
const READ_CHUNK: usize = 16 * 1024;

/// Most the read buffer grows by per read, so memory follows bytes received.
const MAX_READ_RESERVE: usize = 1 << 20;

/// The bytes a frame must still be missing for its connection to wait for all of them at once
/// (see the module docs). Less arrives in one or two pieces over loopback anyway (its segments
/// are up to 64 KiB).
const WAKE_FOR_REST_FROM: usize = 64 * 1024;

/// The socket's receive low-water mark, set only when it changes.
struct WakeAt {
    fd: RawFd,
    bytes: usize,
    usable: bool,
}

impl WakeAt {
    fn new(fd: RawFd) -> WakeAt {
        static SAFE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        let usable = *SAFE.get_or_init(|| super::linux_at_least(5, 10));
        WakeAt { fd, bytes: 1, usable }
    }

    /// Wake the reader once `missing` bytes have arrived, if that many are worth waiting for.
    fn missing(&mut self, missing: usize, peer: SocketAddr) {
        let bytes = if missing >= WAKE_FOR_REST_FROM { missing } else { 1 };
        if !self.usable || bytes == self.bytes {
            return;
        }
        let value = bytes.min(libc::c_int::MAX as usize) as libc::c_int;
        match super::set_int_option(self.fd, libc::SOL_SOCKET, libc::SO_RCVLOWAT, value) {
            Ok(()) => self.bytes = bytes,
            Err(e) => {
                tracing::debug!(%peer, error = %e, "cannot set SO_RCVLOWAT; reading large frames piece by piece");
                self.usable = false;
            }
        }
    }
}

/// Most responses held behind one that is still being made (clients keep at most 5 requests in
/// flight by default).
const MAX_HELD_RESPONSES: usize = 16;

/// A response that must wait for the ones before it, with what the request metrics need.
struct Held {
    reply: Reply,
    api_key: ApiKey,
    api_version: i16,
    queue: Duration,
    started: Instant,
}

enum Reply {
    Ready(Dispatch),
    Later(JoinHandle<Dispatch>),
}

impl Reply {
    fn new(d: Dispatch) -> Reply {
        match d {
            Dispatch::Later(h) => Reply::Later(h),
            d => Reply::Ready(d),
        }
    }
}

/// The outcome of a [`Dispatch::Later`] task; one that panicked closes the connection.
fn joined(r: Result<Dispatch, JoinError>) -> Dispatch {
    r.unwrap_or_else(|e| {
        tracing::error!(error = %e, "a request's response task failed");
        Dispatch::Close(format!("the response task failed: {e}"))
    })
}

/// Writes one response (never [`Dispatch::Later`]: those are awaited first).
async fn write_reply(writer: &mut ResponseWriter, d: Dispatch, api_key: ApiKey, api_version: i16) -> Result<(), Closed> {
    match d {
        Dispatch::Respond(resp) => writer.write_all(&resp).await.map_err(Closed::Io),
        Dispatch::Stream(parts) => super::send::send_parts(writer, parts).await.map_err(Closed::Io),
        Dispatch::Silent => Ok(()),
        Dispatch::Close(reason) => Err(Closed::Protocol(format!("{api_key:?} v{api_version}: {reason}"))),
        Dispatch::Later(_) => Err(Closed::Protocol(format!("{api_key:?} v{api_version}: a deferred response deferred again"))),
    }
}

/// Writes the held responses that are ready, oldest first, up to the first still being made.
async fn write_ready(held: &mut VecDeque<Held>, writer: &mut ResponseWriter) -> Result<(), Closed> {
    loop {
        let ready = match held.front() {
            None => return Ok(()),
            Some(Held { reply: Reply::Later(task), .. }) => task.is_finished(),
            Some(_) => true,
        };
        if !ready {
            return Ok(());
        }
        let h = held.pop_front().expect("front exists");
        let d = match h.reply {
            Reply::Ready(d) => d,
            Reply::Later(task) => joined(task.await),
        };
        let local = h.started.elapsed();
        let sent = Instant::now();
        write_reply(writer, d, h.api_key, h.api_version).await?;
        metrics::request_completed(h.api_key, h.api_version, RequestTimes { queue: h.queue, local, send: sent.elapsed() });
    }
}

/// Writes every held response, waiting for those still being made.
async fn drain_held(held: &mut VecDeque<Held>, writer: &mut ResponseWriter) -> Result<(), Closed> {
    while let Some(front) = held.front_mut() {
        if let Reply::Later(task) = &mut front.reply {
            front.reply = Reply::Ready(joined(task.await));
        }
        write_ready(held, writer).await?;
    }
    Ok(())
}

/// Why a connection ended (logged once, with context).
#[derive(Debug)]
enum Closed {
    ByPeer,
    Io(std::io::Error),
    Protocol(String),
}

pub async fn serve(stream: TcpStream, peer: SocketAddr, listener: Arc<str>, broker: Arc<Broker>, sessions: Arc<FetchSessionCache>) {
    let mut wake_at = WakeAt::new(stream.as_raw_fd());
    let (mut reader, writer) = stream.into_split();
    let mut writer = ResponseWriter::new(BufWriter::with_capacity(64 * 1024, writer));
    let mut buf = BytesMut::with_capacity(READ_CHUNK);
    let max = broker.config.socket_request_max_bytes;
    let mut client_id: Option<String> = None;
    let _counted = broker.metrics.connection_opened();
    // When the read that completed the frame being handled returned (start of its queue time).
    let mut last_read_at = Instant::now();
    // Responses waiting behind one still being made (see the module docs).
    let mut held: VecDeque<Held> = VecDeque::new();
    let outcome: Closed = 'conn: loop {
        // Gather one complete frame, writing held responses as they become ready.
        let len = loop {
            if let Err(c) = write_ready(&mut held, &mut writer).await {
                break 'conn c;
            }
            match frame::check_frame(&buf, max) {
                FrameCheck::Complete { len } if held.len() < MAX_HELD_RESPONSES => break len,
                FrameCheck::Complete { .. } => {
                    // Enough held: no further request until the oldest is answered.
                    if let Some(Held { reply: Reply::Later(task), .. }) = held.front_mut() {
                        let d = joined(task.await);
                        held[0].reply = Reply::Ready(d);
                    }
                }
                FrameCheck::Invalid { size } => {
                    break 'conn Closed::Protocol(format!("frame size {size} outside [0, socket.request.max.bytes={max}]"));
                }
                FrameCheck::Incomplete { needed } => {
                    if !writer.buffer().is_empty() {
                        if let Err(e) = writer.flush().await {
                            break 'conn Closed::Io(e);
                        }
                    }
                    // Grow with the data that really arrives, never by the size a client
                    // claims: a 4-byte prefix announcing 100 MB reserves one chunk, not 100 MB.
                    buf.reserve((needed - buf.len()).clamp(1, MAX_READ_RESERVE));
                    wake_at.missing(needed - buf.len(), peer);
                    // Read, or wake when the oldest held response is ready, whichever is first
                    // (`read_buf` is cancel safe: losing the race reads nothing).
                    let read = match held.front_mut() {
                        Some(Held { reply: Reply::Later(task), .. }) => tokio::select! {
                            r = reader.read_buf(&mut buf) => Some(r),
                            d = task => {
                                held[0].reply = Reply::Ready(joined(d));
                                None
                            }
                        },
                        _ => Some(reader.read_buf(&mut buf).await),
                    };
                    match read {
                        None => {}
                        Some(Ok(0)) => break 'conn Closed::ByPeer,
                        Some(Ok(_)) => last_read_at = Instant::now(),
                        Some(Err(e)) => break 'conn Closed::Io(e),
                    }
                }
            }
        };
        let mut body = frame::take_frame(&mut buf, len);
        super::idle_poll::note_request();
        let arrived = last_read_at;
        let prefix = match frame::peek_header_prefix(&body) {
            Ok(p) => p,
            Err(e) => break Closed::Protocol(e.to_string()),
        };
        let Ok(api_key) = ApiKey::try_from(prefix.api_key) else {
            break Closed::Protocol(format!("unknown api key {}", prefix.api_key));
        };
        if !versions::is_supported(api_key, prefix.api_version) {
            if api_key == ApiKey::ApiVersions {
                // Kafka answers with v0 framing so any client can read the supported ranges.
                match api::frame_response(prefix.correlation_id, 0, &api_versions::unsupported_version_response()) {
                    Ok(resp) if held.is_empty() => {
                        if let Err(e) = writer.write_all(&resp).await {
                            break Closed::Io(e);
                        }
                        continue;
                    }
                    Ok(resp) => {
                        let started = Instant::now();
                        held.push_back(Held { reply: Reply::Ready(Dispatch::Respond(resp)), api_key, api_version: 0, queue: started - arrived, started });
                        continue;
                    }
                    Err(e) => break Closed::Protocol(e),
                }
            }
            break Closed::Protocol(format!("unsupported version {} of {:?}", prefix.api_version, api_key));
        }
        let header = match frame::decode_request_header(&mut body, api_key, prefix.api_version) {
            Ok(h) => h,
            Err(e) => break Closed::Protocol(e.to_string()),
        };
        if client_id.is_none() {
            client_id = header.client_id.as_ref().map(|c| c.to_string());
        }
        let ctx = RequestContext {
            broker: broker.clone(),
            api_version: prefix.api_version,
            correlation_id: prefix.correlation_id,
            client_id: client_id.clone(),
            fetch_sessions: sessions.clone(),
            peer,
            listener: listener.clone(),
        };
        let started = Instant::now();
        let dispatched = api::dispatch(ctx, api_key, body).await;
        if !held.is_empty() || matches!(dispatched, Dispatch::Later(_)) {
            let closes = matches!(dispatched, Dispatch::Close(_));
            let api_version = prefix.api_version;
            held.push_back(Held { reply: Reply::new(dispatched), api_key, api_version, queue: started - arrived, started });
            if closes {
                // As without held responses, nothing after a request that closes the
                // connection is handled: answer what came before it, then close.
                match drain_held(&mut held, &mut writer).await {
                    Err(c) => break c,
                    Ok(()) => break Closed::Protocol(format!("{api_key:?} v{api_version}: closed")),
                }
            }
            continue;
        }
        let handled = Instant::now();
        if let Err(c) = write_reply(&mut writer, dispatched, api_key, prefix.api_version).await {
            break c;
        }
        if !matches!(frame::check_frame(&buf, max), FrameCheck::Complete { .. }) {
            if let Err(e) = writer.flush().await {
                break Closed::Io(e);
            }
        }
        let times = RequestTimes { queue: started - arrived, local: handled - started, send: handled.elapsed() };
        metrics::request_completed(api_key, prefix.api_version, times);
    };
    if matches!(outcome, Closed::Protocol(_)) {
        // A bad request closes the connection, but the requests before it were handled: their
        // held responses still go out first, as they would have without holding.
        let _ = drain_held(&mut held, &mut writer).await;
    }
    let _ = writer.flush().await;
    metrics::connection_closed(match &outcome {
        Closed::ByPeer => CloseReason::Client,
        Closed::Io(_) => CloseReason::IoError,
        Closed::Protocol(_) => CloseReason::ProtocolError,
    });
    match outcome {
        Closed::ByPeer => tracing::debug!(%peer, client_id = ?client_id, "connection closed by client"),
        Closed::Io(e) => tracing::debug!(%peer, client_id = ?client_id, error = %e, "connection I/O error"),
        Closed::Protocol(reason) => tracing::warn!(%peer, client_id = ?client_id, %reason, "closing connection"),
    }
}

#[cfg(test)]
#[path = "connection_tests.rs"]
mod tests;
