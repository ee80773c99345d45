//! Offset and time indexes of one segment.
//!
//! ```text
//!  .index      entry = relativeOffset u32 BE | position u32 BE             (8 bytes)
//!  .timeindex  entry = timestamp i64 BE | relativeOffset u32 BE            (12 bytes)
//! ```
//! `relativeOffset = offset - segment base offset`. Entries are kept in memory (a 1 GiB segment
//! with the default 4 KiB interval has ~256 Ki entries, 2 MiB), which is what lookups use. New
//! entries reach the files in groups (see [`PENDING_WRITE_BYTES`]): two `pwrite`s per group
//! rather than two per indexed batch (Kafka writes its indexes through an mmap, with no system call at
//! all). Files are written at their exact size (Kafka preallocates and trims on roll; both forms
//! read back correctly here).
//!
//! # Crashes
//! The file always holds a prefix of the entries. Entries still waiting in memory are written
//! before any fsync of the index (so a roll, a flush and a clean shutdown write them); a crash
//! loses at most one group. That costs nothing but scan time: a sparse index with fewer entries
//! is still correct, and reopening re-indexes the batches after the last entry on the file (see
//! `Segment::open`).
//!
//! # Open files
//! An index file is created when its segment is created, rewritten when it is rebuilt or held
//! trailing zero entries, and otherwise taken over as it is when the segment is opened; then it
//! is closed: it is opened again only when an entry is appended or unsynced content must be
//! fsynced. A partition that receives less than `index.interval.bytes` therefore holds one file
//! descriptor (its `.log`), not three, which is what lets one broker serve 10,000 idle
//! partitions under an ordinary open-files limit. Kafka gets the same by mmapping its indexes
//! and closing their descriptors.
//!
//! # Loading
//! Kafka preallocates the active segment's index files, so a file may end in all-zero entries:
//! trailing zero entries are ignored. Anything else that is not strictly increasing, or points
//! past the `.log` file, makes the whole index "malformed" and the caller rebuilds it from the
//! log.
use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::error::LogError;

/// Index files larger than this are treated as malformed rather than read into memory
/// (Kafka's `segment.index.bytes` default is 10 MiB).
const MAX_INDEX_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// Why an index file was not usable as it is.
#[derive(Debug)]
pub enum IndexLoad<T> {
    Loaded(Vec<T>),
    Missing,
    Malformed(String),
}

/// Reads an index file of fixed-size entries, dropping trailing all-zero entries.
fn read_entries(path: &Path, entry_len: usize) -> Result<Option<Vec<u8>>, String> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("open failed: {e}")),
    };
    let len = file.metadata().map_err(|e| format!("stat failed: {e}"))?.len();
    if len > MAX_INDEX_FILE_BYTES {
        return Err(format!("file is {len} bytes, larger than any index we write"));
    }
    if len % entry_len as u64 != 0 {
        return Err(format!("length {len} is not a multiple of {entry_len}"));
    }
    let mut buf = vec![0u8; len as usize];
    file.read_exact_at(&mut buf, 0).map_err(|e| format!("read failed: {e}"))?;
    let mut used = buf.len();
    while used >= entry_len && buf[used - entry_len..used].iter().all(|&b| b == 0) {
        used -= entry_len;
    }
    buf.truncate(used);
    Ok(Some(buf))
}

/// Appended entries are written to the file once this many bytes of them gather in either index
/// of a segment (the segment then writes both, so the two files always end at the same batch),
/// and before any fsync. Small enough that an idle partition holds little memory and a crash
/// loses few entries; large enough to turn a hundred index writes into one.
pub const PENDING_WRITE_BYTES: usize = 1024;

/// One index file on disk, open only while it is being written (see "Open files").
#[derive(Debug)]
struct IndexFile {
    path: PathBuf,
    file: Option<File>,
    /// Bytes on the file: where the next write goes.
    len: u64,
    /// Encoded entries not written yet (at most `PENDING_WRITE_BYTES` plus one entry).
    pending: Vec<u8>,
    /// Bytes were written since the last fsync.
    dirty: bool,
}

impl IndexFile {
    /// Creates or truncates the file to exactly `bytes`, then closes it.
    fn create(path: &Path, bytes: &[u8]) -> Result<IndexFile, LogError> {
        let f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(|e| LogError::io(path, "create index", e))?;
        f.write_all_at(bytes, 0).map_err(|e| LogError::io(path, "write index", e))?;
        Ok(IndexFile::closed(path, bytes.len(), !bytes.is_empty()))
    }

