//! Kafka's KRaft metadata records, in Kafka's own schemas (`common/metadata/*.json` of Apache
//! Kafka 4.4) and byte for byte as Kafka frames them in `__cluster_metadata`.
//!
//! # Wire format
//! Each metadata record is the *value* of one record in a magic v2 record batch (no key):
//!
//! ```text
//! uvarint frame_version (= 1) | uvarint api_key (record kind) | uvarint version | body
//! body: the kind's fields in schema order, flexible encoding (compact strings and arrays,
//!       uvarint length + 1, 0 = null), then a tagged-field section (uvarint count, then
//!       uvarint tag | uvarint size | bytes, tags ascending); structs inside arrays end with a
//!       tagged-field section of their own.
//! ```
//!
//! Control batches in the same log (leader changes, snapshot headers and footers, KRaft voter
//! sets) belong to the Raft layer and are not metadata records; [`decode_batches`] passes over
//! them.
//!
//! # Invariants
//! - Decoding never trusts a length or count it read: every one is checked against the bytes
//!   left before anything is allocated for it.
//! - A record kind or version this module does not know is an error naming the kind and the
//!   offset ([`ClusterError::UnknownRecord`]), never skipped: a node that skipped one would
//!   serve metadata that differs from its peers'. Unknown *tagged* fields are optional by
//!   Kafka's rules and are passed over.
//! - `encode` then `decode` gives back the same record (tested for every kind), and `encode` of
//!   a record decoded from Kafka's log gives Kafka's bytes (tested against a real Kafka log by
//!   `tests/clients/test_metadata_log.py`) whenever it carried no unknown tagged fields.

use uuid::Uuid;

use super::ClusterError;

/// The frame version Kafka writes before every metadata record (`AbstractApiMessageSerde`).
pub const FRAME_VERSION: u64 = 1;

/// One endpoint of a broker or controller registration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub name: String,
    pub host: String,
    pub port: u16,
    pub security_protocol: i16,
}

/// One feature a broker or controller supports: `(name, min, max)` levels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SupportedFeature {
    pub name: String,
    pub min_supported_version: i16,
    pub max_supported_version: i16,
}

/// `RegisterBrokerRecord` (0): a broker registered with the controller, with a new epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisterBroker {
    pub broker_id: i32,
    pub is_migrating_zk_broker: bool,
    pub incarnation_id: Uuid,
    pub broker_epoch: i64,
    pub endpoints: Vec<Endpoint>,
    pub features: Vec<SupportedFeature>,
    pub rack: Option<String>,
    pub fenced: bool,
    pub in_controlled_shutdown: bool,
    pub log_dirs: Vec<Uuid>,
    pub cordoned_log_dirs: Option<Vec<Uuid>>,
}

/// `PartitionRecord` (3): a partition's whole state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    pub partition_id: i32,
    pub topic_id: Uuid,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    pub removing_replicas: Vec<i32>,
    pub adding_replicas: Vec<i32>,
    pub leader: i32,
    pub leader_recovery_state: i8,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub directories: Vec<Uuid>,
    pub eligible_leader_replicas: Option<Vec<i32>>,
    pub last_known_elr: Option<Vec<i32>>,
}

impl Partition {
    /// A new partition as the controller creates it: every replica in sync, the first one
    /// leading, epochs at 0.
    pub fn new(topic_id: Uuid, partition_id: i32, replicas: Vec<i32>) -> Partition {
        Partition {
            partition_id,
            topic_id,
            isr: replicas.clone(),
            leader: replicas.first().copied().unwrap_or(-1),
            replicas,
            removing_replicas: Vec::new(),
            adding_replicas: Vec::new(),
            leader_recovery_state: 0,
            leader_epoch: 0,
            partition_epoch: 0,
            directories: Vec::new(),
            eligible_leader_replicas: None,
            last_known_elr: None,
        }
    }
}

/// `PartitionChangeRecord` (5): what changed in a partition; `None` (and `leader == -2`,
/// `leader_recovery_state == -1`) means unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionChange {
    pub partition_id: i32,
    pub topic_id: Uuid,
    pub isr: Option<Vec<i32>>,
    pub leader: i32,
    pub replicas: Option<Vec<i32>>,
    pub removing_replicas: Option<Vec<i32>>,
    pub adding_replicas: Option<Vec<i32>>,
    pub leader_recovery_state: i8,
    pub directories: Option<Vec<Uuid>>,
    pub eligible_leader_replicas: Option<Vec<i32>>,
    pub last_known_elr: Option<Vec<i32>>,
}

