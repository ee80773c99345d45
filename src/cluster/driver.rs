//! The active controller: the thin driver that feeds [`Controller`]'s decisions (a pure core)
//! into the metadata quorum. Every decision is made and proposed under one lock, from an image
//! that holds every committed record, so decisions never interleave (as in Kafka's
//! single-threaded `QuorumController`): a broker's epoch is the offset its registration record
//! gets, and no other record can take that offset first.
//!
//! Leadership: the driver acts only while this node leads the quorum. Each time it becomes the
//! leader (a new term) it starts a fresh [`Controller`] — every broker's session starts anew,
//! so nobody is fenced for the time the controllers took to fail over — and waits until its
//! image holds everything committed before it decides anything. On a node that does not lead,
//! every request is answered NOT_CONTROLLER, for the caller to find the leader.
//!
//! An empty log gets its bootstrap records (the `metadata.version` level and this
//! controller's registration) as soon as a leader has caught up, before any other decision.
//! Timers (every [`TICK`] while leading): brokers whose session expired are fenced, and a
//! controller whose registration is missing writes it.
//!
//! # Failure behaviour
//! A proposal that fails (leadership lost mid-way, quorum unreachable) is answered
//! NOT_CONTROLLER or REQUEST_TIMED_OUT; nothing half-done stays behind since a batch commits
//! whole or not at all. Timer work that fails is logged and retried at the next tick.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Mutex;
use uuid::Uuid;

use super::controller::{codes, placement_brokers, unclean_enabled, ELR_FEATURE, AlterIsr, Controller, Election, Heartbeat, HeartbeatReply, Refusal, Registration};
use super::image::MetadataImage;
use super::placement::Start;
use super::quorum::{MetadataQuorum, QuorumError};
use super::records::{MetadataRecord, RegisterController, VersionedRecord};

/// How often the active controller looks at sessions and bootstrap records.
pub const TICK: Duration = Duration::from_millis(250);
/// Kafka 4.4's `metadata.version` level, which sluice's record versions (`records.rs`) follow.
pub const METADATA_VERSION: i16 = 33;

struct Leading {
    /// The term this node leads in, once its image has caught up in it.
    term: Option<u64>,
    core: Controller,
}

/// The active controller's driver over a quorum `Q`.
pub struct ActiveController<Q> {
    quorum: Arc<Q>,
    registration: RegisterController,
    /// What the log dirs held before this metadata log existed (a single node's topics and
    /// configs), written with the bootstrap records of an empty log.
    imported: Vec<VersionedRecord>,
    session_timeout_ms: i64,
    /// `auto.leader.rebalance.enable`: every this many ms, with this imbalance percentage.
    rebalance: Option<(i64, i64)>,
    last_rebalance_ms: std::sync::atomic::AtomicI64,
    /// `unclean.leader.election.enable` in this controller's server.properties: the default
    /// for topics without their own and without a cluster-wide dynamic one.
    unclean_default: bool,
    /// `min.insync.replicas` in this controller's server.properties, likewise.
    min_isr_default: i32,
    started: Instant,
    state: Mutex<Leading>,
}

impl<Q: MetadataQuorum> ActiveController<Q> {
    pub fn new(quorum: Arc<Q>, registration: RegisterController, session_timeout_ms: i64) -> ActiveController<Q> {
        ActiveController {
            quorum,
            registration,
            imported: Vec::new(),
            session_timeout_ms,
            rebalance: None,
            last_rebalance_ms: std::sync::atomic::AtomicI64::new(0),
            unclean_default: false,
            min_isr_default: 1,
            started: Instant::now(),
            state: Mutex::new(Leading { term: None, core: Controller::new(session_timeout_ms) }),
        }
    }

    /// Writes `records` after the bootstrap records of an empty log, once: what the log dirs held
    /// before they joined a metadata quorum (see `broker::cluster::local_state_records`). A log
    /// that already has its bootstrap records ignores them.
    pub fn with_imported(mut self, records: Vec<VersionedRecord>) -> ActiveController<Q> {
        self.imported = records;
        self
    }