    fn closed(path: &Path, len: usize, dirty: bool) -> IndexFile {
        IndexFile { path: path.to_path_buf(), file: None, len: len as u64, pending: Vec::new(), dirty }
    }

    /// Takes over `path` as it is when it holds exactly `len` bytes (what loading it kept), else
    /// rewrites it with `bytes()`. Reopening a partition then writes nothing: truncating an
    /// index file waits for any writeback of its pages, which behind a busy disk took seconds
    /// per restart.
    fn adopt(path: &Path, len: usize, bytes: impl FnOnce() -> Vec<u8>) -> Result<IndexFile, LogError> {
        match std::fs::metadata(path) {
            Ok(m) if m.len() == len as u64 => Ok(IndexFile::closed(path, len, len > 0)),
            _ => IndexFile::create(path, &bytes()),
        }
    }

    fn open(&mut self) -> Result<&File, LogError> {
        if self.file.is_none() {
            let f = OpenOptions::new().write(true).open(&self.path).map_err(|e| LogError::io(&self.path, "open index", e))?;
            self.file = Some(f);
        }
        Ok(self.file.as_ref().expect("opened above"))
    }

    /// Queues one encoded entry (see [`PENDING_WRITE_BYTES`] for when the queue is written).
    fn append(&mut self, entry: &[u8]) {
        if self.pending.capacity() == 0 {
            self.pending.reserve_exact(PENDING_WRITE_BYTES + entry.len());
        }
        self.pending.extend_from_slice(entry);
    }

    /// Writes the queued entries at the end of the file. On failure they stay queued.
    fn write_pending(&mut self, op: &'static str) -> Result<(), LogError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        self.open()?;
        let file = self.file.as_ref().expect("opened above");
        file.write_all_at(&self.pending, self.len).map_err(|e| LogError::io(&self.path, op, e))?;
        self.len += self.pending.len() as u64;
        self.pending.clear();
        self.dirty = true;
        Ok(())
    }

    fn sync(&mut self, op: &'static str) -> Result<(), LogError> {
        self.write_pending("write index")?;
        if !self.dirty {
            return Ok(());
        }
        let path = self.path.clone();
        self.open()?.sync_data().map_err(|e| LogError::io(path, op, e))?;
        self.dirty = false;
        Ok(())
    }

    /// A second descriptor of the file when it has unsynced writes, for a sync elsewhere (the
    /// flusher thread); the writes then count as synced here.
    fn take_unsynced(&mut self) -> Result<Option<(PathBuf, File)>, LogError> {
        self.write_pending("write index")?;
        if !self.dirty {
            return Ok(None);
        }
        let path = self.path.clone();
        let f = self.open()?.try_clone().map_err(|e| LogError::io(&path, "duplicate index descriptor", e))?;
        self.dirty = false;
        Ok(Some((path, f)))
    }
}

/// One fixed-size, big-endian entry of an index file.
pub trait IndexEntry: Copy + std::fmt::Debug {
    const LEN: usize;
    fn encode(&self, out: &mut [u8]);
    fn decode(bytes: &[u8]) -> Self;
}

/// Offset index entry: (relative offset, file position of the batch whose last offset it is).
impl IndexEntry for (u32, u32) {
    const LEN: usize = 8;
    fn encode(&self, out: &mut [u8]) {
        out[..4].copy_from_slice(&self.0.to_be_bytes());
        out[4..8].copy_from_slice(&self.1.to_be_bytes());
    }
    fn decode(b: &[u8]) -> Self {
        (u32::from_be_bytes([b[0], b[1], b[2], b[3]]), u32::from_be_bytes([b[4], b[5], b[6], b[7]]))
    }
}

/// Time index entry: (max timestamp seen so far, relative offset of the batch that carried it).
impl IndexEntry for (i64, u32) {
    const LEN: usize = 12;
    fn encode(&self, out: &mut [u8]) {
        out[..8].copy_from_slice(&self.0.to_be_bytes());
        out[8..12].copy_from_slice(&self.1.to_be_bytes());
    }
    fn decode(b: &[u8]) -> Self {
        let mut ts = [0u8; 8];
        ts.copy_from_slice(&b[..8]);
        (i64::from_be_bytes(ts), u32::from_be_bytes([b[8], b[9], b[10], b[11]]))
    }
}

