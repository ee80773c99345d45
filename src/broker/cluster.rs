//! A cluster member's local logs follow the metadata image: for every topic of which this
//! broker holds a replica, the local topic exists with the image's topic id and partition
//! count (every partition of the topic gets a local log, as the broker's topic table is
//! indexed by partition; the image says which of them it leads); a topic the image no longer
//! has, or has under another id (deleted and created again), loses its local files.
//!
//! Each local partition takes its role from the image: leader (with the image's ISR, replicas
//! and epochs) or follower of the image's leader, fetched by the [`ReplicaFetchers`]. A topic
//! none of whose replicas is on this broker any more (a reassignment moved them) loses its local
//! files once the image has caught up; a single partition moved away stops leading or following
//! and keeps its files until then. While
//! leading, [`propose_isr_changes`] asks the controller for ISR changes (AlterPartition).
//!
//! Runs on the blocking pool whenever the image changes (creating and deleting files fsyncs).
//!
//! # Failure behaviour
//! A local log that cannot be made or removed is logged with the topic and retried at the next
//! image change; the broker keeps serving what it has.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Broker, Topic};
use crate::cluster::image::{MetadataImage, TopicState, BROKER_RESOURCE, TOPIC_RESOURCE};
use crate::replication::fetcher::{Followed, ReplicaFetchers, Source};

/// Brings the local topics (and the dynamic broker configs: the cluster default and this
/// broker's) in line with an image, one image change after another. It remembers what its last
/// pass brought in line, by topic id: the image's topic and the local topic it set roles on. A
/// topic found the same in the next image (the image copies a topic only when something in it
/// changes) with the same local topic keeps the roles it has, so an image change costs a pass
/// over the topics, not a role change for every partition of the broker.
#[derive(Default)]
pub struct LocalSync {
    done: std::collections::HashMap<uuid::Uuid, (Arc<TopicState>, Arc<Topic>)>,
}

impl LocalSync {
    /// Brings the local topics in line with `image`. Local logs are removed only when
    /// `caught_up`: an image still catching up after a restart may lack topics that exist.
    /// Returns every partition to follow, by leader (of unchanged topics too).
    pub fn sync(&mut self, broker: &Broker, image: &MetadataImage, caught_up: bool) -> BTreeMap<i32, Vec<Followed>> {
        let follow = self.sync_topics(broker, image, caught_up);
        if self.done.len() > image.topics.len() {
            self.done.retain(|id, _| image.topics.contains_key(id));
        }
        follow
    }

