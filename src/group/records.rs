//! Kafka's `__consumer_offsets` record schemas, so that a Kafka broker (or `kafka-dump-log.sh
//! --offsets-decoder`) reads what sluice writes and sluice reads a Kafka log dir.
//!
//! ```text
//! key:   version i16 | ...          the key version names the record type
//!   0,1  OffsetCommitKey      group string | topic string | partition i32
//!   2    GroupMetadataKey     group string
//!   3    ConsumerGroupMetadataKey             group string
//!   5    ConsumerGroupMemberMetadataKey       group string | member string
//!   6    ConsumerGroupTargetAssignmentMetadataKey  group string
//!   7    ConsumerGroupTargetAssignmentMemberKey    group string | member string
//!   8    ConsumerGroupCurrentMemberAssignmentKey   group string | member string
//!   4, 9+  (partition metadata, share and streams groups) — skipped when loading
//! value: version i16 | ...          a null value is a tombstone for the key
//!   OffsetCommitValue   v0: offset i64 | metadata string | commitTimestamp i64
//!                       v1: offset | metadata | commitTimestamp | expireTimestamp i64
//!                       v2: offset | metadata | commitTimestamp
//!                       v3: offset | leaderEpoch i32 | metadata | commitTimestamp   (written)
//!                       v4: v3 fields, flexible: compact metadata string, tagged
//!                           fields after (Kafka 4.x: the topic id) — read only
//!   GroupMetadataValue  v3: protocolType string | generation i32 | protocol string? |
//!                           leader string? | currentStateTimestamp i64 | members [
//!                           memberId string | groupInstanceId string? | clientId string |
//!                           clientHost string | rebalanceTimeout i32 | sessionTimeout i32 |
//!                           subscription bytes | assignment bytes ]                  (written)
//!                       v0-v2 lack groupInstanceId (v3), currentStateTimestamp (v2),
//!                       rebalanceTimeout (v1) — read
//! ```
//! The KIP-848 values (keys 3, 5-8) are version 0 and flexible: compact strings and arrays
//! (length + 1 as an unsigned varint) and a tagged-field section after each struct (written
//! empty, read past):
//! ```text
//!   3 ConsumerGroupMetadataValue            epoch i32
//!   5 ConsumerGroupMemberMetadataValue      instanceId string? | rackId string? | clientId |
//!                                           clientHost | subscribedTopicNames [string] |
//!                                           subscribedTopicRegex string? | rebalanceTimeoutMs i32 |
//!                                           serverAssignor string?
//!   6 ConsumerGroupTargetAssignmentMetadataValue  assignmentEpoch i32
//!   7 ConsumerGroupTargetAssignmentMemberValue    topicPartitions [topicId uuid | partitions [i32]]
//!   8 ConsumerGroupCurrentMemberAssignmentValue   memberEpoch i32 | previousMemberEpoch i32 |
//!                                           state i8 | assignedPartitions [topicId | partitions] |
//!                                           partitionsPendingRevocation [topicId | partitions]
//! ```
//! The core names topics; these records hold topic ids, so [`CoordinatorRecord::encode`] and
//! [`CoordinatorRecord::decode`] take the mapping (a partition of a topic that no longer exists
//! is left out).
//!
//! Strings are i16-length-prefixed UTF-8 (-1 = null), bytes are i32-length-prefixed.
//!
//! # Failure behaviour
//! Decoding never panics and never allocates more than the input holds: every length is checked
//! against the remaining bytes. An undecodable record is skipped by the loader with a warning.

use std::collections::BTreeMap;

use bytes::{BufMut, Bytes, BytesMut};

use crate::protocol::codec::{put_bytes, put_compact_str, put_opt_str, put_str, put_uvarint, Reader};
use uuid::Uuid;

/// A committed offset as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetValue {
    pub offset: i64,
    /// -1 when the client did not send one.
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp: i64,
    /// Only OffsetCommit v1 carried an explicit expiry; kept when read.
    pub expire_timestamp: Option<i64>,
}

