//! The metadata image: the cluster's state as the metadata records build it, replayed one
//! record at a time in log order. A pure core: no I/O but [`MetadataImage::replay_kafka_log_dir`],
//! which reads files and hands their records to [`MetadataImage::apply`].
//!
//! The rules are Kafka's (`MetadataDelta` and its per-kind deltas):
//! - a `PartitionChangeRecord` bumps the partition epoch, and the leader epoch when it names a
//!   leader (`leader != -2`), also the same leader again (how Kafka forces a new epoch);
//! - a `FeatureLevelRecord` of level 0 removes the feature;
//! - a `RemoveTopicRecord` drops the topic, its partitions and its configs;
//! - a `ConfigRecord` with a null value deletes the key; resource name "" of a broker config
//!   is the cluster-wide default;
//! - records between `BeginTransactionRecord` and `EndTransactionRecord` apply together at the
//!   end; after `AbortTransactionRecord` they are dropped (KIP-868).
//!
//! # Invariants
//! - `offset` is the offset of the last record applied (or buffered in a transaction), and
//!   records are applied in increasing offset order; an older offset is an error.
//! - A record that refers to something the image does not have (a partition of an unknown
//!   topic, a broker that never registered, an epoch that is not the broker's current one) is an
//!   [`ClusterError::Inconsistent`] error and leaves the image unchanged.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use uuid::Uuid;

use super::records::{
    self, BrokerRegistrationChange, Endpoint, MetadataRecord, PartitionChange, RegisterBroker, RegisterController, SupportedFeature,
    VersionedRecord,
};
use super::ClusterError;
use crate::metadata::kafka_uuid_string;

/// `ConfigRecord` resource types (Kafka's `ConfigResource.Type`).
pub const TOPIC_RESOURCE: i8 = 2;
pub const BROKER_RESOURCE: i8 = 4;

/// A registered broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerRegistration {
    pub id: i32,
    pub epoch: i64,
    pub incarnation_id: Uuid,
    pub endpoints: Vec<Endpoint>,
    pub features: Vec<SupportedFeature>,
    pub rack: Option<String>,
    pub fenced: bool,
    pub in_controlled_shutdown: bool,
}

/// A registered controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerRegistration {
    pub id: i32,
    pub incarnation_id: Uuid,
    pub endpoints: Vec<Endpoint>,
}

/// One partition's replica set, leadership and epochs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionState {
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    pub removing_replicas: Vec<i32>,
    pub adding_replicas: Vec<i32>,
    /// -1: no leader.
    pub leader: i32,
    pub leader_recovery_state: i8,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub eligible_leader_replicas: Vec<i32>,
    pub last_known_elr: Vec<i32>,
}

/// A topic and its partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicState {
    pub name: String,
    pub id: Uuid,
    pub partitions: BTreeMap<i32, PartitionState>,
}

/// The cluster's metadata as of `offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataImage {
    /// The offset of the last record applied; -1 before any.
    pub offset: i64,
    /// Finalized feature levels (`metadata.version`, `kraft.version`, ...).
    pub features: BTreeMap<String, i16>,
    pub brokers: BTreeMap<i32, BrokerRegistration>,
    pub controllers: BTreeMap<i32, ControllerRegistration>,
    /// Each topic behind its own `Arc`: copying the image (once per applied batch, once per
    /// proposal's check) copies the map, not every partition; applying a record copies only the
    /// topic it changes, and only while an older image still shares it.
    pub topics: BTreeMap<Uuid, Arc<TopicState>>,
    pub topic_ids: BTreeMap<String, Uuid>,
    /// `(resource type, resource name)` -> key -> value.
    pub configs: BTreeMap<(i8, String), BTreeMap<String, String>>,
    /// The first producer id of the next block to hand out (0: none handed out yet).
    pub next_producer_id: i64,
    /// Records of an open metadata transaction, applied at its end.
    pending: Option<Vec<(i64, MetadataRecord)>>,
}

impl Default for MetadataImage {
    fn default() -> Self {
        MetadataImage {
            offset: -1,
            features: BTreeMap::new(),
            brokers: BTreeMap::new(),
            controllers: BTreeMap::new(),
            topics: BTreeMap::new(),
            topic_ids: BTreeMap::new(),
            configs: BTreeMap::new(),
            next_producer_id: 0,
            pending: None,
        }
    }
}

