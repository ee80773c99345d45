//! [`PartitionLog`]: the ordered segments of one partition directory and the operations the
//! broker needs on them (append, read, timestamp lookups, retention, truncation, epochs).
//!
//! Not thread-safe by itself: the replication layer wraps it in a lock. Reads take `&self`.
//!
//! # Failure behaviour
//! A failed write, fsync, roll or truncation poisons the log (`error!` with the path); every
//! later append, flush or truncation returns [`LogError::Poisoned`]. Reopening recovers from
//! whatever reached the disk. A rolled segment is made durable by the flusher thread
//! (`flush.rs`), and a partition has at most one such flush in flight: it waits for it before
//! the next roll. So only the last two segments can have a torn tail after the OS stops, and
//! only the active one after the broker process alone stops. How much is checked on open is
//! the caller's [`ActiveCheck`]: every batch's CRC of the last two segments when the OS may
//! have lost writes (Kafka's recovery), or only the structure of the active one after its
//! index when it cannot have.
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use super::checkpoint::sync_dir;
use super::config::LogConfig;
use super::epoch::LeaderEpochCache;
use super::error::LogError;
use super::flush::{self, FlushTicket};
use super::io::{FileSlice, IoBackend};
use super::segment::{keep_file, offset_from_file_name, Segment};
use super::txn_index::{AbortedTxn, AbortedTxns};
use crate::protocol::record_batch::{
    crc_is_valid, find_max_timestamp_record, records_section, set_base_offset, set_log_append_time,
    set_partition_leader_epoch, validate_produce_records, BatchHeader, BatchIter, ProduceValidationError, RecordIter,
    BATCH_HEADER_LEN,
};

/// How [`PartitionLog::open_with`] checks the active (last) segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActiveCheck {
    /// Walk every batch and verify its CRC, truncating at the first bad one: Kafka's recovery
    /// after an unclean shutdown. Needed whenever the OS itself may have stopped (power loss,
    /// kernel crash) since the data was written: the page cache may then have reached the disk
    /// torn, partly or with holes.
    Crc,
    /// Check only what a killed process can leave behind, as for a rolled segment: load the
    /// indexes and walk the batch headers after the last index entry; a torn or inconsistent
    /// tail falls back to [`ActiveCheck::Crc`]. Valid when the OS has run without a restart
    /// since every byte of the segment was written: whatever the previous broker wrote is then
    /// whole in the page cache or on disk, and a kill can only cut the last write short.
    Structure,
}

/// What an append wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendInfo {
    pub base_offset: i64,
    pub last_offset: i64,
    /// The broker timestamp stamped on the batches, -1 unless LogAppendTime.
    pub log_append_time: i64,
    pub log_start_offset: i64,
    pub record_count: u64,
    pub batch_count: u32,
    pub bytes: usize,
    /// `flush.messages` or `flush.ms` is reached with this append: the caller makes the log
    /// durable up to it ([`PartitionLog::sync_point`]) before acknowledging it. The log itself
    /// never fsyncs in an append, which runs under the partition lock on an async worker.
    pub flush_due: bool,
}

/// Whole batches returned by [`PartitionLog::read`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadResult {
    pub records: Bytes,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
}

/// Whole batches returned by [`PartitionLog::read_slice`]: a range of one segment file.
#[derive(Debug, Clone)]
pub struct SliceRead {
    pub slice: FileSlice,
    /// Base offset of the first batch in the range.
    pub first_offset: i64,
    /// The offset after the last batch in the range (offsets in between may be absent after
    /// compaction, so `next_offset - first_offset` bounds the record count from above).
    pub next_offset: i64,
}

/// What makes a log durable up to the end it had when this was taken: the data of the active
/// segment and the flush of the segment rolled before it, if that is still running (the ones
/// before it were flushed before it rolled). Taken under the partition lock by
/// [`PartitionLog::sync_point`] and [`run`](SyncPoint::run) without it, so appends go on while
/// the fsync runs (the group commit of `flush.acks.all`, see `replication/partition.rs`).
/// Indexes are not synced: recovery rebuilds them from the data.
pub struct SyncPoint {
    end_offset: i64,
    file: Arc<dyn super::io::SegmentFile>,
    path: PathBuf,
    rolled: Option<Arc<FlushTicket>>,
}

impl SyncPoint {
    /// fdatasyncs; returns the offset below which the log is now durable. Blocks (an fsync
    /// under write-back can take seconds): run it off the async runtime.
    pub fn run(self) -> Result<i64, LogError> {
        if let Some(ticket) = &self.rolled {
            if !ticket.wait_ok() {
                return Err(LogError::Poisoned { path: self.path.parent().map(Path::to_path_buf).unwrap_or_default() });
            }
        }
        let started = std::time::Instant::now();
        self.file.sync_data().map_err(|e| LogError::io(&self.path, "fsync", e))?;
        crate::metrics::fsync_completed(started.elapsed());
        Ok(self.end_offset)
    }
}

