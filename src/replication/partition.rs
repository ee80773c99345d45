//! One partition replica as the broker serves it: the log, the high watermark, the leader epoch,
//! idempotent-producer state, and the wake-up for fetches waiting on new data.
//!
//! A partition is led here or followed from another broker ([`Role`]). As leader, the high
//! watermark is what [`LeaderState`] allows (on a single node, the sole replica's log end offset
//! after each append); followers' fetches ([`Partition::follower_fetched`]) move it. As
//! follower, batches are appended as the leader wrote them ([`Partition::append_from_leader`])
//! and the high watermark is the leader's, capped at the local log end.
//!
//! # Invariants
//! - The high watermark never exceeds the log end offset. It goes backwards only when a
//!   follower truncates its log below it ([`Partition::truncate_to`]).
//! - Appends to one partition are serialised by the state lock; the producer-state check and
//!   the append happen under the same lock so a duplicate can never slip between them.
//! - A fetch that saw no data registers for [`Partition::appended`] *before* reading, so an append
//!   between its read and its wait still wakes it.
//! - The last stable offset ([`Partition::last_stable_offset`]) is at most the high watermark
//!   and is the first offset of the oldest transaction open here or whose marker is not yet
//!   below the high watermark: a read_committed fetch never returns a record of a transaction
//!   whose outcome a new leader could lose.
//!
//! # Transactions
//! Markers are written by [`Partition::append_marker`] (WriteTxnMarkers, as leader) or copied
//! from the leader, and replayed from the log on open; each ends its producer's transaction in
//! the producer state, and an abort goes to the segment's aborted-transaction index. Clients
//! cannot write control batches (INVALID_RECORD).
//!
//! # Producer snapshots
//! As Kafka does, the producer table is written to `<offset>.snapshot` in the partition directory
//! (Kafka's file format, see `producer_state.rs`) when a segment rolls (offset: the new segment's
//! base) and on a clean shutdown (offset: the log end; skipped when the replay it would save is
//! short, see [`SHUTDOWN_SNAPSHOT_MIN_REPLAY_BYTES`]). Unlike Kafka, also after every
//! [`SNAPSHOT_INTERVAL_BYTES`] appended (offset: the log end), which bounds the replay after a
//! kill. Opening loads the newest snapshot at or below the log end and replays only the batch
//! headers after it. Snapshots are written without fsync: after an OS crash the newest may be
//! torn, so the two newest are kept; a torn or unreadable one is logged and removed, and the
//! next older one (or the log start) is used.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::Notify;
use uuid::Uuid;

use super::leader::{IsrChange, LeaderState};
use super::producer_state::{CompletedTxn, MarkerError, ProducerStateTable, SequenceCheck};
use crate::log::cleaner::{CleanStats, CleanerConfig};
use crate::log::segment::{file_stem, offset_from_file_name};
use crate::log::{LogConfig, LogError, PartitionLog, ReadResult, SliceRead};
use crate::log::txn_index::AbortedTxn;
use crate::protocol::control::{encode_marker_batch, parse_end_marker, EndMarker};
use crate::protocol::record_batch::{BatchHeader, BatchIter};

/// The most per-record errors one produce answer carries (see `Partition::check_keys`).
pub const MAX_RECORD_ERRORS: usize = 1000;

/// Result of a produce to one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    pub base_offset: i64,
    pub log_append_time: i64,
    pub log_start_offset: i64,
    pub records: u64,
    pub bytes: usize,
    /// The log end offset right after this append (for a duplicate: the current one), which
    /// [`Partition::sync_to`] waits for under `flush.acks.all`.
    pub next_offset: i64,
    /// `flush.messages` or `flush.ms` was reached: the append is acknowledged after
    /// [`Partition::sync_to`] `next_offset`, as under `flush.acks.all`.
    pub flush_due: bool,
}

/// Why an acks=all produce was not acknowledged after its append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicationWait {
    /// REQUEST_TIMED_OUT: the in-sync replicas did not all get it within the request's timeout.
    TimedOut,
    /// NOT_LEADER_OR_FOLLOWER: leadership moved while waiting.
    NotLeader,
    /// NOT_ENOUGH_REPLICAS_AFTER_APPEND: the ISR shrank below `min.insync.replicas`.
    NotEnoughReplicasAfterAppend,
}