impl PartitionChange {
    /// A change of nothing yet: every field "unchanged".
    pub fn new(topic_id: Uuid, partition_id: i32) -> PartitionChange {
        PartitionChange {
            partition_id,
            topic_id,
            isr: None,
            leader: -2,
            replicas: None,
            removing_replicas: None,
            adding_replicas: None,
            leader_recovery_state: -1,
            directories: None,
            eligible_leader_replicas: None,
            last_known_elr: None,
        }
    }
}

/// `BrokerRegistrationChangeRecord` (17): `fenced` is -1 unfenced, 0 no change, 1 fenced;
/// `in_controlled_shutdown` 0 no change, 1 in controlled shutdown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerRegistrationChange {
    pub broker_id: i32,
    pub broker_epoch: i64,
    pub fenced: i8,
    pub in_controlled_shutdown: i8,
    pub log_dirs: Vec<Uuid>,
    pub cordoned_log_dirs: Option<Vec<Uuid>>,
}

/// `RegisterControllerRecord` (27).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisterController {
    pub controller_id: i32,
    pub incarnation_id: Uuid,
    pub zk_migration_ready: bool,
    pub endpoints: Vec<Endpoint>,
    pub features: Vec<SupportedFeature>,
}

/// The metadata record kinds sluice reads and writes, with Kafka's api keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetadataRecord {
    RegisterBroker(RegisterBroker),
    UnregisterBroker { broker_id: i32, broker_epoch: i64 },
    Topic { name: String, topic_id: Uuid },
    Partition(Partition),
    /// `resource_type`: 2 topic, 4 broker (Kafka's `ConfigResource.Type`); `value` None deletes.
    Config { resource_type: i8, resource_name: String, name: String, value: Option<String> },
    PartitionChange(PartitionChange),
    FenceBroker { id: i32, epoch: i64 },
    UnfenceBroker { id: i32, epoch: i64 },
    RemoveTopic { topic_id: Uuid },
    FeatureLevel { name: String, feature_level: i16 },
    /// The next producer id block starts at `next_producer_id`.
    ProducerIds { broker_id: i32, broker_epoch: i64, next_producer_id: i64 },
    BrokerRegistrationChange(BrokerRegistrationChange),
    NoOp,
    BeginTransaction { name: Option<String> },
    EndTransaction,
    AbortTransaction { reason: Option<String> },
    RegisterController(RegisterController),
    ClearElr { topic_name: String },
}

/// Record kinds Kafka defines that sluice does not read yet (security and ZooKeeper migration),
/// by api key: decoding one is an error that names it.
const NOT_READ_YET: &[(u16, &str)] = &[
    (10, "DelegationTokenRecord"),
    (11, "UserScramCredentialRecord"),
    (14, "ClientQuotaRecord"),
    (18, "AccessControlEntryRecord"),
    (19, "RemoveAccessControlEntryRecord"),
    (21, "ZkMigrationRecord"),
    (22, "RemoveUserScramCredentialRecord"),
    (26, "RemoveDelegationTokenRecord"),
    (29, "UnregisterControllerRecord"),
];

/// Name of a record kind (api key), for errors and logs.
pub fn kind_name(api_key: u16) -> &'static str {
    match api_key {
        0 => "RegisterBrokerRecord",
        1 => "UnregisterBrokerRecord",
        2 => "TopicRecord",
        3 => "PartitionRecord",
        4 => "ConfigRecord",
        5 => "PartitionChangeRecord",
        7 => "FenceBrokerRecord",
        8 => "UnfenceBrokerRecord",
        9 => "RemoveTopicRecord",
        12 => "FeatureLevelRecord",
        15 => "ProducerIdsRecord",
        17 => "BrokerRegistrationChangeRecord",
        20 => "NoOpRecord",
        23 => "BeginTransactionRecord",
        24 => "EndTransactionRecord",
        25 => "AbortTransactionRecord",
        27 => "RegisterControllerRecord",
        28 => "ClearElrRecord",
        k => NOT_READ_YET.iter().find(|(key, _)| *key == k).map(|(_, n)| *n).unwrap_or("unknown"),
    }
}

