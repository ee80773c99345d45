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
//!   whose batches are all that old. A producer in a transaction does not expire.
//!
//! # Transactions
//! A producer's first transactional batch begins its transaction here (its first offset); a
//! marker ([`ProducerStateTable::record_marker`]) ends it and returns it as a
//! [`CompletedTxn`]. Until the high watermark passes the marker the transaction stays unstable:
//! the first unstable offset ([`ProducerStateTable::first_unstable_offset`]) is the first offset
//! of the oldest transaction that is ongoing or whose marker is not yet replicated, and the last
//! stable offset (what read_committed consumers may read up to) is that or the high watermark,
//! whichever is lower. A non-transactional batch from a producer in a transaction is refused
//! (INVALID_TXN_STATE), as is a marker from an older epoch (INVALID_PRODUCER_EPOCH) or from a
//! coordinator older than the last one seen (TRANSACTION_COORDINATOR_FENCED).

use std::collections::{BTreeMap, HashMap, VecDeque};

use crate::protocol::control::{EndMarker, MarkerKind};

use crate::protocol::record_batch::BatchHeader;

/// Batches remembered per producer for duplicate detection.
pub const MAX_CACHED_BATCHES: usize = 5;

/// Kafka's "no producer id" marker in a batch header.
pub const NO_PRODUCER_ID: i64 = -1;

/// Kafka's producer snapshot file (`<offset>.snapshot`, the state of every batch below
/// `offset`), version 1: `version i16 | crc32c u32 (of all that follows) | count i32 | entries`,
/// each entry `producerId i64 | epoch i16 | lastSequence i32 | lastOffset i64 | offsetDelta i32 |
/// timestamp i64 | coordinatorEpoch i32 | currentTxnFirstOffset i64`.
pub const SNAPSHOT_VERSION: i16 = 1;
const SNAPSHOT_HEADER_LEN: usize = 10;
const SNAPSHOT_ENTRY_LEN: usize = 46;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CachedBatch {
    first_seq: i32,
    last_seq: i32,
    first_offset: i64,
    last_offset: i64,
}

#[derive(Debug, Clone)]
struct ProducerEntry {
    epoch: i16,
    batches: VecDeque<CachedBatch>,
    /// Max timestamp of the producer's last batch (Kafka's `lastTimestamp`).
    last_timestamp: i64,
    /// The first offset of its ongoing transaction in this partition.
    txn_first_offset: Option<i64>,
    /// The coordinator epoch of its last marker (-1 before any).
    coordinator_epoch: i32,
}

impl Default for ProducerEntry {
    fn default() -> Self {
        ProducerEntry { epoch: 0, batches: VecDeque::new(), last_timestamp: 0, txn_first_offset: None, coordinator_epoch: -1 }
    }
}

/// A transaction of one producer that a marker ended in this partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompletedTxn {
    pub producer_id: i64,
    /// Its first batch's offset (the marker's own offset if it had none here).
    pub first_offset: i64,
    /// The marker's offset.
    pub last_offset: i64,
    pub aborted: bool,
    /// The last stable offset when it ended: the first offset of the oldest other transaction
    /// still open then, or the marker's offset + 1 (what Kafka's aborted-transaction index keeps).
    pub last_stable_offset: i64,
}

impl From<&CompletedTxn> for crate::log::txn_index::AbortedTxn {
    fn from(t: &CompletedTxn) -> Self {
        crate::log::txn_index::AbortedTxn {
            producer_id: t.producer_id,
            first_offset: t.first_offset,
            last_offset: t.last_offset,
            last_stable_offset: t.last_stable_offset,
        }
    }
}

/// Why a marker is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerError {
    /// The marker's producer epoch is older than the producer's (Kafka code 47).
    InvalidProducerEpoch,
    /// The marker comes from a coordinator older than the last one seen (Kafka code 52).
    CoordinatorFenced,
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
    /// A non-transactional batch from a producer whose transaction is ongoing (Kafka code 48).
    InvalidTxnState,
}