/// One member inside GroupMetadataValue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberValue {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    pub subscription: Bytes,
    pub assignment: Bytes,
}

/// A classic group's persisted state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupValue {
    pub protocol_type: String,
    pub generation_id: i32,
    pub protocol: Option<String>,
    pub leader: Option<String>,
    pub current_state_timestamp: i64,
    pub members: Vec<MemberValue>,
}

/// Partitions by topic name, as the KIP-848 records hold them (by topic id on disk).
pub type NamedPartitions = BTreeMap<String, Vec<i32>>;

/// A KIP-848 member's metadata (ConsumerGroupMemberMetadataValue).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConsumerMemberValue {
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_topic_names: Vec<String>,
    pub subscribed_topic_regex: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub server_assignor: Option<String>,
}

/// A KIP-848 member's current assignment (ConsumerGroupCurrentMemberAssignmentValue).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CurrentAssignmentValue {
    pub member_epoch: i32,
    pub previous_member_epoch: i32,
    /// Kafka's MemberState: 0 stable, 1 unrevoked partitions, 2 unreleased partitions.
    pub state: i8,
    pub assigned: NamedPartitions,
    pub pending_revocation: NamedPartitions,
}

/// A record for `__consumer_offsets`; `None` values are tombstones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CoordinatorRecord {
    Offset { group: String, topic: String, partition: i32, value: Option<OffsetValue> },
    Group { group: String, value: Option<GroupValue> },
    /// A KIP-848 group's epoch (key 3).
    ConsumerGroup { group: String, epoch: Option<i32> },
    /// A KIP-848 member's metadata (key 5).
    ConsumerMember { group: String, member: String, value: Option<ConsumerMemberValue> },
    /// A KIP-848 group's target assignment epoch (key 6).
    TargetAssignment { group: String, epoch: Option<i32> },
    /// One member's target assignment (key 7).
    TargetAssignmentMember { group: String, member: String, partitions: Option<NamedPartitions> },
    /// One member's current assignment (key 8).
    CurrentAssignment { group: String, member: String, value: Option<CurrentAssignmentValue> },
}

impl CoordinatorRecord {
    pub fn group(&self) -> &str {
        match self {
            CoordinatorRecord::Offset { group, .. }
            | CoordinatorRecord::Group { group, .. }
            | CoordinatorRecord::ConsumerGroup { group, .. }
            | CoordinatorRecord::ConsumerMember { group, .. }
            | CoordinatorRecord::TargetAssignment { group, .. }
            | CoordinatorRecord::TargetAssignmentMember { group, .. }
            | CoordinatorRecord::CurrentAssignment { group, .. } => group,
        }
    }

