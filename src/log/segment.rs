//! One segment: a `.log` file of record batches plus its `.index` and `.timeindex`.
//!
//! A segment knows its base offset, byte size, next offset, largest timestamp and where its
//! last index entry was; the partition log decides when to roll, delete or truncate it.
//!
//! # Invariants
//! - `size` is the `.log` length and always ends on a batch boundary.
//! - Batches have strictly increasing offsets, all in `[base_offset, base_offset + u32::MAX]`.
//! - The in-memory index entries equal the index files' contents.
//!
//! # Preallocation
//! Once a segment passes 1 MiB, appends reserve its blocks 8 MiB ahead with
//! `fallocate(FALLOC_FL_KEEP_SIZE)`: the file's size (what readers and recovery see) still
//! ends at the last batch. Without it, ext4 allocates blocks when writeback first writes the
//! pages, holding the inode's block-map lock, and an append to the same file waits behind that
//! writeback's disk reads; with the blocks reserved, writeback only marks them written. A roll
//! gives the unused blocks back (see `flush.rs`), and so does any truncation. Where the
//! filesystem cannot preallocate, the segment stops trying and appends work as before.
//!
//! # Recovery
//! [`Segment::recover`] scans every batch (length, magic, CRC, offset order) and truncates the
//! file at the first one that fails, then rewrites both indexes.
//!
//! Before it cuts, it reads the first bytes it would cut again with `O_DIRECT`, past the page
//! cache ([`Segment::disk_view`]). Where the disk holds other bytes than the page cache gave the
//! scan (clean cached pages that are not what the disk has, which the kernel can leave behind
//! when a file written with `O_DIRECT` is also read through the cache), it drops the file's
//! cached pages from there on and scans once more, now from the disk; what is still bad after
//! that is cut. The warning for a cut says what the disk held there (`disk=`), so that a cut
//! nobody expected tells whether the bad bytes came from the page cache or from the disk.
//!
//! What it cuts off is first copied to `<segment>.log.cut-<position>-<unix ms>` beside it
//! ([`keep_bytes`]; in the kernel, at the disk's speed, a whole segment at most), so that a scan
//! that was wrong about the bytes (or an operator who wants them) still has them; if that copy
//! fails, the warning says so and the cut goes ahead. Segments dropped whole because an older
//! one was torn are renamed to `<segment>.log.cut-all-<unix ms>` ([`keep_file`]). Nothing reads
//! or deletes these files (deleting the partition does); the open ignores them.
//!
//! Opening without recovery trusts the `.log` but rebuilds a missing or malformed index and
//! re-derives the segment's end from the last index entry onwards. Both first cut the zero
//! padding a crash can leave behind direct-I/O appends (zeros from the last batch to a block
//! boundary, `cut_zero_padding`), as no sign of damage.
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;

use super::error::LogError;
use super::flush::FlushJob;
use super::index::{IndexLoad, OffsetIndex, TimeIndex};
use super::io::direct_read::{self, READ_CHUNK};
use super::io::{FileSlice, IoBackend, SegmentFile};
use crate::protocol::record_batch::{crc_is_valid, BatchHeader, BatchIter, BATCH_HEADER_LEN, LOG_OVERHEAD, MIN_BATCH_LENGTH};

/// Bytes read per I/O while scanning a segment.
const SCAN_CHUNK: usize = 1 << 20;

/// Index entries waiting in memory are written once the batches they index span this much of
/// the log, even short of a full group (`index::PENDING_WRITE_BYTES`): a start after a kill
/// re-reads the log behind the last entry on file, and with batches of hundreds of KiB a full
/// group of 128 entries spans tens of MiB, which directly appended data has to come from the
/// disk for. With 64 partitions of 2 GiB topics, opening after kill -9 read 2.8 GiB from the
/// disk in 5.6 s without this bound.
pub(crate) const INDEX_WRITE_SPAN: u64 = 4 << 20;

/// A segment that has grown to this size reserves its next blocks ahead of its appends;
/// smaller ones (idle partitions) never preallocate.
const PREALLOCATE_FROM: u64 = 1 << 20;
/// How far ahead of the end of the log a growing segment reserves blocks.
const PREALLOCATE_AHEAD: u64 = 8 << 20;

/// `%020d` file stem for a base offset.
pub fn file_stem(base_offset: i64) -> String {
    format!("{base_offset:020}")
}

/// The inverse of [`file_stem`] for a file named `<stem><ext>` (`00000000000000001234.log`,
/// `.index`, `.snapshot`, ...): exactly 20 digits, else `None`.
pub fn offset_from_file_name(name: &str, ext: &str) -> Option<i64> {
    let stem = name.strip_suffix(ext)?;
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
}

