//! Consumer lag, computed by the broker from the group coordinator's committed offsets and the
//! partitions' live state.
//!
//! The group coordinator implements [`GroupsView`] and registers it with
//! [`super::BrokerMetrics::set_groups_view`]; until then no group metrics are exported (absent,
//! not zero, so an alert on them cannot be silently satisfied).
//!
//! # Definitions
//! - lag (records) = `max(0, high_watermark - committed)`. A committed offset below the log start
//!   (the records were deleted unread) still counts from the committed offset, as Kafka's tools do.
//! - lag (seconds) = `now - timestamp of the oldest unconsumed record's batch`, 0 when caught up.
//!   The batch is the one holding `max(committed, log_start_offset)`; its timestamp is the
//!   broker's LogAppendTime when the topic uses it, else the first record's CreateTime (set by the
//!   producer, so clock skew and linger.ms show up in it). Records earlier in the same batch may
//!   already be consumed, so this errs on the old side by at most one batch's time span.
//! - retention used = `lag_seconds * 1000 / retention.ms`: at 1.0 the retention sweep may delete
//!   records the group has not read. Absent for `retention.ms = -1`.
//! - commit age = `now - commit_timestamp_ms` of the last commit for the partition.
//! - the trend d(lag)/dt is computed by the [`super::sampler`] from lag samples.
//!
//! # Cost
//! One batch-header read (61 bytes, through the offset index) per committed partition per
//! scrape or sample; no record bytes are copied.

use std::collections::HashMap;

use crate::broker::Broker;
use crate::protocol::record_batch::BatchHeader;

/// One committed offset, as the group coordinator holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    pub group: String,
    pub topic: String,
    pub partition: i32,
    /// The next offset the group will read; negative means "no offset committed".
    pub offset: i64,
    /// When the commit was made (the OffsetCommit's commit timestamp, wall clock ms).
    pub commit_timestamp_ms: i64,
}

/// One group's membership and rebalance history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSummary {
    pub group: String,
    /// Kafka's state name: Empty, PreparingRebalance, CompletingRebalance, Stable, Dead
    /// (classic) or Empty, Assigning, Reconciling, Stable, Dead (KIP-848). A bounded set.
    pub state: String,
    pub members: u32,
    pub generation: i32,
    /// Rebalances started since the group was loaded; never decreases while the broker runs.
    pub rebalances_total: u64,
    /// Duration of the last completed rebalance, if one completed.
    pub last_rebalance_duration_ms: Option<u64>,
}

/// What the metrics need from the group coordinator. Implementations must be cheap enough to
/// call once per scrape and once per sampler tick (every 5 s): a copy of in-memory state, no I/O.
pub trait GroupsView: Send + Sync {
    /// Every committed offset of every group this broker coordinates.
    fn committed_offsets(&self) -> Vec<CommittedOffset>;
    /// Every group this broker coordinates.
    fn groups(&self) -> Vec<GroupSummary>;
}

/// What the lag math needs of a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionPosition {
    pub log_start_offset: i64,
    pub high_watermark: i64,
    /// The topic's retention.ms; `None` for infinite (-1).
    pub retention_ms: Option<i64>,
}

/// The lag of one group on one partition.
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionLag {
    pub group: String,
    pub topic: String,
    pub partition: i32,
    pub committed: i64,
    pub lag_records: i64,
    /// `None` when the oldest unconsumed record's timestamp is unknown (no timestamp in the batch).
    pub lag_seconds: Option<f64>,
    pub retention_used_ratio: Option<f64>,
    pub commit_age_seconds: f64,
}

/// The timestamp of a batch as the lag definition uses it (see the module doc).
pub fn batch_timestamp(h: &BatchHeader) -> Option<i64> {
    let ts = if h.is_log_append_time() { h.max_timestamp } else { h.base_timestamp };
    (ts >= 0).then_some(ts)
}