impl MetadataImage {
    /// Applies the record at `offset`; on error the image is unchanged.
    pub fn apply(&mut self, offset: i64, record: &MetadataRecord) -> Result<(), ClusterError> {
        if offset <= self.offset {
            return Err(inconsistent(offset, record, format!("offset is not after the last applied, {}", self.offset)));
        }
        match record {
            MetadataRecord::BeginTransaction { .. } => {
                if self.pending.is_some() {
                    return Err(inconsistent(offset, record, "a metadata transaction is already open".into()));
                }
                self.pending = Some(Vec::new());
            }
            MetadataRecord::EndTransaction => {
                let pending = self
                    .pending
                    .take()
                    .ok_or_else(|| inconsistent(offset, record, "no metadata transaction is open".into()))?;
                // All or nothing: apply to a copy.
                let mut next = self.clone();
                for (o, r) in &pending {
                    next.apply_one(*o, r)?;
                }
                *self = next;
            }
            MetadataRecord::AbortTransaction { .. } => {
                self.pending
                    .take()
                    .ok_or_else(|| inconsistent(offset, record, "no metadata transaction is open".into()))?;
            }
            _ => match &mut self.pending {
                Some(pending) => pending.push((offset, record.clone())),
                None => self.apply_one(offset, record)?,
            },
        }
        self.offset = offset;
        Ok(())
    }

    fn broker_mut(&mut self, offset: i64, record: &MetadataRecord, id: i32, epoch: i64) -> Result<&mut BrokerRegistration, ClusterError> {
        match self.brokers.get_mut(&id) {
            Some(b) if b.epoch == epoch => Ok(b),
            Some(b) => Err(inconsistent(offset, record, format!("broker {id} has epoch {}, not {epoch}", b.epoch))),
            None => Err(inconsistent(offset, record, format!("broker {id} is not registered"))),
        }
    }