    /// (key, value) bytes in Kafka's schemas; `topic_id` maps the topic names of KIP-848
    /// assignments to their ids.
    pub fn encode(&self, topic_id: &dyn Fn(&str) -> Option<Uuid>) -> (Bytes, Option<Bytes>) {
        let mut key = BytesMut::new();
        let member_key = |key: &mut BytesMut, version: i16, group: &str, member: &str| {
            key.put_i16(version);
            put_str(key, group);
            put_str(key, member);
        };
        match self {
            CoordinatorRecord::ConsumerGroup { group, epoch } => {
                key.put_i16(3);
                put_str(&mut key, group);
                (key.freeze(), epoch.map(epoch_value))
            }
            CoordinatorRecord::TargetAssignment { group, epoch } => {
                key.put_i16(6);
                put_str(&mut key, group);
                (key.freeze(), epoch.map(epoch_value))
            }
            CoordinatorRecord::ConsumerMember { group, member, value } => {
                member_key(&mut key, 5, group, member);
                (key.freeze(), value.as_ref().map(encode_member_value))
            }
            CoordinatorRecord::TargetAssignmentMember { group, member, partitions } => {
                member_key(&mut key, 7, group, member);
                let value = partitions.as_ref().map(|p| {
                    let mut b = BytesMut::new();
                    b.put_i16(0);
                    put_topic_partitions(&mut b, p, topic_id);
                    put_uvarint(&mut b, 0);
                    b.freeze()
                });
                (key.freeze(), value)
            }
            CoordinatorRecord::CurrentAssignment { group, member, value } => {
                member_key(&mut key, 8, group, member);
                let value = value.as_ref().map(|v| {
                    let mut b = BytesMut::new();
                    b.put_i16(0);
                    b.put_i32(v.member_epoch);
                    b.put_i32(v.previous_member_epoch);
                    b.put_i8(v.state);
                    put_topic_partitions(&mut b, &v.assigned, topic_id);
                    put_topic_partitions(&mut b, &v.pending_revocation, topic_id);
                    put_uvarint(&mut b, 0);
                    b.freeze()
                });
                (key.freeze(), value)
            }
            CoordinatorRecord::Offset { group, topic, partition, value } => {
                key.put_i16(1);
                put_str(&mut key, group);
                put_str(&mut key, topic);
                key.put_i32(*partition);
                (key.freeze(), value.as_ref().map(encode_offset_value))
            }
            CoordinatorRecord::Group { group, value } => {
                key.put_i16(2);
                put_str(&mut key, group);
                (key.freeze(), value.as_ref().map(encode_group_value))
            }
        }
    }

    /// Decodes a record read back from the log. `Ok(None)`: a record type sluice does not load.
    /// `topic_name` maps the topic ids of KIP-848 assignments back to names.
    pub fn decode(key: &[u8], value: Option<&[u8]>, topic_name: &dyn Fn(Uuid) -> Option<String>) -> Result<Option<CoordinatorRecord>, String> {
        let mut k = Reader::new(key);
        let version = k.i16()?;
        match version {
            3 | 6 => {
                let group = k.string()?;
                let epoch = value.map(decode_epoch_value).transpose()?;
                Ok(Some(if version == 3 {
                    CoordinatorRecord::ConsumerGroup { group, epoch }
                } else {
                    CoordinatorRecord::TargetAssignment { group, epoch }
                }))
            }
            5 => {
                let (group, member) = (k.string()?, k.string()?);
                let value = value.map(decode_member_value).transpose()?;
                Ok(Some(CoordinatorRecord::ConsumerMember { group, member, value }))
            }
            7 => {
                let (group, member) = (k.string()?, k.string()?);
                let partitions = value
                    .map(|v| {
                        let mut r = flexible_value(v, "ConsumerGroupTargetAssignmentMemberValue")?;
                        let p = topic_partitions(&mut r, topic_name)?;
                        r.skip_tagged_fields()?;
                        Ok::<_, String>(p)
                    })
                    .transpose()?;
                Ok(Some(CoordinatorRecord::TargetAssignmentMember { group, member, partitions }))
            }
            8 => {
                let (group, member) = (k.string()?, k.string()?);
                let value = value
                    .map(|v| {
                        let mut r = flexible_value(v, "ConsumerGroupCurrentMemberAssignmentValue")?;
                        let member_epoch = r.i32()?;
                        let previous_member_epoch = r.i32()?;
                        let state = r.take(1)?[0] as i8;
                        let assigned = topic_partitions(&mut r, topic_name)?;
                        let pending_revocation = topic_partitions(&mut r, topic_name)?;
                        r.skip_tagged_fields()?;
                        Ok::<_, String>(CurrentAssignmentValue { member_epoch, previous_member_epoch, state, assigned, pending_revocation })
                    })
                    .transpose()?;
                Ok(Some(CoordinatorRecord::CurrentAssignment { group, member, value }))
            }
            0 | 1 => {
                let group = k.string()?;
                let topic = k.string()?;
                let partition = k.i32()?;
                let value = value.map(decode_offset_value).transpose()?;
                Ok(Some(CoordinatorRecord::Offset { group, topic, partition, value }))
            }
            2 => {
                let group = k.string()?;
                let value = value.map(decode_group_value).transpose()?;
                Ok(Some(CoordinatorRecord::Group { group, value }))
            }
            _ => Ok(None),
        }
    }
}

