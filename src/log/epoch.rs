//! Leader-epoch cache (KIP-101) and its `leader-epoch-checkpoint` file.
//!
//! ```text
//!  0            <- version
//!  2            <- entries
//!  0 0          <- epoch startOffset: first offset written in that epoch
//!  3 1500
//! ```
//! # Invariants
//! - Entries are strictly increasing in both epoch and start offset.
//! - Every change is in the file (replaced atomically) before the call returns. Truncations
//!   are durable at once; a new epoch from [`LeaderEpochCache::assign`] is durable only after
//!   [`LeaderEpochCache::sync`], which the log calls on flush, on roll and at shutdown.
//!
//! # Failure behaviour
//! A new epoch's entry lost in a crash is rebuilt from the batches, which carry their leader
//! epoch: on open the log compares the last batch's epoch with the file and re-reads the active
//! segment's batch headers when the file is behind (see `PartitionLog::open`). Kafka defers this
//! fsync the same way (KAFKA-15046); without it, the first append to every new partition paid
//! two fsyncs.
use std::path::{Path, PathBuf};

use super::checkpoint::{read_entry_lines, render_entry_lines, write_atomically, write_replacing};
use super::error::LogError;

/// File name inside a partition directory.
pub const LEADER_EPOCH_CHECKPOINT_FILE: &str = "leader-epoch-checkpoint";
const KIND: &str = "leader-epoch-checkpoint";

/// `(epoch, start_offset)` entries backed by the checkpoint file.
#[derive(Debug)]
pub struct LeaderEpochCache {
    path: PathBuf,
    entries: Vec<(i32, i64)>,
    /// The file holds entries not fsynced yet.
    unsynced: bool,
}

impl LeaderEpochCache {
    /// Loads `<dir>/leader-epoch-checkpoint` (missing file = empty cache). Entries that break
    /// monotonicity are dropped with a warning, as Kafka does when it reloads.
    pub fn load(dir: &Path) -> Result<LeaderEpochCache, LogError> {
        let path = dir.join(LEADER_EPOCH_CHECKPOINT_FILE);
        let mut entries: Vec<(i32, i64)> = Vec::new();
        if let Some(lines) = read_entry_lines(&path, KIND)? {
            for fields in lines {
                let bad = || LogError::MalformedFile {
                    path: path.clone(),
                    kind: KIND,
                    reason: format!("bad entry {:?}", fields.join(" ")),
                };
                if fields.len() != 2 {
                    return Err(bad());
                }
                let epoch: i32 = fields[0].parse().map_err(|_| bad())?;
                let start: i64 = fields[1].parse().map_err(|_| bad())?;
                if entries.last().is_some_and(|&(e, s)| epoch <= e || start < s) {
                    tracing::warn!(path = %path.display(), epoch, start, "dropping non-monotonic leader epoch entry");
                    continue;
                }
                entries.push((epoch, start));
            }
        }
        Ok(LeaderEpochCache { path, entries, unsynced: false })
    }

    pub fn entries(&self) -> &[(i32, i64)] {
        &self.entries
    }

    pub fn latest_epoch(&self) -> Option<i32> {
        self.entries.last().map(|&(e, _)| e)
    }

    fn render(&self) -> String {
        let lines: Vec<String> = self.entries.iter().map(|(e, s)| format!("{e} {s}")).collect();
        render_entry_lines(&lines)
    }

    /// Writes the file durably.
    fn persist(&mut self) -> Result<(), LogError> {
        write_atomically(&self.path, self.render().as_bytes())?;
        self.unsynced = false;
        Ok(())
    }

    /// Makes entries added by [`LeaderEpochCache::assign`] durable.
    pub fn sync(&mut self) -> Result<(), LogError> {
        if self.unsynced {
            self.persist()?;
        }
        Ok(())
    }

    /// Records that `epoch` starts at `start_offset`. Ignored unless `epoch` is newer than the
    /// latest; entries starting at or after `start_offset` are replaced (a new leader's log
    /// diverged from there).
    pub fn assign(&mut self, epoch: i32, start_offset: i64) -> Result<(), LogError> {
        if epoch < 0 || self.latest_epoch().is_some_and(|e| epoch <= e) {
            return Ok(());
        }
        self.entries.retain(|&(_, s)| s < start_offset);
        self.entries.push((epoch, start_offset));
        write_replacing(&self.path, self.render().as_bytes())?;
        self.unsynced = true;
        Ok(())
    }

