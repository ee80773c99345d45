//! Segment file I/O behind a narrow trait, with an io_uring backend and a portable std one.
//!
//! Only a segment's `.log` file goes through [`SegmentFile`]; indexes and checkpoints are small
//! and use `std::fs` directly. Fetches do not read through the backend at all: they take a
//! [`FileSlice`] of the file and the connection sends it with `sendfile(2)` (or, for directly
//! appended data not in the page cache, reads it with `O_DIRECT`: [`direct_read`]). Both
//! backends do positional I/O (no shared file cursor), so a reader and the appender never
//! disturb each other.
//!
//! Choosing: [`select_backend`] with [`IoBackendChoice::Auto`] probes io_uring (ring setup plus
//! one NOP round trip). Where that fails — Docker's default seccomp profile blocks
//! `io_uring_setup`, old kernels lack it — the std backend is used and an `info!` line says why.
//! Where it works, appends still bypass the ring on filesystems that cannot take buffered writes
//! asynchronously (ext4), as io_uring would only hand them to a kernel thread
//! ([`WritePath::Auto`], see the `uring` module). An explicit `uring` choice sends every
//! operation through the ring, and if io_uring is unusable that is an error, not a silent
//! fallback.
//!
//! # Failure behaviour
//! Errors are returned as `io::Error`; the partition log adds the path and poisons itself on a
//! failed write or fsync. Short reads past the end of a file are `UnexpectedEof`.
use std::fmt;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

// The file is `std.rs`; the module gets another name so it does not shadow the `std` crate.
#[path = "std.rs"]
pub mod std_backend;
pub mod direct;
pub mod direct_read;
pub mod recycle;
pub mod uring;

pub use direct::DirectBackend;
pub use std_backend::StdBackend;
pub use uring::{UringBackend, WritePath};

/// Opens segment files. Implementations are shared by every partition log of a broker.
pub trait IoBackend: Send + Sync + fmt::Debug {
    /// Short name for logs and metrics: `"std"` or `"io_uring"`.
    fn name(&self) -> &'static str;
    /// Opens `path` read-write, creating it if missing; never truncates.
    fn open(&self, path: &Path) -> io::Result<Box<dyn SegmentFile>>;
    /// Settles, before any segment is opened, whatever the backend decides per log dir.
    fn prepare_dir(&self, _dir: &Path) {}
    /// How appends reach the file: `"pwritev"`, `"io_uring"`, or `"mixed"` when it differs
    /// between the log dirs' filesystems.
    fn append_path(&self) -> &'static str {
        "pwritev"
    }
}

