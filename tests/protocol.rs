//! Wire-level behaviour of the real broker: framing bounds, version negotiation, error codes for
//! bad input, and that a misbehaving connection never disturbs another.

mod common;

use bytes::{BufMut, Bytes, BytesMut};
use common::Broker;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

fn records(n: usize, producer_id: i64, seq: i32) -> Bytes {
    let recs: Vec<common::Rec> = (0..n)
        .map(|i| common::Rec { key: Some(format!("k{i}")), value: format!("v{i}"), timestamp: 1_700_000_000_000 + i as i64 })
        .collect();
    common::encode_batch(&recs, (producer_id >= 0).then_some((producer_id, seq)))
}

fn name(s: &str) -> TopicName {
    common::topic_name(s)
}

fn create_topic(c: &mut common::Client, topic: &str, partitions: i32) {
    let req = CreateTopicsRequest::default().with_topics(vec![create_topics_request::CreatableTopic::default()
        .with_name(name(topic))
        .with_num_partitions(partitions)
        .with_replication_factor(1)]);
    let resp = c.call(&req, 7);
    assert_eq!(resp.topics[0].error_code, 0, "{:?}", resp.topics[0].error_message);
}

fn produce(c: &mut common::Client, topic: &str, partition: i32, data: Bytes, acks: i16) -> produce_response::PartitionProduceResponse {
    let req = ProduceRequest::default().with_acks(acks).with_timeout_ms(5000).with_topic_data(vec![
        produce_request::TopicProduceData::default().with_name(name(topic)).with_partition_data(vec![
            produce_request::PartitionProduceData::default().with_index(partition).with_records(Some(data)),
        ]),
    ]);
    let mut resp = c.call(&req, 9);
    resp.responses.remove(0).partition_responses.remove(0)
}

#[test]
fn unsupported_api_versions_version_gets_v0_error_with_supported_ranges() {
    let b = Broker::start(&[]);
    let mut c = b.connect();
    // ApiVersions v99 with a v2 header: the broker must answer in v0 framing.
    let mut buf = BytesMut::new();
    buf.put_i32(0);
    buf.put_i16(18);
    buf.put_i16(99);
    buf.put_i32(7);
    buf.put_i16(-1);
    buf.put_u8(0);
    let n = (buf.len() - 4) as i32;
    buf[0..4].copy_from_slice(&n.to_be_bytes());
    c.send_raw(&buf);
    let mut frame = c.read_frame().expect("a response");
    use kafka_protocol::protocol::Decodable;
    let header = ResponseHeader::decode(&mut frame, 0).unwrap();
    assert_eq!(header.correlation_id, 7);
    let resp = ApiVersionsResponse::decode(&mut frame, 0).unwrap();
    assert_eq!(resp.error_code, ResponseError::UnsupportedVersion.code());
    // Kafka lists only the ApiVersions range in this answer.
    assert_eq!(resp.api_keys.len(), 1);
    let av = &resp.api_keys[0];
    assert_eq!((av.api_key, av.min_version, av.max_version), (18, 0, 4));
    // The connection stays usable.
    let ok = c.call(&ApiVersionsRequest::default(), 3);
    assert_eq!(ok.error_code, 0);
    let produce = ok.api_keys.iter().find(|k| k.api_key == 0).unwrap();
    assert_eq!(produce.min_version, 0, "Produce must be advertised from v0 (librdkafka quirk)");
}

#[test]
fn negative_and_oversized_frames_close_only_that_connection() {
    let b = Broker::start(&["socket.request.max.bytes=1000"]);
    let mut good = b.connect();
    create_topic(&mut good, "t", 1);

    let mut neg = b.connect();
    neg.send_raw(&(-5i32).to_be_bytes());
    assert!(neg.is_closed());

    let mut big = b.connect();
    big.send_raw(&1001i32.to_be_bytes());
    assert!(big.is_closed());

    let r = produce(&mut good, "t", 0, records(3, -1, 0), 1);
    assert_eq!((r.error_code, r.base_offset), (0, 0));
}

#[test]
fn unknown_api_key_and_unsupported_version_close_the_connection() {
    let b = Broker::start(&[]);
    let mut c = b.connect();
    let mut buf = BytesMut::new();
    buf.put_i32(10);
    buf.put_i16(9999);
    buf.put_i16(0);
    buf.put_i32(1);
    buf.put_i16(-1);
    c.send_raw(&buf);
    assert!(c.is_closed());

    // Produce v2 is advertised (v0 quirk) but refused like Kafka 4.x does.
    let mut c = b.connect();
    let req = ProduceRequest::default().with_acks(1);
    let mut raw = c.encode(&req, 3);
    raw[6..8].copy_from_slice(&2i16.to_be_bytes());
    c.send_raw(&raw);
    assert!(c.is_closed());
}

