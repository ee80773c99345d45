//! Per-partition log settings, with Kafka's names (topic-level key in each field's doc).

/// Settings a [`crate::log::PartitionLog`] obeys; [`LogConfig::default`] is Kafka's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// `segment.bytes`: roll before a segment would grow past this.
    pub segment_bytes: u64,
    /// `segment.ms`: roll a non-empty segment whose first batch is older than this.
    pub segment_ms: i64,
    /// `index.interval.bytes`: bytes appended between offset/time index entries.
    pub index_interval_bytes: u32,
    /// `retention.ms`: delete rolled segments whose newest timestamp is older; -1 = forever.
    pub retention_ms: i64,
    /// `retention.bytes`: delete the oldest rolled segments while the log is larger; -1 = no cap.
    pub retention_bytes: i64,
    /// `flush.messages`: fsync after this many appended records.
    pub flush_interval_messages: u64,
    /// `flush.ms`: fsync when the last flush is older than this.
    pub flush_interval_ms: i64,
    /// `flush.acks.all` (sluice's own): a produce with acks=all is answered only once its
    /// batches are fsynced (see `Partition::sync_to` in the replication layer).
    pub flush_acks_all: bool,
    /// `max.message.bytes`: largest record batch accepted from a producer.
    pub max_message_bytes: usize,
    /// `message.timestamp.type=LogAppendTime`: the broker stamps batches with its clock.
    pub message_timestamp_type_log_append: bool,
    /// `cleanup.policy` includes `compact`: every produced record must have a key (Kafka refuses
    /// keyless ones with INVALID_RECORD, since compaction could not place them).
    pub compacted: bool,
    /// `min.insync.replicas`: not the log's, but carried with the topic's other settings to the
    /// partition (acks=all and the high watermark need at least this many in-sync replicas).
    pub min_insync_replicas: i32,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1024 * 1024 * 1024,
            segment_ms: 7 * 24 * 60 * 60 * 1000,
            index_interval_bytes: 4096,
            retention_ms: 7 * 24 * 60 * 60 * 1000,
            retention_bytes: -1,
            flush_interval_messages: i64::MAX as u64,
            flush_interval_ms: i64::MAX,
            flush_acks_all: false,
            max_message_bytes: 1_048_588,
            message_timestamp_type_log_append: false,
            compacted: false,
            min_insync_replicas: 1,
        }
    }
}