/// One open `.log` file. All offsets are absolute file positions.
// `len` is a fallible stat of the file, not a container size; an `is_empty` would only invite
// callers to ignore the error.
#[allow(clippy::len_without_is_empty)]
pub trait SegmentFile: Send + Sync + fmt::Debug {
    /// Writes the concatenation of `parts` at `pos` (short writes are retried internally).
    /// Taking shared `Bytes` lets an append go from the request buffer to the file with one
    /// vectored write and no copy in user space: a batch is its patched header plus the rest
    /// of the batch as the client sent it.
    fn write_at(&self, pos: u64, parts: &[Bytes]) -> io::Result<()>;
    /// Reads exactly `len` bytes at `pos`; `UnexpectedEof` if the file is shorter. Callers
    /// bound `len` by the known file size before calling.
    fn read_at(&self, pos: u64, len: usize) -> io::Result<bytes::Bytes>;
    /// fdatasync.
    fn sync_data(&self) -> io::Result<()>;
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Where the data ends (for direct-I/O files this can be short of the file's size, see
    /// [`direct`]).
    fn len(&self) -> io::Result<u64>;
    /// A reader is about to read `len` bytes at `pos`. Direct-I/O files, whose appended data is
    /// never in the page cache, start reading the whole range from the device at once
    /// (`POSIX_FADV_WILLNEED`); others do nothing.
    fn will_read(&self, _pos: u64, _len: usize) {}
    /// Whether [`SegmentFile::read_ahead`] does anything (direct-I/O files only).
    fn reads_ahead(&self) -> bool {
        false
    }
    /// For a fetch of `len` bytes at `pos`: a descriptor opened with `O_DIRECT` to read the range
    /// with, instead of sending it from the page cache, when the file's appends bypass the page
    /// cache and most of the range is not there (direct-I/O files, see [`direct_read`]). `None`:
    /// send it with `sendfile`.
    fn direct_reader(&self, _pos: u64, _len: usize) -> Option<Arc<File>> {
        None
    }
    /// For reading ahead, with `O_DIRECT`, of a reader that has read up to `pos`: where the
    /// `len` bytes from `pos` are data not in the page cache of a file whose appends bypass it
    /// (direct-I/O files), the descriptor to read them with and how many of them there are so
    /// far. `None` where there is nothing to read ahead that way.
    fn direct_ahead(&self, _pos: u64, _len: usize) -> Option<(Arc<File>, u64)> {
        None
    }
    /// How many times the file was cut short (`set_len`): bytes read before a cut may differ
    /// from the bytes behind the same position afterwards, all others stay as they were.
    fn truncations(&self) -> u64 {
        0
    }
    /// A reader has read up to `pos` and will likely read on: direct-I/O files start reading
    /// what follows from the device, so that the reader's next fetch finds it in the page cache.
    /// Can wait for the device's queue, so callers run it off the async runtime.
    fn read_ahead(&self, _pos: u64) {}
    /// Makes the file end where its data ends, for a clean shutdown: direct-I/O files pad their
    /// last block with zeros while appends go on. A no-op for buffered files.
    fn seal(&self) -> io::Result<()> {
        Ok(())
    }
    /// The open file itself, for reads that bypass the backend: `sendfile(2)` of fetched
    /// ranges and small positional reads on the calling thread (see [`FileSlice`]).
    fn std_file(&self) -> &File;
    /// Drops the clean pages of the file from `from` to its end out of the page cache
    /// (`POSIX_FADV_DONTNEED`), so that the next reads of them come from the disk. Recovery does
    /// this when the page cache and the disk disagree (see `segment.rs`, "Recovery").
    fn drop_cached(&self, from: u64) {
        use std::os::fd::AsRawFd;
        let Ok(at) = libc::off_t::try_from(from) else { return };
        // SAFETY: plain syscall on an open descriptor; no memory is passed. A failure leaves
        // the pages cached, and the scan that follows reads what it read before.
        unsafe { libc::posix_fadvise(self.std_file().as_raw_fd(), at, 0, libc::POSIX_FADV_DONTNEED) };
    }
}

/// A byte range of one segment's `.log` file that holds the file open: what a fetch response
/// sends with `sendfile(2)` straight from the page cache instead of copying it through user
/// space. The range lay inside the file when the slice was made, on batch boundaries.
///
/// A slice outlives the segment that made it: a segment deleted by retention (or replaced by
/// the cleaner) stays readable through the slice's open file until the slice is dropped. A
/// truncation of the same file (recovery, never while serving) could shorten it; readers then
/// get `UnexpectedEof` rather than other bytes.
#[derive(Clone)]
pub struct FileSlice {
    file: Arc<dyn SegmentFile>,
    pos: u64,
    len: usize,
}

impl FileSlice {
    pub fn new(file: Arc<dyn SegmentFile>, pos: u64, len: usize) -> FileSlice {
        FileSlice { file, pos, len }
    }

    /// Position of the first byte in the file.
    pub fn position(&self) -> u64 {
        self.pos
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The open file (for `sendfile(2)`).
    pub fn file(&self) -> &File {
        self.file.std_file()
    }

    /// Says the slice is about to be sent (see [`SegmentFile::will_read`]).
    pub fn will_read(&self) {
        self.file.will_read(self.pos, self.len);
    }

    /// Whether [`FileSlice::read_ahead`] does anything.
    pub fn reads_ahead(&self) -> bool {
        self.file.reads_ahead()
    }

    /// The descriptor to read the slice with directly, if it should be (see
    /// [`SegmentFile::direct_reader`]).
    pub fn direct_reader(&self) -> Option<Arc<File>> {
        self.file.direct_reader(self.pos, self.len)
    }

    /// What the reader of this slice would fetch next, to read ahead with `O_DIRECT` (see
    /// [`SegmentFile::direct_ahead`]): the descriptor and how many bytes, at most `len`, follow.
    pub fn direct_ahead(&self, len: usize) -> Option<(Arc<File>, u64)> {
        self.file.direct_ahead(self.pos + self.len as u64, len)
    }

    /// See [`SegmentFile::truncations`].
    pub fn truncations(&self) -> u64 {
        self.file.truncations()
    }

    /// Says the slice was sent and its reader will likely read on (see
    /// [`SegmentFile::read_ahead`]; blocking).
    pub fn read_ahead(&self) {
        self.file.read_ahead(self.pos + self.len as u64);
    }

    /// Appends the slice's bytes to `buf` with one positional read on the calling thread: a
    /// small range costs less this way than a round trip through an io_uring thread.
    pub fn read_into(&self, buf: &mut BytesMut) -> io::Result<()> {
        let at = buf.len();
        buf.resize(at + self.len, 0);
        let r = self.file.std_file().read_exact_at(&mut buf[at..], self.pos);
        if r.is_err() {
            buf.truncate(at);
        }
        r
    }

    /// The slice's bytes in a buffer of their own.
    pub fn to_bytes(&self) -> io::Result<Bytes> {
        let mut buf = BytesMut::with_capacity(self.len);
        self.read_into(&mut buf)?;
        Ok(buf.freeze())
    }
}

impl fmt::Debug for FileSlice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FileSlice({:?} @ {}+{})", self.file, self.pos, self.len)
    }
}

