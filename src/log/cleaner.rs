//! Log compaction (`cleanup.policy=compact`): keeps the latest record per key in the rolled
//! segments of a partition, drops tombstones once they are older than `delete.retention.ms`,
//! and never touches the active segment.
//!
//! One pass ([`PartitionLog::clean`]):
//! 1. The cleanable range is the rolled segments, up to (not including) the first whose newest
//!    timestamp is younger than `min.compaction.lag.ms`.
//! 2. Skipped unless the dirty part (segments at or after `first_dirty`, what the previous pass
//!    had not seen) is at least `min.cleanable.dirty.ratio` of the cleanable bytes.
//! 3. A key -> latest offset map is built over the cleanable range (bounded by
//!    [`CleanerConfig::max_map_bytes`]; the range shrinks to what the map covers).
//! 4. Each segment is rewritten: a record survives if it is the latest for its key, and, if it is
//!    a tombstone, while its segment's newest timestamp is within `delete.retention.ms`. A batch
//!    that keeps every record is copied byte for byte; one that keeps some is re-encoded with the
//!    same offsets, producer fields and timestamps; one that keeps none disappears.
//!
//! Batches the cleaner cannot decode without codecs (compressed), control batches and
//! transactional batches are copied unchanged: compaction keeps "at least the latest value per
//! key", so keeping more is safe.
//!
//! # Swap and crash safety
//! The new contents are written to `<base>.log.cleaned` and fsynced; the segment's `.index` and
//! `.timeindex` are removed, `.cleaned` is renamed over `.log` (atomic) and the directory fsynced;
//! the segment is then reopened with a full recovery scan, which rebuilds its indexes. A crash
//! before the rename leaves the old segment (the `.cleaned` leftover is deleted on open); after
//! it, the cleaned segment with its indexes rebuilt on open. Offsets never change, so readers,
//! committed offsets and the high watermark stay valid.
//!
//! # Invariants
//! - The active segment and segments inside `min.compaction.lag.ms` are never rewritten.
//! - For every key, the record with the highest offset in the cleaned range survives (unless it
//!   is an expired tombstone); surviving records keep their offsets and relative order.

use std::collections::HashMap;
use std::io::Write;
use std::ops::ControlFlow;

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{Compression, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions};

use super::error::LogError;
use super::partition::PartitionLog;
use super::segment::{file_stem, Segment};
use crate::protocol::record_batch::BatchHeader;

/// Compaction settings of one topic (Kafka's topic-level names).
#[derive(Debug, Clone, PartialEq)]
pub struct CleanerConfig {
    /// `delete.retention.ms` (86400000): how long tombstones stay readable.
    pub delete_retention_ms: i64,
    /// `min.cleanable.dirty.ratio` (0.5).
    pub min_cleanable_dirty_ratio: f64,
    /// `min.compaction.lag.ms` (0): records younger than this are not compacted.
    pub min_compaction_lag_ms: i64,
    /// Bound on key bytes held in the key map during one pass (Kafka's dedupe buffer).
    pub max_map_bytes: usize,
}

impl Default for CleanerConfig {
    fn default() -> Self {
        CleanerConfig { delete_retention_ms: 86_400_000, min_cleanable_dirty_ratio: 0.5, min_compaction_lag_ms: 0, max_map_bytes: 64 << 20 }
    }
}

/// What one pass did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CleanStats {
    pub segments_rewritten: usize,
    pub bytes_before: u64,
    pub bytes_after: u64,
    pub records_removed: u64,
    /// Offset up to which the log is now clean (the next pass's `first_dirty`).
    pub clean_end: i64,
}

/// Attribute bits: compression codec (0-2) and control (5), transactional (4).
fn untouchable(h: &BatchHeader) -> bool {
    h.attributes & 0x07 != 0 || h.attributes & 0x30 != 0
}

impl PartitionLog {
    /// One compaction pass; `first_dirty` is where the previous pass stopped (0 if unknown).
    /// Returns None when nothing was eligible.
    pub fn clean(&mut self, config: &CleanerConfig, first_dirty: i64, now_ms: i64) -> Result<Option<CleanStats>, LogError> {
        // The cleaner rewrites rolled segments: the last one's flush must not run beside it.
        self.settle_flush()?;
        let rolled = self.segments.len().saturating_sub(1);
        let lag_limit = now_ms.saturating_sub(config.min_compaction_lag_ms);
        let mut end = 0;
        while end < rolled && self.segments[end].largest_timestamp() <= lag_limit {
            end += 1;
        }
        if end == 0 {
            return Ok(None);
        }
        let total: u64 = self.segments[..end].iter().map(Segment::size).sum();
        let dirty: u64 = self.segments[..end].iter().filter(|s| s.next_offset() > first_dirty).map(Segment::size).sum();
        if total == 0 || (dirty as f64) < config.min_cleanable_dirty_ratio * total as f64 {
            return Ok(None);
        }

        // Key -> latest offset over the cleanable range.
        let mut latest: HashMap<Bytes, i64> = HashMap::new();
        let mut map_bytes = 0usize;
        let mut covered = 0;
        'segments: for seg in &self.segments[..end] {
            let mut batches = Vec::new();
            seg.scan(0, false, |_, h, bytes| {
                if !untouchable(h) {
                    batches.push(Bytes::copy_from_slice(bytes));
                }
                ControlFlow::Continue(())
            })?;
            let mut keys = Vec::new();
            for batch in batches {
                for r in decode(&batch, seg)? {
                    if let Some(k) = r.key {
                        keys.push((k, r.offset));
                    }
                }
            }
            let new_bytes: usize = keys.iter().filter(|(k, _)| !latest.contains_key(k)).map(|(k, _)| k.len() + 16).sum();
            if covered > 0 && map_bytes + new_bytes > config.max_map_bytes {
                break 'segments;
            }
            map_bytes += new_bytes;
            for (k, o) in keys {
                latest.insert(k, o);
            }
            covered += 1;
        }

