//! One client connection: read frames, run requests in arrival order, write responses.
//!
//! Requests on a connection are handled one at a time in order, as Kafka does (clients rely on
//! responses arriving in request order); clients get parallelism from several connections and
//! from pipelining, which the read buffer absorbs.
//!
//! # Invariants
//! - The read buffer grows by at most [`MAX_READ_RESERVE`] beyond the bytes that have arrived,
//!   and never past one validated frame; a frame size that is negative or above
//!   `socket.request.max.bytes` closes the connection before anything is reserved for it.
//! - Nothing a client sends ends the process: unknown api keys and unsupported versions close
//!   this connection only (ApiVersions gets Kafka's v0 UNSUPPORTED_VERSION answer instead).
//! - Responses are flushed when no further complete request is already buffered, so a burst of
//!   pipelined requests costs one write.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use kafka_protocol::messages::ApiKey;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufWriter};
use tokio::net::TcpStream;

use crate::api::{self, api_versions, fetch_session::FetchSessionCache, versions, Dispatch, RequestContext};
use crate::broker::Broker;
use crate::metrics::{self, CloseReason, RequestTimes};
use crate::protocol::frame::{self, FrameCheck};

/// Initial read buffer; grows only to the size of a validated frame.
const READ_CHUNK: usize = 16 * 1024;

/// Most the read buffer grows by per read, so memory follows bytes received.
const MAX_READ_RESERVE: usize = 1 << 20;

/// Why a connection ended (logged once, with context).
#[derive(Debug)]
enum Closed {
    ByPeer,
    Io(std::io::Error),
    Protocol(String),
}

pub async fn serve(stream: TcpStream, peer: SocketAddr, broker: Arc<Broker>, sessions: Arc<FetchSessionCache>) {
    let (mut reader, writer) = stream.into_split();
    let mut writer = BufWriter::with_capacity(64 * 1024, writer);
    let mut buf = BytesMut::with_capacity(READ_CHUNK);
    let max = broker.config.socket_request_max_bytes;
    let mut client_id: Option<String> = None;
    let _counted = broker.metrics.connection_opened();
    // When the read that completed the frame being handled returned (start of its queue time).
    let mut last_read_at = Instant::now();
    let outcome: Closed = 'conn: loop {
        // Gather one complete frame.
        let len = loop {
            match frame::check_frame(&buf, max) {
                FrameCheck::Complete { len } => break len,
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
                    match reader.read_buf(&mut buf).await {
                        Ok(0) => break 'conn Closed::ByPeer,
                        Ok(_) => last_read_at = Instant::now(),
                        Err(e) => break 'conn Closed::Io(e),
                    }
                }
            }
        };
        let mut body = frame::take_frame(&mut buf, len);
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
                    Ok(resp) => {
                        if let Err(e) = writer.write_all(&resp).await {
                            break Closed::Io(e);
                        }
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
        };
        let started = Instant::now();
        let dispatched = api::dispatch(ctx, api_key, body).await;
        let handled = Instant::now();
        match dispatched {
            Dispatch::Respond(resp) => {
                if let Err(e) = writer.write_all(&resp).await {
                    break Closed::Io(e);
                }
            }
            Dispatch::Silent => {}
            Dispatch::Close(reason) => break Closed::Protocol(format!("{:?} v{}: {reason}", api_key, prefix.api_version)),
        }
        if !matches!(frame::check_frame(&buf, max), FrameCheck::Complete { .. }) {
            if let Err(e) = writer.flush().await {
                break Closed::Io(e);
            }
        }
        let times = RequestTimes { queue: started - arrived, local: handled - started, send: handled.elapsed() };
        metrics::request_completed(api_key, prefix.api_version, times);
    };
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