/// The bytes where a recovery scan stopped, as the disk holds them against what the scan read
/// through the page cache ([`Segment::disk_view`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DiskView {
    /// The disk holds the bytes the scan read.
    Same,
    /// The disk holds other bytes, the first at this distance from where the scan stopped.
    Differs(usize),
    /// Not compared, and why (a filesystem without `O_DIRECT`, a failed read).
    Unchecked(String),
}

impl DiskView {
    fn of(cached: &[u8], disk: &[u8]) -> DiskView {
        match cached.iter().zip(disk).position(|(c, d)| c != d) {
            Some(at) => DiskView::Differs(at),
            None if cached.len() == disk.len() => DiskView::Same,
            None => DiskView::Differs(cached.len().min(disk.len())),
        }
    }
}

impl std::fmt::Display for DiskView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DiskView::Same => write!(f, "the same bytes as the page cache"),
            DiskView::Differs(at) => write!(f, "other bytes than the page cache, from {at} bytes on"),
            DiskView::Unchecked(why) => write!(f, "not compared ({why})"),
        }
    }
}

/// Where a scan stopped.
#[derive(Debug)]
pub struct ScanEnd {
    /// Position just after the last accepted batch.
    pub valid_end: u64,
    /// Why the scan stopped before the end of the file (None = reached the end, or the
    /// callback asked to stop).
    pub problem: Option<String>,
}

#[derive(Debug)]
pub struct Segment {
    base_offset: i64,
    log_path: PathBuf,
    file: Arc<dyn SegmentFile>,
    size: u64,
    next_offset: i64,
    offset_index: OffsetIndex,
    time_index: TimeIndex,
    /// Largest batch max timestamp in the segment (-1 when none), for retention and lookups.
    max_timestamp: i64,
    offset_of_max_timestamp: i64,
    /// maxTimestamp of the first batch: Kafka measures `segment.ms` from it.
    first_batch_timestamp: Option<i64>,
    /// Position of the batch that got the latest index entry (0 when none).
    last_index_position: u64,
    /// `last_index_position` when the index files were last written (see [`INDEX_WRITE_SPAN`]).
    index_written_position: u64,
    index_interval_bytes: u32,
    /// Wall clock when this process opened/created the segment: the `segment.ms` fallback
    /// when batches carry no timestamp.
    opened_ms: i64,
    /// Blocks are reserved up to here (at least `size`); see the module doc.
    allocated_to: u64,
    /// Cleared after a failed `fallocate`: this segment stops preallocating.
    preallocating: bool,
}

/// Copies the bytes of the `.log` at `log` from `from` to its end into a new file beside it,
/// `<log>.cut-<from>-<unix ms>`, and fsyncs it: what recovery cuts off is kept for whoever wants
/// to look at it (nothing reads or deletes these files; deleting the partition does). Returns
/// where they went, for the log line ([`where_kept`]). On Linux `io::copy` between files is
/// `copy_file_range`, so the bytes do not pass through the broker's memory.
pub fn keep_bytes(log: &Path, from: u64) -> String {
    let to = kept_path(log, &from.to_string());
    where_kept(copy_tail(log, from, &to), &to)
}

fn copy_tail(log: &Path, from: u64, to: &Path) -> std::io::Result<()> {
    use std::io::{Seek, SeekFrom};
    let mut src = std::fs::File::open(log)?;
    src.seek(SeekFrom::Start(from))?;
    let mut dst = std::fs::OpenOptions::new().write(true).create_new(true).open(to)?;
    std::io::copy(&mut src, &mut dst)?;
    dst.sync_all()
}

/// Renames a whole `.log` that recovery drops to `<log>.cut-all-<unix ms>` instead of deleting
/// it ([`keep_bytes`] for a part of one); the caller fsyncs the directory. Returns where it went,
/// as [`keep_bytes`] does.
pub fn keep_file(log: &Path) -> String {
    let to = kept_path(log, "all");
    where_kept(std::fs::rename(log, &to), &to)
}

fn kept_path(log: &Path, label: &str) -> PathBuf {
    let mut name = log.as_os_str().to_owned();
    name.push(format!(".cut-{label}-{}", now_ms()));
    PathBuf::from(name)
}