/// A sparse index: its entries in memory, in order, and the file they are written to.
#[derive(Debug)]
pub struct SparseIndex<E> {
    entries: Vec<E>,
    file: IndexFile,
}

/// `.index`: relative offset -> file position of the batch whose last offset it is.
pub type OffsetIndex = SparseIndex<(u32, u32)>;

/// `.timeindex`: max timestamp seen so far -> relative offset of the batch that carried it.
pub type TimeIndex = SparseIndex<(i64, u32)>;

impl<E: IndexEntry> SparseIndex<E> {
    /// Reads the entries of `path`, each checked by `follows(previous, entry)` (an `Err` says
    /// why the file is malformed).
    fn load_checked(path: &Path, follows: impl Fn(Option<&E>, &E) -> Result<(), String>) -> IndexLoad<E> {
        let buf = match read_entries(path, E::LEN) {
            Ok(Some(b)) => b,
            Ok(None) => return IndexLoad::Missing,
            Err(reason) => return IndexLoad::Malformed(reason),
        };
        let mut entries: Vec<E> = Vec::with_capacity(buf.len() / E::LEN);
        for c in buf.chunks_exact(E::LEN) {
            let e = E::decode(c);
            if let Err(reason) = follows(entries.last(), &e) {
                return IndexLoad::Malformed(reason);
            }
            entries.push(e);
        }
        IndexLoad::Loaded(entries)
    }

    /// Writes `entries` as the whole file.
    pub fn create(path: &Path, entries: Vec<E>) -> Result<Self, LogError> {
        let file = IndexFile::create(path, &Self::encode(&entries))?;
        Ok(SparseIndex { entries, file })
    }

    /// An index for `entries` just loaded from `path`: the file is kept when it holds exactly
    /// them, rewritten otherwise (trailing zero entries).
    pub fn adopt(path: &Path, entries: Vec<E>) -> Result<Self, LogError> {
        let file = IndexFile::adopt(path, entries.len() * E::LEN, || Self::encode(&entries))?;
        Ok(SparseIndex { entries, file })
    }

    fn encode(entries: &[E]) -> Vec<u8> {
        let mut bytes = vec![0u8; entries.len() * E::LEN];
        for (e, out) in entries.iter().zip(bytes.chunks_exact_mut(E::LEN)) {
            e.encode(out);
        }
        bytes
    }

    /// Adds an entry the caller checked to follow the last one; it waits in memory for
    /// [`SparseIndex::write_pending`] or a sync.
    fn push(&mut self, e: E) {
        let mut buf = [0u8; 16];
        e.encode(&mut buf[..E::LEN]);
        self.entries.push(e);
        self.file.append(&buf[..E::LEN]);
    }

    pub fn entries(&self) -> &[E] {
        &self.entries
    }

    pub fn last(&self) -> Option<E> {
        self.entries.last().copied()
    }

    /// Entries wait in memory for a full group ([`PENDING_WRITE_BYTES`]).
    pub fn pending_full(&self) -> bool {
        self.file.pending.len() >= PENDING_WRITE_BYTES
    }

    /// Writes the entries waiting in memory.
    pub fn write_pending(&mut self) -> Result<(), LogError> {
        self.file.write_pending("append index")
    }

    pub fn sync(&mut self) -> Result<(), LogError> {
        self.file.sync("fsync index")
    }

    /// See `IndexFile::take_unsynced`.
    pub fn take_unsynced(&mut self) -> Result<Option<(PathBuf, File)>, LogError> {
        self.file.take_unsynced()
    }

    pub fn path(&self) -> &Path {
        &self.file.path
    }
}

impl OffsetIndex {
    /// Loads and validates the index against a `.log` of `log_size` bytes.
    pub fn load(path: &Path, log_size: u64) -> IndexLoad<(u32, u32)> {
        Self::load_checked(path, |prev, &(rel, pos)| {
            if u64::from(pos) >= log_size {
                return Err(format!("position {pos} is beyond the log size {log_size}"));
            }
            match prev {
                Some(&(prel, ppos)) if rel <= prel || pos <= ppos => {
                    Err(format!("entry ({rel}, {pos}) does not follow ({prel}, {ppos})"))
                }
                _ => Ok(()),
            }
        })
    }

    pub fn append(&mut self, rel: u32, pos: u32) {
        if self.entries.last().is_some_and(|&(r, p)| rel <= r || pos <= p) {
            return; // never break monotonicity; a skipped entry only costs scan time
        }
        self.push((rel, pos));
    }

