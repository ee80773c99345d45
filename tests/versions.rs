//! Every advertised version of every API answers a typical request: a response that decodes at
//! that version, with the error codes a working request gets. Catches fields set in a response
//! version that does not carry them (the encoder refuses those and the connection would close).

mod common;

use bytes::Bytes;
use common::{Broker, Client};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use sluice::api::versions::{is_refused, SUPPORTED};

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn name(v: &str) -> TopicName {
    common::topic_name(v)
}

fn one_record() -> Bytes {
    common::encode_batch(&[common::Rec { key: Some("k".into()), value: "v".into(), timestamp: 1_700_000_000_000 }], None)
}

fn versions(key: ApiKey) -> std::ops::RangeInclusive<i16> {
    let s = SUPPORTED.iter().find(|s| s.key == key).unwrap();
    s.min..=s.max
}

fn create(c: &mut Client, topic: &str, version: i16) -> create_topics_response::CreatableTopicResult {
    let req = CreateTopicsRequest::default().with_timeout_ms(5000).with_topics(vec![create_topics_request::CreatableTopic::default()
        .with_name(name(topic))
        .with_num_partitions(2)
        .with_replication_factor(1)
        .with_configs(vec![create_topics_request::CreatableTopicConfig::default()
            .with_name(s("retention.ms"))
            .with_value(Some(s("3600000")))])]);
    c.call(&req, version).topics.remove(0)
}