/// Reserves disk blocks for `len` bytes at `pos` without changing the file's size
/// (`fallocate(FALLOC_FL_KEEP_SIZE)`): the blocks sit past the end of the file, invisible to
/// readers, until appends reach them. Used by segments as they grow; see
/// [`super::segment::Segment`]. `EOPNOTSUPP` where the filesystem cannot do it.
pub fn preallocate(file: &File, pos: u64, len: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let (Ok(pos), Ok(len)) = (libc::off_t::try_from(pos), libc::off_t::try_from(len)) else {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    };
    // SAFETY: plain syscall on an open descriptor; no memory is passed.
    let r = unsafe { libc::fallocate(file.as_raw_fd(), libc::FALLOC_FL_KEEP_SIZE, pos, len) };
    if r == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// Value of the `log.io.backend` config key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IoBackendChoice {
    #[default]
    Auto,
    Uring,
    Std,
}

/// An unknown `log.io.backend` value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("log.io.backend = {0:?} is not valid; expected one of \"auto\", \"uring\", \"std\"")]
pub struct ParseIoBackendError(pub String);

impl FromStr for IoBackendChoice {
    type Err = ParseIoBackendError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(IoBackendChoice::Auto),
            "uring" | "io_uring" => Ok(IoBackendChoice::Uring),
            "std" => Ok(IoBackendChoice::Std),
            _ => Err(ParseIoBackendError(s.to_string())),
        }
    }
}

/// Builds the backend for `choice`; see the module doc for the fallback rules.
pub fn select_backend(choice: IoBackendChoice) -> io::Result<Arc<dyn IoBackend>> {
    match choice {
        IoBackendChoice::Std => {
            tracing::info!(backend = "std", "log I/O backend: std (configured)");
            Ok(Arc::new(StdBackend))
        }
        IoBackendChoice::Uring => {
            let b = UringBackend::new(WritePath::Ring)?;
            tracing::info!(backend = "io_uring", "log I/O backend: io_uring for every operation (configured)");
            Ok(Arc::new(b))
        }
        IoBackendChoice::Auto => match UringBackend::new(WritePath::Auto) {
            Ok(b) => {
                tracing::info!(backend = "io_uring", "log I/O backend: io_uring (probe succeeded)");
                Ok(Arc::new(b))
            }
            Err(e) => {
                tracing::info!(
                    backend = "std",
                    error = %e,
                    "log I/O backend: std, because the io_uring probe failed"
                );
                Ok(Arc::new(StdBackend))
            }
        },
    }
}

/// Every backend usable on this machine, for tests that must run against each one.
#[cfg(test)]
pub(crate) fn test_backends() -> Vec<Arc<dyn IoBackend>> {
    let mut v: Vec<Arc<dyn IoBackend>> = vec![Arc::new(StdBackend)];
    for writes in [WritePath::Ring, WritePath::Auto] {
        match UringBackend::new(writes) {
            Ok(b) => v.push(Arc::new(b)),
            Err(e) => eprintln!("io_uring unavailable here, testing std only: {e}"),
        }
    }
    // Direct appends over the portable backend, every append direct (the tests' batches are
    // small), and over the default backend as configured (small appends buffered).
    let (portable, default) = (Arc::clone(&v[0]), Arc::clone(&v[v.len() - 1]));
    v.push(Arc::new(DirectBackend::with_threshold(portable, 0)));
    v.push(Arc::new(DirectBackend::new(default)));
    v
}

