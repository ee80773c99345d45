//! Direct-I/O appends (`log.io.direct=true`, the default): the data of large appends goes from a
//! reused, aligned buffer to the device instead of through the page cache.
//!
//! # Why
//! A buffered append costs a page-cache page per 4 KiB, and on a VM whose hypervisor takes
//! freed guest memory back (virtio-balloon free page reporting) a fresh page costs a host
//! fault as well: on the bench VM `dd` pays 1.3-2.3 CPU s/GiB writing through the page cache
//! and 0.15-0.2 with `O_DIRECT` (bench/METHOD.md, "Ceilings"). A direct append copies the data
//! once into a per-thread buffer that is reused for every append, and the device takes it from
//! there. The price: the data is not in the page cache afterwards, so fetches of it (tailing
//! consumers, catch-up reads) read the device, and each append waits for the device. Fetches
//! read such ranges with `O_DIRECT` into reused buffers of their own ([`super::direct_read`]),
//! so that readers do not pay for fresh pages either.
//!
//! That price is only worth paying for large appends, which is where the page cache costs
//! CPU: appends smaller than [`DIRECT_FROM`] (64 KiB) still go through the page cache. A
//! producer at a moderate rate sends small batches, and with every one of them written
//! directly a consumer following it read each from the device: end-to-end p99 at 2,000
//! records/s went from 0.5 ms to 131-150 ms in the bench. Under load batches are large (a
//! librdkafka producer's are hundreds of KiB per partition), and go direct.
//!
//! Nor is it worth paying for data a reader is about to fetch: a file a fetch read from within
//! [`FOLLOWING_WITHIN`] of its end in the last [`FOLLOWED_FOR`] is *followed*, and its appends go
//! through the page cache, where the reader finds them. Without this, a consumer keeping up with
//! a producer at full speed read every byte back from the device (2 GiB produced, 1.98 GiB read
//! from the device, against 4-7 MiB with it; bench VM, single runs).
//!
//! # How
//! [`DirectBackend`] wraps another backend, which still opens every file and does all reads
//! other than fetches, fsyncs and truncations. Only appends (writes at the end of the data) go
//! through a second descriptor opened with `O_DIRECT` (by the first append; a seal closes it).
//! A fetch of a range mostly not in the page cache reads it through a third, read-only one
//! (`direct_reader`, opened by the first such fetch). Other fetches `sendfile` through the page
//! cache, which the kernel keeps coherent with direct writes by dropping cached pages a direct
//! write covers; where the kernel cannot say what is cached (no `cachestat`), that is every
//! fetch. As appended data is never in the page cache, such a fetch response asks the kernel to
//! read each of its ranges before sending it (`will_read`), and once sent, the [`READ_AHEAD`]
//! that follows each, on the blocking pool (`read_ahead`): a consumer reading through the log
//! finds its next fetch read while it took in this one. Each page is asked for once per reader going through (`Tail::advised`). A direct
//! write starts and ends on a [`BLOCK`] boundary, so each append rewrites the partial block the
//! previous one left (its bytes are kept in memory: 4 KiB per segment that has been appended to)
//! and pads its own last block with zeros.
//!
//! What is appended through the page cache does not stay there for good: once it lies
//! [`RECYCLE_BEHIND`] behind the end, its pages are written back and dropped, a
//! [`RECYCLE_STEP`] or more at a time, by one thread ([`super::recycle`]), so that the next
//! appends reuse them instead of taking fresh memory. A reader following the producer stays
//! within the pages kept; one further behind reads the device, as it does for direct appends.
//!
//! Readers may have that partial block in the page cache from before the append that completes
//! it. The kernel drops cached pages a direct write covers, before and again after the write, so
//! a read that follows the append sees its bytes; a test below reads behind a running appender
//! to check that on the machine it runs on.
//!
//! # Invariants
//! - `logical` is where the data ends; `file_end` is the file's size, past `logical` (zero
//!   padding to the block) after a direct append that a buffered one has not outgrown. `seal`
//!   (a roll, a flush, a clean shutdown) and `set_len` (truncation) make the file end at
//!   `logical` again, so only an active segment is ever padded.
//! - `block`, when present, holds the file's bytes `[logical - logical % BLOCK, logical)`; a
//!   buffered append drops it (the next direct one reads it back, from the page cache).
//! - Every byte appended through the page cache before `recycled` has been handed to
//!   [`super::recycle`]; `recycled` stays [`RECYCLE_BEHIND`] or more behind `logical` when it
//!   moves (a truncation pulls it back).
//!
//! # Failure behaviour
//! A log dir whose filesystem refuses `O_DIRECT` (tmpfs) keeps buffered appends, said once in
//! an `info!` line and in `sluice_log_io_backend_info{appends}`. A failed direct write is an
//! `io::Error` like any other (the partition log poisons itself); the partial block is then
//! read back from the file before the next append. After a crash the zero padding behind the
//! last batch is still there; opening the segment cuts it (`Segment::cut_zero_padding`: zeros
//! up to a block boundary, logged at info) and otherwise trusts the segment as usual. A write
//! that does not start at the end of the data (nothing in the log makes one today) goes
//! through the wrapped backend.
use std::cell::RefCell;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;

use super::{direct_read, IoBackend, PerFilesystem, SegmentFile};