/// One producer's state as DescribeProducers reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActiveProducer {
    pub producer_id: i64,
    pub epoch: i16,
    /// Sequence of the last record of its last batch (-1 without one, as in Kafka).
    pub last_sequence: i32,
    pub last_timestamp: i64,
    /// The coordinator epoch of its last marker (-1 before any).
    pub coordinator_epoch: i32,
    /// The first offset of its open transaction here (-1 if none).
    pub txn_start_offset: i64,
}

/// All producers' state for one partition.
#[derive(Debug, Default)]
pub struct ProducerStateTable {
    producers: HashMap<i64, ProducerEntry>,
    /// Ongoing transactions: first offset -> producer id.
    ongoing: BTreeMap<i64, i64>,
    /// Ended transactions whose marker is not yet below the high watermark: first offset ->
    /// marker offset.
    unreplicated: BTreeMap<i64, i64>,
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
        if !h.is_transactional() && entry.txn_first_offset.is_some() {
            return SequenceCheck::InvalidTxnState;
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
    /// Control batches are not records: they go to [`ProducerStateTable::record_marker`].
    pub fn record(&mut self, h: &BatchHeader) {
        if h.producer_id == NO_PRODUCER_ID || h.is_control() {
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
        if h.is_transactional() && entry.txn_first_offset.is_none() {
            entry.txn_first_offset = Some(h.base_offset);
            self.ongoing.insert(h.base_offset, h.producer_id);
        }
    }

    /// Whether a marker from this producer may be appended.
    pub fn check_marker(&self, producer_id: i64, producer_epoch: i16, marker: EndMarker) -> Result<(), MarkerError> {
        match self.producers.get(&producer_id) {
            Some(e) if producer_epoch < e.epoch => Err(MarkerError::InvalidProducerEpoch),
            Some(e) if marker.coordinator_epoch < e.coordinator_epoch => Err(MarkerError::CoordinatorFenced),
            _ => Ok(()),
        }
    }

    /// Ends the producer's transaction with the marker now in the log (`h` carries its offset).
    pub fn record_marker(&mut self, h: &BatchHeader, marker: EndMarker) -> CompletedTxn {
        let offset = h.base_offset;
        let entry = self.producers.entry(h.producer_id).or_default();
        let first_offset = entry.txn_first_offset.take().unwrap_or(offset);
        if h.producer_epoch != entry.epoch {
            entry.epoch = h.producer_epoch;
            entry.batches.clear();
        }
        entry.coordinator_epoch = marker.coordinator_epoch;
        entry.last_timestamp = h.max_timestamp;
        if self.ongoing.get(&first_offset) == Some(&h.producer_id) {
            self.ongoing.remove(&first_offset);
        }
        let last_stable_offset = self.ongoing.keys().next().copied().unwrap_or(offset + 1);
        self.unreplicated.insert(first_offset, offset);
        CompletedTxn {
            producer_id: h.producer_id,
            first_offset,
            last_offset: offset,
            aborted: marker.kind == MarkerKind::Abort,
            last_stable_offset,
        }
    }

    /// Forgets, as unstable, the ended transactions whose marker is below `high_watermark`.
    pub fn on_high_watermark(&mut self, high_watermark: i64) {
        self.unreplicated.retain(|_, marker| *marker >= high_watermark);
    }

    /// The first offset of the oldest transaction that is ongoing or whose marker is not yet
    /// below the high watermark; `None` if there is none.
    pub fn first_unstable_offset(&self) -> Option<i64> {
        let ongoing = self.ongoing.keys().next().copied();
        let unreplicated = self.unreplicated.keys().next().copied();
        match (ongoing, unreplicated) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The first offset of this producer's ongoing transaction here, if it has one
    /// (DescribeProducers' `currentTxnStartOffset`).
    pub fn txn_first_offset(&self, producer_id: i64) -> Option<i64> {
        self.producers.get(&producer_id).and_then(|e| e.txn_first_offset)
    }

    /// Every producer with state here, in producer id order.
    pub fn active(&self) -> Vec<ActiveProducer> {
        let mut out: Vec<ActiveProducer> = self
            .producers
            .iter()
            .map(|(&producer_id, e)| ActiveProducer {
                producer_id,
                epoch: e.epoch,
                last_sequence: e.batches.back().map_or(-1, |b| b.last_seq),
                last_timestamp: e.last_timestamp,
                coordinator_epoch: e.coordinator_epoch,
                txn_start_offset: e.txn_first_offset.unwrap_or(-1),
            })
            .collect();
        out.sort_unstable_by_key(|p| p.producer_id);
        out
    }

    /// Forgets producers whose last batch is at least `expiration_ms` older than `now_ms`;
    /// returns how many.
    pub fn remove_expired(&mut self, now_ms: i64, expiration_ms: i64) -> usize {
        let before = self.producers.len();
        self.producers.retain(|_, e| e.txn_first_offset.is_some() || now_ms.saturating_sub(e.last_timestamp) < expiration_ms);
        before - self.producers.len()
    }

    /// The table in Kafka's producer snapshot format (see [`SNAPSHOT_VERSION`]): each producer
    /// with its epoch and last batch, in producer id order.
    pub fn encode_snapshot(&self) -> Vec<u8> {
        let mut ids: Vec<&i64> = self.producers.keys().collect();
        ids.sort_unstable();
        let mut out = Vec::with_capacity(SNAPSHOT_HEADER_LEN + ids.len() * SNAPSHOT_ENTRY_LEN);
        out.extend_from_slice(&SNAPSHOT_VERSION.to_be_bytes());
        out.extend_from_slice(&[0; 4]); // CRC, below
        out.extend_from_slice(&(ids.len() as i32).to_be_bytes());
        for id in ids {
            let e = &self.producers[id];
            let (last_seq, last_offset, delta) = match e.batches.back() {
                Some(b) => (b.last_seq, b.last_offset, (b.last_offset - b.first_offset) as i32),
                None => (-1, -1, 0),
            };
            out.extend_from_slice(&id.to_be_bytes());
            out.extend_from_slice(&e.epoch.to_be_bytes());
            out.extend_from_slice(&last_seq.to_be_bytes());
            out.extend_from_slice(&last_offset.to_be_bytes());
            out.extend_from_slice(&delta.to_be_bytes());
            out.extend_from_slice(&e.last_timestamp.to_be_bytes());
            out.extend_from_slice(&e.coordinator_epoch.to_be_bytes());
            out.extend_from_slice(&e.txn_first_offset.unwrap_or(-1).to_be_bytes());
        }
        let crc = crate::protocol::record_batch::crc32c(&[&out[6..]]);
        out[2..6].copy_from_slice(&crc.to_be_bytes());
        out
    }

    /// Reads a snapshot written by [`ProducerStateTable::encode_snapshot`] or by Kafka. Only
    /// each producer's last batch is known afterwards (Kafka keeps no more across restarts).
    pub fn decode_snapshot(b: &[u8]) -> Result<ProducerStateTable, String> {
        if b.len() < SNAPSHOT_HEADER_LEN {
            return Err(format!("{} bytes, shorter than the header", b.len()));
        }
        let version = i16::from_be_bytes([b[0], b[1]]);
        if version != SNAPSHOT_VERSION {
            return Err(format!("version {version}, expected {SNAPSHOT_VERSION}"));
        }
        let crc = u32::from_be_bytes([b[2], b[3], b[4], b[5]]);
        if crate::protocol::record_batch::crc32c(&[&b[6..]]) != crc {
            return Err("CRC mismatch".into());
        }
        let count = i32::from_be_bytes([b[6], b[7], b[8], b[9]]);
        let body = &b[SNAPSHOT_HEADER_LEN..];
        if count < 0 || body.len() != count as usize * SNAPSHOT_ENTRY_LEN {
            return Err(format!("{count} entries announced, {} bytes of entries", body.len()));
        }
        let i64_at = |e: &[u8], at: usize| i64::from_be_bytes(e[at..at + 8].try_into().expect("8 bytes"));
        let i32_at = |e: &[u8], at: usize| i32::from_be_bytes(e[at..at + 4].try_into().expect("4 bytes"));
        let mut table = ProducerStateTable::default();
        for e in body.chunks_exact(SNAPSHOT_ENTRY_LEN) {
            let (id, epoch) = (i64_at(e, 0), i16::from_be_bytes([e[8], e[9]]));
            let (last_seq, last_offset, delta, ts) = (i32_at(e, 10), i64_at(e, 14), i32_at(e, 22), i64_at(e, 26));
            let mut batches = VecDeque::new();
            if last_seq >= 0 && last_offset >= 0 && delta >= 0 {
                let first = last_seq as i64 - delta as i64;
                let first_seq = if first < 0 { (first + i32::MAX as i64 + 1) as i32 } else { first as i32 };
                batches.push_back(CachedBatch { first_seq, last_seq, first_offset: last_offset - delta as i64, last_offset });
            }
            let (coordinator_epoch, txn_first) = (i32_at(e, 34), i64_at(e, 38));
            let txn_first_offset = (txn_first >= 0).then_some(txn_first);
            if let Some(first) = txn_first_offset {
                table.ongoing.insert(first, id);
            }
            table.producers.insert(id, ProducerEntry { epoch, batches, last_timestamp: ts, txn_first_offset, coordinator_epoch });
        }
        Ok(table)
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

    fn txn_batch(pid: i64, epoch: i16, seq: i32, count: i32, base_offset: i64) -> BatchHeader {
        BatchHeader { attributes: 0x10, ..batch(pid, epoch, seq, count, base_offset) }
    }

    fn marker(pid: i64, epoch: i16, offset: i64) -> BatchHeader {
        BatchHeader { attributes: 0x30, base_sequence: -1, ..batch(pid, epoch, -1, 1, offset) }
    }

    const COMMIT: EndMarker = EndMarker { kind: MarkerKind::Commit, coordinator_epoch: 0 };
    const ABORT: EndMarker = EndMarker { kind: MarkerKind::Abort, coordinator_epoch: 0 };

    #[test]
    fn a_transaction_is_unstable_from_its_first_batch_until_its_marker_is_replicated() {
        let mut t = ProducerStateTable::default();
        assert_eq!(t.first_unstable_offset(), None);
        t.record(&txn_batch(7, 0, 0, 2, 10));
        t.record(&txn_batch(7, 0, 2, 2, 12));
        assert_eq!((t.first_unstable_offset(), t.txn_first_offset(7)), (Some(10), Some(10)));
        let done = t.record_marker(&marker(7, 0, 14), COMMIT);
        assert_eq!(done, CompletedTxn { producer_id: 7, first_offset: 10, last_offset: 14, aborted: false, last_stable_offset: 15 });
        assert_eq!(t.txn_first_offset(7), None);
        // Still unstable until the high watermark passes the marker.
        t.on_high_watermark(14);
        assert_eq!(t.first_unstable_offset(), Some(10));
        t.on_high_watermark(15);
        assert_eq!(t.first_unstable_offset(), None);
    }

    #[test]
    fn the_oldest_open_transaction_holds_the_stable_offset_back() {
        let mut t = ProducerStateTable::default();
        t.record(&txn_batch(7, 0, 0, 1, 10));
        t.record(&txn_batch(8, 0, 0, 1, 11));
        let done = t.record_marker(&marker(8, 0, 12), ABORT);
        assert_eq!((done.first_offset, done.aborted, done.last_stable_offset), (11, true, 10));
        t.on_high_watermark(13);
        assert_eq!(t.first_unstable_offset(), Some(10));
        t.record_marker(&marker(7, 0, 13), COMMIT);
        t.on_high_watermark(14);
        assert_eq!(t.first_unstable_offset(), None);
    }

    #[test]
    fn a_producer_in_a_transaction_may_not_write_outside_it() {
        let mut t = ProducerStateTable::default();
        t.record(&txn_batch(7, 0, 0, 1, 10));
        assert_eq!(t.check(&batch(7, 0, 1, 1, 0)), SequenceCheck::InvalidTxnState);
        assert_eq!(t.check(&txn_batch(7, 0, 1, 1, 0)), SequenceCheck::Append);
        t.record_marker(&marker(7, 0, 11), COMMIT);
        assert_eq!(t.check(&batch(7, 0, 1, 1, 0)), SequenceCheck::Append);
    }

    #[test]
    fn a_marker_from_an_old_epoch_or_an_old_coordinator_is_refused() {
        let mut t = ProducerStateTable::default();
        t.record(&txn_batch(7, 3, 0, 1, 10));
        assert_eq!(t.check_marker(7, 2, COMMIT), Err(MarkerError::InvalidProducerEpoch));
        // Transactions v2: the marker carries the epoch bumped by EndTxn.
        assert_eq!(t.check_marker(7, 4, EndMarker { coordinator_epoch: 5, ..COMMIT }), Ok(()));
        t.record_marker(&marker(7, 4, 11), EndMarker { coordinator_epoch: 5, ..COMMIT });
        assert_eq!(t.check_marker(7, 4, EndMarker { coordinator_epoch: 4, ..ABORT }), Err(MarkerError::CoordinatorFenced));
        // A marker for a transaction with nothing here ends nothing but is recorded.
        let done = t.record_marker(&marker(9, 0, 12), ABORT);
        assert_eq!((done.first_offset, done.last_offset), (12, 12));
    }

    #[test]
    fn an_open_transaction_survives_a_snapshot_and_does_not_expire() {
        let mut t = ProducerStateTable::default();
        t.record(&BatchHeader { max_timestamp: 1_000, ..txn_batch(7, 0, 0, 1, 10) });
        t.record_marker(&marker(8, 0, 11), EndMarker { coordinator_epoch: 3, ..ABORT });
        let back = ProducerStateTable::decode_snapshot(&t.encode_snapshot()).unwrap();
        assert_eq!((back.first_unstable_offset(), back.txn_first_offset(7)), (Some(10), Some(10)));
        assert_eq!(back.check_marker(8, 0, EndMarker { coordinator_epoch: 2, ..ABORT }), Err(MarkerError::CoordinatorFenced));
        let mut back = back;
        assert_eq!(back.remove_expired(1_000_000_000, 1_000), 1, "only the producer without a transaction expires");
        assert_eq!(back.txn_first_offset(7), Some(10));
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
    fn snapshots_keep_each_producers_epoch_and_last_batch_in_kafkas_layout() {
        let mut t = ProducerStateTable::default();
        t.record(&BatchHeader { max_timestamp: 5_000, ..batch(9, 2, 0, 3, 100) });
        t.record(&BatchHeader { max_timestamp: 6_000, ..batch(9, 2, 3, 2, 103) });
        t.record(&batch(4, 0, 0, 1, 105));
        let b = t.encode_snapshot();
        assert_eq!(b.len(), 10 + 2 * 46);
        assert_eq!(&b[..2], &1i16.to_be_bytes(), "version 1");
        assert_eq!(&b[6..10], &2i32.to_be_bytes());
        // Producer 9 (second by id): id, epoch, last sequence 4, last offset 104, delta 1, timestamp.
        let e = &b[10 + 46..];
        assert_eq!(&e[..8], &9i64.to_be_bytes());
        assert_eq!(&e[8..10], &2i16.to_be_bytes());
        assert_eq!(&e[10..14], &4i32.to_be_bytes());
        assert_eq!(&e[14..22], &104i64.to_be_bytes());
        assert_eq!(&e[22..26], &1i32.to_be_bytes());
        assert_eq!(&e[26..34], &6_000i64.to_be_bytes());
        assert_eq!(&e[34..46], &[0xff; 12], "coordinator epoch and txn first offset: -1");

        let back = ProducerStateTable::decode_snapshot(&b).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back.check(&batch(9, 2, 3, 2, 0)), SequenceCheck::Duplicate { first_offset: 103, last_offset: 104 });
        assert_eq!(back.check(&batch(9, 2, 5, 1, 0)), SequenceCheck::Append);
        assert_eq!(back.check(&batch(9, 1, 5, 1, 0)), SequenceCheck::InvalidProducerEpoch);
        assert_eq!(back.check(&batch(4, 0, 1, 1, 0)), SequenceCheck::Append);
        assert_eq!(back.encode_snapshot(), b, "what is read back is written the same");

        let mut torn = b.clone();
        torn[40] ^= 1;
        assert!(ProducerStateTable::decode_snapshot(&torn).unwrap_err().contains("CRC"));
        assert!(ProducerStateTable::decode_snapshot(&b[..b.len() - 1]).is_err());
        assert!(ProducerStateTable::decode_snapshot(&[0, 1]).is_err());
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