    /// Gives partitions back to their preferred leaders every `interval_ms` where a broker's
    /// share of them led elsewhere is over `imbalance_percent` (`auto.leader.rebalance.enable`).
    pub fn with_leader_rebalance(mut self, interval_ms: i64, imbalance_percent: i64) -> ActiveController<Q> {
        self.rebalance = Some((interval_ms, imbalance_percent));
        self
    }

    /// `unclean.leader.election.enable` for topics that set none (see [`Controller::elect_unclean`]).
    pub fn with_unclean_default(mut self, enabled: bool) -> ActiveController<Q> {
        self.unclean_default = enabled;
        self
    }

    /// `min.insync.replicas` for topics that set none (the ISR floor of eligible leader
    /// replicas, see [`Controller`]).
    pub fn with_min_isr_default(mut self, min_isr: i32) -> ActiveController<Q> {
        self.min_isr_default = min_isr;
        self
    }

    pub fn quorum(&self) -> &Arc<Q> {
        &self.quorum
    }

    /// A monotonic clock for sessions (only differences matter).
    fn now_ms(&self) -> i64 {
        self.started.elapsed().as_millis() as i64
    }

    /// Takes the decision lock if this node leads, catching up first in a new term.
    async fn lead(&self) -> Result<tokio::sync::MutexGuard<'_, Leading>, Refusal> {
        let status = self.quorum.status();
        if status.leader != Some(status.node_id) {
            return Err(not_controller(status.leader));
        }
        let mut state = self.state.lock().await;
        if state.term != Some(status.term) {
            self.quorum.leader_caught_up().await.map_err(refusal)?;
            // An empty log gets its bootstrap records before any other decision, so they are
            // always its first records (and no broker epoch is 0).
            let missing = bootstrap(&self.image(), &self.registration, &self.imported);
            if !missing.is_empty() {
                self.propose(missing).await?;
            }
            tracing::info!(term = status.term, "this node is the active controller");
            state.core = Controller::new(self.session_timeout_ms).with_min_isr_default(self.min_isr_default);
            state.term = Some(status.term);
        }
        Ok(state)
    }

    fn image(&self) -> Arc<MetadataImage> {
        self.quorum.image().borrow().clone()
    }

    async fn propose(&self, records: Vec<VersionedRecord>) -> Result<i64, Refusal> {
        self.quorum.propose(records).await.map_err(refusal)
    }

    /// BrokerRegistration: the broker's new epoch.
    pub async fn register(&self, req: &Registration) -> Result<i64, Refusal> {
        let mut state = self.lead().await?;
        let now = self.now_ms();
        let (records, epoch) = state.core.register(&self.image(), req, now)?;
        let offset = self.propose(records).await?;
        debug_assert_eq!(offset, epoch, "a registration record's offset is the broker's epoch");
        tracing::info!(broker = req.broker_id, epoch, "broker registered");
        Ok(epoch)
    }

    /// BrokerHeartbeat: the broker's state once the heartbeat's records are committed.
    pub async fn heartbeat(&self, hb: &Heartbeat) -> Result<HeartbeatReply, Refusal> {
        let mut state = self.lead().await?;
        let now = self.now_ms();
        let (records, reply) = state.core.heartbeat(&self.image(), hb, now)?;
        if !records.is_empty() {
            self.propose(records).await?;
        }
        Ok(reply)
    }

    /// CreateTopics (defaults already resolved): each topic's id, or why it was refused; nothing
    /// is written when `validate_only`. The topics one request creates go into the metadata log
    /// together, in proposals of at most [`MAX_RECORDS_PER_PROPOSAL`] records (a proposal that
    /// fails refuses the topics it held, with the quorum's error), so a request of a thousand
    /// topics costs a few commits and image changes, not a thousand.
    pub async fn create_topics(&self, topics: &[NewTopic], validate_only: bool) -> Vec<Result<Uuid, Refusal>> {
        let state = match self.lead().await {
            Ok(s) => s,
            Err(r) => return topics.iter().map(|_| Err(r.clone())).collect(),
        };
        // Each topic is checked against the image with the ones before it in the request, so a
        // name given twice is refused the second time.
        let mut scratch = (*self.image()).clone();
        let brokers = placement_brokers(&scratch).len();
        let mut results = Vec::with_capacity(topics.len());
        let mut made: Vec<(usize, Vec<VersionedRecord>)> = Vec::new();
        for (i, t) in topics.iter().enumerate() {
            let records = state.core.create_topic(&scratch, &t.name, t.partitions, t.replication_factor, &t.assignments, &t.configs, Start::random(brokers));
            // Made from this image, the records apply to it (a record that did not would refuse
            // its topic, and later topics would be checked against the records before it).
            let records = records.and_then(|records| {
                for r in &records {
                    scratch
                        .apply(scratch.offset + 1, &r.record)
                        .map_err(|e| Refusal { code: codes::INVALID_REQUEST, message: e.to_string() })?;
                }
                Ok(records)
            });
            match records {
                Ok(records) => match records.first().map(|r| &r.record) {
                    Some(MetadataRecord::Topic { topic_id, .. }) => {
                        results.push(Ok(*topic_id));
                        made.push((i, records));
                    }
                    _ => results.push(Err(Refusal { code: codes::INVALID_REQUEST, message: "no topic record was made".into() })),
                },
                Err(r) => results.push(Err(r)),
            }
        }
        if validate_only {
            return results;
        }
        let mut made = made.into_iter().peekable();
        while made.peek().is_some() {
            let (mut held, mut batch) = (Vec::new(), Vec::new());
            while let Some((i, records)) = made.next_if(|(_, r)| batch.is_empty() || batch.len() + r.len() <= MAX_RECORDS_PER_PROPOSAL) {
                held.push(i);
                batch.extend(records);
            }
            match self.propose(batch).await {
                Ok(_) => {
                    for i in held {
                        let t = &topics[i];
                        tracing::info!(topic = %t.name, partitions = t.partitions.max(t.assignments.len() as i32), "created topic");
                    }
                }
                Err(r) => {
                    for i in held {
                        results[i] = Err(r.clone());
                    }
                }
            }
        }
        results
    }

    /// CreatePartitions of one topic.
    pub async fn create_partitions(&self, name: &str, count: i32, assignments: &[Vec<i32>], validate_only: bool) -> Result<(), Refusal> {
        let state = self.lead().await?;
        let image = self.image();
        let records = state.core.create_partitions(&image, name, count, assignments, Start::random(placement_brokers(&image).len()))?;
        if !validate_only {
            self.propose(records).await?;
            tracing::info!(topic = name, partitions = count, "added partitions");
        }
        Ok(())
    }

    /// IncrementalAlterConfigs of one topic or broker entity (SET and DELETE only).
    pub async fn alter_configs(&self, resource_type: i8, name: &str, changes: &[(String, Option<String>)], validate_only: bool) -> Result<(), Refusal> {
        let state = self.lead().await?;
        let records = state.core.alter_configs(&self.image(), resource_type, name, changes)?;
        if !validate_only && !records.is_empty() {
            self.propose(records).await?;
            tracing::info!(resource_type, name, changes = changes.len(), "changed configs");
        }
        Ok(())
    }

    /// DeleteTopics of one topic.
    pub async fn delete_topic(&self, name: &str) -> Result<(), Refusal> {
        let state = self.lead().await?;
        let records = state.core.delete_topic(&self.image(), name)?;
        self.propose(records).await?;
        tracing::info!(topic = name, "deleted topic");
        Ok(())
    }

    /// AllocateProducerIds: the first id of a new block for the broker.
    pub async fn allocate_producer_ids(&self, broker_id: i32, broker_epoch: i64) -> Result<i64, Refusal> {
        let state = self.lead().await?;
        let (records, start) = state.core.allocate_producer_ids(&self.image(), broker_id, broker_epoch)?;
        self.propose(records).await?;
        tracing::debug!(broker = broker_id, start, "allocated a producer id block");
        Ok(start)
    }

    /// ElectLeaders (see `Controller::elect_leaders`).
    pub async fn elect_leaders(&self, election_type: i8, partitions: Option<&[(String, i32)]>) -> Result<Vec<Election>, Refusal> {
        let state = self.lead().await?;
        let (records, results) = state.core.elect_leaders(&self.image(), election_type, partitions);
        if !records.is_empty() {
            self.propose(records).await?;
            tracing::info!(partitions = results.iter().filter(|e| e.code == 0).count(), election_type, "elected leaders on request");
        }
        Ok(results)
    }

    /// AlterPartition: each partition's outcome, in request order (an empty record list for a
    /// partition whose ISR is already the one asked for).
    pub async fn alter_partitions(&self, reqs: &[AlterIsr]) -> Result<Vec<Result<(), i16>>, Refusal> {
        let state = self.lead().await?;
        let mut image = (*self.image()).clone();
        let mut records = Vec::new();
        let mut outcomes = Vec::with_capacity(reqs.len());
        for req in reqs {
            match state.core.alter_partition(&image, req) {
                Ok(rs) => {
                    // Later partitions of the request are checked against the image with these.
                    stage(&mut image, &rs)?;
                    records.extend(rs);
                    outcomes.push(Ok(()));
                }
                Err(code) => outcomes.push(Err(code)),
            }
        }
        if !records.is_empty() {
            self.propose(records).await?;
        }
        for (req, o) in reqs.iter().zip(&outcomes) {
            tracing::info!(broker = req.broker_id, topic_id = %req.topic_id, partition = req.partition,
                isr = ?req.new_isr.iter().map(|(b, _)| *b).collect::<Vec<_>>(), outcome = ?o, "AlterPartition");
        }
        Ok(outcomes)
    }

    /// AlterPartitionReassignments: each partition's outcome, in request order; `target` None
    /// cancels. The changes of one request are committed together.
    pub async fn reassign_partitions(&self, reqs: &[(String, i32, Option<Vec<i32>>)], allow_rf_change: bool) -> Result<Vec<Result<(), Refusal>>, Refusal> {
        let state = self.lead().await?;
        let mut image = (*self.image()).clone();
        let mut records = Vec::new();
        let mut outcomes = Vec::with_capacity(reqs.len());
        for (topic, partition, target) in reqs {
            match state.core.reassign(&image, topic, *partition, target.as_deref(), allow_rf_change) {
                Ok(rs) => {
                    stage(&mut image, &rs)?;
                    records.extend(rs);
                    outcomes.push(Ok(()));
                }
                Err(refusal) => outcomes.push(Err(refusal)),
            }
        }
        if !records.is_empty() {
            self.propose(records).await?;
        }
        for ((topic, partition, target), o) in reqs.iter().zip(&outcomes) {
            tracing::info!(topic = %topic, partition, target = ?target, outcome = ?o.as_ref().map_err(|r| r.code), "AlterPartitionReassignments");
        }
        Ok(outcomes)
    }

    /// One timer round; returns whether this node leads.
    pub async fn tick(&self) -> bool {
        let Ok(mut state) = self.lead().await else { return false };
        let image = self.image();
        let mut records = bootstrap(&image, &self.registration, &self.imported);
        records.extend(state.core.expire_sessions(&image, self.now_ms()));
        if records.is_empty() {
            records = state.core.elect_unclean(&image, |topic| unclean_enabled(&image, topic, self.unclean_default));
        }
        if !records.is_empty() {
            if let Err(e) = self.propose(records).await {
                tracing::warn!(error = %e, "the active controller's timer work failed; retrying");
            }
            return true;
        }
        use std::sync::atomic::Ordering;
        if let Some((interval, percent)) = self.rebalance {
            let now = self.now_ms();
            if now - self.last_rebalance_ms.load(Ordering::Acquire) >= interval {
                self.last_rebalance_ms.store(now, Ordering::Release);
                let records = state.core.rebalance_leaders(&image, percent);
                if !records.is_empty() {
                    tracing::info!(partitions = records.len(), "giving partitions back to their preferred leaders");
                    if let Err(e) = self.propose(records).await {
                        tracing::warn!(error = %e, "preferred leader election failed; retrying at the next check");
                    }
                }
            }
        }
        true
    }

    /// Runs the timers until the task is dropped, logging leadership changes.
    pub async fn run(self: Arc<Self>) {
        let mut last_leader = None;
        let mut last_warning = Instant::now();
        loop {
            tokio::time::sleep(TICK).await;
            let status = self.quorum.status();
            if status.leader != last_leader {
                match status.leader {
                    Some(l) => tracing::info!(leader = l, term = status.term, "metadata quorum leader elected"),
                    None => tracing::warn!(term = status.term, "metadata quorum has no leader; retrying"),
                }
                last_leader = status.leader;
                last_warning = Instant::now();
            } else if status.leader.is_none() && last_warning.elapsed() >= NO_LEADER_WARNING {
                let voters: Vec<i32> = status.voters.iter().map(|v| v.id).collect();
                tracing::warn!(term = status.term, ?voters, "metadata quorum still has no leader; retrying");
                last_warning = Instant::now();
            }
            if status.leader == Some(status.node_id) {
                self.tick().await;
            }
        }
    }
}

