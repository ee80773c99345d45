//! The aborted-transaction index of a segment (`<base offset>.txnindex`, Kafka's format, so
//! `kafka-dump-log.sh` reads it): one entry per transaction aborted in the segment, in the order
//! of their markers. A read_committed fetch gets the aborted transactions that overlap what it
//! returns, and the consumer drops their records.
//!
//! ```text
//! entry (34 bytes): version i16 (0) | producerId i64 | firstOffset i64 | lastOffset i64 |
//!                   lastStableOffset i64
//! ```
//! `lastOffset` is the abort marker's offset; `lastStableOffset` the partition's last stable
//! offset when the marker was written. Since the last stable offset only grows, a search for the
//! transactions below some upper bound may stop at the first entry whose `lastStableOffset`
//! reaches it: no later entry can begin below it.
//!
//! [`AbortedTxns`] holds every entry of a partition's segments in memory (32 bytes each, loaded
//! when the log opens; a partition without aborts holds nothing) and appends to the active
//! segment's file as markers are written, so a read_committed fetch reads no file.
//!
//! # Failure behaviour
//! Decoding a file whose size is not a whole number of entries, or with an entry of another
//! version, is an error naming the position; nothing panics on any input. On open such a file is
//! logged and removed: the aborts it held are then missing for read_committed readers of those
//! offsets (Kafka rebuilds it from the log with the producer state of the segment's start;
//! sluice re-adds only the markers it replays after its newest producer snapshot).
//! Index files are written without fsync, as Kafka does: replaying the log after a kill re-adds
//! an entry whose marker reached the log but whose index write did not.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::checkpoint::write_replacing;
use super::error::LogError;
use super::segment::file_stem;

/// Bytes of one entry.
pub const ENTRY_LEN: usize = 34;
/// The entry version written and read.
pub const VERSION: i16 = 0;

/// One aborted transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    pub last_offset: i64,
    pub last_stable_offset: i64,
}

impl AbortedTxn {
    /// The entry's bytes.
    pub fn encode(&self) -> [u8; ENTRY_LEN] {
        let mut out = [0u8; ENTRY_LEN];
        out[0..2].copy_from_slice(&VERSION.to_be_bytes());
        out[2..10].copy_from_slice(&self.producer_id.to_be_bytes());
        out[10..18].copy_from_slice(&self.first_offset.to_be_bytes());
        out[18..26].copy_from_slice(&self.last_offset.to_be_bytes());
        out[26..34].copy_from_slice(&self.last_stable_offset.to_be_bytes());
        out
    }
}

/// Every entry of an index file's contents.
pub fn decode_all(bytes: &[u8]) -> Result<Vec<AbortedTxn>, String> {
    if bytes.len() % ENTRY_LEN != 0 {
        return Err(format!("{} bytes are not a whole number of {ENTRY_LEN}-byte entries", bytes.len()));
    }
    let i64_at = |e: &[u8], at: usize| i64::from_be_bytes(e[at..at + 8].try_into().expect("8 bytes"));
    bytes
        .chunks_exact(ENTRY_LEN)
        .enumerate()
        .map(|(i, e)| {
            let version = i16::from_be_bytes([e[0], e[1]]);
            if version != VERSION {
                return Err(format!("entry {i} (byte {}) has version {version}", i * ENTRY_LEN));
            }
            Ok(AbortedTxn {
                producer_id: i64_at(e, 2),
                first_offset: i64_at(e, 10),
                last_offset: i64_at(e, 18),
                last_stable_offset: i64_at(e, 26),
            })
        })
        .collect()
}

/// The aborted transactions of `entries` (one segment's, in order) that overlap the offsets
/// from `fetch_offset` up to (not including) `upper_bound`, and whether the search is complete:
/// when it is not, later segments may hold more.
pub fn collect(entries: &[AbortedTxn], fetch_offset: i64, upper_bound: i64) -> (Vec<AbortedTxn>, bool) {
    let mut out = Vec::new();
    for t in entries {
        if t.last_offset >= fetch_offset && t.first_offset < upper_bound {
            out.push(*t);
        }
        if t.last_stable_offset >= upper_bound {
            return (out, true);
        }
    }
    (out, false)
}