#[test]
fn huge_array_count_does_not_allocate_or_crash() {
    let b = Broker::start(&[]);
    let mut c = b.connect();
    // Metadata v1: header then an array count of i32::MAX with no elements behind it.
    let mut buf = BytesMut::new();
    buf.put_i32(0);
    buf.put_i16(3);
    buf.put_i16(1);
    buf.put_i32(1);
    buf.put_i16(-1);
    buf.put_i32(i32::MAX);
    let n = (buf.len() - 4) as i32;
    buf[0..4].copy_from_slice(&n.to_be_bytes());
    c.send_raw(&buf);
    assert!(c.is_closed());
    let mut other = b.connect();
    assert_eq!(other.call(&ApiVersionsRequest::default(), 3).error_code, 0);
}

#[test]
fn garbage_bytes_never_crash_the_broker() {
    let b = Broker::start(&[]);
    let mut seed: u64 = 0x9e3779b97f4a7c15;
    for _ in 0..20 {
        let mut c = b.connect();
        let mut junk = Vec::with_capacity(4096);
        for _ in 0..4096 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            junk.push(seed as u8);
        }
        // A plausible small size prefix so the junk reaches header and body decoding.
        let size = (seed % 4000) as i32;
        let _ = std::io::Write::write_all(&mut c.stream, &size.to_be_bytes());
        let _ = std::io::Write::write_all(&mut c.stream, &junk);
    }
    let mut c = b.connect();
    assert_eq!(c.call(&ApiVersionsRequest::default(), 3).error_code, 0);
}

#[test]
fn produce_errors_use_kafka_codes() {
    let b = Broker::start(&["message.max.bytes=2000"]);
    let mut c = b.connect();
    create_topic(&mut c, "t", 1);

    let r = produce(&mut c, "missing", 0, records(1, -1, 0), 1);
    assert_eq!(r.error_code, ResponseError::UnknownTopicOrPartition.code());
    let r = produce(&mut c, "t", 5, records(1, -1, 0), 1);
    assert_eq!(r.error_code, ResponseError::UnknownTopicOrPartition.code());

    let mut bad = BytesMut::from(&records(2, -1, 0)[..]);
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    let r = produce(&mut c, "t", 0, bad.freeze(), 1);
    assert_eq!(r.error_code, ResponseError::CorruptMessage.code());

    let big = records(500, -1, 0);
    assert!(big.len() > 2000);
    let r = produce(&mut c, "t", 0, big, 1);
    assert_eq!(r.error_code, ResponseError::MessageTooLarge.code());

    let r = produce(&mut c, "t", 0, records(1, -1, 0), 7);
    assert_eq!(r.error_code, ResponseError::InvalidRequiredAcks.code());

    // Produce v3+ carries exactly one batch per partition.
    let mut two = BytesMut::from(&records(1, -1, 0)[..]);
    two.extend_from_slice(&records(1, -1, 0));
    let r = produce(&mut c, "t", 0, two.freeze(), 1);
    assert_eq!(r.error_code, ResponseError::InvalidRecord.code());

    // Nothing above was appended.
    let r = produce(&mut c, "t", 0, records(1, -1, 0), 1);
    assert_eq!((r.error_code, r.base_offset), (0, 0));
}

#[test]
fn idempotent_retry_is_deduplicated_and_gaps_are_refused() {
    let b = Broker::start(&[]);
    let mut c = b.connect();
    create_topic(&mut c, "t", 1);
    let pid = c.call(&InitProducerIdRequest::default().with_transactional_id(None).with_transaction_timeout_ms(60000), 4);
    assert_eq!(pid.error_code, 0);
    let id = pid.producer_id.0;
    assert!(id >= 0);

    let first = produce(&mut c, "t", 0, records(3, id, 0), -1);
    assert_eq!((first.error_code, first.base_offset), (0, 0));
    let retry = produce(&mut c, "t", 0, records(3, id, 0), -1);
    assert_eq!((retry.error_code, retry.base_offset), (0, 0), "a retried batch is acknowledged at its original offset");
    let gap = produce(&mut c, "t", 0, records(1, id, 7), -1);
    assert_eq!(gap.error_code, ResponseError::OutOfOrderSequenceNumber.code());
    let next = produce(&mut c, "t", 0, records(1, id, 3), -1);
    assert_eq!((next.error_code, next.base_offset), (0, 3));
}