/// What a [`hooked`] backend's files run before each write and each fsync (tests: a gate that
/// holds them as a slow device would, a count, an injected failure).
#[cfg(test)]
pub(crate) trait IoHooks: std::fmt::Debug + Send + Sync {
    /// Before a write of `len` bytes.
    fn before_write(&self, _len: usize) {}
    /// Before an fsync; an error fails it.
    fn before_sync(&self) -> io::Result<()> {
        Ok(())
    }
}

/// A backend over [`StdBackend`] whose files run `hooks` before their writes and fsyncs (tests).
#[cfg(test)]
pub(crate) fn hooked(hooks: Arc<dyn IoHooks>) -> Arc<dyn IoBackend> {
    Arc::new(Hooked(hooks))
}

#[cfg(test)]
#[derive(Debug)]
struct Hooked(Arc<dyn IoHooks>);

#[cfg(test)]
#[derive(Debug)]
struct HookedFile(Box<dyn SegmentFile>, Arc<dyn IoHooks>);

#[cfg(test)]
impl IoBackend for Hooked {
    fn name(&self) -> &'static str {
        "hooked"
    }
    fn open(&self, path: &Path) -> io::Result<Box<dyn SegmentFile>> {
        Ok(Box::new(HookedFile(StdBackend.open(path)?, Arc::clone(&self.0))))
    }
}

#[cfg(test)]
impl SegmentFile for HookedFile {
    fn write_at(&self, pos: u64, parts: &[Bytes]) -> io::Result<()> {
        self.1.before_write(parts.iter().map(Bytes::len).sum());
        self.0.write_at(pos, parts)
    }
    fn read_at(&self, pos: u64, len: usize) -> io::Result<Bytes> {
        self.0.read_at(pos, len)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.1.before_sync()?;
        self.0.sync_data()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
    fn len(&self) -> io::Result<u64> {
        self.0.len()
    }
    fn std_file(&self) -> &File {
        self.0.std_file()
    }
}

/// Hooks whose writes of `from` bytes or more wait while the gate is closed, as a write to a
/// slow device would (tests). A held write gives up waiting after 10 s, so that a test whose
/// runtime thread it blocks fails instead of hanging.
#[cfg(test)]
#[derive(Debug)]
pub(crate) struct WriteGate {
    from: usize,
    /// (closed, writes waiting now, writes that gave up waiting)
    state: parking_lot::Mutex<(bool, usize, usize)>,
    changed: parking_lot::Condvar,
}

#[cfg(test)]
impl WriteGate {
    /// A closed gate for writes of `from` bytes or more.
    pub(crate) fn closed_from(from: usize) -> Arc<WriteGate> {
        Arc::new(WriteGate { from, state: parking_lot::Mutex::new((true, 0, 0)), changed: parking_lot::Condvar::new() })
    }
    /// A backend whose files' writes pass this gate.
    pub(crate) fn backend(self: &Arc<Self>) -> Arc<dyn IoBackend> {
        hooked(Arc::clone(self) as Arc<dyn IoHooks>)
    }
    pub(crate) fn open(&self) {
        self.state.lock().0 = false;
        self.changed.notify_all();
    }
    /// Writes waiting at the gate now, and writes that gave up waiting.
    pub(crate) fn counts(&self) -> (usize, usize) {
        let st = self.state.lock();
        (st.1, st.2)
    }
}

#[cfg(test)]
impl IoHooks for WriteGate {
    fn before_write(&self, len: usize) {
        if len < self.from {
            return;
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut st = self.state.lock();
        st.1 += 1;
        while st.0 {
            if self.changed.wait_until(&mut st, deadline).timed_out() {
                st.2 += 1;
                break;
            }
        }
        st.1 -= 1;
    }
}

/// Whether each page of the file is resident in the page cache (mmap + mincore; tests).
#[cfg(test)]
pub(crate) fn residency(file: &File) -> Vec<bool> {
    use std::os::fd::AsRawFd;
    let len = file.metadata().unwrap().len() as usize;
    let page = 4096;
    // SAFETY: a shared read-only mapping of an open file, unmapped before returning; mincore
    // writes one byte per page into a vector of exactly that many bytes.
    unsafe {
        let map = libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, file.as_raw_fd(), 0);
        assert_ne!(map, libc::MAP_FAILED);
        let mut vec = vec![0u8; len.div_ceil(page)];
        assert_eq!(libc::mincore(map, len, vec.as_mut_ptr()), 0);
        libc::munmap(map, len);
        vec.iter().map(|&b| b & 1 == 1).collect()
    }
}

/// A yes/no property of each filesystem holding log dirs (by `st_dev`), found by a probe the
/// first time a file or dir on it is seen: whether O_DIRECT writes work there, whether io_uring
/// completes buffered writes inline.
#[derive(Debug, Default)]
pub(crate) struct PerFilesystem(parking_lot::Mutex<std::collections::HashMap<u64, bool>>);

impl PerFilesystem {
    /// The answer for filesystem `dev`, running `probe` if it is the first time (under the lock,
    /// so each filesystem is probed once).
    pub(crate) fn get(&self, dev: u64, probe: impl FnOnce() -> bool) -> bool {
        *self.0.lock().entry(dev).or_insert_with(probe)
    }

