//! Background flush of rolled segments.
//!
//! When a partition rolls, the segment it stops writing can still hold up to `segment.bytes`
//! of data that is only in the page cache. Kafka makes it durable from a scheduler thread, not
//! in the produce path; sluice does the same: [`submit`] hands the segment's open files to one
//! flusher thread and returns a [`FlushTicket`] that the partition log keeps. An fsync of a
//! freshly rolled 1 GiB segment takes seconds on a busy disk; done inline it would hold the
//! partition lock, and the runtime thread, for that long.
//!
//! A job first trims the blocks the segment preallocated past its end, then fdatasyncs the
//! `.log` and the indexes, then fsyncs the partition directory (making the new active
//! segment's name durable).
//!
//! # Invariants
//! - A partition log has at most one flush in flight: it waits for its ticket before it rolls
//!   again, truncates, cleans or flushes explicitly. So after the OS itself stops, only the last
//!   two segments of a partition can be incomplete on disk (see `PartitionLog::open_with`).
//! - A job works on open descriptors (only the directory sync opens a path): a segment deleted
//!   or replaced meanwhile is synced, harmlessly, through its old descriptor. The trim only
//!   runs while the file still has the size it had at the roll.
//!
//! # Failure behaviour
//! A failed trim or fsync is logged (`error!` with the path) and kept in the ticket; the
//! partition log poisons itself when it next looks at the ticket (every append checks, without
//! blocking). If the flusher thread cannot be started, jobs run on the caller's thread.
use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, OnceLock};

use parking_lot::{Condvar, Mutex};

use super::checkpoint::sync_dir;
use super::error::LogError;
use super::io::SegmentFile;

/// What makes one rolled segment durable.
#[derive(Debug)]
pub struct FlushJob {
    pub log_path: PathBuf,
    pub file: Arc<dyn SegmentFile>,
    /// The segment's size at the roll: blocks past it are preallocation, given back first.
    pub size: u64,
    /// Index files with writes not yet synced.
    pub indexes: Vec<(PathBuf, File)>,
    /// The partition directory.
    pub dir: PathBuf,
}

impl FlushJob {
    fn run(self) -> Result<(), LogError> {
        let len = self.file.len().map_err(|e| LogError::io(&self.log_path, "stat", e))?;
        if len == self.size {
            // A same-size truncate frees the blocks fallocate reserved past the end.
            self.file
                .set_len(self.size)
                .map_err(|e| LogError::io(&self.log_path, "trim preallocated blocks", e))?;
        }
        let started = std::time::Instant::now();
        self.file.sync_data().map_err(|e| LogError::io(&self.log_path, "fsync", e))?;
        crate::metrics::fsync_completed(started.elapsed());
        for (path, f) in &self.indexes {
            f.sync_data().map_err(|e| LogError::io(path, "fsync index", e))?;
        }
        sync_dir(&self.dir)
    }
}

/// The outcome of one submitted [`FlushJob`], once it has run.
#[derive(Debug, Default)]
pub struct FlushTicket {
    done: AtomicBool,
    result: Mutex<Option<Result<(), LogError>>>,
    finished: Condvar,
}

impl FlushTicket {
    fn complete(&self, r: Result<(), LogError>) {
        *self.result.lock() = Some(r);
        self.done.store(true, Ordering::Release);
        self.finished.notify_all();
    }

    /// Whether the job has run (never blocks).
    pub fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// Blocks until the job has run; true if it succeeded. Leaves the result where it is: the
    /// partition log still settles it (and poisons itself on a failure).
    pub fn wait_ok(&self) -> bool {
        let mut result = self.result.lock();
        while !self.is_done() {
            self.finished.wait(&mut result);
        }
        !matches!(*result, Some(Err(_)))
    }

    /// Blocks until the job has run and returns its result. The result is handed out once;
    /// later calls return `Ok`.
    pub fn wait(&self) -> Result<(), LogError> {
        let mut result = self.result.lock();
        while !self.is_done() {
            self.finished.wait(&mut result);
        }
        result.take().unwrap_or(Ok(()))
    }
}

