//! The broker's state and the services API handlers call: topics and their partitions, topic
//! configs, producer ids, advertised endpoints.
//!
//! Owns creating, deleting and growing topics (directories + metadata files) and opening every
//! partition found in the log dirs at startup. It does not own wire formats (api) or bytes on
//! disk (log).
//!
//! # Invariants
//! - `topics` and `by_id` always describe the same set of topics; both change under one write lock.
//! - A `Topic` is immutable once published; config or partition changes publish a new `Arc<Topic>`
//!   sharing the unchanged `Partition`s, so readers never see a half-updated topic.
//! - A partition's directory exists before its topic is published and is removed only after the
//!   topic is unpublished.
//!
//! # Durability of topic creation
//! The partition directories are the list of topics (see [`crate::metadata`]), and
//! [`Broker::open`] rebuilds a topic from them: its partition count is the highest partition
//! directory found plus one (missing lower ones are recreated empty), and its id comes from any
//! readable `partition.metadata`. So a new topic (or a grown one) is durable once its *highest*
//! partition's directory and `partition.metadata` are on disk. `create_topic` and
//! `create_partitions` therefore create that partition first and fsync its file, its directory
//! and the log dir (three fsyncs per request, however many partitions), and create every other
//! new partition afterwards without any fsync. A crash at any point leaves the topic as it was
//! (nothing of the new partitions reached the disk before the highest one was durable) or whole
//! at the new size with its id; the answer to the client goes out only after that. Files of the
//! other partitions that a crash loses or tears are recreated on open: a missing directory, a
//! missing segment or a missing or malformed `partition.metadata` (rewritten durably with the
//! topic's id). Topic config overrides are stored durably before any directory is made.

pub mod boot;
pub mod cleaner;
pub mod cluster;
pub mod kafka_import;
pub mod retention;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use uuid::Uuid;

use crate::config::{topic as topic_config, BrokerConfig, Endpoint};
use crate::log::{self, ActiveCheck, IoBackend, LogError, PartitionLog};
use crate::metadata::{self, MetadataError, ProducerIdAllocator, TopicConfigStore};
use crate::replication::Partition;