    fn sync_topics(&mut self, broker: &Broker, image: &MetadataImage, caught_up: bool) -> BTreeMap<i32, Vec<Followed>> {
        let done = &mut self.done;
        let mut follow: BTreeMap<i32, Vec<Followed>> = BTreeMap::new();
        let me = broker.node_id;
        let (cluster_default, own) = broker.dynamic_broker_configs();
        for (node, entity, local) in [(false, String::new(), cluster_default), (true, me.to_string(), own)] {
            let wanted = image.configs.get(&(BROKER_RESOURCE, entity)).cloned().unwrap_or_default();
            if wanted != local && (caught_up || !wanted.is_empty()) {
                if let Err(e) = broker.set_dynamic_broker_configs(node, wanted) {
                    tracing::warn!(error = %e, "applying the cluster's dynamic broker configs failed");
                }
            }
        }
        for topic in image.topics.values() {
            let hosted = topic.partitions.values().any(|p| p.replicas.contains(&me));
            let local = broker.topic(&topic.name);
            if let Some(l) = local.as_ref().filter(|_| caught_up) {
                if l.id != topic.id {
                    tracing::info!(topic = %topic.name, "the topic was deleted and created again; removing the old local logs");
                    if let Err(e) = broker.remove_local_topic(l) {
                        tracing::warn!(topic = %topic.name, error = %e, "removing the local logs of a replaced topic failed");
                        continue;
                    }
                }
            }
            if !hosted {
                // Moved away by a reassignment: no replica of the topic is here any more (Kafka
                // deletes a replica it no longer hosts). Only once caught up, as above.
                if let Some(l) = local.as_ref().filter(|l| caught_up && l.id == topic.id) {
                    tracing::info!(topic = %topic.name, "no replica of the topic is on this broker any more; removing its local logs");
                    if let Err(e) = broker.remove_local_topic(l) {
                        tracing::warn!(topic = %topic.name, error = %e, "removing the local logs of a topic moved away failed");
                    }
                    done.remove(&topic.id);
                }
                continue;
            }
            let count = topic.partitions.len() as i32;
            match broker.topic(&topic.name) {
                None => {
                    let configs: BTreeMap<String, String> =
                        image.configs.get(&(TOPIC_RESOURCE, topic.name.clone())).cloned().unwrap_or_default();
                    if let Err(e) = broker.create_local_topic(&topic.name, topic.id, count, configs) {
                        tracing::warn!(topic = %topic.name, error = %e, "making the local logs of a topic failed");
                    }
                }
                // An older topic of the same name, removed once caught up.
                Some(l) if l.id != topic.id => continue,
                Some(l) if (l.partitions.len() as i32) < count => {
                    if let Err(e) = broker.create_partitions(&topic.name, count) {
                        tracing::warn!(topic = %topic.name, error = %e, "making the local logs of new partitions failed");
                    }
                }
                Some(_) => {}
            }
            // Appends carry the epoch the image gives this broker's leadership; the local logs take
            // the topic's configs from the image.
            if let Some(local) = broker.topic(&topic.name).filter(|l| l.id == topic.id) {
                let configs = image.configs.get(&(TOPIC_RESOURCE, topic.name.clone())).cloned().unwrap_or_default();
                if local.overrides != configs {
                    if let Err(e) = broker.set_topic_configs(&topic.name, configs) {
                        tracing::warn!(topic = %topic.name, error = %e, "applying the topic's configs to its local logs failed");
                    }
                }
                let now = broker.now_ms();
                let unchanged = done.get(&topic.id).is_some_and(|(t, l)| Arc::ptr_eq(t, topic) && Arc::ptr_eq(l, &local));
                let follower_throttled = image
                    .configs
                    .get(&(TOPIC_RESOURCE, topic.name.clone()))
                    .and_then(|c| c.get("follower.replication.throttled.replicas"));
                for (index, p) in &topic.partitions {
                    let Some(lp) = local.partition(*index) else { continue };
                    if !p.replicas.contains(&me) {
                        // Not a replica (any more): a leader moved away by a reassignment stops
                        // leading. Its log stays until the whole topic leaves this broker; a
                        // replica added back later truncates it against the leader's epochs.
                        if !unchanged && lp.is_leader() {
                            lp.become_follower(p.leader, p.leader_epoch);
                        }
                        continue;
                    }
                    if p.leader == me {
                        if !unchanged {
                            lp.set_replica_lag_time_max_ms(broker.config.replica_lag_time_max_ms);
                            lp.become_leader(me, p.leader_epoch, p.partition_epoch, p.replicas.clone(), p.isr.clone(), now);
                        }
                    } else {
                        if !unchanged {
                            lp.become_follower(p.leader, p.leader_epoch);
                        }
                        if p.leader >= 0 {
                            let throttled = !p.isr.contains(&me)
                                && follower_throttled.is_some_and(|v| crate::replication::throttle::names_replica(v, *index, me));
                            follow.entry(p.leader).or_default().push(Followed {
                                topic_id: topic.id,
                                partition: lp.clone(),
                                leader_epoch: p.leader_epoch,
                                throttled,
                            });
                        }
                    }
                }
                done.insert(topic.id, (topic.clone(), local));
            }
        }
        if !caught_up {
            return follow;
        }
        for local in broker.all_topics() {
            if !image.topic_ids.contains_key(local.name.as_ref()) {
                tracing::info!(topic = %local.name, "the topic is not in the cluster's metadata; removing its local logs");
                if let Err(e) = broker.remove_local_topic(&local) {
                    tracing::warn!(topic = %local.name, error = %e, "removing the local logs of a deleted topic failed");
                }
            }
        }
        follow
    }
}