type Queue = mpsc::Sender<(FlushJob, Arc<FlushTicket>)>;

/// The flusher thread's queue, started on first use; `None` if the thread could not start.
static FLUSHER: OnceLock<Option<Queue>> = OnceLock::new();

fn start_flusher() -> Option<Queue> {
    let (tx, rx) = mpsc::channel::<(FlushJob, Arc<FlushTicket>)>();
    let spawned = std::thread::Builder::new().name("sluice-log-flush".into()).spawn(move || {
        for (job, ticket) in rx {
            ticket.complete(run_logged(job));
        }
    });
    match spawned {
        Ok(_) => Some(tx),
        Err(e) => {
            tracing::warn!(error = %e, "could not start the log flush thread; rolled segments are flushed inline");
            None
        }
    }
}

fn run_logged(job: FlushJob) -> Result<(), LogError> {
    let path = job.log_path.clone();
    let r = job.run();
    if let Err(e) = &r {
        tracing::error!(path = %path.display(), error = %e, "flushing a rolled log segment failed");
    }
    r
}

/// Queues `job` for the flusher thread.
pub fn submit(job: FlushJob) -> Arc<FlushTicket> {
    let ticket = Arc::new(FlushTicket::default());
    let queued = match FLUSHER.get_or_init(start_flusher) {
        Some(tx) => tx.send((job, Arc::clone(&ticket))).map_err(|mpsc::SendError((job, _))| job),
        None => Err(job),
    };
    if let Err(job) = queued {
        ticket.complete(run_logged(job));
    }
    ticket
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use bytes::Bytes;

    use super::*;
    use crate::log::io::{preallocate, test_backends};

    #[test]
    fn flush_job_trims_preallocated_blocks_and_keeps_the_data() {
        for io in test_backends() {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("00000000000000000000.log");
            let file: Arc<dyn SegmentFile> = io.open(&path).unwrap().into();
            file.write_at(0, &[Bytes::from(vec![7u8; 4096])]).unwrap();
            if preallocate(file.std_file(), 4096, 8 << 20).is_err() {
                eprintln!("fallocate unsupported under {}; skipping", dir.path().display());
                return;
            }
            assert!(std::fs::metadata(&path).unwrap().blocks() * 512 >= 8 << 20, "{}: blocks reserved", io.name());
            let job = FlushJob { log_path: path.clone(), file, size: 4096, indexes: Vec::new(), dir: dir.path().into() };
            submit(job).wait().unwrap();
            let meta = std::fs::metadata(&path).unwrap();
            assert_eq!(meta.len(), 4096, "{}", io.name());
            assert!(meta.blocks() * 512 <= 64 << 10, "{}: {} blocks left after the trim", io.name(), meta.blocks());
            assert_eq!(std::fs::read(&path).unwrap(), vec![7u8; 4096]);
        }
    }

    #[test]
    fn flush_job_leaves_a_file_that_changed_size_since_the_roll() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.log");
        let io = &test_backends()[0];
        let file: Arc<dyn SegmentFile> = io.open(&path).unwrap().into();
        file.write_at(0, &[Bytes::from(vec![1u8; 100])]).unwrap();
        // Rolled at 200 bytes but since truncated to 100: trimming to 200 would add zeros.
        let job = FlushJob { log_path: path.clone(), file, size: 200, indexes: Vec::new(), dir: dir.path().into() };
        submit(job).wait().unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 100);
    }

    #[test]
    fn a_failed_flush_is_reported_once_through_the_ticket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.log");
        let file: Arc<dyn SegmentFile> = test_backends()[0].open(&path).unwrap().into();
        let missing = dir.path().join("no-such-directory");
        let job = FlushJob { log_path: path, file, size: 0, indexes: Vec::new(), dir: missing };
        let ticket = submit(job);
        assert!(matches!(ticket.wait(), Err(LogError::Io { op: "open directory", .. })));
        assert!(ticket.is_done());
        assert!(ticket.wait().is_ok(), "the error is handed out once");
    }
}
