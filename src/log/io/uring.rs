//! io_uring backend: every thread that does segment I/O owns a small ring of its own.
//!
//! ```text
//!  calling thread (tokio worker, flusher, cleaner, ...)
//!    write_at/read_at/sync_data --> push one SQE on this thread's ring
//!                                   io_uring_enter(submit 1, wait 1)
//!                               <-- reap its CQE; short I/O is resubmitted for the rest
//! ```
//! Operations are synchronous for the caller (segment writes are page-cache writes), so the
//! ring lives where the caller runs: no storage thread and no channel in between. An earlier
//! design sent every operation to one storage thread that owned a ring; each append then woke
//! that thread and was woken back by it, on top of the kernel's own worker, and on ext4 (which
//! hands buffered writes to an `iou-wrk` kernel thread) that cost about twice the broker CPU per
//! GiB of the std backend on 16 KiB batches (see bench/METHOD.md, "I/O backends: io_uring and std").
//!
//! # Buffered writes the kernel cannot take asynchronously
//! io_uring completes a buffered write inline only where the filesystem has a non-blocking
//! buffered write path (XFS and btrfs on 6.x kernels). Elsewhere (ext4, tmpfs) it hands every
//! such write to an `iou-wrk` kernel thread, which does the same page-cache copy a `pwritev`
//! would, plus two context switches. [`WritePath::Auto`] (the `auto` backend choice) probes
//! each filesystem once, with a one-byte `pwritev2(RWF_NOWAIT)` to a scratch file: where that
//! answers `EOPNOTSUPP`, appends are written with `pwritev` on the calling thread and only reads
//! and fsyncs use the ring. [`WritePath::Ring`] (an explicit `uring` choice) sends everything
//! through the ring.
//!
//! Rings are set up with `SINGLE_ISSUER | DEFER_TASKRUN` where the kernel has them (6.1+):
//! completion work then runs inside the caller's own `io_uring_enter` instead of interrupting
//! it. Older kernels get a plain ring.
//!
//! # Invariants
//! - At most one operation is in flight per ring, and the call that submitted it does not
//!   return until its completion is reaped, so the buffers and iovecs the SQE points at (the
//!   caller's `Bytes`, this frame's vectors) outlive the kernel's use of them.
//! - The file descriptor stays open for the same reason: the caller holds the `SegmentFile`.
//!
//! # Failure behaviour
//! A thread whose ring cannot be set up (a memlock limit on an old kernel, say) does its I/O
//! with the std backend's positional calls and logs that once per thread; the broker keeps
//! working. A ring whose `io_uring_enter` fails before taking the operation returns the error;
//! one that fails after taking it keeps waiting for the completion rather than give up buffers
//! the kernel may still read.
use std::cell::RefCell;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

use bytes::Bytes;
use io_uring::{opcode, squeue, types, IoUring};

use super::std_backend::pwritev_all;
use super::{IoBackend, PerFilesystem, SegmentFile};

/// One operation is in flight at a time; a few spare entries cost nothing.
const RING_ENTRIES: u32 = 8;
/// Largest single read handed to the kernel; longer reads complete as short I/O and
/// are resubmitted for the remainder.
const MAX_CHUNK: usize = 1 << 30;
/// Most iovecs one `writev` takes (Linux `UIO_MAXIOV`); a longer write completes short and is
/// resubmitted for the rest.
const IOV_MAX: usize = 1024;

/// This thread's ring.
// One per thread, in a thread-local: boxing the ring would save nothing.
#[allow(clippy::large_enum_variant)]
enum Ring {
    /// Not set up yet, or discarded after a failed submission; set up on next use.
    Untried,
    Ready(IoUring),
    /// Setup failed on this thread; its I/O uses positional syscalls.
    Unavailable,
}

thread_local! {
    static RING: RefCell<Ring> = const { RefCell::new(Ring::Untried) };
}

/// A ring with deferred, caller-run completion work where the kernel supports it.
fn new_ring() -> io::Result<IoUring> {
    IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(RING_ENTRIES)
        .or_else(|_| IoUring::builder().setup_coop_taskrun().build(RING_ENTRIES))
        .or_else(|_| IoUring::new(RING_ENTRIES))
}

