//! io_uring backend: one dedicated storage thread owns the ring.
//!
//! ```text
//!  caller threads                 storage thread (owns IoUring)
//!  write_at/read_at/sync_data --> channel --> drain every queued op into the SQ
//!        (block on reply)                     submit_and_wait(1)
//!                             <-- reply <--   reap CQEs; short I/O is resubmitted
//! ```
//! Draining the whole channel before one `submit_and_wait` means concurrent callers (many
//! partitions appending at once) share a single syscall. These are page-cache writes, so a
//! blocking reply channel is cheaper than waking an async runtime.
//!
//! # Invariants
//! - An op's buffers are owned by the storage thread from submission until its completion is
//!   reaped; the kernel never sees a pointer into memory that can move or be freed. Writes
//!   hold shared, immutable `Bytes` (the caller's buffers, not copies).
//! - The file descriptor stays open until completion: the caller holds the `SegmentFile`
//!   (which owns the `File`) and blocks until the reply arrives.
//! - If the storage thread is gone, every call fails with `BrokenPipe` instead of hanging.
use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;
use std::sync::mpsc;

use bytes::Bytes;
use io_uring::{opcode, types, IoUring};

use super::{IoBackend, SegmentFile};

const RING_ENTRIES: u32 = 256;
/// Largest single read handed to the kernel; longer reads complete as short I/O and
/// are resubmitted for the remainder.
const MAX_CHUNK: usize = 1 << 30;

/// Most iovecs one `writev` takes (Linux `UIO_MAXIOV`); a longer write completes short and is
/// resubmitted for the rest.
const IOV_MAX: usize = 1024;

enum OpKind {
    /// `iov` is rebuilt for the unwritten remainder at each (re)submission.
    Write { parts: Vec<Bytes>, iov: IoVecs, done: usize, total: usize },
    Read { buf: Vec<u8>, done: usize },
    Fsync,
}

/// The iovecs of a write, pointing into the same op's `parts`.
#[derive(Default)]
struct IoVecs(Vec<libc::iovec>);

// SAFETY: the raw pointers only ever target the `Bytes` owned by the same `Op` (immutable and
// themselves `Send`); the vector is rebuilt on the storage thread before each submission.
unsafe impl Send for IoVecs {}

struct Op {
    fd: RawFd,
    offset: u64,
    kind: OpKind,
    reply: mpsc::Sender<io::Result<Vec<u8>>>,
}

/// io_uring-backed [`IoBackend`]; cheap to clone the files it opens share one storage thread.
#[derive(Debug)]
pub struct UringBackend {
    tx: mpsc::Sender<Op>,
}

impl UringBackend {
    /// Sets up a ring, proves it works with one NOP round trip, then starts the storage thread.
    pub fn new() -> io::Result<UringBackend> {
        let mut ring = IoUring::new(RING_ENTRIES)?;
        probe_nop(&mut ring)?;
        let (tx, rx) = mpsc::channel::<Op>();
        std::thread::Builder::new()
            .name("sluice-uring".into())
            .spawn(move || storage_thread(ring, rx))?;
        Ok(UringBackend { tx })
    }
}

fn probe_nop(ring: &mut IoUring) -> io::Result<()> {
    let nop = opcode::Nop::new().build().user_data(0x5eed);
    // SAFETY: a NOP references no memory; the entry is copied into the SQ by push.
    unsafe { ring.submission().push(&nop) }
        .map_err(|e| io::Error::other(format!("io_uring probe: {e}")))?;
    ring.submit_and_wait(1)?;
    match ring.completion().next() {
        Some(cqe) if cqe.user_data() == 0x5eed && cqe.result() >= 0 => Ok(()),
        Some(cqe) => Err(io::Error::other(format!("io_uring probe NOP failed: result {}", cqe.result()))),
        None => Err(io::Error::other("io_uring probe NOP produced no completion")),
    }
}

impl IoBackend for UringBackend {
    fn name(&self) -> &'static str {
        "io_uring"
    }

    fn open(&self, path: &Path) -> io::Result<Box<dyn SegmentFile>> {
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)?;
        Ok(Box::new(UringSegmentFile { file, tx: self.tx.clone() }))
    }
}

#[derive(Debug)]
struct UringSegmentFile {
    file: File,
    tx: mpsc::Sender<Op>,
}

impl UringSegmentFile {
    fn call(&self, offset: u64, kind: OpKind) -> io::Result<Vec<u8>> {
        let (reply, rx) = mpsc::channel();
        let op = Op { fd: self.file.as_raw_fd(), offset, kind, reply };
        self.tx.send(op).map_err(|_| stopped())?;
        rx.recv().map_err(|_| stopped())?
    }
}

fn stopped() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "io_uring storage thread has stopped")
}

impl SegmentFile for UringSegmentFile {
    fn write_at(&self, pos: u64, parts: &[Bytes]) -> io::Result<()> {
        let total = parts.iter().map(Bytes::len).sum();
        if total == 0 {
            return Ok(());
        }
        // Cloning `Bytes` shares the caller's buffers (no copy); the op keeps them alive until
        // its completion is reaped, and `Bytes` are immutable, so the kernel reads stable memory.
        self.call(pos, OpKind::Write { parts: parts.to_vec(), iov: IoVecs::default(), done: 0, total }).map(|_| ())
    }