#[test]
fn every_advertised_version_answers_a_typical_request() {
    let b = Broker::start(&[]);
    let mut c = b.connect();
    for v in versions(ApiKey::CreateTopics) {
        let r = create(&mut c, &format!("t{v}"), v);
        assert_eq!(r.error_code, 0, "CreateTopics v{v}: {:?}", r.error_message);
    }
    let topic_id = {
        let r = c.call(&MetadataRequest::default().with_topics(None), 12);
        r.topics.iter().find(|t| t.name.as_ref().map(|n| n.0.as_str()) == Some("t2")).unwrap().topic_id
    };
    assert!(!topic_id.is_nil());

    for v in versions(ApiKey::ApiVersions) {
        assert_eq!(c.call(&ApiVersionsRequest::default(), v).error_code, 0, "ApiVersions v{v}");
    }
    for v in versions(ApiKey::Metadata) {
        let req = MetadataRequest::default().with_topics(Some(vec![metadata_request::MetadataRequestTopic::default().with_name(Some(name("t2")))]));
        let r = c.call(&req, v);
        assert_eq!(r.topics.len(), 1, "Metadata v{v}");
        assert_eq!(r.topics[0].error_code, 0, "Metadata v{v}");
        assert_eq!(r.topics[0].partitions.len(), 2, "Metadata v{v}");
        if v >= 10 {
            assert_eq!(r.topics[0].topic_id, topic_id, "Metadata v{v}");
        }
    }
    for v in versions(ApiKey::Produce).filter(|v| !is_refused(ApiKey::Produce, *v)) {
        let req = ProduceRequest::default().with_transactional_id(None).with_acks(-1).with_timeout_ms(5000).with_topic_data(vec![
            produce_request::TopicProduceData::default()
                .with_name(name("t2"))
                .with_partition_data(vec![produce_request::PartitionProduceData::default().with_index(0).with_records(Some(one_record()))]),
        ]);
        let r = c.call(&req, v);
        assert_eq!(r.responses[0].partition_responses[0].error_code, 0, "Produce v{v}");
    }
    for v in versions(ApiKey::Fetch) {
        let mut topic = fetch_request::FetchTopic::default().with_partitions(vec![fetch_request::FetchPartition::default()
            .with_partition(0)
            .with_fetch_offset(0)
            .with_partition_max_bytes(1 << 20)]);
        if v >= 13 {
            topic = topic.with_topic_id(topic_id);
        } else {
            topic = topic.with_topic(name("t2"));
        }
        let req = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(0)
            .with_max_bytes(1 << 20)
            .with_session_epoch(if v >= 7 { -1 } else { 0 })
            .with_topics(vec![topic]);
        let r = c.call(&req, v);
        assert_eq!(r.error_code, 0, "Fetch v{v}");
        let p = &r.responses[0].partitions[0];
        assert_eq!(p.error_code, 0, "Fetch v{v}");
        assert!(p.high_watermark >= 1, "Fetch v{v}");
        assert!(!p.records.as_ref().unwrap().is_empty(), "Fetch v{v}");
    }
    for v in versions(ApiKey::ListOffsets) {
        for ts in [-2i64, -1, 1_700_000_000_000] {
            let req = ListOffsetsRequest::default().with_replica_id(BrokerId(-1)).with_topics(vec![
                list_offsets_request::ListOffsetsTopic::default()
                    .with_name(name("t2"))
                    .with_partitions(vec![list_offsets_request::ListOffsetsPartition::default().with_partition_index(0).with_timestamp(ts)]),
            ]);
            let r = c.call(&req, v);
            let p = &r.topics[0].partitions[0];
            assert_eq!(p.error_code, 0, "ListOffsets v{v} ts {ts}");
            let expected = if ts == -1 { p.offset } else { 0 };
            assert_eq!(p.offset, expected, "ListOffsets v{v} ts {ts}");
        }
    }
    let produced = versions(ApiKey::Produce).filter(|v| !is_refused(ApiKey::Produce, *v)).count() as i64;
    for v in versions(ApiKey::OffsetForLeaderEpoch) {
        for (current, asked, want) in [(-1, 0, (0, 0, produced)), (0, 0, (0, 0, produced)), (5, 0, (75, -1, -1)), (-1, 7, (0, -1, -1))] {
            let req = OffsetForLeaderEpochRequest::default().with_topics(vec![
                offset_for_leader_epoch_request::OffsetForLeaderTopic::default().with_topic(name("t2")).with_partitions(vec![
                    offset_for_leader_epoch_request::OffsetForLeaderPartition::default()
                        .with_partition(0)
                        .with_current_leader_epoch(current)
                        .with_leader_epoch(asked),
                ]),
            ]);
            let r = c.call(&req, v);
            let p = &r.topics[0].partitions[0];
            assert_eq!((p.error_code, p.leader_epoch, p.end_offset), want, "OffsetForLeaderEpoch v{v} current {current} epoch {asked}");
        }
    }
    for v in versions(ApiKey::InitProducerId) {
        let r = c.call(&InitProducerIdRequest::default().with_transactional_id(None).with_transaction_timeout_ms(60000), v);
        assert_eq!(r.error_code, 0, "InitProducerId v{v}");
        assert!(r.producer_id.0 >= 0);
    }
    for v in versions(ApiKey::DescribeConfigs) {
        let req = DescribeConfigsRequest::default().with_resources(vec![
            describe_configs_request::DescribeConfigsResource::default().with_resource_type(2).with_resource_name(s("t2")).with_configuration_keys(None),
            describe_configs_request::DescribeConfigsResource::default().with_resource_type(4).with_resource_name(s("1")).with_configuration_keys(None),
        ]);
        let r = c.call(&req, v);
        assert!(r.results.iter().all(|x| x.error_code == 0), "DescribeConfigs v{v}");
        let retention = r.results[0].configs.iter().find(|e| e.name.as_str() == "retention.ms").unwrap();
        assert_eq!(retention.value.as_ref().unwrap().as_str(), "3600000", "DescribeConfigs v{v}");
    }
    for v in versions(ApiKey::AlterConfigs) {
        let req = AlterConfigsRequest::default().with_resources(vec![alter_configs_request::AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(s("t2"))
            .with_configs(vec![alter_configs_request::AlterableConfig::default().with_name(s("retention.ms")).with_value(Some(s("7200000")))])]);
        assert_eq!(c.call(&req, v).responses[0].error_code, 0, "AlterConfigs v{v}");
    }
    for v in versions(ApiKey::IncrementalAlterConfigs) {
        let req = IncrementalAlterConfigsRequest::default().with_resources(vec![
            incremental_alter_configs_request::AlterConfigsResource::default().with_resource_type(2).with_resource_name(s("t2")).with_configs(vec![
                incremental_alter_configs_request::AlterableConfig::default()
                    .with_name(s("cleanup.policy"))
                    .with_config_operation(0)
                    .with_value(Some(s("compact"))),
            ]),
        ]);
        assert_eq!(c.call(&req, v).responses[0].error_code, 0, "IncrementalAlterConfigs v{v}");
    }
    for (i, v) in versions(ApiKey::CreatePartitions).enumerate() {
        let req = CreatePartitionsRequest::default().with_timeout_ms(5000).with_topics(vec![
            create_partitions_request::CreatePartitionsTopic::default().with_name(name("t3")).with_count(3 + i as i32).with_assignments(None),
        ]);
        let r = c.call(&req, v);
        assert_eq!(r.results[0].error_code, 0, "CreatePartitions v{v}: {:?}", r.results[0].error_message);
    }
    for v in versions(ApiKey::DeleteRecords) {
        let req = DeleteRecordsRequest::default().with_timeout_ms(5000).with_topics(vec![delete_records_request::DeleteRecordsTopic::default()
            .with_name(name("t2"))
            .with_partitions(vec![delete_records_request::DeleteRecordsPartition::default().with_partition_index(1).with_offset(0)])]);
        assert_eq!(c.call(&req, v).topics[0].partitions[0].error_code, 0, "DeleteRecords v{v}");
    }
    for v in versions(ApiKey::DescribeCluster) {
        let r = c.call(&DescribeClusterRequest::default().with_endpoint_type(1), v);
        assert_eq!(r.error_code, 0, "DescribeCluster v{v}");
        assert_eq!(r.brokers.len(), 1);
    }
    for v in versions(ApiKey::DescribeTopicPartitions) {
        let req = DescribeTopicPartitionsRequest::default()
            .with_topics(vec![describe_topic_partitions_request::TopicRequest::default().with_name(name("t2"))])
            .with_response_partition_limit(2000);
        let r = c.call(&req, v);
        assert_eq!(r.topics[0].error_code, 0, "DescribeTopicPartitions v{v}");
        assert_eq!(r.topics[0].partitions.len(), 2);
    }
    for v in versions(ApiKey::DescribeLogDirs) {
        let r = c.call(&DescribeLogDirsRequest::default().with_topics(None), v);
        assert_eq!(r.results.len(), 1, "DescribeLogDirs v{v}");
        assert!(r.results[0].topics.iter().any(|t| t.name.0.as_str() == "t2"), "DescribeLogDirs v{v}");
    }
    for v in versions(ApiKey::SaslHandshake) {
        let r = c.call(&SaslHandshakeRequest::default().with_mechanism(s("PLAIN")), v);
        assert_eq!(r.error_code, kafka_protocol::ResponseError::IllegalSaslState.code(), "SaslHandshake v{v}");
    }
    for (i, v) in versions(ApiKey::DeleteTopics).enumerate() {
        let topic = format!("t{}", 2 + i);
        let req = if v >= 6 {
            DeleteTopicsRequest::default().with_topics(vec![delete_topics_request::DeleteTopicState::default().with_name(Some(name(&topic)))])
        } else {
            DeleteTopicsRequest::default().with_topic_names(vec![name(&topic)])
        };
        let r = c.call(&req.with_timeout_ms(5000), v);
        assert_eq!(r.responses[0].error_code, 0, "DeleteTopics v{v}");
    }
}