/// Why a produce to one partition was refused; each maps to a Kafka error code.
#[derive(Debug, thiserror::Error)]
pub enum AppendError {
    #[error(transparent)]
    Log(#[from] LogError),
    #[error("producer epoch is older than the current one")]
    InvalidProducerEpoch,
    #[error("out of order sequence number")]
    OutOfOrderSequence,
    #[error("unknown producer id")]
    UnknownProducerId,
    #[error("a non-transactional write from a producer whose transaction is ongoing")]
    InvalidTxnState,
    /// A marker from a coordinator older than the last one seen (TRANSACTION_COORDINATOR_FENCED).
    #[error("the transaction marker comes from a coordinator epoch older than the last one seen")]
    CoordinatorFenced,
    #[error("corrupt record batch: {0}")]
    Corrupt(String),
    #[error("{0}")]
    InvalidRecord(String),
    /// INVALID_RECORD with KIP-467 per-record errors: `(index in the batch, message)`.
    #[error("{message}")]
    RecordErrors { message: String, records: Vec<(i32, String)>, log_start_offset: i64 },
}

struct State {
    log: PartitionLog,
    producers: ProducerStateTable,
    /// Bytes of batches after the newest snapshot: what a start would replay (an upper bound
    /// once the log start has moved past that snapshot).
    unsnapshotted_bytes: u64,
}

/// Who serves a partition's records.
#[derive(Debug, Clone)]
pub enum Role {
    Leader(LeaderState),
    /// Copies `leader`'s log; clients get NOT_LEADER_OR_FOLLOWER.
    Follower { leader: i32 },
}

/// Kafka's `replica.lag.time.max.ms` default: a follower behind for longer leaves the ISR.
pub const REPLICA_LAG_TIME_MAX_MS: i64 = 30_000;

/// A partition replica on this broker.
pub struct Partition {
    pub topic: Arc<str>,
    pub index: i32,
    pub topic_id: Uuid,
    /// The epoch this broker leads the partition in: 0 on a single node; in a cluster, the
    /// metadata image's (set as leadership arrives, see `broker::cluster`).
    leader_epoch: std::sync::atomic::AtomicI32,
    state: Mutex<State>,
    high_watermark: AtomicI64,
    log_start_offset: AtomicI64,
    /// Woken after every append (and on deletion) so long-polling fetches re-check.
    pub appended: Notify,
    /// The topic's `flush.acks.all`, readable without the lock (see [`Partition::sync_to`]).
    flush_acks_all: AtomicBool,
    /// The topic's `cleanup.policy` includes `compact`: produced records need keys, checked
    /// before the lock is taken (see [`Partition::append`]).
    compacted: AtomicBool,
    /// The log is known to be on disk below this offset (see [`Partition::sync_to`]).
    synced_offset: AtomicI64,
    /// True while one caller of [`Partition::sync_to`] runs the fsync for all of them.
    syncing: AtomicBool,
    /// Woken when that fsync ends.
    synced: Notify,
    /// Leader (with its followers' progress) or follower; taken after `state`, never before.
    role: Mutex<Role>,
    /// The topic's `min.insync.replicas`.
    min_isr: std::sync::atomic::AtomicI32,
    /// `replica.lag.time.max.ms`.
    lag_ms: AtomicI64,
    producer_id_expiration_ms: i64,
}

/// Ends a turn at running the fsync in [`Partition::sync_to`], also when the waiting request
/// is dropped (its connection closed) before the fsync returns.
struct SyncTurn<'a>(&'a Partition);

impl Drop for SyncTurn<'_> {
    fn drop(&mut self) {
        self.0.syncing.store(false, Ordering::Release);
        self.0.synced.notify_waiters();
    }
}

/// A leader's replicas as metrics report them ([`Partition::leader_view`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderView {
    pub replicas: usize,
    /// The ISR in the metadata image (a pending change not counted).
    pub isr: usize,
    /// Each follower's lag in offsets: the leader's log end offset minus the follower's (all of
    /// it before the follower's first fetch).
    pub follower_lag: Vec<(i32, i64)>,
}

impl std::fmt::Debug for Partition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.topic, self.index)
    }
}

impl Partition {
    pub fn leader_epoch(&self) -> i32 {
        self.leader_epoch.load(Ordering::Acquire)
    }

    /// Raises the leader epoch to `epoch` (never lowers it).
    pub fn set_leader_epoch(&self, epoch: i32) {
        self.leader_epoch.fetch_max(epoch, Ordering::AcqRel);
    }

    /// Wraps an opened log, rebuilding producer state from its batch headers (those of the last
    /// `producer_id_expiration_ms` before `now_ms`: older producers are expired).
    pub fn new(
        topic: Arc<str>,
        index: i32,
        topic_id: Uuid,
        log: PartitionLog,
        now_ms: i64,
        producer_id_expiration_ms: i64,
    ) -> Result<Partition, LogError> {
        let mut log = log;
        let (producers, unsnapshotted_bytes) = rebuild_producer_state(&mut log, now_ms, producer_id_expiration_ms)?;
        let hw = log.log_end_offset();
        let start = log.log_start_offset();
        let flush_acks_all = log.config().flush_acks_all;
        let compacted = log.config().compacted;
        let min_isr = log.config().min_insync_replicas.max(1);
        Ok(Partition {
            topic,
            index,
            topic_id,
            leader_epoch: std::sync::atomic::AtomicI32::new(0),
            state: Mutex::new(State { log, producers, unsnapshotted_bytes }),
            high_watermark: AtomicI64::new(hw),
            log_start_offset: AtomicI64::new(start),
            appended: Notify::new(),
            flush_acks_all: AtomicBool::new(flush_acks_all),
            compacted: AtomicBool::new(compacted),
            synced_offset: AtomicI64::new(start),
            syncing: AtomicBool::new(false),
            synced: Notify::new(),
            role: Mutex::new(Role::Leader(LeaderState::sole(-1))),
            min_isr: std::sync::atomic::AtomicI32::new(min_isr),
            lag_ms: AtomicI64::new(REPLICA_LAG_TIME_MAX_MS),
            producer_id_expiration_ms,
        })
    }

    /// A restarted cluster member's high watermark from its checkpoint (at most the log end).
    pub fn restore_high_watermark(&self, hw: i64) {
        let hw = hw.clamp(self.log_start_offset(), self.log_end_offset());
        self.high_watermark.store(hw, Ordering::Release);
    }