/// Alignment of a direct write's position, length and buffer. 4 KiB satisfies every Linux
/// filesystem with a 4 KiB or smaller logical block; the probe in [`DirectBackend`] checks it.
pub const BLOCK: usize = 4096;
/// Appends smaller than this go through the page cache (see the module doc).
pub const DIRECT_FROM: u64 = 64 << 10;
/// How far past a sent range `read_ahead` asks the kernel to read, so that the reader's next
/// fetch finds its data in the page cache (see the module doc). The bench's catch-up read with
/// `log.io.direct` (librdkafka, 16 partitions, 1 MiB per partition per fetch; single runs
/// alternating on one machine): 540-580 MiB/s without it, 636-731 (median 685) with 8 MiB,
/// 596 and 648 with 32 MiB; 847 with buffered appends, where the data is in the page cache.
pub const READ_AHEAD: u64 = 8 << 20;
/// A fetch that reads from within this distance of the data's end marks the file as followed:
/// its appends go through the page cache for [`FOLLOWED_FOR`], where the reader will find them
/// (see the module doc). The read-ahead window: a reader this close reads what is appended now
/// within its next few fetches.
pub const FOLLOWING_WITHIN: u64 = READ_AHEAD;
/// How long a file stays followed after the last fetch near its end: longer than a caught-up
/// consumer's long poll (`fetch.max.wait.ms`, 500 ms by default), so that one waiting for data
/// keeps it followed.
pub const FOLLOWED_FOR: std::time::Duration = std::time::Duration::from_secs(2);
/// Appended data further than this behind the end has its page-cache pages given back
/// ([`super::recycle`]): a reader within [`FOLLOWING_WITHIN`] of the end never loses a page.
pub const RECYCLE_BEHIND: u64 = FOLLOWING_WITHIN;
/// The least a range handed to [`super::recycle`] spans: one writeback and one drop per this much
/// appended through the page cache.
pub const RECYCLE_STEP: u64 = 4 << 20;
/// One `POSIX_FADV_WILLNEED` call's length: Linux reads at most the device's read-ahead window
/// (`read_ahead_kb`, 128 KiB by default) per call, so a longer range is asked for in pieces.
const ADVISE_CHUNK: u64 = 128 << 10;
/// The per-thread staging buffer: an append larger than this is written in several pieces.
const STAGING_BLOCKS: usize = 256;

/// One aligned block; a `Vec<Block>` is aligned contiguous memory without a custom allocator.
#[repr(C, align(4096))]
#[derive(Clone, Copy)]
pub(super) struct Block(pub(super) [u8; BLOCK]);

pub(super) fn bytes(blocks: &[Block]) -> &[u8] {
    // SAFETY: `Block` is a `repr(C)` byte array whose size equals its alignment, so a slice of
    // blocks is `len * BLOCK` initialized, contiguous bytes borrowed for as long.
    unsafe { std::slice::from_raw_parts(blocks.as_ptr().cast::<u8>(), blocks.len() * BLOCK) }
}

pub(super) fn bytes_mut(blocks: &mut [Block]) -> &mut [u8] {
    // SAFETY: `Block` is a `repr(C)` byte array whose size equals its alignment, so a slice of
    // blocks is `len * BLOCK` initialized, contiguous bytes borrowed mutably for as long.
    unsafe { std::slice::from_raw_parts_mut(blocks.as_mut_ptr().cast::<u8>(), blocks.len() * BLOCK) }
}

thread_local! {
    /// Appends are synchronous on the calling thread, so one staging buffer per thread that
    /// appends (runtime workers) serves every partition and is never freed back to the OS.
    static STAGING: RefCell<Vec<Block>> = const { RefCell::new(Vec::new()) };
}

/// Wraps another backend so that large appends bypass the page cache; see the module doc.
#[derive(Debug)]
pub struct DirectBackend {
    inner: Arc<dyn IoBackend>,
    /// Appends from this size on go direct ([`DIRECT_FROM`]; tests lower it).
    direct_from: u64,
    /// Per filesystem (`st_dev`): whether `O_DIRECT` writes work there.
    direct_ok: PerFilesystem,
    /// [`RECYCLE_BEHIND`] and [`RECYCLE_STEP`] (tests lower them).
    recycle_behind: u64,
    recycle_step: u64,
    /// `log.io.direct.reads`: fetches of uncached ranges read them with `O_DIRECT`
    /// ([`super::direct_read`]); when off they go through the page cache with `sendfile`.
    direct_reads: bool,
}

impl DirectBackend {
    pub fn new(inner: Arc<dyn IoBackend>) -> DirectBackend {
        Self::with_threshold(inner, DIRECT_FROM)
    }

    /// Appends of `direct_from` bytes and more go direct (0: all of them).
    pub fn with_threshold(inner: Arc<dyn IoBackend>, direct_from: u64) -> DirectBackend {
        DirectBackend {
            inner,
            direct_from,
            direct_ok: PerFilesystem::default(),
            recycle_behind: RECYCLE_BEHIND,
            recycle_step: RECYCLE_STEP,
            direct_reads: true,
        }
    }

    /// Whether fetches read uncached ranges with `O_DIRECT` (`log.io.direct.reads`, on by
    /// default) or through the page cache.
    pub fn direct_reads(mut self, on: bool) -> DirectBackend {
        self.direct_reads = on;
        self
    }

    /// Gives back page-cache pages `behind` bytes behind the end, `step` bytes at a time.
    #[cfg(test)]
    fn recycling(mut self, behind: u64, step: u64) -> DirectBackend {
        self.recycle_behind = behind;
        self.recycle_step = step;
        self
    }