/// A topic to create, as CreateTopics asks for it (defaults resolved).
#[derive(Debug, Clone, Default)]
pub struct NewTopic {
    pub name: String,
    pub partitions: i32,
    pub replication_factor: i16,
    /// Explicit replicas by partition; empty to place them.
    pub assignments: BTreeMap<i32, Vec<i32>>,
    pub configs: BTreeMap<String, String>,
}

/// The most records one proposal of [`ActiveController::create_topics`] carries (more when a
/// single topic needs more): Kafka's controller refuses operations of more than 10,000 records;
/// the topics of a larger request are committed in several proposals.
pub const MAX_RECORDS_PER_PROPOSAL: usize = 10_000;

/// How often a voter without a leader says so in its log.
pub const NO_LEADER_WARNING: Duration = Duration::from_secs(5);

/// What an empty log lacks: the `metadata.version` and `eligible.leader.replicas.version`
/// levels (with `imported`, what the log dirs held before) and this controller's registration.
fn bootstrap(image: &MetadataImage, registration: &RegisterController, imported: &[VersionedRecord]) -> Vec<VersionedRecord> {
    let mut out = Vec::new();
    if !image.features.contains_key("metadata.version") {
        out.push(VersionedRecord {
            version: 0,
            record: MetadataRecord::FeatureLevel { name: "metadata.version".into(), feature_level: METADATA_VERSION },
        });
        // Eligible leader replicas (KIP-966) are on in a new cluster, as in Kafka 4.1 and later.
        out.push(VersionedRecord {
            version: 0,
            record: MetadataRecord::FeatureLevel { name: ELR_FEATURE.into(), feature_level: 1 },
        });
        if !imported.is_empty() {
            tracing::info!(records = imported.len(), "the metadata log is new: writing what the log dirs already hold into it");
        }
        out.extend(imported.iter().cloned());
    }
    if !image.controllers.contains_key(&registration.controller_id) {
        out.push(VersionedRecord { version: 0, record: MetadataRecord::RegisterController(registration.clone()) });
    }
    out
}