    /// Largest entry with relative offset <= `rel`: where to start scanning for `rel`.
    pub fn lookup(&self, rel: u32) -> Option<(u32, u32)> {
        let i = self.entries.partition_point(|&(r, _)| r <= rel);
        i.checked_sub(1).map(|i| self.entries[i])
    }
}

impl TimeIndex {
    pub fn load(path: &Path) -> IndexLoad<(i64, u32)> {
        Self::load_checked(path, |prev, &(ts, rel)| match prev {
            Some(&(pts, prel)) if ts <= pts || rel < prel => {
                Err(format!("entry ({ts}, {rel}) does not follow ({pts}, {prel})"))
            }
            _ => Ok(()),
        })
    }

    /// Appends only when `ts` is larger than the last entry's timestamp (Kafka's maybeAppend).
    pub fn maybe_append(&mut self, ts: i64, rel: u32) {
        if self.entries.last().is_some_and(|&(t, r)| ts <= t || rel < r) {
            return;
        }
        self.push((ts, rel));
    }

    /// Largest entry with timestamp strictly below `ts`: every record at or before its offset
    /// is older than `ts`, so a search for `ts` may start at that offset's batch.
    pub fn lookup_before(&self, ts: i64) -> Option<(i64, u32)> {
        let i = self.entries.partition_point(|&(t, _)| t < ts);
        i.checked_sub(1).map(|i| self.entries[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_index_ignores_trailing_zero_entries_from_preallocation() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("0.index");
        let mut bytes = Vec::new();
        for (r, pos) in [(3u32, 4100u32), (9, 8300)] {
            bytes.extend_from_slice(&r.to_be_bytes());
            bytes.extend_from_slice(&pos.to_be_bytes());
        }
        bytes.resize(bytes.len() + 8 * 100, 0);
        std::fs::write(&p, &bytes).unwrap();
        match OffsetIndex::load(&p, 10_000) {
            IndexLoad::Loaded(e) => assert_eq!(e, vec![(3, 4100), (9, 8300)]),
            other => panic!("{other:?}"),
        }
        assert!(matches!(OffsetIndex::load(&p, 8000), IndexLoad::Malformed(_)));
        std::fs::write(&p, [0u8; 7]).unwrap();
        assert!(matches!(OffsetIndex::load(&p, 8000), IndexLoad::Malformed(_)));
        assert!(matches!(OffsetIndex::load(&dir.path().join("x.index"), 1), IndexLoad::Missing));
    }

    #[test]
    fn reopening_keeps_an_exact_index_file_and_rewrites_one_with_trailing_zeros() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("0.index");
        let mut written = OffsetIndex::create(&p, vec![(3, 4100), (9, 8300)]).unwrap();
        written.append(12, 9000);
        written.sync().unwrap();
        let inode = |p: &Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
        let before = (std::fs::metadata(&p).unwrap().modified().unwrap(), inode(&p));
        let IndexLoad::Loaded(entries) = OffsetIndex::load(&p, 10_000) else { panic!("loads") };
        let mut adopted = OffsetIndex::adopt(&p, entries).unwrap();
        assert_eq!((std::fs::metadata(&p).unwrap().modified().unwrap(), inode(&p)), before, "not rewritten");
        assert_eq!(adopted.entries(), &[(3, 4100), (9, 8300), (12, 9000)]);
        adopted.append(20, 9500);
        adopted.sync().unwrap();
        assert!(matches!(OffsetIndex::load(&p, 10_000), IndexLoad::Loaded(e) if e.len() == 4 && e[3] == (20, 9500)));

        let t = dir.path().join("0.timeindex");
        let mut bytes = TimeIndex::encode(&[(1000, 3), (2000, 9)]);
        bytes.resize(bytes.len() + 12 * 10, 0); // Kafka's preallocated tail
        std::fs::write(&t, &bytes).unwrap();
        let IndexLoad::Loaded(entries) = TimeIndex::load(&t) else { panic!("loads") };
        let mut adopted = TimeIndex::adopt(&t, entries).unwrap();
        assert_eq!(std::fs::metadata(&t).unwrap().len(), 24, "zero tail dropped");
        adopted.maybe_append(3000, 12);
        adopted.sync().unwrap();
        assert!(matches!(TimeIndex::load(&t), IndexLoad::Loaded(e) if e == vec![(1000, 3), (2000, 9), (3000, 12)]));
    }

    /// Open descriptors of this process that point at `path`.
    fn fds_on(path: &Path) -> usize {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|target| target == path)
            .count()
    }