#[test]
fn acl_apis_say_security_is_disabled_and_elections_are_not_needed_in_kafkas_words() {
    let b = Broker::start(&[]);
    let mut c = b.connect();
    create_topic(&mut c, "t", 2);
    let msg = |m: &Option<StrBytes>| m.as_deref().map(|s| s.to_string()).unwrap_or_default();
    // The messages are Apache Kafka 4.4's, read from its responses (protocol-tests compares
    // the rest of each response with Kafka's, but not messages).
    let d = c.call(&DescribeAclsRequest::default().with_resource_type_filter(1).with_pattern_type_filter(1).with_operation(1).with_permission_type(1), 3);
    assert_eq!((d.error_code, msg(&d.error_message).as_str()), (ResponseError::SecurityDisabled.code(), "No Authorizer is configured on the broker"));
    let creation = create_acls_request::AclCreation::default().with_resource_type(2).with_resource_name(StrBytes::from_static_str("t")).with_resource_pattern_type(3);
    let cr = c.call(&CreateAclsRequest::default().with_creations(vec![creation.clone(), creation]), 3);
    assert_eq!(cr.results.len(), 2);
    for r in &cr.results {
        assert_eq!((r.error_code, msg(&r.error_message).as_str()), (ResponseError::SecurityDisabled.code(), "No Authorizer is configured."));
    }
    let dl = c.call(&DeleteAclsRequest::default().with_filters(vec![delete_acls_request::DeleteAclsFilter::default().with_resource_type_filter(1)]), 3);
    assert_eq!((dl.filter_results[0].error_code, msg(&dl.filter_results[0].error_message).as_str()), (ResponseError::SecurityDisabled.code(), "No Authorizer is configured."));

    let wanted = |topic: &str, partitions: Vec<i32>| elect_leaders_request::TopicPartitions::default().with_topic(name(topic)).with_partitions(partitions);
    let e = c.call(&ElectLeadersRequest::default().with_election_type(0).with_timeout_ms(5000).with_topic_partitions(Some(vec![wanted("t", vec![1, 7]), wanted("nope", vec![0])])), 2);
    assert_eq!(e.error_code, 0);
    let got: Vec<(String, i32, i16, String)> = e
        .replica_election_results
        .iter()
        .flat_map(|t| t.partition_result.iter().map(|p| (t.topic.as_str().to_string(), p.partition_id, p.error_code, msg(&p.error_message))))
        .collect();
    assert_eq!(got, vec![
        ("t".to_string(), 1, ResponseError::ElectionNotNeeded.code(), "Leader election not needed for topic partition.".to_string()),
        ("t".to_string(), 7, ResponseError::UnknownTopicOrPartition.code(), "No such partition as t-7".to_string()),
        ("nope".to_string(), 0, ResponseError::UnknownTopicOrPartition.code(), "No such topic as nope".to_string()),
    ]);
    // every partition: each topic listed, no partition elected
    let all = c.call(&ElectLeadersRequest::default().with_election_type(0).with_timeout_ms(5000).with_topic_partitions(None), 2);
    assert!(all.replica_election_results.iter().any(|t| t.topic.as_str() == "t"));
    assert!(all.replica_election_results.iter().all(|t| t.partition_result.is_empty()));
}

#[test]
fn describe_producers_shows_each_idempotent_producers_epoch_and_last_sequence() {
    let b = Broker::start(&[]);
    let mut c = b.connect();
    create_topic(&mut c, "t", 2);
    let pid = c.call(&InitProducerIdRequest::default().with_transactional_id(None).with_transaction_timeout_ms(60000), 4).producer_id.0;
    assert_eq!(produce(&mut c, "t", 0, records(3, pid, 0), -1).error_code, 0);
    assert_eq!(produce(&mut c, "t", 0, records(2, pid, 3), -1).error_code, 0);
    assert_eq!(produce(&mut c, "t", 1, records(2, -1, -1), -1).error_code, 0);
    let req = DescribeProducersRequest::default().with_topics(vec![
        describe_producers_request::TopicRequest::default().with_name(name("t")).with_partition_indexes(vec![0, 1, 9]),
    ]);
    let r = c.call(&req, 0);
    let parts = &r.topics[0].partitions;
    assert_eq!(parts.iter().map(|p| (p.partition_index, p.error_code)).collect::<Vec<_>>(), vec![(0, 0), (1, 0), (9, ResponseError::UnknownTopicOrPartition.code())]);
    let p0: Vec<_> = parts[0]
        .active_producers
        .iter()
        .map(|a| (a.producer_id.0, a.producer_epoch, a.last_sequence, a.last_timestamp, a.coordinator_epoch, a.current_txn_start_offset))
        .collect();
    // records(2, ..) stamps 1_700_000_000_000 + i: the last batch's max timestamp is +1
    assert_eq!(p0, vec![(pid, 0, 4, 1_700_000_000_001, -1, -1)]);
    assert!(parts[1].active_producers.is_empty(), "a producer without an id leaves no state");
}