#[test]
fn metadata_by_topic_id_ignores_an_empty_name() {
    let b = Broker::start(&[]);
    let mut c = b.connect();
    assert_eq!(create(&mut c, "byid", 7).error_code, 0);
    let id = c.call(&MetadataRequest::default().with_topics(None), 12).topics[0].topic_id;
    // The Java admin client sends "" (not null) as the name when it describes by id.
    let req = MetadataRequest::default().with_topics(Some(vec![metadata_request::MetadataRequestTopic::default()
        .with_topic_id(id)
        .with_name(Some(name("")))]));
    let r = c.call(&req, 12);
    assert_eq!(r.topics[0].error_code, 0);
    assert_eq!(r.topics[0].name.as_ref().unwrap().0.as_str(), "byid");
    assert_eq!(r.topics[0].topic_id, id);
}

#[test]
fn decode_request_covers_every_dispatched_api() {
    // The fuzz target and the proptest in src/api reach handlers through decode_request; an
    // advertised API missing from it would go untested there.
    for s in SUPPORTED {
        let v = if is_refused(s.key, s.min) { 3 } else { s.min };
        let err = sluice::api::decode_request(s.key, v, Bytes::new()).err().unwrap_or_default();
        assert!(!err.contains("not implemented"), "{:?}: {err}", s.key);
    }
}