/// One partition's log. See the module docs of [`crate::log`] for the layout and invariants.
#[derive(Debug)]
pub struct PartitionLog {
    pub(super) dir: PathBuf,
    pub(super) config: LogConfig,
    pub(super) io: Arc<dyn IoBackend>,
    /// Sorted by base offset, never empty; the last one is active. The cleaner rewrites rolled
    /// segments in place (same base offsets), see `cleaner.rs`.
    pub(super) segments: Vec<Segment>,
    log_start_offset: i64,
    epochs: LeaderEpochCache,
    /// Every segment's aborted-transaction index (`.txnindex`), see [`AbortedTxns`].
    aborted: AbortedTxns,
    poisoned: bool,
    unflushed_messages: u64,
    last_flush_ms: i64,
    /// The flush of the segment rolled last, while it may still be running.
    pending_flush: Option<Arc<FlushTicket>>,
}

fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Re-adds leader epochs that the active segment's batches carry but the checkpoint lacks (its
/// last write was not fsynced before a crash; see `epoch.rs`). Costs one header read when the
/// checkpoint is current, a walk over the segment's batch headers when it is not.
fn recover_epochs(active: &Segment, epochs: &mut LeaderEpochCache) -> Result<(), LogError> {
    let newer = |h: &BatchHeader, latest: Option<i32>| h.partition_leader_epoch >= 0 && latest.is_none_or(|e| h.partition_leader_epoch > e);
    let Some((_, last)) = active.find_batch(active.next_offset() - 1)? else { return Ok(()) };
    if !newer(&last, epochs.latest_epoch()) {
        return Ok(());
    }
    let mut pos = 0;
    loop {
        let latest = epochs.latest_epoch();
        let Some((p, h)) = active.first_batch_from(pos, |h| newer(h, latest))? else { break };
        tracing::info!(epoch = h.partition_leader_epoch, start_offset = h.base_offset, path = %active.log_path().display(), "restoring leader epoch missing from the checkpoint");
        epochs.assign(h.partition_leader_epoch, h.base_offset)?;
        pos = p + h.total_size() as u64;
    }
    epochs.sync()
}

impl PartitionLog {
    /// Opens (creating if needed) the partition directory `dir`, verifying every batch of the
    /// active segment ([`ActiveCheck::Crc`]); see the module doc.
    pub fn open(dir: &Path, config: LogConfig, io: Arc<dyn IoBackend>) -> Result<PartitionLog, LogError> {
        Self::open_with(dir, config, io, ActiveCheck::Crc)
    }

    /// [`PartitionLog::open`] with the active segment checked as `active` says.
    pub fn open_with(dir: &Path, config: LogConfig, io: Arc<dyn IoBackend>, active: ActiveCheck) -> Result<PartitionLog, LogError> {
        fs::create_dir_all(dir).map_err(|e| LogError::io(dir, "create partition directory", e))?;
        let mut bases = Vec::new();
        let mut index_files = Vec::new();
        let mut txn_indexes = Vec::new();
        let listing = fs::read_dir(dir).map_err(|e| LogError::io(dir, "list partition directory", e))?;
        for entry in listing {
            let entry = entry.map_err(|e| LogError::io(dir, "list partition directory", e))?;
            let Ok(name) = entry.file_name().into_string() else { continue };
            let path = entry.path();
            if [".cleaned", ".swap", ".deleted", ".tmp"].iter().any(|s| name.ends_with(s)) {
                tracing::info!(path = %path.display(), "removing leftover file from an interrupted operation");
                fs::remove_file(&path).map_err(|e| LogError::io(&path, "remove leftover file", e))?;
            } else if let Some(base) = offset_from_file_name(&name, ".log") {
                bases.push(base);
            } else if let Some(base) = offset_from_file_name(&name, ".index").or_else(|| offset_from_file_name(&name, ".timeindex")) {
                index_files.push((base, path));
            } else if let Some(base) = offset_from_file_name(&name, ".txnindex") {
                txn_indexes.push(base);
                index_files.push((base, path));
            }
        }
        bases.sort_unstable();
        for (base, path) in index_files {
            if bases.binary_search(&base).is_err() {
                tracing::info!(path = %path.display(), "removing index file without a segment");
                fs::remove_file(&path).map_err(|e| LogError::io(&path, "remove orphan index", e))?;
            }
        }
        let interval = config.index_interval_bytes;
        let mut segments = Vec::with_capacity(bases.len().max(1));
        // Under `Crc`, the last two segments: the older one's flush may not have finished.
        let checked_from = match active {
            ActiveCheck::Crc => bases.len().saturating_sub(2),
            ActiveCheck::Structure => bases.len(),
        };
        for (i, &base) in bases.iter().enumerate() {
            let recover = i >= checked_from;
            let before = fs::metadata(Segment::log_file(dir, base)).map_or(0, |m| m.len());
            let seg = Segment::open(dir, base, &io, interval, recover)?;
            let torn = seg.size() < before;
            segments.push(seg);
            if torn && i + 1 < bases.len() {
                // A rolled segment lost its tail: what follows it was written after the lost bytes.
                for &later in &bases[i + 1..] {
                    let log = Segment::log_file(dir, later);
                    let kept = keep_file(&log);
                    tracing::warn!(
                        path = %log.display(),
                        kept_in = %kept,
                        "removing a segment that follows a torn one"
                    );
                    Segment::remove_files(dir, later)?;
                }
                sync_dir(dir)?;
                break;
            }
        }
        if segments.is_empty() {
            segments.push(Segment::create(dir, 0, &io, interval)?);
        }
        for pair in segments.windows(2) {
            if pair[0].next_offset() > pair[1].base_offset() {
                return Err(LogError::Corrupt {
                    path: pair[0].log_path().to_path_buf(),
                    reason: format!(
                        "segment ends at offset {} but the next segment starts at {}",
                        pair[0].next_offset(),
                        pair[1].base_offset()
                    ),
                });
            }
        }
        let mut epochs = LeaderEpochCache::load(dir)?;
        let log_start_offset = segments[0].base_offset();
        let leo = segments.last().map_or(0, Segment::next_offset);
        epochs.truncate_from_end(leo)?;
        let bases: Vec<i64> = segments.iter().map(Segment::base_offset).collect();
        let mut aborted = AbortedTxns::load(dir, &bases, &txn_indexes);
        // Recovery may have cut the active segment below markers its index names.
        aborted.truncate_from(dir, leo)?;
        if let Some(active) = segments.last() {
            recover_epochs(active, &mut epochs)?;
        }
        Ok(PartitionLog {
            dir: dir.to_path_buf(),
            config,
            io,
            segments,
            log_start_offset,
            epochs,
            aborted,
            poisoned: false,
            unflushed_messages: 0,
            last_flush_ms: wall_clock_ms(),
            pending_flush: None,
        })
    }

