//! Tests of `records.rs`: round trips of every kind, Kafka's framing, refusals, bounds.

use super::*;

fn uuid(n: u8) -> Uuid {
    Uuid::from_bytes([n; 16])
}

fn every_kind() -> Vec<VersionedRecord> {
    let endpoints = vec![Endpoint { name: "PLAINTEXT".into(), host: "h1".into(), port: 9092, security_protocol: 0 }];
    let features = vec![SupportedFeature { name: "metadata.version".into(), min_supported_version: 7, max_supported_version: 29 }];
    let mut change = PartitionChange::new(uuid(2), 1);
    change.isr = Some(vec![1, 2]);
    change.leader = 2;
    change.directories = Some(vec![uuid(9)]);
    change.eligible_leader_replicas = Some(vec![]);
    let records = vec![
        (4, MetadataRecord::RegisterBroker(RegisterBroker {
            broker_id: 1,
            is_migrating_zk_broker: false,
            incarnation_id: uuid(1),
            broker_epoch: 7,
            endpoints: endpoints.clone(),
            features: features.clone(),
            rack: Some("r1".into()),
            fenced: true,
            in_controlled_shutdown: false,
            log_dirs: vec![uuid(3)],
            cordoned_log_dirs: None,
        })),
        (0, MetadataRecord::UnregisterBroker { broker_id: 3, broker_epoch: 9 }),
        (0, MetadataRecord::Topic { name: "orders".into(), topic_id: uuid(2) }),
        (2, MetadataRecord::Partition(Partition {
            partition_id: 0,
            topic_id: uuid(2),
            replicas: vec![1, 2, 3],
            isr: vec![1, 2, 3],
            removing_replicas: vec![],
            adding_replicas: vec![],
            leader: 1,
            leader_recovery_state: 0,
            leader_epoch: 0,
            partition_epoch: 0,
            directories: vec![uuid(3), uuid(4), uuid(5)],
            eligible_leader_replicas: None,
            last_known_elr: Some(vec![2]),
        })),
        (0, MetadataRecord::Config { resource_type: 2, resource_name: "orders".into(), name: "retention.ms".into(), value: Some("1".into()) }),
        (0, MetadataRecord::Config { resource_type: 4, resource_name: "".into(), name: "x".into(), value: None }),
        (2, MetadataRecord::PartitionChange(change)),
        (0, MetadataRecord::FenceBroker { id: 1, epoch: 7 }),
        (0, MetadataRecord::UnfenceBroker { id: 1, epoch: 7 }),
        (0, MetadataRecord::RemoveTopic { topic_id: uuid(2) }),
        (0, MetadataRecord::FeatureLevel { name: "metadata.version".into(), feature_level: 29 }),
        (0, MetadataRecord::ProducerIds { broker_id: 1, broker_epoch: 7, next_producer_id: 1000 }),
        (3, MetadataRecord::BrokerRegistrationChange(BrokerRegistrationChange {
            broker_id: 1,
            broker_epoch: 7,
            fenced: -1,
            in_controlled_shutdown: 1,
            log_dirs: vec![uuid(3)],
            cordoned_log_dirs: Some(vec![]),
        })),
        (0, MetadataRecord::NoOp),
        (0, MetadataRecord::BeginTransaction { name: Some("bootstrap".into()) }),
        (0, MetadataRecord::EndTransaction),
        (0, MetadataRecord::AbortTransaction { reason: None }),
        (0, MetadataRecord::RegisterController(RegisterController {
            controller_id: 1,
            incarnation_id: uuid(6),
            zk_migration_ready: false,
            endpoints,
            features,
        })),
        (0, MetadataRecord::ClearElr { topic_name: "orders".into() }),
    ];
    records.into_iter().map(|(version, record)| VersionedRecord { version, record }).collect()
}

#[test]
fn every_kind_round_trips_through_its_encoding() {
    for rec in every_kind() {
        let bytes = encode(&rec);
        assert_eq!(decode(&bytes, 5).unwrap(), rec, "{}", kind_name(rec.record.api_key()));
    }
}

#[test]
fn topic_record_is_framed_as_kafka_frames_it() {
    let rec = VersionedRecord { version: 0, record: MetadataRecord::Topic { name: "t".into(), topic_id: uuid(0xab) } };
    let mut want = vec![1, 2, 0, 2, b't'];
    want.extend_from_slice(&[0xab; 16]);
    want.push(0);
    assert_eq!(encode(&rec), want);
}

#[test]
fn unknown_kinds_and_versions_are_errors_naming_the_kind_and_offset() {
    let err = decode(&[1, 18, 0, 0], 42).unwrap_err().to_string();
    assert!(err.contains("AccessControlEntryRecord") && err.contains("42"), "{err}");
    let err = decode(&[1, 99, 0, 0], 43).unwrap_err().to_string();
    assert!(err.contains("kind 99") && err.contains("43"), "{err}");
    let err = decode(&[1, 2, 1, 0], 44).unwrap_err().to_string();
    assert!(err.contains("TopicRecord") && err.contains("version 1"), "{err}");
}

#[test]
fn truncated_or_padded_records_and_huge_counts_are_malformed_without_allocating() {
    for rec in every_kind() {
        let bytes = encode(&rec);
        for cut in 3..bytes.len() {
            assert!(decode(&bytes[..cut], 0).is_err(), "{} cut at {cut}", kind_name(rec.record.api_key()));
        }
        let mut padded = bytes.clone();
        padded.push(0);
        assert!(decode(&padded, 0).is_err());
    }
    // A PartitionRecord claiming 2^62 replicas in a few bytes.
    let mut bytes = vec![1, 3, 0, 0, 0, 0, 0];
    bytes.extend_from_slice(&[0; 16]);
    bytes.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x3f]);
    let err = decode(&bytes, 0).unwrap_err().to_string();
    assert!(err.contains("exceeds"), "{err}");
}

#[test]
fn unknown_tagged_fields_are_passed_over() {
    let rec = VersionedRecord { version: 0, record: MetadataRecord::Topic { name: "t".into(), topic_id: uuid(1) } };
    let mut bytes = encode(&rec);
    bytes.pop();
    bytes.extend_from_slice(&[1, 7, 2, 0xaa, 0xbb]);
    assert_eq!(decode(&bytes, 0).unwrap(), rec);
}

proptest::proptest! {
    #[test]
    fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
        let _ = decode(&bytes, 0);
        let mut framed = vec![1u8, (bytes.first().copied().unwrap_or(0) % 30), 0];
        framed.extend_from_slice(&bytes);
        let _ = decode(&framed, 0);
    }
}