/// A failure the broker cannot serve through: startup problems and I/O on metadata.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error(transparent)]
    Metadata(#[from] MetadataError),
    #[error("opening partition {topic}-{partition}")]
    OpenPartition {
        topic: String,
        partition: i32,
        #[source]
        source: LogError,
    },
    #[error("choosing the I/O backend")]
    IoBackend(#[source] std::io::Error),
    #[error("starting the group coordinator")]
    Groups(#[from] crate::group::GroupError),
    #[error("starting the transaction coordinator")]
    Txns(#[from] crate::txn::TxnError),
    #[error(transparent)]
    KafkaImport(#[from] kafka_import::ImportError),
}

/// Why a topic operation was refused; each maps to a Kafka error code in the api layer.
#[derive(Debug, thiserror::Error)]
pub enum TopicError {
    #[error("Topic '{0}' already exists.")]
    AlreadyExists(String),
    #[error("{0}")]
    InvalidName(String),
    #[error("Number of partitions must be larger than 0.")]
    InvalidPartitions(String),
    #[error("Unable to replicate the partition {0} time(s): The target replication factor of {0} cannot be reached because only 1 broker(s) are registered.")]
    InvalidReplicationFactor(i16),
    #[error("{0}")]
    InvalidConfig(String),
    #[error("This server does not host this topic-partition.")]
    UnknownTopic,
    #[error("Topic deletion is disabled.")]
    DeletionDisabled,
    #[error("storage: {0}")]
    Storage(String),
}

/// A published topic.
#[derive(Debug)]
pub struct Topic {
    pub name: Arc<str>,
    pub id: Uuid,
    pub partitions: Vec<Arc<Partition>>,
    /// Config overrides set on this topic (not the defaults).
    pub overrides: BTreeMap<String, String>,
    pub internal: bool,
}

impl Topic {
    pub fn partition(&self, index: i32) -> Option<&Arc<Partition>> {
        usize::try_from(index).ok().and_then(|i| self.partitions.get(i))
    }
}

#[derive(Default)]
struct Topics {
    by_name: BTreeMap<String, Arc<Topic>>,
    by_id: HashMap<Uuid, Arc<Topic>>,
}

/// The running broker's shared state.
pub struct Broker {
    pub config: BrokerConfig,
    pub cluster_id: String,
    pub node_id: i32,
    io: Arc<dyn IoBackend>,
    topics: RwLock<Topics>,
    topic_configs: Mutex<TopicConfigStore>,
    /// Dynamic broker configs (cluster default and this node), persisted.
    broker_configs: Mutex<TopicConfigStore>,
    /// Topic config defaults: static broker keys overlaid with the dynamic ones; recomputed
    /// whenever a dynamic broker config changes.
    topic_defaults: RwLock<BTreeMap<String, String>>,
    producer_ids: Mutex<ProducerIdAllocator>,
    /// Set once listeners are bound (port 0 resolves to the real port).
    advertised: RwLock<Vec<Endpoint>>,
    /// The group coordinator (consumer groups and committed offsets).
    groups: Arc<crate::group::Groups>,
    /// The transaction coordinator.
    txns: crate::txn::Txns,
    /// Log start offsets read from `log-start-offset-checkpoint` at startup, applied as
    /// partitions open (DeleteRecords must survive a restart).
    start_offsets: Mutex<HashMap<(String, i32), i64>>,
    /// High watermarks from `replication-offset-checkpoint`, taken by partitions as they open.
    high_watermarks: Mutex<HashMap<(String, i32), i64>>,
    /// Serialises checkpoint writers (retention task, DeleteRecords, shutdown).
    checkpoint_lock: Mutex<()>,
    /// Traffic counters, connection count and the group view behind `/metrics`.
    pub metrics: Arc<crate::metrics::BrokerMetrics>,
    /// Set when this broker is a member of a multi-node cluster: topics, partitions and their
    /// leaders come from the cluster's metadata image (see `cluster`).
    cluster: std::sync::OnceLock<Arc<crate::cluster::view::ClusterView>>,
    /// `leader.replication.throttled.rate` and `follower.replication.throttled.rate` (see
    /// `replication::throttle`), from the dynamic broker configs.
    pub leader_quota: crate::replication::throttle::Quota,
    pub follower_quota: Arc<crate::replication::throttle::Quota>,
}

/// Whether [`Broker::open_partition`] is creating the partition, and how durably.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NewPartition {
    /// Opening what is on disk (startup), checking the active segment as said (see [`boot`]):
    /// a missing or unreadable `partition.metadata` is rewritten durably.
    No(ActiveCheck),
    /// The highest new partition of a create: `partition.metadata`, the partition directory and
    /// the log dir are fsynced before returning. Its presence on disk is what makes the topic
    /// exist at its new size after a restart.
    Durable,
    /// Any other new partition: nothing is fsynced; a crash that loses its files is repaired on
    /// open from the durable one.
    Unsynced,
}

/// Entity name of the cluster-wide dynamic broker default in `sluice-broker-configs`.
const DYNAMIC_DEFAULT_ENTITY: &str = "<default>";

/// Kafka's per-log-dir checkpoint file names.
const LOG_START_CHECKPOINT: &str = "log-start-offset-checkpoint";
const RECOVERY_POINT_CHECKPOINT: &str = "recovery-point-offset-checkpoint";
/// Each partition's high watermark (read back only by a cluster member: see `open_partition`).
const REPLICATION_CHECKPOINT: &str = "replication-offset-checkpoint";

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Partitions opened at once at startup. Opening one reads the log behind its last index entry
/// and the batch headers since its newest producer snapshot, each read waiting for the device
/// when the data is not in the page cache (as after direct appends), so the opens of different
/// partitions overlap well. 64 partitions of 2 GiB topics after kill -9 (direct appends, one
/// run each): 315 ms one at a time, 174 ms eight at a time.
const OPEN_THREADS: usize = 8;

impl Broker {
    /// Formats empty log dirs, then opens every partition directory found.
    pub fn open(config: BrokerConfig) -> Result<Broker, BrokerError> {
        let mut io = log::select_backend(config.io_backend).map_err(BrokerError::IoBackend)?;
        if config.io_direct {
            io = Arc::new(log::io::DirectBackend::new(io).direct_reads(config.io_direct_reads));
        }
        Self::open_with_io(config, io)
    }

    /// [`Broker::open`] with the segment file backend given (tests inject faults with it).
    pub(crate) fn open_with_io(config: BrokerConfig, io: Arc<dyn IoBackend>) -> Result<Broker, BrokerError> {
        let cluster_id = metadata::load_or_format(&config.log_dirs, config.node_id)?;
        for dir in &config.log_dirs {
            io.prepare_dir(dir);
        }
        let reads = if config.io_direct && config.io_direct_reads { "direct where uncached" } else { "page cache" };
        tracing::info!(backend = io.name(), appends = io.append_path(), reads, "log I/O backend");
        let first = config.log_dirs[0].clone();
        let mut topic_configs = TopicConfigStore::open(&first)?;
        let mut broker_configs = TopicConfigStore::open_broker(&first)?;
        let mut producer_ids = ProducerIdAllocator::open(&first)?;
        kafka_import::import(&config.metadata_log_dir, &first, config.node_id, &mut topic_configs, &mut broker_configs, &mut producer_ids)?;
        let group_config = crate::group::GroupConfig::from_raw(&config.raw).map_err(crate::group::GroupError::from)?;
        let txn_config = crate::txn::config::TxnConfig::from_raw(&config.raw).map_err(crate::txn::TxnError::from)?;
        let broker = Broker {
            node_id: config.node_id,
            cluster_id,
            io,
            topics: RwLock::new(Topics::default()),
            topic_configs: Mutex::new(topic_configs),
            topic_defaults: RwLock::new(config.topic_defaults.clone()),
            broker_configs: Mutex::new(broker_configs),
            producer_ids: Mutex::new(producer_ids),
            advertised: RwLock::new(Vec::new()),
            groups: Arc::new(crate::group::Groups::new(group_config)),
            txns: crate::txn::Txns::new(txn_config),
            start_offsets: Mutex::new(HashMap::new()),
            high_watermarks: Mutex::new(HashMap::new()),
            checkpoint_lock: Mutex::new(()),
            metrics: Arc::default(),
            cluster: std::sync::OnceLock::new(),
            leader_quota: Default::default(),
            follower_quota: Default::default(),
            config,
        };
        broker.read_start_offsets();
        broker.recompute_topic_defaults();
        broker.apply_replication_throttles();
        let boot_id = boot::current_boot_id();
        let checks: HashMap<PathBuf, ActiveCheck> = broker
            .config
            .log_dirs
            .iter()
            .map(|d| (d.clone(), boot::active_check(d, boot_id.as_deref())))
            .collect();
        for (dir, check) in &checks {
            tracing::info!(dir = %dir.display(), ?check, "active segments: {}", match check {
                ActiveCheck::Structure => "no OS restart since this log dir was last opened; checking structure only",
                ActiveCheck::Crc => "the OS may have restarted since this log dir was last opened; verifying every batch's CRC",
            });
        }
        broker.load_topics(&checks)?;
        if broker.config.is_cluster_member() {
            broker.groups.start_empty();
        } else {
            broker.groups.load(&broker)?;
        }
        if let Some(id) = &boot_id {
            // A dir checked structurally already holds this boot's id. Rewriting it anyway
            // replaces a file by rename, which ext4 follows with writeback of the new file;
            // behind the writeback a killed broker left, that held startup for seconds.
            for dir in broker.config.log_dirs.iter().filter(|d| checks.get(*d) != Some(&ActiveCheck::Structure)) {
                if let Err(e) = boot::record(dir, id) {
                    tracing::warn!(dir = %dir.display(), error = %error_chain(&e), "could not record the boot id; the next start verifies CRCs again");
                }
            }
        }
        broker.metrics.set_groups_view(broker.groups.clone());
        Ok(broker)
    }

    /// Opens every partition directory of the log dirs, each active segment checked as `checks`
    /// says for its log dir, on up to [`OPEN_THREADS`] threads.
    fn load_topics(&self, checks: &HashMap<PathBuf, ActiveCheck>) -> Result<(), BrokerError> {
        // topic -> (partition -> dir)
        let mut found: BTreeMap<String, BTreeMap<i32, PathBuf>> = BTreeMap::new();
        for dir in &self.config.log_dirs {
            let entries = std::fs::read_dir(dir)
                .map_err(|source| MetadataError::Io { op: "list log dir", path: dir.clone(), source })?;
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().to_string();
                // A Kafka dir's metadata log, and the metadata quorum's files of a cluster member.
                if !entry.path().is_dir() || name.starts_with("__cluster_metadata") || name == "__sluice_metadata" {
                    continue;
                }
                match log::parse_partition_dir_name(&name) {
                    Some((topic, p)) if metadata::validate_topic_name(&topic).is_ok() => {
                        found.entry(topic).or_default().insert(p, entry.path());
                    }
                    _ => tracing::warn!(dir = %entry.path().display(), "ignoring directory that is not a topic partition"),
                }
            }
        }
        let started = std::time::Instant::now();
        // Each topic's settings first, then every partition opened, [`OPEN_THREADS`] at a time.
        struct ToOpen {
            name: String,
            topic_name: Arc<str>,
            id: Uuid,
            log_config: log::LogConfig,
            overrides: BTreeMap<String, String>,
            /// Indexes into `jobs` of partitions 0, 1, ...
            jobs: std::ops::Range<usize>,
        }
        let mut topics = Vec::new();
        let mut jobs: Vec<(usize, i32, PathBuf, ActiveCheck)> = Vec::new();
        for (name, parts) in found {
            let overrides = self.topic_configs.lock().get(&name);
            let log_config = topic_config::log_config(&topic_config::effective(&self.topic_defaults.read(), &overrides));
            let max = *parts.keys().max().unwrap_or(&0);
            let mut id: Option<Uuid> = None;
            for dir in parts.values() {
                if let Ok(Some(found_id)) = log::partition_metadata::read_partition_metadata(dir) {
                    id = Some(found_id);
                    break;
                }
            }
            let id = id.unwrap_or_else(metadata::random_kafka_uuid);
            let first = jobs.len();
            for p in 0..=max {
                let dir = match parts.get(&p) {
                    Some(d) => d.clone(),
                    None => {
                        tracing::warn!(topic = %name, partition = p, "partition directory missing; creating it empty");
                        Self::place(&mut self.log_dir_loads()).join(format!("{name}-{p}"))
                    }
                };
                let check = dir.parent().and_then(|d| checks.get(d)).copied().unwrap_or(ActiveCheck::Crc);
                jobs.push((topics.len(), p, dir, check));
            }
            let topic_name: Arc<str> = Arc::from(name.as_str());
            topics.push(ToOpen { name, topic_name, id, log_config, overrides, jobs: first..jobs.len() });
        }
        // Each partition's result and how long it took to open.
        type Opened = parking_lot::Mutex<Option<(std::time::Duration, Result<Arc<Partition>, BrokerError>)>>;
        let opened: Vec<Opened> = jobs.iter().map(|_| parking_lot::Mutex::new(None)).collect();
        let next = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for _ in 0..OPEN_THREADS.min(jobs.len()) {
                scope.spawn(|| loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some((t, p, dir, check)) = jobs.get(i) else { break };
                    let t = &topics[*t];
                    let began = std::time::Instant::now();
                    let r = self.open_partition(&t.topic_name, *p, t.id, dir, t.log_config.clone(), NewPartition::No(*check));
                    *opened[i].lock() = Some((began.elapsed(), r));
                });
            }
        });
        let opened: Vec<_> = opened.into_iter().map(|r| r.into_inner()).collect();
        // The partition that took longest to open, named in the summary line below: a restart
        // that is slow because of one partition (or one stalled read) says which.
        let (slowest_took, slowest) = opened
            .iter()
            .enumerate()
            .filter_map(|(i, o)| o.as_ref().map(|(took, _)| (*took, i)))
            .max()
            .map_or((std::time::Duration::ZERO, String::new()), |(took, i)| (took, jobs[i].2.display().to_string()));
        let mut opened = opened.into_iter().map(|o| o.map(|(_, r)| r));
        let count = jobs.len();
        for t in topics {
            let mut partitions = Vec::with_capacity(t.jobs.len());
            for _ in t.jobs {
                match opened.next().flatten() {
                    Some(r) => partitions.push(r?),
                    None => unreachable!("every partition is opened before the threads end"),
                }
            }
            let topic = Arc::new(Topic {
                internal: t.name.starts_with("__"),
                name: t.topic_name,
                id: t.id,
                partitions,
                overrides: t.overrides,
            });
            self.publish(topic);
        }
        tracing::info!(
            partitions = count,
            elapsed_ms = started.elapsed().as_millis() as u64,
            slowest = %slowest,
            slowest_ms = slowest_took.as_millis() as u64,
            "opened logs"
        );
        Ok(())
    }

    /// Opens (creating if needed) one partition. `new` says whether the partition is being
    /// created by this request and how durable its files must be before this returns.
    fn open_partition(
        &self,
        topic: &Arc<str>,
        p: i32,
        id: Uuid,
        dir: &std::path::Path,
        config: log::LogConfig,
        new: NewPartition,
    ) -> Result<Arc<Partition>, BrokerError> {
        let wrap = |source| BrokerError::OpenPartition { topic: topic.to_string(), partition: p, source };
        let check = match new {
            NewPartition::No(check) => check,
            NewPartition::Durable | NewPartition::Unsynced => ActiveCheck::Crc, // nothing to check yet
        };
        let mut log = PartitionLog::open_with(dir, config, self.io.clone(), check).map_err(wrap)?;
        if let Some(start) = self.start_offsets.lock().remove(&(topic.to_string(), p)) {
            log.set_log_start_offset(start);
        }
        match new {
            NewPartition::Durable => {
                log::partition_metadata::write_partition_metadata(dir, id).map_err(wrap)?;
                if let Some(log_dir) = dir.parent() {
                    log::checkpoint::sync_dir(log_dir).map_err(wrap)?;
                }
            }
            NewPartition::Unsynced => log::partition_metadata::write_new_partition_metadata(dir, id).map_err(wrap)?,
            NewPartition::No(_) => match log::partition_metadata::read_partition_metadata(dir) {
                Ok(Some(_)) => {}
                found => {
                    if let Err(e) = &found {
                        tracing::warn!(dir = %dir.display(), error = %error_chain(e), "rewriting unreadable partition.metadata");
                    }
                    if let Err(e) = log::partition_metadata::write_partition_metadata(dir, id) {
                        tracing::warn!(dir = %dir.display(), error = %error_chain(&e), "could not write partition.metadata");
                    }
                }
            },
        }
        let partition = Partition::new(topic.clone(), p, id, log, self.now_ms(), self.config.producer_id_expiration_ms).map_err(wrap)?;
        // The log may end past what the in-sync replicas had: consumers read only to the
        // checkpointed high watermark until followers' fetches (or the leader's) move it. (A
        // partition with one replica moves it to its log end as soon as it leads.)
        if let Some(hw) = self.high_watermarks.lock().remove(&(topic.to_string(), p)) {
            if self.config.is_cluster_member() {
                partition.restore_high_watermark(hw);
            }
        }
        Ok(Arc::new(partition))
    }

    /// Creates partitions `first..count` of a topic, the highest one first and durably (see
    /// "Durability of topic creation" in the module doc). Returned in partition order.
    fn create_partition_logs(
        &self,
        topic: &Arc<str>,
        id: Uuid,
        first: i32,
        count: i32,
        config: &log::LogConfig,
    ) -> Result<Vec<Arc<Partition>>, BrokerError> {
        let Some(highest) = count.checked_sub(1).filter(|&h| h >= first) else { return Ok(Vec::new()) };
        let mut loads = self.log_dir_loads();
        let mut place = |p: i32| Self::place(&mut loads).join(format!("{topic}-{p}"));
        let anchor = self.open_partition(topic, highest, id, &place(highest), config.clone(), NewPartition::Durable)?;
        let mut parts = Vec::with_capacity((count - first) as usize);
        for p in first..highest {
            parts.push(self.open_partition(topic, p, id, &place(p), config.clone(), NewPartition::Unsynced)?);
        }
        parts.push(anchor);
        Ok(parts)
    }

    fn publish(&self, topic: Arc<Topic>) {
        let mut t = self.topics.write();
        t.by_id.insert(topic.id, topic.clone());
        t.by_name.insert(topic.name.to_string(), topic);
    }

    /// Partition counts per log dir, for placing new partitions (Kafka's rule: the dir holding
    /// the fewest partitions). A single dir needs no counting.
    fn log_dir_loads(&self) -> Vec<(usize, PathBuf)> {
        let mut loads: Vec<(usize, PathBuf)> = self.config.log_dirs.iter().map(|d| (0, d.clone())).collect();
        if loads.len() > 1 {
            for topic in self.topics.read().by_name.values() {
                for p in &topic.partitions {
                    let dir = p.log_dir();
                    if let Some(c) = loads.iter_mut().find(|(_, d)| dir.starts_with(d)) {
                        c.0 += 1;
                    }
                }
            }
        }
        loads
    }

    /// Picks the least loaded dir from `loads` and counts the new partition against it.
    fn place(loads: &mut [(usize, PathBuf)]) -> PathBuf {
        match loads.iter_mut().min_by_key(|(c, _)| *c) {
            Some(slot) => {
                slot.0 += 1;
                slot.1.clone()
            }
            None => PathBuf::from("."),
        }
    }

    pub fn topic(&self, name: &str) -> Option<Arc<Topic>> {
        self.topics.read().by_name.get(name).cloned()
    }

    pub fn topic_by_id(&self, id: Uuid) -> Option<Arc<Topic>> {
        self.topics.read().by_id.get(&id).cloned()
    }

    pub fn partition(&self, topic: &str, index: i32) -> Option<Arc<Partition>> {
        self.topic(topic).and_then(|t| t.partition(index).cloned())
    }

    pub fn all_topics(&self) -> Vec<Arc<Topic>> {
        self.topics.read().by_name.values().cloned().collect()
    }

    /// Topic config defaults in force: static broker config overlaid with dynamic broker configs.
    pub fn topic_defaults(&self) -> BTreeMap<String, String> {
        self.topic_defaults.read().clone()
    }

    /// Dynamic broker configs: (cluster-wide default, this node's).
    pub fn dynamic_broker_configs(&self) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
        let store = self.broker_configs.lock();
        (store.get(DYNAMIC_DEFAULT_ENTITY), store.get(&self.node_id.to_string()))
    }

    /// Replaces the dynamic broker configs of `entity` (None: the cluster default, Some: this
    /// node), already validated, then applies the new topic defaults to every partition.
    pub fn set_dynamic_broker_configs(&self, node: bool, configs: BTreeMap<String, String>) -> Result<(), TopicError> {
        let entity = if node { self.node_id.to_string() } else { DYNAMIC_DEFAULT_ENTITY.to_string() };
        self.broker_configs.lock().set(&entity, configs).map_err(|e| TopicError::Storage(e.to_string()))?;
        self.recompute_topic_defaults();
        self.apply_replication_throttles();
        for topic in self.all_topics() {
            let log_config = topic_config::log_config(&self.topic_effective_configs(&topic));
            for p in &topic.partitions {
                p.update_config(log_config.clone());
            }
        }
        Ok(())
    }

    /// The replication throttle rates in force: this broker's dynamic config, else the cluster
    /// default, else none.
    fn apply_replication_throttles(&self) {
        let (cluster, node) = self.dynamic_broker_configs();
        let rate = |key: &str| node.get(key).or(cluster.get(key)).and_then(|v| v.trim().parse::<i64>().ok());
        self.leader_quota.set_limit(rate("leader.replication.throttled.rate"));
        self.follower_quota.set_limit(rate("follower.replication.throttled.rate"));
    }

    fn recompute_topic_defaults(&self) {
        let (cluster, node) = self.dynamic_broker_configs();
        let mut raw = self.config.raw.clone();
        raw.extend(cluster);
        raw.extend(node);
        match topic_config::defaults_from_broker(&raw) {
            Ok(d) => *self.topic_defaults.write() = d,
            // Values were validated before they were stored; a hand-edited file is reported.
            Err(e) => tracing::error!(error = %e, "ignoring invalid dynamic broker configs"),
        }
    }

    /// Effective configs of a topic (defaults overlaid with overrides).
    pub fn topic_effective_configs(&self, topic: &Topic) -> BTreeMap<String, String> {
        topic_config::effective(&self.topic_defaults.read(), &topic.overrides)
    }

    /// Validates a create request without side effects; returns (partitions, replication factor).
    pub fn check_create(
        &self,
        name: &str,
        num_partitions: i32,
        replication_factor: i16,
        configs: &BTreeMap<String, String>,
    ) -> Result<(i32, i16), TopicError> {
        metadata::validate_topic_name(name).map_err(TopicError::InvalidName)?;
        if self.topic(name).is_some() {
            return Err(TopicError::AlreadyExists(name.to_string()));
        }
        let partitions = if num_partitions == -1 { self.config.num_partitions } else { num_partitions };
        if partitions <= 0 {
            return Err(TopicError::InvalidPartitions("Number of partitions must be larger than 0.".into()));
        }
        let rf = if replication_factor == -1 { self.config.default_replication_factor } else { replication_factor };
        if rf <= 0 {
            return Err(TopicError::InvalidReplicationFactor(rf));
        }
        if rf > 1 {
            return Err(TopicError::InvalidReplicationFactor(rf));
        }
        for (k, v) in configs {
            topic_config::validate(k, v).map_err(|e| match topic_config::lookup(k) {
                None => TopicError::InvalidConfig(format!("Unknown topic config name: {k}")),
                Some(_) => TopicError::InvalidConfig(e.to_string()),
            })?;
        }
        Ok((partitions, rf))
    }

    /// The cluster this broker is a member of (a single node's too: the one voter of its own
    /// quorum); `None` only before [`Broker::join_cluster`], and in unit tests of this layer.
    pub fn cluster(&self) -> Option<&Arc<crate::cluster::view::ClusterView>> {
        self.cluster.get()
    }

    /// Makes this broker a cluster member (once, before it serves).
    pub fn join_cluster(&self, view: Arc<crate::cluster::view::ClusterView>) {
        let _ = self.cluster.set(view);
    }

    /// Creates a topic (after `check_create`). Returns the published topic. In a cluster only
    /// the controller creates topics; brokers make their local logs from the metadata image
    /// (`cluster::LocalSync`).
    pub fn create_topic(
        &self,
        name: &str,
        num_partitions: i32,
        replication_factor: i16,
        configs: BTreeMap<String, String>,
    ) -> Result<Arc<Topic>, TopicError> {
        if self.cluster().is_some() {
            return Err(TopicError::Storage(format!(
                "topic {name} must be created through the controller: this broker is a member of a cluster"
            )));
        }
        let (partitions, _) = self.check_create(name, num_partitions, replication_factor, &configs)?;
        self.create_local_topic(name, metadata::random_kafka_uuid(), partitions, configs)
    }

    /// Makes a topic's local logs: those of a new single-node topic, or of a topic the
    /// cluster's metadata image holds (its id and partition count; `configs` its overrides).
    pub fn create_local_topic(
        &self,
        name: &str,
        id: Uuid,
        partitions: i32,
        configs: BTreeMap<String, String>,
    ) -> Result<Arc<Topic>, TopicError> {
        // Serialise creations so two racing creates of one name cannot both pass the check.
        let mut store = self.topic_configs.lock();
        if self.topic(name).is_some() {
            return Err(TopicError::AlreadyExists(name.to_string()));
        }
        store.set(name, configs.clone()).map_err(|e| TopicError::Storage(e.to_string()))?;
        drop(store);
        let topic_name: Arc<str> = Arc::from(name);
        let log_config = topic_config::log_config(&topic_config::effective(&self.topic_defaults.read(), &configs));
        let parts = self
            .create_partition_logs(&topic_name, id, 0, partitions, &log_config)
            .map_err(|e| TopicError::Storage(format!("{e}: {}", error_chain(&e))))?;
        let topic = Arc::new(Topic { internal: name.starts_with("__"), name: topic_name, id, partitions: parts, overrides: configs });
        self.publish(topic.clone());
        tracing::info!(topic = name, partitions, topic_id = %metadata::kafka_uuid_string(id), "created topic");
        Ok(topic)
    }

    /// Deletes a topic and its files.
    pub fn delete_topic(&self, topic: &Arc<Topic>) -> Result<(), TopicError> {
        if !self.config.delete_topic_enable {
            return Err(TopicError::DeletionDisabled);
        }
        self.remove_local_topic(topic)
    }

    /// Removes a topic's local logs and committed offsets, unchecked: in a cluster the
    /// controller decided the deletion (`cluster::LocalSync`).
    pub fn remove_local_topic(&self, topic: &Arc<Topic>) -> Result<(), TopicError> {
        {
            let mut t = self.topics.write();
            if t.by_name.remove(topic.name.as_ref()).is_none() {
                return Err(TopicError::UnknownTopic);
            }
            t.by_id.remove(&topic.id);
        }
        let _ = self.topic_configs.lock().set(&topic.name, BTreeMap::new());
        for p in &topic.partitions {
            if let Err(e) = p.clone().delete_files() {
                tracing::warn!(topic = %topic.name, partition = p.index, error = %error_chain(&e), "deleting partition files");
            }
        }
        // Committed offsets of the topic go too, as in Kafka: a topic created again under this
        // name must not hand its consumers the old topic's positions.
        let forgotten = if topic.name.as_ref() == crate::group::OFFSETS_TOPIC { 0 } else { self.groups().forget_topic(self, &topic.name) };
        tracing::info!(topic = %topic.name, committed_offsets_removed = forgotten, "deleted topic");
        Ok(())
    }

    /// Grows a topic to `count` partitions.
    pub fn create_partitions(&self, name: &str, count: i32) -> Result<(), TopicError> {
        let _guard = self.topic_configs.lock();
        let topic = self.topic(name).ok_or(TopicError::UnknownTopic)?;
        let current = topic.partitions.len() as i32;
        if count <= current {
            return Err(TopicError::InvalidPartitions(format!(
                "Topic currently has {current} partitions, which is higher than the requested {count}."
            )));
        }
        let log_config = topic_config::log_config(&self.topic_effective_configs(&topic));
        let mut parts = topic.partitions.clone();
        parts.extend(
            self.create_partition_logs(&topic.name, topic.id, current, count, &log_config)
                .map_err(|e| TopicError::Storage(error_chain(&e)))?,
        );
        self.publish(Arc::new(Topic {
            name: topic.name.clone(),
            id: topic.id,
            partitions: parts,
            overrides: topic.overrides.clone(),
            internal: topic.internal,
        }));
        Ok(())
    }

    /// Replaces a topic's config overrides (already validated) and applies them to its logs.
    pub fn set_topic_configs(&self, name: &str, overrides: BTreeMap<String, String>) -> Result<(), TopicError> {
        let mut store = self.topic_configs.lock();
        let topic = self.topic(name).ok_or(TopicError::UnknownTopic)?;
        store.set(name, overrides.clone()).map_err(|e| TopicError::Storage(e.to_string()))?;
        drop(store);
        let log_config = topic_config::log_config(&topic_config::effective(&self.topic_defaults.read(), &overrides));
        for p in &topic.partitions {
            p.update_config(log_config.clone());
        }
        self.publish(Arc::new(Topic {
            name: topic.name.clone(),
            id: topic.id,
            partitions: topic.partitions.clone(),
            overrides,
            internal: topic.internal,
        }));
        Ok(())
    }

    pub fn allocate_producer_id(&self) -> Result<i64, MetadataError> {
        self.producer_ids.lock().allocate()
    }

    pub fn set_advertised(&self, endpoints: Vec<Endpoint>) {
        *self.advertised.write() = endpoints;
    }

    pub fn advertised(&self) -> Vec<Endpoint> {
        self.advertised.read().clone()
    }

    fn read_start_offsets(&self) {
        for (name, map) in [(LOG_START_CHECKPOINT, &self.start_offsets), (REPLICATION_CHECKPOINT, &self.high_watermarks)] {
            let mut map = map.lock();
            for dir in &self.config.log_dirs {
                let path = dir.join(name);
                match log::checkpoint::read_offset_checkpoint(&path) {
                    Ok(entries) => {
                        for (t, p, o) in entries {
                            map.insert((t, p), o);
                        }
                    }
                    Err(e) => tracing::warn!(path = %path.display(), error = %error_chain(&e), "ignoring unreadable checkpoint"),
                }
            }
        }
    }

    /// Writes each log dir's `log-start-offset-checkpoint` (and, when `recovery_points` is set,
    /// `recovery-point-offset-checkpoint` with every log end offset — only valid right after a
    /// flush). Failures are logged; the next write retries.
    pub fn write_checkpoints(&self, recovery_points: bool) {
        let _guard = self.checkpoint_lock.lock();
        for dir in &self.config.log_dirs {
            let mut starts = Vec::new();
            let mut ends = Vec::new();
            let mut high_watermarks = Vec::new();
            for topic in self.all_topics() {
                for p in &topic.partitions {
                    if p.log_dir().parent() == Some(dir.as_path()) {
                        starts.push((topic.name.to_string(), p.index, p.log_start_offset()));
                        ends.push((topic.name.to_string(), p.index, p.log_end_offset()));
                        high_watermarks.push((topic.name.to_string(), p.index, p.high_watermark()));
                    }
                }
            }
            let mut files = vec![(LOG_START_CHECKPOINT, starts), (REPLICATION_CHECKPOINT, high_watermarks)];
            if recovery_points {
                files.push((RECOVERY_POINT_CHECKPOINT, ends));
            }
            for (name, entries) in files {
                let path = dir.join(name);
                if let Err(e) = log::checkpoint::write_offset_checkpoint(&path, &entries) {
                    tracing::error!(path = %path.display(), error = %error_chain(&e), "writing checkpoint failed");
                }
            }
        }
    }

    /// Makes every partition durable for a clean shutdown. Each partition writes out what it
    /// holds only in memory, then one `syncfs` per log dir commits it all: an fsync per file
    /// and directory took 11-16 s for 10,000 partitions here. Where `syncfs` fails, the
    /// partitions of that dir are flushed one by one.
    pub fn flush_all(&self) {
        let topics = self.all_topics();
        for topic in &topics {
            for p in &topic.partitions {
                if let Err(e) = p.write_out() {
                    tracing::error!(topic = %topic.name, partition = p.index, error = %error_chain(&e), "writing out the log on shutdown failed");
                }
            }
        }
        for dir in &self.config.log_dirs {
            let Err(e) = log::checkpoint::sync_filesystem(dir) else { continue };
            tracing::warn!(dir = %dir.display(), error = %error_chain(&e), "syncfs on shutdown failed; flushing each partition");
            for topic in &topics {
                for p in topic.partitions.iter().filter(|p| p.log_dir().parent() == Some(dir.as_path())) {
                    if let Err(e) = p.flush() {
                        tracing::error!(topic = %topic.name, partition = p.index, error = %error_chain(&e), "flush on shutdown failed");
                    }
                }
            }
        }
    }

    /// Name of the log I/O backend in use (`io_uring` or `std`).
    pub fn io_backend_name(&self) -> &'static str {
        self.io.name()
    }

    /// How segment appends reach the files (`pwritev`, `io_uring` or `mixed`).
    pub fn io_append_path(&self) -> &'static str {
        self.io.append_path()
    }

    pub fn now_ms(&self) -> i64 {
        now_ms()
    }

    pub fn groups(&self) -> &crate::group::Groups {
        &self.groups
    }

    pub fn txns(&self) -> &crate::txn::Txns {
        &self.txns
    }
}