fn epoch_value(epoch: i32) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(0);
    b.put_i32(epoch);
    put_uvarint(&mut b, 0);
    b.freeze()
}

fn encode_member_value(v: &ConsumerMemberValue) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(0);
    put_compact_str(&mut b, v.instance_id.as_deref());
    put_compact_str(&mut b, v.rack_id.as_deref());
    put_compact_str(&mut b, Some(&v.client_id));
    put_compact_str(&mut b, Some(&v.client_host));
    put_uvarint(&mut b, v.subscribed_topic_names.len() as u32 + 1);
    for t in &v.subscribed_topic_names {
        put_compact_str(&mut b, Some(t));
    }
    put_compact_str(&mut b, v.subscribed_topic_regex.as_deref());
    b.put_i32(v.rebalance_timeout_ms);
    put_compact_str(&mut b, v.server_assignor.as_deref());
    put_uvarint(&mut b, 0);
    b.freeze()
}

/// `[topicId uuid | partitions [i32] | tagged fields]`, topics without an id left out.
fn put_topic_partitions(b: &mut BytesMut, parts: &NamedPartitions, topic_id: &dyn Fn(&str) -> Option<Uuid>) {
    let known: Vec<(Uuid, &Vec<i32>)> = parts.iter().filter_map(|(t, p)| Some((topic_id(t)?, p))).collect();
    put_uvarint(b, known.len() as u32 + 1);
    for (id, ps) in known {
        b.put_slice(id.as_bytes());
        put_uvarint(b, ps.len() as u32 + 1);
        for p in ps {
            b.put_i32(*p);
        }
        put_uvarint(b, 0);
    }
}

/// A flexible version-0 value's reader, past its version.
fn flexible_value<'a>(value: &'a [u8], name: &str) -> Result<Reader<'a>, String> {
    let mut r = Reader::new(value);
    let version = r.i16()?;
    if version != 0 {
        return Err(format!("{name} version {version} is not readable (0 is)"));
    }
    Ok(r)
}

fn decode_epoch_value(value: &[u8]) -> Result<i32, String> {
    let mut r = flexible_value(value, "ConsumerGroup epoch value")?;
    let epoch = r.i32()?;
    r.skip_tagged_fields()?;
    Ok(epoch)
}

fn decode_member_value(value: &[u8]) -> Result<ConsumerMemberValue, String> {
    let mut r = flexible_value(value, "ConsumerGroupMemberMetadataValue")?;
    let instance_id = r.compact_opt_string()?;
    let rack_id = r.compact_opt_string()?;
    let client_id = r.compact_string()?;
    let client_host = r.compact_string()?;
    let count = r.compact_len()?;
    let mut subscribed_topic_names = Vec::new();
    for _ in 0..count {
        subscribed_topic_names.push(r.compact_string()?);
    }
    let subscribed_topic_regex = r.compact_opt_string()?;
    let rebalance_timeout_ms = r.i32()?;
    let server_assignor = r.compact_opt_string()?;
    r.skip_tagged_fields()?;
    Ok(ConsumerMemberValue {
        instance_id,
        rack_id,
        client_id,
        client_host,
        subscribed_topic_names,
        subscribed_topic_regex,
        rebalance_timeout_ms,
        server_assignor,
    })
}

fn encode_offset_value(v: &OffsetValue) -> Bytes {
    let mut b = BytesMut::new();
    match v.expire_timestamp {
        Some(expire) => {
            b.put_i16(1);
            b.put_i64(v.offset);
            put_str(&mut b, &v.metadata);
            b.put_i64(v.commit_timestamp);
            b.put_i64(expire);
        }
        None => {
            b.put_i16(3);
            b.put_i64(v.offset);
            b.put_i32(v.leader_epoch);
            put_str(&mut b, &v.metadata);
            b.put_i64(v.commit_timestamp);
        }
    }
    b.freeze()
}

