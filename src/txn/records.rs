//! Kafka's `__transaction_state` record schemas, so that a Kafka broker (and
//! `kafka-dump-log.sh --transaction-log-decoder`) reads what sluice writes and sluice reads a
//! Kafka log dir.
//!
//! ```text
//! key:   version i16 (0: TransactionLogKey) | transactionalId string
//! value: version i16 | ...        a null value is a tombstone: the transactional id expired
//!   v0: producerId i64 | producerEpoch i16 | transactionTimeoutMs i32 | transactionStatus i8 |
//!       transactionPartitions [topic string | partitionIds [i32]]? |
//!       transactionLastUpdateTimestampMs i64 | transactionStartTimestampMs i64
//!   v1: the same fields, flexible (compact strings and arrays, a tagged-field section after
//!       each partition entry), then the tagged fields, each written only when it is not its
//!       default: 0 previousProducerId i64 (-1), 1 nextProducerId i64 (-1),
//!       2 clientTransactionVersion i16 (0), 3 nextProducerEpoch i16 (-1)
//! ```
//! Kafka writes v1 for clients of transaction version 1 and later, v0 before; the partitions
//! are null in state Empty (and ignored there when read).
//!
//! # Failure behaviour
//! Decoding never panics and never allocates more than the input holds (see
//! [`crate::protocol::codec`]). A key of another version is not a transaction record
//! ([`decode_key`] answers `None`, as Kafka skips it); a value of an unknown version or with an
//! unknown state is an error naming it.

use std::collections::BTreeMap;

use bytes::{BufMut, Bytes, BytesMut};

use super::state::TxnState;
use crate::protocol::codec::{put_compact_str, put_str, put_uvarint, Reader};

/// The key version of a `TransactionLogKey` (Kafka's coordinator record type 0).
pub const KEY_VERSION: i16 = 0;
/// The newest value version.
pub const LATEST_VALUE_VERSION: i16 = 1;

/// A transactional id's state as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnValue {
    pub producer_id: i64,
    /// The producer id of the last committed transaction (v1; -1 if none).
    pub previous_producer_id: i64,
    /// The producer id handed to the client when the epoch ran out (v1; -1 if none).
    pub next_producer_id: i64,
    pub producer_epoch: i16,
    /// The epoch that goes with `next_producer_id` (v1; -1 if none).
    pub next_producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TxnState,
    /// The partitions in the transaction, by topic.
    pub partitions: BTreeMap<String, Vec<i32>>,
    pub last_update_ms: i64,
    pub start_ms: i64,
    /// The transaction version the client uses (v1; 0 if unknown).
    pub client_transaction_version: i16,
}

/// The key of `transactional_id`'s record.
pub fn encode_key(transactional_id: &str) -> Bytes {
    let mut b = BytesMut::with_capacity(4 + transactional_id.len());
    b.put_i16(KEY_VERSION);
    put_str(&mut b, transactional_id);
    b.freeze()
}

/// The transactional id of a key; `None` for a key of another version, which is not a
/// transaction record.
pub fn decode_key(key: &[u8]) -> Result<Option<String>, String> {
    let mut r = Reader::new(key);
    if r.i16()? != KEY_VERSION {
        return Ok(None);
    }
    r.string().map(Some)
}