/// Renders an error with its sources, for log lines and error messages.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::epoch::LEADER_EPOCH_CHECKPOINT_FILE;
    use crate::log::partition_metadata::{read_partition_metadata, PARTITION_METADATA_FILE};

    fn broker(dir: &std::path::Path) -> Broker {
        let pairs = [("log.dirs".to_string(), dir.display().to_string()), ("log.io.backend".into(), "std".into())];
        Broker::open(BrokerConfig::from_pairs(pairs).unwrap().config).unwrap()
    }

    fn assert_whole(b: &Broker, dir: &std::path::Path, name: &str, partitions: usize, id: Uuid) {
        let t = b.topic(name).expect("topic is back");
        assert_eq!(t.id, id);
        assert_eq!(t.partitions.len(), partitions);
        for p in 0..partitions {
            let pdir = dir.join(format!("{name}-{p}"));
            assert_eq!(read_partition_metadata(&pdir).unwrap(), Some(id), "{}", pdir.display());
        }
    }

    #[test]
    fn created_topic_survives_restart_with_its_id_and_no_epoch_checkpoint() {
        let d = tempfile::tempdir().unwrap();
        let b = broker(d.path());
        let id = b.create_topic("orders", 8, 1, BTreeMap::new()).unwrap().id;
        // An empty partition has no leader epoch yet, so no checkpoint to write (as in Kafka).
        assert!(!d.path().join("orders-0").join(LEADER_EPOCH_CHECKPOINT_FILE).exists());
        drop(b);
        let b = broker(d.path());
        assert_whole(&b, d.path(), "orders", 8, id);
        assert_eq!(b.partition("orders", 7).unwrap().log_end_offset(), 0);
    }

    #[test]
    fn unsynced_partition_files_lost_in_a_crash_are_rebuilt_from_the_highest_partition() {
        let d = tempfile::tempdir().unwrap();
        let b = broker(d.path());
        let id = b.create_topic("t", 5, 1, BTreeMap::new()).unwrap().id;
        drop(b);
        // What a crash can do to the partitions created without fsync: lose the directory,
        // lose files in it, or leave partition.metadata empty or cut short.
        let p = |i: i32| d.path().join(format!("t-{i}"));
        std::fs::remove_dir_all(p(0)).unwrap();
        std::fs::remove_dir_all(p(2)).unwrap();
        std::fs::write(p(1).join(PARTITION_METADATA_FILE), "").unwrap();
        std::fs::write(p(3).join(PARTITION_METADATA_FILE), "version: 0\ntopic_id: AS").unwrap();
        for f in std::fs::read_dir(p(3)).unwrap() {
            let f = f.unwrap().path();
            if f.extension().is_some_and(|e| e == "log" || e == "index" || e == "timeindex") {
                std::fs::remove_file(f).unwrap();
            }
        }
        let b = broker(d.path());
        assert_whole(&b, d.path(), "t", 5, id);
        drop(b);
        // The repairs were written for good: a second restart sees the same.
        assert_whole(&broker(d.path()), d.path(), "t", 5, id);
    }

    #[test]
    fn grown_topic_survives_restart_at_its_new_size() {
        let d = tempfile::tempdir().unwrap();
        let b = broker(d.path());
        let id = b.create_topic("g", 2, 1, BTreeMap::new()).unwrap().id;
        b.create_partitions("g", 6).unwrap();
        assert_eq!(b.topic("g").unwrap().partitions.iter().map(|p| p.index).collect::<Vec<_>>(), (0..6).collect::<Vec<_>>());
        drop(b);
        // Only the highest new partition had to be durable.
        std::fs::remove_dir_all(d.path().join("g-3")).unwrap();
        assert_whole(&broker(d.path()), d.path(), "g", 6, id);
    }
}