    fn read_at(&self, pos: u64, len: usize) -> io::Result<bytes::Bytes> {
        if len == 0 {
            return Ok(bytes::Bytes::new());
        }
        self.call(pos, OpKind::Read { buf: vec![0u8; len], done: 0 }).map(bytes::Bytes::from)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.call(0, OpKind::Fsync).map(|_| ())
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

/// Builds the SQE for the not-yet-done part of `op`.
fn sqe_for(op: &mut Op, slot: usize) -> io_uring::squeue::Entry {
    let fd = types::Fd(op.fd);
    let entry = match &mut op.kind {
        OpKind::Write { parts, iov: IoVecs(iov), done, .. } => {
            iov.clear();
            let mut skip = *done;
            for part in parts.iter() {
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
            // The iovec array and the memory it points at belong to the Op (its `iov` Vec and
            // `parts`), which do not move or change while the Op sits in its slot (see SAFETY
            // at the push site).
            opcode::Writev::new(fd, iov.as_ptr(), iov.len() as u32).offset(op.offset + *done as u64).build()
        }
        OpKind::Read { buf, done } => {
            let len = (buf.len() - *done).min(MAX_CHUNK) as u32;
            opcode::Read::new(fd, buf[*done..].as_mut_ptr(), len).offset(op.offset + *done as u64).build()
        }
        OpKind::Fsync => opcode::Fsync::new(fd).flags(types::FsyncFlags::DATASYNC).build(),
    };
    entry.user_data(slot as u64)
}

fn storage_thread(mut ring: IoUring, rx: mpsc::Receiver<Op>) {
    let mut slots: Vec<Option<Op>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut pending: VecDeque<Op> = VecDeque::new();
    let mut resubmit: Vec<usize> = Vec::new();
    let mut in_flight = 0usize;
    loop {
        if in_flight == 0 && pending.is_empty() {
            match rx.recv() {
                Ok(op) => pending.push_back(op),
                Err(_) => return, // every sender dropped: backend and files are gone
            }
        }
        while let Ok(op) = rx.try_recv() {
            pending.push_back(op);
        }
        // Resubmissions first: they already own a slot.
        let mut queue_full = false;
        while let Some(&slot) = resubmit.last() {
            let Some(op) = slots[slot].as_mut() else {
                resubmit.pop();
                continue;
            };
            let sqe = sqe_for(op, slot);
            // SAFETY: the buffer referenced by the SQE belongs to the Op stored in
            // `slots[slot]`, which is removed only after its completion is reaped.
            if unsafe { ring.submission().push(&sqe) }.is_err() {
                queue_full = true;
                break;
            }
            resubmit.pop();
        }
        // Cap in-flight ops at the ring size so the completion queue cannot overflow.
        while !queue_full && in_flight < RING_ENTRIES as usize {
            let Some(mut op) = pending.pop_front() else { break };
            let slot = free.pop().unwrap_or_else(|| {
                slots.push(None);
                slots.len() - 1
            });
            let sqe = sqe_for(&mut op, slot);
            slots[slot] = Some(op);
            // SAFETY: as above; the Op (and so its heap buffer) now lives in `slots[slot]`
            // until the completion for `slot` is reaped. Moving the Op value into the Vec
            // does not move its buffer's heap allocation.
            if unsafe { ring.submission().push(&sqe) }.is_err() {
                // SQ full: take the op back out; nothing was handed to the kernel.
                if let Some(op) = slots[slot].take() {
                    pending.push_front(op);
                }
                free.push(slot);
                break;
            }
            in_flight += 1;
        }
        if let Err(e) = ring.submit_and_wait(1) {
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            // The ring itself failed: fail everything rather than hang callers.
            tracing::error!(error = %e, "io_uring submit failed; failing queued storage ops");
            for op in slots.iter_mut().filter_map(Option::take) {
                let _ = op.reply.send(Err(io::Error::new(e.kind(), e.to_string())));
            }
            for op in pending.drain(..) {
                let _ = op.reply.send(Err(io::Error::new(e.kind(), e.to_string())));
            }
            return;
        }
        let completions: Vec<(u64, i32)> = ring.completion().map(|c| (c.user_data(), c.result())).collect();
        for (user_data, result) in completions {
            let slot = user_data as usize;
            let Some(op) = slots.get_mut(slot).and_then(Option::as_mut) else { continue };
            let outcome: Option<io::Result<()>> = if result < 0 {
                let err = io::Error::from_raw_os_error(-result);
                if matches!(err.kind(), io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock) {
                    None
                } else {
                    Some(Err(err))
                }
            } else {
                let n = result as usize;
                match &mut op.kind {
                    OpKind::Fsync => Some(Ok(())),
                    OpKind::Write { done, total, .. } => {
                        *done += n;
                        if n == 0 {
                            Some(Err(io::Error::new(io::ErrorKind::WriteZero, "io_uring write returned 0")))
                        } else if *done < *total {
                            None
                        } else {
                            Some(Ok(()))
                        }
                    }
                    OpKind::Read { buf, done } => {
                        *done += n;
                        if n == 0 {
                            Some(Err(io::Error::new(io::ErrorKind::UnexpectedEof, "read past end of file")))
                        } else if *done < buf.len() {
                            None
                        } else {
                            Some(Ok(()))
                        }
                    }
                }
            };
            match outcome {
                None => resubmit.push(slot),
                Some(res) => {
                    if let Some(op) = slots[slot].take() {
                        in_flight -= 1;
                        free.push(slot);
                        let value = res.map(|()| match op.kind {
                            OpKind::Read { buf, .. } => buf,
                            _ => Vec::new(),
                        });
                        let _ = op.reply.send(value);
                    }
                }
            }
        }
    }
}