/// For the log line: `to` once the bytes are there, or `nowhere` and why.
fn where_kept(done: std::io::Result<()>, to: &Path) -> String {
    match done {
        Ok(()) => to.display().to_string(),
        Err(e) => format!("nowhere ({e})"),
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl Segment {
    fn paths(dir: &Path, base: i64) -> (PathBuf, PathBuf, PathBuf) {
        let stem = file_stem(base);
        (
            dir.join(format!("{stem}.log")),
            dir.join(format!("{stem}.index")),
            dir.join(format!("{stem}.timeindex")),
        )
    }

    /// The `.log` path of the segment at `base_offset` in `dir`.
    pub fn log_file(dir: &Path, base_offset: i64) -> PathBuf {
        Self::paths(dir, base_offset).0
    }

    /// Removes the files of a segment that is not open (recovery); missing files are fine.
    pub fn remove_files(dir: &Path, base_offset: i64) -> Result<(), LogError> {
        let (log, index, time) = Self::paths(dir, base_offset);
        for p in [log.with_extension("txnindex"), index, time, log] {
            match std::fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(LogError::io(&p, "remove segment file", e)),
            }
        }
        Ok(())
    }

    /// Creates a new, empty segment at `base_offset`. Refuses to reuse a non-empty `.log`.
    pub fn create(
        dir: &Path,
        base_offset: i64,
        io: &Arc<dyn IoBackend>,
        index_interval_bytes: u32,
    ) -> Result<Segment, LogError> {
        let (log_path, index_path, time_path) = Self::paths(dir, base_offset);
        let file: Arc<dyn SegmentFile> =
            io.open(&log_path).map_err(|e| LogError::io(&log_path, "create segment", e))?.into();
        let size = file.len().map_err(|e| LogError::io(&log_path, "stat", e))?;
        if size != 0 {
            return Err(LogError::Corrupt {
                path: log_path,
                reason: format!("new segment file already holds {size} bytes"),
            });
        }
        Ok(Segment {
            base_offset,
            file,
            size: 0,
            next_offset: base_offset,
            offset_index: OffsetIndex::create(&index_path, Vec::new())?,
            time_index: TimeIndex::create(&time_path, Vec::new())?,
            log_path,
            max_timestamp: -1,
            offset_of_max_timestamp: -1,
            first_batch_timestamp: None,
            last_index_position: 0,
            index_written_position: 0,
            index_interval_bytes,
            opened_ms: now_ms(),
            allocated_to: 0,
            preallocating: true,
        })
    }

    /// Opens an existing segment. With `recover`, every batch is checked and a bad tail is
    /// truncated; otherwise the log is trusted and only indexes are validated (and rebuilt by a
    /// full recovery scan if missing, malformed or inconsistent with the log).
    pub fn open(
        dir: &Path,
        base_offset: i64,
        io: &Arc<dyn IoBackend>,
        index_interval_bytes: u32,
        recover: bool,
    ) -> Result<Segment, LogError> {
        let (log_path, index_path, time_path) = Self::paths(dir, base_offset);
        let file: Arc<dyn SegmentFile> =
            io.open(&log_path).map_err(|e| LogError::io(&log_path, "open segment", e))?.into();
        let size = file.len().map_err(|e| LogError::io(&log_path, "stat", e))?;
        let loaded = if recover {
            None
        } else {
            match (OffsetIndex::load(&index_path, size), TimeIndex::load(&time_path)) {
                (IndexLoad::Loaded(o), IndexLoad::Loaded(t)) => Some((o, t)),
                (o, t) => {
                    if !matches!(o, IndexLoad::Loaded(_)) || !matches!(t, IndexLoad::Loaded(_)) {
                        tracing::info!(
                            path = %log_path.display(),
                            offset_index = ?index_state(&o),
                            time_index = ?index_state(&t),
                            "rebuilding segment indexes"
                        );
                    }
                    None
                }
            }
        };
        let (oi, ti) = match &loaded {
            Some((o, t)) => (o.clone(), t.clone()),
            None => (Vec::new(), Vec::new()),
        };
        let mut seg = Segment {
            base_offset,
            file,
            size,
            next_offset: base_offset,
            // Opened without truncation only when the loaded content is kept as it is.
            offset_index: if loaded.is_some() {
                OffsetIndex::adopt(&index_path, oi)?
            } else {
                OffsetIndex::create(&index_path, Vec::new())?
            },
            time_index: if loaded.is_some() {
                TimeIndex::adopt(&time_path, ti)?
            } else {
                TimeIndex::create(&time_path, Vec::new())?
            },
            log_path,
            max_timestamp: -1,
            offset_of_max_timestamp: -1,
            first_batch_timestamp: None,
            last_index_position: 0,
            index_written_position: 0,
            index_interval_bytes,
            opened_ms: now_ms(),
            allocated_to: size,
            preallocating: true,
        };
        if loaded.is_none() {
            seg.recover()?;
            return Ok(seg);
        }
        // Trusted path: derive next offset and max timestamp from the last index entry on.
        let (start_pos, start_rel) = seg.offset_index.last().map_or((0, None), |(r, p)| (u64::from(p), Some(r)));
        if let Some((ts, rel)) = seg.time_index.last() {
            seg.max_timestamp = ts;
            seg.offset_of_max_timestamp = base_offset + i64::from(rel);
        }
        seg.last_index_position = start_pos;
        seg.index_written_position = start_pos;
        if let Some(r) = start_rel {
            seg.next_offset = base_offset + i64::from(r); // refined by the scan below
        }
        let mut tail = Vec::new();
        let mut end = seg.scan(start_pos, false, |pos, h, _| {
            tail.push((pos, *h));
            ControlFlow::Continue(())
        })?;
        // Direct appends' padding behind the last batch is no sign of damage.
        if end.valid_end < seg.size && seg.cut_zero_padding(end.valid_end)? {
            end.problem = None;
        }
        let consistent = end.problem.is_none()
            && end.valid_end == seg.size
            && start_rel.is_none_or(|r| tail.first().is_some_and(|(_, h)| h.last_offset() == base_offset + i64::from(r)));
        if !consistent {
            tracing::warn!(
                path = %seg.log_path.display(),
                problem = ?end.problem,
                "segment does not match its index; recovering it"
            );
            seg.recover()?;
            return Ok(seg);
        }
        // Batches after the last entry on file get their entries again: the ones that were
        // still waiting in memory when the broker stopped (see index.rs, "Crashes").
        for (pos, h) in &tail {
            seg.track_batch(*pos, h)?;
        }
        seg.load_first_batch_timestamp()?;
        Ok(seg)
    }

    fn load_first_batch_timestamp(&mut self) -> Result<(), LogError> {
        self.first_batch_timestamp = None;
        if self.size >= crate::protocol::record_batch::BATCH_HEADER_LEN as u64 {
            let head = self.read(0, crate::protocol::record_batch::BATCH_HEADER_LEN)?;
            if let Ok(h) = BatchHeader::parse(&head) {
                self.first_batch_timestamp = Some(h.max_timestamp);
            }
        }
        Ok(())
    }

    /// Scans every batch, truncates at the first bad one and rewrites both indexes.
    /// Returns the number of bytes dropped.
    pub fn recover(&mut self) -> Result<u64, LogError> {
        self.recover_looking_again(true)
    }

    /// [`Segment::recover`]; with `look_again`, bytes the scan rejects that the disk holds
    /// otherwise are read again from the disk before anything is cut (see the module doc).
    fn recover_looking_again(&mut self, look_again: bool) -> Result<u64, LogError> {
        self.next_offset = self.base_offset;
        self.max_timestamp = -1;
        self.offset_of_max_timestamp = -1;
        self.last_index_position = 0;
        let mut offsets = Vec::new();
        let mut times = Vec::new();
        let interval = u64::from(self.index_interval_bytes);
        let base = self.base_offset;
        let mut next = base;
        let mut max_ts = (-1i64, -1i64);
        let mut last_index_pos = 0u64;
        let end = self.scan(0, true, |pos, h, _| {
            next = h.next_offset();
            if h.max_timestamp > max_ts.0 {
                max_ts = (h.max_timestamp, h.last_offset());
            }
            if pos - last_index_pos > interval {
                let rel = (h.last_offset() - base) as u32;
                offsets.push((rel, pos as u32));
                if times.last().is_none_or(|&(t, _)| max_ts.0 > t) && max_ts.0 >= 0 {
                    times.push((max_ts.0, (max_ts.1 - base) as u32));
                }
                last_index_pos = pos;
            }
            ControlFlow::Continue(())
        })?;
        let dropped = self.size - end.valid_end;
        if dropped > 0 && !self.cut_zero_padding(end.valid_end)? {
            let disk = self.disk_view(end.valid_end);
            if look_again && matches!(disk, DiskView::Differs(_)) {
                tracing::error!(
                    path = %self.log_path.display(),
                    position = end.valid_end,
                    reason = end.problem.as_deref().unwrap_or("unknown"),
                    disk = %disk,
                    "the page cache holds other bytes than the disk where recovery would cut the log; \
                     dropping the cached pages and scanning again"
                );
                self.file.drop_cached(end.valid_end);
                return self.recover_looking_again(false);
            }
            let kept = keep_bytes(&self.log_path, end.valid_end);
            tracing::warn!(
                path = %self.log_path.display(),
                position = end.valid_end,
                bytes_dropped = dropped,
                reason = end.problem.as_deref().unwrap_or("unknown"),
                disk = %disk,
                kept_in = %kept,
                "truncating corrupt or torn tail of log segment"
            );
            self.cut_at(end.valid_end)?;
        }
        self.next_offset = next;
        self.max_timestamp = max_ts.0;
        self.offset_of_max_timestamp = max_ts.1;
        self.last_index_position = last_index_pos;
        self.index_written_position = last_index_pos;
        self.offset_index = OffsetIndex::create(self.offset_index.path(), offsets)?;
        self.time_index = TimeIndex::create(self.time_index.path(), times)?;
        self.load_first_batch_timestamp()?;
        Ok(dropped)
    }

    /// The first bytes from `pos` (one direct read's worth, see `direct_read::READ_CHUNK`) as the
    /// disk holds them, read with `O_DIRECT` past the page cache, compared with what a read
    /// through the page cache returns. A dirty page is written out before an `O_DIRECT` read of
    /// it, so the two differ only where the page cache holds clean pages that are not what the
    /// disk has.
    pub(crate) fn disk_view(&self, pos: u64) -> DiskView {
        use std::os::unix::fs::OpenOptionsExt;
        let block = super::io::direct::BLOCK as u64;
        let len = self.size.saturating_sub(pos).min(READ_CHUNK as u64 - pos % block) as usize;
        let cached = match self.read(pos, len) {
            Ok(b) => b,
            Err(e) => return DiskView::Unchecked(e.to_string()),
        };
        let direct = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(&self.log_path);
        match direct.and_then(|f| direct_read::read(&f, pos, pos + len as u64)) {
            Ok(disk) => DiskView::of(&cached, disk.bytes()),
            Err(e) => DiskView::Unchecked(format!("no direct read: {e}")),
        }
    }

    /// Cuts the file at `valid_end` (where the batches stop) if all that follows is the zero
    /// padding direct-I/O appends (`log.io.direct`) leave until a roll, flush or clean shutdown
    /// cuts it: zeros up to the next block boundary, and nothing else. After a crash it follows
    /// the last batch; cutting it drops no data, so it is logged at info, not as a torn tail.
    /// Returns whether it did.
    fn cut_zero_padding(&mut self, valid_end: u64) -> Result<bool, LogError> {
        let block = super::io::direct::BLOCK as u64;
        let len = self.size.saturating_sub(valid_end);
        let padding = len > 0
            && len < block
            && self.size % block == 0
            && self.read(valid_end, len as usize).is_ok_and(|b| b.iter().all(|&x| x == 0));
        if padding {
            tracing::info!(
                path = %self.log_path.display(),
                position = valid_end,
                bytes_dropped = len,
                "cutting the zero padding (log.io.direct) after the last batch of log segment"
            );
            self.cut_at(valid_end)?;
        }
        Ok(padding)
    }

    /// Truncates the file to `end`.
    fn cut_at(&mut self, end: u64) -> Result<(), LogError> {
        self.file.set_len(end).map_err(|e| LogError::io(&self.log_path, "truncate", e))?;
        self.size = end;
        self.allocated_to = end;
        Ok(())
    }

    /// Walks batches from `from` (a batch boundary). The callback sees each batch's position,
    /// header and bytes. Stops at the end, at the callback's `Break`, or at the first batch that
    /// is torn, malformed, out of offset order or (with `verify_crc`) fails its CRC.
    pub fn scan(
        &self,
        from: u64,
        verify_crc: bool,
        mut f: impl FnMut(u64, &BatchHeader, &[u8]) -> ControlFlow<()>,
    ) -> Result<ScanEnd, LogError> {
        let mut pos = from;
        let mut expected_min = self.base_offset;
        let max_rel = i64::from(u32::MAX);
        while pos < self.size {
            let left = self.size - pos;
            let mut want = (SCAN_CHUNK as u64).min(left) as usize;
            // A batch larger than the chunk: read exactly that batch (bounded by the file).
            if left >= LOG_OVERHEAD as u64 {
                let head = self.read(pos, LOG_OVERHEAD)?;
                let len = i32::from_be_bytes([head[8], head[9], head[10], head[11]]);
                if len < MIN_BATCH_LENGTH {
                    return Ok(ScanEnd { valid_end: pos, problem: Some(format!("invalid batch length {len}")) });
                }
                let total = LOG_OVERHEAD as u64 + len as u64;
                if total > left {
                    return Ok(ScanEnd {
                        valid_end: pos,
                        problem: Some(format!("torn batch: needs {total} bytes, {left} remain")),
                    });
                }
                want = want.max(total as usize);
            }
            let buf = self.read(pos, want)?;
            let mut it = BatchIter::new(&buf);
            loop {
                let at = pos + it.position() as u64;
                match it.next() {
                    None => break,
                    Some(Err(e)) => return Ok(ScanEnd { valid_end: at, problem: Some(e.to_string()) }),
                    Some(Ok((h, bytes))) => {
                        let problem = if verify_crc && !crc_is_valid(bytes) {
                            Some("CRC mismatch".to_string())
                        } else if h.base_offset < expected_min || h.last_offset_delta < 0 {
                            Some(format!("offset {} is not above the previous batch (expected >= {expected_min})", h.base_offset))
                        } else if h.last_offset() - self.base_offset > max_rel {
                            Some(format!("offset {} does not fit this segment", h.last_offset()))
                        } else {
                            None
                        };
                        if problem.is_some() {
                            return Ok(ScanEnd { valid_end: at, problem });
                        }
                        expected_min = h.next_offset();
                        if f(at, &h, bytes).is_break() {
                            return Ok(ScanEnd { valid_end: at + bytes.len() as u64, problem: None });
                        }
                    }
                }
            }
            let consumed = it.position() as u64;
            if consumed == 0 {
                // Fewer than 12 bytes left, or a batch the chunk could not hold.
                return Ok(ScanEnd {
                    valid_end: pos,
                    problem: Some(format!("torn batch: {} trailing bytes", buf.len())),
                });
            }
            pos += consumed;
        }
        Ok(ScanEnd { valid_end: pos, problem: None })
    }

    pub fn read(&self, pos: u64, len: usize) -> Result<Bytes, LogError> {
        self.file.read_at(pos, len).map_err(|e| LogError::io(&self.log_path, "read", e))
    }

    /// Appends already-validated batches at the end of the file and indexes them.
    /// `parts` concatenated are the batches; `batches` holds each batch's header and its byte
    /// offset within that concatenation.
    pub fn append(&mut self, parts: &[Bytes], batches: &[(usize, BatchHeader)]) -> Result<(), LogError> {
        let start = self.size;
        let end = start + parts.iter().map(|p| p.len() as u64).sum::<u64>();
        if end > self.allocated_to && end >= PREALLOCATE_FROM && self.preallocating {
            self.preallocate(end);
        }
        self.file
            .write_at(start, parts)
            .map_err(|e| LogError::io(&self.log_path, "append", e))?;
        self.size = end;
        if self.first_batch_timestamp.is_none() {
            self.first_batch_timestamp = batches.first().map(|(_, h)| h.max_timestamp);
        }
        for (rel_pos, h) in batches {
            self.track_batch(start + *rel_pos as u64, h)?;
        }
        Ok(())
    }

    /// Accounts for the batch at `pos` (the last one so far): next offset, max timestamp, and
    /// index entries once `index.interval.bytes` passed since the last entry.
    fn track_batch(&mut self, pos: u64, h: &BatchHeader) -> Result<(), LogError> {
        self.next_offset = h.next_offset();
        if h.max_timestamp > self.max_timestamp {
            self.max_timestamp = h.max_timestamp;
            self.offset_of_max_timestamp = h.last_offset();
        }
        if pos - self.last_index_position > u64::from(self.index_interval_bytes) {
            let rel = (h.last_offset() - self.base_offset) as u32;
            self.offset_index.append(rel, pos as u32);
            if self.max_timestamp >= 0 {
                let trel = (self.offset_of_max_timestamp - self.base_offset) as u32;
                self.time_index.maybe_append(self.max_timestamp, trel);
            }
            self.last_index_position = pos;
            if self.offset_index.pending_full()
                || self.time_index.pending_full()
                || pos - self.index_written_position >= INDEX_WRITE_SPAN
            {
                self.write_pending_indexes()?;
            }
        }
        Ok(())
    }

    /// Writes the index entries waiting in memory, without fsync. Both indexes at once, so the
    /// files end at the same batch (what `open` relies on).
    pub fn write_pending_indexes(&mut self) -> Result<(), LogError> {
        self.offset_index.write_pending()?;
        self.time_index.write_pending()?;
        self.index_written_position = self.last_index_position;
        Ok(())
    }

    /// Reserves blocks from the end of the last reservation to `PREALLOCATE_AHEAD` past `end`.
    /// A failure (no support, disk full) only ends preallocation for this segment: the append
    /// that follows reports any real problem.
    fn preallocate(&mut self, end: u64) {
        let from = self.allocated_to.max(self.size);
        let to = end + PREALLOCATE_AHEAD;
        match super::io::preallocate(self.file.std_file(), from, to - from) {
            Ok(()) => self.allocated_to = to,
            Err(e) => {
                self.preallocating = false;
                tracing::debug!(path = %self.log_path.display(), error = %e, "not preallocating segment blocks");
            }
        }
    }

    /// Position and header of the first batch whose last offset is >= `offset`.
    pub fn find_batch(&self, offset: i64) -> Result<Option<(u64, BatchHeader)>, LogError> {
        if offset >= self.next_offset {
            return Ok(None);
        }
        let rel = (offset - self.base_offset).clamp(0, i64::from(u32::MAX)) as u32;
        let start = self.offset_index.lookup(rel).map_or(0, |(_, p)| u64::from(p));
        self.first_batch_from(start, |h| h.last_offset() >= offset)
    }

    /// First batch at or after position `start` (a batch boundary) satisfying `pred`. Reads
    /// only batch headers, one 61-byte read per batch skipped; an index lookup before the call
    /// keeps that to the few batches between two index entries.
    pub fn first_batch_from(
        &self,
        start: u64,
        mut pred: impl FnMut(&BatchHeader) -> bool,
    ) -> Result<Option<(u64, BatchHeader)>, LogError> {
        let mut pos = start;
        while pos < self.size {
            let h = self.header_at(pos)?;
            if pred(&h) {
                return Ok(Some((pos, h)));
            }
            pos += h.total_size() as u64;
        }
        Ok(None)
    }

    /// Header of the batch starting at `pos`, read on the calling thread. The segment was
    /// recovered or trusted on open, so a header that does not parse or a batch that runs past
    /// the end is corruption, not a torn write.
    pub fn header_at(&self, pos: u64) -> Result<BatchHeader, LogError> {
        let corrupt = |reason: String| LogError::Corrupt { path: self.log_path.clone(), reason };
        if pos + BATCH_HEADER_LEN as u64 > self.size {
            return Err(corrupt(format!("batch header at position {pos} runs past the end ({})", self.size)));
        }
        let mut head = [0u8; BATCH_HEADER_LEN];
        std::os::unix::fs::FileExt::read_exact_at(self.file.std_file(), &mut head, pos)
            .map_err(|e| LogError::io(&self.log_path, "read batch header", e))?;
        let h = BatchHeader::parse(&head).map_err(|e| corrupt(format!("batch at position {pos}: {e}")))?;
        if pos + h.total_size() as u64 > self.size {
            return Err(corrupt(format!(
                "batch at position {pos} of {} bytes runs past the end ({})",
                h.total_size(),
                self.size
            )));
        }
        Ok(h)
    }

    /// The end of the whole batches that start at `start` (a batch boundary) and end at or
    /// before `limit`, and the offset that follows them. May be `start` itself when the first
    /// batch does not fit. Starts from the last index entry at or below `limit`, so it reads a
    /// few headers, not the range.
    pub fn whole_batches_end(&self, start: u64, limit: u64) -> Result<(u64, i64), LogError> {
        if limit >= self.size {
            return Ok((self.size, self.next_offset));
        }
        let entries = self.offset_index.entries();
        let i = entries.partition_point(|&(_, p)| u64::from(p) <= limit);
        let mut pos = match i.checked_sub(1).map(|i| u64::from(entries[i].1)) {
            Some(p) if p > start => p,
            _ => start,
        };
        loop {
            if pos >= self.size {
                return Ok((self.size, self.next_offset));
            }
            let h = self.header_at(pos)?;
            let end = pos + h.total_size() as u64;
            if end > limit {
                return Ok((pos, h.base_offset));
            }
            pos = end;
        }
    }

    /// `len` bytes from `pos`, as a slice that keeps the file open (for sendfile).
    pub fn slice(&self, pos: u64, len: usize) -> FileSlice {
        debug_assert!(pos + len as u64 <= self.size);
        FileSlice::new(self.file.clone(), pos, len)
    }

    /// Position from which a search for the first record with timestamp >= `ts` may start.
    pub fn time_lookup_position(&self, ts: i64) -> u64 {
        match self.time_index.lookup_before(ts) {
            None => 0,
            Some((_, rel)) => self.offset_index.lookup(rel).map_or(0, |(_, p)| u64::from(p)),
        }
    }

    /// Truncates to the first batch whose last offset is >= `offset` (that batch goes too).
    pub fn truncate_to(&mut self, offset: i64) -> Result<(), LogError> {
        let Some((pos, _)) = self.find_batch(offset)? else { return Ok(()) };
        self.cut_at(pos)?;
        self.recover()?;
        Ok(())
    }

    /// What Kafka does when a segment stops being active: record the final max timestamp in
    /// the time index. Returns what makes the segment durable (and gives back its preallocated
    /// blocks), for the flusher thread: see `flush.rs`.
    pub fn on_roll(&mut self, dir: &Path) -> Result<FlushJob, LogError> {
        self.seal()?;
        if self.max_timestamp >= 0 {
            let rel = (self.offset_of_max_timestamp - self.base_offset) as u32;
            self.time_index.maybe_append(self.max_timestamp, rel);
        }
        let mut indexes = Vec::with_capacity(2);
        indexes.extend(self.offset_index.take_unsynced()?);
        indexes.extend(self.time_index.take_unsynced()?);
        self.allocated_to = self.size;
        Ok(FlushJob {
            log_path: self.log_path.clone(),
            file: Arc::clone(&self.file),
            size: self.size,
            indexes,
            dir: dir.to_path_buf(),
        })
    }

    /// Makes the `.log` file end at the last batch (a direct-I/O file pads its last block while
    /// appends go on; see `io::direct`).
    pub fn seal(&mut self) -> Result<(), LogError> {
        self.file.seal().map_err(|e| LogError::io(&self.log_path, "trim padding", e))
    }

    /// The `.log` file and its path, to fdatasync without holding the partition lock (see
    /// [`super::partition::SyncPoint`]).
    pub fn data_file(&self) -> (Arc<dyn SegmentFile>, PathBuf) {
        (Arc::clone(&self.file), self.log_path.clone())
    }

    pub fn sync(&mut self) -> Result<(), LogError> {
        self.seal()?;
        let started = std::time::Instant::now();
        self.file.sync_data().map_err(|e| LogError::io(&self.log_path, "fsync", e))?;
        crate::metrics::fsync_completed(started.elapsed());
        self.offset_index.sync()?;
        self.time_index.sync()
    }

    /// Removes the segment's files: the `.log` is first renamed to `.log.deleted` so a crash
    /// midway never leaves a segment without its name-giving file half-deleted.
    pub fn delete(self) -> Result<(), LogError> {
        let mut deleted = self.log_path.as_os_str().to_owned();
        deleted.push(".deleted");
        let deleted = PathBuf::from(deleted);
        std::fs::rename(&self.log_path, &deleted).map_err(|e| LogError::io(&self.log_path, "rename for deletion", e))?;
        for p in [self.offset_index.path(), self.time_index.path()] {
            match std::fs::remove_file(p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(LogError::io(p, "delete index", e)),
            }
        }
        let txn = self.log_path.with_extension("txnindex");
        let _ = std::fs::remove_file(txn);
        drop(self.file);
        std::fs::remove_file(&deleted).map_err(|e| LogError::io(&deleted, "delete segment", e))
    }

    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }
    pub fn next_offset(&self) -> i64 {
        self.next_offset
    }
    pub fn size(&self) -> u64 {
        self.size
    }
    pub fn is_empty(&self) -> bool {
        self.size == 0
    }
    pub fn max_timestamp(&self) -> i64 {
        self.max_timestamp
    }
    pub fn offset_of_max_timestamp(&self) -> i64 {
        self.offset_of_max_timestamp
    }
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }
    pub fn offset_index(&self) -> &OffsetIndex {
        &self.offset_index
    }
    pub fn time_index(&self) -> &TimeIndex {
        &self.time_index
    }

    /// The timestamp `segment.ms` is measured from (Kafka's rollingBasedTimestamp).
    pub fn roll_reference_timestamp(&self) -> Option<i64> {
        self.first_batch_timestamp.filter(|&t| t >= 0)
    }

    pub fn opened_ms(&self) -> i64 {
        self.opened_ms
    }

    /// Timestamp retention compares against: the largest batch timestamp, or when the
    /// segment has none, when it was opened.
    pub fn largest_timestamp(&self) -> i64 {
        if self.max_timestamp >= 0 {
            self.max_timestamp
        } else {
            self.opened_ms
        }
    }

    pub fn set_index_interval(&mut self, bytes: u32) {
        self.index_interval_bytes = bytes;
    }
}

fn index_state<T>(l: &IndexLoad<T>) -> String {
    match l {
        IndexLoad::Loaded(_) => "ok".into(),
        IndexLoad::Missing => "missing".into(),
        IndexLoad::Malformed(r) => format!("malformed: {r}"),
    }
}