/// What the log dirs hold outside any metadata log, as the records that put it into a new one:
/// a single-node sluice's (or a single-node Kafka's, imported at open) topics with their ids,
/// every partition led by this broker as its only replica at the leader epoch its log reached,
/// the topics' config overrides, the dynamic broker configs (cluster default and this broker's)
/// and the producer-id mark no id was handed out beyond. The active controller writes them
/// after the bootstrap records of an empty log (`cluster::driver`), so a single node that
/// becomes a one-voter quorum keeps everything; without them, the first image would lack the
/// topics and `LocalSync` would remove their logs.
pub fn local_state_records(broker: &Broker) -> Vec<crate::cluster::records::VersionedRecord> {
    use crate::cluster::records::{versioned, MetadataRecord, Partition, VersionedRecord};
    let me = broker.node_id;
    let mut out = Vec::new();
    fn config(resource_type: i8, resource_name: &str, configs: BTreeMap<String, String>) -> impl Iterator<Item = VersionedRecord> + '_ {
        configs.into_iter().map(move |(name, value)| {
            versioned(MetadataRecord::Config { resource_type, resource_name: resource_name.to_string(), name, value: Some(value) })
        })
    }
    for topic in broker.all_topics() {
        out.push(versioned(MetadataRecord::Topic { name: topic.name.to_string(), topic_id: topic.id }));
        for p in &topic.partitions {
            let epoch = p.leader_epoch().max(p.latest_epoch().unwrap_or(0));
            let mut record = Partition::new(topic.id, p.index, vec![me]);
            record.leader_epoch = epoch;
            out.push(versioned(MetadataRecord::Partition(record)));
        }
        out.extend(config(TOPIC_RESOURCE, &topic.name, topic.overrides.clone()));
    }
    let (cluster_default, own) = broker.dynamic_broker_configs();
    out.extend(config(BROKER_RESOURCE, "", cluster_default));
    out.extend(config(BROKER_RESOURCE, &me.to_string(), own));
    let next_producer_id = broker.producer_ids.lock().high_mark();
    if next_producer_id > 0 {
        out.push(versioned(MetadataRecord::ProducerIds { broker_id: me, broker_epoch: -1, next_producer_id }));
    }
    out
}