    pub fn high_watermark(&self) -> i64 {
        self.high_watermark.load(Ordering::Acquire)
    }

    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset.load(Ordering::Acquire)
    }

    pub fn log_end_offset(&self) -> i64 {
        self.state.lock().log.log_end_offset()
    }

    /// Takes leadership in `leader_epoch` (or, in the same epoch, takes the image's new ISR and
    /// replica set). `me` is this broker's id.
    pub fn become_leader(&self, me: i32, leader_epoch: i32, partition_epoch: i32, replicas: Vec<i32>, isr: Vec<i32>, now_ms: i64) {
        self.set_leader_epoch(leader_epoch);
        if let Err(e) = self.state.lock().log.start_leader_epoch(leader_epoch) {
            // The log is poisoned: its appends and fetches fail from now on, which is logged there.
            tracing::error!(topic = %self.topic, partition = self.index, leader_epoch, error = %e, "could not record the new leader epoch");
        }
        let leo = self.log_end_offset();
        let mut role = self.role.lock();
        match &mut *role {
            Role::Leader(l) if l.leader_epoch == leader_epoch && l.me == me => {
                // Kafka's IsrShrinksPerSec / IsrExpandsPerSec: the leader counts each change of
                // its ISR in the image (one that only swaps members counts as both).
                if l.isr.iter().any(|r| !isr.contains(r)) {
                    ::metrics::counter!("sluice_isr_shrinks_total").increment(1);
                }
                if isr.iter().any(|r| !l.isr.contains(r)) {
                    ::metrics::counter!("sluice_isr_expands_total").increment(1);
                }
                l.update(partition_epoch, replicas, isr, now_ms)
            }
            _ => {
                let mut l = LeaderState::new(me, leader_epoch, partition_epoch, replicas, isr, leo, now_ms);
                l.min_isr = self.min_isr.load(Ordering::Acquire) as usize;
                *role = Role::Leader(l);
            }
        }
        drop(role);
        self.advance_high_watermark(leo, now_ms);
        self.appended.notify_waiters();
    }

    /// Follows `leader` in `leader_epoch`; produce waiters and long polls are woken to find out.
    pub fn become_follower(&self, leader: i32, leader_epoch: i32) {
        self.set_leader_epoch(leader_epoch);
        *self.role.lock() = Role::Follower { leader };
        self.appended.notify_waiters();
    }

    pub fn role(&self) -> Role {
        self.role.lock().clone()
    }

    /// What the leader knows of the replicas, for metrics; None when this broker follows.
    pub fn leader_view(&self) -> Option<LeaderView> {
        let leo = self.log_end_offset();
        match &*self.role.lock() {
            Role::Leader(l) => Some(LeaderView {
                replicas: l.replicas.len(),
                isr: l.isr.len(),
                follower_lag: l
                    .followers
                    .iter()
                    .map(|(r, f)| (*r, if f.log_end_offset < 0 { leo } else { (leo - f.log_end_offset).max(0) }))
                    .collect(),
            }),
            Role::Follower { .. } => None,
        }
    }

    /// Whether a follower's fetch from `fetch_offset`, whose last batch is in
    /// `last_fetched_epoch` (-1: it does not say), agrees with this log: not past its end, and
    /// that epoch ending here where the follower thinks. Only such a fetch is the follower's
    /// progress (Kafka records follower fetch state only then): a follower whose log diverged,
    /// an old leader back with records this one never had, would otherwise count as caught up
    /// and join the ISR before it truncates.
    pub fn follower_fetch_is_consistent(&self, fetch_offset: i64, last_fetched_epoch: i32) -> bool {
        if fetch_offset > self.log_end_offset() {
            return false;
        }
        last_fetched_epoch < 0
            || matches!(self.end_offset_for_epoch(last_fetched_epoch), Some((e, end)) if e == last_fetched_epoch && end >= fetch_offset)
    }

    /// Whether this broker leads and `replica` is one of its followers.
    pub fn is_follower(&self, replica: i32) -> bool {
        matches!(&*self.role.lock(), Role::Leader(l) if l.followers.contains_key(&replica))
    }

    /// KIP-392: the follower a consumer in `client_rack` fetching from `fetch_offset` should
    /// read from instead (Kafka's rack-aware selector over the ISR members that have the
    /// offset); `None` when it should stay on this leader, or this broker does not lead.
    pub fn preferred_read_replica(&self, fetch_offset: i64, now_ms: i64, client_rack: &str, rack_of: impl Fn(i32) -> Option<String>) -> Option<i32> {
        let (me, candidates) = match &*self.role.lock() {
            Role::Leader(l) => (l.me, l.read_replicas(fetch_offset, now_ms)),
            Role::Follower { .. } => return None,
        };
        super::leader::rack_aware_read_replica(client_rack, me, &candidates, rack_of)
    }

    /// Whether this broker leads and `replica` is in its ISR.
    pub fn leader_has_in_isr(&self, replica: i32) -> bool {
        matches!(&*self.role.lock(), Role::Leader(l) if l.isr.contains(&replica))
    }

    pub fn is_leader(&self) -> bool {
        matches!(*self.role.lock(), Role::Leader(_))
    }

    /// `replica.lag.time.max.ms` for this partition's followers.
    pub fn set_replica_lag_time_max_ms(&self, ms: i64) {
        self.lag_ms.store(ms, Ordering::Release);
    }

    /// Whether an acks=all produce may append: this broker leads with an ISR of at least
    /// `min.insync.replicas`.
    pub fn has_min_isr(&self) -> bool {
        matches!(&*self.role.lock(), Role::Leader(l) if l.has_min_isr())
    }

    /// Raises the high watermark to what the leader state allows with the log ending at `leo`.
    fn advance_high_watermark(&self, leo: i64, now_ms: i64) -> bool {
        let hw = match &*self.role.lock() {
            Role::Leader(l) => l.high_watermark(leo, now_ms, self.lag_ms.load(Ordering::Acquire)),
            Role::Follower { .. } => None,
        };
        match hw {
            Some(hw) => self.high_watermark.fetch_max(hw.min(leo), Ordering::AcqRel) < hw.min(leo),
            None => false,
        }
    }

    /// A follower fetched from `fetch_offset`: its progress is recorded and the high watermark
    /// moves if it can (waking produces waiting for acks=all and consumers' long polls).
    /// Returns false when this broker does not lead or `replica` is not a replica.
    pub fn follower_fetched(&self, replica: i32, broker_epoch: i64, fetch_offset: i64, now_ms: i64) -> bool {
        let leo = self.log_end_offset();
        // A follower whose log runs past this one has diverged after the log end: it counts as
        // having the log end, no more (its fetch is answered with the divergence).
        let fetch_offset = fetch_offset.min(leo);
        let known = match &mut *self.role.lock() {
            Role::Leader(l) => l.on_fetch(replica, broker_epoch, fetch_offset, leo, now_ms),
            Role::Follower { .. } => false,
        };
        if known && self.advance_high_watermark(leo, now_ms) {
            self.appended.notify_waiters();
        }
        known
    }

    /// The ISR change this leader should ask the controller for now, marked pending; `eligible`
    /// says which brokers may join.
    pub fn propose_isr_change(&self, now_ms: i64, eligible: impl Fn(i32) -> bool) -> Option<IsrChange> {
        let leo = self.log_end_offset();
        let hw = self.high_watermark();
        let lag = self.lag_ms.load(Ordering::Acquire);
        let mut role = self.role.lock();
        let Role::Leader(l) = &mut *role else { return None };
        let change = l.isr_change(hw, leo, now_ms, lag, eligible)?;
        l.set_pending(&change);
        Some(change)
    }

    /// The controller did not take the pending ISR change; it may be proposed again.
    pub fn isr_change_failed(&self) {
        if let Role::Leader(l) = &mut *self.role.lock() {
            l.clear_pending();
        }
    }

    /// Appends batches fetched from the leader as they are (offsets, epochs, CRCs), records
    /// them in the producer state, and takes the leader's high watermark up to the new log end.
    pub fn append_from_leader(&self, records: Bytes, leader_high_watermark: i64) -> Result<i64, LogError> {
        let mut st = self.state.lock();
        if !records.is_empty() {
            let active_before = st.log.active_base_offset();
            let info = st.log.append_as_follower(records.clone())?;
            if st.log.active_base_offset() != active_before {
                // The new segment starts at the first batch or after it: snapshot what is below.
                let active = st.log.active_base_offset();
                if active <= info.base_offset {
                    st.snapshot(active);
                }
            }
            for (h, batch) in BatchIter::new(&records).flatten() {
                let marker = if h.is_control() { Some(parse_end_marker(batch)) } else { None };
                st.replay(&h, marker);
            }
            st.unsnapshotted_bytes += info.bytes as u64;
            if st.unsnapshotted_bytes >= SNAPSHOT_INTERVAL_BYTES {
                let leo = st.log.log_end_offset();
                st.snapshot(leo);
            }
        }
        let leo = st.log.log_end_offset();
        drop(st);
        if leader_high_watermark >= 0 {
            let hw = leader_high_watermark.min(leo);
            // Consumers reading from this follower (KIP-392) wait on the high watermark.
            if self.high_watermark.fetch_max(hw, Ordering::AcqRel) < hw {
                self.appended.notify_waiters();
            }
        }
        Ok(leo)
    }

    /// Removes everything at and after `offset` (a follower whose log diverged from its
    /// leader's); the high watermark and producer state follow.
    pub fn truncate_to(&self, offset: i64, now_ms: i64) -> Result<(), LogError> {
        let mut st = self.state.lock();
        if offset >= st.log.log_end_offset() {
            return Ok(());
        }
        st.log.truncate_to(offset)?;
        let dir = st.log.dir().to_path_buf();
        let leo = st.log.log_end_offset();
        for o in snapshot_offsets(&dir) {
            if o > leo {
                let _ = std::fs::remove_file(snapshot_path(&dir, o));
            }
        }
        let (producers, replay) = rebuild_producer_state(&mut st.log, now_ms, self.producer_id_expiration_ms)?;
        st.producers = producers;
        st.unsnapshotted_bytes = replay;
        self.log_start_offset.store(st.log.log_start_offset(), Ordering::Release);
        self.high_watermark.fetch_min(leo, Ordering::AcqRel);
        self.synced_offset.fetch_min(leo, Ordering::AcqRel);
        Ok(())
    }

    /// Empties the log and restarts it at `offset` (a follower behind its leader's log start).
    pub fn restart_at(&self, offset: i64) -> Result<(), LogError> {
        let mut st = self.state.lock();
        st.log.truncate_fully_and_start_at(offset)?;
        let dir = st.log.dir().to_path_buf();
        for o in snapshot_offsets(&dir) {
            let _ = std::fs::remove_file(snapshot_path(&dir, o));
        }
        st.producers = ProducerStateTable::default();
        st.unsnapshotted_bytes = 0;
        self.log_start_offset.store(offset, Ordering::Release);
        self.high_watermark.store(offset, Ordering::Release);
        self.synced_offset.store(offset, Ordering::Release);
        Ok(())
    }

    /// Whether a failed write poisoned the log: it takes no appends until the broker restarts.
    pub fn is_poisoned(&self) -> bool {
        self.state.lock().log.is_poisoned()
    }

    /// The latest leader epoch in the log's epoch cache.
    pub fn latest_epoch(&self) -> Option<i32> {
        self.state.lock().log.latest_epoch()
    }

    /// OffsetForLeaderEpoch on the local log: `(epoch, end offset)`.
    pub fn end_offset_for_epoch(&self, epoch: i32) -> Option<(i32, i64)> {
        self.state.lock().log.end_offset_for_epoch(epoch)
    }

    /// Reads for a follower: up to the log end, not the high watermark.
    pub fn read_slice_for_replica(&self, offset: i64, max_bytes: usize, min_one_batch: bool) -> Result<Option<SliceRead>, LogError> {
        let st = self.state.lock();
        let leo = st.log.log_end_offset();
        st.log.read_slice(offset, max_bytes, leo, min_one_batch)
    }

    /// Waits until the high watermark reaches `end_offset` (acks=all: every in-sync replica
    /// has the batch), this broker stops leading, or `timeout` passes.
    pub async fn wait_replicated(&self, end_offset: i64, timeout: std::time::Duration) -> Result<(), ReplicationWait> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let woken = self.appended.notified();
            tokio::pin!(woken);
            // Registered before the checks, so a change between them still wakes us.
            woken.as_mut().enable();
            if self.high_watermark() >= end_offset {
                return Ok(());
            }
            match &*self.role.lock() {
                Role::Follower { .. } => return Err(ReplicationWait::NotLeader),
                Role::Leader(l) if !l.has_min_isr() => return Err(ReplicationWait::NotEnoughReplicasAfterAppend),
                Role::Leader(_) => {}
            }
            if tokio::time::timeout_at(deadline, woken).await.is_err() {
                return Err(ReplicationWait::TimedOut);
            }
        }
    }

    /// Appends a produce request's records as leader. `records` is shared, not copied: the
    /// log writes patched headers (offsets, leader epoch) around the client's bytes.
    pub fn append(&self, records: Bytes, now_ms: i64) -> Result<Appended, AppendError> {
        // Outside the lock: a compressed batch is decompressed for this check.
        if self.compacted.load(Ordering::Acquire) {
            self.check_keys(&records)?;
        }
        let mut st = self.state.lock();
        // Idempotence: look at every batch header first; nothing is appended unless all pass.
        let mut headers: Vec<BatchHeader> = Vec::new();
        for item in BatchIter::new(&records) {
            let (h, _) = item.map_err(|e| AppendError::Corrupt(e.to_string()))?;
            headers.push(h);
        }
        // Kafka: produce v3+ carries exactly one batch per partition; it is what makes the
        // per-batch sequence check below complete.
        if headers.len() != 1 {
            return Err(AppendError::InvalidRecord(format!(
                "produce requests must contain exactly one record batch per partition, got {}",
                headers.len()
            )));
        }
        if headers[0].is_control() {
            return Err(AppendError::InvalidRecord("a client may not write control batches".into()));
        }
        if let Some(first) = headers.first() {
            match st.producers.check(first) {
                SequenceCheck::Append => {}
                SequenceCheck::Duplicate { first_offset, .. } => {
                    return Ok(Appended {
                        base_offset: first_offset,
                        log_append_time: -1,
                        log_start_offset: st.log.log_start_offset(),
                        records: 0,
                        bytes: 0,
                        next_offset: st.log.log_end_offset(),
                        flush_due: false,
                    })
                }
                SequenceCheck::InvalidProducerEpoch => return Err(AppendError::InvalidProducerEpoch),
                SequenceCheck::OutOfOrderSequence => return Err(AppendError::OutOfOrderSequence),
                SequenceCheck::UnknownProducerId => return Err(AppendError::UnknownProducerId),
                SequenceCheck::InvalidTxnState => return Err(AppendError::InvalidTxnState),
            }
        }
        let active_before = st.log.active_base_offset();
        let info = st.log.append_as_leader(records, self.leader_epoch(), now_ms)?;
        let active = st.log.active_base_offset();
        if active != active_before {
            // The table holds exactly the batches below the new segment: this one is not in yet.
            st.snapshot(active);
        }
        // The one batch as written: the log assigned its offsets.
        let mut written = headers[0];
        written.base_offset = info.base_offset;
        written.partition_leader_epoch = self.leader_epoch();
        st.producers.record(&written);
        let leo = st.log.log_end_offset();
        st.unsnapshotted_bytes += info.bytes as u64;
        if st.unsnapshotted_bytes >= SNAPSHOT_INTERVAL_BYTES {
            st.snapshot(leo);
        }
        drop(st);
        self.advance_high_watermark(leo, now_ms);
        self.appended.notify_waiters();
        Ok(Appended {
            base_offset: info.base_offset,
            log_append_time: info.log_append_time,
            log_start_offset: info.log_start_offset,
            records: info.record_count,
            bytes: info.bytes,
            next_offset: leo,
            flush_due: info.flush_due,
        })
    }

    /// Writes the marker ending `producer_id`'s transaction here (WriteTxnMarkers, as leader),
    /// after the producer-state check: a marker from an older producer epoch gets
    /// INVALID_PRODUCER_EPOCH, one from a replaced coordinator TRANSACTION_COORDINATOR_FENCED,
    /// and nothing is written. An abort is added to the aborted-transaction index. Returns the
    /// log end offset after it (what acks=all waits for).
    pub fn append_marker(&self, producer_id: i64, producer_epoch: i16, marker: EndMarker, now_ms: i64) -> Result<i64, AppendError> {
        let mut st = self.state.lock();
        match st.producers.check_marker(producer_id, producer_epoch, marker) {
            Ok(()) => {}
            Err(MarkerError::InvalidProducerEpoch) => return Err(AppendError::InvalidProducerEpoch),
            Err(MarkerError::CoordinatorFenced) => return Err(AppendError::CoordinatorFenced),
        }
        let batch = encode_marker_batch(producer_id, producer_epoch, marker, now_ms);
        let mut header = BatchHeader::parse(&batch).map_err(|e| AppendError::Corrupt(e.to_string()))?;
        let active_before = st.log.active_base_offset();
        let info = st.log.append_as_leader(batch, self.leader_epoch(), now_ms)?;
        let active = st.log.active_base_offset();
        if active != active_before {
            st.snapshot(active);
        }
        header.base_offset = info.base_offset;
        header.partition_leader_epoch = self.leader_epoch();
        st.replay(&header, Some(Ok(marker)));
        let leo = st.log.log_end_offset();
        st.unsnapshotted_bytes += info.bytes as u64;
        drop(st);
        self.advance_high_watermark(leo, now_ms);
        self.appended.notify_waiters();
        Ok(leo)
    }

    /// The last stable offset: the high watermark, or the first offset of the oldest
    /// transaction that is open here or whose marker is not yet replicated, if lower. A
    /// read_committed consumer reads below it.
    pub fn last_stable_offset(&self) -> i64 {
        let hw = self.high_watermark();
        let mut st = self.state.lock();
        st.last_stable_offset(hw)
    }

    /// [`Partition::read_slice`] for a read_committed consumer: up to the last stable offset,
    /// with the aborted transactions that overlap what is returned. Also returns the last
    /// stable offset.
    pub fn read_slice_committed(&self, offset: i64, max_bytes: usize, min_one_batch: bool) -> Result<(Option<SliceRead>, i64, Vec<AbortedTxn>), LogError> {
        let hw = self.high_watermark();
        let mut st = self.state.lock();
        let lso = st.last_stable_offset(hw);
        if offset == lso && offset >= st.log.log_start_offset() {
            return Ok((None, lso, Vec::new()));
        }
        let read = st.log.read_slice(offset, max_bytes, lso, min_one_batch)?;
        let aborted = match &read {
            Some(r) => st.log.aborted_overlapping(offset, r.next_offset),
            None => Vec::new(),
        };
        Ok((read, lso, aborted))
    }

    /// Kafka's check of a compacted topic: every record needs a key. Refused records are
    /// reported one by one (KIP-467), in Kafka's words; the first [`MAX_RECORD_ERRORS`] of them,
    /// so that a batch of many small keyless records cannot make the broker build a response
    /// (and error strings) larger than the batch. The message counts them all.
    fn check_keys(&self, batch: &[u8]) -> Result<(), AppendError> {
        let (count, keyless) = crate::protocol::record_batch::keyless_records(batch, MAX_RECORD_ERRORS)
            .map_err(|e| AppendError::Corrupt(e.to_string()))?;
        if count == 0 {
            return Ok(());
        }
        let records: Vec<(i32, String)> = keyless
            .into_iter()
            .map(|i| (i, format!("Compacted topic cannot accept message without key in topic partition {}-{}", self.topic, self.index)))
            .collect();
        let shown: Vec<String> = records
            .iter()
            .take(3)
            .map(|(i, m)| format!("RecordError(batchIndex={i}, message='{m}')"))
            .collect();
        let message = format!(
            "One or more records have been rejected due to {count} record errors in total, and only showing the first three errors at most: [{}]",
            shown.join(", ")
        );
        Err(AppendError::RecordErrors { message, records, log_start_offset: self.log_start_offset() })
    }

    /// Whether a produce with acks=all waits for [`Partition::sync_to`] (`flush.acks.all`).
    pub fn flush_acks_all(&self) -> bool {
        self.flush_acks_all.load(Ordering::Acquire)
    }

    /// Waits until the log is on disk below `end_offset` (`flush.acks.all`: a produce with
    /// acks=all is answered after this). Group commit: one caller at a time takes the
    /// log's [`SyncPoint`](crate::log::SyncPoint) under the lock and fdatasyncs it on the
    /// blocking pool without the lock; appends made meanwhile go on, and their callers wait
    /// for that fsync to end and then share the next one. A failed fsync poisons the log, and
    /// every caller gets the error.
    pub async fn sync_to(&self, end_offset: i64) -> Result<(), LogError> {
        loop {
            if self.synced_offset.load(Ordering::Acquire) >= end_offset {
                return Ok(());
            }
            let ended = self.synced.notified();
            tokio::pin!(ended);
            // Registered before the check below, so an fsync that ends in between still wakes us.
            ended.as_mut().enable();
            if self.syncing.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire).is_err() {
                ended.await;
                continue;
            }
            let _turn = SyncTurn(self);
            let point = self.state.lock().log.sync_point()?;
            match crate::runtime::off_runtime(move || point.run()).await {
                Ok(end) => {
                    self.synced_offset.fetch_max(end, Ordering::AcqRel);
                }
                Err(e) => {
                    self.state.lock().log.poison_after_sync(&e);
                    return Err(e);
                }
            }
        }
    }

    /// Reads whole batches from `offset`, never past the high watermark.
    pub fn read(&self, offset: i64, max_bytes: usize, min_one_batch: bool) -> Result<ReadResult, LogError> {
        let hw = self.high_watermark();
        self.state.lock().log.read(offset, max_bytes, hw, min_one_batch)
    }

    /// Reads whole batches from `offset` below `end`, which may be past the high watermark (a
    /// new leader replaying its own log).
    pub fn read_to(&self, offset: i64, max_bytes: usize, end: i64) -> Result<ReadResult, LogError> {
        let st = self.state.lock();
        let end = end.min(st.log.log_end_offset());
        st.log.read(offset, max_bytes, end, true)
    }

    /// Calls `f(offset, key, value)` for every keyed record from the log start up to `end`, in
    /// offset order: a coordinator replaying its partition. An undecodable batch is logged and
    /// ends that read (the records after it in the same read are skipped).
    pub fn for_each_keyed_record(&self, end: i64, mut f: impl FnMut(i64, &[u8], Option<&[u8]>)) -> Result<(), (i64, LogError)> {
        let mut offset = self.log_start_offset();
        while offset < end {
            let read = self.read_to(offset, 1 << 20, end).map_err(|e| (offset, e))?;
            let mut buf = read.records.clone();
            let mut next = offset;
            while !buf.is_empty() {
                let set = match kafka_protocol::records::RecordBatchDecoder::decode(&mut buf) {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::warn!(partition = ?self, offset = next, error = %e, "undecodable batch; skipping the rest of this read");
                        break;
                    }
                };
                for rec in set.records {
                    next = next.max(rec.offset + 1);
                    if let Some(key) = rec.key.as_ref() {
                        f(rec.offset, key, rec.value.as_deref());
                    }
                }
            }
            if next <= offset {
                break;
            }
            offset = next;
        }
        Ok(())
    }

    /// Like [`Partition::read`], as a range of a segment file (see [`PartitionLog::read_slice`]).
    pub fn read_slice(&self, offset: i64, max_bytes: usize, min_one_batch: bool) -> Result<Option<SliceRead>, LogError> {
        let hw = self.high_watermark();
        self.state.lock().log.read_slice(offset, max_bytes, hw, min_one_batch)
    }

    /// Header of the batch holding `offset` (see [`PartitionLog::batch_header_at`]).
    pub fn batch_header_at(&self, offset: i64) -> Result<Option<BatchHeader>, LogError> {
        self.state.lock().log.batch_header_at(offset)
    }

    /// Number of segment files (metrics).
    pub fn segment_count(&self) -> usize {
        self.state.lock().log.segment_count()
    }

    pub fn offset_for_timestamp(&self, timestamp: i64) -> Result<Option<(i64, i64)>, LogError> {
        self.state.lock().log.offset_for_timestamp(timestamp)
    }

    pub fn max_timestamp_offset(&self) -> Result<Option<(i64, i64)>, LogError> {
        self.state.lock().log.max_timestamp_offset()
    }

    /// DeleteRecords: `offset` must be at most the high watermark (checked by the caller).
    pub fn delete_records_before(&self, offset: i64) -> Result<i64, LogError> {
        let start = self.state.lock().log.delete_records_before(offset)?;
        self.log_start_offset.fetch_max(start, Ordering::AcqRel);
        Ok(start)
    }

    /// The idempotent producers this partition has state for (DescribeProducers).
    pub fn active_producers(&self) -> Vec<super::producer_state::ActiveProducer> {
        self.state.lock().producers.active()
    }

    /// Forgets producers whose last batch is `expiration_ms` old; returns how many.
    pub fn expire_producers(&self, now_ms: i64, expiration_ms: i64) -> usize {
        self.state.lock().producers.remove_expired(now_ms, expiration_ms)
    }

    pub fn enforce_retention(&self, now_ms: i64) -> Result<usize, LogError> {
        let mut st = self.state.lock();
        let n = st.log.enforce_retention(now_ms)?;
        self.log_start_offset.fetch_max(st.log.log_start_offset(), Ordering::AcqRel);
        Ok(n)
    }

    /// One compaction pass over the rolled segments (offsets and the high watermark do not move).
    // TODO(concurrent cleaning): the pass holds the partition lock, so appends and fetches on
    // this partition wait while it rewrites; Kafka cleans copies and only swaps under the lock.
    pub fn clean(&self, config: &CleanerConfig, first_dirty: i64, now_ms: i64) -> Result<Option<CleanStats>, LogError> {
        self.state.lock().log.clean(config, first_dirty, now_ms)
    }

    /// [`PartitionLog::write_out`] and a producer snapshot at the log end, neither fsynced: a
    /// clean shutdown follows this with one filesystem sync per log dir.
    pub fn write_out(&self) -> Result<(), LogError> {
        let mut st = self.state.lock();
        st.log.write_out()?;
        st.shutdown_snapshot();
        Ok(())
    }

    /// Flushes the log and snapshots producer state at its end (clean shutdown).
    pub fn flush(&self) -> Result<(), LogError> {
        let mut st = self.state.lock();
        st.log.flush()?;
        st.shutdown_snapshot();
        Ok(())
    }

    pub fn update_config(&self, config: LogConfig) {
        self.min_isr.store(config.min_insync_replicas.max(1), Ordering::Release);
        if let Role::Leader(l) = &mut *self.role.lock() {
            l.min_isr = config.min_insync_replicas.max(1) as usize;
        }
        self.flush_acks_all.store(config.flush_acks_all, Ordering::Release);
        self.compacted.store(config.compacted, Ordering::Release);
        self.state.lock().log.update_config(config);
    }

    pub fn size_bytes(&self) -> u64 {
        self.state.lock().log.size_bytes()
    }

    /// Removes the partition's files; used by DeleteTopics after the partition is unreachable.
    pub fn delete_files(self: Arc<Self>) -> Result<(), LogError> {
        self.appended.notify_waiters();
        match Arc::try_unwrap(self) {
            Ok(p) => p.state.into_inner().log.delete_files(),
            // Someone (a fetch in flight) still holds it: delete the directory directly.
            Err(p) => {
                let dir = p.state.lock().log.dir().to_path_buf();
                std::fs::remove_dir_all(&dir).map_err(|source| LogError::Io { path: dir, source, op: "remove partition dir" })
            }
        }
    }

    pub fn log_dir(&self) -> std::path::PathBuf {
        self.state.lock().log.dir().to_path_buf()
    }
}

