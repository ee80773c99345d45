//! The (api key, version range) pairs sluice implements and advertises in ApiVersions.
//!
//! Ranges follow Apache Kafka 4.0's, cut down to what sluice really implements; clients pick
//! features from this table (the Java consumer only uses topic-id fetches when Metadata returns
//! ids, kafka-python infers a broker version from it), so nothing is listed that does not work.
//!
//! Produce is advertised from v0 like Kafka 4.x although v0-v2 are refused: librdkafka before
//! 2.11.1 drops gzip/snappy support unless the advertised Produce range starts at 0.

use kafka_protocol::messages::ApiKey;

/// An advertised range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Supported {
    pub key: ApiKey,
    pub min: i16,
    pub max: i16,
}

const fn s(key: ApiKey, min: i16, max: i16) -> Supported {
    Supported { key, min, max }
}

/// Advertised ranges, ordered by api key.
pub const SUPPORTED: &[Supported] = &[
    s(ApiKey::Produce, 0, 12),
    s(ApiKey::Fetch, 4, 17),
    s(ApiKey::ListOffsets, 1, 9),
    s(ApiKey::Metadata, 0, 12),
    s(ApiKey::OffsetCommit, 2, 9),
    s(ApiKey::OffsetFetch, 1, 9),
    s(ApiKey::FindCoordinator, 0, 6),
    s(ApiKey::JoinGroup, 0, 9),
    s(ApiKey::Heartbeat, 0, 4),
    s(ApiKey::LeaveGroup, 0, 5),
    s(ApiKey::SyncGroup, 0, 5),
    s(ApiKey::DescribeGroups, 0, 6),
    s(ApiKey::ListGroups, 0, 5),
    s(ApiKey::SaslHandshake, 0, 1),
    s(ApiKey::ApiVersions, 0, 4),
    s(ApiKey::CreateTopics, 2, 7),
    s(ApiKey::DeleteTopics, 1, 6),
    s(ApiKey::DeleteRecords, 0, 2),
    s(ApiKey::InitProducerId, 0, 5),
    s(ApiKey::OffsetForLeaderEpoch, 2, 4),
    // v4+ is the brokers' batched verification; EndTxn v5 is transactions v2 (not yet served).
    s(ApiKey::AddPartitionsToTxn, 0, 3),
    s(ApiKey::EndTxn, 0, 4),
    s(ApiKey::DescribeAcls, 1, 3),
    s(ApiKey::CreateAcls, 1, 3),
    s(ApiKey::DeleteAcls, 1, 3),
    s(ApiKey::DescribeConfigs, 1, 4),
    s(ApiKey::AlterConfigs, 0, 2),
    s(ApiKey::DescribeLogDirs, 1, 4),
    s(ApiKey::CreatePartitions, 0, 3),
    s(ApiKey::DeleteGroups, 0, 2),
    s(ApiKey::ElectLeaders, 0, 2),
    s(ApiKey::IncrementalAlterConfigs, 0, 1),
    s(ApiKey::AlterPartitionReassignments, 0, 1),
    s(ApiKey::ListPartitionReassignments, 0, 0),
    s(ApiKey::OffsetDelete, 0, 0),
    s(ApiKey::DescribeCluster, 0, 1),
    s(ApiKey::DescribeQuorum, 0, 2),
    s(ApiKey::DescribeProducers, 0, 0),
    s(ApiKey::ConsumerGroupHeartbeat, 0, 1),
    s(ApiKey::ConsumerGroupDescribe, 0, 1),
    s(ApiKey::DescribeTopicPartitions, 0, 0),
];

/// APIs served only by a member of a cluster (a single node does not list them).
pub fn cluster_only(key: ApiKey) -> bool {
    key == ApiKey::DescribeQuorum
}

/// Versions advertised but refused (Kafka 4.x removed Produce v0-v2, KIP-896).
pub fn is_refused(key: ApiKey, version: i16) -> bool {
    key == ApiKey::Produce && version < 3
}

/// Whether a request of this key and version is served.
pub fn is_supported(key: ApiKey, version: i16) -> bool {
    SUPPORTED.iter().any(|s| s.key == key && version >= s.min && version <= s.max) && !is_refused(key, version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_advertised_range_is_decodable_by_kafka_protocol() {
        for s in SUPPORTED {
            let crate_range = s.key.valid_versions();
            let min = if s.key == ApiKey::Produce { 3 } else { s.min };
            assert!(min >= crate_range.min && s.max <= crate_range.max, "{:?} {}..{} vs {}", s.key, s.min, s.max, crate_range);
        }
    }

    #[test]
    fn produce_v0_to_v2_are_advertised_but_refused() {
        assert!(!is_supported(ApiKey::Produce, 2));
        assert!(is_supported(ApiKey::Produce, 3));
        assert!(!is_supported(ApiKey::Fetch, 3));
        assert!(!is_supported(ApiKey::OffsetCommit, 1));
    }
}