    /// Which answers there are so far: (any yes, any no).
    pub(crate) fn answers(&self) -> (bool, bool) {
        let known = self.0.lock();
        (known.values().any(|&y| y), known.values().any(|&y| !y))
    }

    #[cfg(test)]
    pub(crate) fn set(&self, dev: u64, yes: bool) {
        self.0.lock().insert(dev, yes);
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.0.lock().is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_choice_parses_config_values() {
        assert_eq!("auto".parse::<IoBackendChoice>(), Ok(IoBackendChoice::Auto));
        assert_eq!("URING".parse::<IoBackendChoice>(), Ok(IoBackendChoice::Uring));
        assert_eq!("std".parse::<IoBackendChoice>(), Ok(IoBackendChoice::Std));
        assert!("mmap".parse::<IoBackendChoice>().is_err());
    }

    #[test]
    fn auto_selection_always_yields_a_backend() {
        let b = select_backend(IoBackendChoice::Auto).unwrap();
        assert!(["std", "io_uring"].contains(&b.name()));
    }

    #[test]
    fn every_backend_round_trips_positional_io() {
        for backend in test_backends() {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("f.log");
            let f = backend.open(&path).unwrap();
            assert_eq!(f.len().unwrap(), 0);
            f.write_at(0, &[Bytes::from_static(b"hello world")]).unwrap();
            f.write_at(6, &[Bytes::from_static(b"WORLD")]).unwrap();
            assert_eq!(&f.read_at(0, 11).unwrap()[..], b"hello WORLD");
            assert_eq!(f.read_at(3, 0).unwrap().len(), 0);
            assert_eq!(
                f.read_at(5, 100).unwrap_err().kind(),
                io::ErrorKind::UnexpectedEof,
                "{}",
                backend.name()
            );
            f.sync_data().unwrap();
            f.set_len(5).unwrap();
            assert_eq!(f.len().unwrap(), 5);
            let big = Bytes::from(vec![7u8; 3 << 20]);
            f.write_at(5, std::slice::from_ref(&big)).unwrap();
            assert_eq!(f.read_at(5, big.len()).unwrap().len(), big.len());
            f.seal().unwrap(); // a direct-I/O file would otherwise keep its last block's padding
            drop(f);
            let f = backend.open(&path).unwrap();
            assert_eq!(f.len().unwrap(), 5 + (3 << 20), "reopen must not truncate");
        }
    }

    #[test]
    fn every_backend_writes_many_parts_in_order() {
        // More parts than one pwritev/writev takes (IOV_MAX 1024), of uneven sizes, some empty.
        let parts: Vec<Bytes> = (0..2500u32).map(|i| Bytes::from(vec![(i % 251) as u8; (i % 7) as usize * 97])).collect();
        let expected: Vec<u8> = parts.iter().flat_map(|p| p.iter().copied()).collect();
        for backend in test_backends() {
            let dir = tempfile::tempdir().unwrap();
            let f = backend.open(&dir.path().join("f.log")).unwrap();
            f.write_at(0, &[Bytes::from_static(b"head")]).unwrap();
            f.write_at(4, &parts).unwrap();
            f.write_at(4, &[]).unwrap();
            assert_eq!(f.len().unwrap(), 4 + expected.len() as u64, "{}", backend.name());
            let back = f.read_at(4, expected.len()).unwrap();
            assert!(back[..] == expected[..], "{}: bytes differ", backend.name());
        }
    }
}