/// Snapshots kept per partition: the newest may be torn by an OS crash (see the module doc).
const SNAPSHOTS_KEPT: usize = 2;

/// Snapshot files larger than this are not read (a million producers take 46 MB).
const MAX_SNAPSHOT_BYTES: u64 = 256 << 20;

fn snapshot_path(dir: &Path, offset: i64) -> PathBuf {
    dir.join(format!("{}.snapshot", file_stem(offset)))
}

/// Offsets of the snapshot files in `dir`, ascending.
fn snapshot_offsets(dir: &Path) -> Vec<i64> {
    let mut offsets: Vec<i64> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| offset_from_file_name(&e.ok()?.file_name().into_string().ok()?, ".snapshot"))
        .collect();
    offsets.sort_unstable();
    offsets
}

/// Writes the snapshot at `offset` and removes all but the newest [`SNAPSHOTS_KEPT`]. A failure
/// is logged and costs only replay time at the next start.
fn save_snapshot(dir: &Path, offset: i64, table: &ProducerStateTable) {
    let path = snapshot_path(dir, offset);
    if let Err(e) = crate::log::checkpoint::write_replacing(&path, &table.encode_snapshot()) {
        tracing::warn!(path = %path.display(), error = %e, "could not write producer snapshot");
        return;
    }
    let offsets = snapshot_offsets(dir);
    for old in &offsets[..offsets.len().saturating_sub(SNAPSHOTS_KEPT)] {
        let _ = std::fs::remove_file(snapshot_path(dir, *old));
    }
}