/// Asks the controller for the ISR changes the partitions this broker leads want (lagging
/// followers out, caught-up ones in), in one AlterPartition. A partition whose change is
/// refused may propose again at the next round; one that is taken shows in the image.
pub async fn propose_isr_changes(broker: &Broker) {
    use kafka_protocol::messages::alter_partition_request::{BrokerState, PartitionData, TopicData};
    use kafka_protocol::messages::{AlterPartitionRequest, BrokerId};
    let Some(view) = broker.cluster() else { return };
    let image = view.image();
    let eligible = |b: i32| image.brokers.get(&b).is_some_and(|r| !r.fenced && !r.in_controlled_shutdown);
    let now = broker.now_ms();
    let mut asked = Vec::new();
    let mut topics: Vec<TopicData> = Vec::new();
    for topic in broker.all_topics() {
        for p in &topic.partitions {
            // A leader of an unclean election starts RECOVERING (KIP-704). sluice has no state
            // to rebuild beyond its log, so it tells the controller at once that it has
            // recovered, with its ISR (itself) unchanged; only then may its ISR grow.
            // (Read from the image fetched above: no per-partition copy every round.)
            let recovering = image
                .topic(&topic.name)
                .and_then(|t| t.partitions.get(&p.index))
                .filter(|s| s.leader_recovery_state == crate::cluster::controller::RECOVERING && s.leader == broker.node_id)
                .filter(|s| p.is_leader() && s.leader_epoch == p.leader_epoch());
            let pd = if let Some(s) = recovering {
                let me = BrokerState::default().with_broker_id(BrokerId(broker.node_id)).with_broker_epoch(view.broker_epoch());
                tracing::info!(partition = ?p, "led after an unclean election: telling the controller it has recovered");
                PartitionData::default()
                    .with_partition_index(p.index)
                    .with_leader_epoch(s.leader_epoch)
                    .with_new_isr_with_epochs(vec![me])
                    .with_leader_recovery_state(crate::cluster::controller::RECOVERED)
                    .with_partition_epoch(s.partition_epoch)
            } else {
                let Some(change) = p.propose_isr_change(now, eligible) else { continue };
                tracing::info!(partition = ?p, isr = ?change.isr.iter().map(|(b, _)| *b).collect::<Vec<_>>(), "asking the controller for an ISR change");
                PartitionData::default()
                    .with_partition_index(p.index)
                    .with_leader_epoch(p.leader_epoch())
                    .with_new_isr_with_epochs(
                        change.isr.iter().map(|(b, e)| BrokerState::default().with_broker_id(BrokerId(*b)).with_broker_epoch(*e)).collect(),
                    )
                    .with_partition_epoch(change.partition_epoch)
            };
            asked.push(p.clone());
            match topics.last_mut().filter(|t| t.topic_id == topic.id) {
                Some(t) => t.partitions.push(pd),
                None => topics.push(TopicData::default().with_topic_id(topic.id).with_partitions(vec![pd])),
            }
        }
    }
    if asked.is_empty() {
        return;
    }
    let req = AlterPartitionRequest::default()
        .with_broker_id(BrokerId(broker.node_id))
        .with_broker_epoch(view.broker_epoch())
        .with_topics(topics);
    match view.call_controller(&req, 3).await {
        Ok(resp) if resp.error_code == 0 => {
            for t in &resp.topics {
                for pd in &t.partitions {
                    if pd.error_code != 0 {
                        tracing::info!(topic_id = %t.topic_id, partition = pd.partition_index, error_code = pd.error_code, "the controller refused an ISR change");
                        if let Some(p) = asked.iter().find(|p| p.topic_id == t.topic_id && p.index == pd.partition_index) {
                            p.isr_change_failed();
                        }
                    }
                }
            }
        }
        Ok(resp) => {
            tracing::info!(error_code = resp.error_code, "the controller refused the ISR changes");
            asked.iter().for_each(|p| p.isr_change_failed());
        }
        Err(e) => {
            tracing::info!(error = %e, "asking the controller for ISR changes failed");
            asked.iter().for_each(|p| p.isr_change_failed());
        }
    }
}

/// How often a leader looks for ISR changes to ask for.
const ISR_CHECK_INTERVAL: std::time::Duration = std::time::Duration::from_millis(500);

/// Proposes ISR changes every [`ISR_CHECK_INTERVAL`] until the task is dropped.
pub async fn run_isr_changes(broker: Arc<Broker>) {
    let mut tick = tokio::time::interval(ISR_CHECK_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        propose_isr_changes(&broker).await;
    }
}