    /// Drops entries whose start offset is >= `end_offset` (after a log truncation).
    pub fn truncate_from_end(&mut self, end_offset: i64) -> Result<(), LogError> {
        let before = self.entries.len();
        self.entries.retain(|&(_, s)| s < end_offset);
        if self.entries.len() != before {
            self.persist()?;
        }
        Ok(())
    }

    /// Drops entries wholly below `start_offset`; the epoch covering it is kept and moved to
    /// start there (the log start moved past its real start).
    pub fn truncate_from_start(&mut self, start_offset: i64) -> Result<(), LogError> {
        let covering = self.entries.iter().rposition(|&(_, s)| s <= start_offset);
        let Some(idx) = covering else { return Ok(()) };
        if idx == 0 && self.entries[0].1 == start_offset {
            return Ok(());
        }
        self.entries.drain(..idx);
        self.entries[0].1 = start_offset;
        self.persist()
    }

    /// Kafka's OffsetForLeaderEpoch answer: `(epoch, end offset)` for `requested`, or `None`
    /// where Kafka answers UNDEFINED_EPOCH / UNDEFINED_EPOCH_OFFSET.
    pub fn end_offset_for(&self, requested: i32, log_end_offset: i64) -> Option<(i32, i64)> {
        end_offset_for(&self.entries, requested, log_end_offset)
    }
}

/// [`LeaderEpochCache::end_offset_for`] over `(epoch, start offset)` entries, as a pure
/// function (the replication simulation keeps its epochs in memory).
pub fn end_offset_for(entries: &[(i32, i64)], requested: i32, log_end_offset: i64) -> Option<(i32, i64)> {
    if requested < 0 {
        return None;
    }
    if entries.last().map(|&(e, _)| e) == Some(requested) {
        return Some((requested, log_end_offset));
    }
    let higher = entries.iter().find(|&&(e, _)| e > requested)?;
    match entries.iter().rev().find(|&&(e, _)| e <= requested) {
        None => Some((requested, higher.1)),
        Some(&(floor_epoch, _)) => Some((floor_epoch, higher.1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leader_epoch_checkpoint_is_persisted_in_kafkas_text_and_reloaded() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = LeaderEpochCache::load(dir.path()).unwrap();
        assert_eq!(c.latest_epoch(), None);
        c.assign(0, 0).unwrap();
        c.assign(0, 10).unwrap(); // same epoch: no new entry
        c.assign(3, 1500).unwrap();
        let text = std::fs::read_to_string(dir.path().join(LEADER_EPOCH_CHECKPOINT_FILE)).unwrap();
        assert_eq!(text, "0\n2\n0 0\n3 1500\n");
        let c = LeaderEpochCache::load(dir.path()).unwrap();
        assert_eq!(c.entries(), &[(0, 0), (3, 1500)]);
    }

    #[test]
    fn end_offset_for_epoch_follows_kafka_semantics() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = LeaderEpochCache::load(dir.path()).unwrap();
        c.assign(2, 10).unwrap();
        c.assign(4, 20).unwrap();
        c.assign(7, 35).unwrap();
        assert_eq!(c.end_offset_for(7, 50), Some((7, 50)));
        assert_eq!(c.end_offset_for(4, 50), Some((4, 35)));
        assert_eq!(c.end_offset_for(5, 50), Some((4, 35)));
        assert_eq!(c.end_offset_for(1, 50), Some((1, 10)));
        assert_eq!(c.end_offset_for(8, 50), None);
        assert_eq!(c.end_offset_for(-1, 50), None);
    }

    #[test]
    fn truncation_from_either_end_keeps_entries_consistent() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = LeaderEpochCache::load(dir.path()).unwrap();
        c.assign(1, 0).unwrap();
        c.assign(2, 10).unwrap();
        c.assign(3, 20).unwrap();
        c.truncate_from_end(15).unwrap();
        assert_eq!(c.entries(), &[(1, 0), (2, 10)]);
        c.truncate_from_start(12).unwrap();
        assert_eq!(c.entries(), &[(2, 12)]);
        let c = LeaderEpochCache::load(dir.path()).unwrap();
        assert_eq!(c.entries(), &[(2, 12)]);
    }
}