/// A snapshot is also taken once this many bytes have been appended since the newest one, so
/// that a start after kill -9 replays at most this much of each partition. Kafka snapshots only
/// at rolls: with 1 GiB segments its replay reads up to a whole segment, from disk once the
/// pages have left the page cache. One snapshot costs about half a millisecond here (mostly
/// creating the file), under 1% of a core at 300 MiB/s into one partition.
const SNAPSHOT_INTERVAL_BYTES: u64 = 16 << 20;

/// A clean shutdown skips the producer snapshot when the next start would rebuild the same table
/// by replaying at most this many bytes of batch headers: creating the file costs more (10,000
/// partitions with one record each spent 3.3 s creating snapshot files).
const SHUTDOWN_SNAPSHOT_MIN_REPLAY_BYTES: u64 = 1 << 20;

impl State {
    /// Takes one batch now in the log into the producer state: a marker (`marker`, parsed from
    /// a control batch) ends its producer's transaction and, for an abort, is indexed. An
    /// unreadable control batch is logged and otherwise skipped (it ends no transaction).
    fn replay(&mut self, h: &BatchHeader, marker: Option<Result<EndMarker, String>>) -> Option<CompletedTxn> {
        match marker {
            None => {
                self.producers.record(h);
                None
            }
            Some(Ok(m)) => {
                let done = self.producers.record_marker(h, m);
                if done.aborted {
                    if let Err(e) = self.log.index_aborted(AbortedTxn::from(&done)) {
                        tracing::error!(dir = %self.log.dir().display(), offset = h.base_offset, error = %e, "could not index an aborted transaction");
                    }
                }
                Some(done)
            }
            Some(Err(reason)) => {
                tracing::warn!(dir = %self.log.dir().display(), offset = h.base_offset, %reason, "skipping a control batch that is not a transaction marker");
                None
            }
        }
    }

