//! Request framing: a 4-byte big-endian size, then that many bytes of request.
//!
//! ```text
//! +----------------+---------------------------------------------+
//! | size: i32 (BE) | request header | request body               |
//! +----------------+---------------------------------------------+
//!                  |<---------------- size bytes --------------->|
//! ```
//!
//! # Invariants
//! - The size is checked (non-negative, at most `socket.request.max.bytes`) before any buffer is
//!   reserved for the frame; a bad size means the connection must be closed, as Kafka does.
//! - A partial frame is an expected outcome ([`FrameCheck::Incomplete`]), not an error.

use bytes::{Buf, Bytes};
use kafka_protocol::messages::{ApiKey, RequestHeader};
use kafka_protocol::protocol::Decodable;

/// Size of the length prefix.
pub const SIZE_PREFIX: usize = 4;

/// What the bytes at the head of a connection's read buffer hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameCheck {
    /// Need at least this many bytes in total (prefix included) before a frame is complete.
    Incomplete { needed: usize },
    /// A complete frame whose body is `len` bytes follows the prefix.
    Complete { len: usize },
    /// The size prefix is negative or above the limit: close the connection.
    Invalid { size: i32 },
}

/// Looks at the start of `buf` without consuming or allocating.
pub fn check_frame(buf: &[u8], max_size: usize) -> FrameCheck {
    if buf.len() < SIZE_PREFIX {
        return FrameCheck::Incomplete { needed: SIZE_PREFIX };
    }
    let size = i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
    if size < 0 || size as usize > max_size {
        return FrameCheck::Invalid { size };
    }
    let len = size as usize;
    if buf.len() < SIZE_PREFIX + len {
        FrameCheck::Incomplete { needed: SIZE_PREFIX + len }
    } else {
        FrameCheck::Complete { len }
    }
}

/// The fixed start of every request header (all header versions share it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderPrefix {
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
}

/// Why a request header could not be read.
#[derive(Debug, thiserror::Error)]
pub enum HeaderError {
    #[error("request of {0} bytes is too short for a request header")]
    TooShort(usize),
    #[error("unknown api key {0}")]
    UnknownApiKey(i16),
    #[error("malformed request header for api key {api_key} v{api_version}: {reason}")]
    Malformed { api_key: i16, api_version: i16, reason: String },
}

/// Reads api key, version and correlation id without consuming.
pub fn peek_header_prefix(body: &[u8]) -> Result<HeaderPrefix, HeaderError> {
    if body.len() < 8 {
        return Err(HeaderError::TooShort(body.len()));
    }
    Ok(HeaderPrefix {
        api_key: i16::from_be_bytes([body[0], body[1]]),
        api_version: i16::from_be_bytes([body[2], body[3]]),
        correlation_id: i32::from_be_bytes([body[4], body[5], body[6], body[7]]),
    })
}

/// Decodes the full request header (v1 or v2 as the api version implies), leaving `body` at the
/// start of the request message. The caller has already checked the version is supported, so
/// `api_version` selects a valid header version.
pub fn decode_request_header(body: &mut Bytes, api_key: ApiKey, api_version: i16) -> Result<RequestHeader, HeaderError> {
    let header_version = api_key.request_header_version(api_version);
    RequestHeader::decode(body, header_version).map_err(|e| HeaderError::Malformed {
        api_key: api_key as i16,
        api_version,
        reason: e.to_string(),
    })
}

/// Skips the length prefix of a complete frame and returns its body.
pub fn take_frame(buf: &mut bytes::BytesMut, len: usize) -> Bytes {
    buf.advance(SIZE_PREFIX);
    buf.split_to(len).freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn negative_and_oversized_sizes_are_invalid_before_allocation() {
        assert_eq!(check_frame(&(-1i32).to_be_bytes(), 100), FrameCheck::Invalid { size: -1 });
        assert_eq!(check_frame(&101i32.to_be_bytes(), 100), FrameCheck::Invalid { size: 101 });
        assert_eq!(check_frame(&100i32.to_be_bytes(), 100), FrameCheck::Incomplete { needed: 104 });
    }

    #[test]
    fn partial_prefix_and_partial_body_are_incomplete() {
        assert_eq!(check_frame(&[0, 0], 100), FrameCheck::Incomplete { needed: 4 });
        let mut b = 3i32.to_be_bytes().to_vec();
        b.extend_from_slice(&[1, 2]);
        assert_eq!(check_frame(&b, 100), FrameCheck::Incomplete { needed: 7 });
        b.push(3);
        assert_eq!(check_frame(&b, 100), FrameCheck::Complete { len: 3 });
    }

    #[test]
    fn header_prefix_needs_eight_bytes() {
        assert!(matches!(peek_header_prefix(&[0; 7]), Err(HeaderError::TooShort(7))));
        let p = peek_header_prefix(&[0, 18, 0, 3, 0, 0, 0, 42]).unwrap();
        assert_eq!(p, HeaderPrefix { api_key: 18, api_version: 3, correlation_id: 42 });
    }

    proptest! {
        #[test]
        fn check_frame_never_claims_more_than_the_limit(buf in proptest::collection::vec(any::<u8>(), 0..64), max in 0usize..1024) {
            match check_frame(&buf, max) {
                FrameCheck::Complete { len } => prop_assert!(len <= max && buf.len() >= len + 4),
                FrameCheck::Incomplete { needed } => prop_assert!(needed <= max + 4 && needed > buf.len()),
                FrameCheck::Invalid { size } => prop_assert!(size < 0 || size as usize > max),
            }
        }
    }
}