/// The file of the segment starting at `base`.
pub fn path(dir: &Path, base: i64) -> PathBuf {
    dir.join(format!("{}.txnindex", file_stem(base)))
}

/// The aborted transactions of a partition's segments, in marker order, each with the base
/// offset of the segment whose index file holds it.
#[derive(Debug, Default)]
pub struct AbortedTxns {
    entries: Vec<(i64, AbortedTxn)>,
}

impl AbortedTxns {
    /// Reads the index files of the segments in `bases` (ascending) that `present` names. A file
    /// that does not decode is logged and removed (see the module doc).
    pub fn load(dir: &Path, bases: &[i64], present: &[i64]) -> AbortedTxns {
        let mut entries = Vec::new();
        for &base in bases.iter().filter(|b| present.contains(b)) {
            let file = path(dir, base);
            match std::fs::read(&file).map_err(|e| e.to_string()).and_then(|b| decode_all(&b)) {
                Ok(found) => entries.extend(found.into_iter().map(|t| (base, t))),
                Err(reason) => {
                    tracing::warn!(path = %file.display(), %reason, "removing unreadable aborted-transaction index");
                    let _ = std::fs::remove_file(&file);
                }
            }
        }
        entries.sort_by_key(|(_, t)| t.last_offset);
        AbortedTxns { entries }
    }