    fn apply_one(&mut self, offset: i64, record: &MetadataRecord) -> Result<(), ClusterError> {
        match record {
            MetadataRecord::RegisterBroker(b) => {
                self.brokers.insert(
                    b.broker_id,
                    BrokerRegistration {
                        id: b.broker_id,
                        epoch: b.broker_epoch,
                        incarnation_id: b.incarnation_id,
                        endpoints: b.endpoints.clone(),
                        features: b.features.clone(),
                        rack: b.rack.clone(),
                        fenced: b.fenced,
                        in_controlled_shutdown: b.in_controlled_shutdown,
                    },
                );
            }
            MetadataRecord::UnregisterBroker { broker_id, broker_epoch } => {
                self.broker_mut(offset, record, *broker_id, *broker_epoch)?;
                self.brokers.remove(broker_id);
            }
            MetadataRecord::FenceBroker { id, epoch } => self.broker_mut(offset, record, *id, *epoch)?.fenced = true,
            MetadataRecord::UnfenceBroker { id, epoch } => self.broker_mut(offset, record, *id, *epoch)?.fenced = false,
            MetadataRecord::BrokerRegistrationChange(BrokerRegistrationChange {
                broker_id,
                broker_epoch,
                fenced,
                in_controlled_shutdown,
                ..
            }) => {
                let b = self.broker_mut(offset, record, *broker_id, *broker_epoch)?;
                match fenced {
                    -1 => b.fenced = false,
                    1 => b.fenced = true,
                    _ => {}
                }
                if *in_controlled_shutdown == 1 {
                    b.in_controlled_shutdown = true;
                }
            }
            MetadataRecord::Topic { name, topic_id } => {
                if let Some(existing) = self.topic_ids.get(name).filter(|id| *id != topic_id) {
                    let reason = format!("topic {name} exists with id {}", kafka_uuid_string(*existing));
                    return Err(inconsistent(offset, record, reason));
                }
                self.topic_ids.insert(name.clone(), *topic_id);
                self.topics
                    .entry(*topic_id)
                    .or_insert_with(|| Arc::new(TopicState { name: name.clone(), id: *topic_id, partitions: BTreeMap::new() }));
            }
            MetadataRecord::Partition(p) => {
                let topic = Arc::make_mut(self.topics.get_mut(&p.topic_id).ok_or_else(|| unknown_topic(offset, record, p.topic_id))?);
                topic.partitions.insert(
                    p.partition_id,
                    PartitionState {
                        replicas: p.replicas.clone(),
                        isr: p.isr.clone(),
                        removing_replicas: p.removing_replicas.clone(),
                        adding_replicas: p.adding_replicas.clone(),
                        leader: p.leader,
                        leader_recovery_state: p.leader_recovery_state,
                        leader_epoch: p.leader_epoch,
                        partition_epoch: p.partition_epoch,
                        eligible_leader_replicas: p.eligible_leader_replicas.clone().unwrap_or_default(),
                        last_known_elr: p.last_known_elr.clone().unwrap_or_default(),
                    },
                );
            }
            MetadataRecord::PartitionChange(c) => {
                let topic = Arc::make_mut(self.topics.get_mut(&c.topic_id).ok_or_else(|| unknown_topic(offset, record, c.topic_id))?);
                let p = topic.partitions.get_mut(&c.partition_id).ok_or_else(|| {
                    inconsistent(offset, record, format!("topic {} has no partition {}", topic.name, c.partition_id))
                })?;
                merge(p, c);
            }
            MetadataRecord::RemoveTopic { topic_id } => {
                let topic = self.topics.remove(topic_id).ok_or_else(|| unknown_topic(offset, record, *topic_id))?;
                self.topic_ids.remove(&topic.name);
                self.configs.remove(&(TOPIC_RESOURCE, topic.name.clone()));
            }
            MetadataRecord::Config { resource_type, resource_name, name, value } => {
                let key = (*resource_type, resource_name.clone());
                match value {
                    Some(v) => {
                        self.configs.entry(key).or_default().insert(name.clone(), v.clone());
                    }
                    None => {
                        if let Some(c) = self.configs.get_mut(&key) {
                            c.remove(name);
                            if c.is_empty() {
                                self.configs.remove(&key);
                            }
                        }
                    }
                }
            }
            MetadataRecord::FeatureLevel { name, feature_level } => {
                if *feature_level == 0 {
                    self.features.remove(name);
                } else {
                    self.features.insert(name.clone(), *feature_level);
                }
            }
            MetadataRecord::ProducerIds { next_producer_id, .. } => {
                if *next_producer_id < self.next_producer_id {
                    let reason = format!("next producer id {next_producer_id} is below {}", self.next_producer_id);
                    return Err(inconsistent(offset, record, reason));
                }
                self.next_producer_id = *next_producer_id;
            }
            MetadataRecord::RegisterController(c) => {
                self.controllers.insert(
                    c.controller_id,
                    ControllerRegistration {
                        id: c.controller_id,
                        incarnation_id: c.incarnation_id,
                        endpoints: c.endpoints.clone(),
                    },
                );
            }
            MetadataRecord::ClearElr { topic_name } => {
                for topic in self.topics.values_mut().filter(|t| topic_name.is_empty() || t.name == *topic_name) {
                    for p in Arc::make_mut(topic).partitions.values_mut() {
                        p.eligible_leader_replicas.clear();
                        p.last_known_elr.clear();
                    }
                }
            }
            MetadataRecord::NoOp => {}
            MetadataRecord::BeginTransaction { .. } | MetadataRecord::EndTransaction | MetadataRecord::AbortTransaction { .. } => {
                unreachable!("transaction markers are handled by apply")
            }
        }
        Ok(())
    }

    /// The topic named `name`, if it exists.
    pub fn topic(&self, name: &str) -> Option<&TopicState> {
        self.topic_ids.get(name).and_then(|id| self.topics.get(id)).map(|t| &**t)
    }

    /// Replays a Kafka KRaft metadata log directory (`<metadata.log.dir>/__cluster_metadata-0`):
    /// the newest snapshot (`<end offset>-<epoch>.checkpoint`, standing for the log below its
    /// end offset) if there is one, then the records of the `.log` segments from that offset on.
    /// Kafka's bootstrap snapshot (end offset 0) holds the initial feature levels, which its log
    /// then writes again from offset 0.
    pub fn replay_kafka_log_dir(dir: &Path) -> Result<MetadataImage, ClusterError> {
        let read_err = |path: &Path| {
            let path = path.to_path_buf();
            move |source| ClusterError::Read { path, source }
        };
        let (snapshots, segments) = kafka_log_files(dir)?;
        let mut image = MetadataImage::default();
        if let Some((end, path)) = snapshots.last() {
            let bytes = std::fs::read(path).map_err(read_err(path))?;
            // A snapshot's records are a state, not log positions: numbered here from 0 up.
            let mut i = 0;
            records::decode_batches(&bytes, |_, _, rec| {
                image.apply(i, &rec.record)?;
                i += 1;
                Ok(())
            })?;
            image.offset = end - 1;
        }
        let from = image.offset + 1;
        for (_, path) in &segments {
            let bytes = std::fs::read(path).map_err(read_err(path))?;
            records::decode_batches(&bytes, |offset, _, rec| if offset >= from { image.apply(offset, &rec.record) } else { Ok(()) })?;
        }
        Ok(image)
    }
}