#[test]
fn acks_zero_gets_no_response_but_is_appended() {
    let b = Broker::start(&[]);
    let mut c = b.connect();
    create_topic(&mut c, "t", 1);
    let req = ProduceRequest::default().with_acks(0).with_timeout_ms(1000).with_topic_data(vec![
        produce_request::TopicProduceData::default().with_name(name("t")).with_partition_data(vec![
            produce_request::PartitionProduceData::default().with_index(0).with_records(Some(records(4, -1, 0))),
        ]),
    ]);
    let raw = c.encode(&req, 9);
    c.send_raw(&raw);
    // The next response on the connection belongs to the next request.
    let lo = c.call(
        &ListOffsetsRequest::default().with_replica_id(BrokerId(-1)).with_topics(vec![list_offsets_request::ListOffsetsTopic::default()
            .with_name(name("t"))
            .with_partitions(vec![list_offsets_request::ListOffsetsPartition::default().with_partition_index(0).with_timestamp(-1)])]),
        7,
    );
    assert_eq!(lo.topics[0].partitions[0].offset, 4);
}

#[test]
fn create_topics_rejects_bad_names_duplicates_and_replication_factor() {
    let b = Broker::start(&[]);
    let mut c = b.connect();
    create_topic(&mut c, "exists", 1);
    let t = |n: &str, p: i32, rf: i16| {
        create_topics_request::CreatableTopic::default().with_name(name(n)).with_num_partitions(p).with_replication_factor(rf)
    };
    let resp = c.call(
        &CreateTopicsRequest::default().with_topics(vec![
            t("exists", 1, 1),
            t("bad name", 1, 1),
            t("rf3", 1, 3),
            t("zero", 0, 1),
            t("badcfg", 1, 1).with_configs(vec![create_topics_request::CreatableTopicConfig::default()
                .with_name(StrBytes::from_static_str("retention.ms"))
                .with_value(Some(StrBytes::from_static_str("soon")))]),
        ]),
        7,
    );
    let codes: Vec<i16> = resp.topics.iter().map(|t| t.error_code).collect();
    assert_eq!(
        codes,
        vec![
            ResponseError::TopicAlreadyExists.code(),
            ResponseError::InvalidTopicException.code(),
            ResponseError::InvalidReplicationFactor.code(),
            ResponseError::InvalidPartitions.code(),
            ResponseError::InvalidConfig.code(),
        ]
    );
}

#[test]
fn one_create_topics_request_makes_every_good_topic_beside_the_refused_ones_and_each_is_served_at_once() {
    let b = Broker::start(&[]);
    let mut c = b.connect();
    let t = |n: &str, p: i32| create_topics_request::CreatableTopic::default().with_name(name(n)).with_num_partitions(p).with_replication_factor(1);
    let resp = c.call(&CreateTopicsRequest::default().with_topics(vec![t("g1", 3), t("bad name", 1), t("g2", 2), t("g3", 0)]), 7);
    let got: Vec<(String, i16, i32)> = resp.topics.iter().map(|t| (t.name.0.to_string(), t.error_code, t.num_partitions)).collect();
    assert_eq!(
        got,
        vec![
            ("g1".to_string(), 0, 3),
            ("bad name".to_string(), ResponseError::InvalidTopicException.code(), -1),
            ("g2".to_string(), 0, 2),
            ("g3".to_string(), ResponseError::InvalidPartitions.code(), -1),
        ]
    );
    let meta = c.call(
        &MetadataRequest::default().with_topics(Some(
            ["g1", "g2"].iter().map(|n| metadata_request::MetadataRequestTopic::default().with_name(Some(name(n)))).collect(),
        )),
        12,
    );
    for (topic, partitions) in meta.topics.iter().zip([3, 2]) {
        assert_eq!(topic.error_code, 0);
        assert_eq!(topic.partitions.len(), partitions);
        assert!(topic.partitions.iter().all(|p| p.error_code == 0 && p.leader_id.0 == 1), "{topic:?}");
    }
    assert_eq!(produce(&mut c, "g2", 1, records(3, -1, 0), 1).error_code, 0);
}

#[test]
fn metadata_for_an_unknown_topic_creates_it_and_answers_with_its_partitions() {
    let b = Broker::start(&["num.partitions=2"]);
    let mut c = b.connect();
    let req = MetadataRequest::default()
        .with_allow_auto_topic_creation(true)
        .with_topics(Some(vec![metadata_request::MetadataRequestTopic::default().with_name(Some(name("made-on-ask")))]));
    let meta = c.call(&req, 12);
    let topic = &meta.topics[0];
    // Kafka answers LEADER_NOT_AVAILABLE while it creates the topic (clients ask again, librdkafka
    // a second later); the topic exists once the answer is written, so it is the answer.
    assert_eq!(topic.error_code, 0, "{topic:?}");
    assert_eq!(topic.partitions.iter().map(|p| (p.partition_index, p.leader_id.0)).collect::<Vec<_>>(), vec![(0, 1), (1, 1)]);
    assert_eq!(produce(&mut c, "made-on-ask", 1, records(2, -1, 0), 1).error_code, 0);
}