/// The value in version `version` (0 or 1; anything newer is written as 1).
pub fn encode_value(v: &TxnValue, version: i16) -> Bytes {
    let flexible = version >= 1;
    let mut b = BytesMut::with_capacity(64 + v.partitions.iter().map(|(t, ps)| t.len() + 4 * ps.len() + 8).sum::<usize>());
    b.put_i16(version.clamp(0, LATEST_VALUE_VERSION));
    b.put_i64(v.producer_id);
    b.put_i16(v.producer_epoch);
    b.put_i32(v.timeout_ms);
    b.put_i8(v.state.id());
    let partitions = (v.state != TxnState::Empty).then_some(&v.partitions);
    match (partitions, flexible) {
        (None, true) => put_uvarint(&mut b, 0),
        (None, false) => b.put_i32(-1),
        (Some(ps), true) => {
            put_uvarint(&mut b, ps.len() as u32 + 1);
            for (topic, ids) in ps {
                put_compact_str(&mut b, Some(topic));
                put_uvarint(&mut b, ids.len() as u32 + 1);
                ids.iter().for_each(|p| b.put_i32(*p));
                put_uvarint(&mut b, 0);
            }
        }
        (Some(ps), false) => {
            b.put_i32(ps.len() as i32);
            for (topic, ids) in ps {
                put_str(&mut b, topic);
                b.put_i32(ids.len() as i32);
                ids.iter().for_each(|p| b.put_i32(*p));
            }
        }
    }
    b.put_i64(v.last_update_ms);
    b.put_i64(v.start_ms);
    if flexible {
        let mut tagged: Vec<(u32, Vec<u8>)> = Vec::new();
        if v.previous_producer_id != -1 {
            tagged.push((0, v.previous_producer_id.to_be_bytes().to_vec()));
        }
        if v.next_producer_id != -1 {
            tagged.push((1, v.next_producer_id.to_be_bytes().to_vec()));
        }
        if v.client_transaction_version != 0 {
            tagged.push((2, v.client_transaction_version.to_be_bytes().to_vec()));
        }
        if v.next_producer_epoch != -1 {
            tagged.push((3, v.next_producer_epoch.to_be_bytes().to_vec()));
        }
        put_uvarint(&mut b, tagged.len() as u32);
        for (tag, bytes) in tagged {
            put_uvarint(&mut b, tag);
            put_uvarint(&mut b, bytes.len() as u32);
            b.put_slice(&bytes);
        }
    }
    b.freeze()
}