/// A metadata log file and the offset its name carries.
pub type LogFile = (i64, PathBuf);

/// The snapshots (`<end offset>-<epoch>.checkpoint`, by end offset) and segments
/// (`<base offset>.log`, by base offset) of a Kafka KRaft metadata log directory, each sorted.
pub fn kafka_log_files(dir: &Path) -> Result<(Vec<LogFile>, Vec<LogFile>), ClusterError> {
    let read_err = |source| ClusterError::Read { path: dir.to_path_buf(), source };
    let mut snapshots = Vec::new();
    let mut segments = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(read_err)? {
        let path = entry.map_err(read_err)?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else { continue };
        if let Some(stem) = name.strip_suffix(".checkpoint") {
            if let Some(end) = stem.split('-').next().and_then(|o| o.parse::<i64>().ok()) {
                snapshots.push((end, path.clone()));
            }
        } else if let Some(stem) = name.strip_suffix(".log") {
            if let Ok(base) = stem.parse::<i64>() {
                segments.push((base, path.clone()));
            }
        }
    }
    snapshots.sort();
    segments.sort();
    Ok((snapshots, segments))
}

impl MetadataImage {
    /// Records that rebuild this image from nothing (what a snapshot holds, as Kafka's
    /// snapshots hold records): features, controllers, brokers, topics with their partitions,
    /// configs, the producer-id block. Each in the newest version sluice writes.
    pub fn to_records(&self) -> Vec<VersionedRecord> {
        let mut out = Vec::new();
        let mut push = |record: MetadataRecord| {
            let version = MetadataRecord::max_version(record.api_key()).unwrap_or(0);
            out.push(VersionedRecord { version, record });
        };
        for (name, level) in &self.features {
            push(MetadataRecord::FeatureLevel { name: name.clone(), feature_level: *level });
        }
        for c in self.controllers.values() {
            push(MetadataRecord::RegisterController(RegisterController {
                controller_id: c.id,
                incarnation_id: c.incarnation_id,
                zk_migration_ready: false,
                endpoints: c.endpoints.clone(),
                features: Vec::new(),
            }));
        }
        for b in self.brokers.values() {
            push(MetadataRecord::RegisterBroker(RegisterBroker {
                broker_id: b.id,
                is_migrating_zk_broker: false,
                incarnation_id: b.incarnation_id,
                broker_epoch: b.epoch,
                endpoints: b.endpoints.clone(),
                features: b.features.clone(),
                rack: b.rack.clone(),
                fenced: b.fenced,
                in_controlled_shutdown: b.in_controlled_shutdown,
                log_dirs: Vec::new(),
                cordoned_log_dirs: None,
            }));
        }
        for t in self.topics.values() {
            push(MetadataRecord::Topic { name: t.name.clone(), topic_id: t.id });
            for (i, p) in &t.partitions {
                push(MetadataRecord::Partition(records::Partition {
                    partition_id: *i,
                    topic_id: t.id,
                    replicas: p.replicas.clone(),
                    isr: p.isr.clone(),
                    removing_replicas: p.removing_replicas.clone(),
                    adding_replicas: p.adding_replicas.clone(),
                    leader: p.leader,
                    leader_recovery_state: p.leader_recovery_state,
                    leader_epoch: p.leader_epoch,
                    partition_epoch: p.partition_epoch,
                    directories: Vec::new(),
                    eligible_leader_replicas: Some(p.eligible_leader_replicas.clone()).filter(|v| !v.is_empty()),
                    last_known_elr: Some(p.last_known_elr.clone()).filter(|v| !v.is_empty()),
                }));
            }
        }
        for ((resource_type, resource_name), kv) in &self.configs {
            for (name, value) in kv {
                push(MetadataRecord::Config {
                    resource_type: *resource_type,
                    resource_name: resource_name.clone(),
                    name: name.clone(),
                    value: Some(value.clone()),
                });
            }
        }
        if self.next_producer_id > 0 {
            push(MetadataRecord::ProducerIds { broker_id: -1, broker_epoch: -1, next_producer_id: self.next_producer_id });
        }
        out
    }