#[test]
fn fetch_long_poll_is_woken_by_an_append() {
    let b = Broker::start(&[]);
    let mut c = b.connect();
    create_topic(&mut c, "t", 1);
    let addr = b.addr.clone();
    let producer = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(300));
        let mut p = common::Client::connect_to(&addr);
        produce(&mut p, "t", 0, records(2, -1, 0), 1)
    });
    let started = std::time::Instant::now();
    let req = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(20_000)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_session_epoch(-1)
        .with_topics(vec![fetch_request::FetchTopic::default().with_topic(name("t")).with_partitions(vec![
            fetch_request::FetchPartition::default().with_partition(0).with_fetch_offset(0).with_partition_max_bytes(1 << 20),
        ])]);
    let resp = c.call(&req, 12);
    let waited = started.elapsed();
    assert_eq!(producer.join().unwrap().error_code, 0);
    let p = &resp.responses[0].partitions[0];
    assert_eq!(p.error_code, 0);
    assert_eq!(p.high_watermark, 2);
    assert!(p.records.as_ref().map(|r| !r.is_empty()).unwrap_or(false));
    // Woken by the append, long before max_wait_ms.
    assert!(waited < std::time::Duration::from_secs(10), "fetch waited {waited:?}");
}

fn vm_data_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmData:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[test]
fn claimed_frame_sizes_do_not_reserve_memory_before_the_bytes_arrive() {
    let b = Broker::start(&[]);
    let mut probe = b.connect();
    assert_eq!(probe.call(&ApiVersionsRequest::default(), 3).error_code, 0);
    let before = vm_data_kib(b.child.id());
    // 20 connections each announce a 100 MB request (just under the limit) and send 8 bytes.
    let mut held = Vec::new();
    for _ in 0..20 {
        let mut c = b.connect();
        let mut buf = BytesMut::new();
        buf.put_i32(104_857_600 - 1);
        buf.put_i16(0);
        buf.put_i16(9);
        buf.put_i32(1);
        c.send_raw(&buf);
        held.push(c);
    }
    // The broker has read the prefixes once the probe (served after them) answers.
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(probe.call(&ApiVersionsRequest::default(), 3).error_code, 0);
    let after = vm_data_kib(b.child.id());
    let grown_mib = after.saturating_sub(before) / 1024;
    assert!(grown_mib < 200, "announcing 2 GB of requests grew the broker's data segment by {grown_mib} MiB");
}

/// One batch of 10 records of about 2 KB each (~20 KB), values naming their batch and index.
fn big_batch(batch: usize) -> Bytes {
    let recs: Vec<common::Rec> = (0..10)
        .map(|i| common::Rec {
            key: None,
            value: format!("b{batch}-r{i}-{}", "x".repeat(2000)),
            timestamp: 1_700_000_000_000 + batch as i64,
        })
        .collect();
    common::encode_batch(&recs, None)
}

fn fetch_partitions(
    c: &mut common::Client,
    topic: &str,
    parts: &[(i32, i64, i32)],
    max_bytes: i32,
    version: i16,
) -> FetchResponse {
    let req = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(max_bytes)
        .with_session_epoch(-1)
        .with_topics(vec![fetch_request::FetchTopic::default()
            .with_topic(name(topic))
            .with_partitions(
                parts
                    .iter()
                    .map(|&(p, offset, max)| {
                        fetch_request::FetchPartition::default()
                            .with_partition(p)
                            .with_fetch_offset(offset)
                            .with_partition_max_bytes(max)
                    })
                    .collect(),
            )]);
    c.call(&req, version)
}

/// (offset, value prefix) of every record in `records`; panics on a partial batch.
fn decoded(records: &Option<Bytes>) -> Vec<(i64, String)> {
    let mut buf = records.clone().unwrap_or_default();
    kafka_protocol::records::RecordBatchDecoder::decode_all(&mut buf)
        .expect("whole batches")
        .into_iter()
        .flat_map(|set| set.records)
        .map(|r| {
            let v = String::from_utf8(r.value.unwrap().to_vec()).unwrap();
            (r.offset, v.split('-').take(2).collect::<Vec<_>>().join("-"))
        })
        .collect()
}

