//! Transaction markers: the control batch that ends one producer's transaction in a partition
//! (Kafka's `EndTransactionMarker`). A marker batch is transactional and control, carries the
//! producer's id and epoch, no sequence, and holds one record:
//!
//! ```text
//! key:   version i16 (0) | type i16 (0: abort, 1: commit)
//! value: version i16 (0) | coordinatorEpoch i32
//! ```
//! The coordinator epoch lets a partition refuse a marker from a coordinator that has been
//! replaced (a newer one has written a marker already).
//!
//! # Failure behaviour
//! Parsing never panics: a batch that is not a control batch, or whose record is not a marker
//! of a known type, is an error naming what was found.

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};

use super::record_batch::{BatchHeader, RecordIter};

/// How a transaction ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MarkerKind {
    Abort,
    Commit,
}

impl MarkerKind {
    /// The control record type in the marker's key.
    pub fn control_type(self) -> i16 {
        match self {
            MarkerKind::Abort => 0,
            MarkerKind::Commit => 1,
        }
    }
}

/// A transaction marker as read from a control batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndMarker {
    pub kind: MarkerKind,
    pub coordinator_epoch: i32,
}

/// The marker batch ending `producer_id`'s transaction (base offset 0: the log assigns it).
pub fn encode_marker_batch(producer_id: i64, producer_epoch: i16, marker: EndMarker, timestamp: i64) -> Bytes {
    let mut key = Vec::with_capacity(4);
    key.extend_from_slice(&0i16.to_be_bytes());
    key.extend_from_slice(&marker.kind.control_type().to_be_bytes());
    let mut value = Vec::with_capacity(6);
    value.extend_from_slice(&0i16.to_be_bytes());
    value.extend_from_slice(&marker.coordinator_epoch.to_be_bytes());
    let record = Record {
        transactional: true,
        control: true,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id,
        producer_epoch,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: -1,
        timestamp,
        key: Some(Bytes::from(key)),
        value: Some(Bytes::from(value)),
        headers: Default::default(),
    };
    let mut buf = BytesMut::with_capacity(96);
    RecordBatchEncoder::encode(&mut buf, [&record], &RecordEncodeOptions { version: 2, compression: Compression::None })
        .expect("a one-record uncompressed batch encodes");
    buf.freeze()
}

/// The marker a control batch holds. A control record of another type (Kafka has leader-change
/// and snapshot records in its metadata log) is an error, as is a batch that is not control.
pub fn parse_end_marker(batch: &[u8]) -> Result<EndMarker, String> {
    let header = BatchHeader::parse(batch).map_err(|e| e.to_string())?;
    if !header.is_control() {
        return Err("not a control batch".into());
    }
    let record = RecordIter::new(batch)
        .map_err(|e| e.to_string())?
        .next()
        .ok_or("a control batch without a record")?
        .map_err(|e| e.to_string())?;
    let key = record.key.ok_or("a control record without a key")?;
    if key.len() < 4 {
        return Err(format!("a control record key of {} bytes", key.len()));
    }
    let kind = match i16::from_be_bytes([key[2], key[3]]) {
        0 => MarkerKind::Abort,
        1 => MarkerKind::Commit,
        t => return Err(format!("control record type {t} is not a transaction marker")),
    };
    let value = record.value.ok_or("a transaction marker without a value")?;
    if value.len() < 6 {
        return Err(format!("a transaction marker value of {} bytes", value.len()));
    }
    let version = i16::from_be_bytes([value[0], value[1]]);
    if version < 0 {
        return Err(format!("transaction marker version {version}"));
    }
    Ok(EndMarker { kind, coordinator_epoch: i32::from_be_bytes([value[2], value[3], value[4], value[5]]) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::record_batch::crc_is_valid;

    #[test]
    fn a_marker_batch_is_transactional_control_and_reads_back() {
        for kind in [MarkerKind::Abort, MarkerKind::Commit] {
            let marker = EndMarker { kind, coordinator_epoch: 3 };
            let batch = encode_marker_batch(4000, 7, marker, 1_700_000_000_000);
            let h = BatchHeader::parse(&batch).unwrap();
            assert!(h.is_control() && h.is_transactional() && crc_is_valid(&batch));
            assert_eq!((h.producer_id, h.producer_epoch, h.base_sequence, h.records_count), (4000, 7, -1, 1));
            assert_eq!(parse_end_marker(&batch).unwrap(), marker);
        }
    }

    #[test]
    fn a_marker_batch_is_byte_for_byte_kafkas() {
        // Kafka 4.4's MemoryRecords.withEndTransactionMarker(0, 1700000000000, -1, 4000, 7,
        // new EndTransactionMarker(COMMIT, 3)).
        let kafka = "000000000000000000000042ffffffff02367c836e0030000000000000018bcfe568000000018bcfe568\
                     000000000000000fa00007ffffffff000000012000000008000000010c00000000000300";
        let ours = encode_marker_batch(4000, 7, EndMarker { kind: MarkerKind::Commit, coordinator_epoch: 3 }, 1_700_000_000_000);
        let hex: String = ours.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, kafka.split_whitespace().collect::<String>());
    }

    #[test]
    fn a_data_batch_or_a_cut_marker_is_not_a_marker() {
        let data = crate::protocol::record_batch::encode_uncompressed_batch(&[crate::protocol::record_batch::SimpleRecord {
            timestamp: 1,
            key: None,
            value: Some(b"v"),
        }]);
        assert_eq!(parse_end_marker(&data).unwrap_err(), "not a control batch");
        let batch = encode_marker_batch(1, 0, EndMarker { kind: MarkerKind::Commit, coordinator_epoch: 0 }, 1);
        for n in 0..batch.len() {
            assert!(parse_end_marker(&batch[..n]).is_err(), "{n} of {} bytes", batch.len());
        }
    }
}