/// Runs `f` with this thread's ring, setting it up on first use; `None` if it cannot be.
fn with_ring<R>(f: impl FnOnce(&mut Ring) -> R) -> Option<R> {
    RING.with(|cell| {
        let mut ring = cell.borrow_mut();
        if let Ring::Untried = *ring {
            *ring = match new_ring() {
                Ok(r) => Ring::Ready(r),
                Err(e) => {
                    tracing::warn!(
                        thread = std::thread::current().name().unwrap_or("unnamed"),
                        error = %e,
                        "io_uring ring setup failed on this thread; its segment I/O uses positional syscalls"
                    );
                    Ring::Unavailable
                }
            };
        }
        match *ring {
            Ring::Unavailable => None,
            _ => Some(f(&mut ring)),
        }
    })
}

/// Submits `sqe` and waits for its completion; returns the CQE result (negative errno on
/// failure, as the kernel reports it).
fn submit_one(state: &mut Ring, sqe: &squeue::Entry) -> io::Result<i32> {
    let Ring::Ready(ring) = state else {
        return Err(io::Error::other("io_uring ring was discarded after a failed submission"));
    };
    // SAFETY: whatever `sqe` points at is kept alive by the caller until this function returns,
    // and it returns only once the completion is reaped or the kernel never took the entry.
    unsafe { ring.submission().push(sqe) }.map_err(|_| io::Error::other("io_uring submission queue full"))?;
    loop {
        match ring.submit_and_wait(1) {
            // The entry is taken; the wait may still have ended early (a signal).
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if ring.submission().is_empty() => {
                // Taken earlier, and only the wait failed: keep waiting, as the kernel may
                // still be reading the caller's buffers.
                tracing::warn!(error = %e, "io_uring wait failed; waiting again");
                std::thread::yield_now();
            }
            Err(e) => {
                // Never taken. A queued entry cannot be withdrawn, so drop the ring with it
                // (the kernel never saw the entry); the next operation sets up a new one.
                *state = Ring::Untried;
                return Err(e);
            }
        }
        if let Some(cqe) = ring.completion().next() {
            return Ok(cqe.result());
        }
    }
}

/// How the io_uring backend writes; see the module doc.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WritePath {
    /// Through the ring where the filesystem takes buffered writes asynchronously, else
    /// `pwritev` on the calling thread.
    Auto,
    /// Always through the ring.
    Ring,
}

/// io_uring-backed [`IoBackend`]; see the module doc.
#[derive(Debug)]
pub struct UringBackend {
    writes: WritePath,
    /// Per filesystem (`st_dev`): whether buffered writes complete inside io_uring.
    async_writes: PerFilesystem,
}

impl UringBackend {
    /// Proves io_uring works here (a ring on this thread and one NOP round trip).
    pub fn new(writes: WritePath) -> io::Result<UringBackend> {
        let nop = opcode::Nop::new().build().user_data(0x5eed);
        match with_ring(|ring| submit_one(ring, &nop)) {
            Some(Ok(r)) if r >= 0 => Ok(UringBackend { writes, async_writes: PerFilesystem::default() }),
            Some(Ok(r)) => Err(io::Error::other(format!("io_uring probe NOP failed: result {r}"))),
            Some(Err(e)) => Err(e),
            None => Err(new_ring().err().unwrap_or_else(|| io::Error::other("io_uring ring setup failed"))),
        }
    }
}

impl IoBackend for UringBackend {
    fn name(&self) -> &'static str {
        "io_uring"
    }

    fn open(&self, path: &Path) -> io::Result<Box<dyn SegmentFile>> {
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)?;
        let ring_writes = match self.writes {
            WritePath::Ring => true,
            WritePath::Auto => self.ring_writes_on(file.metadata()?.dev(), path.parent().unwrap_or(Path::new("."))),
        };
        Ok(Box::new(UringSegmentFile { file, ring_writes }))
    }

    fn prepare_dir(&self, dir: &Path) {
        if let (WritePath::Auto, Ok(meta)) = (self.writes, std::fs::metadata(dir)) {
            self.ring_writes_on(meta.dev(), dir);
        }
    }

    fn append_path(&self) -> &'static str {
        if self.writes == WritePath::Ring {
            return "io_uring";
        }
        match self.async_writes.answers() {
            (true, true) => "mixed",
            (true, false) => "io_uring",
            _ => "pwritev",
        }
    }
}