    /// Adds an abort whose marker was just written to the segment at `base`.
    pub fn append(&mut self, dir: &Path, base: i64, t: AbortedTxn) -> Result<(), LogError> {
        let file = path(dir, base);
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&file)
            .map_err(|e| LogError::io(&file, "open aborted-transaction index", e))?;
        f.write_all(&t.encode()).map_err(|e| LogError::io(&file, "append to aborted-transaction index", e))?;
        self.entries.push((base, t));
        Ok(())
    }

    /// Whether the abort whose marker is at `marker_offset` is indexed.
    pub fn has_marker(&self, marker_offset: i64) -> bool {
        self.entries.binary_search_by_key(&marker_offset, |(_, t)| t.last_offset).is_ok()
    }

    /// The offset of the last indexed abort marker.
    pub fn last_marker(&self) -> Option<i64> {
        self.entries.last().map(|(_, t)| t.last_offset)
    }

    /// The aborted transactions overlapping `[fetch_offset, upper_bound)` (see [`collect`]).
    pub fn overlapping(&self, fetch_offset: i64, upper_bound: i64) -> Vec<AbortedTxn> {
        let from = self.entries.partition_point(|(_, t)| t.last_offset < fetch_offset);
        let mut out = Vec::new();
        for (_, t) in &self.entries[from..] {
            if t.first_offset < upper_bound {
                out.push(*t);
            }
            if t.last_stable_offset >= upper_bound {
                break;
            }
        }
        out
    }

    /// Forgets the aborts whose marker is at or after `offset` (the log was truncated there) and
    /// rewrites the files that held them.
    pub fn truncate_from(&mut self, dir: &Path, offset: i64) -> Result<(), LogError> {
        let keep = self.entries.partition_point(|(_, t)| t.last_offset < offset);
        if keep == self.entries.len() {
            return Ok(());
        }
        let mut bases: Vec<i64> = self.entries[keep..].iter().map(|(b, _)| *b).collect();
        bases.dedup();
        self.entries.truncate(keep);
        for base in bases {
            let file = path(dir, base);
            let kept: Vec<u8> = self.entries.iter().filter(|(b, _)| *b == base).flat_map(|(_, t)| t.encode()).collect();
            if kept.is_empty() {
                match std::fs::remove_file(&file) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(LogError::io(&file, "remove aborted-transaction index", e))
                    }
                    _ => {}
                }
            } else {
                write_replacing(&file, &kept)?;
            }
        }
        Ok(())
    }

    /// Forgets the aborts held by segments below `first_base` (deleted with their files).
    pub fn forget_segments_below(&mut self, first_base: i64) {
        self.entries.retain(|(b, _)| *b >= first_base);
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn txn(producer_id: i64, first: i64, last: i64, lso: i64) -> AbortedTxn {
        AbortedTxn { producer_id, first_offset: first, last_offset: last, last_stable_offset: lso }
    }

    /// The bytes Kafka 4.4's `TransactionIndex.append` writes for the same entry.
    #[test]
    fn an_entry_has_kafkas_34_byte_layout_and_reads_back() {
        let t = txn(4000, 10, 14, 15);
        let bytes = t.encode();
        let mut want = vec![0u8, 0];
        for v in [4000i64, 10, 14, 15] {
            want.extend(v.to_be_bytes());
        }
        assert_eq!(&bytes[..], &want[..]);
        let file: Vec<u8> = [t, txn(4001, 16, 20, 21)].iter().flat_map(|t| t.encode()).collect();
        assert_eq!(decode_all(&file).unwrap(), vec![t, txn(4001, 16, 20, 21)]);
    }

    #[test]
    fn a_cut_file_or_an_unknown_version_is_an_error_naming_where() {
        let mut file: Vec<u8> = [txn(1, 0, 1, 2), txn(2, 3, 4, 5)].iter().flat_map(|t| t.encode()).collect();
        assert!(decode_all(&file[..ENTRY_LEN + 3]).unwrap_err().contains("whole number"));
        file[ENTRY_LEN + 1] = 1;
        assert_eq!(decode_all(&file).unwrap_err(), "entry 1 (byte 34) has version 1");
    }

    #[test]
    fn a_fetch_gets_the_aborted_transactions_that_overlap_it() {
        // Three aborts: [0, 5] and [3, 9] (whose marker came while [6, ..] was open), [12, 15].
        let entries = [txn(1, 0, 5, 3), txn(2, 3, 9, 10), txn(3, 12, 15, 16)];
        let ids = |(found, complete): (Vec<AbortedTxn>, bool)| (found.iter().map(|t| t.producer_id).collect::<Vec<_>>(), complete);
        assert_eq!(ids(collect(&entries, 0, 4)), (vec![1, 2], true));
        assert_eq!(ids(collect(&entries, 6, 12)), (vec![2], true));
        assert_eq!(ids(collect(&entries, 10, 12)), (vec![], true));
        assert_eq!(ids(collect(&entries, 0, 100)), (vec![1, 2, 3], false), "later segments may hold more");
    }

    #[test]
    fn aborts_survive_a_reopen_and_truncation_rewrites_their_files() {
        let dir = tempfile::tempdir().unwrap();
        let mut idx = AbortedTxns::default();
        idx.append(dir.path(), 0, txn(1, 0, 5, 6)).unwrap();
        idx.append(dir.path(), 0, txn(2, 7, 9, 10)).unwrap();
        idx.append(dir.path(), 20, txn(3, 21, 25, 26)).unwrap();
        assert!(idx.has_marker(9) && !idx.has_marker(8));
        let reopened = AbortedTxns::load(dir.path(), &[0, 20], &[0, 20]);
        assert_eq!(reopened.overlapping(0, 100).len(), 3);
        assert_eq!(reopened.overlapping(6, 8), vec![txn(2, 7, 9, 10)]);

        idx.truncate_from(dir.path(), 9).unwrap();
        assert_eq!(idx.last_marker(), Some(5));
        assert!(!path(dir.path(), 20).exists(), "a file left without entries is removed");
        let reopened = AbortedTxns::load(dir.path(), &[0, 20], &[0]);
        assert_eq!(reopened.overlapping(0, 100), vec![txn(1, 0, 5, 6)]);
    }

    #[test]
    fn an_unreadable_file_is_removed_on_load() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(path(dir.path(), 0), [0u8; 7]).unwrap();
        let idx = AbortedTxns::load(dir.path(), &[0], &[0]);
        assert!(idx.is_empty());
        assert!(!path(dir.path(), 0).exists());
    }
}
