//! Idempotent-producer state of one partition: per producer id, its epoch and the metadata of
//! its last five batches, used to drop retried duplicates and to reject sequence gaps.
//!
//! Pure: no I/O, no clock. The partition calls [`ProducerStateTable::check`] on every batch
//! header before appending and [`ProducerStateTable::record`] after, with the assigned offsets.
//!
//! # Invariants
//! - At most [`MAX_CACHED_BATCHES`] batches are remembered per producer (Kafka's limit of five
//!   in-flight requests per connection for idempotent producers).
//! - Sequences wrap from `i32::MAX` to 0, as in Kafka.
//! - Recovery: the table is rebuilt on startup by replaying the batch headers of the log, so a
//!   restart neither forgets a live producer nor accepts a duplicate the log already holds.
//! - Expiry (Kafka's `producer.id.expiration.ms`): a producer whose last batch's timestamp is
//!   that old is forgotten ([`ProducerStateTable::remove_expired`]); if it comes back with a
//!   sequence other than 0 it gets UNKNOWN_PRODUCER_ID and resets, as with Kafka. This bounds
//!   the table by the producers of the last expiration window, and lets startup skip segments
//!   whose batches are all that old.

use std::collections::{HashMap, VecDeque};

use crate::protocol::record_batch::BatchHeader;

/// Batches remembered per producer for duplicate detection.
pub const MAX_CACHED_BATCHES: usize = 5;

/// Kafka's "no producer id" marker in a batch header.
pub const NO_PRODUCER_ID: i64 = -1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CachedBatch {
    first_seq: i32,
    last_seq: i32,
    first_offset: i64,
    last_offset: i64,
}

#[derive(Debug, Clone, Default)]
struct ProducerEntry {
    epoch: i16,
    batches: VecDeque<CachedBatch>,
    /// Max timestamp of the producer's last batch (Kafka's `lastTimestamp`).
    last_timestamp: i64,
}

/// The verdict on one incoming batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequenceCheck {
    /// Append it.
    Append,
    /// A retry of a batch already in the log at these offsets: acknowledge, do not append.
    Duplicate { first_offset: i64, last_offset: i64 },
    /// The producer's epoch is older than one already seen (Kafka code 47).
    InvalidProducerEpoch,
    /// A gap or reordering in sequence numbers (Kafka code 45).
    OutOfOrderSequence,
    /// A producer the partition has no state for, not starting at sequence 0 (Kafka code 59).
    UnknownProducerId,
}

/// All producers' state for one partition.
#[derive(Debug, Default)]
pub struct ProducerStateTable {
    producers: HashMap<i64, ProducerEntry>,
}

fn last_seq_of(h: &BatchHeader) -> i32 {
    let last = h.base_sequence as i64 + h.last_offset_delta as i64;
    if last > i32::MAX as i64 {
        (last - i32::MAX as i64 - 1) as i32
    } else {
        last as i32
    }
}

fn next_seq(seq: i32) -> i32 {
    if seq == i32::MAX {
        0
    } else {
        seq + 1
    }
}

impl ProducerStateTable {
    /// Decides what to do with a batch before it is appended.
    pub fn check(&self, h: &BatchHeader) -> SequenceCheck {
        if h.producer_id == NO_PRODUCER_ID {
            return SequenceCheck::Append;
        }
        let Some(entry) = self.producers.get(&h.producer_id) else {
            // Kafka: an unknown producer must start at 0; anything else means its state was
            // lost (e.g. by retention) and the client must reset.
            return if h.base_sequence == 0 || h.base_sequence == -1 {
                SequenceCheck::Append
            } else {
                SequenceCheck::UnknownProducerId
            };
        };
        if h.producer_epoch < entry.epoch {
            return SequenceCheck::InvalidProducerEpoch;
        }
        if h.producer_epoch > entry.epoch {
            return if h.base_sequence == 0 { SequenceCheck::Append } else { SequenceCheck::OutOfOrderSequence };
        }
        let last_seq = last_seq_of(h);
        if let Some(b) = entry.batches.iter().find(|b| b.first_seq == h.base_sequence && b.last_seq == last_seq) {
            return SequenceCheck::Duplicate { first_offset: b.first_offset, last_offset: b.last_offset };
        }
        match entry.batches.back() {
            Some(latest) if h.base_sequence != next_seq(latest.last_seq) => SequenceCheck::OutOfOrderSequence,
            None if h.base_sequence != 0 => SequenceCheck::OutOfOrderSequence,
            _ => SequenceCheck::Append,
        }
    }

    /// Remembers a batch that is now in the log (its header carries the assigned base offset).
    pub fn record(&mut self, h: &BatchHeader) {
        if h.producer_id == NO_PRODUCER_ID {
            return;
        }
        let entry = self.producers.entry(h.producer_id).or_default();
        if h.producer_epoch != entry.epoch {
            entry.epoch = h.producer_epoch;
            entry.batches.clear();
        }
        if entry.batches.len() == MAX_CACHED_BATCHES {
            entry.batches.pop_front();
        }
        entry.batches.push_back(CachedBatch {
            first_seq: h.base_sequence,
            last_seq: last_seq_of(h),
            first_offset: h.base_offset,
            last_offset: h.last_offset(),
        });
        entry.last_timestamp = h.max_timestamp;
    }