impl UringBackend {
    /// Whether appends on filesystem `dev` (holding `dir`) go through the ring; probed once per
    /// filesystem, see [`async_buffered_writes`].
    fn ring_writes_on(&self, dev: u64, dir: &Path) -> bool {
        self.async_writes.get(dev, || {
            let yes = async_buffered_writes(dir);
            tracing::info!(
                dir = %dir.display(),
                async_buffered_writes = yes,
                "io_uring: segment writes on this filesystem go {}",
                if yes { "through the ring" } else { "inline with pwritev (io_uring would hand each to a kernel worker)" }
            );
            yes
        })
    }
}

/// Whether the filesystem holding `dir` takes buffered writes without blocking, so io_uring
/// completes them inline: a one-byte `pwritev2(RWF_NOWAIT)` to a scratch file. `EOPNOTSUPP`
/// means no; any other failure to probe answers yes (the ring works either way).
fn async_buffered_writes(dir: &Path) -> bool {
    let probe = dir.join(format!(".sluice-nowait-probe-{}", std::process::id()));
    let Ok(file) = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&probe) else {
        return true;
    };
    let r = rustix::io::pwritev2(&file, &[io::IoSlice::new(b"x")], 0, rustix::io::ReadWriteFlags::NOWAIT);
    drop(file);
    let _ = std::fs::remove_file(&probe);
    !matches!(r, Err(rustix::io::Errno::OPNOTSUPP))
}

#[derive(Debug)]
struct UringSegmentFile {
    file: File,
    /// Appends go through the ring (else `pwritev` on the calling thread; see the module doc).
    ring_writes: bool,
}

fn cqe_error(result: i32) -> Option<io::Error> {
    (result < 0).then(|| io::Error::from_raw_os_error(-result))
}

fn retryable(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock)
}

/// Bytes a read or write completion moved: 0 for a retryable error (the caller resubmits the
/// rest), `zero` as an error when the kernel moved nothing.
fn transferred(result: i32, zero: io::ErrorKind, what: &'static str) -> io::Result<usize> {
    match cqe_error(result) {
        Some(e) if retryable(&e) => Ok(0),
        Some(e) => Err(e),
        None if result == 0 => Err(io::Error::new(zero, what)),
        None => Ok(result as usize),
    }
}

impl UringSegmentFile {
    fn fd(&self) -> types::Fd {
        types::Fd(self.file.as_raw_fd())
    }

    fn write_with(&self, ring: &mut Ring, pos: u64, parts: &[Bytes], total: usize) -> io::Result<()> {
        let mut iov: Vec<libc::iovec> = Vec::with_capacity(parts.len().min(IOV_MAX));
        let mut done = 0usize;
        while done < total {
            iov.clear();
            let mut skip = done;
            for part in parts {
                if skip >= part.len() {
                    skip -= part.len();
                    continue;
                }
                if iov.len() == IOV_MAX {
                    break;
                }
                let rest = &part[skip..];
                skip = 0;
                iov.push(libc::iovec { iov_base: rest.as_ptr() as *mut libc::c_void, iov_len: rest.len() });
            }
            let sqe = opcode::Writev::new(self.fd(), iov.as_ptr(), iov.len() as u32).offset(pos + done as u64).build();
            done += transferred(submit_one(ring, &sqe)?, io::ErrorKind::WriteZero, "io_uring write returned 0")?;
        }
        Ok(())
    }

