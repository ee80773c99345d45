//! The partition log: segments, offset/time indexes, recovery, retention and leader epochs.
//!
//! Owns everything under one partition directory `<topic>-<partition>/` plus the text formats
//! of the log-dir-level offset checkpoints. Does not own replication state (high watermark,
//! ISR) or producer-state snapshots; it keeps each segment's aborted-transaction index
//! (`.txnindex`, [`txn_index`]), which the replication layer fills as abort markers are written;
//! compaction rewrites rolled segments through [`cleaner`].
//!
//! # On-disk layout (byte-compatible with Apache Kafka 4.x)
//! ```text
//!  orders-3/
//!    00000000000000000000.log        record batches exactly as on the wire, back to back
//!    00000000000000000000.index      8-byte entries: relativeOffset u32 BE | position u32 BE
//!    00000000000000000000.timeindex  12-byte entries: timestamp i64 BE | relativeOffset u32 BE
//!    00000000000000000000.txnindex   34-byte entries, one per aborted transaction (if any)
//!    00000000000000368769.log        next segment: name = base offset, %020d
//!    …
//!    leader-epoch-checkpoint         "0\n<N>\n" then N lines "<epoch> <startOffset>"
//!    partition.metadata              "version: 0\ntopic_id: <base64url uuid, no padding>\n"
//! ```
//! An offset index entry is written when more than `index_interval_bytes` were appended since
//! the previous one; it maps the LAST offset of the batch being appended to the position where
//! that batch starts (what Kafka writes). A time index entry `(max timestamp so far, offset of
//! that batch)` is written at the same moment, only when the timestamp grew, and once more when
//! a segment is rolled.
//!
//! # Invariants
//! - Segments are sorted by base offset; every batch in a segment has offsets >= its base and
//!   below the next segment's base; relative offsets fit in u32 and positions in u32.
//! - Only the last ("active") segment is written; rolled segments are immutable.
//! - `log_start_offset <= log_end_offset`; the active segment is never deleted by retention.
//! - Index entries are strictly increasing in offset and position (time index: in timestamp),
//!   and every position points at a batch boundary inside the `.log` file.
//!
//! # Durability and recovery
//! Appends go to the page cache and never fsync: the append that reaches `flush.messages` /
//! `flush.ms` is marked `flush_due`, and its caller fdatasyncs the `.log` through a
//! [`SyncPoint`](partition::SyncPoint) without the partition lock. A roll flushes the old segment
//! in the background (`flush.rs`); `flush` (clean shutdown's fallback) fdatasyncs the `.log` and
//! the indexes. A failed write or fsync poisons the
//! [`PartitionLog`]: further appends fail with [`LogError::Poisoned`] until it is reopened and
//! recovered. On open the active segment is scanned batch by batch (length, CRC, offsets); the
//! first bad byte and everything after it is truncated with a `warn!` naming the file, position,
//! bytes dropped and the file beside it they were copied to (`segment`, "Recovery"), and its
//! indexes are rebuilt. Older segments are trusted, but a missing or
//! malformed index is rebuilt from the `.log`. Checkpoint files are written to `<name>.tmp`,
//! fsynced, renamed over the old file and the directory is fsynced. Opening a new partition
//! fsyncs nothing (a missing segment is recreated empty on the next open), and a new partition's
//! `partition.metadata` may be written without fsync: the broker decides which new partitions
//! must be durable (see `broker` "Durability of topic creation").
pub mod checkpoint;
pub mod cleaner;
pub mod config;
pub mod epoch;
pub mod error;
pub mod flush;
pub mod index;
pub mod io;
pub mod partition;
pub mod partition_metadata;
pub mod segment;
pub mod txn_index;

pub use checkpoint::{read_offset_checkpoint, write_offset_checkpoint};
pub use config::LogConfig;
pub use epoch::LeaderEpochCache;
pub use error::LogError;
pub use io::{select_backend, FileSlice, IoBackend, IoBackendChoice, SegmentFile};
pub use partition::{ActiveCheck, AppendInfo, PartitionLog, ReadResult, SliceRead, SyncPoint};
pub use partition_metadata::{read_partition_metadata, write_partition_metadata};

/// Splits a partition directory name `<topic>-<partition>` into its parts.
///
/// Rejects names Kafka uses for directories pending deletion or future replicas
/// (`x-3.<uuid>-delete`, `x-3.<uuid>-future`, `x-3.<uuid>-stray`), an empty topic,
/// and a partition that is not a non-negative decimal number.
pub fn parse_partition_dir_name(name: &str) -> Option<(String, i32)> {
    let (topic, partition) = name.rsplit_once('-')?;
    if topic.is_empty() || partition.is_empty() || !partition.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if !topic.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-') {
        return None;
    }
    let partition: i32 = partition.parse().ok()?;
    Some((topic.to_string(), partition))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_dir_names_parse_like_kafka() {
        assert_eq!(parse_partition_dir_name("my-topic-3"), Some(("my-topic".into(), 3)));
        assert_eq!(parse_partition_dir_name("t-0"), Some(("t".into(), 0)));
        assert_eq!(parse_partition_dir_name("__consumer_offsets-49"), Some(("__consumer_offsets".into(), 49)));
        assert_eq!(parse_partition_dir_name("x-3.abc-delete"), None);
        assert_eq!(parse_partition_dir_name("x-3.abc-future"), None);
        assert_eq!(parse_partition_dir_name("-1"), None);
        assert_eq!(parse_partition_dir_name("topic"), None);
        assert_eq!(parse_partition_dir_name("topic-"), None);
        assert_eq!(parse_partition_dir_name("topic--1"), Some(("topic-".into(), 1)));
        assert_eq!(parse_partition_dir_name("t-99999999999"), None);
    }
}