#[test]
fn large_fetches_return_whole_batches_in_order_within_the_limits() {
    let b = Broker::start(&[]);
    let mut c = b.connect();
    create_topic(&mut c, "big", 2);
    for batch in 0..30 {
        assert_eq!(produce(&mut c, "big", 0, big_batch(batch), 1).error_code, 0);
    }
    assert_eq!(
        produce(&mut c, "big", 1, records(3, -1, 0), 1).error_code,
        0
    );
    let expected: Vec<(i64, String)> = (0..30)
        .flat_map(|b| (0..10).map(move |i| ((b * 10 + i) as i64, format!("b{b}-r{i}"))))
        .collect();
    let sizes: Vec<usize> = (0..30).map(|b| big_batch(b).len()).collect();
    // Batches whose end is within 100,000 bytes.
    let fitting = sizes
        .iter()
        .scan(0, |end, s| {
            *end += s;
            Some(*end)
        })
        .filter(|&end| end <= 100_000)
        .count();

    for version in [4, 11, 12] {
        // ~600 KB from partition 0 (sent from the segment file) and a small batch from 1.
        let resp = fetch_partitions(
            &mut c,
            "big",
            &[(0, 0, 1 << 20), (1, 0, 1 << 20)],
            50 << 20,
            version,
        );
        let ps = &resp.responses[0].partitions;
        assert_eq!(
            (ps[0].error_code, ps[0].high_watermark),
            (0, 300),
            "v{version}"
        );
        assert_eq!(decoded(&ps[0].records), expected, "v{version}");
        assert_eq!(
            ps[0].records.as_ref().unwrap().len(),
            sizes.iter().sum::<usize>(),
            "v{version}"
        );
        assert_eq!(
            decoded(&ps[1].records)
                .iter()
                .map(|r| r.0)
                .collect::<Vec<_>>(),
            [0, 1, 2],
            "v{version}"
        );

        // A partition limit cuts at the last whole batch that fits.
        let resp = fetch_partitions(&mut c, "big", &[(0, 0, 100_000)], 50 << 20, version);
        let got = decoded(&resp.responses[0].partitions[0].records);
        assert_eq!(got, expected[..fitting * 10], "v{version}");

        // From an offset inside a batch: the whole batch holding it, then the rest in order.
        let resp = fetch_partitions(&mut c, "big", &[(0, 155, 1 << 20)], 50 << 20, version);
        assert_eq!(
            decoded(&resp.responses[0].partitions[0].records),
            expected[150..],
            "v{version}"
        );

        // A limit below one batch still returns the first batch whole (KIP-74), nothing more.
        let resp = fetch_partitions(&mut c, "big", &[(0, 40, 100)], 100, version);
        assert_eq!(
            decoded(&resp.responses[0].partitions[0].records),
            expected[40..50],
            "v{version}"
        );
    }

    // The connection stays in step after large responses: a later request gets its own answer.
    let resp = fetch_partitions(&mut c, "big", &[(1, 3, 1 << 20)], 1 << 20, 12);
    assert_eq!(resp.responses[0].partitions[0].high_watermark, 3);
    assert_eq!(decoded(&resp.responses[0].partitions[0].records), []);
}

/// Under `flush.acks.all` an acks=all produce is answered by a task of its own while the
/// connection goes on with the requests behind it: pipelined requests still get their
/// responses in request order, with the produces' offsets in order, and a bad request behind
/// a held response closes the connection only after that response is written.
#[test]
fn responses_held_behind_an_fsync_keep_request_order() {
    use kafka_protocol::protocol::Decodable;
    let b = Broker::start(&["log.flush.acks.all=true", "num.partitions=1"]);
    let mut c = b.connect();
    let topic = |n: &str| TopicName(StrBytes::from_string(n.to_string()));
    let created = c.call(
        &CreateTopicsRequest::default().with_topics(vec![create_topics_request::CreatableTopic::default()
            .with_name(topic("held"))
            .with_num_partitions(1)
            .with_replication_factor(1)]),
        7,
    );
    assert_eq!(created.topics[0].error_code, 0);
    let produce = ProduceRequest::default().with_acks(-1).with_timeout_ms(5000).with_topic_data(vec![
        produce_request::TopicProduceData::default().with_name(topic("held")).with_partition_data(vec![
            produce_request::PartitionProduceData::default().with_index(0).with_records(Some(big_batch(0))),
        ]),
    ]);
    // Six rounds of produce, produce, ApiVersions, Metadata in one write each.
    for round in 0..6i64 {
        let mut buf = BytesMut::new();
        let first = c.encode(&produce, 9);
        buf.extend_from_slice(&first);
        buf.extend_from_slice(&c.encode(&produce, 9));
        buf.extend_from_slice(&c.encode(&ApiVersionsRequest::default(), 3));
        buf.extend_from_slice(&c.encode(&MetadataRequest::default().with_topics(None), 12));
        c.send_raw(&buf);
        let first_corr = i32::from_be_bytes(first[8..12].try_into().unwrap());
        for (i, key) in [ApiKey::Produce, ApiKey::Produce, ApiKey::ApiVersions, ApiKey::Metadata].into_iter().enumerate() {
            let mut frame = c.read_frame().expect("connection closed");
            let version = match key {
                ApiKey::Produce => 9,
                ApiKey::ApiVersions => 3,
                _ => 12,
            };
            let header = ResponseHeader::decode(&mut frame, key.response_header_version(version)).unwrap();
            assert_eq!(header.correlation_id, first_corr + i as i32, "round {round}: response {i} out of order");
            if key == ApiKey::Produce {
                let resp = ProduceResponse::decode(&mut frame, version).unwrap();
                let p = &resp.responses[0].partition_responses[0];
                assert_eq!((p.error_code, p.base_offset), (0, (round * 2 + i as i64) * 10), "round {round}");
            }
        }
    }
    let mut buf = BytesMut::new();
    buf.extend_from_slice(&c.encode(&produce, 9));
    buf.put_i32(10);
    buf.put_i16(9999); // no such api
    buf.put_i16(0);
    buf.put_i32(1);
    buf.put_i16(-1);
    c.send_raw(&buf);
    let mut frame = c.read_frame().expect("the produce before the bad request is answered");
    ResponseHeader::decode(&mut frame, 1).unwrap();
    let resp = ProduceResponse::decode(&mut frame, 9).unwrap();
    assert_eq!(resp.responses[0].partition_responses[0].base_offset, 120);
    assert!(c.is_closed());
}