/// Stops the fetcher tasks when the image follower ends.
struct StopOnDrop(Arc<ReplicaFetchers>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// Follows the image until the task is dropped.
pub async fn run(broker: Arc<Broker>) {
    let Some(view) = broker.cluster().cloned() else { return };
    let epoch_view = view.clone();
    let fetchers = ReplicaFetchers::new(broker.node_id, Arc::new(move || epoch_view.broker_epoch()), broker.follower_quota.clone());
    let _stop = StopOnDrop(fetchers.clone());
    let mut images = view.subscribe();
    let mut synced_caught_up = false;
    let local_sync = Arc::new(parking_lot::Mutex::new(LocalSync::default()));
    loop {
        let image = images.borrow_and_update().clone();
        let b = broker.clone();
        let caught_up = view.is_caught_up();
        let synced = {
            let image = image.clone();
            let local_sync = local_sync.clone();
            tokio::task::spawn_blocking(move || {
                let follow = local_sync.lock().sync(&b, &image, caught_up);
                // The groups of the __consumer_offsets partitions led here, replayed once the
                // local logs match the image.
                if let Some(offsets) = image.topic(crate::group::OFFSETS_TOPIC) {
                    let leaders = offsets.partitions.iter().map(|(i, p)| (*i, (p.leader, p.leader_epoch))).collect();
                    b.groups().follow_leadership(&b, &leaders);
                }
                // Likewise the transactional ids of the __transaction_state partitions.
                if let Some(state) = image.topic(crate::txn::STATE_TOPIC) {
                    let leaders = state.partitions.iter().map(|(i, p)| (*i, (p.leader, p.leader_epoch))).collect();
                    b.txns().follow_leadership(&b, &leaders);
                }
                follow
            })
            .await
        };
        match synced {
            Ok(follow) => {
                let sources = follow
                    .into_iter()
                    .filter_map(|(leader, partitions)| {
                        let info = broker.broker_info(leader, &view.client_listener)?;
                        Some((leader, Source { addr: format!("{}:{}", info.host, info.port), partitions }))
                    })
                    .collect();
                fetchers.set(sources);
            }
            // A panic here is a bug; the join error is logged and the loop goes on.
            Err(e) => tracing::error!(error = %e, "syncing local topics with the metadata image failed"),
        }
        view.mark_synced(image.offset, caught_up);
        synced_caught_up |= caught_up;
        // Until the first pass as caught up, look again every so often: catching up is not an
        // image change of its own.
        if synced_caught_up {
            if images.changed().await.is_err() {
                return;
            }
        } else {
            let wait = async {
                tokio::select! {
                    _ = images.changed() => {}
                    _ = view.wait_caught_up() => {}
                }
            };
            let _ = tokio::time::timeout(std::time::Duration::from_millis(200), wait).await;
        }
    }
}

/// One partition as clients are told of it (Metadata, DescribeTopicPartitions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionInfo {
    pub index: i32,
    /// -1: no leader.
    pub leader: i32,
    pub leader_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    /// Replicas on brokers that are fenced or not registered.
    pub offline: Vec<i32>,
    pub eligible_leader_replicas: Vec<i32>,
    pub last_known_elr: Vec<i32>,
}

/// A topic as clients are told of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicInfo {
    pub name: String,
    pub id: uuid::Uuid,
    pub internal: bool,
    pub partitions: Vec<PartitionInfo>,
}

/// A live broker's client endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerInfo {
    pub id: i32,
    pub host: String,
    pub port: u16,
    pub rack: Option<String>,
}

fn from_image(image: &MetadataImage, topic: &crate::cluster::image::TopicState) -> TopicInfo {
    let online = |b: &i32| image.brokers.get(b).is_some_and(|r| !r.fenced);
    TopicInfo {
        name: topic.name.clone(),
        id: topic.id,
        internal: topic.name.starts_with("__"),
        partitions: topic
            .partitions
            .iter()
            .map(|(i, p)| PartitionInfo {
                index: *i,
                leader: p.leader,
                leader_epoch: p.leader_epoch,
                replicas: p.replicas.clone(),
                isr: p.isr.clone(),
                offline: p.replicas.iter().copied().filter(|b| !online(b)).collect(),
                eligible_leader_replicas: p.eligible_leader_replicas.clone(),
                last_known_elr: p.last_known_elr.clone(),
            })
            .collect(),
    }
}

fn from_local(broker: &Broker, topic: &super::Topic) -> TopicInfo {
    let me = broker.node_id;
    TopicInfo {
        name: topic.name.to_string(),
        id: topic.id,
        internal: topic.internal,
        partitions: topic
            .partitions
            .iter()
            .map(|p| PartitionInfo {
                index: p.index,
                leader: me,
                leader_epoch: p.leader_epoch(),
                replicas: vec![me],
                isr: vec![me],
                offline: vec![],
                eligible_leader_replicas: vec![],
                last_known_elr: vec![],
            })
            .collect(),
    }
}

impl Broker {
    /// A topic by name: from the metadata image in a cluster, else from the local topics.
    pub fn topic_info(&self, name: &str) -> Option<TopicInfo> {
        match self.cluster() {
            Some(view) => {
                let image = view.image();
                let id = image.topic_ids.get(name)?;
                image.topics.get(id).map(|t| from_image(&image, t))
            }
            None => self.topic(name).map(|t| from_local(self, &t)),
        }
    }