    fn direct_on(&self, dev: u64, dir: &Path) -> bool {
        self.direct_ok.get(dev, || match direct_write_probe(dir) {
            Ok(()) => {
                tracing::info!(dir = %dir.display(), "log.io.direct: appends on this filesystem bypass the page cache");
                true
            }
            Err(e) => {
                tracing::info!(
                    dir = %dir.display(),
                    error = %e,
                    "log.io.direct: this filesystem refuses O_DIRECT writes; appends here stay buffered"
                );
                false
            }
        })
    }
}

/// One aligned direct write to a scratch file in `dir`.
fn direct_write_probe(dir: &Path) -> io::Result<()> {
    let path = dir.join(format!(".sluice-direct-probe-{}", std::process::id()));
    let r = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path)
        .and_then(|f| f.write_all_at(&Block([0; BLOCK]).0, 0));
    let _ = std::fs::remove_file(&path);
    r
}

impl IoBackend for DirectBackend {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn open(&self, path: &Path) -> io::Result<Box<dyn SegmentFile>> {
        let inner = self.inner.open(path)?;
        let dev = inner.std_file().metadata()?.dev();
        if !self.direct_on(dev, path.parent().unwrap_or(Path::new("."))) {
            return Ok(inner);
        }
        let logical = inner.len()?;
        Ok(Box::new(DirectFile {
            inner,
            direct_from: self.direct_from,
            recycle_behind: self.recycle_behind,
            recycle_step: self.recycle_step,
            path: path.to_path_buf(),
            direct_reads: self.direct_reads,
            reader: std::sync::OnceLock::new(),
            state: Mutex::new(Tail {
                logical,
                block: None,
                file_end: logical,
                direct: None,
                advised: 0,
                followed: None,
                truncations: 0,
                // What was there before it was opened is not this file's to give back.
                recycled: logical,
                buffered_end: 0,
            }),
        }))
    }

    fn prepare_dir(&self, dir: &Path) {
        self.inner.prepare_dir(dir);
        if let Ok(meta) = std::fs::metadata(dir) {
            self.direct_on(meta.dev(), dir);
        }
    }

    fn append_path(&self) -> &'static str {
        match self.direct_ok.answers() {
            (true, false) => "direct",
            (true, true) => "mixed",
            _ => self.inner.append_path(),
        }
    }
}

struct Tail {
    logical: u64,
    /// The partial last block, when loaded (see the module's invariants).
    block: Option<Box<Block>>,
    /// The file's size as this file's writes left it: past `logical` after a direct write
    /// (zero padding of the last block).
    file_end: u64,
    /// The `O_DIRECT` descriptor, opened by the first append and closed by `seal`, so that only
    /// segments being appended to hold a second descriptor.
    direct: Option<File>,
    /// Where the last hint (`will_read`, `read_ahead`) ended: a reader going on from inside it
    /// only needs what follows.
    advised: u64,
    /// When a fetch last read from within [`FOLLOWING_WITHIN`] of the end (see the module doc).
    followed: Option<std::time::Instant>,
    /// `set_len` calls so far ([`SegmentFile::truncations`]).
    truncations: u64,
    /// Where the last range handed to [`super::recycle`] ended: the pages before it were given
    /// back (or never taken by an append through this file).
    recycled: u64,
    /// Where the last append through the page cache ended.
    buffered_end: u64,
}

impl Tail {
    fn padded(&self) -> bool {
        self.file_end > self.logical
    }

    /// Marks the file followed when a fetch from `from` lies within [`FOLLOWING_WITHIN`] of the
    /// end.
    fn mark_if_following(&mut self, from: u64) {
        if from.saturating_add(FOLLOWING_WITHIN) >= self.logical {
            self.followed = Some(std::time::Instant::now());
        }
    }

    /// Whether a reader fetched near the end within the last [`FOLLOWED_FOR`].
    fn followed(&self) -> bool {
        self.followed.is_some_and(|at| at.elapsed() < FOLLOWED_FOR)
    }
}

struct DirectFile {
    inner: Box<dyn SegmentFile>,
    direct_from: u64,
    recycle_behind: u64,
    recycle_step: u64,
    path: std::path::PathBuf,
    /// Whether uncached ranges are fetched with `O_DIRECT` at all ([`DirectBackend::direct_reads`]).
    direct_reads: bool,
    /// An `O_DIRECT` descriptor for fetches of ranges not in the page cache, opened by the first
    /// one (`None` if that failed: such fetches then use `sendfile`).
    reader: std::sync::OnceLock<Option<Arc<File>>>,
    state: Mutex<Tail>,
}

impl std::fmt::Debug for DirectFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Direct({:?})", self.inner)
    }
}