impl MetadataRecord {
    /// Kafka's api key for this kind.
    pub fn api_key(&self) -> u16 {
        match self {
            MetadataRecord::RegisterBroker(_) => 0,
            MetadataRecord::UnregisterBroker { .. } => 1,
            MetadataRecord::Topic { .. } => 2,
            MetadataRecord::Partition(_) => 3,
            MetadataRecord::Config { .. } => 4,
            MetadataRecord::PartitionChange(_) => 5,
            MetadataRecord::FenceBroker { .. } => 7,
            MetadataRecord::UnfenceBroker { .. } => 8,
            MetadataRecord::RemoveTopic { .. } => 9,
            MetadataRecord::FeatureLevel { .. } => 12,
            MetadataRecord::ProducerIds { .. } => 15,
            MetadataRecord::BrokerRegistrationChange(_) => 17,
            MetadataRecord::NoOp => 20,
            MetadataRecord::BeginTransaction { .. } => 23,
            MetadataRecord::EndTransaction => 24,
            MetadataRecord::AbortTransaction { .. } => 25,
            MetadataRecord::RegisterController(_) => 27,
            MetadataRecord::ClearElr { .. } => 28,
        }
    }

    /// The highest version of this kind sluice reads and writes (Kafka 4.4's).
    pub fn max_version(api_key: u16) -> Option<i16> {
        match api_key {
            0 => Some(4),
            3 | 5 => Some(2),
            17 => Some(3),
            1 | 2 | 4 | 7 | 8 | 9 | 12 | 15 | 20 | 23 | 24 | 25 | 27 | 28 => Some(0),
            _ => None,
        }
    }
}

/// A record with the version it is (or is to be) written in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionedRecord {
    pub version: i16,
    pub record: MetadataRecord,
}

/// `record` at the newest version sluice writes of its kind.
pub fn versioned(record: MetadataRecord) -> VersionedRecord {
    let version = MetadataRecord::max_version(record.api_key()).unwrap_or(0);
    VersionedRecord { version, record }
}

// ------------------------------------------------------------------ flexible encoding

/// Reads the flexible encoding from a borrowed buffer; every length is checked first.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