    fn active(&self) -> &Segment {
        // `segments` is never empty (open and every deletion keep at least one).
        &self.segments[self.segments.len() - 1]
    }

    fn active_mut(&mut self) -> &mut Segment {
        let n = self.segments.len();
        &mut self.segments[n - 1]
    }

    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset
    }

    pub fn log_end_offset(&self) -> i64 {
        self.active().next_offset()
    }

    /// Sets the log start (e.g. from `log-start-offset-checkpoint`), clamped to
    /// `[first segment base, log end offset]`.
    pub fn set_log_start_offset(&mut self, offset: i64) {
        let first = self.segments[0].base_offset();
        self.log_start_offset = offset.clamp(first, self.log_end_offset().max(first));
    }

    fn check_poisoned(&self) -> Result<(), LogError> {
        if self.poisoned {
            return Err(LogError::Poisoned { path: self.dir.clone() });
        }
        Ok(())
    }

    /// Marks the log poisoned when `r` is an error (write/fsync state is now unknown).
    fn poison_on_err<T>(&mut self, r: Result<T, LogError>) -> Result<T, LogError> {
        if let Err(e) = &r {
            self.poison(e);
        }
        r
    }

    fn poison(&mut self, e: &LogError) {
        if !self.poisoned {
            tracing::error!(dir = %self.dir.display(), error = %e, "partition log poisoned; refusing further appends");
        }
        self.poisoned = true;
    }

    /// Leader append; see the crate-level contract in the module docs.
    ///
    /// `records` is not modified: each batch is written as a patched copy of its 61-byte header
    /// (offset, leader epoch and, for LogAppendTime, timestamp and CRC) followed by the rest of
    /// the batch straight from `records`, in one vectored write.
    /// Starts `leader_epoch` at the log end in the leader-epoch cache, as Kafka's makeLeader
    /// does, unless the cache already has it or a later one. A follower whose last fetched epoch
    /// is one this leader never wrote in is then answered with where that epoch ends here (the
    /// start of this one), not with an undefined epoch, which would make it truncate to its own
    /// high watermark and drop acknowledged records above it.
    pub fn start_leader_epoch(&mut self, leader_epoch: i32) -> Result<(), LogError> {
        if leader_epoch < 0 || self.epochs.latest_epoch().is_some_and(|e| leader_epoch <= e) {
            return Ok(());
        }
        let r = self.epochs.assign(leader_epoch, self.log_end_offset());
        self.poison_on_err(r)
    }

    pub fn append_as_leader(&mut self, records: Bytes, leader_epoch: i32, now_ms: i64) -> Result<AppendInfo, LogError> {
        self.check_poisoned()?;
        let headers = validate_produce_records(&records, self.config.max_message_bytes)?;
        let log_append = self.config.message_timestamp_type_log_append;
        let base_offset = self.log_end_offset();
        let mut next = base_offset;
        let mut pos = 0usize;
        let mut batches = Vec::with_capacity(headers.len());
        let mut patched = BytesMut::with_capacity(headers.len() * BATCH_HEADER_LEN);
        let mut record_count = 0u64;
        for mut h in headers {
            let len = h.total_size();
            let at = patched.len();
            patched.extend_from_slice(&records[pos..pos + BATCH_HEADER_LEN]);
            let header = &mut patched[at..];
            set_base_offset(header, next);
            set_partition_leader_epoch(header, leader_epoch);
            h.base_offset = next;
            h.partition_leader_epoch = leader_epoch;
            if log_append {
                set_log_append_time(header, &records[pos + BATCH_HEADER_LEN..pos + len], now_ms);
                h.attributes |= 0x08;
                h.max_timestamp = now_ms;
            }
            record_count += h.records_count.max(0) as u64;
            next = h.next_offset();
            batches.push((pos, h));
            pos += len;
        }
        let patched = patched.freeze();
        let mut parts = Vec::with_capacity(batches.len() * 2);
        for (i, &(pos, h)) in batches.iter().enumerate() {
            parts.push(patched.slice(i * BATCH_HEADER_LEN..(i + 1) * BATCH_HEADER_LEN));
            parts.push(records.slice(pos + BATCH_HEADER_LEN..pos + h.total_size()));
        }
        let last_offset = next - 1;
        let max_ts = batches.iter().map(|(_, h)| h.max_timestamp).max().unwrap_or(-1);
        self.write_batches(&parts, &batches, last_offset, max_ts, now_ms)?;
        if leader_epoch >= 0 && self.epochs.latest_epoch().is_none_or(|e| leader_epoch > e) {
            let r = self.epochs.assign(leader_epoch, base_offset);
            self.poison_on_err(r)?;
        }
        let flush_due = self.after_append(record_count, now_ms);
        Ok(AppendInfo {
            base_offset,
            last_offset,
            log_append_time: if log_append { now_ms } else { -1 },
            log_start_offset: self.log_start_offset,
            record_count,
            batch_count: batches.len() as u32,
            bytes: records.len(),
            flush_due,
        })
    }

    /// Replica append keeping the offsets in the batches (gaps allowed, never going back).
    pub fn append_as_follower(&mut self, records: Bytes) -> Result<AppendInfo, LogError> {
        self.check_poisoned()?;
        let corrupt = |m: String| LogError::Validation(ProduceValidationError::CorruptMessage(m));
        let mut batches = Vec::new();
        let mut iter = BatchIter::new(&records);
        let mut expected = self.log_end_offset();
        let mut record_count = 0u64;
        loop {
            let start = iter.position();
            let Some(item) = iter.next() else { break };
            let (h, bytes) = item.map_err(|e| corrupt(e.to_string()))?;
            if !crc_is_valid(bytes) {
                return Err(corrupt(format!("CRC mismatch in batch at offset {}", h.base_offset)));
            }
            if h.base_offset < expected || h.last_offset_delta < 0 {
                return Err(LogError::NonMonotonicOffset {
                    path: self.dir.clone(),
                    base_offset: h.base_offset,
                    log_end: expected,
                });
            }
            expected = h.next_offset();
            record_count += h.records_count.max(0) as u64;
            batches.push((start, h));
        }
        if !iter.remainder().is_empty() {
            return Err(corrupt(format!("{} trailing bytes after the last batch", iter.remainder().len())));
        }
        let (Some(&(_, first)), Some(&(_, last))) = (batches.first(), batches.last()) else {
            return Err(corrupt("no record batches".into()));
        };
        let now = wall_clock_ms();
        let max_ts = batches.iter().map(|(_, h)| h.max_timestamp).max().unwrap_or(-1);
        // An empty active segment whose base is behind the first incoming batch is replaced so
        // that the segment name matches its first offset (a follower starting mid-log).
        if self.active().is_empty() && self.active().base_offset() < first.base_offset {
            let r = self.replace_empty_active(first.base_offset);
            self.poison_on_err(r)?;
        }
        let len = records.len();
        self.write_batches(&[records], &batches, last.last_offset(), max_ts, now)?;
        for (_, h) in &batches {
            if h.partition_leader_epoch >= 0 && self.epochs.latest_epoch().is_none_or(|e| h.partition_leader_epoch > e) {
                let r = self.epochs.assign(h.partition_leader_epoch, h.base_offset);
                self.poison_on_err(r)?;
            }
        }
        let flush_due = self.after_append(record_count, now);
        Ok(AppendInfo {
            base_offset: first.base_offset,
            last_offset: last.last_offset(),
            log_append_time: -1,
            log_start_offset: self.log_start_offset,
            record_count,
            batch_count: batches.len() as u32,
            bytes: len,
            flush_due,
        })
    }

    fn replace_empty_active(&mut self, base: i64) -> Result<(), LogError> {
        self.settle_flush()?;
        let interval = self.config.index_interval_bytes;
        if let Some(old) = self.segments.pop() {
            old.delete()?;
        }
        self.segments.push(Segment::create(&self.dir, base, &self.io, interval)?);
        if self.segments.len() == 1 {
            self.log_start_offset = self.log_start_offset.max(base);
        }
        sync_dir(&self.dir)
    }

    /// Writes and indexes `parts` (whole batches, concatenated) in the active segment, rolling
    /// first when they do not fit it.
    fn write_batches(
        &mut self,
        parts: &[Bytes],
        batches: &[(usize, BatchHeader)],
        last_offset: i64,
        max_ts: i64,
        now_ms: i64,
    ) -> Result<(), LogError> {
        let r = self.poll_flush();
        self.poison_on_err(r)?;
        let len: u64 = parts.iter().map(|p| p.len() as u64).sum();
        if self.should_roll(len, last_offset, max_ts, now_ms) {
            let r = self.roll();
            self.poison_on_err(r)?;
        }
        let r = self.active_mut().append(parts, batches);
        self.poison_on_err(r)
    }

    fn should_roll(&self, incoming: u64, last_offset: i64, max_ts: i64, now_ms: i64) -> bool {
        let seg = self.active();
        if seg.is_empty() {
            return false;
        }
        let size_limit = self.config.segment_bytes.min(i32::MAX as u64);
        let too_big = seg.size() + incoming > size_limit;
        let waited = match seg.roll_reference_timestamp() {
            Some(first_ts) if max_ts >= 0 => max_ts.saturating_sub(first_ts),
            _ => now_ms.saturating_sub(seg.opened_ms()),
        };
        let too_old = waited > self.config.segment_ms;
        let offset_overflow = last_offset - seg.base_offset() > i64::from(i32::MAX);
        too_big || too_old || offset_overflow
    }

    /// Starts a new active segment; the old one is made durable in the background (see
    /// `flush.rs`), after the flush of the previous roll, if still running, has finished.
    fn roll(&mut self) -> Result<(), LogError> {
        self.settle_flush()?;
        let leo = self.log_end_offset();
        let dir = self.dir.clone();
        let job = self.active_mut().on_roll(&dir)?;
        self.epochs.sync()?;
        let seg = Segment::create(&self.dir, leo, &self.io, self.config.index_interval_bytes)?;
        tracing::debug!(path = %seg.log_path().display(), "rolled new log segment");
        self.segments.push(seg);
        self.pending_flush = Some(flush::submit(job));
        Ok(())
    }

    /// Waits for the flush of the last rolled segment if it is in flight; a failed flush
    /// poisons the log.
    pub(super) fn settle_flush(&mut self) -> Result<(), LogError> {
        match self.pending_flush.take() {
            Some(ticket) => {
                let r = ticket.wait();
                self.poison_on_err(r)
            }
            None => Ok(()),
        }
    }

    /// [`Self::settle_flush`] when the flush has already finished; never blocks.
    fn poll_flush(&mut self) -> Result<(), LogError> {
        if self.pending_flush.as_ref().is_some_and(|t| t.is_done()) {
            self.settle_flush()
        } else {
            Ok(())
        }
    }

    /// Counts an append towards `flush.messages` / `flush.ms`; true when it reaches one of
    /// them, and the count starts over. The fsync itself is the caller's (see
    /// [`AppendInfo::flush_due`]).
    fn after_append(&mut self, records: u64, now_ms: i64) -> bool {
        self.unflushed_messages = self.unflushed_messages.saturating_add(records);
        let due = self.unflushed_messages >= self.config.flush_interval_messages
            || now_ms.saturating_sub(self.last_flush_ms) >= self.config.flush_interval_ms;
        if due {
            self.unflushed_messages = 0;
            self.last_flush_ms = now_ms;
        }
        due
    }

    /// Index of the segment that would hold `offset` (last with base <= offset).
    fn segment_index_for(&self, offset: i64) -> usize {
        self.segments.partition_point(|s| s.base_offset() <= offset).saturating_sub(1)
    }

    /// Whole batches from the batch containing `offset`, copied into memory; see
    /// [`PartitionLog::read_slice`] for the rules.
    pub fn read(&self, offset: i64, max_bytes: usize, max_offset: i64, min_one_batch: bool) -> Result<ReadResult, LogError> {
        let records = match self.read_slice(offset, max_bytes, max_offset, min_one_batch)? {
            Some(r) => r.slice.to_bytes().map_err(|e| LogError::io(&self.dir, "read", e))?,
            None => Bytes::new(),
        };
        Ok(ReadResult { records, log_start_offset: self.log_start_offset, log_end_offset: self.log_end_offset() })
    }

    /// Whole batches from the batch containing `offset`, as a range of one segment file
    /// (nothing is copied; a fetch sends it with sendfile). `None` when there is nothing to
    /// return: `offset` is the log end, the next batch reaches `max_offset` (the high
    /// watermark), or it is larger than `max_bytes` and `min_one_batch` is false.
    ///
    /// Rules: the range never crosses a segment boundary, never includes a batch with an
    /// offset at or past `max_offset`, and holds at most `max_bytes` — except that with
    /// `min_one_batch` the first batch is returned whole whatever its size (KIP-74).
    pub fn read_slice(
        &self,
        offset: i64,
        max_bytes: usize,
        max_offset: i64,
        min_one_batch: bool,
    ) -> Result<Option<SliceRead>, LogError> {
        let log_end = self.log_end_offset();
        if offset < self.log_start_offset || offset > log_end {
            return Err(LogError::OffsetOutOfRange { offset, log_start: self.log_start_offset, log_end });
        }
        if offset == log_end {
            return Ok(None);
        }
        for seg in &self.segments[self.segment_index_for(offset)..] {
            let Some((pos, first)) = seg.find_batch(offset)? else { continue };
            if first.last_offset() >= max_offset {
                return Ok(None);
            }
            if first.total_size() > max_bytes {
                if !min_one_batch {
                    return Ok(None);
                }
                let slice = seg.slice(pos, first.total_size());
                return Ok(Some(SliceRead { slice, first_offset: first.base_offset, next_offset: first.next_offset() }));
            }
            // Batches at or past max_offset end the range where the first of them starts.
            let visible_end = match seg.find_batch(max_offset)? {
                Some((p, _)) => p,
                None => seg.size(),
            };
            let limit = (pos + max_bytes as u64).min(visible_end);
            let (end, next_offset) = seg.whole_batches_end(pos, limit)?;
            let slice = seg.slice(pos, (end - pos) as usize);
            return Ok(Some(SliceRead { slice, first_offset: first.base_offset, next_offset }));
        }
        Ok(None)
    }

    /// Calls `f` with the header of every batch from the one holding `from` (or the log start
    /// offset, if later) to the end, in offset order, skipping whole segments whose largest
    /// timestamp is below `min_timestamp`. Reads 61 bytes per batch, not the records: this is
    /// what rebuilding producer state at startup needs.
    pub fn for_each_batch_header(&self, from: i64, min_timestamp: i64, mut f: impl FnMut(&BatchHeader)) -> Result<(), LogError> {
        let start = from.max(self.log_start_offset);
        for seg in &self.segments[self.segment_index_for(start)..] {
            if seg.max_timestamp() < min_timestamp {
                continue;
            }
            let Some((mut pos, _)) = seg.find_batch(start)? else { continue };
            while pos < seg.size() {
                let h = seg.header_at(pos)?;
                f(&h);
                pos += h.total_size() as u64;
            }
        }
        Ok(())
    }

    /// Header of the batch holding `offset` (header only, no record bytes copied); `None` at or
    /// past the log end. Metrics use it to date the oldest record a consumer group has not read.
    pub fn batch_header_at(&self, offset: i64) -> Result<Option<BatchHeader>, LogError> {
        let offset = offset.max(self.log_start_offset);
        for seg in &self.segments[self.segment_index_for(offset)..] {
            if let Some((_, h)) = seg.find_batch(offset)? {
                return Ok(Some(h));
            }
        }
        Ok(None)
    }

    /// First `(offset, timestamp)` whose record timestamp is >= `timestamp`.
    pub fn offset_for_timestamp(&self, timestamp: i64) -> Result<Option<(i64, i64)>, LogError> {
        let start = self.log_start_offset;
        for seg in &self.segments[self.segment_index_for(start)..] {
            if seg.max_timestamp() < timestamp || seg.next_offset() <= start {
                continue;
            }
            let from = seg.time_lookup_position(timestamp);
            let mut pos = from;
            // Walk candidate batches: a batch qualifies when its max timestamp reaches the
            // target; inside an uncompressed batch the exact record is found.
            while let Some((p, h)) = seg.first_batch_from(pos, |h| h.max_timestamp >= timestamp && h.last_offset() >= start)? {
                let batch = seg.read(p, h.total_size())?;
                let corrupt = |e: crate::protocol::record_batch::BatchError| LogError::Corrupt {
                    path: seg.log_path().to_path_buf(),
                    reason: format!("batch at position {p}: {e}"),
                };
                let (header, records) = records_section(&batch).map_err(corrupt)?;
                for rec in RecordIter::from_parts(header, &records) {
                    let rec = rec.map_err(corrupt)?;
                    if rec.offset >= start && rec.timestamp >= timestamp {
                        return Ok(Some((rec.offset, rec.timestamp)));
                    }
                }
                pos = p + h.total_size() as u64;
            }
        }
        Ok(None)
    }

    /// `(offset, timestamp)` of the record with the largest timestamp; `None` when empty.
    pub fn max_timestamp_offset(&self) -> Result<Option<(i64, i64)>, LogError> {
        if self.log_end_offset() <= self.log_start_offset {
            return Ok(None);
        }
        let mut best: Option<&Segment> = None;
        for seg in &self.segments {
            if seg.max_timestamp() >= 0 && best.is_none_or(|b| seg.max_timestamp() > b.max_timestamp()) {
                best = Some(seg);
            }
        }
        let Some(seg) = best else { return Ok(None) };
        let Some((pos, h)) = seg.find_batch(seg.offset_of_max_timestamp())? else {
            return Ok(Some((seg.offset_of_max_timestamp(), seg.max_timestamp())));
        };
        let batch = seg.read(pos, h.total_size())?;
        if let Ok(Some(found)) = find_max_timestamp_record(&batch) {
            return Ok(Some(found));
        }
        Ok(Some((h.last_offset(), h.max_timestamp)))
    }

    /// Moves the log start to `offset` (capped at the log end) and deletes segments wholly
    /// below it. Returns the new log start.
    pub fn delete_records_before(&mut self, offset: i64) -> Result<i64, LogError> {
        let target = offset.min(self.log_end_offset());
        if target > self.log_start_offset {
            self.log_start_offset = target;
            self.epochs.truncate_from_start(target)?;
        }
        while self.segments.len() > 1 && self.segments[1].base_offset() <= self.log_start_offset {
            let seg = self.segments.remove(0);
            tracing::info!(path = %seg.log_path().display(), log_start_offset = self.log_start_offset, "deleting segment below the log start offset");
            seg.delete()?;
        }
        self.aborted.forget_segments_below(self.segments[0].base_offset());
        Ok(self.log_start_offset)
    }

    /// Time/size retention plus time-based roll of the active segment; returns segments deleted.
    pub fn enforce_retention(&mut self, now_ms: i64) -> Result<usize, LogError> {
        self.check_poisoned()?;
        let active = self.active();
        if !active.is_empty() {
            let reference = active.roll_reference_timestamp().unwrap_or(active.opened_ms());
            if now_ms.saturating_sub(reference) > self.config.segment_ms {
                let r = self.roll();
                self.poison_on_err(r)?;
            }
        }
        let mut total = self.size_bytes() as i64;
        let mut deleted = 0;
        while self.segments.len() > 1 {
            let seg = &self.segments[0];
            let size = seg.size() as i64;
            let reason = if self.segments[1].base_offset() <= self.log_start_offset {
                "below log start offset"
            } else if self.config.retention_ms >= 0 && now_ms.saturating_sub(seg.largest_timestamp()) > self.config.retention_ms {
                "retention.ms breached"
            } else if self.config.retention_bytes >= 0 && total - size >= self.config.retention_bytes {
                "retention.bytes breached"
            } else {
                break;
            };
            let seg = self.segments.remove(0);
            tracing::info!(
                path = %seg.log_path().display(),
                reason,
                base_offset = seg.base_offset(),
                size,
                largest_timestamp = seg.largest_timestamp(),
                "deleting log segment"
            );
            total -= size;
            seg.delete()?;
            deleted += 1;
        }
        let first = self.segments[0].base_offset();
        self.aborted.forget_segments_below(first);
        if first > self.log_start_offset {
            self.log_start_offset = first;
            self.epochs.truncate_from_start(first)?;
        }
        Ok(deleted)
    }

    /// fsyncs the active segment and its indexes, after waiting for the flush of the last
    /// rolled segment (the ones before it were flushed before it was rolled).
    pub fn flush(&mut self) -> Result<(), LogError> {
        self.check_poisoned()?;
        self.settle_flush()?;
        let r = self.active_mut().sync().and_then(|()| self.epochs.sync());
        self.poison_on_err(r)?;
        self.unflushed_messages = 0;
        self.last_flush_ms = wall_clock_ms();
        Ok(())
    }

    /// What makes the log durable up to its current end, to run without the lock.
    pub fn sync_point(&self) -> Result<SyncPoint, LogError> {
        self.check_poisoned()?;
        let (file, path) = self.active().data_file();
        Ok(SyncPoint { end_offset: self.log_end_offset(), file, path, rolled: self.pending_flush.clone() })
    }

    /// Poisons the log after a [`SyncPoint`] failed (its fsync ran without the lock).
    pub fn poison_after_sync(&mut self, e: &LogError) {
        self.poison(e);
    }

    /// Puts what the log holds only in memory (index entries) into its files and ends the active
    /// segment at its last batch (direct-I/O padding), without fsync, after waiting for a flush
    /// in flight. Followed by [`sync_filesystem`] of the log dir,
    /// this is [`Self::flush`] for every partition at the price of one filesystem sync (a
    /// clean shutdown).
    ///
    /// [`sync_filesystem`]: super::checkpoint::sync_filesystem
    pub fn write_out(&mut self) -> Result<(), LogError> {
        self.check_poisoned()?;
        self.settle_flush()?;
        let r = self.active_mut().write_pending_indexes().and_then(|()| self.active_mut().seal());
        self.poison_on_err(r)
    }

    /// Removes every batch at or after `offset`'s batch (a straddling batch goes entirely).
    /// Below the log start the log is emptied and restarted at `offset`.
    pub fn truncate_to(&mut self, offset: i64) -> Result<(), LogError> {
        self.check_poisoned()?;
        if offset >= self.log_end_offset() {
            // Nothing to cut from the log, but the epoch cache may still hold an epoch this
            // broker started as leader at the log end and never wrote in (Kafka's truncateTo
            // does the same): left there, the follower would keep naming it as its last
            // fetched epoch and be told to truncate again, forever.
            let leo = self.log_end_offset();
            return self.epochs.truncate_from_end(leo);
        }
        self.settle_flush()?;
        let r = self.truncate_inner(offset);
        self.poison_on_err(r)?;
        let leo = self.log_end_offset();
        self.epochs.truncate_from_end(leo)
    }

    /// Removes every segment and starts the log empty at `offset` (a follower whose log ends
    /// before its leader's log start).
    pub fn truncate_fully_and_start_at(&mut self, offset: i64) -> Result<(), LogError> {
        self.check_poisoned()?;
        self.settle_flush()?;
        tracing::info!(dir = %self.dir.display(), offset, log_end_offset = self.log_end_offset(), "emptying the log to start at the leader's log start");
        let r = (|| {
            for seg in self.segments.drain(..) {
                seg.delete()?;
            }
            self.aborted = AbortedTxns::default();
            self.segments.push(Segment::create(&self.dir, offset, &self.io, self.config.index_interval_bytes)?);
            self.log_start_offset = offset;
            sync_dir(&self.dir)
        })();
        self.poison_on_err(r)?;
        self.epochs.truncate_from_end(i64::MIN)
    }

    fn truncate_inner(&mut self, offset: i64) -> Result<(), LogError> {
        tracing::info!(dir = %self.dir.display(), offset, log_end_offset = self.log_end_offset(), "truncating log");
        if offset < self.log_start_offset {
            for seg in self.segments.drain(..) {
                seg.delete()?;
            }
            self.aborted = AbortedTxns::default();
            self.segments.push(Segment::create(&self.dir, offset, &self.io, self.config.index_interval_bytes)?);
            self.log_start_offset = offset;
            return sync_dir(&self.dir);
        }
        while self.segments.len() > 1 && self.active().base_offset() > offset {
            if let Some(seg) = self.segments.pop() {
                seg.delete()?;
            }
        }
        self.active_mut().truncate_to(offset)?;
        let leo = self.log_end_offset();
        self.aborted.truncate_from(&self.dir, leo)
    }

    pub fn size_bytes(&self) -> u64 {
        self.segments.iter().map(Segment::size).sum()
    }

    /// Base offset of the active (last) segment.
    pub fn active_base_offset(&self) -> i64 {
        self.active().base_offset()
    }

    /// Bytes in the active (last) segment.
    pub fn active_size(&self) -> u64 {
        self.active().size()
    }

    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn latest_epoch(&self) -> Option<i32> {
        self.epochs.latest_epoch()
    }

    /// OffsetForLeaderEpoch: `(epoch, end offset)`, `None` where Kafka answers undefined.
    pub fn end_offset_for_epoch(&self, epoch: i32) -> Option<(i32, i64)> {
        self.epochs.end_offset_for(epoch, self.log_end_offset())
    }

    pub fn update_config(&mut self, config: LogConfig) {
        for seg in &mut self.segments {
            seg.set_index_interval(config.index_interval_bytes);
        }
        self.config = config;
    }

    pub fn config(&self) -> &LogConfig {
        &self.config
    }

    pub fn is_poisoned(&self) -> bool {
        self.poisoned
    }

    /// Records an aborted transaction whose marker is in the log (in the index file of the segment
    /// holding the marker). Markers are indexed in offset order: one at or below the last
    /// indexed marker is already there and is not added again.
    pub fn index_aborted(&mut self, t: AbortedTxn) -> Result<(), LogError> {
        if self.aborted.last_marker().is_some_and(|last| t.last_offset <= last) {
            return Ok(());
        }
        let base = self.segments[self.segment_index_for(t.last_offset)].base_offset();
        let r = self.aborted.append(&self.dir, base, t);
        self.poison_on_err(r)
    }

    /// The aborted transactions overlapping `[fetch_offset, upper_bound)`: what a read_committed
    /// fetch of those offsets returns beside the records.
    pub fn aborted_overlapping(&self, fetch_offset: i64, upper_bound: i64) -> Vec<AbortedTxn> {
        self.aborted.overlapping(fetch_offset, upper_bound)
    }

    /// Base offsets of the segments, oldest first (for tests, tooling and metrics).
    pub fn segment_base_offsets(&self) -> Vec<i64> {
        self.segments.iter().map(Segment::base_offset).collect()
    }

    /// Removes the whole partition directory (DeleteTopics).
    pub fn delete_files(mut self) -> Result<(), LogError> {
        // A flush still running would fail on the vanished directory; its outcome no longer
        // matters, only that it has ended.
        if let Some(ticket) = self.pending_flush.take() {
            let _ = ticket.wait();
        }
        let dir = self.dir.clone();
        drop(self);
        fs::remove_dir_all(&dir).map_err(|e| LogError::io(&dir, "delete partition directory", e))
    }
}

#[cfg(test)]
#[path = "partition_tests.rs"]
mod tests;
