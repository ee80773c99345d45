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
//! # Failure behaviour
//! Decoding a file whose size is not a whole number of entries, or with an entry of another
//! version, is an error naming the position (the caller rebuilds the index from the log);
//! nothing panics on any input.

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
}
