//! The active controller's decisions, as a pure core: given the metadata image, a request or the
//! passage of time, which metadata records to propose. No I/O and no clock of its own (the
//! caller passes `now_ms`), so every rule is tested table-style and can be driven by a seeded
//! simulation; the driver proposes the records through [`super::quorum::MetadataQuorum`].
//!
//! The rules follow Kafka's controller (`ClusterControlManager`, `BrokerHeartbeatManager`,
//! `ReplicationControlManager`):
//! - **Registration**: a broker registers with an incarnation id and gets a new broker epoch
//!   (the offset of its registration record) and starts fenced. A registration for an id whose
//!   current holder has another incarnation and a live session is refused
//!   (DUPLICATE_BROKER_REGISTRATION): two processes with the same `node.id`.
//! - **Heartbeats**: a fenced broker is unfenced once its metadata offset has reached its own
//!   registration record (it has caught up). A broker that has not heartbeated within
//!   `broker.session.timeout.ms` is fenced and leaves every ISR it is not the last member of;
//!   partitions it led elect another leader from the ISR, or have none. Time the controller
//!   itself did not run (its process paused or starved for longer than [`STALL_MS`] between
//!   two session checks) does not count against anyone: every session restarts then, as on a
//!   new active controller, rather than every broker being fenced at once for the controller's
//!   own silence (during which their heartbeats could not be answered either).
//! - **Controlled shutdown**: a broker asking to shut down is marked so, gives up every
//!   leadership it holds (another ISR member leads, leaving it out of the ISR) and is told it may
//!   stop once it leads nothing.
//! - **Topics**: CreateTopics is checked (name, existence, counts, replication factor against
//!   the unfenced brokers, explicit assignments) before any record is made; replicas are placed
//!   by [`super::placement`].
//! - **ISR changes** (AlterPartition): only from the partition's leader, in its broker epoch,
//!   leader epoch and partition epoch (compare-and-set); new members eligible and in the broker
//!   epoch the leader saw them fetch in (KIP-903).
//! - **Preferred leaders**: a partition whose first replica is in the ISR, unfenced and not
//!   shutting down, but not leading, is given back to it: on ElectLeaders, and periodically
//!   where a broker's share of such partitions is over `leader.imbalance.per.broker.percentage`
//!   (`auto.leader.rebalance.enable`).
//! - **Unclean elections**: only where `unclean.leader.election.enable` holds for the topic (or
//!   on ElectLeaders with the UNCLEAN type): a partition without a leader and without an
//!   eligible ISR member gets its first eligible replica as leader, alone in the ISR, in leader
//!   recovery state RECOVERING (KIP-704) until that leader's AlterPartition says RECOVERED;
//!   while RECOVERING its ISR does not grow. What the old ISR had and it lacks is lost: the
//!   trade the config makes.
//!
//! - **Eligible leader replicas** (KIP-966, where `eligible.leader.replicas.version` is 1, as a
//!   new cluster gets it): every leader and ISR change goes through
//!   [`super::partition_change::Builder`], whose module docs give the rules: below
//!   `min.insync.replicas` the members an ISR loses become eligible leader replicas, the ISR
//!   may become empty, and a returning eligible replica leads. A broker that registers after
//!   an unclean shutdown (its previous broker epoch is not the one registered: no clean
//!   shutdown recorded it) leaves every ISR and ELR it is in, as Kafka's
//!   `handleBrokerUncleanShutdown` does. Without the feature the last ISR member stays in the
//!   ISR, leaderless, as in Kafka before KIP-966.
//!
//! # Invariants
//! - Every record list returned applies to the image it was computed from (tested).
//! - A leader is always an unfenced ISR member not in controlled shutdown, or -1 (led from the
//!   ELR, it is the ISR's only member).

use std::collections::BTreeMap;

use uuid::Uuid;

use super::image::{MetadataImage, BROKER_RESOURCE, TOPIC_RESOURCE};
use super::partition_change::Builder;
use super::placement::{self, PlacementBroker, Start};
use super::records::{
    BrokerRegistrationChange, Endpoint, MetadataRecord, Partition, PartitionChange, RegisterBroker, SupportedFeature,
    versioned, VersionedRecord,
};

/// A refusal, with the Kafka error code the client gets and its message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} (error code {code})")]
pub struct Refusal {
    pub code: i16,
    pub message: String,
}

fn refuse(code: i16, message: impl Into<String>) -> Refusal {
    Refusal { code, message: message.into() }
}

/// Kafka error codes the controller answers with.
pub mod codes {
    pub const INVALID_PARTITIONS: i16 = 37;
    pub const INVALID_REPLICATION_FACTOR: i16 = 38;
    pub const INVALID_REPLICA_ASSIGNMENT: i16 = 39;
    pub const TOPIC_ALREADY_EXISTS: i16 = 36;
    pub const INVALID_TOPIC_EXCEPTION: i16 = 17;
    pub const STALE_BROKER_EPOCH: i16 = 77;
    pub const DUPLICATE_BROKER_REGISTRATION: i16 = 101;
    pub const BROKER_ID_NOT_REGISTERED: i16 = 102;
    pub const REQUEST_TIMED_OUT: i16 = 7;
    pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
    pub const INVALID_CONFIG: i16 = 40;
    pub const NOT_LEADER_OR_FOLLOWER: i16 = 6;
    pub const NOT_CONTROLLER: i16 = 41;
    pub const INVALID_REQUEST: i16 = 42;
    pub const INCONSISTENT_CLUSTER_ID: i16 = 104;
    pub const UNSUPPORTED_ENDPOINT_TYPE: i16 = 115;
    pub const MISMATCHED_ENDPOINT_TYPE: i16 = 114;
    pub const UNKNOWN_SERVER_ERROR: i16 = -1;
    pub const UNKNOWN_TOPIC_ID: i16 = 100;
    pub const FENCED_LEADER_EPOCH: i16 = 74;
    pub const INVALID_UPDATE_VERSION: i16 = 95;
    pub const INELIGIBLE_REPLICA: i16 = 107;
    pub const ELECTION_NOT_NEEDED: i16 = 84;
    pub const PREFERRED_LEADER_NOT_AVAILABLE: i16 = 80;
    pub const ELIGIBLE_LEADERS_NOT_AVAILABLE: i16 = 83;
    pub const NO_REASSIGNMENT_IN_PROGRESS: i16 = 85;
}