    fn read_with(&self, ring: &mut Ring, pos: u64, buf: &mut [u8]) -> io::Result<()> {
        let mut done = 0usize;
        while done < buf.len() {
            let len = (buf.len() - done).min(MAX_CHUNK) as u32;
            let sqe = opcode::Read::new(self.fd(), buf[done..].as_mut_ptr(), len).offset(pos + done as u64).build();
            done += transferred(submit_one(ring, &sqe)?, io::ErrorKind::UnexpectedEof, "read past end of file")?;
        }
        Ok(())
    }

    fn sync_with(&self, ring: &mut Ring) -> io::Result<()> {
        let sqe = opcode::Fsync::new(self.fd()).flags(types::FsyncFlags::DATASYNC).build();
        loop {
            match cqe_error(submit_one(ring, &sqe)?) {
                Some(e) if retryable(&e) => continue,
                Some(e) => return Err(e),
                None => return Ok(()),
            }
        }
    }
}

impl SegmentFile for UringSegmentFile {
    fn write_at(&self, pos: u64, parts: &[Bytes]) -> io::Result<()> {
        let total = parts.iter().map(Bytes::len).sum();
        if total == 0 {
            return Ok(());
        }
        if !self.ring_writes {
            return pwritev_all(&self.file, pos, parts);
        }
        with_ring(|ring| self.write_with(ring, pos, parts, total)).unwrap_or_else(|| pwritev_all(&self.file, pos, parts))
    }

    fn read_at(&self, pos: u64, len: usize) -> io::Result<bytes::Bytes> {
        if len == 0 {
            return Ok(bytes::Bytes::new());
        }
        let mut buf = vec![0u8; len];
        with_ring(|ring| self.read_with(ring, pos, &mut buf)).unwrap_or_else(|| self.file.read_exact_at(&mut buf, pos))?;
        Ok(bytes::Bytes::from(buf))
    }

    fn sync_data(&self) -> io::Result<()> {
        with_ring(|ring| self.sync_with(ring)).unwrap_or_else(|| self.file.sync_data())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn std_file(&self) -> &File {
        &self.file
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn the_write_probe_answers_and_leaves_no_file_behind() {
        let dir = tempfile::tempdir().unwrap();
        let _ = async_buffered_writes(dir.path());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        // An unwritable place answers "through the ring" rather than failing.
        assert!(async_buffered_writes(&dir.path().join("missing")));
    }

    #[test]
    fn the_append_path_follows_the_probe_of_each_prepared_log_dir() {
        let dir = tempfile::tempdir().unwrap();
        let Ok(auto) = UringBackend::new(WritePath::Auto) else { return };
        assert_eq!(auto.append_path(), "pwritev", "nothing probed yet");
        auto.prepare_dir(dir.path());
        let expected = if async_buffered_writes(dir.path()) { "io_uring" } else { "pwritev" };
        assert_eq!(auto.append_path(), expected);
        // Another filesystem answering the other way makes it mixed.
        auto.async_writes.set(u64::MAX, expected == "pwritev");
        assert_eq!(auto.append_path(), "mixed");
        let ring = UringBackend::new(WritePath::Ring).unwrap();
        ring.prepare_dir(dir.path());
        assert_eq!(ring.append_path(), "io_uring");
        assert!(ring.async_writes.is_empty(), "an explicit ring backend does not probe");
    }

    #[test]
    fn each_thread_gets_its_own_ring() {
        let b = Arc::new(UringBackend::new(WritePath::Ring).unwrap());
        let dir = tempfile::tempdir().unwrap();
        let f: Arc<dyn SegmentFile> = Arc::from(b.open(&dir.path().join("f.log")).unwrap());
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let f = f.clone();
                std::thread::spawn(move || {
                    for i in 0..200u64 {
                        let at = (t * 200 + i) * 8;
                        f.write_at(at, &[Bytes::copy_from_slice(&at.to_le_bytes())]).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        f.sync_data().unwrap();
        let all = f.read_at(0, 800 * 8).unwrap();
        for (i, chunk) in all.chunks(8).enumerate() {
            assert_eq!(u64::from_le_bytes(chunk.try_into().unwrap()), i as u64 * 8);
        }
    }
}