impl DirectFile {
    /// Asks the kernel to read `[from, to)` (cut at the data's end) into the page cache, skipping
    /// what the last hint already asked for when this one goes on from it. A reader at `from`
    /// within [`FOLLOWING_WITHIN`] of the end marks the file followed: every fetch passes here
    /// (`will_read`, `read_ahead`), under the lock the hint takes anyway.
    fn advise(&self, mut from: u64, to: u64) {
        use std::os::fd::AsRawFd;
        let to = {
            let mut st = self.state.lock();
            st.mark_if_following(from);
            let to = to.min(st.logical);
            // One consumer reading through the log (the common case) asks for ranges inside or
            // right after the last hint; a hint far ahead of this range (another reader's) or
            // behind it does not count.
            if from <= st.advised && st.advised <= to + READ_AHEAD {
                from = st.advised;
                st.advised = st.advised.max(to);
            } else {
                st.advised = to;
            }
            to
        };
        let fd = self.std_file().as_raw_fd();
        while from < to {
            let n = ADVISE_CHUNK.min(to - from);
            let (Ok(at), Ok(n_off)) = (libc::off_t::try_from(from), libc::off_t::try_from(n)) else { return };
            // SAFETY: plain syscall on an open descriptor; no memory is passed. It only schedules
            // reads, so a failure costs nothing but the hint (the read that follows still works).
            unsafe { libc::posix_fadvise(fd, at, n_off, libc::POSIX_FADV_WILLNEED) };
            from += n;
        }
    }

    /// Hands the pages of data appended through the page cache that lies [`RECYCLE_BEHIND`]
    /// behind the end to [`super::recycle`], a [`RECYCLE_STEP`] or more at a time.
    fn recycle(&self, st: &mut Tail) {
        let to = st.logical.saturating_sub(self.recycle_behind) / BLOCK as u64 * BLOCK as u64;
        if st.buffered_end <= st.recycled {
            // Only direct appends since: nothing of theirs is in the page cache.
            st.recycled = st.recycled.max(to);
        } else if to >= st.recycled + self.recycle_step && super::recycle::hand_over(self.path.clone(), st.recycled, to) {
            st.recycled = to;
        }
    }

    /// Appends `parts` at `st.logical` with direct writes; see the module doc.
    fn append(&self, st: &mut Tail, parts: &[Bytes]) -> io::Result<()> {
        let start = st.logical;
        let partial = (start % BLOCK as u64) as usize;
        let mut at = start - partial as u64;
        // Taken out so that a failure below leaves it unloaded, to be read back next time.
        let (mut tail, loaded) = match st.block.take() {
            Some(b) => (b, true),
            None => (Box::new(Block([0; BLOCK])), false),
        };
        if partial > 0 && !loaded {
            self.inner.std_file().read_exact_at(&mut tail.0[..partial], at)?;
        }
        if st.direct.is_none() {
            st.direct = Some(OpenOptions::new().write(true).custom_flags(libc::O_DIRECT).open(&self.path)?);
        }
        let Some(direct) = &st.direct else { unreachable!("opened above") };
        STAGING.with(|staging| -> io::Result<()> {
            let mut staging = staging.borrow_mut();
            if staging.is_empty() {
                staging.resize(STAGING_BLOCKS, Block([0; BLOCK]));
            }
            let buf = bytes_mut(&mut staging);
            buf[..partial].copy_from_slice(&tail.0[..partial]);
            let mut fill = partial;
            for part in parts {
                let mut p = &part[..];
                while !p.is_empty() {
                    let n = p.len().min(buf.len() - fill);
                    buf[fill..fill + n].copy_from_slice(&p[..n]);
                    fill += n;
                    p = &p[n..];
                    if fill == buf.len() {
                        direct.write_all_at(buf, at)?;
                        at += buf.len() as u64;
                        fill = 0;
                    }
                }
            }
            let last = fill % BLOCK;
            if fill > 0 {
                let padded = fill.next_multiple_of(BLOCK);
                buf[fill..padded].fill(0);
                direct.write_all_at(&buf[..padded], at)?;
            }
            tail.0[..last].copy_from_slice(&buf[fill - last..fill]);
            Ok(())
        })?;
        st.block = Some(tail);
        Ok(())
    }
}

impl SegmentFile for DirectFile {
    fn write_at(&self, pos: u64, parts: &[Bytes]) -> io::Result<()> {
        let len: u64 = parts.iter().map(|p| p.len() as u64).sum();
        if len == 0 {
            return Ok(());
        }
        let mut st = self.state.lock();
        // Small appends, appends a reader is following, and writes away from the end go through
        // the page cache.
        if pos != st.logical || len < self.direct_from || st.followed() {
            self.inner.write_at(pos, parts)?;
            st.logical = st.logical.max(pos + len);
            st.file_end = st.file_end.max(pos + len);
            st.buffered_end = st.buffered_end.max(pos + len);
            st.block = None;
        } else {
            self.append(&mut st, parts)?;
            st.logical += len;
            // The write ended on the block boundary at or after the data's end.
            st.file_end = st.file_end.max(st.logical.next_multiple_of(BLOCK as u64));
        }
        self.recycle(&mut st);
        Ok(())
    }

    fn read_at(&self, pos: u64, len: usize) -> io::Result<Bytes> {
        // The padding is not data: a read into it is a read past the end.
        if pos + len as u64 > self.state.lock().logical {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
        }
        self.inner.read_at(pos, len)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.inner.sync_data()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut st = self.state.lock();
        st.block = None;
        self.inner.set_len(len)?;
        st.logical = len;
        st.truncations += 1;
        st.advised = st.advised.min(len);
        st.recycled = st.recycled.min(len);
        st.buffered_end = st.buffered_end.min(len);
        st.file_end = len;
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        let st = self.state.lock();
        // Unpadded, the file's own size, as for any other file (a flush job compares it with the
        // size at the roll to see whether the file changed since).
        if st.padded() { Ok(st.logical) } else { self.inner.len() }
    }

    fn will_read(&self, pos: u64, len: usize) {
        self.advise(pos, pos + len as u64);
    }

    fn reads_ahead(&self) -> bool {
        true
    }