fn encode_group_value(v: &GroupValue) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(3);
    put_str(&mut b, &v.protocol_type);
    b.put_i32(v.generation_id);
    put_opt_str(&mut b, v.protocol.as_deref());
    put_opt_str(&mut b, v.leader.as_deref());
    b.put_i64(v.current_state_timestamp);
    b.put_i32(v.members.len() as i32);
    for m in &v.members {
        put_str(&mut b, &m.member_id);
        put_opt_str(&mut b, m.instance_id.as_deref());
        put_str(&mut b, &m.client_id);
        put_str(&mut b, &m.client_host);
        b.put_i32(m.rebalance_timeout_ms);
        b.put_i32(m.session_timeout_ms);
        put_bytes(&mut b, &m.subscription);
        put_bytes(&mut b, &m.assignment);
    }
    b.freeze()
}


fn decode_offset_value(value: &[u8]) -> Result<OffsetValue, String> {
    let mut r = Reader::new(value);
    let version = r.i16()?;
    let offset = r.i64()?;
    if !(0..=4).contains(&version) {
        return Err(format!("unknown OffsetCommitValue version {version}"));
    }
    let leader_epoch = if version >= 3 { r.i32()? } else { -1 };
    // v4 is flexible: a compact metadata string and tagged fields after (Kafka 4.x writes the
    // topic id there).
    let metadata = if version >= 4 { r.compact_string()? } else { r.string()? };
    let commit_timestamp = r.i64()?;
    let expire_timestamp = if version == 1 { Some(r.i64()?) } else { None };
    if version >= 4 {
        r.skip_tagged_fields()?;
    }
    Ok(OffsetValue { offset, leader_epoch, metadata, commit_timestamp, expire_timestamp })
}

fn decode_group_value(value: &[u8]) -> Result<GroupValue, String> {
    let mut r = Reader::new(value);
    let version = r.i16()?;
    if !(0..=3).contains(&version) {
        return Err(format!("GroupMetadataValue version {version} is not readable (0-3 are)"));
    }
    let protocol_type = r.string()?;
    let generation_id = r.i32()?;
    let protocol = r.opt_string()?;
    let leader = r.opt_string()?;
    let current_state_timestamp = if version >= 2 { r.i64()? } else { -1 };
    let count = r.i32()?;
    let mut members = Vec::new();
    for _ in 0..count.max(0) {
        let member_id = r.string()?;
        let instance_id = if version >= 3 { r.opt_string()? } else { None };
        let client_id = r.string()?;
        let client_host = r.string()?;
        let rebalance_timeout_ms = if version >= 1 { r.i32()? } else { -1 };
        let session_timeout_ms = r.i32()?;
        let subscription = r.bytes()?;
        let assignment = r.bytes()?;
        members.push(MemberValue {
            member_id,
            instance_id,
            client_id,
            client_host,
            rebalance_timeout_ms: if rebalance_timeout_ms < 0 { session_timeout_ms } else { rebalance_timeout_ms },
            session_timeout_ms,
            subscription,
            assignment,
        });
    }
    Ok(GroupValue { protocol_type, generation_id, protocol, leader, current_state_timestamp, members })
}