/// Pure lag math for one committed offset; `oldest_unconsumed_ms` is the timestamp of the batch
/// holding the first unconsumed record (ignored when caught up).
pub fn compute(c: &CommittedOffset, p: &PartitionPosition, oldest_unconsumed_ms: Option<i64>, now_ms: i64) -> PartitionLag {
    let lag_records = (p.high_watermark - c.offset).max(0);
    let lag_seconds = if lag_records == 0 {
        Some(0.0)
    } else {
        oldest_unconsumed_ms.map(|ts| (now_ms - ts).max(0) as f64 / 1000.0)
    };
    let retention_used_ratio = match (lag_seconds, p.retention_ms) {
        (Some(s), Some(r)) if r > 0 => Some(s * 1000.0 / r as f64),
        _ => None,
    };
    PartitionLag {
        group: c.group.clone(),
        topic: c.topic.clone(),
        partition: c.partition,
        committed: c.offset,
        lag_records,
        lag_seconds,
        retention_used_ratio,
        commit_age_seconds: (now_ms - c.commit_timestamp_ms).max(0) as f64 / 1000.0,
    }
}

/// Lag of every committed offset in `committed` whose partition exists on this broker.
pub fn collect(broker: &Broker, committed: &[CommittedOffset], now_ms: i64) -> Vec<PartitionLag> {
    let mut retention: HashMap<String, Option<i64>> = HashMap::new();
    let mut out = Vec::with_capacity(committed.len());
    for c in committed {
        if c.offset < 0 {
            continue;
        }
        let Some(topic) = broker.topic(&c.topic) else { continue };
        let Some(p) = topic.partition(c.partition) else { continue };
        let retention_ms = *retention.entry(c.topic.clone()).or_insert_with(|| {
            broker
                .topic_effective_configs(&topic)
                .get("retention.ms")
                .and_then(|v| v.parse::<i64>().ok())
                .filter(|r| *r > 0)
        });
        let pos = PartitionPosition { log_start_offset: p.log_start_offset(), high_watermark: p.high_watermark(), retention_ms };
        let oldest = if c.offset < pos.high_watermark {
            match p.batch_header_at(c.offset.max(pos.log_start_offset)) {
                Ok(h) => h.as_ref().and_then(batch_timestamp),
                Err(e) => {
                    tracing::debug!(partition = ?p, offset = c.offset, error = %e, "lag: reading the batch header failed");
                    None
                }
            }
        } else {
            None
        };
        out.push(compute(c, &pos, oldest, now_ms));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn committed(offset: i64, commit_ts: i64) -> CommittedOffset {
        CommittedOffset { group: "g".into(), topic: "t".into(), partition: 0, offset, commit_timestamp_ms: commit_ts }
    }

    #[test]
    fn caught_up_group_has_zero_lag_whatever_the_timestamps() {
        let p = PartitionPosition { log_start_offset: 0, high_watermark: 10, retention_ms: Some(60_000) };
        let l = compute(&committed(10, 1_000), &p, Some(0), 5_000);
        assert_eq!(l.lag_records, 0);
        assert_eq!(l.lag_seconds, Some(0.0));
        assert_eq!(l.retention_used_ratio, Some(0.0));
        assert_eq!(l.commit_age_seconds, 4.0);
    }

    #[test]
    fn lag_seconds_and_retention_use_the_oldest_unconsumed_batch() {
        let p = PartitionPosition { log_start_offset: 0, high_watermark: 100, retention_ms: Some(100_000) };
        let l = compute(&committed(40, 10_000), &p, Some(20_000), 80_000);
        assert_eq!(l.lag_records, 60);
        assert_eq!(l.lag_seconds, Some(60.0));
        assert_eq!(l.retention_used_ratio, Some(0.6));
        assert_eq!(l.commit_age_seconds, 70.0);
    }

    #[test]
    fn infinite_retention_and_unknown_timestamps_give_no_ratio() {
        let p = PartitionPosition { log_start_offset: 0, high_watermark: 5, retention_ms: None };
        assert_eq!(compute(&committed(0, 0), &p, Some(0), 1000).retention_used_ratio, None);
        let p = PartitionPosition { retention_ms: Some(1000), ..p };
        let l = compute(&committed(0, 0), &p, None, 1000);
        assert_eq!((l.lag_seconds, l.retention_used_ratio), (None, None));
    }

    #[test]
    fn committed_beyond_high_watermark_is_not_negative_lag() {
        let p = PartitionPosition { log_start_offset: 0, high_watermark: 5, retention_ms: None };
        assert_eq!(compute(&committed(9, 0), &p, None, 0).lag_records, 0);
        // A commit in the future (clock skew) is age 0, not negative.
        assert_eq!(compute(&committed(5, 10_000), &p, None, 0).commit_age_seconds, 0.0);
    }
}