    /// Forgets producers whose last batch is at least `expiration_ms` older than `now_ms`;
    /// returns how many.
    pub fn remove_expired(&mut self, now_ms: i64, expiration_ms: i64) -> usize {
        let before = self.producers.len();
        self.producers.retain(|_, e| now_ms.saturating_sub(e.last_timestamp) < expiration_ms);
        before - self.producers.len()
    }

    /// Number of producers with state, for metrics.
    pub fn len(&self) -> usize {
        self.producers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(pid: i64, epoch: i16, seq: i32, count: i32, base_offset: i64) -> BatchHeader {
        BatchHeader {
            base_offset,
            batch_length: 0,
            partition_leader_epoch: 0,
            magic: 2,
            crc: 0,
            attributes: 0,
            last_offset_delta: count - 1,
            base_timestamp: 0,
            max_timestamp: 0,
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: seq,
            records_count: count,
        }
    }

    #[test]
    fn retried_batch_is_a_duplicate_with_its_original_offsets() {
        let mut t = ProducerStateTable::default();
        let b = batch(7, 0, 0, 3, 100);
        assert_eq!(t.check(&b), SequenceCheck::Append);
        t.record(&b);
        assert_eq!(t.check(&batch(7, 0, 0, 3, 0)), SequenceCheck::Duplicate { first_offset: 100, last_offset: 102 });
        assert_eq!(t.check(&batch(7, 0, 3, 1, 0)), SequenceCheck::Append);
    }

    #[test]
    fn sequence_gap_is_out_of_order() {
        let mut t = ProducerStateTable::default();
        t.record(&batch(7, 0, 0, 3, 0));
        assert_eq!(t.check(&batch(7, 0, 5, 1, 0)), SequenceCheck::OutOfOrderSequence);
    }

    #[test]
    fn older_epoch_is_fenced_and_new_epoch_must_start_at_zero() {
        let mut t = ProducerStateTable::default();
        t.record(&batch(7, 2, 0, 1, 0));
        assert_eq!(t.check(&batch(7, 1, 1, 1, 0)), SequenceCheck::InvalidProducerEpoch);
        assert_eq!(t.check(&batch(7, 3, 4, 1, 0)), SequenceCheck::OutOfOrderSequence);
        assert_eq!(t.check(&batch(7, 3, 0, 1, 0)), SequenceCheck::Append);
    }

    #[test]
    fn unknown_producer_must_start_at_zero() {
        let t = ProducerStateTable::default();
        assert_eq!(t.check(&batch(9, 0, 4, 1, 0)), SequenceCheck::UnknownProducerId);
        assert_eq!(t.check(&batch(9, 0, 0, 1, 0)), SequenceCheck::Append);
        assert_eq!(t.check(&batch(NO_PRODUCER_ID, -1, -1, 1, 0)), SequenceCheck::Append);
    }

    #[test]
    fn producers_expire_by_the_timestamp_of_their_last_batch() {
        let mut t = ProducerStateTable::default();
        let at = |pid, seq, ts| BatchHeader { max_timestamp: ts, ..batch(pid, 0, seq, 1, 0) };
        t.record(&at(1, 0, 1_000));
        t.record(&at(1, 1, 5_000)); // producer 1 is as recent as its last batch
        t.record(&at(2, 0, 2_000));
        assert_eq!(t.remove_expired(6_000, 4_000), 1, "only producer 2 is 4 s old");
        assert_eq!(t.len(), 1);
        assert_eq!(t.check(&at(2, 1, 6_000)), SequenceCheck::UnknownProducerId, "forgotten: must reset");
        assert_eq!(t.check(&at(1, 2, 6_000)), SequenceCheck::Append);
        assert_eq!(t.remove_expired(8_999, 4_000), 0);
        assert_eq!(t.remove_expired(9_000, 4_000), 1);
        assert!(t.is_empty());
    }

    #[test]
    fn only_the_last_five_batches_are_remembered_and_sequences_wrap() {
        let mut t = ProducerStateTable::default();
        for i in 0..6 {
            t.record(&batch(1, 0, i, 1, i as i64));
        }
        assert_eq!(t.check(&batch(1, 0, 0, 1, 0)), SequenceCheck::OutOfOrderSequence);
        assert!(matches!(t.check(&batch(1, 0, 1, 1, 0)), SequenceCheck::Duplicate { .. }));
        let mut t = ProducerStateTable::default();
        t.record(&batch(1, 0, i32::MAX - 1, 2, 0));
        assert_eq!(t.check(&batch(1, 0, 0, 1, 0)), SequenceCheck::Append);
    }
}