/// Producer ids per AllocateProducerIds answer (Kafka's `ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE`).
pub const PRODUCER_ID_BLOCK: i64 = 1000;

/// KIP-704's leader recovery states (PartitionRecord / PartitionChangeRecord, AlterPartition).
pub const RECOVERED: i8 = 0;
pub const RECOVERING: i8 = 1;

/// A broker's registration request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    pub broker_id: i32,
    pub incarnation_id: Uuid,
    pub endpoints: Vec<Endpoint>,
    pub features: Vec<SupportedFeature>,
    pub rack: Option<String>,
    /// The broker epoch this broker had when it last shut down cleanly; -1 if none is known
    /// (a first start, or a crash).
    pub previous_broker_epoch: i64,
}

/// A broker's heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heartbeat {
    pub broker_id: i32,
    pub broker_epoch: i64,
    /// The metadata offset the broker has applied.
    pub metadata_offset: i64,
    pub want_shutdown: bool,
}

/// What a heartbeat is answered with once its records are committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeartbeatReply {
    pub is_fenced: bool,
    pub in_controlled_shutdown: bool,
    /// The broker leads nothing any more and may exit.
    pub should_shut_down: bool,
}

/// The active controller's volatile state: when each broker last heartbeated. A new active
/// controller starts with every session fresh (as Kafka's does), so nobody is fenced for the
/// time the controllers took to fail over.
#[derive(Debug, Default, Clone)]
pub struct Controller {
    pub session_timeout_ms: i64,
    last_heartbeat_ms: BTreeMap<i32, i64>,
    /// When [`Controller::expire_sessions`] last ran.
    last_session_check_ms: Option<i64>,
    /// `min.insync.replicas` from the controller's own configuration, for topics and clusters
    /// that set none.
    pub min_isr_default: i32,
}

/// A gap this long between two session checks (the driver checks every 250 ms) means the
/// controller did not run: its process was paused or starved.
pub const STALL_MS: i64 = 2_000;

impl Controller {
    pub fn new(session_timeout_ms: i64) -> Controller {
        Controller { session_timeout_ms, last_heartbeat_ms: BTreeMap::new(), last_session_check_ms: None, min_isr_default: 1 }
    }

    pub fn with_min_isr_default(mut self, min_isr: i32) -> Controller {
        self.min_isr_default = min_isr;
        self
    }