    /// The image as JSON, with Kafka's textual ids (`sluice metadata-image`).
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::json;
        let endpoints = |eps: &[Endpoint]| -> Vec<serde_json::Value> {
            eps.iter()
                .map(|e| json!({"name": e.name, "host": e.host, "port": e.port, "security_protocol": e.security_protocol}))
                .collect()
        };
        json!({
            "offset": self.offset,
            "features": self.features,
            "brokers": self.brokers.values().map(|b| json!({
                "id": b.id, "epoch": b.epoch, "incarnation_id": kafka_uuid_string(b.incarnation_id),
                "endpoints": endpoints(&b.endpoints), "rack": b.rack, "fenced": b.fenced,
                "in_controlled_shutdown": b.in_controlled_shutdown,
            })).collect::<Vec<_>>(),
            "controllers": self.controllers.values().map(|c| json!({
                "id": c.id, "incarnation_id": kafka_uuid_string(c.incarnation_id), "endpoints": endpoints(&c.endpoints),
            })).collect::<Vec<_>>(),
            "topics": self.topics.values().map(|t| json!({
                "name": t.name, "id": kafka_uuid_string(t.id),
                "partitions": t.partitions.iter().map(|(i, p)| json!({
                    "partition": i, "replicas": p.replicas, "isr": p.isr, "leader": p.leader,
                    "leader_epoch": p.leader_epoch, "partition_epoch": p.partition_epoch,
                    "adding_replicas": p.adding_replicas, "removing_replicas": p.removing_replicas,
                    "eligible_leader_replicas": p.eligible_leader_replicas, "last_known_elr": p.last_known_elr,
                    "leader_recovery_state": p.leader_recovery_state,
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "configs": self.configs.iter().map(|((t, n), kv)| json!({
                "resource_type": t, "resource_name": n, "configs": kv,
            })).collect::<Vec<_>>(),
            "next_producer_id": self.next_producer_id,
        })
    }
}

/// Kafka's `PartitionRegistration.merge`.
fn merge(p: &mut PartitionState, c: &PartitionChange) {
    if let Some(isr) = &c.isr {
        p.isr = isr.clone();
    }
    if c.leader != -2 {
        p.leader = c.leader;
        p.leader_epoch += 1;
    }
    for (field, change) in [
        (&mut p.replicas, &c.replicas),
        (&mut p.removing_replicas, &c.removing_replicas),
        (&mut p.adding_replicas, &c.adding_replicas),
        (&mut p.eligible_leader_replicas, &c.eligible_leader_replicas),
        (&mut p.last_known_elr, &c.last_known_elr),
    ] {
        if let Some(v) = change {
            *field = v.clone();
        }
    }
    if c.leader_recovery_state != -1 {
        p.leader_recovery_state = c.leader_recovery_state;
    }
    p.partition_epoch += 1;
}

fn inconsistent(offset: i64, record: &MetadataRecord, reason: String) -> ClusterError {
    ClusterError::Inconsistent { offset, kind: records::kind_name(record.api_key()), reason }
}

fn unknown_topic(offset: i64, record: &MetadataRecord, id: Uuid) -> ClusterError {
    inconsistent(offset, record, format!("no topic has id {}", kafka_uuid_string(id)))
}

#[cfg(test)]
mod tests {
    use super::super::records::Partition;
    use super::*;

    fn id(n: u8) -> Uuid {
        Uuid::from_bytes([n; 16])
    }

    fn broker(n: i32, epoch: i64) -> MetadataRecord {
        MetadataRecord::RegisterBroker(RegisterBroker {
            broker_id: n,
            is_migrating_zk_broker: false,
            incarnation_id: id(n as u8),
            broker_epoch: epoch,
            endpoints: vec![],
            features: vec![],
            rack: None,
            fenced: true,
            in_controlled_shutdown: false,
            log_dirs: vec![],
            cordoned_log_dirs: None,
        })
    }

    fn partition(topic: Uuid, p: i32, replicas: &[i32]) -> MetadataRecord {
        MetadataRecord::Partition(Partition::new(topic, p, replicas.to_vec()))
    }

    fn replay(records: &[MetadataRecord]) -> Result<MetadataImage, ClusterError> {
        let mut image = MetadataImage::default();
        for (i, r) in records.iter().enumerate() {
            image.apply(i as i64, r)?;
        }
        Ok(image)
    }

    #[test]
    fn brokers_register_unfence_and_fence_by_their_current_epoch() {
        let mut image = replay(&[broker(1, 10), MetadataRecord::UnfenceBroker { id: 1, epoch: 10 }]).unwrap();
        assert!(!image.brokers[&1].fenced);
        let err = image.apply(2, &MetadataRecord::FenceBroker { id: 1, epoch: 9 }).unwrap_err().to_string();
        assert!(err.contains("offset 2") && err.contains("FenceBrokerRecord") && err.contains("epoch 10, not 9"), "{err}");
        assert!(!image.brokers[&1].fenced, "a refused record changes nothing");
        // A restarted broker registers again with a new epoch, fenced until caught up.
        image.apply(3, &broker(1, 12)).unwrap();
        assert!(image.brokers[&1].fenced && image.brokers[&1].epoch == 12);
        let change = BrokerRegistrationChange {
            broker_id: 1,
            broker_epoch: 12,
            fenced: -1,
            in_controlled_shutdown: 1,
            log_dirs: vec![],
            cordoned_log_dirs: None,
        };
        image.apply(4, &MetadataRecord::BrokerRegistrationChange(change)).unwrap();
        assert!(!image.brokers[&1].fenced && image.brokers[&1].in_controlled_shutdown);
        image.apply(5, &MetadataRecord::UnregisterBroker { broker_id: 1, broker_epoch: 12 }).unwrap();
        assert!(image.brokers.is_empty());
    }

    #[test]
    fn a_partition_change_bumps_epochs_as_kafka_merges_it() {
        let t = id(7);
        let mut image = replay(&[MetadataRecord::Topic { name: "orders".into(), topic_id: t }, partition(t, 0, &[1, 2, 3])]).unwrap();
        let mut shrink = PartitionChange::new(t, 0);
        shrink.isr = Some(vec![1, 2]);
        image.apply(2, &MetadataRecord::PartitionChange(shrink)).unwrap();
        let p = &image.topic("orders").unwrap().partitions[&0];
        assert_eq!((p.isr.clone(), p.leader, p.leader_epoch, p.partition_epoch), (vec![1, 2], 1, 0, 1));
        let mut failover = PartitionChange::new(t, 0);
        failover.leader = 2;
        failover.isr = Some(vec![2]);
        image.apply(3, &MetadataRecord::PartitionChange(failover)).unwrap();
        let p = &image.topic("orders").unwrap().partitions[&0];
        assert_eq!((p.isr.clone(), p.leader, p.leader_epoch, p.partition_epoch), (vec![2], 2, 1, 2));
        assert_eq!(p.replicas, vec![1, 2, 3]);
    }

    #[test]
    fn records_about_unknown_topics_or_partitions_are_refused_with_their_offset() {
        let err = replay(&[partition(id(1), 0, &[1])]).unwrap_err().to_string();
        assert!(err.contains("offset 0") && err.contains("PartitionRecord") && err.contains("no topic has id"), "{err}");
        let t = id(2);
        let mut c = PartitionChange::new(t, 5);
        c.leader = 1;
        let err = replay(&[MetadataRecord::Topic { name: "a".into(), topic_id: t }, MetadataRecord::PartitionChange(c)])
            .unwrap_err()
            .to_string();
        assert!(err.contains("offset 1") && err.contains("no partition 5"), "{err}");
        let err = replay(&[
            MetadataRecord::Topic { name: "a".into(), topic_id: t },
            MetadataRecord::Topic { name: "a".into(), topic_id: id(3) },
        ])
        .unwrap_err()
        .to_string();
        assert!(err.contains("exists with id"), "{err}");
    }

    #[test]
    fn removing_a_topic_drops_its_partitions_and_configs() {
        let t = id(4);
        let topic_config = |v: Option<&str>| MetadataRecord::Config {
            resource_type: TOPIC_RESOURCE,
            resource_name: "a".into(),
            name: "retention.ms".into(),
            value: v.map(String::from),
        };
        let mut image = replay(&[
            MetadataRecord::Topic { name: "a".into(), topic_id: t },
            partition(t, 0, &[1]),
            topic_config(Some("100")),
            MetadataRecord::Config { resource_type: BROKER_RESOURCE, resource_name: "".into(), name: "x".into(), value: Some("1".into()) },
        ])
        .unwrap();
        assert_eq!(image.configs[&(TOPIC_RESOURCE, "a".to_string())]["retention.ms"], "100");
        image.apply(4, &topic_config(None)).unwrap();
        assert!(!image.configs.contains_key(&(TOPIC_RESOURCE, "a".to_string())));
        image.apply(5, &topic_config(Some("5"))).unwrap();
        image.apply(6, &MetadataRecord::RemoveTopic { topic_id: t }).unwrap();
        assert!(image.topics.is_empty() && image.topic("a").is_none());
        assert_eq!(image.configs.len(), 1, "only the broker default is left: {:?}", image.configs);
    }

    #[test]
    fn a_metadata_transaction_applies_at_its_end_or_not_at_all() {
        let t = id(5);
        let mut image = MetadataImage::default();
        image.apply(0, &MetadataRecord::BeginTransaction { name: None }).unwrap();
        image.apply(1, &MetadataRecord::Topic { name: "a".into(), topic_id: t }).unwrap();
        assert!(image.topics.is_empty(), "not applied before the end");
        image.apply(2, &MetadataRecord::EndTransaction).unwrap();
        assert!(image.topic("a").is_some());
        image.apply(3, &MetadataRecord::BeginTransaction { name: None }).unwrap();
        image.apply(4, &MetadataRecord::RemoveTopic { topic_id: t }).unwrap();
        image.apply(5, &MetadataRecord::AbortTransaction { reason: None }).unwrap();
        assert!(image.topic("a").is_some(), "an aborted transaction changes nothing");
        assert_eq!(image.offset, 5);
        let err = image.apply(5, &MetadataRecord::NoOp).unwrap_err().to_string();
        assert!(err.contains("not after the last applied"), "{err}");
    }

    #[test]
    fn the_records_of_an_image_rebuild_the_same_image() {
        let t = id(6);
        let mut change = PartitionChange::new(t, 1);
        change.leader = 2;
        change.isr = Some(vec![2]);
        change.eligible_leader_replicas = Some(vec![1]);
        let image = replay(&[
            MetadataRecord::FeatureLevel { name: "metadata.version".into(), feature_level: 27 },
            broker(1, 3),
            broker(2, 4),
            MetadataRecord::UnfenceBroker { id: 2, epoch: 4 },
            MetadataRecord::Topic { name: "a".into(), topic_id: t },
            partition(t, 0, &[1, 2]),
            partition(t, 1, &[2, 1]),
            MetadataRecord::PartitionChange(change),
            MetadataRecord::Config { resource_type: TOPIC_RESOURCE, resource_name: "a".into(), name: "k".into(), value: Some("v".into()) },
            MetadataRecord::ProducerIds { broker_id: 1, broker_epoch: 3, next_producer_id: 2000 },
        ])
        .unwrap();
        let mut rebuilt = MetadataImage::default();
        for (i, r) in image.to_records().iter().enumerate() {
            let bytes = records::encode(r);
            rebuilt.apply(i as i64, &records::decode(&bytes, i as i64).unwrap().record).unwrap();
        }
        rebuilt.offset = image.offset;
        assert_eq!(rebuilt, image);
    }

    #[test]
    fn feature_levels_and_producer_id_blocks_follow_the_log() {
        let mut image = replay(&[
            MetadataRecord::FeatureLevel { name: "metadata.version".into(), feature_level: 27 },
            MetadataRecord::FeatureLevel { name: "group.version".into(), feature_level: 1 },
            MetadataRecord::FeatureLevel { name: "group.version".into(), feature_level: 0 },
            MetadataRecord::ProducerIds { broker_id: 1, broker_epoch: 5, next_producer_id: 1000 },
        ])
        .unwrap();
        assert_eq!(image.features, BTreeMap::from([("metadata.version".to_string(), 27)]));
        assert_eq!(image.next_producer_id, 1000);
        let back = MetadataRecord::ProducerIds { broker_id: 1, broker_epoch: 5, next_producer_id: 10 };
        assert!(image.apply(4, &back).is_err(), "producer id blocks are never handed out twice");
    }
}
