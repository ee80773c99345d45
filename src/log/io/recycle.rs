//! Giving back the page-cache pages of appended data once it is well behind the end of the log
//! (with `log.io.direct=true`; see [`super::direct`]).
//!
//! # Why
//! Some appends still go through the page cache with direct appends on: small ones (a Java
//! producer's 16 KiB batches), and those to a file a reader follows. Left alone, the page cache
//! grows by every such byte, and on the bench VM a fresh page-cache page costs a host fault (the
//! guest hands freed memory back to the host: virtio-balloon free page reporting). Written back
//! and dropped behind the writer, the pages are freed and the next appends reuse them. A test
//! program writing 1 GiB in 16 KiB writes, three alternating pairs, after the guest's free
//! memory had been handed back: 2.65-3.49 CPU s/GiB left alone (0.41-0.52 with memory still
//! backed), 0.66-0.73 with every 8 MiB written back and dropped 16 MiB behind, 0.20 of which the
//! calls below.
//!
//! # How
//! A direct file hands [`hand_over`] a range of itself that ends [`super::direct::RECYCLE_BEHIND`]
//! behind the data's end, once it is [`super::direct::RECYCLE_STEP`] long and holds bytes appended
//! through the page cache. One thread, started on first use, takes the ranges in order: it starts
//! the range's writeback and waits for it (`sync_file_range`), then drops the range's clean pages
//! (`POSIX_FADV_DONTNEED`). Pages a reader holds (a `sendfile` in flight) stay until it lets go.
//! A reader near the end (a consumer following the producer) reads pages this never drops; one
//! further behind reads the device, as it does for directly appended data.
//!
//! # Failure behaviour
//! Each range is worked on through a descriptor the thread opens itself, so that a writeback error
//! it sees is still reported to the log's own next fsync (the kernel tracks those per open file
//! description); the thread logs it at `warn!`. A file that can no longer be opened (deleted by
//! retention) is skipped. With [`QUEUED_MAX`] ranges waiting (a slow device), [`hand_over`]
//! refuses and the caller offers the range again with its next append. If the thread cannot
//! start, nothing is dropped and the kernel reclaims the pages as it would anyway.
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::OnceLock;

/// Ranges waiting for the thread at most: each is a few MiB of writeback.
pub const QUEUED_MAX: usize = 64;

struct Range {
    path: PathBuf,
    from: u64,
    to: u64,
}

static QUEUE: OnceLock<Option<mpsc::SyncSender<Range>>> = OnceLock::new();

fn start() -> Option<mpsc::SyncSender<Range>> {
    let (tx, rx) = mpsc::sync_channel::<Range>(QUEUED_MAX);
    let spawned = std::thread::Builder::new().name("sluice-log-recycle".into()).spawn(move || {
        for range in rx {
            recycle(&range);
        }
    });
    match spawned {
        Ok(_) => Some(tx),
        Err(e) => {
            tracing::warn!(error = %e, "could not start the page-cache recycling thread; appended pages stay cached");
            None
        }
    }
}

/// Queues `[from, to)` of the file at `path` to be written back and dropped from the page cache;
/// false when the queue is full (or the thread could not start), so that the caller offers the
/// range again later.
pub fn hand_over(path: PathBuf, from: u64, to: u64) -> bool {
    match QUEUE.get_or_init(start) {
        Some(tx) => tx.try_send(Range { path, from, to }).is_ok(),
        None => false,
    }
}

fn recycle(range: &Range) {
    let file = match File::open(&range.path) {
        Ok(f) => f,
        Err(e) => {
            tracing::debug!(path = %range.path.display(), error = %e, "page-cache recycling skipped a file it could not open");
            return;
        }
    };
    let (Ok(from), Ok(len)) = (libc::off64_t::try_from(range.from), libc::off64_t::try_from(range.to - range.from)) else {
        return;
    };
    let fd = file.as_raw_fd();
    let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE | libc::SYNC_FILE_RANGE_WRITE | libc::SYNC_FILE_RANGE_WAIT_AFTER;
    // SAFETY: plain syscalls on a descriptor open for their duration; no memory is passed.
    if unsafe { libc::sync_file_range(fd, from, len, flags) } != 0 {
        let e = std::io::Error::last_os_error();
        tracing::warn!(path = %range.path.display(), from = range.from, to = range.to, error = %e,
            "writing back appended data before dropping it from the page cache failed; the log's next fsync reports it too");
        return;
    }
    // SAFETY: as above. Only a hint: clean pages nobody holds are dropped, others stay.
    unsafe { libc::posix_fadvise(fd, from, len, libc::POSIX_FADV_DONTNEED) };
}