    fn policy<'a>(&self, image: &'a MetadataImage) -> Policy<'a> {
        Policy { image, elr: elr_enabled(image), min_isr_default: self.min_isr_default }
    }

    fn has_live_session(&self, broker: i32, now_ms: i64) -> bool {
        self.last_heartbeat_ms.get(&broker).is_some_and(|t| now_ms - t < self.session_timeout_ms)
    }

    /// Records for a broker registration; the new epoch is the registration record's offset.
    pub fn register(
        &mut self,
        image: &MetadataImage,
        req: &Registration,
        now_ms: i64,
    ) -> Result<(Vec<VersionedRecord>, i64), Refusal> {
        if let Some(existing) = image.brokers.get(&req.broker_id) {
            if existing.incarnation_id != req.incarnation_id && self.has_live_session(req.broker_id, now_ms) {
                return Err(refuse(
                    codes::DUPLICATE_BROKER_REGISTRATION,
                    format!(
                        "Another broker is registered with that broker id: broker {} (epoch {}) is alive; a second process \
                         with node.id={} was refused",
                        req.broker_id, existing.epoch, req.broker_id
                    ),
                ));
            }
        }
        let unclean = image.brokers.get(&req.broker_id).filter(|b| b.epoch != req.previous_broker_epoch).map(|b| b.epoch);
        let epoch = image.offset + 1;
        self.last_heartbeat_ms.insert(req.broker_id, now_ms);
        let record = MetadataRecord::RegisterBroker(RegisterBroker {
            broker_id: req.broker_id,
            is_migrating_zk_broker: false,
            incarnation_id: req.incarnation_id,
            broker_epoch: epoch,
            endpoints: req.endpoints.clone(),
            features: req.features.clone(),
            rack: req.rack.clone(),
            fenced: true,
            in_controlled_shutdown: false,
            log_dirs: Vec::new(),
            cordoned_log_dirs: None,
        });
        let mut records = vec![versioned(record)];
        let policy = self.policy(image);
        if let (Some(registered), true) = (unclean, policy.elr) {
            let out = leave_after_unclean_shutdown(&policy, req.broker_id);
            if !out.is_empty() {
                tracing::info!(
                    broker = req.broker_id,
                    registered,
                    previous = req.previous_broker_epoch,
                    partitions = out.len(),
                    "broker registers after an unclean shutdown: it leaves the ISRs and eligible leader replicas it was in"
                );
            }
            records.extend(out);
        }
        Ok((records, epoch))
    }

    /// Records for a heartbeat, and the reply as it will stand once they are applied.
    pub fn heartbeat(
        &mut self,
        image: &MetadataImage,
        hb: &Heartbeat,
        now_ms: i64,
    ) -> Result<(Vec<VersionedRecord>, HeartbeatReply), Refusal> {
        let broker = image.brokers.get(&hb.broker_id).ok_or_else(|| {
            refuse(codes::BROKER_ID_NOT_REGISTERED, format!("Broker {} is not registered.", hb.broker_id))
        })?;
        if broker.epoch != hb.broker_epoch {
            return Err(refuse(
                codes::STALE_BROKER_EPOCH,
                format!("Expected broker epoch {}, but got broker epoch {}", broker.epoch, hb.broker_epoch),
            ));
        }
        self.last_heartbeat_ms.insert(hb.broker_id, now_ms);
        let mut records = Vec::new();
        let mut fenced = broker.fenced;
        let mut shutting_down = broker.in_controlled_shutdown;
        let mut change =
            BrokerRegistrationChange { broker_id: hb.broker_id, broker_epoch: broker.epoch, fenced: 0, in_controlled_shutdown: 0, log_dirs: vec![], cordoned_log_dirs: None };
        if fenced && !hb.want_shutdown && hb.metadata_offset >= broker.epoch {
            change.fenced = -1;
            fenced = false;
        }
        if hb.want_shutdown && !shutting_down && !fenced {
            change.in_controlled_shutdown = 1;
            shutting_down = true;
        }
        let unfenced = change.fenced == -1;
        if change.fenced != 0 || change.in_controlled_shutdown != 0 {
            records.push(versioned(MetadataRecord::BrokerRegistrationChange(change)));
        }
        if unfenced {
            // Back, it leads the partitions left leaderless with it in their ISR (a last
            // replica that was fenced or shut down), as Kafka's handleBrokerUnfenced does.
            records.extend(lead_leaderless(&self.policy(image), hb.broker_id));
        }
        if shutting_down || (hb.want_shutdown && fenced) {
            records.extend(move_leaderships_away(&self.policy(image), hb.broker_id, |id| id != hb.broker_id && eligible(image, id)));
        }
        // Once these records apply, the broker leads nothing: it may exit.
        let reply = HeartbeatReply { is_fenced: fenced, in_controlled_shutdown: shutting_down, should_shut_down: hb.want_shutdown };
        Ok((records, reply))
    }

    /// Fences every unfenced broker whose session expired; returns the records (empty when none).
    pub fn expire_sessions(&mut self, image: &MetadataImage, now_ms: i64) -> Vec<VersionedRecord> {
        if let Some(stalled_ms) = self.last_session_check_ms.map(|last| now_ms - last).filter(|gap| *gap >= STALL_MS) {
            tracing::warn!(
                stalled_ms,
                brokers = self.last_heartbeat_ms.len(),
                "the active controller did not run for a while (process paused or starved); every broker session restarts now"
            );
            self.last_heartbeat_ms.values_mut().for_each(|t| *t = (*t).max(now_ms));
        }
        self.last_session_check_ms = Some(now_ms);
        let expired: Vec<i32> = image
            .brokers
            .values()
            .filter(|b| !b.fenced)
            .filter(|b| self.last_heartbeat_ms.get(&b.id).is_none_or(|t| now_ms - t >= self.session_timeout_ms))
            .map(|b| b.id)
            .collect();
        let mut records = Vec::new();
        // Brokers expiring together are fenced one after the other, each against the image as
        // the previous one's records leave it: two changes computed from the same image would
        // each keep the other broker (a leader handed to a broker fenced in the same round, an
        // ISR that gets a fenced member back).
        let mut scratch: Option<MetadataImage> = None;
        for id in expired {
            // A new active controller learns of brokers from the image: their sessions start now.
            if let std::collections::btree_map::Entry::Vacant(v) = self.last_heartbeat_ms.entry(id) {
                v.insert(now_ms);
                continue;
            }
            tracing::info!(broker = id, "broker session expired; fencing it");
            let current = scratch.as_ref().unwrap_or(image);
            let epoch = current.brokers[&id].epoch;
            let mut fence = vec![versioned(MetadataRecord::BrokerRegistrationChange(BrokerRegistrationChange {
                broker_id: id,
                broker_epoch: epoch,
                fenced: 1,
                in_controlled_shutdown: 0,
                log_dirs: vec![],
                cordoned_log_dirs: None,
            }))];
            let others_eligible = |b: i32| b != id && eligible(current, b);
            let policy = Policy { image: current, elr: elr_enabled(current), min_isr_default: self.min_isr_default };
            fence.extend(move_leaderships_away(&policy, id, others_eligible));
            let next = scratch.get_or_insert_with(|| image.clone());
            for r in &fence {
                let offset = next.offset + 1;
                if let Err(e) = next.apply(offset, &r.record) {
                    // Records made from this image always apply to it; if one did not, what is
                    // proposed is what the image would refuse too: propose nothing this round.
                    tracing::error!(broker = id, error = %e, "fencing records do not apply to the image they were made from");
                    return Vec::new();
                }
            }
            records.extend(fence);
        }
        records
    }

    /// Records for CreateTopics of one topic; `assignments` (partition -> replicas) replaces
    /// placement when given.
    #[allow(clippy::too_many_arguments)]
    pub fn create_topic(
        &self,
        image: &MetadataImage,
        name: &str,
        partitions: i32,
        replication_factor: i16,
        assignments: &BTreeMap<i32, Vec<i32>>,
        configs: &BTreeMap<String, String>,
        start: Start,
    ) -> Result<Vec<VersionedRecord>, Refusal> {
        if let Err(why) = crate::metadata::validate_topic_name(name) {
            return Err(refuse(codes::INVALID_TOPIC_EXCEPTION, why));
        }
        if image.topic(name).is_some() {
            return Err(refuse(codes::TOPIC_ALREADY_EXISTS, format!("Topic '{name}' already exists.")));
        }
        let replicas: Vec<Vec<i32>> = if assignments.is_empty() {
            if partitions <= 0 {
                return Err(refuse(codes::INVALID_PARTITIONS, "Number of partitions was set to an invalid non-positive value."));
            }
            placement::place(&placement_brokers(image), 0, partitions as usize, replication_factor, start)
                .map_err(|e| refuse(codes::INVALID_REPLICATION_FACTOR, e.to_string()))?
        } else {
            let expected: Vec<i32> = (0..assignments.len() as i32).collect();
            if assignments.keys().copied().collect::<Vec<_>>() != expected {
                return Err(refuse(codes::INVALID_REPLICA_ASSIGNMENT, "Partitions must be numbered from 0 without gaps."));
            }
            let width = assignments[&0].len();
            for (p, r) in assignments {
                let mut distinct = r.clone();
                distinct.sort_unstable();
                distinct.dedup();
                if r.is_empty() || distinct.len() != r.len() || r.len() != width {
                    return Err(refuse(
                        codes::INVALID_REPLICA_ASSIGNMENT,
                        format!("Partition {p} has an invalid replica assignment {r:?}: replicas must be distinct and as many for every partition."),
                    ));
                }
                if let Some(b) = r.iter().find(|b| !image.brokers.contains_key(b)) {
                    return Err(refuse(
                        codes::INVALID_REPLICA_ASSIGNMENT,
                        format!("The manual partition assignment includes broker {b}, but no such broker is registered."),
                    ));
                }
            }
            assignments.values().cloned().collect()
        };
        let topic_id = crate::metadata::random_kafka_uuid();
        let mut out = vec![versioned(MetadataRecord::Topic { name: name.to_string(), topic_id })];
        out.extend(new_partitions(image, topic_id, 0, replicas));
        for (k, v) in configs {
            out.push(versioned(MetadataRecord::Config {
                resource_type: TOPIC_RESOURCE,
                resource_name: name.to_string(),
                name: k.clone(),
                value: Some(v.clone()),
            }));
        }
        Ok(out)
    }

    /// Records for CreatePartitions: grow `name` to `count` partitions, placed as Kafka places
    /// them (replication factor of partition 0), or at `assignments` (one replica list per new
    /// partition) when given.
    pub fn create_partitions(
        &self,
        image: &MetadataImage,
        name: &str,
        count: i32,
        assignments: &[Vec<i32>],
        start: Start,
    ) -> Result<Vec<VersionedRecord>, Refusal> {
        let topic = image
            .topic(name)
            .ok_or_else(|| refuse(codes::UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition."))?;
        let current = topic.partitions.len() as i32;
        if count <= current {
            return Err(refuse(
                codes::INVALID_PARTITIONS,
                format!("Topic currently has {current} partitions, which is higher than the requested {count}."),
            ));
        }
        let rf = topic.partitions.get(&0).map(|p| p.replicas.len()).unwrap_or(1) as i16;
        let new = (count - current) as usize;
        let replicas: Vec<Vec<i32>> = if assignments.is_empty() {
            placement::place(&placement_brokers(image), current as usize, new, rf, start).map_err(|e| refuse(codes::INVALID_REPLICATION_FACTOR, e.to_string()))?
        } else {
            if assignments.len() != new {
                return Err(refuse(
                    codes::INVALID_REPLICA_ASSIGNMENT,
                    format!("Increasing the number of partitions by {new} but {} assignments provided.", assignments.len()),
                ));
            }
            if let Some(b) = assignments.iter().flatten().find(|b| !image.brokers.contains_key(b)) {
                return Err(refuse(
                    codes::INVALID_REPLICA_ASSIGNMENT,
                    format!("The manual partition assignment includes broker {b}, but no such broker is registered."),
                ));
            }
            assignments.to_vec()
        };
        Ok(new_partitions(image, topic.id, current, replicas))
    }

    /// Records for config changes of a topic or of a broker entity ("" is the cluster-wide
    /// default, else a broker id): `(key, Some(value))` sets, `(key, None)` deletes. Values are
    /// checked again here, with the rules the broker checked them with.
    pub fn alter_configs(
        &self,
        image: &MetadataImage,
        resource_type: i8,
        name: &str,
        changes: &[(String, Option<String>)],
    ) -> Result<Vec<VersionedRecord>, Refusal> {
        use crate::config::topic;
        match resource_type {
            TOPIC_RESOURCE if image.topic(name).is_none() => {
                return Err(refuse(codes::UNKNOWN_TOPIC_OR_PARTITION, format!("Topic '{name}' does not exist.")));
            }
            TOPIC_RESOURCE => {}
            BROKER_RESOURCE if name.is_empty() || name.parse::<i32>().is_ok() => {}
            BROKER_RESOURCE => return Err(refuse(codes::INVALID_REQUEST, format!("Unexpected broker id {name}"))),
            other => return Err(refuse(codes::INVALID_REQUEST, format!("Unsupported resource type {other}"))),
        }
        let mut out = Vec::with_capacity(changes.len());
        for (key, value) in changes {
            let checked = match (resource_type, value) {
                (TOPIC_RESOURCE, _) if topic::lookup(key).is_none() => Err(format!("Unknown topic config name: {key}")),
                (TOPIC_RESOURCE, Some(v)) => topic::validate(key, v).map_err(|e| e.to_string()),
                (_, _) if resource_type == BROKER_RESOURCE && !topic::is_dynamic_broker_key(key) => {
                    Err(format!("Cannot update these configs dynamically: [\"{key}\"]"))
                }
                (_, Some(v)) => topic::validate_broker_value(key, v),
                (_, None) => Ok(()),
            };
            checked.map_err(|message| refuse(codes::INVALID_CONFIG, message))?;
            out.push(versioned(MetadataRecord::Config { resource_type, resource_name: name.to_string(), name: key.clone(), value: value.clone() }));
        }
        Ok(out)
    }

    /// Records for DeleteTopics of one topic.
    pub fn delete_topic(&self, image: &MetadataImage, name: &str) -> Result<Vec<VersionedRecord>, Refusal> {
        let id = image.topic_ids.get(name).ok_or_else(|| refuse(codes::UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition."))?;
        Ok(vec![versioned(MetadataRecord::RemoveTopic { topic_id: *id })])
    }

    /// AllocateProducerIds: the next block of [`PRODUCER_ID_BLOCK`] producer ids for a broker,
    /// as Kafka's `ProducerIdControlManager` hands them out (only a registered broker with its
    /// current epoch gets one). Returns the record and the block's first id.
    pub fn allocate_producer_ids(&self, image: &MetadataImage, broker_id: i32, broker_epoch: i64) -> Result<(Vec<VersionedRecord>, i64), Refusal> {
        match image.brokers.get(&broker_id) {
            Some(b) if b.epoch == broker_epoch => {}
            Some(b) => {
                return Err(refuse(codes::STALE_BROKER_EPOCH, format!("Expected broker epoch {}, but got broker epoch {broker_epoch}", b.epoch)))
            }
            None => return Err(refuse(codes::STALE_BROKER_EPOCH, format!("No broker with id {broker_id} is registered."))),
        }
        let start = image.next_producer_id;
        let next = start.checked_add(PRODUCER_ID_BLOCK).ok_or_else(|| refuse(codes::UNKNOWN_SERVER_ERROR, "The producer id space is exhausted."))?;
        Ok((vec![versioned(MetadataRecord::ProducerIds { broker_id, broker_epoch, next_producer_id: next })], start))
    }

    /// AlterPartition from a partition leader: a new ISR, as Kafka's
    /// `ReplicationControlManager` checks it. The request must come from the partition's current
    /// leader, with its broker epoch, in the current leader epoch and against the current partition
    /// epoch (compare-and-set: a change made against an older state is refused with
    /// INVALID_UPDATE_VERSION); the new ISR holds the leader and only replicas that may join
    /// (registered, unfenced, not shutting down, and, where the leader says which broker epoch
    /// it saw, still in that epoch: KIP-903, a broker restarted with an empty disk is not the
    /// one that fetched). Returns the records (none when the ISR is already that) or the error
    /// code for this partition.
    pub fn alter_partition(&self, image: &MetadataImage, req: &AlterIsr) -> Result<Vec<VersionedRecord>, i16> {
        match image.brokers.get(&req.broker_id) {
            Some(b) if b.epoch == req.broker_epoch => {}
            _ => return Err(codes::STALE_BROKER_EPOCH),
        }
        let topic = image.topics.values().find(|t| t.id == req.topic_id).ok_or(codes::UNKNOWN_TOPIC_ID)?;
        let p = topic.partitions.get(&req.partition).ok_or(codes::UNKNOWN_TOPIC_OR_PARTITION)?;
        if req.leader_epoch != p.leader_epoch {
            return Err(codes::FENCED_LEADER_EPOCH);
        }
        if p.leader != req.broker_id {
            return Err(codes::INVALID_REQUEST);
        }
        if req.partition_epoch != p.partition_epoch {
            return Err(codes::INVALID_UPDATE_VERSION);
        }
        let mut isr: Vec<i32> = Vec::with_capacity(req.new_isr.len());
        for &(member, epoch) in &req.new_isr {
            if !p.replicas.contains(&member) || isr.contains(&member) {
                return Err(codes::INVALID_REQUEST);
            }
            if member != req.broker_id {
                let known = image.brokers.get(&member);
                let stale = epoch >= 0 && known.is_some_and(|b| b.epoch != epoch);
                if !eligible(image, member) || stale {
                    return Err(codes::INELIGIBLE_REPLICA);
                }
            }
            isr.push(member);
        }
        if !isr.contains(&req.broker_id) {
            return Err(codes::INVALID_REQUEST);
        }
        // KIP-704, as Kafka checks it: a recovered partition does not go back to RECOVERING,
        // and a recovering leader's ISR stays itself alone.
        if req.leader_recovery_state == RECOVERING && (p.leader_recovery_state == RECOVERED || isr.len() > 1) {
            return Err(codes::INVALID_REQUEST);
        }
        let recovered = req.leader_recovery_state == RECOVERED && p.leader_recovery_state == RECOVERING;
        let policy = self.policy(image);
        let acceptable = |r: i32| r == req.broker_id || eligible(image, r);
        let change = Builder::new(p, topic.id, req.partition, &acceptable, policy.elr, policy.min_isr(&topic.name))
            .isr(isr)
            .recovery_state(if recovered { RECOVERED } else { p.leader_recovery_state })
            .build();
        Ok(change.map(|c| vec![versioned(MetadataRecord::PartitionChange(c))]).unwrap_or_default())
    }

    /// AlterPartitionReassignments for one partition, as Kafka's `ReplicationControlManager`
    /// takes it: `target` starts (or replaces) a reassignment to those replicas; `None` cancels
    /// the one in progress. The target must be non-empty, name each broker once and only
    /// registered brokers, and keep the replication factor unless `allow_rf_change` (KIP-860).
    /// The change may finish at once (every target replica already in the ISR); otherwise it
    /// finishes in the AlterPartition that brings the last one in ([`Builder`]). Returns the
    /// records (none when nothing changes).
    pub fn reassign(
        &self,
        image: &MetadataImage,
        topic: &str,
        partition: i32,
        target: Option<&[i32]>,
        allow_rf_change: bool,
    ) -> Result<Vec<VersionedRecord>, Refusal> {
        let t = image.topic(topic).ok_or_else(|| refuse(codes::UNKNOWN_TOPIC_OR_PARTITION, format!("Unable to find topic {topic}")))?;
        let p = t
            .partitions
            .get(&partition)
            .ok_or_else(|| refuse(codes::UNKNOWN_TOPIC_OR_PARTITION, format!("Unable to find partition {topic}:{partition}.")))?;
        let policy = self.policy(image);
        let acceptable = |r: i32| eligible(image, r);
        let builder = Builder::new(p, t.id, partition, &acceptable, policy.elr, policy.min_isr(topic));
        let change = match target {
            None if p.adding_replicas.is_empty() && p.removing_replicas.is_empty() => {
                return Err(refuse(codes::NO_REASSIGNMENT_IN_PROGRESS, format!("No ongoing reassignment for {topic}-{partition}")));
            }
            None => builder.revert().build(),
            Some(target) => {
                if target.is_empty() {
                    return Err(refuse(codes::INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes an empty replica list."));
                }
                let mut sorted = target.to_vec();
                sorted.sort_unstable();
                for (i, b) in sorted.iter().enumerate() {
                    if !image.brokers.contains_key(b) {
                        return Err(refuse(
                            codes::INVALID_REPLICA_ASSIGNMENT,
                            format!("The manual partition assignment includes broker {b}, but no such broker is registered."),
                        ));
                    }
                    if i > 0 && sorted[i - 1] == *b {
                        return Err(refuse(
                            codes::INVALID_REPLICA_ASSIGNMENT,
                            format!("The manual partition assignment includes the broker {b} more than once."),
                        ));
                    }
                }
                let current = p.replicas.len() - p.removing_replicas.len();
                if !allow_rf_change && target.len() != current {
                    return Err(refuse(
                        codes::INVALID_REPLICATION_FACTOR,
                        format!("The replication factor is changed from {current} to {}", target.len()),
                    ));
                }
                builder.reassign(target).build()
            }
        };
        Ok(change.map(|c| vec![versioned(MetadataRecord::PartitionChange(c))]).unwrap_or_default())
    }

    /// ElectLeaders: for each partition asked for (`None`: every partition), the outcome and the
    /// records. A preferred election (`election_type` 0) gives the partition to its first
    /// replica where that is in the ISR and eligible. An unclean election (1) is for a partition
    /// without a leader: an eligible ISR member if there is one, else the first eligible replica
    /// ([`unclean_change`]), whatever the topic's `unclean.leader.election.enable`, as Kafka's
    /// UNCLEAN election type does. Asked for every partition, only those elected are listed, as
    /// Kafka does.
    pub fn elect_leaders(&self, image: &MetadataImage, election_type: i8, partitions: Option<&[(String, i32)]>) -> (Vec<VersionedRecord>, Vec<Election>) {
        let all: Vec<(String, i32)>;
        let asked = match partitions {
            Some(p) => p,
            None => {
                all = image.topics.values().flat_map(|t| t.partitions.keys().map(move |i| (t.name.clone(), *i))).collect();
                &all
            }
        };
        let mut records = Vec::new();
        let mut out = Vec::new();
        for (name, index) in asked {
            let result = |code: i16, message: String| Election { topic: name.clone(), partition: *index, code, message };
            let Some(topic) = image.topic(name) else {
                out.push(result(codes::UNKNOWN_TOPIC_OR_PARTITION, format!("No such topic as {name}")));
                continue;
            };
            let Some(p) = topic.partitions.get(index) else {
                out.push(result(codes::UNKNOWN_TOPIC_OR_PARTITION, format!("No such partition as {name}-{index}")));
                continue;
            };
            let preferred = p.replicas.first().copied().unwrap_or(-1);
            if election_type == 1 {
                if p.leader >= 0 {
                    out.push(result(codes::ELECTION_NOT_NEEDED, "Leader election not needed for topic partition.".into()));
                } else if let Some(c) = clean_election(&self.policy(image), &topic.name, topic.id, *index, p) {
                    records.push(versioned(MetadataRecord::PartitionChange(c)));
                    out.push(result(0, String::new()));
                } else if let Some(c) = unclean_change(image, topic.id, *index, p) {
                    tracing::warn!(topic = %name, partition = index, leader = c.leader, isr = ?p.isr,
                        "unclean leader election on request: records the old ISR had and the new leader lacks are lost");
                    records.push(versioned(MetadataRecord::PartitionChange(c)));
                    out.push(result(0, String::new()));
                } else {
                    out.push(result(
                        codes::ELIGIBLE_LEADERS_NOT_AVAILABLE,
                        format!("No replica of {name}-{index} is alive to lead it"),
                    ));
                }
            } else if p.leader == preferred {
                out.push(result(codes::ELECTION_NOT_NEEDED, "Leader election not needed for topic partition.".into()));
            } else if p.isr.contains(&preferred) && eligible(image, preferred) {
                let mut c = PartitionChange::new(topic.id, *index);
                c.leader = preferred;
                records.push(versioned(MetadataRecord::PartitionChange(c)));
                out.push(result(0, String::new()));
            } else {
                out.push(result(
                    codes::PREFERRED_LEADER_NOT_AVAILABLE,
                    format!("Failed to elect leader for partition {name}-{index} under strategy PreferredReplicaPartitionLeaderElectionStrategy"),
                ));
            }
        }
        if partitions.is_none() {
            out.retain(|e| e.code == 0);
        }
        (records, out)
    }

    /// Unclean elections where the topic allows them (`enabled`: the topic's
    /// `unclean.leader.election.enable`): every partition without a leader and without an
    /// eligible ISR member that has an eligible replica ([`unclean_change`]).
    pub fn elect_unclean(&self, image: &MetadataImage, enabled: impl Fn(&str) -> bool) -> Vec<VersionedRecord> {
        let mut out = Vec::new();
        for topic in image.topics.values() {
            if !topic.partitions.values().any(|p| p.leader < 0) || !enabled(&topic.name) {
                continue;
            }
            for (i, p) in &topic.partitions {
                if p.leader >= 0 {
                    continue;
                }
                if let Some(c) = clean_election(&self.policy(image), &topic.name, topic.id, *i, p) {
                    out.push(versioned(MetadataRecord::PartitionChange(c)));
                    continue;
                }
                if let Some(c) = unclean_change(image, topic.id, *i, p) {
                    tracing::warn!(topic = %topic.name, partition = i, leader = c.leader, isr = ?p.isr,
                        "unclean leader election (unclean.leader.election.enable): records the old ISR had and the new leader lacks are lost");
                    out.push(versioned(MetadataRecord::PartitionChange(c)));
                }
            }
        }
        out
    }

    /// Records that give each partition back to its preferred (first) replica where it can lead.
    pub fn elect_preferred_leaders(&self, image: &MetadataImage) -> Vec<VersionedRecord> {
        self.rebalance_leaders(image, 0)
    }

    /// `auto.leader.rebalance.enable`'s periodic check, as Kafka's controller makes it: for each
    /// broker, the share of the partitions it is the preferred leader of but does not lead; where
    /// that is over `imbalance_percent`, those partitions go back to it (where it can lead).
    pub fn rebalance_leaders(&self, image: &MetadataImage, imbalance_percent: i64) -> Vec<VersionedRecord> {
        let mut preferred_of: BTreeMap<i32, (usize, usize)> = BTreeMap::new();
        for topic in image.topics.values() {
            for p in topic.partitions.values() {
                let Some(&preferred) = p.replicas.first() else { continue };
                let e = preferred_of.entry(preferred).or_default();
                e.0 += 1;
                if p.leader != preferred {
                    e.1 += 1;
                }
            }
        }
        let imbalanced = |b: i32| preferred_of.get(&b).is_some_and(|&(all, not_led)| not_led * 100 > all * imbalance_percent as usize);
        let mut out = Vec::new();
        for topic in image.topics.values() {
            for (i, p) in &topic.partitions {
                let Some(&preferred) = p.replicas.first() else { continue };
                if p.leader != preferred && imbalanced(preferred) && p.isr.contains(&preferred) && eligible(image, preferred) {
                    let mut c = PartitionChange::new(topic.id, *i);
                    c.leader = preferred;
                    out.push(versioned(MetadataRecord::PartitionChange(c)));
                }
            }
        }
        out
    }
}

/// One partition's outcome of ElectLeaders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Election {
    pub topic: String,
    pub partition: i32,
    /// 0 when elected.
    pub code: i16,
    pub message: String,
}

/// One partition of an AlterPartition request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterIsr {
    pub broker_id: i32,
    pub broker_epoch: i64,
    pub topic_id: Uuid,
    pub partition: i32,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    /// `(broker, broker epoch the leader saw or -1)`.
    pub new_isr: Vec<(i32, i64)>,
    /// [`RECOVERED`], or [`RECOVERING`] from a leader of an unclean election not done yet.
    pub leader_recovery_state: i8,
}

/// The brokers new replicas are placed on: registered, unfenced, not shutting down.
pub fn placement_brokers(image: &MetadataImage) -> Vec<PlacementBroker> {
    image
        .brokers
        .values()
        .filter(|b| eligible(image, b.id))
        .map(|b| PlacementBroker { id: b.id, rack: b.rack.clone() })
        .collect()
}

/// Partition records for new partitions `first..` of a topic with these replica lists. Only live
/// replicas start in the ISR and may lead (an explicit assignment may name a fenced broker); a
/// partition with none of them live keeps its whole replica list as its ISR, leaderless.
fn new_partitions(image: &MetadataImage, topic_id: Uuid, first: i32, replicas: Vec<Vec<i32>>) -> Vec<VersionedRecord> {
    replicas
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            let mut p = Partition::new(topic_id, first + i as i32, r.clone());
            p.isr = r.iter().copied().filter(|b| eligible(image, *b)).collect();
            p.leader = p.isr.first().copied().unwrap_or(-1);
            if p.isr.is_empty() {
                p.isr = r;
            }
            versioned(MetadataRecord::Partition(p))
        })
        .collect()
}

/// An unclean election of `p`: its first eligible replica in replica order leads, alone in the
/// ISR, in leader recovery state RECOVERING (KIP-704). None when no replica is eligible.
fn unclean_change(image: &MetadataImage, topic_id: Uuid, index: i32, p: &super::image::PartitionState) -> Option<PartitionChange> {
    let leader = p.replicas.iter().copied().find(|r| eligible(image, *r))?;
    let mut c = PartitionChange::new(topic_id, index);
    c.leader = leader;
    c.isr = Some(vec![leader]);
    c.leader_recovery_state = RECOVERING;
    // An unclean election voids what the ELR promised.
    if !p.eligible_leader_replicas.is_empty() {
        c.eligible_leader_replicas = Some(Vec::new());
    }
    if !p.last_known_elr.is_empty() {
        c.last_known_elr = Some(Vec::new());
    }
    Some(c)
}

/// A clean election for leaderless `p`: an eligible ISR member, or with the ISR empty an
/// eligible ELR member (or the last known leader); `None` when there is none.
fn clean_election(policy: &Policy, topic: &str, topic_id: Uuid, index: i32, p: &super::image::PartitionState) -> Option<PartitionChange> {
    let image = policy.image;
    let acceptable = |r: i32| eligible(image, r);
    Builder::new(p, topic_id, index, &acceptable, policy.elr, policy.min_isr(topic)).build().filter(|c| c.leader >= 0)
}

/// Whether eligible leader replicas are on: `eligible.leader.replicas.version` at 1 or more.
pub fn elr_enabled(image: &MetadataImage) -> bool {
    image.features.get(ELR_FEATURE).is_some_and(|v| *v >= 1)
}

/// The feature that turns eligible leader replicas on (KIP-966).
pub const ELR_FEATURE: &str = "eligible.leader.replicas.version";

/// What the ISR and leader rules need besides a partition: the image, whether ELR is on and
/// the controller's own `min.insync.replicas`.
struct Policy<'a> {
    image: &'a MetadataImage,
    elr: bool,
    min_isr_default: i32,
}