    fn direct_reader(&self, pos: u64, len: usize) -> Option<Arc<File>> {
        self.state.lock().mark_if_following(pos);
        if !self.direct_reads || !direct_read::is_mostly_uncached(self.std_file(), pos, len) {
            return None;
        }
        self.reader
            .get_or_init(|| match OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(&self.path) {
                Ok(f) => Some(Arc::new(f)),
                Err(e) => {
                    tracing::debug!(path = %self.path.display(), error = %e, "no O_DIRECT reader; fetches of this file use sendfile");
                    None
                }
            })
            .clone()
    }

    fn direct_ahead(&self, pos: u64, len: usize) -> Option<(Arc<File>, u64)> {
        let data = self.state.lock().logical.saturating_sub(pos).min(len as u64);
        if data == 0 || !self.direct_reads || !direct_read::is_mostly_uncached(self.std_file(), pos, data as usize) {
            return None;
        }
        let reader = self.reader.get()?.clone()?;
        Some((reader, data))
    }

    fn truncations(&self) -> u64 {
        self.state.lock().truncations
    }

    fn read_ahead(&self, pos: u64) {
        self.advise(pos, pos + READ_AHEAD);
    }

    fn seal(&self) -> io::Result<()> {
        let mut st = self.state.lock();
        if st.padded() {
            self.inner.set_len(st.logical)?;
            st.file_end = st.logical;
        }
        st.direct = None;
        Ok(())
    }

