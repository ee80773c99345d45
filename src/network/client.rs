//! A Kafka-protocol client connection, for the requests one broker sends another (a follower's
//! fetches, a broker's calls to the controller): one request at a time, each answered before
//! the next is written.
//!
//! # Failure behaviour
//! Any I/O or decoding error is returned and leaves the connection unusable; callers drop it and
//! connect again. A response larger than the limit given at connect time is refused before its
//! body is read, so a peer cannot make this side allocate without bound.

use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, Request, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long a connect may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

pub struct Connection {
    stream: TcpStream,
    correlation_id: i32,
    max_response: usize,
    client_id: &'static str,
}

fn invalid(e: impl ToString) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string())
}

impl Connection {
    /// Connects to `addr` (`host:port`); responses over `max_response` bytes are refused.
    pub async fn connect(addr: &str, client_id: &'static str, max_response: usize) -> std::io::Result<Connection> {
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))??;
        stream.set_nodelay(true)?;
        Ok(Connection { stream, correlation_id: 0, max_response, client_id })
    }

    /// Sends `req` as `version` and reads its response.
    pub async fn send<R: Request>(&mut self, req: &R, version: i16) -> std::io::Result<R::Response> {
        self.correlation_id = self.correlation_id.wrapping_add(1);
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation_id)
            .with_client_id(Some(StrBytes::from_static_str(self.client_id)));
        let mut buf = BytesMut::new();
        buf.put_i32(0);
        header.encode(&mut buf, R::header_version(version)).map_err(invalid)?;
        req.encode(&mut buf, version).map_err(invalid)?;
        let n = (buf.len() - 4) as i32;
        buf[0..4].copy_from_slice(&n.to_be_bytes());
        self.stream.write_all(&buf).await?;
        let len = self.stream.read_u32().await? as usize;
        if len > self.max_response {
            return Err(invalid(format!("a response of {len} bytes is over {}", self.max_response)));
        }
        let mut body = vec![0u8; len];
        self.stream.read_exact(&mut body).await?;
        let mut body = Bytes::from(body);
        let key = ApiKey::try_from(R::KEY).map_err(|_| invalid("unknown api key"))?;
        let header = ResponseHeader::decode(&mut body, key.response_header_version(version)).map_err(invalid)?;
        if header.correlation_id != self.correlation_id {
            return Err(invalid(format!("correlation id {} answers request {}", header.correlation_id, self.correlation_id)));
        }
        let resp = R::Response::decode(&mut body, version).map_err(invalid)?;
        if body.has_remaining() {
            return Err(invalid(format!("{} bytes after the response", body.remaining())));
        }
        Ok(resp)
    }
}