    fn last_stable_offset(&mut self, high_watermark: i64) -> i64 {
        self.producers.on_high_watermark(high_watermark);
        self.producers.first_unstable_offset().map_or(high_watermark, |o| o.min(high_watermark))
    }

    /// Snapshots the table as the state of every batch below `offset` (from then on, nothing is
    /// left to replay before it).
    fn snapshot(&mut self, offset: i64) {
        save_snapshot(self.log.dir(), offset, &self.producers);
        self.unsnapshotted_bytes = 0;
    }

    /// The snapshot at the log end for a clean shutdown, unless the next start would replay at
    /// most [`SHUTDOWN_SNAPSHOT_MIN_REPLAY_BYTES`] without it (nothing at all when the newest
    /// snapshot is at the log end, where Kafka skips it too).
    fn shutdown_snapshot(&mut self) {
        if self.unsnapshotted_bytes > SHUTDOWN_SNAPSHOT_MIN_REPLAY_BYTES {
            self.snapshot(self.log.log_end_offset());
        }
    }
}

fn read_snapshot(path: &Path) -> Result<ProducerStateTable, String> {
    let len = std::fs::metadata(path).map_err(|e| e.to_string())?.len();
    if len > MAX_SNAPSHOT_BYTES {
        return Err(format!("{len} bytes, larger than {MAX_SNAPSHOT_BYTES}"));
    }
    ProducerStateTable::decode_snapshot(&std::fs::read(path).map_err(|e| e.to_string())?)
}