        let mut stats = CleanStats { clean_end: self.segments[covered - 1].next_offset(), ..CleanStats::default() };
        let tombstone_limit = now_ms.saturating_sub(config.delete_retention_ms);
        for i in 0..covered {
            let seg = &self.segments[i];
            let keep_tombstones = seg.largest_timestamp() > tombstone_limit;
            let (cleaned, removed) = rewrite(seg, &latest, keep_tombstones)?;
            if removed == 0 {
                continue;
            }
            stats.segments_rewritten += 1;
            stats.bytes_before += seg.size();
            stats.bytes_after += cleaned.len() as u64;
            stats.records_removed += removed;
            self.swap_in(i, &cleaned)?;
        }
        Ok(Some(stats))
    }

    /// Replaces segment `i`'s contents with `cleaned` (see the module doc for the order).
    fn swap_in(&mut self, i: usize, cleaned: &[u8]) -> Result<(), LogError> {
        let base = self.segments[i].base_offset();
        let stem = file_stem(base);
        let log_path = self.dir.join(format!("{stem}.log"));
        let tmp = self.dir.join(format!("{stem}.log.cleaned"));
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(cleaned)?;
            f.sync_all()
        };
        if let Err(e) = write() {
            let _ = std::fs::remove_file(&tmp);
            return Err(LogError::io(&tmp, "write cleaned segment", e));
        }
        for ext in ["index", "timeindex"] {
            let p = self.dir.join(format!("{stem}.{ext}"));
            match std::fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(LogError::io(&p, "remove index before swap", e)),
            }
        }
        std::fs::rename(&tmp, &log_path).map_err(|e| LogError::io(&log_path, "swap in cleaned segment", e))?;
        std::fs::File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| LogError::io(&self.dir, "fsync partition directory", e))?;
        self.segments[i] = Segment::open(&self.dir, base, &self.io, self.config.index_interval_bytes, true)?;
        Ok(())
    }
}

fn decode(batch: &Bytes, seg: &Segment) -> Result<Vec<kafka_protocol::records::Record>, LogError> {
    let mut buf = batch.clone();
    RecordBatchDecoder::decode(&mut buf)
        .map(|s| s.records)
        .map_err(|e| LogError::Corrupt { path: seg.log_path().to_path_buf(), reason: format!("record batch does not decode: {e}") })
}

/// The segment's bytes after compaction, and how many records were dropped.
fn rewrite(seg: &Segment, latest: &HashMap<Bytes, i64>, keep_tombstones: bool) -> Result<(Vec<u8>, u64), LogError> {
    let mut batches = Vec::new();
    seg.scan(0, false, |_, h, bytes| {
        batches.push((*h, Bytes::copy_from_slice(bytes)));
        ControlFlow::Continue(())
    })?;
    let mut out = Vec::with_capacity(seg.size() as usize);
    let mut removed = 0u64;
    for (h, bytes) in batches {
        if untouchable(&h) {
            out.extend_from_slice(&bytes);
            continue;
        }
        let records = decode(&bytes, seg)?;
        let count = records.len();
        let mut kept: Vec<_> = records
            .into_iter()
            .filter(|r| match &r.key {
                None => true,
                Some(k) => latest.get(k) == Some(&r.offset) && (r.value.is_some() || keep_tombstones),
            })
            .collect();
        removed += (count - kept.len()) as u64;
        if kept.len() == count {
            out.extend_from_slice(&bytes);
            continue;
        }
        let Some(first) = kept.first().map(|r| r.offset) else { continue };
        if h.producer_id < 0 {
            // Keep "no sequence" (-1) as the re-encoded batch's base sequence.
            for r in &mut kept {
                r.sequence = (r.offset - first) as i32 - 1;
            }
        }
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode(&mut buf, &kept, &RecordEncodeOptions { version: 2, compression: Compression::None })
            .map_err(|e| LogError::Corrupt { path: seg.log_path().to_path_buf(), reason: format!("re-encoding a cleaned batch: {e}") })?;
        out.extend_from_slice(&buf);
    }
    Ok((out, removed))
}

#[cfg(test)]
#[path = "cleaner_tests.rs"]
mod tests;