    /// A topic by id.
    pub fn topic_info_by_id(&self, id: uuid::Uuid) -> Option<TopicInfo> {
        match self.cluster() {
            Some(view) => {
                let image = view.image();
                image.topics.get(&id).map(|t| from_image(&image, t))
            }
            None => self.topic_by_id(id).map(|t| from_local(self, &t)),
        }
    }

    /// Every topic, by name.
    pub fn all_topic_infos(&self) -> Vec<TopicInfo> {
        match self.cluster() {
            Some(view) => {
                let image = view.image();
                image.topic_ids.values().filter_map(|id| image.topics.get(id)).map(|t| from_image(&image, t)).collect()
            }
            None => self.all_topics().iter().map(|t| from_local(self, t)).collect(),
        }
    }

    /// The brokers clients may talk to, by their endpoints on `listener` (the one the request
    /// came in on): every unfenced broker of the cluster that has such a listener, or this one.
    /// Unknown listener names (requests from tests that bypass the network) get each broker's
    /// first endpoint.
    pub fn live_brokers(&self, listener: &str) -> Vec<BrokerInfo> {
        match self.cluster() {
            Some(view) => view.live_brokers(listener).into_iter().map(|(id, host, port, rack)| BrokerInfo { id, host, port, rack }).collect(),
            None => {
                let advertised = self.advertised();
                let e = advertised.iter().find(|e| e.name == listener).or_else(|| advertised.first());
                e.map(|e| BrokerInfo { id: self.node_id, host: e.host.clone(), port: e.port, rack: None }).into_iter().collect()
            }
        }
    }

    /// Why this broker may not serve `topic`-`partition` as its leader: None when it leads it
    /// (always on a single node), else the error for the client and the leader it should ask
    /// (id and epoch, for KIP-951's current-leader hints), or UNKNOWN_TOPIC_OR_PARTITION.
    pub fn not_leader(&self, topic: &str, partition: i32) -> Option<NotLeader> {
        let view = self.cluster()?;
        match view.partition(topic, partition) {
            Some(p) if p.leader == self.node_id => None,
            Some(p) => Some(NotLeader { leader: p.leader, leader_epoch: p.leader_epoch }),
            None => Some(NotLeader { leader: -1, leader_epoch: -1 }),
        }
    }

    /// Whether the image lists this broker as a replica of `topic`-`partition`.
    pub fn is_replica(&self, topic: &str, partition: i32) -> bool {
        self.cluster().and_then(|view| view.partition(topic, partition)).is_some_and(|p| p.replicas.contains(&self.node_id))
    }

    /// A topic's config overrides: the image's in a cluster, else the local topic's; None when
    /// the topic does not exist.
    pub fn topic_overrides(&self, name: &str) -> Option<BTreeMap<String, String>> {
        match self.cluster() {
            Some(view) => {
                let image = view.image();
                image.topic_ids.get(name)?;
                Some(image.configs.get(&(TOPIC_RESOURCE, name.to_string())).cloned().unwrap_or_default())
            }
            None => self.topic(name).map(|t| t.overrides.clone()),
        }
    }

    /// The dynamic configs the image holds for a broker entity ("" is the cluster default).
    pub fn image_broker_configs(&self, entity: &str) -> BTreeMap<String, String> {
        self.cluster()
            .and_then(|view| view.image().configs.get(&(BROKER_RESOURCE, entity.to_string())).cloned())
            .unwrap_or_default()
    }

    /// Whether a partition exists (in the image, in a cluster).
    pub fn partition_exists(&self, topic: &str, index: i32) -> bool {
        match self.cluster() {
            Some(view) => view.partition(topic, index).is_some(),
            None => self.partition(topic, index).is_some(),
        }
    }

    /// A topic's id by name (the image's in a cluster).
    pub fn topic_id_of(&self, name: &str) -> Option<uuid::Uuid> {
        match self.cluster() {
            Some(view) => view.image().topic_ids.get(name).copied(),
            None => self.topic(name).map(|t| t.id),
        }
    }

