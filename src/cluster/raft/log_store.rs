//! The Raft log and vote on disk, for openraft's `RaftLogStorage`.
//!
//! # On disk (in the quorum's directory)
//! ```text
//! raft-log    frames: u32 length | u32 CRC-32C of the payload | payload (JSON of one LogOp)
//!             LogOp: Append(entry) | Truncate(from index) | Purge(up to log id) | Vote(vote)
//! raft-vote   read only: where releases before the vote moved into raft-log kept it
//! ```
//!
//! # Durability and recovery
//! - An append, truncation, purge or vote is fdatasync'ed before openraft is told it is done
//!   (the flush callback of `append` is called after the fsync, `save_vote` returns after it):
//!   Raft's safety rests on both. The vote is a frame of the log rather than a file of its own
//!   so that saving one costs one fdatasync, not a file fsync, a rename and a directory fsync;
//!   the last `Vote` frame in the file is the vote. A new `raft-log` has its directory synced
//!   before anything is written to it, so a synced frame cannot be lost with the file's name.
//! - Opening replays the frames; a torn or corrupt last frame (a crash mid-write, never
//!   acknowledged) is cut off and logged. A corrupt frame with more bytes after it is an error
//!   naming the file and position: cutting there would drop acknowledged entries.
//! - Once more than [`REWRITE_AFTER_PURGED`] purged entries have accumulated, the file is
//!   rewritten with only the live entries (temp file, fsync, rename, directory fsync).
//!
//! All file I/O runs in `block_in_place`: the metadata log is small and written rarely, and
//! openraft serialises its calls, so the store needs a multi-threaded tokio runtime.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{Entry, LogId, LogState, OptionalSend, RaftLogReader, StorageError, StorageIOError, Vote};
use parking_lot::Mutex;

use super::TypeConfig;
use crate::protocol::record_batch::crc32c;

/// Purged entries tolerated in the file before it is rewritten.
const REWRITE_AFTER_PURGED: u64 = 1000;
/// The largest frame accepted when reading the file back (an entry is one proposal).
const MAX_FRAME: usize = 64 << 20;

#[derive(serde::Serialize, serde::Deserialize)]
enum LogOp {
    Append(Entry<TypeConfig>),
    Truncate(u64),
    Purge(LogId<u64>),
    Vote(Vote<u64>),
}

struct Inner {
    dir: PathBuf,
    file: File,
    entries: BTreeMap<u64, Entry<TypeConfig>>,
    last_purged: Option<LogId<u64>>,
    purged_in_file: u64,
    vote: Option<Vote<u64>>,
}

/// The log store; clones share it (one is openraft's log reader).
#[derive(Clone)]
pub struct LogStore {
    inner: Arc<Mutex<Inner>>,
}

fn io_err(e: std::io::Error) -> StorageError<u64> {
    StorageIOError::write_logs(openraft::AnyError::new(&e)).into()
}

fn frame(op: &LogOp) -> Vec<u8> {
    let payload = serde_json::to_vec(op).expect("log entries serialise");
    let mut out = Vec::with_capacity(payload.len() + 8);
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(&crc32c(&[&payload]).to_be_bytes());
    out.extend_from_slice(&payload);
    out
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Writes `bytes` to `dir/name` atomically and durably.
pub(super) fn write_file_durably(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, dir.join(name))?;
    sync_dir(dir)
}

impl LogStore {
    /// Opens (or creates) the log in `dir`.
    pub fn open(dir: &Path) -> std::io::Result<LogStore> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join("raft-log");
        let created = !path.exists();
        let mut file = OpenOptions::new().create(true).truncate(false).read(true).append(true).open(&path)?;
        if created {
            sync_dir(dir)?;
        }
        // Releases before votes were frames of the log kept the vote in a file of its own; a
        // `Vote` frame, written later, replaces it.
        let mut vote = match std::fs::read(dir.join("raft-vote")) {
            Ok(b) => Some(serde_json::from_slice(&b).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let mut entries = BTreeMap::new();
        let (mut last_purged, mut purged_in_file) = (None, 0u64);
        let mut pos = 0usize;
        while pos < bytes.len() {
            let rest = &bytes[pos..];
            let parsed = (rest.len() >= 8)
                .then(|| {
                    let len = u32::from_be_bytes(rest[0..4].try_into().expect("4 bytes")) as usize;
                    let crc = u32::from_be_bytes(rest[4..8].try_into().expect("4 bytes"));
                    (len <= MAX_FRAME && rest.len() >= 8 + len && crc32c(&[&rest[8..8 + len]]) == crc).then_some(len)
                })
                .flatten()
                .and_then(|len| serde_json::from_slice::<LogOp>(&rest[8..8 + len]).ok().map(|op| (len, op)));
            let Some((len, op)) = parsed else {
                // A frame that is whole but unreadable with bytes after it is corruption inside
                // the log: cutting there would drop entries this voter acknowledged. (A tail of
                // zeros is what some filesystems show for an unsynced append after a crash.)
                let whole = rest.len() >= 8 && rest.iter().any(|b| *b != 0) && {
                    let len = u32::from_be_bytes(rest[0..4].try_into().expect("4 bytes")) as usize;
                    len <= MAX_FRAME && rest.len() > 8 + len
                };
                if whole {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("{}: corrupt frame at byte {pos} with {} bytes after it", path.display(), rest.len()),
                    ));
                }
                // Only a torn tail (a write cut short by a crash, never acknowledged) is cut.
                tracing::warn!(path = %path.display(), at = pos, dropped = rest.len(), "cutting a torn tail off the metadata Raft log");
                file.set_len(pos as u64)?;
                file.sync_all()?;
                break;
            };
            match op {
                LogOp::Append(e) => {
                    entries.insert(e.log_id.index, e);
                }
                LogOp::Truncate(from) => {
                    entries.split_off(&from);
                }
                LogOp::Purge(id) => {
                    let kept = entries.split_off(&(id.index + 1));
                    purged_in_file += entries.len() as u64;
                    entries = kept;
                    last_purged = Some(id);
                }
                LogOp::Vote(v) => vote = Some(v),
            }
            pos += 8 + len;
        }
        Ok(LogStore {
            inner: Arc::new(Mutex::new(Inner { dir: dir.to_path_buf(), file, entries, last_purged, purged_in_file, vote })),
        })
    }
}

