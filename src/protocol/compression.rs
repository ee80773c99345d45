//! The four Kafka codecs, for the few places that must look inside a compressed batch
//! (offset-by-timestamp lookups, compaction keys). The produce and fetch paths never call this:
//! batches pass through in the form the producer chose.
//!
//! Formats, as Kafka writes and reads them:
//! - gzip: a gzip stream (flate2).
//! - snappy: either snappy-java's "xerial" framing (magic `\x82SNAPPY\0`, two i32 versions,
//!   then blocks of `i32 length | raw snappy block`), which the Java client writes, or one raw
//!   snappy block, which librdkafka writes; both are accepted.
//! - lz4: the LZ4 frame format (lz4_flex); magic v2 batches use correct frame checksums.
//! - zstd: a zstd frame (the zstd crate).
//!
//! # Invariants
//! - Decompression never produces more than the caller's `limit` bytes: a batch that would is an
//!   error, so a small "zip bomb" cannot make the broker allocate without bound.

use std::io::Read;

use crate::protocol::record_batch::Compression;

/// Why a payload could not be decompressed.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("{codec:?} payload is malformed: {reason}")]
    Malformed { codec: Compression, reason: String },
    #[error("{codec:?} payload decompresses to more than {limit} bytes")]
    TooLarge { codec: Compression, limit: usize },
}

const XERIAL_MAGIC: &[u8] = b"\x82SNAPPY\x00";

fn read_bounded(codec: Compression, mut reader: impl Read, limit: usize) -> Result<Vec<u8>, CodecError> {
    let mut out = Vec::new();
    reader
        .by_ref()
        .take(limit as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| CodecError::Malformed { codec, reason: e.to_string() })?;
    if out.len() > limit {
        return Err(CodecError::TooLarge { codec, limit });
    }
    Ok(out)
}

fn snappy_raw(block: &[u8], out: &mut Vec<u8>, limit: usize) -> Result<(), CodecError> {
    let codec = Compression::Snappy;
    let len = snap::raw::decompress_len(block).map_err(|e| CodecError::Malformed { codec, reason: e.to_string() })?;
    if out.len() + len > limit {
        return Err(CodecError::TooLarge { codec, limit });
    }
    let start = out.len();
    out.resize(start + len, 0);
    snap::raw::Decoder::new()
        .decompress(block, &mut out[start..])
        .map_err(|e| CodecError::Malformed { codec, reason: e.to_string() })?;
    Ok(())
}

fn snappy(data: &[u8], limit: usize) -> Result<Vec<u8>, CodecError> {
    let mut out = Vec::new();
    if !data.starts_with(XERIAL_MAGIC) {
        snappy_raw(data, &mut out, limit)?;
        return Ok(out);
    }
    // magic (8) + version (4) + compatible version (4), then length-prefixed blocks.
    let mut pos = XERIAL_MAGIC.len() + 8;
    while pos < data.len() {
        let malformed = || CodecError::Malformed { codec: Compression::Snappy, reason: "truncated xerial block".into() };
        let len_bytes: [u8; 4] = data.get(pos..pos + 4).ok_or_else(malformed)?.try_into().map_err(|_| malformed())?;
        let len = u32::from_be_bytes(len_bytes) as usize;
        pos += 4;
        let block = data.get(pos..pos.checked_add(len).ok_or_else(malformed)?).ok_or_else(malformed)?;
        snappy_raw(block, &mut out, limit)?;
        pos += len;
    }
    Ok(out)
}

/// Decompresses a batch's records section, producing at most `limit` bytes.
pub fn decompress(codec: Compression, data: &[u8], limit: usize) -> Result<Vec<u8>, CodecError> {
    match codec {
        Compression::None => {
            if data.len() > limit {
                return Err(CodecError::TooLarge { codec, limit });
            }
            Ok(data.to_vec())
        }
        Compression::Gzip => read_bounded(codec, flate2::read::GzDecoder::new(data), limit),
        Compression::Snappy => snappy(data, limit),
        Compression::Lz4 => read_bounded(codec, lz4_flex::frame::FrameDecoder::new(data), limit),
        Compression::Zstd => {
            let decoder =
                zstd::stream::read::Decoder::new(data).map_err(|e| CodecError::Malformed { codec, reason: e.to_string() })?;
            read_bounded(codec, decoder, limit)
        }
    }
}

/// Compresses `data` with `codec` in the format Kafka's Java client writes (xerial framing for
/// snappy). Used by tests and, later, by topic-level recompression.
pub fn compress(codec: Compression, data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    match codec {
        Compression::None => data.to_vec(),
        Compression::Gzip => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            let _ = e.write_all(data);
            e.finish().unwrap_or_default()
        }
        Compression::Snappy => {
            let mut out = XERIAL_MAGIC.to_vec();
            out.extend_from_slice(&1i32.to_be_bytes());
            out.extend_from_slice(&1i32.to_be_bytes());
            for chunk in data.chunks(32 * 1024) {
                let block = snap::raw::Encoder::new().compress_vec(chunk).unwrap_or_default();
                out.extend_from_slice(&(block.len() as u32).to_be_bytes());
                out.extend_from_slice(&block);
            }
            out
        }
        Compression::Lz4 => {
            let mut e = lz4_flex::frame::FrameEncoder::new(Vec::new());
            let _ = e.write_all(data);
            e.finish().unwrap_or_default()
        }
        Compression::Zstd => zstd::bulk::compress(data, 3).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Compression; 5] =
        [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd];

    #[test]
    fn every_codec_round_trips() {
        let data: Vec<u8> = (0..100_000u32).flat_map(|i| (i % 251).to_le_bytes()).collect();
        for codec in ALL {
            let c = compress(codec, &data);
            assert_eq!(decompress(codec, &c, data.len()).unwrap(), data, "{codec:?}");
        }
    }

    #[test]
    fn raw_snappy_from_librdkafka_is_accepted() {
        let data = b"hello hello hello hello".repeat(100);
        let raw = snap::raw::Encoder::new().compress_vec(&data).unwrap();
        assert_eq!(decompress(Compression::Snappy, &raw, 1 << 20).unwrap(), data);
    }

    #[test]
    fn output_beyond_the_limit_is_refused() {
        let zeros = vec![0u8; 1 << 20];
        for codec in ALL {
            let c = compress(codec, &zeros);
            assert!(matches!(decompress(codec, &c, 1000), Err(CodecError::TooLarge { .. })), "{codec:?}");
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for codec in [Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd] {
            assert!(decompress(codec, b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01\xff\xff\xff\xff", 1 << 20).is_err());
            assert!(decompress(codec, &[0xde, 0xad, 0xbe, 0xef, 1, 2, 3], 1 << 20).is_err(), "{codec:?}");
        }
    }
}