impl Policy<'_> {
    /// The topic's effective `min.insync.replicas`: its own config, else the cluster-wide
    /// dynamic default, else the controller's.
    fn min_isr(&self, topic: &str) -> i32 {
        const KEY: &str = "min.insync.replicas";
        let get = |resource: i8, name: &str| {
            self.image.configs.get(&(resource, name.to_string())).and_then(|c| c.get(KEY)).and_then(|v| v.trim().parse().ok())
        };
        get(TOPIC_RESOURCE, topic).or_else(|| get(BROKER_RESOURCE, "")).unwrap_or(self.min_isr_default)
    }
}

/// Whether `unclean.leader.election.enable` holds for `topic`: its own config, else the
/// cluster-wide dynamic default, else `static_default` (the controller's server.properties).
pub fn unclean_enabled(image: &MetadataImage, topic: &str, static_default: bool) -> bool {
    const KEY: &str = "unclean.leader.election.enable";
    let get = |resource: i8, name: &str| image.configs.get(&(resource, name.to_string())).and_then(|c| c.get(KEY)).map(|v| v == "true");
    get(TOPIC_RESOURCE, topic).or_else(|| get(BROKER_RESOURCE, "")).unwrap_or(static_default)
}

/// Records electing a leader, now that `broker` is back, for every partition without one: an
/// ISR member (a last replica that was fenced or shut down), or with the ISR empty an ELR
/// member or the last known leader, as Kafka's handleBrokerUnfenced does.
fn lead_leaderless(policy: &Policy, broker: i32) -> Vec<VersionedRecord> {
    let image = policy.image;
    let acceptable = |r: i32| r == broker || eligible(image, r);
    let mut out = Vec::new();
    for topic in image.topics.values() {
        for (i, p) in &topic.partitions {
            let involved = p.isr.contains(&broker) || p.eligible_leader_replicas.contains(&broker) || p.last_known_elr.contains(&broker);
            if p.leader != -1 || !involved {
                continue;
            }
            let change = Builder::new(p, topic.id, *i, &acceptable, policy.elr, policy.min_isr(&topic.name)).build();
            if let Some(c) = change.filter(|c| c.leader >= 0) {
                if c.leader_recovery_state == RECOVERING {
                    tracing::warn!(topic = %topic.name, partition = i, leader = c.leader,
                        "the last known leader leads again with neither ISR nor eligible replicas left (KIP-966): records it lacks are lost");
                }
                out.push(versioned(MetadataRecord::PartitionChange(c)));
            }
        }
    }
    out
}