/// Applies records not yet proposed to a scratch copy of the image, so that the later parts of
/// one request are checked against the earlier ones.
fn stage(image: &mut MetadataImage, records: &[VersionedRecord]) -> Result<(), Refusal> {
    for r in records {
        let offset = image.offset + 1;
        image.apply(offset, &r.record).map_err(|e| Refusal { code: codes::UNKNOWN_SERVER_ERROR, message: e.to_string() })?;
    }
    Ok(())
}

fn not_controller(leader: Option<i32>) -> Refusal {
    let message = match leader {
        Some(l) => format!("This controller is not the active controller; the active controller is {l}."),
        None => "This controller is not the active controller; no active controller is known yet.".to_string(),
    };
    Refusal { code: codes::NOT_CONTROLLER, message }
}

fn refusal(e: QuorumError) -> Refusal {
    match e {
        QuorumError::NotLeader { leader } => not_controller(leader),
        QuorumError::Invalid(e) => Refusal { code: codes::INVALID_REQUEST, message: e.to_string() },
        other => Refusal { code: codes::REQUEST_TIMED_OUT, message: other.to_string() },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::quorum::{QuorumStatus, VoterStatus};
    use parking_lot::Mutex as PlMutex;
    use tokio::sync::watch;

    /// A one-node quorum in memory: proposals apply at once.
    struct Local {
        image: watch::Sender<Arc<MetadataImage>>,
        leading: PlMutex<bool>,
        term: PlMutex<u64>,
        proposals: PlMutex<usize>,
    }

    impl Local {
        fn new() -> Arc<Local> {
            Arc::new(Local {
                image: watch::channel(Arc::new(MetadataImage::default())).0,
                leading: PlMutex::new(true),
                term: PlMutex::new(1),
                proposals: PlMutex::new(0),
            })
        }
    }

    impl MetadataQuorum for Local {
        async fn propose(&self, records: Vec<VersionedRecord>) -> Result<i64, QuorumError> {
            if !*self.leading.lock() {
                return Err(QuorumError::NotLeader { leader: Some(2) });
            }
            *self.proposals.lock() += 1;
            let mut image = (**self.image.borrow()).clone();
            for r in &records {
                let offset = image.offset + 1;
                image.apply(offset, &r.record).map_err(QuorumError::Invalid)?;
            }
            let offset = image.offset;
            self.image.send_replace(Arc::new(image));
            Ok(offset)
        }
        fn image(&self) -> watch::Receiver<Arc<MetadataImage>> {
            self.image.subscribe()
        }
        fn status(&self) -> QuorumStatus {
            let leading = *self.leading.lock();
            QuorumStatus {
                node_id: 1,
                leader: Some(if leading { 1 } else { 2 }),
                term: *self.term.lock(),
                last_log_index: None,
                applied_index: None,
                voters: vec![VoterStatus { id: 1, log_end_offset: None, millis_since_ack: None }],
            }
        }
        async fn leader_caught_up(&self) -> Result<(), QuorumError> {
            Ok(())
        }
    }

    fn registration() -> RegisterController {
        RegisterController { controller_id: 1, incarnation_id: Uuid::new_v4(), zk_migration_ready: false, endpoints: vec![], features: vec![] }
    }

    fn broker(id: i32) -> Registration {
        Registration { broker_id: id, incarnation_id: Uuid::new_v4(), endpoints: vec![], features: vec![], rack: None, previous_broker_epoch: -1 }
    }

    #[tokio::test]
    async fn the_first_tick_writes_the_bootstrap_records_once() {
        let q = Local::new();
        let c = ActiveController::new(q.clone(), registration(), 1000);
        assert!(c.tick().await);
        let image = q.image().borrow().clone();
        assert_eq!(image.features.get("metadata.version"), Some(&METADATA_VERSION));
        assert_eq!(image.features.get(ELR_FEATURE), Some(&1), "a new cluster has eligible leader replicas on");
        assert!(image.controllers.contains_key(&1));
        let offset = image.offset;
        c.tick().await;
        assert_eq!(q.image().borrow().offset, offset, "nothing more to write");
    }

    #[tokio::test]
    async fn a_broker_epoch_is_the_offset_of_its_registration_record_after_the_bootstrap_records() {
        let q = Local::new();
        let c = ActiveController::new(q.clone(), registration(), 1000);
        // No timer has run: the first decision writes the bootstrap records first.
        let epoch = c.register(&broker(7)).await.unwrap();
        assert_eq!(epoch, 3, "offsets 0 to 2 are metadata.version, eligible.leader.replicas.version and the controller's registration");
        assert_eq!(epoch, q.image().borrow().offset);
        assert_eq!(q.image().borrow().brokers[&7].epoch, epoch);
        assert!(q.image().borrow().brokers[&7].fenced);
        let reply = c
            .heartbeat(&Heartbeat { broker_id: 7, broker_epoch: epoch, metadata_offset: epoch, want_shutdown: false })
            .await
            .unwrap();
        assert!(!reply.is_fenced);
        assert!(!q.image().borrow().brokers[&7].fenced);
    }

    fn new_topic(name: &str, partitions: i32) -> NewTopic {
        NewTopic { name: name.into(), partitions, replication_factor: 1, ..Default::default() }
    }

    #[tokio::test]
    async fn the_topics_of_one_create_topics_are_committed_together_and_a_refused_one_holds_none_back() {
        let q = Local::new();
        let c = ActiveController::new(q.clone(), registration(), 1000);
        let epoch = c.register(&broker(7)).await.unwrap();
        c.heartbeat(&Heartbeat { broker_id: 7, broker_epoch: epoch, metadata_offset: epoch, want_shutdown: false }).await.unwrap();
        let before = *q.proposals.lock();
        let topics = [new_topic("a", 3), new_topic("none", 0), new_topic("b", 2), new_topic("a", 1)];
        let results = c.create_topics(&topics, false).await;
        let codes: Vec<i16> = results.iter().map(|r| r.as_ref().map(|_| 0).unwrap_or_else(|e| e.code)).collect();
        assert_eq!(codes, vec![0, codes::INVALID_PARTITIONS, 0, codes::TOPIC_ALREADY_EXISTS]);
        assert_eq!(*q.proposals.lock() - before, 1, "one commit for the request");
        let image = q.image().borrow().clone();
        assert_eq!(image.topic("a").map(|t| t.partitions.len()), Some(3));
        assert_eq!(image.topic("b").map(|t| t.partitions.len()), Some(2));
        assert_eq!(image.topic_ids.get("a").copied(), results[0].clone().ok());
        assert!(image.topic("none").is_none());

        // validate_only writes nothing; a request of more records than one proposal takes is
        // committed in several.
        assert!(c.create_topics(&[new_topic("c", 1)], true).await[0].is_ok());
        assert!(q.image().borrow().topic("c").is_none());
        let before = *q.proposals.lock();
        let big = [new_topic("big1", 6_000), new_topic("big2", 6_000)];
        assert!(c.create_topics(&big, false).await.iter().all(Result::is_ok));
        assert_eq!(*q.proposals.lock() - before, 2);
    }

    #[tokio::test]
    async fn a_controller_that_does_not_lead_answers_not_controller_naming_the_leader() {
        let q = Local::new();
        *q.leading.lock() = false;
        let c = ActiveController::new(q.clone(), registration(), 1000);
        let err = c.register(&broker(7)).await.unwrap_err();
        assert_eq!(err.code, codes::NOT_CONTROLLER);
        assert!(err.message.contains("active controller is 2"), "{}", err.message);
        assert!(!c.tick().await);
        assert_eq!(q.image().borrow().offset, -1, "a follower writes nothing");
    }

    #[tokio::test]
    async fn a_silent_broker_is_fenced_after_its_session_and_a_new_term_starts_sessions_afresh() {
        let q = Local::new();
        let c = ActiveController::new(q.clone(), registration(), 200);
        c.tick().await;
        let epoch = c.register(&broker(7)).await.unwrap();
        c.heartbeat(&Heartbeat { broker_id: 7, broker_epoch: epoch, metadata_offset: epoch, want_shutdown: false }).await.unwrap();
        tokio::time::sleep(Duration::from_millis(250)).await;
        // A new term: the session starts over, so the broker is not fenced yet.
        *q.term.lock() = 2;
        c.tick().await;
        assert!(!q.image().borrow().brokers[&7].fenced);
        tokio::time::sleep(Duration::from_millis(250)).await;
        c.tick().await;
        assert!(q.image().borrow().brokers[&7].fenced, "fenced once its session expired");
    }
}