/// Rebuilds idempotent-producer state after a restart: the newest usable snapshot, then the
/// batch headers after it (and the markers of control batches, which end transactions; an
/// abort missing from the aborted-transaction index, its write cut short by a kill, is added).
/// Segments whose batches are all older than the expiration window are
/// skipped: every producer they could describe has expired. Also returns the bytes replayed.
fn rebuild_producer_state(
    log: &mut PartitionLog,
    now_ms: i64,
    expiration_ms: i64,
) -> Result<(ProducerStateTable, u64), LogError> {
    let (dir, start, end) = (log.dir(), log.log_start_offset(), log.log_end_offset());
    let mut table = ProducerStateTable::default();
    let mut from = start;
    for offset in snapshot_offsets(dir).into_iter().rev() {
        let path = snapshot_path(dir, offset);
        if offset > end {
            tracing::info!(path = %path.display(), log_end_offset = end, "removing producer snapshot beyond the log end");
            let _ = std::fs::remove_file(&path);
            continue;
        }
        if offset < start {
            break; // describes deleted records: replay from the log start instead
        }
        match read_snapshot(&path) {
            Ok(t) => {
                (table, from) = (t, offset);
                break;
            }
            Err(reason) => {
                tracing::warn!(path = %path.display(), %reason, "removing unreadable producer snapshot");
                let _ = std::fs::remove_file(&path);
            }
        }
    }
    let mut replayed = 0u64;
    let mut aborts = Vec::new();
    let leo = log.log_end_offset();
    log.for_each_batch_header(from, now_ms.saturating_sub(expiration_ms), |h| {
        replayed += h.total_size() as u64;
        if !h.is_control() {
            table.record(h);
            return;
        }
        let marker = log
            .read(h.base_offset, h.total_size(), leo, true)
            .map_err(|e| e.to_string())
            .and_then(|r| parse_end_marker(&r.records));
        match marker {
            Ok(m) => {
                let done = table.record_marker(h, m);
                if done.aborted {
                    aborts.push(AbortedTxn::from(&done));
                }
            }
            Err(reason) => {
                tracing::warn!(dir = %log.dir().display(), offset = h.base_offset, %reason, "skipping a control batch that is not a transaction marker");
            }
        }
    })?;
    for t in aborts {
        log.index_aborted(t)?;
    }
    table.remove_expired(now_ms, expiration_ms);
    Ok((table, replayed))
}

#[cfg(test)]
#[path = "partition_tests.rs"]
mod tests;