/// `[topicId uuid | partitions [i32] | tagged fields]`, by topic name; topics `topic_name`
/// does not know (deleted since) are left out.
fn topic_partitions(r: &mut Reader, topic_name: &dyn Fn(Uuid) -> Option<String>) -> Result<NamedPartitions, String> {
    let mut out = NamedPartitions::new();
    for _ in 0..r.compact_len()? {
        let id = Uuid::from_slice(r.take(16)?).map_err(|e| e.to_string())?;
        let n = r.compact_len()?;
        let mut ps = Vec::with_capacity(n.min(r.remaining() / 4));
        for _ in 0..n {
            ps.push(r.i32()?);
        }
        r.skip_tagged_fields()?;
        if let Some(name) = topic_name(id) {
            out.entry(name).or_default().extend(ps);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_commit_records_round_trip_and_match_kafkas_bytes() {
        let r = CoordinatorRecord::Offset {
            group: "g".into(),
            topic: "t".into(),
            partition: 2,
            value: Some(OffsetValue { offset: 42, leader_epoch: 7, metadata: "m".into(), commit_timestamp: 1000, expire_timestamp: None }),
        };
        let (k, v) = r.encode(&|_| None);
        assert_eq!(&k[..], &[0, 1, 0, 1, b'g', 0, 1, b't', 0, 0, 0, 2]);
        let v = v.unwrap();
        assert_eq!(&v[..2], &[0, 3]);
        assert_eq!(v.len(), 2 + 8 + 4 + 3 + 8);
        assert_eq!(CoordinatorRecord::decode(&k, Some(&v), &|_| None).unwrap(), Some(r));
    }

    #[test]
    fn kafka_4_offset_commit_values_v4_with_a_topic_id_decode() {
        // The key and value Kafka 4.4 wrote for a commit of orders-0 at 60 by group upgrade-g.
        let key = [&[0u8, 1, 0, 9][..], b"upgrade-g", &[0, 6], b"orders", &[0, 0, 0, 0]].concat();
        let mut value = vec![0u8, 4, 0, 0, 0, 0, 0, 0, 0, 0x3c, 0xff, 0xff, 0xff, 0xff, 0x01];
        value.extend_from_slice(&[0, 0, 1, 0xa2, 0x4c, 0xe5, 0x91, 0x43]);
        value.extend_from_slice(&[0x01, 0x00, 0x10]); // one tagged field: tag 0 (topic id), 16 bytes
        value.extend_from_slice(&[0xae, 0x4d, 0xf5, 0xcc, 0x44, 0xc6, 0x42, 0x05, 0xad, 0x1f, 0x36, 0x83, 0xae, 0x55, 0xb7, 0xb4]);
        let decoded = CoordinatorRecord::decode(&key, Some(&value), &|_| None).unwrap();
        let want = CoordinatorRecord::Offset {
            group: "upgrade-g".into(),
            topic: "orders".into(),
            partition: 0,
            value: Some(OffsetValue { offset: 60, leader_epoch: -1, metadata: String::new(), commit_timestamp: 0x1a2_4ce5_9143, expire_timestamp: None }),
        };
        assert_eq!(decoded, Some(want));
        // A tagged field cut short is an error, not a guess.
        assert!(CoordinatorRecord::decode(&key, Some(&value[..value.len() - 1]), &|_| None).is_err());
    }

    #[test]
    fn group_metadata_records_round_trip_and_tombstones_decode() {
        let r = CoordinatorRecord::Group {
            group: "g".into(),
            value: Some(GroupValue {
                protocol_type: "consumer".into(),
                generation_id: 3,
                protocol: Some("range".into()),
                leader: Some("m1".into()),
                current_state_timestamp: 5,
                members: vec![MemberValue {
                    member_id: "m1".into(),
                    instance_id: Some("i1".into()),
                    client_id: "c".into(),
                    client_host: "/127.0.0.1".into(),
                    rebalance_timeout_ms: 300_000,
                    session_timeout_ms: 45_000,
                    subscription: Bytes::from_static(b"sub"),
                    assignment: Bytes::from_static(b"asg"),
                }],
            }),
        };
        let (k, v) = r.encode(&|_| None);
        assert_eq!(CoordinatorRecord::decode(&k, v.as_deref(), &|_| None).unwrap(), Some(r));
        let tomb = CoordinatorRecord::decode(&k, None, &|_| None).unwrap();
        assert_eq!(tomb, Some(CoordinatorRecord::Group { group: "g".into(), value: None }));
    }

    #[test]
    fn kip_848_records_round_trip_by_topic_id_and_drop_deleted_topics() {
        let orders = Uuid::from_bytes([7; 16]);
        let id = |t: &str| (t == "orders").then_some(orders);
        let name = |u: Uuid| (u == orders).then(|| "orders".to_string());
        let parts: NamedPartitions = [("orders".to_string(), vec![0, 2])].into();
        let records = [
            CoordinatorRecord::ConsumerGroup { group: "g".into(), epoch: Some(4) },
            CoordinatorRecord::TargetAssignment { group: "g".into(), epoch: Some(4) },
            CoordinatorRecord::ConsumerMember {
                group: "g".into(),
                member: "m".into(),
                value: Some(ConsumerMemberValue {
                    instance_id: None,
                    rack_id: Some("r1".into()),
                    client_id: "c".into(),
                    client_host: "/127.0.0.1".into(),
                    subscribed_topic_names: vec!["orders".into(), "gone".into()],
                    subscribed_topic_regex: Some("ord.*".into()),
                    rebalance_timeout_ms: 300_000,
                    server_assignor: None,
                }),
            },
            CoordinatorRecord::TargetAssignmentMember { group: "g".into(), member: "m".into(), partitions: Some(parts.clone()) },
            CoordinatorRecord::CurrentAssignment {
                group: "g".into(),
                member: "m".into(),
                value: Some(CurrentAssignmentValue { member_epoch: 4, previous_member_epoch: 3, state: 0, assigned: parts.clone(), pending_revocation: NamedPartitions::new() }),
            },
            CoordinatorRecord::CurrentAssignment { group: "g".into(), member: "m".into(), value: None },
        ];
        for r in records {
            let (k, v) = r.encode(&id);
            assert_eq!(CoordinatorRecord::decode(&k, v.as_deref(), &name).unwrap(), Some(r));
        }
        // Kafka's key layout: version 5, then the group and member ids.
        let (k, v) = CoordinatorRecord::ConsumerGroup { group: "g".into(), epoch: Some(4) }.encode(&id);
        assert_eq!((&k[..], &v.unwrap()[..]), (&[0, 3, 0, 1, b'g'][..], &[0, 0, 0, 0, 0, 4, 0][..]));
        // A topic the reader does not know (deleted since) is left out; one without an id too.
        let mixed: NamedPartitions = [("orders".to_string(), vec![1]), ("gone".to_string(), vec![0])].into();
        let r = CoordinatorRecord::TargetAssignmentMember { group: "g".into(), member: "m".into(), partitions: Some(mixed) };
        let (k, v) = r.encode(&id);
        let back = CoordinatorRecord::decode(&k, v.as_deref(), &|_| None).unwrap();
        assert_eq!(back, Some(CoordinatorRecord::TargetAssignmentMember { group: "g".into(), member: "m".into(), partitions: Some(NamedPartitions::new()) }));
    }

    #[test]
    fn truncated_or_unknown_records_are_errors_or_skipped_not_panics() {
        assert!(CoordinatorRecord::decode(&[0, 1, 0, 5, b'g'], None, &|_| None).is_err());
        assert_eq!(CoordinatorRecord::decode(&[0, 9, 1, 2], None, &|_| None).unwrap(), None);
        assert!(CoordinatorRecord::decode(&[0, 2, 0, 1, b'g'], Some(&[0, 3, 0x7f, 0xff]), &|_| None).is_err());
        assert!(CoordinatorRecord::decode(&[0, 2, 0, 1, b'g'], Some(&[0, 9]), &|_| None).is_err());
    }

    proptest::proptest! {
        #[test]
        fn decoding_arbitrary_bytes_never_panics(k in proptest::collection::vec(0u8..=255, 0..64), v in proptest::collection::vec(0u8..=255, 0..128)) {
            let _ = CoordinatorRecord::decode(&k, Some(&v), &|_| None);
        }
    }
}