type Res<T> = Result<T, String>;

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Res<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let end = end.ok_or_else(|| format!("needs {n} bytes at byte {}, {} left", self.pos, self.buf.len() - self.pos))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn i8(&mut self) -> Res<i8> {
        Ok(self.take(1)?[0] as i8)
    }
    fn bool(&mut self) -> Res<bool> {
        match self.i8()? {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(format!("boolean byte {b}")),
        }
    }
    fn i16(&mut self) -> Res<i16> {
        Ok(i16::from_be_bytes(self.take(2)?.try_into().expect("2 bytes")))
    }
    fn u16(&mut self) -> Res<u16> {
        Ok(u16::from_be_bytes(self.take(2)?.try_into().expect("2 bytes")))
    }
    fn i32(&mut self) -> Res<i32> {
        Ok(i32::from_be_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn i64(&mut self) -> Res<i64> {
        Ok(i64::from_be_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    fn uuid(&mut self) -> Res<Uuid> {
        Ok(Uuid::from_bytes(self.take(16)?.try_into().expect("16 bytes")))
    }
    fn uvarint(&mut self) -> Res<u64> {
        let mut v = 0u64;
        for i in 0..10 {
            let b = self.take(1)?[0];
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("unsigned varint longer than 10 bytes".into())
    }
    /// A compact length (`n + 1`, 0 = null), checked to fit in what is left at `min_each`
    /// bytes an element.
    fn compact_len(&mut self, min_each: usize) -> Res<Option<usize>> {
        let raw = self.uvarint()?;
        if raw == 0 {
            return Ok(None);
        }
        let n = usize::try_from(raw - 1).map_err(|_| format!("length {raw} too large"))?;
        let left = self.buf.len() - self.pos;
        if n.saturating_mul(min_each) > left {
            return Err(format!("length {n} exceeds the {left} bytes left"));
        }
        Ok(Some(n))
    }
    fn nullable_string(&mut self) -> Res<Option<String>> {
        match self.compact_len(1)? {
            None => Ok(None),
            Some(n) => {
                let b = self.take(n)?;
                Ok(Some(std::str::from_utf8(b).map_err(|e| format!("string is not UTF-8: {e}"))?.to_string()))
            }
        }
    }
    fn string(&mut self) -> Res<String> {
        self.nullable_string()?.ok_or_else(|| "null string where one is required".to_string())
    }
    fn nullable_array<T>(&mut self, min_each: usize, mut item: impl FnMut(&mut Self) -> Res<T>) -> Res<Option<Vec<T>>> {
        match self.compact_len(min_each)? {
            None => Ok(None),
            Some(n) => (0..n).map(|_| item(self)).collect::<Res<Vec<T>>>().map(Some),
        }
    }
    fn array<T>(&mut self, min_each: usize, item: impl FnMut(&mut Self) -> Res<T>) -> Res<Vec<T>> {
        self.nullable_array(min_each, item)?.ok_or_else(|| "null array where one is required".to_string())
    }
    fn i32s(&mut self) -> Res<Vec<i32>> {
        self.array(4, Self::i32)
    }
    fn nullable_i32s(&mut self) -> Res<Option<Vec<i32>>> {
        self.nullable_array(4, Self::i32)
    }
    fn uuids(&mut self) -> Res<Vec<Uuid>> {
        self.array(16, Self::uuid)
    }
    fn nullable_uuids(&mut self) -> Res<Option<Vec<Uuid>>> {
        self.nullable_array(16, Self::uuid)
    }
    /// The tagged-field section: calls `field(reader, tag)` for each tag with a reader over
    /// exactly its bytes; unknown tags (`field` returns false) are passed over.
    fn tagged(&mut self, mut field: impl FnMut(&mut Reader<'a>, u64) -> Res<bool>) -> Res<()> {
        let count = self.uvarint()?;
        let mut last = None;
        for _ in 0..count {
            let tag = self.uvarint()?;
            if last.is_some_and(|l| tag <= l) {
                return Err(format!("tagged field {tag} out of order"));
            }
            last = Some(tag);
            let size = usize::try_from(self.uvarint()?).map_err(|_| "tagged field size too large".to_string())?;
            let bytes = self.take(size)?;
            let mut sub = Reader { buf: bytes, pos: 0 };
            if field(&mut sub, tag)? && sub.pos != bytes.len() {
                return Err(format!("tagged field {tag}: {} bytes left over", bytes.len() - sub.pos));
            }
        }
        Ok(())
    }
    /// A struct's tagged-field section with no tags known.
    fn no_tags(&mut self) -> Res<()> {
        self.tagged(|_, _| Ok(false))
    }
}

/// Writes the flexible encoding.
struct Writer(Vec<u8>);

impl Writer {
    fn i8(&mut self, v: i8) {
        self.0.push(v as u8);
    }
    fn bool(&mut self, v: bool) {
        self.0.push(u8::from(v));
    }
    fn i16(&mut self, v: i16) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn i32(&mut self, v: i32) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn i64(&mut self, v: i64) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn uuid(&mut self, v: &Uuid) {
        self.0.extend_from_slice(v.as_bytes());
    }
    fn uvarint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }
    fn nullable_string(&mut self, v: Option<&str>) {
        match v {
            None => self.uvarint(0),
            Some(s) => {
                self.uvarint(s.len() as u64 + 1);
                self.0.extend_from_slice(s.as_bytes());
            }
        }
    }
    fn string(&mut self, v: &str) {
        self.nullable_string(Some(v));
    }
    fn nullable_array<T>(&mut self, v: Option<&[T]>, mut item: impl FnMut(&mut Self, &T)) {
        match v {
            None => self.uvarint(0),
            Some(items) => {
                self.uvarint(items.len() as u64 + 1);
                for i in items {
                    item(self, i);
                }
            }
        }
    }
    fn i32s(&mut self, v: Option<&[i32]>) {
        self.nullable_array(v, |w, x| w.i32(*x));
    }
    fn uuids(&mut self, v: Option<&[Uuid]>) {
        self.nullable_array(v, |w, x| w.uuid(x));
    }
    /// A tagged-field section of `(tag, bytes)` pairs, given in ascending tag order.
    fn tagged(&mut self, fields: Vec<(u64, Vec<u8>)>) {
        self.uvarint(fields.len() as u64);
        for (tag, bytes) in fields {
            self.uvarint(tag);
            self.uvarint(bytes.len() as u64);
            self.0.extend_from_slice(&bytes);
        }
    }
}

/// One tagged field's bytes.
fn tag_bytes(f: impl FnOnce(&mut Writer)) -> Vec<u8> {
    let mut w = Writer(Vec::new());
    f(&mut w);
    w.0
}

fn read_endpoint(r: &mut Reader<'_>) -> Res<Endpoint> {
    let e = Endpoint { name: r.string()?, host: r.string()?, port: r.u16()?, security_protocol: r.i16()? };
    r.no_tags()?;
    Ok(e)
}

fn write_endpoint(w: &mut Writer, e: &Endpoint) {
    w.string(&e.name);
    w.string(&e.host);
    w.u16(e.port);
    w.i16(e.security_protocol);
    w.tagged(Vec::new());
}

fn read_feature(r: &mut Reader<'_>) -> Res<SupportedFeature> {
    let f = SupportedFeature { name: r.string()?, min_supported_version: r.i16()?, max_supported_version: r.i16()? };
    r.no_tags()?;
    Ok(f)
}

fn write_feature(w: &mut Writer, f: &SupportedFeature) {
    w.string(&f.name);
    w.i16(f.min_supported_version);
    w.i16(f.max_supported_version);
    w.tagged(Vec::new());
}

// ------------------------------------------------------------------ records

/// Encodes one record as the value of a `__cluster_metadata` record (frame, kind, version,
/// body). Panics if `version` is above what sluice writes for the kind (a programming error).
pub fn encode(rec: &VersionedRecord) -> Vec<u8> {
    let api_key = rec.record.api_key();
    let v = rec.version;
    assert!(
        (0..=MetadataRecord::max_version(api_key).unwrap_or(0)).contains(&v),
        "{} v{v} is not a version sluice writes",
        kind_name(api_key)
    );
    let mut w = Writer(Vec::with_capacity(64));
    w.uvarint(FRAME_VERSION);
    w.uvarint(u64::from(api_key));
    w.uvarint(v as u64);
    let mut tags = Vec::new();
    match &rec.record {
        MetadataRecord::RegisterBroker(b) => {
            w.i32(b.broker_id);
            if v >= 2 {
                w.bool(b.is_migrating_zk_broker);
            }
            w.uuid(&b.incarnation_id);
            w.i64(b.broker_epoch);
            w.nullable_array(Some(&b.endpoints), write_endpoint);
            w.nullable_array(Some(&b.features), write_feature);
            w.nullable_string(b.rack.as_deref());
            w.bool(b.fenced);
            if v >= 1 {
                w.bool(b.in_controlled_shutdown);
            }
            if v >= 3 && !b.log_dirs.is_empty() {
                tags.push((0, tag_bytes(|t| t.uuids(Some(&b.log_dirs)))));
            }
            if v >= 4 && b.cordoned_log_dirs.is_some() {
                tags.push((1, tag_bytes(|t| t.uuids(b.cordoned_log_dirs.as_deref()))));
            }
        }
        MetadataRecord::UnregisterBroker { broker_id, broker_epoch } => {
            w.i32(*broker_id);
            w.i64(*broker_epoch);
        }
        MetadataRecord::Topic { name, topic_id } => {
            w.string(name);
            w.uuid(topic_id);
        }
        MetadataRecord::Partition(p) => {
            w.i32(p.partition_id);
            w.uuid(&p.topic_id);
            w.i32s(Some(&p.replicas));
            w.i32s(Some(&p.isr));
            w.i32s(Some(&p.removing_replicas));
            w.i32s(Some(&p.adding_replicas));
            w.i32(p.leader);
            w.i32(p.leader_epoch);
            w.i32(p.partition_epoch);
            if v >= 1 {
                w.uuids(Some(&p.directories));
            }
            if p.leader_recovery_state != 0 {
                tags.push((0, tag_bytes(|t| t.i8(p.leader_recovery_state))));
            }
            if v >= 2 {
                if p.eligible_leader_replicas.is_some() {
                    tags.push((1, tag_bytes(|t| t.i32s(p.eligible_leader_replicas.as_deref()))));
                }
                if p.last_known_elr.is_some() {
                    tags.push((2, tag_bytes(|t| t.i32s(p.last_known_elr.as_deref()))));
                }
            }
        }
        MetadataRecord::Config { resource_type, resource_name, name, value } => {
            w.i8(*resource_type);
            w.string(resource_name);
            w.string(name);
            w.nullable_string(value.as_deref());
        }
        MetadataRecord::PartitionChange(c) => {
            w.i32(c.partition_id);
            w.uuid(&c.topic_id);
            if c.isr.is_some() {
                tags.push((0, tag_bytes(|t| t.i32s(c.isr.as_deref()))));
            }
            if c.leader != -2 {
                tags.push((1, tag_bytes(|t| t.i32(c.leader))));
            }
            for (tag, list) in [(2, &c.replicas), (3, &c.removing_replicas), (4, &c.adding_replicas)] {
                if list.is_some() {
                    tags.push((tag, tag_bytes(|t| t.i32s(list.as_deref()))));
                }
            }
            if c.leader_recovery_state != -1 {
                tags.push((5, tag_bytes(|t| t.i8(c.leader_recovery_state))));
            }
            if v >= 2 {
                for (tag, list) in [(6, &c.eligible_leader_replicas), (7, &c.last_known_elr)] {
                    if list.is_some() {
                        tags.push((tag, tag_bytes(|t| t.i32s(list.as_deref()))));
                    }
                }
            }
            if v >= 1 && c.directories.is_some() {
                tags.push((8, tag_bytes(|t| t.uuids(c.directories.as_deref()))));
            }
        }
        MetadataRecord::FenceBroker { id, epoch } | MetadataRecord::UnfenceBroker { id, epoch } => {
            w.i32(*id);
            w.i64(*epoch);
        }
        MetadataRecord::RemoveTopic { topic_id } => w.uuid(topic_id),
        MetadataRecord::FeatureLevel { name, feature_level } => {
            w.string(name);
            w.i16(*feature_level);
        }
        MetadataRecord::ProducerIds { broker_id, broker_epoch, next_producer_id } => {
            w.i32(*broker_id);
            w.i64(*broker_epoch);
            w.i64(*next_producer_id);
        }
        MetadataRecord::BrokerRegistrationChange(c) => {
            w.i32(c.broker_id);
            w.i64(c.broker_epoch);
            if c.fenced != 0 {
                tags.push((0, tag_bytes(|t| t.i8(c.fenced))));
            }
            if v >= 1 && c.in_controlled_shutdown != 0 {
                tags.push((1, tag_bytes(|t| t.i8(c.in_controlled_shutdown))));
            }
            if v >= 2 && !c.log_dirs.is_empty() {
                tags.push((2, tag_bytes(|t| t.uuids(Some(&c.log_dirs)))));
            }
            if v >= 3 && c.cordoned_log_dirs.is_some() {
                tags.push((3, tag_bytes(|t| t.uuids(c.cordoned_log_dirs.as_deref()))));
            }
        }
        MetadataRecord::NoOp | MetadataRecord::EndTransaction => {}
        MetadataRecord::BeginTransaction { name: text } | MetadataRecord::AbortTransaction { reason: text } => {
            if text.is_some() {
                tags.push((0, tag_bytes(|t| t.nullable_string(text.as_deref()))));
            }
        }
        MetadataRecord::RegisterController(c) => {
            w.i32(c.controller_id);
            w.uuid(&c.incarnation_id);
            w.bool(c.zk_migration_ready);
            w.nullable_array(Some(&c.endpoints), write_endpoint);
            w.nullable_array(Some(&c.features), write_feature);
        }
        MetadataRecord::ClearElr { topic_name } => w.string(topic_name),
    }
    w.tagged(tags);
    w.0
}

/// Decodes one `__cluster_metadata` record value; `offset` only names the record in errors.
pub fn decode(value: &[u8], offset: i64) -> Result<VersionedRecord, ClusterError> {
    let mut r = Reader { buf: value, pos: 0 };
    let head = (|| -> Res<(u64, u64, u64)> { Ok((r.uvarint()?, r.uvarint()?, r.uvarint()?)) })();
    let (frame, api_key, version) =
        head.map_err(|reason| ClusterError::Malformed { offset, kind: "metadata record", reason })?;
    if frame != FRAME_VERSION {
        return Err(ClusterError::Malformed { offset, kind: "metadata record", reason: format!("frame version {frame}") });
    }
    let unknown = || ClusterError::UnknownRecord { offset, api_key, version, name: kind_name(api_key.min(u64::from(u16::MAX)) as u16) };
    let api_key16 = u16::try_from(api_key).map_err(|_| unknown())?;
    let max = MetadataRecord::max_version(api_key16).ok_or_else(unknown)?;
    if version > max as u64 {
        return Err(unknown());
    }
    let v = version as i16;
    let record = decode_body(&mut r, api_key16, v)
        .and_then(|rec| if r.pos == value.len() { Ok(rec) } else { Err(format!("{} bytes left over", value.len() - r.pos)) })
        .map_err(|reason| ClusterError::Malformed { offset, kind: kind_name(api_key16), reason })?;
    Ok(VersionedRecord { version: v, record })
}

fn decode_body(r: &mut Reader<'_>, api_key: u16, v: i16) -> Res<MetadataRecord> {
    Ok(match api_key {
        0 => {
            let broker_id = r.i32()?;
            let is_migrating_zk_broker = if v >= 2 { r.bool()? } else { false };
            let incarnation_id = r.uuid()?;
            let broker_epoch = r.i64()?;
            let endpoints = r.array(7, read_endpoint)?;
            let features = r.array(6, read_feature)?;
            let rack = r.nullable_string()?;
            let fenced = r.bool()?;
            let in_controlled_shutdown = if v >= 1 { r.bool()? } else { false };
            let (mut log_dirs, mut cordoned_log_dirs) = (Vec::new(), None);
            r.tagged(|t, tag| match tag {
                0 if v >= 3 => t.uuids().map(|x| {
                    log_dirs = x;
                    true
                }),
                1 if v >= 4 => t.nullable_uuids().map(|x| {
                    cordoned_log_dirs = x;
                    true
                }),
                _ => Ok(false),
            })?;
            MetadataRecord::RegisterBroker(RegisterBroker {
                broker_id,
                is_migrating_zk_broker,
                incarnation_id,
                broker_epoch,
                endpoints,
                features,
                rack,
                fenced,
                in_controlled_shutdown,
                log_dirs,
                cordoned_log_dirs,
            })
        }
        1 => {
            let rec = MetadataRecord::UnregisterBroker { broker_id: r.i32()?, broker_epoch: r.i64()? };
            r.no_tags()?;
            rec
        }
        2 => {
            let rec = MetadataRecord::Topic { name: r.string()?, topic_id: r.uuid()? };
            r.no_tags()?;
            rec
        }
        3 => {
            let partition_id = r.i32()?;
            let topic_id = r.uuid()?;
            let replicas = r.i32s()?;
            let isr = r.i32s()?;
            let removing_replicas = r.i32s()?;
            let adding_replicas = r.i32s()?;
            let leader = r.i32()?;
            let leader_epoch = r.i32()?;
            let partition_epoch = r.i32()?;
            let directories = if v >= 1 { r.uuids()? } else { Vec::new() };
            let (mut leader_recovery_state, mut elr, mut last_known_elr) = (0, None, None);
            r.tagged(|t, tag| match tag {
                0 => t.i8().map(|x| {
                    leader_recovery_state = x;
                    true
                }),
                1 if v >= 2 => t.nullable_i32s().map(|x| {
                    elr = x;
                    true
                }),
                2 if v >= 2 => t.nullable_i32s().map(|x| {
                    last_known_elr = x;
                    true
                }),
                _ => Ok(false),
            })?;
            MetadataRecord::Partition(Partition {
                partition_id,
                topic_id,
                replicas,
                isr,
                removing_replicas,
                adding_replicas,
                leader,
                leader_recovery_state,
                leader_epoch,
                partition_epoch,
                directories,
                eligible_leader_replicas: elr,
                last_known_elr,
            })
        }
        4 => {
            let rec = MetadataRecord::Config {
                resource_type: r.i8()?,
                resource_name: r.string()?,
                name: r.string()?,
                value: r.nullable_string()?,
            };
            r.no_tags()?;
            rec
        }
        5 => {
            let mut c = PartitionChange::new(Uuid::nil(), r.i32()?);
            c.topic_id = r.uuid()?;
            r.tagged(|t, tag| {
                match tag {
                    0 => c.isr = t.nullable_i32s()?,
                    1 => c.leader = t.i32()?,
                    2 => c.replicas = t.nullable_i32s()?,
                    3 => c.removing_replicas = t.nullable_i32s()?,
                    4 => c.adding_replicas = t.nullable_i32s()?,
                    5 => c.leader_recovery_state = t.i8()?,
                    6 if v >= 2 => c.eligible_leader_replicas = t.nullable_i32s()?,
                    7 if v >= 2 => c.last_known_elr = t.nullable_i32s()?,
                    8 if v >= 1 => c.directories = t.nullable_uuids()?,
                    _ => return Ok(false),
                }
                Ok(true)
            })?;
            MetadataRecord::PartitionChange(c)
        }
        7 | 8 => {
            let (id, epoch) = (r.i32()?, r.i64()?);
            r.no_tags()?;
            if api_key == 7 {
                MetadataRecord::FenceBroker { id, epoch }
            } else {
                MetadataRecord::UnfenceBroker { id, epoch }
            }
        }
        9 => {
            let rec = MetadataRecord::RemoveTopic { topic_id: r.uuid()? };
            r.no_tags()?;
            rec
        }
        12 => {
            let rec = MetadataRecord::FeatureLevel { name: r.string()?, feature_level: r.i16()? };
            r.no_tags()?;
            rec
        }
        15 => {
            let rec =
                MetadataRecord::ProducerIds { broker_id: r.i32()?, broker_epoch: r.i64()?, next_producer_id: r.i64()? };
            r.no_tags()?;
            rec
        }
        17 => {
            let mut c = BrokerRegistrationChange {
                broker_id: r.i32()?,
                broker_epoch: r.i64()?,
                fenced: 0,
                in_controlled_shutdown: 0,
                log_dirs: Vec::new(),
                cordoned_log_dirs: None,
            };
            r.tagged(|t, tag| {
                match tag {
                    0 => c.fenced = t.i8()?,
                    1 if v >= 1 => c.in_controlled_shutdown = t.i8()?,
                    2 if v >= 2 => c.log_dirs = t.uuids()?,
                    3 if v >= 3 => c.cordoned_log_dirs = t.nullable_uuids()?,
                    _ => return Ok(false),
                }
                Ok(true)
            })?;
            MetadataRecord::BrokerRegistrationChange(c)
        }
        20 | 24 => {
            r.no_tags()?;
            if api_key == 20 {
                MetadataRecord::NoOp
            } else {
                MetadataRecord::EndTransaction
            }
        }
        23 | 25 => {
            let mut text = None;
            r.tagged(|t, tag| {
                if tag != 0 {
                    return Ok(false);
                }
                text = t.nullable_string()?;
                Ok(true)
            })?;
            if api_key == 23 {
                MetadataRecord::BeginTransaction { name: text }
            } else {
                MetadataRecord::AbortTransaction { reason: text }
            }
        }
        27 => {
            let rec = MetadataRecord::RegisterController(RegisterController {
                controller_id: r.i32()?,
                incarnation_id: r.uuid()?,
                zk_migration_ready: r.bool()?,
                endpoints: r.array(7, read_endpoint)?,
                features: r.array(6, read_feature)?,
            });
            r.no_tags()?;
            rec
        }
        28 => {
            let rec = MetadataRecord::ClearElr { topic_name: r.string()? };
            r.no_tags()?;
            rec
        }
        _ => return Err(format!("record kind {api_key} has no decoder")),
    })
}

/// Calls `each(offset, value bytes, record)` for every metadata record in `bytes` (a whole
/// `__cluster_metadata` segment or snapshot file: magic v2 record batches), in order; control
/// batches are passed over. Stops at the first error (from decoding or from `each`).
pub fn decode_batches(
    bytes: &[u8],
    mut each: impl FnMut(i64, &[u8], VersionedRecord) -> Result<(), ClusterError>,
) -> Result<(), ClusterError> {
    use crate::protocol::record_batch::{records_section, BatchIter, RecordIter};
    let mut batches = BatchIter::new(bytes);
    while let Some(item) = batches.next() {
        let (header, batch) = item.map_err(|e| ClusterError::Malformed {
            offset: -1,
            kind: "record batch",
            reason: format!("at byte {}: {e}", batches.position()),
        })?;
        if header.is_control() {
            continue;
        }
        let malformed = |reason: String| ClusterError::Malformed { offset: header.base_offset, kind: "record batch", reason };
        let (header, records) = records_section(batch).map_err(|e| malformed(e.to_string()))?;
        for rec in RecordIter::from_parts(header, &records) {
            let rec = rec.map_err(|e| malformed(e.to_string()))?;
            let value = rec.value.ok_or_else(|| malformed(format!("record at offset {} has no value", rec.offset)))?;
            each(rec.offset, value, decode(value, rec.offset)?)?;
        }
    }
    if !batches.remainder().is_empty() {
        // A torn last batch (a crash mid-write): Kafka truncates it on recovery; so do readers.
        tracing::warn!(bytes = batches.remainder().len(), "metadata log ends in a partial batch; ignoring it");
    }
    Ok(())
}

#[cfg(test)]
#[path = "records_tests.rs"]
mod tests;