    #[test]
    fn index_files_are_open_only_while_written() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("00000000000000000000.index");
        let mut oi = OffsetIndex::create(&p, vec![]).unwrap();
        assert!(p.exists(), "the file exists from the start, as with Kafka");
        assert_eq!(fds_on(&p), 0, "an index without appends holds no descriptor");
        oi.sync().unwrap();
        assert_eq!(fds_on(&p), 0, "nothing to sync, nothing opened");
        oi.append(3, 4100);
        assert_eq!(fds_on(&p), 0, "the entry waits in memory");
        oi.sync().unwrap();
        assert_eq!(fds_on(&p), 1);
        drop(oi);
        assert_eq!(fds_on(&p), 0);
        match OffsetIndex::load(&p, 10_000) {
            IndexLoad::Loaded(e) => assert_eq!(e, vec![(3, 4100)]),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn appended_entries_wait_in_memory_until_written_or_synced() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("0.index");
        let mut oi = OffsetIndex::create(&p, vec![]).unwrap();
        let group = PENDING_WRITE_BYTES / 8;
        let file_entries = |p: &Path| match OffsetIndex::load(p, u64::MAX) {
            IndexLoad::Loaded(e) => e,
            other => panic!("{other:?}"),
        };
        for i in 1..group as u32 {
            oi.append(i, i * 100);
        }
        assert!(!oi.pending_full());
        assert_eq!(oi.entries().len(), group - 1, "lookups see every entry at once");
        assert_eq!(oi.lookup(u32::MAX), Some((group as u32 - 1, (group as u32 - 1) * 100)));
        assert!(file_entries(&p).is_empty(), "nothing written yet");
        oi.append(group as u32, group as u32 * 100);
        assert!(oi.pending_full());
        oi.write_pending().unwrap();
        assert!(!oi.pending_full());
        assert_eq!(file_entries(&p), oi.entries(), "the group is written in one go");
        oi.append(group as u32 + 1, 1); // ignored: position does not grow
        oi.append(group as u32 + 1, (group as u32 + 1) * 100);
        // What a crash leaves: a prefix of the entries, which loads as a valid index.
        assert_eq!(file_entries(&p)[..], oi.entries()[..group]);
        oi.sync().unwrap();
        assert_eq!(file_entries(&p), oi.entries(), "sync writes what waits");

        let t = dir.path().join("0.timeindex");
        let mut ti = TimeIndex::create(&t, vec![]).unwrap();
        ti.maybe_append(1000, 1);
        assert!(matches!(TimeIndex::load(&t), IndexLoad::Loaded(e) if e.is_empty()));
        let Some((_, f)) = ti.take_unsynced().unwrap() else { panic!("the roll gets a file to sync") };
        drop(f);
        assert!(matches!(TimeIndex::load(&t), IndexLoad::Loaded(e) if e == vec![(1000, 1)]));
    }

    #[test]
    fn lookups_return_the_largest_lower_entry() {
        let dir = tempfile::tempdir().unwrap();
        let mut oi = OffsetIndex::create(&dir.path().join("a.index"), vec![]).unwrap();
        oi.append(5, 100);
        oi.append(10, 200);
        oi.append(10, 300); // ignored: not increasing
        assert_eq!(oi.lookup(4), None);
        assert_eq!(oi.lookup(5), Some((5, 100)));
        assert_eq!(oi.lookup(99), Some((10, 200)));
        oi.sync().unwrap();
        match OffsetIndex::load(&dir.path().join("a.index"), 1000) {
            IndexLoad::Loaded(e) => assert_eq!(e, vec![(5, 100), (10, 200)]),
            other => panic!("{other:?}"),
        }
        let mut ti = TimeIndex::create(&dir.path().join("a.timeindex"), vec![]).unwrap();
        ti.maybe_append(1000, 5);
        ti.maybe_append(1000, 6); // ignored: timestamp did not grow
        ti.maybe_append(2000, 10);
        assert_eq!(ti.lookup_before(1000), None);
        assert_eq!(ti.lookup_before(1001), Some((1000, 5)));
        assert_eq!(ti.lookup_before(5000), Some((2000, 10)));
        ti.sync().unwrap();
        match TimeIndex::load(&dir.path().join("a.timeindex")) {
            IndexLoad::Loaded(e) => assert_eq!(e, vec![(1000, 5), (2000, 10)]),
            other => panic!("{other:?}"),
        }
    }
}
