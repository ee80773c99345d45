//! Transactions on the real broker, at the wire: the coordinator's answers (InitProducerId with a
//! transactional id, AddPartitionsToTxn, EndTxn), the fencing of a zombie producer, the check of
//! transactional produce against the coordinator, and what read_committed fetches see. The real
//! clients' transactions are exercised by the compat scenarios (`compat/`, java/transactions).

mod common;

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use common::Broker;
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType};
use kafka_protocol::ResponseError;

fn txn_id(s: &str) -> TransactionalId {
    TransactionalId(StrBytes::from_string(s.to_string()))
}

/// A transactional batch of `n` records from `producer_id` at `epoch`, sequences from `seq`.
fn txn_records(n: usize, producer_id: i64, epoch: i16, seq: i32, tag: &str) -> Bytes {
    let records: Vec<Record> = (0..n)
        .map(|i| Record {
            transactional: true,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id,
            producer_epoch: epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: seq + i as i32,
            timestamp: 1_700_000_000_000,
            key: None,
            value: Some(Bytes::from(format!("{tag}-{i}"))),
            headers: IndexMap::new(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(&mut buf, &records, &RecordEncodeOptions { version: 2, compression: Compression::None }).unwrap();
    buf.freeze()
}

fn create_topic(c: &mut common::Client, topic: &str, partitions: i32) {
    let req = CreateTopicsRequest::default().with_topics(vec![create_topics_request::CreatableTopic::default()
        .with_name(common::topic_name(topic))
        .with_num_partitions(partitions)
        .with_replication_factor(1)]);
    assert_eq!(c.call(&req, 7).topics[0].error_code, 0);
}

/// InitProducerId for `id`, retried while the coordinator is still coming up (the state topic
/// is created on first use) or finishing an abort: `(error, producer id, epoch)`.
fn init(c: &mut common::Client, id: &str, expected: (i64, i16)) -> (i16, i64, i16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let req = InitProducerIdRequest::default()
            .with_transactional_id(Some(txn_id(id)))
            .with_transaction_timeout_ms(60_000)
            .with_producer_id(ProducerId(expected.0))
            .with_producer_epoch(expected.1);
        let r = c.call(&req, 4);
        let retriable = [ResponseError::CoordinatorNotAvailable, ResponseError::CoordinatorLoadInProgress, ResponseError::ConcurrentTransactions]
            .iter()
            .any(|e| e.code() == r.error_code);
        if !retriable || Instant::now() > deadline {
            return (r.error_code, r.producer_id.0, r.producer_epoch);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn add_partition(c: &mut common::Client, id: &str, pid: i64, epoch: i16, topic: &str, partition: i32) -> i16 {
    let req = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(txn_id(id))
        .with_v3_and_below_producer_id(ProducerId(pid))
        .with_v3_and_below_producer_epoch(epoch)
        .with_v3_and_below_topics(vec![add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
            .with_name(common::topic_name(topic))
            .with_partitions(vec![partition])]);
    c.call(&req, 3).results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
}

fn end(c: &mut common::Client, id: &str, pid: i64, epoch: i16, commit: bool, version: i16) -> i16 {
    let req = EndTxnRequest::default().with_transactional_id(txn_id(id)).with_producer_id(ProducerId(pid)).with_producer_epoch(epoch).with_committed(commit);
    c.call(&req, version).error_code
}

fn produce(c: &mut common::Client, id: Option<&str>, topic: &str, partition: i32, data: Bytes) -> i16 {
    let req = ProduceRequest::default().with_transactional_id(id.map(txn_id)).with_acks(-1).with_timeout_ms(5000).with_topic_data(vec![
        produce_request::TopicProduceData::default().with_name(common::topic_name(topic)).with_partition_data(vec![
            produce_request::PartitionProduceData::default().with_index(partition).with_records(Some(data)),
        ]),
    ]);
    c.call(&req, 9).responses[0].partition_responses[0].error_code
}

/// What a read_committed consumer of `topic`-0 gets, fetching from offset 0 up to the last
/// stable offset (a fetch stops at a segment's end): `(high watermark, last stable offset,
/// aborted (producer id, first offset), values of the non-control records returned)`.
fn fetch_committed(c: &mut common::Client, topic: &str) -> (i64, i64, Vec<(i64, i64)>, Vec<String>) {
    let (mut offset, mut aborted, mut values) = (0i64, Vec::new(), Vec::new());
    loop {
        let req = FetchRequest::default().with_max_wait_ms(0).with_max_bytes(1 << 20).with_isolation_level(1).with_topics(vec![
            fetch_request::FetchTopic::default().with_topic(common::topic_name(topic)).with_partitions(vec![
                fetch_request::FetchPartition::default().with_partition(0).with_fetch_offset(offset).with_partition_max_bytes(1 << 20),
            ]),
        ]);
        let r = c.call(&req, 11);
        let p = &r.responses[0].partitions[0];
        assert_eq!(p.error_code, 0);
        for a in p.aborted_transactions.as_ref().expect("read_committed gets a list") {
            if !aborted.contains(&(a.producer_id.0, a.first_offset)) {
                aborted.push((a.producer_id.0, a.first_offset));
            }
        }
        let mut buf = p.records.clone().unwrap_or_default();
        let before = offset;
        while !buf.is_empty() {
            let set = RecordBatchDecoder::decode(&mut buf).unwrap();
            for rec in &set.records {
                offset = offset.max(rec.offset + 1);
                if !rec.control {
                    values.push(String::from_utf8_lossy(rec.value.as_deref().unwrap_or_default()).to_string());
                }
            }
        }
        if offset == before || offset >= p.last_stable_offset {
            return (p.high_watermark, p.last_stable_offset, aborted, values);
        }
    }
}

/// Waits until the read_committed view of `topic` has last stable offset `lso`.
fn until_lso(c: &mut common::Client, topic: &str, lso: i64) -> (i64, i64, Vec<(i64, i64)>, Vec<String>) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let f = fetch_committed(c, topic);
        if f.1 == lso || Instant::now() > deadline {
            return f;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_transactional_id_keeps_its_producer_id_and_each_init_bumps_its_epoch() {
    let b = Broker::start(&["transaction.max.timeout.ms=120000"]);
    let mut c = b.connect();
    let v3 = c.call(&FindCoordinatorRequest::default().with_key(StrBytes::from_static_str("app-1")).with_key_type(1), 3);
    assert_eq!(v3.error_code, 0, "{:?}", v3.error_message);
    let (code, pid, epoch) = init(&mut c, "app-1", (-1, -1));
    assert_eq!((code, epoch), (0, 0));
    assert!(pid >= 0);
    assert_eq!(init(&mut c, "app-1", (-1, -1)), (0, pid, 1), "same producer id, next epoch");
    // KIP-360: a producer naming its current id and epoch is bumped; an older epoch is fenced.
    assert_eq!(init(&mut c, "app-1", (pid, 1)), (0, pid, 2));
    assert_eq!(init(&mut c, "app-1", (pid, 0)).0, ResponseError::ProducerFenced.code());
    let other = init(&mut c, "app-2", (-1, -1));
    assert!(other.0 == 0 && other.1 != pid, "another id, another producer id: {other:?}");
    // Bad input gets Kafka's codes and allocates nothing.
    let empty = c.call(&InitProducerIdRequest::default().with_transactional_id(Some(txn_id(""))).with_transaction_timeout_ms(60_000), 4);
    assert_eq!(empty.error_code, ResponseError::InvalidRequest.code());
    let long = c.call(&InitProducerIdRequest::default().with_transactional_id(Some(txn_id("app-1"))).with_transaction_timeout_ms(120_001), 4);
    assert_eq!(long.error_code, ResponseError::InvalidTransactionTimeout.code());
    assert_eq!(init(&mut c, "app-1", (-1, -1)), (0, pid, 3), "the refused requests changed nothing");

    // The ids survive a kill -9 (replayed from __transaction_state).
    let b = Broker::start_in(b.kill9(), &["transaction.max.timeout.ms=120000"]);
    let mut c = b.connect();
    assert_eq!(init(&mut c, "app-1", (-1, -1)), (0, pid, 4));
}

#[test]
fn read_committed_sees_committed_transactions_whole_and_nothing_of_aborted_ones() {
    let b = Broker::start(&[]);
    let mut c = b.connect();
    create_topic(&mut c, "t", 1);
    let (_, pid, epoch) = init(&mut c, "tx", (-1, -1));
    // Not added to the transaction yet: refused, nothing written.
    assert_eq!(produce(&mut c, Some("tx"), "t", 0, txn_records(2, pid, epoch, 0, "early")), ResponseError::InvalidTxnState.code());
    // A transactional batch without its transactional id is refused too.
    assert_eq!(produce(&mut c, None, "t", 0, txn_records(2, pid, epoch, 0, "anon")), ResponseError::InvalidTxnState.code());
    assert_eq!(add_partition(&mut c, "tx", pid, epoch, "t", 0), 0);
    assert_eq!(add_partition(&mut c, "tx", pid, epoch, "missing", 0), ResponseError::UnknownTopicOrPartition.code());
    assert_eq!(produce(&mut c, Some("tx"), "t", 0, txn_records(3, pid, epoch, 0, "committed")), 0);
    // Open: read_committed sees nothing yet.
    let (hw, lso, _, values) = fetch_committed(&mut c, "t");
    assert_eq!((hw, lso, values.len()), (3, 0, 0));
    assert_eq!(end(&mut c, "tx", pid, epoch, true, 3), 0);
    let (_, _, aborted, values) = until_lso(&mut c, "t", 4);
    assert_eq!(values, ["committed-0", "committed-1", "committed-2"]);
    assert!(aborted.is_empty());

    // The next transaction is aborted: its records stay in the log, listed as aborted.
    let add = |c: &mut common::Client| {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let code = add_partition(c, "tx", pid, epoch, "t", 0);
            if code != ResponseError::ConcurrentTransactions.code() || Instant::now() > deadline {
                return code;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    assert_eq!(add(&mut c), 0);
    assert_eq!(produce(&mut c, Some("tx"), "t", 0, txn_records(2, pid, epoch, 3, "aborted")), 0);
    assert_eq!(end(&mut c, "tx", pid, epoch, false, 3), 0);
    let (hw, _, aborted, values) = until_lso(&mut c, "t", 7);
    assert_eq!(hw, 7);
    assert_eq!(aborted, [(pid, 4)]);
    assert!(values.iter().filter(|v| v.starts_with("aborted")).count() == 2, "the records are returned, with the abort listed: {values:?}");
    // Ending again the way it ended is a retry: answered NONE.
    assert_eq!(end(&mut c, "tx", pid, epoch, false, 3), 0);
    assert_eq!(end(&mut c, "tx", pid, epoch, true, 3), ResponseError::InvalidTxnState.code());
}

#[test]
fn a_zombie_producer_is_fenced_and_cannot_write_or_commit() {
    let b = Broker::start(&[]);
    let mut c = b.connect();
    create_topic(&mut c, "t", 1);
    let (_, pid, zombie) = init(&mut c, "app", (-1, -1));
    assert_eq!(add_partition(&mut c, "app", pid, zombie, "t", 0), 0);
    assert_eq!(produce(&mut c, Some("app"), "t", 0, txn_records(2, pid, zombie, 0, "zombie")), 0);
    // A new instance with the same transactional id: the zombie's open transaction is aborted
    // under a fenced epoch and the new instance gets the epoch after it.
    let (code, same_pid, epoch) = init(&mut c, "app", (-1, -1));
    assert_eq!((code, same_pid), (0, pid));
    assert_eq!(epoch, zombie + 2, "one bump to fence and abort, one for the new instance");
    assert_eq!(end(&mut c, "app", pid, zombie, true, 3), ResponseError::ProducerFenced.code());
    assert_eq!(end(&mut c, "app", pid, zombie, true, 1), ResponseError::InvalidProducerEpoch.code(), "old clients know the fence by this code");
    assert_eq!(add_partition(&mut c, "app", pid, zombie, "t", 0), ResponseError::ProducerFenced.code());
    assert_eq!(produce(&mut c, Some("app"), "t", 0, txn_records(1, pid, zombie, 2, "late")), ResponseError::InvalidProducerEpoch.code());
    // Nothing of the zombie's is visible to read_committed.
    let (hw, lso, aborted, values) = until_lso(&mut c, "t", 3);
    assert_eq!((hw, lso), (3, 3));
    assert_eq!(aborted, [(pid, 0)]);
    assert_eq!(values, ["zombie-0", "zombie-1"], "returned, but listed as aborted");
    // The new instance's transaction commits.
    assert_eq!(add_partition(&mut c, "app", pid, epoch, "t", 0), 0);
    assert_eq!(produce(&mut c, Some("app"), "t", 0, txn_records(1, pid, epoch, 0, "new")), 0);
    assert_eq!(end(&mut c, "app", pid, epoch, true, 3), 0);
    let (_, lso, _, values) = until_lso(&mut c, "t", 5);
    assert_eq!(lso, 5);
    assert_eq!(values.last().map(String::as_str), Some("new-0"));
}