/// A produce of 64 KiB or more appends on the blocking pool, off the connection's task: a
/// producer's pipelined large batches still land in the order sent, idempotent sequences and
/// all, and a request behind them sees their appends (ListOffsets gives the offset after the
/// produce before it, a fetch returns its records), with every response in request order. With
/// `log.flush.acks.all` too, where each response also waits for an fsync, and for acks=0.
#[test]
fn a_large_request_arriving_in_pieces_is_answered_and_so_are_the_small_ones_after_it() {
    use kafka_protocol::protocol::Decodable;
    // A frame far from complete makes the broker wait for all of it at once (SO_RCVLOWAT); with
    // the kernel's receive buffer, and with a small fixed one that caps what can wait.
    for overrides in [&[][..], &["socket.receive.buffer.bytes=65536"][..]] {
        let b = Broker::start(overrides);
        let mut c = b.connect();
        create_topic(&mut c, "pieces", 4);
        // One batch of 100 records of 8 KiB per partition: a request of about 3.3 MB.
        let batch = |p: i32| {
            let recs: Vec<common::Rec> = (0..100)
                .map(|i| common::Rec { key: None, value: format!("p{p}-r{i}-{}", "z".repeat(8192)), timestamp: 1_700_000_000_000 })
                .collect();
            common::encode_batch(&recs, None)
        };
        let req = ProduceRequest::default().with_acks(-1).with_timeout_ms(5000).with_topic_data(vec![produce_request::TopicProduceData::default()
            .with_name(name("pieces"))
            .with_partition_data((0..4).map(|p| produce_request::PartitionProduceData::default().with_index(p).with_records(Some(batch(p)))).collect())]);
        let wire = c.encode(&req, 9);
        assert!(wire.len() > 3_000_000, "request of {} bytes", wire.len());
        // In 64 KiB pieces, 5 ms apart, the first holding the frame size.
        for piece in wire.chunks(64 << 10) {
            c.send_raw(piece);
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let mut frame = c.read_frame().expect("no answer to the large request");
        ResponseHeader::decode(&mut frame, ApiKey::Produce.response_header_version(9)).unwrap();
        let resp = ProduceResponse::decode(&mut frame, 9).unwrap();
        let mut got: Vec<(i32, i16, i64)> =
            resp.responses[0].partition_responses.iter().map(|p| (p.index, p.error_code, p.base_offset)).collect();
        got.sort();
        assert_eq!(got, (0..4).map(|p| (p, 0, 0)).collect::<Vec<_>>(), "{overrides:?}");
        // Small requests on the same connection after it are answered (the mark went back to
        // one byte): ApiVersions, then a produce of one record.
        let v = c.call(&ApiVersionsRequest::default(), 3);
        assert_eq!(v.error_code, 0);
        let small = produce(&mut c, "pieces", 2, records(1, -1, -1), -1);
        assert_eq!((small.error_code, small.base_offset), (0, 100), "{overrides:?}");
    }
}

#[test]
fn pipelined_large_produces_append_in_order_and_before_the_requests_behind_them() {
    for overrides in [&[][..], &["log.flush.acks.all=true"][..]] {
        large_produces_in_order(overrides);
    }
}

fn large_produces_in_order(overrides: &[&str]) {
    use kafka_protocol::protocol::Decodable;
    let b = Broker::start(overrides);
    let mut c = b.connect();
    create_topic(&mut c, "big", 1);
    let pid = c.call(&InitProducerIdRequest::default().with_transactional_id(None).with_transaction_timeout_ms(60_000), 4);
    assert_eq!(pid.error_code, 0);
    let (producer_id, records_per_batch) = (pid.producer_id.0, 40);
    // 40 records of 2 KiB: about 80 KiB per request, past the 64 KiB from which appends leave
    // the connection's task.
    let batch = |n: i32| {
        let recs: Vec<common::Rec> = (0..records_per_batch)
            .map(|i| common::Rec { key: None, value: format!("b{n}-r{i}-{}", "y".repeat(2048)), timestamp: 1_700_000_000_000 })
            .collect();
        common::encode_batch(&recs, Some((producer_id, n * records_per_batch)))
    };
    let produce_acks = |n: i32, acks: i16| {
        ProduceRequest::default().with_acks(acks).with_timeout_ms(5000).with_topic_data(vec![produce_request::TopicProduceData::default()
            .with_name(name("big"))
            .with_partition_data(vec![produce_request::PartitionProduceData::default().with_index(0).with_records(Some(batch(n)))])])
    };
    let produce = |n: i32| produce_acks(n, -1);
    let list_offsets = ListOffsetsRequest::default().with_replica_id(BrokerId(-1)).with_topics(vec![
        list_offsets_request::ListOffsetsTopic::default()
            .with_name(name("big"))
            .with_partitions(vec![list_offsets_request::ListOffsetsPartition::default().with_partition_index(0).with_timestamp(-1)]),
    ]);
    let per = records_per_batch as i64;
    for round in 0..5i32 {
        // Three produces back to back, then ListOffsets, in one write.
        let mut buf = BytesMut::new();
        for n in 0..3 {
            buf.extend_from_slice(&c.encode(&produce(round * 3 + n), 9));
        }
        let lo = c.encode(&list_offsets, 7);
        let first_corr = i32::from_be_bytes(lo[8..12].try_into().unwrap()) - 3;
        buf.extend_from_slice(&lo);
        c.send_raw(&buf);
        for i in 0..3i64 {
            let mut frame = c.read_frame().expect("connection closed");
            let header = ResponseHeader::decode(&mut frame, ApiKey::Produce.response_header_version(9)).unwrap();
            assert_eq!(header.correlation_id, first_corr + i as i32, "round {round}: response {i} out of order");
            let resp = ProduceResponse::decode(&mut frame, 9).unwrap();
            let p = &resp.responses[0].partition_responses[0];
            assert_eq!((p.error_code, p.base_offset), (0, (round as i64 * 3 + i) * per), "round {round}, produce {i}");
        }
        let mut frame = c.read_frame().expect("connection closed");
        let header = ResponseHeader::decode(&mut frame, ApiKey::ListOffsets.response_header_version(7)).unwrap();
        assert_eq!(header.correlation_id, first_corr + 3);
        let resp = ListOffsetsResponse::decode(&mut frame, 7).unwrap();
        assert_eq!(resp.topics[0].partitions[0].offset, (round as i64 + 1) * 3 * per, "round {round}: ListOffsets ran before the appends");
    }
    // One more produce with a fetch of its records right behind it.
    let mut buf = BytesMut::new();
    buf.extend_from_slice(&c.encode(&produce(15), 9));
    let fetch = FetchRequest::default().with_max_wait_ms(0).with_min_bytes(1).with_max_bytes(1 << 20).with_topics(vec![
        fetch_request::FetchTopic::default().with_topic(name("big")).with_partitions(vec![fetch_request::FetchPartition::default()
            .with_partition(0)
            .with_fetch_offset(15 * per)
            .with_partition_max_bytes(1 << 20)]),
    ]);
    buf.extend_from_slice(&c.encode(&fetch, 12));
    c.send_raw(&buf);
    let mut frame = c.read_frame().expect("connection closed");
    ResponseHeader::decode(&mut frame, ApiKey::Produce.response_header_version(9)).unwrap();
    assert_eq!(ProduceResponse::decode(&mut frame, 9).unwrap().responses[0].partition_responses[0].base_offset, 15 * per);
    let mut frame = c.read_frame().expect("connection closed");
    ResponseHeader::decode(&mut frame, ApiKey::Fetch.response_header_version(12)).unwrap();
    let resp = FetchResponse::decode(&mut frame, 12).unwrap();
    let p = &resp.responses[0].partitions[0];
    assert_eq!((p.error_code, p.high_watermark), (0, 16 * per));
    assert_eq!(p.records.as_ref().map(|r| r.len()), Some(batch(15).len()), "the fetch returns the batch produced before it");
    // acks=0: no response, and ListOffsets behind two such produces sees both.
    let mut buf = BytesMut::new();
    buf.extend_from_slice(&c.encode(&produce_acks(16, 0), 9));
    buf.extend_from_slice(&c.encode(&produce_acks(17, 0), 9));
    let lo = c.encode(&list_offsets, 7);
    let corr = i32::from_be_bytes(lo[8..12].try_into().unwrap());
    buf.extend_from_slice(&lo);
    c.send_raw(&buf);
    let mut frame = c.read_frame().expect("connection closed");
    let header = ResponseHeader::decode(&mut frame, ApiKey::ListOffsets.response_header_version(7)).unwrap();
    assert_eq!(header.correlation_id, corr, "acks=0 produces get no response");
    let resp = ListOffsetsResponse::decode(&mut frame, 7).unwrap();
    assert_eq!(resp.topics[0].partitions[0].offset, 18 * per);
}