/// A value of version 0 or 1.
pub fn decode_value(value: &[u8]) -> Result<TxnValue, String> {
    let mut r = Reader::new(value);
    let version = r.i16()?;
    if !(0..=LATEST_VALUE_VERSION).contains(&version) {
        return Err(format!("unknown transaction log value version {version}"));
    }
    let flexible = version >= 1;
    let producer_id = r.i64()?;
    let producer_epoch = r.i16()?;
    let timeout_ms = r.i32()?;
    let status = r.i8()?;
    let state = TxnState::from_id(status).ok_or_else(|| format!("unknown transaction state id {status}"))?;
    let mut partitions: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    let topics = if flexible { r.compact_len()? } else { r.array_len()? };
    for _ in 0..topics {
        let (topic, count) = if flexible {
            (r.compact_string()?, r.compact_len()?)
        } else {
            (r.string()?, r.array_len()?)
        };
        let ids = r.i32s(count)?;
        if flexible {
            r.skip_tagged_fields()?;
        }
        partitions.entry(topic).or_default().extend(ids);
    }
    if state == TxnState::Empty {
        partitions.clear();
    }
    let last_update_ms = r.i64()?;
    let start_ms = r.i64()?;
    let mut v = TxnValue {
        producer_id,
        previous_producer_id: -1,
        next_producer_id: -1,
        producer_epoch,
        next_producer_epoch: -1,
        timeout_ms,
        state,
        partitions,
        last_update_ms,
        start_ms,
        client_transaction_version: 0,
    };
    if flexible {
        for _ in 0..r.uvarint()? {
            let tag = r.uvarint()?;
            let size = r.uvarint()? as usize;
            let mut field = Reader::new(r.take(size)?);
            match tag {
                0 => v.previous_producer_id = field.i64()?,
                1 => v.next_producer_id = field.i64()?,
                2 => v.client_transaction_version = field.i16()?,
                3 => v.next_producer_epoch = field.i16()?,
                _ => {}
            }
        }
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    //! The expected bytes below are what Kafka 4.4's generated `TransactionLogValue` and
    //! `TransactionLogKey` write for the same fields (`MessageUtil.toVersionPrefixedBytes`,
    //! `toCoordinatorTypePrefixedBytes`).
    use super::*;

    fn ongoing() -> TxnValue {
        TxnValue {
            producer_id: 4000,
            previous_producer_id: 3999,
            next_producer_id: -1,
            producer_epoch: 7,
            next_producer_epoch: -1,
            timeout_ms: 60_000,
            state: TxnState::Ongoing,
            partitions: BTreeMap::from([("orders".to_string(), vec![0, 2]), ("payments".to_string(), vec![1])]),
            last_update_ms: 1_700_000_000_123,
            start_ms: 1_700_000_000_000,
            client_transaction_version: 2,
        }
    }

    #[test]
    fn a_key_is_version_0_and_the_transactional_id() {
        assert_eq!(&encode_key("tx-1")[..], b"\x00\x00\x00\x04tx-1");
        assert_eq!(decode_key(b"\x00\x00\x00\x04tx-1").unwrap().as_deref(), Some("tx-1"));
        // __consumer_offsets' group key (version 2) is not a transaction record.
        assert_eq!(decode_key(b"\x00\x02\x00\x01g").unwrap(), None);
    }

    #[test]
    fn a_version_0_value_has_kafkas_layout() {
        let mut v = ongoing();
        v.partitions = BTreeMap::from([("t".to_string(), vec![3])]);
        let mut want = vec![0u8, 0];
        want.extend(4000i64.to_be_bytes());
        want.extend(7i16.to_be_bytes());
        want.extend(60_000i32.to_be_bytes());
        want.push(1);
        want.extend(1i32.to_be_bytes());
        want.extend(b"\x00\x01t");
        want.extend(1i32.to_be_bytes());
        want.extend(3i32.to_be_bytes());
        want.extend(1_700_000_000_123i64.to_be_bytes());
        want.extend(1_700_000_000_000i64.to_be_bytes());
        assert_eq!(&encode_value(&v, 0)[..], &want[..]);
        // v0 has no tagged fields: they read back as their defaults.
        let back = decode_value(&want).unwrap();
        assert_eq!((back.previous_producer_id, back.client_transaction_version), (-1, 0));
        assert_eq!(back.partitions, v.partitions);
    }

    #[test]
    fn a_version_1_value_has_kafkas_layout_with_only_non_default_tags() {
        let mut v = ongoing();
        v.partitions = BTreeMap::from([("t".to_string(), vec![3])]);
        let mut want = vec![0u8, 1];
        want.extend(4000i64.to_be_bytes());
        want.extend(7i16.to_be_bytes());
        want.extend(60_000i32.to_be_bytes());
        want.push(1);
        want.extend([2, 2, b't', 2]); // one topic; "t"; one partition
        want.extend(3i32.to_be_bytes());
        want.push(0); // the partition entry's tagged fields
        want.extend(1_700_000_000_123i64.to_be_bytes());
        want.extend(1_700_000_000_000i64.to_be_bytes());
        want.extend([2, 0, 8]); // two tagged fields; tag 0, 8 bytes
        want.extend(3999i64.to_be_bytes());
        want.extend([2, 2]); // tag 2, 2 bytes
        want.extend(2i16.to_be_bytes());
        assert_eq!(&encode_value(&v, 1)[..], &want[..]);
        assert_eq!(decode_value(&want).unwrap(), v);
    }

    #[test]
    fn every_field_round_trips_in_version_1() {
        let mut v = ongoing();
        v.next_producer_id = 5000;
        v.next_producer_epoch = 0;
        v.state = TxnState::PrepareCommit;
        assert_eq!(decode_value(&encode_value(&v, 1)).unwrap(), v);
    }

    #[test]
    fn an_empty_transaction_is_written_with_null_partitions() {
        let mut v = ongoing();
        v.state = TxnState::Empty;
        for version in [0, 1] {
            let bytes = encode_value(&v, version);
            let back = decode_value(&bytes).unwrap();
            assert_eq!(back.state, TxnState::Empty);
            assert!(back.partitions.is_empty());
        }
        // null: -1 as an i32 in v0, 0 as a varint in v1, right after the status byte.
        assert_eq!(&encode_value(&v, 0)[17..21], &(-1i32).to_be_bytes());
        assert_eq!(encode_value(&v, 1)[17], 0);
    }

    #[test]
    fn unknown_versions_and_states_are_errors_naming_them() {
        let mut bytes = encode_value(&ongoing(), 1).to_vec();
        bytes[1] = 2;
        assert_eq!(decode_value(&bytes).unwrap_err(), "unknown transaction log value version 2");
        let mut bytes = encode_value(&ongoing(), 1).to_vec();
        bytes[16] = 9;
        assert_eq!(decode_value(&bytes).unwrap_err(), "unknown transaction state id 9");
    }

    #[test]
    fn a_cut_or_lying_value_is_an_error_not_a_panic_or_a_large_allocation() {
        for version in [0, 1] {
            let bytes = encode_value(&ongoing(), version);
            for n in 0..bytes.len() {
                assert!(decode_value(&bytes[..n]).is_err(), "v{version}, {n} of {} bytes", bytes.len());
            }
        }
        // v0 claiming two billion partitions of one topic in a few bytes.
        let mut v = ongoing();
        v.partitions = BTreeMap::from([("t".to_string(), vec![1])]);
        let mut bytes = encode_value(&v, 0).to_vec();
        bytes[24..28].copy_from_slice(&i32::MAX.to_be_bytes());
        assert!(decode_value(&bytes).unwrap_err().contains("array of"));
    }
}