/// Whether `broker` may lead or join an ISR: registered, unfenced, not shutting down.
fn eligible(image: &MetadataImage, broker: i32) -> bool {
    image.brokers.get(&broker).is_some_and(|b| !b.fenced && !b.in_controlled_shutdown)
}

/// For every partition `broker` leads or is in the ISR of: a change that takes it out of the
/// ISR and, where it leads, hands leadership to the first other ISR member in replica order
/// that `can_lead` (or, with the ISR left empty, an ELR member), or to nobody (the partition
/// goes offline rather than be led by a replica that may lack acknowledged records). Without
/// ELR the last member stays in the ISR.
fn move_leaderships_away(policy: &Policy, broker: i32, can_lead: impl Fn(i32) -> bool) -> Vec<VersionedRecord> {
    let image = policy.image;
    let mut out = Vec::new();
    for topic in image.topics.values() {
        for (i, p) in &topic.partitions {
            if !p.isr.contains(&broker) && p.leader != broker {
                continue;
            }
            let isr: Vec<i32> = p.isr.iter().copied().filter(|b| *b != broker).collect();
            let change = Builder::new(p, topic.id, *i, &can_lead, policy.elr, policy.min_isr(&topic.name)).isr(isr).build();
            out.extend(change.map(|c| versioned(MetadataRecord::PartitionChange(c))));
        }
    }
    out
}

/// For every partition whose ISR or ELR holds `broker`, back from an unclean shutdown: a change
/// that takes it out of both (it may have lost what it acknowledged), electing another leader
/// where it led.
fn leave_after_unclean_shutdown(policy: &Policy, broker: i32) -> Vec<VersionedRecord> {
    let image = policy.image;
    let acceptable = |r: i32| r != broker && eligible(image, r);
    let mut out = Vec::new();
    for topic in image.topics.values() {
        for (i, p) in &topic.partitions {
            if !p.isr.contains(&broker) && !p.eligible_leader_replicas.contains(&broker) {
                continue;
            }
            let isr: Vec<i32> = p.isr.iter().copied().filter(|b| *b != broker).collect();
            let change = Builder::new(p, topic.id, *i, &acceptable, policy.elr, policy.min_isr(&topic.name))
                .isr(isr)
                .unclean_shutdown(vec![broker])
                .build();
            out.extend(change.map(|c| versioned(MetadataRecord::PartitionChange(c))));
        }
    }
    out
}

#[cfg(test)]
#[path = "controller_tests.rs"]
mod tests;