    /// Every topic's partition count (what consumer-group assignors see). Internal topics are
    /// included, as Kafka includes them: a member subscribing to `__consumer_offsets` by name,
    /// or with a regex matching it, is assigned its partitions.
    pub fn partition_counts(&self) -> BTreeMap<String, i32> {
        match self.cluster() {
            Some(view) => {
                let image = view.image();
                image.topics.values().map(|t| (t.name.clone(), t.partitions.len() as i32)).collect()
            }
            None => self.all_topics().iter().map(|t| (t.name.to_string(), t.partitions.len() as i32)).collect(),
        }
    }

    /// A topic's name from its id (the image's in a cluster).
    pub fn topic_name_of(&self, id: uuid::Uuid) -> Option<String> {
        match self.cluster() {
            Some(view) => view.image().topics.get(&id).map(|t| t.name.clone()),
            None => self.topic_by_id(id).map(|t| t.name.to_string()),
        }
    }

    /// In a cluster, `/healthz`: whether this broker knows the active controller and is
    /// registered and unfenced, and its membership as JSON. None on a single node.
    pub fn cluster_health(&self) -> Option<(bool, String)> {
        let view = self.cluster()?;
        let image = view.image();
        let controller = view.controller_id();
        let epoch = view.broker_epoch();
        let registered = image.brokers.get(&self.node_id).filter(|b| b.epoch == epoch);
        let fenced = registered.is_none_or(|b| b.fenced);
        let body = serde_json::json!({
            "node_id": self.node_id,
            "controller": (controller >= 0).then_some(controller),
            "broker_epoch": epoch,
            "fenced": fenced,
            "metadata_offset": image.offset,
            "live_brokers": image.brokers.values().filter(|b| !b.fenced).count(),
        });
        Some((controller >= 0 && epoch >= 0 && !fenced, body.to_string()))
    }

    /// A live broker's endpoint on `listener` by id.
    pub fn broker_info(&self, id: i32, listener: &str) -> Option<BrokerInfo> {
        self.live_brokers(listener).into_iter().find(|b| b.id == id)
    }
}

/// See [`Broker::not_leader`]; `leader` -1 with epoch -1: the partition does not exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotLeader {
    pub leader: i32,
    pub leader_epoch: i32,
}