    fn std_file(&self) -> &File {
        self.inner.std_file()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::io::{residency, StdBackend};

    /// A direct backend over std in a fresh dir, or `None` (with a note) where the filesystem
    /// holding the temp dir refuses O_DIRECT.
    fn direct_in(dir: &Path) -> Option<DirectBackend> {
        let b = DirectBackend::new(Arc::new(StdBackend));
        b.prepare_dir(dir);
        if b.append_path() != "direct" {
            eprintln!("{} refuses O_DIRECT; direct appends not tested here", dir.display());
            return None;
        }
        Some(b)
    }

    fn file_size(f: &dyn SegmentFile) -> u64 {
        f.std_file().metadata().unwrap().len()
    }

    /// Pages of the file resident in the page cache (mmap + mincore).
    fn resident_pages(file: &File) -> usize {
        residency(file).iter().filter(|&&r| r).count()
    }

    #[test]
    fn appends_of_any_size_land_byte_for_byte_and_pad_only_the_last_block() {
        let dir = tempfile::tempdir().unwrap();
        let Some(b) = direct_in(dir.path()) else { return };
        let f = b.open(&dir.path().join("f.log")).unwrap();
        let mut expected = Vec::new();
        // Small (buffered) and direct appends mixed, direct ones that straddle blocks, fill one
        // exactly, and exceed the staging buffer.
        let d = DIRECT_FROM as usize;
        let sizes = [1usize, 100, d + 4095, 1, d, 10_000, (STAGING_BLOCKS * BLOCK) * 2 + 77, 3, d + 1];
        let mut file_end = 0u64;
        for (i, &n) in sizes.iter().enumerate() {
            let data: Vec<u8> = (0..n).map(|j| (i * 31 + j * 7) as u8).collect();
            // Split into uneven parts, as a patched header plus the rest of a batch would be.
            let cut = n / 3;
            let parts = [Bytes::copy_from_slice(&data[..cut]), Bytes::copy_from_slice(&data[cut..])];
            f.write_at(expected.len() as u64, &parts).unwrap();
            expected.extend_from_slice(&data);
            let end = expected.len() as u64;
            file_end = file_end.max(if n >= d { end.next_multiple_of(BLOCK as u64) } else { end });
            assert_eq!(f.len().unwrap(), end);
            assert_eq!(file_size(&*f), file_end, "after append {i} of {n} bytes");
        }
        assert!(f.read_at(0, expected.len()).unwrap()[..] == expected[..], "bytes differ");
        f.seal().unwrap();
        assert_eq!(file_size(&*f), expected.len() as u64, "sealed file ends at the data");
        f.write_at(expected.len() as u64, &[Bytes::from_static(b"after the seal")]).unwrap();
        expected.extend_from_slice(b"after the seal");
        assert!(f.read_at(0, expected.len()).unwrap()[..] == expected[..], "bytes differ after the seal");
    }

    #[test]
    fn pages_of_buffered_appends_are_given_back_behind_the_end_and_the_data_stays() {
        let dir = tempfile::tempdir().unwrap();
        let Some(b) = direct_in(dir.path()) else { return };
        const MIB: usize = 1 << 20;
        let b = b.recycling(MIB as u64, MIB as u64);
        let f = b.open(&dir.path().join("f.log")).unwrap();
        let mut expected = Vec::new();
        let append = |f: &dyn SegmentFile, expected: &mut Vec<u8>, bytes: usize| {
            // 16 KiB appends, below DIRECT_FROM: through the page cache.
            for _ in 0..bytes / (16 << 10) {
                let data: Vec<u8> = (0..16 << 10).map(|j| (expected.len() / 4096 + j) as u8).collect();
                f.write_at(expected.len() as u64, &[Bytes::from(data.clone())]).unwrap();
                expected.extend(data);
            }
        };
        append(&*f, &mut expected, 4 * MIB);
        // Ranges go in steps of at least 1 MiB ending 1 MiB behind the end: the first 2 MiB are
        // given back, the last 1 MiB (where a following reader reads) never is.
        let pages = wait_gone(f.std_file(), 0..2 * MIB / 4096);
        assert!(!pages[..2 * MIB / 4096].iter().any(|&r| r), "pages 1 MiB and more behind the end are still cached");
        assert!(pages[3 * MIB / 4096..].iter().all(|&r| r), "a page within 1 MiB of the end was dropped");
        assert!(f.read_at(0, expected.len()).unwrap()[..] == expected[..], "bytes differ after their pages were dropped");

        // Cut back to 1 MiB and appended again: the new data's pages are given back as well.
        f.set_len(MIB as u64).unwrap();
        expected.truncate(MIB);
        append(&*f, &mut expected, 4 * MIB);
        let pages = wait_gone(f.std_file(), MIB / 4096..3 * MIB / 4096);
        assert!(!pages[MIB / 4096..3 * MIB / 4096].iter().any(|&r| r), "pages appended after the cut are still cached");
        assert!(pages[4 * MIB / 4096..].iter().all(|&r| r), "a page within 1 MiB of the end was dropped");
        assert!(f.read_at(0, expected.len()).unwrap()[..] == expected[..], "bytes differ after the cut");
    }

    #[test]
    fn direct_appends_leave_nothing_in_the_page_cache() {
        let dir = tempfile::tempdir().unwrap();
        let Some(b) = direct_in(dir.path()) else { return };
        let data = Bytes::from(vec![5u8; 4 << 20]);
        let direct = b.open(&dir.path().join("direct.log")).unwrap();
        direct.write_at(0, std::slice::from_ref(&data)).unwrap();
        assert_eq!(resident_pages(direct.std_file()), 0);
        // An append below DIRECT_FROM goes through the page cache.
        let small = Bytes::from(vec![6u8; DIRECT_FROM as usize - 1]);
        direct.write_at(data.len() as u64, std::slice::from_ref(&small)).unwrap();
        assert_eq!(resident_pages(direct.std_file()), small.len().div_ceil(4096));
        // The same write through the page cache leaves every page there: what the measure sees.
        let buffered = StdBackend.open(&dir.path().join("buffered.log")).unwrap();
        buffered.write_at(0, std::slice::from_ref(&data)).unwrap();
        assert_eq!(resident_pages(buffered.std_file()), data.len() / 4096);
    }

    /// The file's residency once `done` says so of it, or after 10 s (hints and page drops are
    /// carried out by other threads).
    fn wait_residency(file: &File, done: impl Fn(&[bool]) -> bool) -> Vec<bool> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let pages = residency(file);
            if done(&pages) || std::time::Instant::now() > deadline {
                return pages;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// The file's residency once every page in `want` is resident (or after 10 s).
    fn wait_resident(file: &File, want: std::ops::Range<usize>) -> Vec<bool> {
        wait_residency(file, |pages| pages[want.clone()].iter().all(|&r| r))
    }

    /// The file's residency once no page in `gone` is resident (or after 10 s).
    fn wait_gone(file: &File, gone: std::ops::Range<usize>) -> Vec<bool> {
        wait_residency(file, |pages| !pages[gone.clone()].iter().any(|&r| r))
    }

    #[test]
    fn hints_read_the_fetched_range_then_what_follows_and_each_page_once_per_reader() {
        use std::os::fd::AsRawFd;
        let dir = tempfile::tempdir().unwrap();
        let Some(b) = direct_in(dir.path()) else { return };
        let f = b.open(&dir.path().join("f.log")).unwrap();
        let len = 3 * READ_AHEAD as usize;
        f.write_at(0, &[Bytes::from(vec![9u8; len])]).unwrap();
        let drop_cache = || {
            // SAFETY: plain syscall on an open descriptor.
            unsafe { libc::posix_fadvise(f.std_file().as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
            assert_eq!(resident_pages(f.std_file()), 0);
        };
        drop_cache();
        let page = |at: usize| at / 4096;

        // A fetch of [pos, pos + n), then the read-ahead for the next one.
        let (pos, n) = (READ_AHEAD as usize / 2, 100_000);
        f.will_read(pos as u64, n);
        f.read_ahead((pos + n) as u64);
        let (first, last) = (page(pos), page(pos + n + READ_AHEAD as usize));
        let pages = wait_resident(f.std_file(), first..last);
        assert!(pages[first..last].iter().all(|&r| r), "range and read-ahead not all read");
        // Nothing well before the range or well past the read-ahead.
        assert!(pages[..first - 64].iter().all(|&r| !r), "read before the range");
        assert!(pages[last + 64..].iter().all(|&r| !r), "read past the read-ahead");

        // The same reader's next fetch lies inside the first hints, and its read-ahead asks only
        // for what follows them: with the cache dropped, what they covered stays out.
        drop_cache();
        f.will_read((pos + n) as u64, n);
        f.read_ahead((pos + 2 * n) as u64);
        let next = page(pos + 2 * n + READ_AHEAD as usize);
        let pages = wait_resident(f.std_file(), last..next);
        assert!(pages[last..next].iter().all(|&r| r), "the new part not read");
        assert!(pages[first..last - 64].iter().all(|&r| !r), "the first hints' range asked for again");

        // A second reader far behind gets its range read although the last hint lies past it.
        f.will_read(0, n);
        let pages = wait_resident(f.std_file(), 0..page(n));
        assert!(pages[..page(n)].iter().all(|&r| r), "the reader behind got nothing");
    }

    #[test]
    fn appends_a_reader_is_following_go_through_the_page_cache() {
        let dir = tempfile::tempdir().unwrap();
        let Some(b) = direct_in(dir.path()) else { return };
        let chunk = Bytes::from(vec![3u8; 4 << 20]);
        let resident_in = |f: &dyn SegmentFile, from: usize, to: usize| -> usize {
            residency(f.std_file())[from / 4096..to / 4096].iter().filter(|&&r| r).count()
        };

        // A fetch within FOLLOWING_WITHIN of the end: the next append is left in the page cache.
        let followed = b.open(&dir.path().join("followed.log")).unwrap();
        followed.write_at(0, std::slice::from_ref(&chunk)).unwrap();
        assert_eq!(resident_pages(followed.std_file()), 0);
        followed.will_read(0, 4096);
        followed.write_at(chunk.len() as u64, std::slice::from_ref(&chunk)).unwrap();
        assert_eq!(resident_in(&*followed, chunk.len(), 2 * chunk.len()), chunk.len() / 4096);
        assert_eq!(file_size(&*followed), 2 * chunk.len() as u64, "a buffered append pads nothing");

        // A fetch further behind than that leaves appends direct.
        let behind = b.open(&dir.path().join("behind.log")).unwrap();
        let far = (FOLLOWING_WITHIN as usize).div_ceil(chunk.len()) + 1;
        for i in 0..far {
            behind.write_at((i * chunk.len()) as u64, std::slice::from_ref(&chunk)).unwrap();
        }
        behind.will_read(0, 4096);
        let end = far * chunk.len();
        behind.write_at(end as u64, std::slice::from_ref(&chunk)).unwrap();
        assert_eq!(resident_in(&*behind, end, end + chunk.len()), 0, "a far reader made the append buffered");
    }

    #[test]
    fn a_fetch_of_uncached_direct_appends_reads_them_directly_and_cached_data_from_the_cache() {
        let dir = tempfile::tempdir().unwrap();
        let Some(b) = direct_in(dir.path()) else { return };
        let f = b.open(&dir.path().join("f.log")).unwrap();
        let data: Vec<u8> = (0..(4usize << 20) + 777).map(|i| (i % 253) as u8 + 1).collect();
        f.write_at(0, &[Bytes::from(data.clone())]).unwrap();
        // An unaligned range over several pieces, as a fetch of a few batches would be.
        let (pos, len) = (4000u64, 3 * direct_read::READ_CHUNK + 12_345);
        let Some(reader) = f.direct_reader(pos, len) else {
            eprintln!("cachestat unavailable here; direct reads not tested");
            return;
        };
        let mut back = Vec::new();
        for (from, to) in direct_read::chunks(pos, len) {
            back.extend_from_slice(direct_read::read(&reader, from, to).unwrap().bytes());
        }
        assert!(back[..] == data[pos as usize..pos as usize + len], "bytes read directly differ");
        assert_eq!(resident_pages(f.std_file()), 0, "a direct read filled the page cache");
        // The last bytes, up to the data's end in a padded block.
        let end = data.len() as u64;
        let r = direct_read::read(&reader, end - 10, end).unwrap();
        assert_eq!(r.bytes(), &data[data.len() - 10..]);
        // Past the data's end (and the file's) is a short file, not zeros.
        let past = direct_read::read(&reader, end, end + 2 * BLOCK as u64 + 1);
        assert_eq!(past.err().map(|e| e.kind()), Some(io::ErrorKind::UnexpectedEof));
        // Reading ahead goes with the same descriptor, up to the data's end and not past it.
        let (ahead, n) = f.direct_ahead(2 << 20, 4 << 20).expect("uncached data ahead");
        assert!(Arc::ptr_eq(&ahead, &reader) && n == end - (2 << 20), "{n}");
        assert!(f.direct_ahead(end, 1 << 20).is_none(), "read ahead past the data");

        // A small append is dirty in the page cache: its range is sent from there.
        f.write_at(end, &[Bytes::from_static(b"small")]).unwrap();
        assert!(f.direct_reader(end, 5).is_none(), "a dirty range read directly");
        // So is a range the page cache holds once someone read it through.
        f.std_file().read_exact_at(&mut vec![0; 1 << 20], 0).unwrap();
        assert!(f.direct_reader(0, 1 << 20).is_none(), "a cached range read directly");
        assert!(f.direct_reader(2 << 20, 1 << 20).is_some(), "an uncached range not read directly");
        assert!(f.direct_ahead(0, 1 << 20).is_none(), "read ahead of a cached range");
        // A cut counts, so that what was read ahead before it is not taken for what is there now.
        assert_eq!(f.truncations(), 0);
        f.set_len(end).unwrap();
        assert_eq!(f.truncations(), 1);
    }

    #[test]
    fn with_direct_reads_off_uncached_direct_appends_are_fetched_through_the_page_cache() {
        let dir = tempfile::tempdir().unwrap();
        let Some(b) = direct_in(dir.path()) else { return };
        let b = b.direct_reads(false);
        let f = b.open(&dir.path().join("f.log")).unwrap();
        let data: Vec<u8> = (0..4usize << 20).map(|i| (i % 251) as u8).collect();
        f.write_at(0, &[Bytes::from(data.clone())]).unwrap();
        assert_eq!(resident_pages(f.std_file()), 0, "the append was not direct");
        assert!(f.direct_reader(4000, 1 << 20).is_none(), "read directly with direct reads off");
        assert!(f.direct_ahead(0, 4 << 20).is_none(), "read ahead directly with direct reads off");
        // The fetch's own hint still brings the range in for `sendfile`, and what is read is the data.
        f.will_read(0, 1 << 20);
        let mut back = vec![0; 1 << 20];
        f.std_file().read_exact_at(&mut back, 0).unwrap();
        assert!(back[..] == data[..1 << 20], "bytes read through the page cache differ");
        assert!(resident_pages(f.std_file()) >= (1 << 20) / BLOCK, "the range is not in the page cache");
    }

    #[test]
    fn a_reopened_file_goes_on_from_the_partial_block_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let Some(b) = direct_in(dir.path()) else { return };
        let path = dir.path().join("f.log");
        let f = b.open(&path).unwrap();
        let n = DIRECT_FROM + 10;
        let data: Vec<u8> = (0..n).map(|i| (i % 200) as u8 + 1).collect();
        f.write_at(0, &[Bytes::from(data.clone())]).unwrap();
        drop(f); // not sealed: a crash leaves the zero padding
        let f = b.open(&path).unwrap();
        let padded = n.next_multiple_of(BLOCK as u64);
        assert_eq!(f.len().unwrap(), padded, "the padding counts until recovery cuts it");
        assert!(f.read_at(n, (padded - n) as usize).unwrap().iter().all(|&x| x == 0));
        f.set_len(n).unwrap(); // what recovery does
        // A direct append that starts in the partial block read back from the file.
        let more = vec![b'z'; DIRECT_FROM as usize];
        f.write_at(n, &[Bytes::from(more.clone())]).unwrap();
        let back = f.read_at(0, (n as usize) + more.len()).unwrap();
        assert!(back[..n as usize] == data[..] && back[n as usize..] == more[..], "bytes differ");
    }

    #[test]
    fn a_write_away_from_the_end_goes_through_the_wrapped_backend() {
        let dir = tempfile::tempdir().unwrap();
        let Some(b) = direct_in(dir.path()) else { return };
        let f = b.open(&dir.path().join("f.log")).unwrap();
        f.write_at(0, &[Bytes::from(vec![b'a'; 5000])]).unwrap();
        f.write_at(4094, &[Bytes::from_static(b"XYZW")]).unwrap();
        f.write_at(5000, &[Bytes::from_static(b"end")]).unwrap();
        let back = f.read_at(0, 5003).unwrap();
        assert_eq!(&back[4090..4100], b"aaaaXYZWaa");
        assert_eq!(&back[5000..], b"end");
        assert!(back[..4094].iter().all(|&x| x == b'a'));
    }

    #[test]
    fn a_reader_right_behind_the_appends_sees_every_byte_not_the_padding() {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        let dir = tempfile::tempdir().unwrap();
        let Some(b) = direct_in(dir.path()) else { return };
        let f: Arc<dyn SegmentFile> = Arc::from(b.open(&dir.path().join("f.log")).unwrap());
        // Byte i of the file is (i % 251) + 1: never zero, so padding read as data shows.
        let byte = |i: u64| (i % 251) as u8 + 1;
        let end = Arc::new(AtomicU64::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let reader = {
            let (f, end, done) = (Arc::clone(&f), Arc::clone(&end), Arc::clone(&done));
            std::thread::spawn(move || {
                let mut reads = 0u64;
                while !done.load(Ordering::Acquire) {
                    let e = end.load(Ordering::Acquire);
                    // The last 8 KiB, through the page cache as sendfile reads them.
                    let from = e.saturating_sub(8192);
                    let mut buf = vec![0u8; (e - from) as usize];
                    f.std_file().read_exact_at(&mut buf, from).unwrap();
                    for (k, &x) in buf.iter().enumerate() {
                        assert_eq!(x, byte(from + k as u64), "byte {} of {e} read back wrong", from + k as u64);
                    }
                    reads += 1;
                }
                reads
            })
        };
        let mut pos = 0u64;
        for n in 0..3_000u64 {
            // Mostly direct appends, each starting in the block the previous one left partial.
            let len = if n % 4 == 0 { 1 + (n * 37 % 300) } else { DIRECT_FROM + n * 37 % 5000 };
            let data: Vec<u8> = (pos..pos + len).map(byte).collect();
            f.write_at(pos, &[Bytes::from(data)]).unwrap();
            pos += len;
            end.store(pos, Ordering::Release);
        }
        done.store(true, Ordering::Release);
        let reads = reader.join().unwrap();
        assert!(reads > 100, "the reader ran only {reads} times");
    }

    #[test]
    fn a_filesystem_without_o_direct_keeps_buffered_appends() {
        // tmpfs refuses O_DIRECT; /dev/shm is one where it is mounted.
        let shm = Path::new("/dev/shm");
        if !shm.is_dir() {
            return;
        }
        let dir = tempfile::tempdir_in(shm).unwrap();
        let b = DirectBackend::new(Arc::new(StdBackend));
        b.prepare_dir(dir.path());
        if direct_write_probe(dir.path()).is_ok() {
            return; // not tmpfs here after all
        }
        assert_eq!(b.append_path(), "pwritev");
        let f = b.open(&dir.path().join("f.log")).unwrap();
        f.write_at(0, &[Bytes::from_static(b"abc")]).unwrap();
        assert_eq!(file_size(&*f), 3, "no padding: a buffered file");
    }
}