impl Inner {
    fn write_synced(&mut self, ops: &[LogOp]) -> std::io::Result<()> {
        let mut buf = Vec::new();
        for op in ops {
            buf.extend_from_slice(&frame(op));
        }
        self.file.write_all(&buf)?;
        self.file.sync_data()
    }

    /// Rewrites the file with the vote and the live entries only.
    fn rewrite(&mut self) -> std::io::Result<()> {
        let mut buf = Vec::new();
        if let Some(v) = self.vote {
            buf.extend_from_slice(&frame(&LogOp::Vote(v)));
        }
        if let Some(id) = self.last_purged {
            buf.extend_from_slice(&frame(&LogOp::Purge(id)));
        }
        for e in self.entries.values() {
            buf.extend_from_slice(&frame(&LogOp::Append(e.clone())));
        }
        write_file_durably(&self.dir, "raft-log", &buf)?;
        self.file = OpenOptions::new().read(true).append(true).open(self.dir.join("raft-log"))?;
        self.purged_in_file = 0;
        Ok(())
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<u64>> {
        Ok(self.inner.lock().entries.range(range).map(|(_, e)| e.clone()).collect())
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<u64>> {
        let inner = self.inner.lock();
        let last = inner.entries.values().next_back().map(|e| e.log_id).or(inner.last_purged);
        Ok(LogState { last_purged_log_id: inner.last_purged, last_log_id: last })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), StorageError<u64>> {
        let mut inner = self.inner.lock();
        tokio::task::block_in_place(|| inner.write_synced(&[LogOp::Vote(*vote)]))
            .map_err(|e| StorageError::from(StorageIOError::write_vote(openraft::AnyError::new(&e))))?;
        inner.vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, StorageError<u64>> {
        Ok(self.inner.lock().vote)
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<(), StorageError<u64>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<Entry<TypeConfig>> = entries.into_iter().collect();
        let ops: Vec<LogOp> = entries.iter().cloned().map(LogOp::Append).collect();
        let mut inner = self.inner.lock();
        let written = tokio::task::block_in_place(|| inner.write_synced(&ops));
        match written {
            Ok(()) => {
                for e in entries {
                    inner.entries.insert(e.log_id.index, e);
                }
                drop(inner);
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                tracing::error!(dir = %inner.dir.display(), error = %e, "appending to the metadata Raft log failed");
                let err = io_err(std::io::Error::new(e.kind(), e.to_string()));
                drop(inner);
                callback.log_io_completed(Err(e));
                Err(err)
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId<u64>) -> Result<(), StorageError<u64>> {
        let mut inner = self.inner.lock();
        tokio::task::block_in_place(|| inner.write_synced(&[LogOp::Truncate(log_id.index)])).map_err(io_err)?;
        inner.entries.split_off(&log_id.index);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<u64>) -> Result<(), StorageError<u64>> {
        let mut inner = self.inner.lock();
        tokio::task::block_in_place(|| inner.write_synced(&[LogOp::Purge(log_id)])).map_err(io_err)?;
        let kept = inner.entries.split_off(&(log_id.index + 1));
        inner.purged_in_file += inner.entries.len() as u64;
        inner.entries = kept;
        inner.last_purged = Some(log_id);
        if inner.purged_in_file > REWRITE_AFTER_PURGED {
            tokio::task::block_in_place(|| inner.rewrite()).map_err(io_err)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use openraft::storage::RaftLogStorage;
    use openraft::{CommittedLeaderId, EntryPayload};

    use super::*;

    fn entry(index: u64) -> Entry<TypeConfig> {
        Entry { log_id: LogId::new(CommittedLeaderId::new(1, 1), index), payload: EntryPayload::Blank }
    }

    fn write_entries(dir: &Path, n: u64) {
        let mut f = OpenOptions::new().create(true).append(true).open(dir.join("raft-log")).unwrap();
        for i in 0..n {
            f.write_all(&frame(&LogOp::Append(entry(i)))).unwrap();
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_torn_last_frame_is_cut_and_the_entries_before_it_kept() {
        let dir = tempfile::tempdir().unwrap();
        write_entries(dir.path(), 3);
        let full = std::fs::metadata(dir.path().join("raft-log")).unwrap().len();
        let f = OpenOptions::new().write(true).open(dir.path().join("raft-log")).unwrap();
        f.set_len(full - 5).unwrap();
        let mut store = LogStore::open(dir.path()).unwrap();
        let state = store.get_log_state().await.unwrap();
        assert_eq!(state.last_log_id.map(|l| l.index), Some(1));
        assert!(std::fs::metadata(dir.path().join("raft-log")).unwrap().len() < full - 5, "the torn tail is gone");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_zero_filled_tail_is_cut_as_torn() {
        let dir = tempfile::tempdir().unwrap();
        write_entries(dir.path(), 3);
        let mut f = OpenOptions::new().append(true).open(dir.path().join("raft-log")).unwrap();
        f.write_all(&[0u8; 64]).unwrap();
        let mut store = LogStore::open(dir.path()).unwrap();
        assert_eq!(store.get_log_state().await.unwrap().last_log_id.map(|l| l.index), Some(2));
    }

    #[test]
    fn a_corrupt_frame_before_others_is_an_error_not_a_cut() {
        let dir = tempfile::tempdir().unwrap();
        write_entries(dir.path(), 3);
        let mut bytes = std::fs::read(dir.path().join("raft-log")).unwrap();
        bytes[10] ^= 0xff; // inside the first frame's payload: its CRC no longer matches
        std::fs::write(dir.path().join("raft-log"), &bytes).unwrap();
        let err = LogStore::open(dir.path()).err().expect("refused").to_string();
        assert!(err.contains("corrupt frame at byte 0"), "{err}");
        assert_eq!(std::fs::read(dir.path().join("raft-log")).unwrap(), bytes, "nothing was cut");
    }

    fn vote(term: u64) -> Vote<u64> {
        let mut v = Vote::new(term, 1);
        v.commit();
        v
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_saved_vote_is_a_frame_of_the_log_and_the_last_one_is_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = LogStore::open(dir.path()).unwrap();
        store.save_vote(&Vote::new(1, 1)).await.unwrap();
        store.save_vote(&vote(2)).await.unwrap();
        drop(store);
        assert!(!dir.path().join("raft-vote").exists(), "no file of its own");
        let mut store = LogStore::open(dir.path()).unwrap();
        assert_eq!(store.read_vote().await.unwrap(), Some(vote(2)));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn the_vote_file_of_an_earlier_release_is_read_until_a_vote_frame_replaces_it() {
        let dir = tempfile::tempdir().unwrap();
        write_entries(dir.path(), 2);
        std::fs::write(dir.path().join("raft-vote"), serde_json::to_vec(&vote(3)).unwrap()).unwrap();
        let mut store = LogStore::open(dir.path()).unwrap();
        assert_eq!(store.read_vote().await.unwrap(), Some(vote(3)));
        store.save_vote(&vote(4)).await.unwrap();
        drop(store);
        let mut store = LogStore::open(dir.path()).unwrap();
        assert_eq!(store.read_vote().await.unwrap(), Some(vote(4)));
        assert_eq!(store.get_log_state().await.unwrap().last_log_id.map(|l| l.index), Some(1));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn rewriting_the_log_after_a_purge_keeps_the_vote_and_the_live_entries() {
        let dir = tempfile::tempdir().unwrap();
        let n = REWRITE_AFTER_PURGED + 10;
        write_entries(dir.path(), n);
        let mut store = LogStore::open(dir.path()).unwrap();
        store.save_vote(&vote(5)).await.unwrap();
        let before = std::fs::metadata(dir.path().join("raft-log")).unwrap().len();
        store.purge(LogId::new(CommittedLeaderId::new(1, 1), n - 3)).await.unwrap();
        assert!(std::fs::metadata(dir.path().join("raft-log")).unwrap().len() < before / 10, "rewritten");
        drop(store);
        let mut store = LogStore::open(dir.path()).unwrap();
        assert_eq!(store.read_vote().await.unwrap(), Some(vote(5)));
        let state = store.get_log_state().await.unwrap();
        assert_eq!(state.last_purged_log_id.map(|l| l.index), Some(n - 3));
        assert_eq!(state.last_log_id.map(|l| l.index), Some(n - 1));
    }
}
