//! The log layer's one error type.
use std::io;
use std::path::PathBuf;

use crate::protocol::record_batch::ProduceValidationError;

/// Everything the log layer can fail with. I/O errors keep the path and the operation.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("I/O error during {op} on {}: {source}", path.display())]
    Io {
        path: PathBuf,
        op: &'static str,
        #[source]
        source: io::Error,
    },
    /// On-disk data that cannot be interpreted (and cannot be repaired by truncation here).
    #[error("corrupt log data in {}: {reason}", path.display())]
    Corrupt { path: PathBuf, reason: String },
    #[error("offset {offset} is out of range [{log_start}, {log_end}]")]
    OffsetOutOfRange { offset: i64, log_start: i64, log_end: i64 },
    #[error(transparent)]
    Validation(#[from] ProduceValidationError),
    /// A follower/replica append whose offsets do not continue the log.
    #[error("non-monotonic offsets appending to {}: batch base offset {base_offset} but log end offset is {log_end}", path.display())]
    NonMonotonicOffset { path: PathBuf, base_offset: i64, log_end: i64 },
    /// A write or fsync failed earlier; the in-memory view can no longer be trusted to match
    /// the disk, so the log refuses further appends until it is reopened.
    #[error("partition log {} is poisoned by an earlier write/fsync failure", path.display())]
    Poisoned { path: PathBuf },
    /// A checkpoint or metadata text file that does not parse.
    #[error("malformed {kind} file {}: {reason}", path.display())]
    MalformedFile { path: PathBuf, kind: &'static str, reason: String },
}

impl LogError {
    pub(crate) fn io(path: impl Into<PathBuf>, op: &'static str, source: io::Error) -> LogError {
        LogError::Io { path: path.into(), op, source }
    }
}