impl NotLeader {
    pub fn unknown(&self) -> bool {
        self.leader_epoch < 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::records::{MetadataRecord, Partition, PartitionChange};
    use crate::config::BrokerConfig;
    use uuid::Uuid;

    fn broker(dir: &std::path::Path) -> Broker {
        let pairs = [("log.dirs".to_string(), dir.display().to_string()), ("log.io.backend".into(), "std".into())];
        Broker::open(BrokerConfig::from_pairs(pairs).unwrap().config).unwrap()
    }

    /// A pass with nothing remembered: every topic's roles are set.
    fn sync_topics(b: &Broker, image: &MetadataImage, caught_up: bool) -> BTreeMap<i32, Vec<Followed>> {
        LocalSync::default().sync(b, image, caught_up)
    }

    fn apply(image: &mut MetadataImage, records: Vec<MetadataRecord>) {
        for r in records {
            let offset = image.offset + 1;
            image.apply(offset, &r).unwrap();
        }
    }

    fn topic(name: &str, id: Uuid, replicas: &[Vec<i32>]) -> Vec<MetadataRecord> {
        let mut out = vec![MetadataRecord::Topic { name: name.into(), topic_id: id }];
        out.extend(replicas.iter().enumerate().map(|(i, r)| MetadataRecord::Partition(Partition::new(id, i as i32, r.clone()))));
        out
    }

    #[test]
    fn local_logs_follow_the_image_and_go_only_once_the_broker_has_caught_up() {
        let dir = tempfile::tempdir().unwrap();
        let b = broker(dir.path());
        let (orders, elsewhere) = (Uuid::new_v4(), Uuid::new_v4());
        let mut image = MetadataImage::default();
        apply(&mut image, topic("orders", orders, &[vec![1, 2], vec![2, 1]]));
        apply(&mut image, topic("elsewhere", elsewhere, &[vec![2, 3]]));
        apply(
            &mut image,
            vec![MetadataRecord::Config { resource_type: TOPIC_RESOURCE, resource_name: "orders".into(), name: "retention.ms".into(), value: Some("60000".into()) }],
        );
        sync_topics(&b, &image, false);
        let local = b.topic("orders").expect("a topic this broker holds replicas of");
        assert_eq!((local.id, local.partitions.len()), (orders, 2));
        assert_eq!(local.overrides.get("retention.ms").map(String::as_str), Some("60000"));
        assert!(b.topic("elsewhere").is_none(), "no local logs for a topic without a replica here");

        // Leadership in a later epoch: appends carry it.
        let mut change = PartitionChange::new(orders, 1);
        change.leader = 1;
        apply(&mut image, vec![MetadataRecord::PartitionChange(change)]);
        sync_topics(&b, &image, false);
        assert_eq!(b.topic("orders").unwrap().partition(1).unwrap().leader_epoch(), 1);

        // Deleted and created again under a new id: nothing is removed before the broker has
        // caught up (its image may be behind), then the old logs make way for the new topic.
        apply(&mut image, vec![MetadataRecord::RemoveTopic { topic_id: orders }]);
        sync_topics(&b, &image, false);
        assert_eq!(b.topic("orders").map(|t| t.id), Some(orders));
        let again = Uuid::new_v4();
        apply(&mut image, topic("orders", again, &[vec![1]]));
        sync_topics(&b, &image, false);
        assert_eq!(b.topic("orders").map(|t| t.id), Some(orders), "kept until caught up");
        sync_topics(&b, &image, true);
        let local = b.topic("orders").unwrap();
        assert_eq!((local.id, local.partitions.len()), (again, 1));

        // Gone from the image: removed, files too.
        apply(&mut image, vec![MetadataRecord::RemoveTopic { topic_id: again }]);
        sync_topics(&b, &image, true);
        assert!(b.topic("orders").is_none());
        assert!(!dir.path().join("orders-0").exists());
    }

    #[test]
    fn an_image_change_moves_the_roles_of_the_topics_it_changed_and_keeps_every_followed_partition() {
        let dir = tempfile::tempdir().unwrap();
        let b = broker(dir.path());
        let (a, c) = (Uuid::new_v4(), Uuid::new_v4());
        let mut image = MetadataImage::default();
        apply(&mut image, topic("a", a, &[vec![1, 2]]));
        apply(&mut image, topic("c", c, &[vec![1, 2]]));
        let mut sync = LocalSync::default();
        assert!(sync.sync(&b, &image, true).is_empty(), "leading everything, following nothing");
        let part = |name: &str| b.topic(name).unwrap().partition(0).unwrap().clone();
        assert!(part("a").is_leader() && part("c").is_leader());

        // Broker 2 takes over a: only a changes role.
        let mut change = PartitionChange::new(a, 0);
        change.leader = 2;
        apply(&mut image, vec![MetadataRecord::PartitionChange(change)]);
        let follow = sync.sync(&b, &image, true);
        assert!(!part("a").is_leader() && part("a").leader_epoch() == 1);
        assert!(part("c").is_leader() && part("c").leader_epoch() == 0);
        assert_eq!(follow.get(&2).map(|f| f.iter().map(|p| p.partition.topic.to_string()).collect::<Vec<_>>()), Some(vec!["a".to_string()]));

        // A change elsewhere leaves a as it is, and a is still among the partitions to follow
        // (the fetchers take the whole set from each pass).
        apply(&mut image, topic("other", Uuid::new_v4(), &[vec![2]]));
        let follow = sync.sync(&b, &image, true);
        assert_eq!(follow.get(&2).map(Vec::len), Some(1));
        assert!(!part("a").is_leader() && part("c").is_leader());

        // The same passes from scratch give the same roles.
        let full = sync_topics(&b, &image, true);
        assert_eq!(full.get(&2).map(Vec::len), Some(1));
        assert!(!part("a").is_leader() && part("c").is_leader());
    }
}
