//! The transaction coordinator as the broker runs it: the [`TxnCache`] of the transactional ids
//! in `__transaction_state`, each decision of [`TxnMetadata`] written there before it counts,
//! and the markers that end a transaction in each of its partitions.
//!
//! # Flow of one transaction (transactions v1, KIP-98)
//! InitProducerId writes the id's new epoch; AddPartitionsToTxn writes the partitions it adds
//! (the transaction is then Ongoing); EndTxn writes PrepareCommit or PrepareAbort and is answered
//! once that record is replicated: the outcome is decided. A task then writes the commit or abort
//! marker into every partition of the transaction (here, as leader of each,
//! [`crate::replication::Partition::append_marker`]) and finally CompleteCommit or
//! CompleteAbort, after which the id may begin its next transaction. Until then its requests
//! get CONCURRENT_TRANSACTIONS, which clients retry.
//!
//! # Invariants
//! - A transition counts (in the cache) only once its record is below the high watermark of its
//!   `__transaction_state` partition; a write that fails or times out is abandoned and the
//!   client gets COORDINATOR_NOT_AVAILABLE (NOT_COORDINATOR if leadership moved).
//! - A decided transaction (PrepareCommit/PrepareAbort) is always carried to its end: by the
//!   task started with the decision, and, if that task failed, by the periodic
//!   [`Txns::tick`], which also does it for the decided transactions a restart replays.
//!   Markers are idempotent for a partition's readers (a second marker of the same outcome
//!   ends nothing), so writing one again after a crash is harmless.
//! - Produce of a transactional batch is accepted only for a partition of the producer's
//!   ongoing transaction at its current epoch ([`Txns::verify`], KIP-890 part 1).
//!
//! # Leadership
//! A broker coordinates the transactional ids of the `__transaction_state` partitions it leads:
//! when it becomes a partition's leader (a new leader epoch) their ids are dropped and replayed
//! from the partition's log ([`Txns::follow_leadership`]); until then their requests get
//! COORDINATOR_LOAD_IN_PROGRESS. That leader epoch is the coordinator epoch markers carry.
//!
//! # Scope
//! Served while this broker is the only one of its cluster (a single node), where it leads
//! every partition a marker goes to. Otherwise FindCoordinator(TRANSACTION) is refused with a
//! message saying so: marker writes to partitions led elsewhere (WriteTxnMarkers to other
//! brokers) are not built yet.
//!
//! # Failure behaviour
//! A marker that cannot be written (a storage error) is retried with backoff, logged each time
//! with the partition and transactional id; a partition that no longer exists is skipped with a
//! log line. A marker refused by the partition (an older epoch, a replaced coordinator) is
//! logged and not retried: a newer coordinator or epoch owns that partition's transaction.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};
use kafka_protocol::ResponseError;
use parking_lot::Mutex;

use super::cache::{partition_for, TxnCache};
use super::config::TxnConfig;
use super::metadata::{check_init, AddDecision, EndDecision, InitDecision, Txn, TxnMetadata, TxnPartition};
use super::records::{encode_key, encode_value};
use super::state::TxnState;
use crate::broker::{error_chain, Broker};
use crate::protocol::control::{EndMarker, MarkerKind};
use crate::replication::{AppendError, Partition, ReplicationWait};

/// The topic the coordinator keeps its state in.
pub const STATE_TOPIC: &str = "__transaction_state";

/// How long a `__transaction_state` write may take to be replicated (Kafka's
/// `transaction.state.log` writes use the request timeout; 5 s as the group coordinator's).
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// Why the coordinator could not do something; each is logged, and a client gets a Kafka code.
#[derive(Debug, thiserror::Error)]
pub enum TxnError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error("creating {STATE_TOPIC}: {0}")]
    CreateStateTopic(String),
    #[error("appending to {STATE_TOPIC}-{partition}")]
    Append {
        partition: i32,
        #[source]
        source: AppendError,
    },
    #[error("{STATE_TOPIC}-{0} is led by another broker")]
    NotLeader(i32),
    #[error("reading {STATE_TOPIC}-{partition} at offset {offset}")]
    Read {
        partition: i32,
        offset: i64,
        #[source]
        source: crate::log::LogError,
    },
    #[error("encoding a record batch for {STATE_TOPIC}: {0}")]
    Encode(String),
}

/// The transaction coordinator service the api handlers call.
pub struct Txns {
    cache: Mutex<TxnCache>,
    /// `__transaction_state` partition -> the leader epoch its ids were loaded in.
    led: Mutex<BTreeMap<i32, i32>>,
    /// Transactional ids whose markers a task is writing now.
    finishing: Mutex<HashSet<String>>,
    pub config: TxnConfig,
}

impl Txns {
    pub fn new(config: TxnConfig) -> Txns {
        Txns { cache: Mutex::new(TxnCache::default()), led: Mutex::new(BTreeMap::new()), finishing: Mutex::new(HashSet::new()), config }
    }

    /// Whether the ids of `__transaction_state` partition `partition` are loaded for leader
    /// epoch `epoch`.
    pub fn is_partition_loaded(&self, partition: i32, epoch: i32) -> bool {
        self.led.lock().get(&partition) == Some(&epoch)
    }

    /// Brings the loaded ids in line with which `__transaction_state` partitions this broker
    /// leads: `leaders` maps each partition to `(leader, leader epoch)`. A partition newly led
    /// (or led in a new epoch) has its ids replayed from its log; one no longer led has its ids
    /// dropped. Decided transactions found are carried to their end by the next [`Txns::tick`].
    pub fn follow_leadership(&self, broker: &Broker, leaders: &BTreeMap<i32, (i32, i32)>) {
        let partitions = leaders.len() as i32;
        let mut led = self.led.lock().clone();
        for (p, now_led) in crate::group::driver::leadership_changes(&led, leaders, broker.node_id) {
            let dropped = self.cache.lock().unload(|id| partition_for(id, partitions) == p);
            let Some(epoch) = now_led else {
                led.remove(&p);
                tracing::info!(partition = p, transactional_ids = dropped, "no longer the coordinator of this __transaction_state partition");
                continue;
            };
            let Some(partition) = broker.topic(STATE_TOPIC).and_then(|t| t.partition(p).cloned()) else { continue };
            match self.replay(&partition, partition.log_end_offset()) {
                Ok(records) => {
                    led.insert(p, epoch);
                    tracing::info!(partition = p, leader_epoch = epoch, records, "loaded the transactional ids of a __transaction_state partition this broker now leads");
                }
                Err(e) => tracing::error!(partition = p, error = %error_chain(&e), "loading transactional ids failed; retrying at the next metadata change"),
            }
        }
        *self.led.lock() = led;
    }

    /// Whether this broker may act for `transactional_id` now: NOT_COORDINATOR unless it leads
    /// the id's `__transaction_state` partition, COORDINATOR_LOAD_IN_PROGRESS until its ids are
    /// replayed, COORDINATOR_NOT_AVAILABLE before the topic exists.
    pub fn not_ready(&self, broker: &Broker, transactional_id: &str) -> Option<ResponseError> {
        let Some(info) = broker.topic_info(STATE_TOPIC) else { return Some(ResponseError::CoordinatorNotAvailable) };
        let p = partition_for(transactional_id, info.partitions.len() as i32);
        if broker.not_leader(STATE_TOPIC, p).is_some() {
            return Some(ResponseError::NotCoordinator);
        }
        let epoch = info.partitions.iter().find(|x| x.index == p).map_or(-1, |x| x.leader_epoch);
        (!self.is_partition_loaded(p, epoch)).then_some(ResponseError::CoordinatorLoadInProgress)
    }

    /// The configs `__transaction_state` is created with (Kafka's).
    pub(crate) fn state_topic_configs(&self) -> BTreeMap<String, String> {
        let mut configs = BTreeMap::new();
        configs.insert("cleanup.policy".to_string(), "compact".to_string());
        configs.insert("compression.type".to_string(), "uncompressed".to_string());
        configs.insert("min.insync.replicas".to_string(), "1".to_string());
        configs.insert("segment.bytes".to_string(), self.config.state_segment_bytes.to_string());
        configs.insert("unclean.leader.election.enable".to_string(), "false".to_string());
        configs
    }

    /// `__transaction_state` as this broker has it (the controller creates it, see
    /// `api::txn::ensure_state_topic`).
    fn state_topic(&self, broker: &Broker) -> Result<Arc<crate::broker::Topic>, TxnError> {
        broker.topic(STATE_TOPIC).ok_or_else(|| TxnError::CreateStateTopic("it does not exist here yet".into()))
    }

    /// The `__transaction_state` partition holding `transactional_id`, if the topic exists.
    fn state_partition(&self, broker: &Broker, transactional_id: &str) -> Option<Arc<Partition>> {
        let topic = broker.topic(STATE_TOPIC)?;
        topic.partition(partition_for(transactional_id, topic.partitions.len() as i32)).cloned()
    }

    /// The coordinator epoch markers carry: the leader epoch of the id's state partition.
    fn coordinator_epoch(&self, broker: &Broker, transactional_id: &str) -> i32 {
        self.state_partition(broker, transactional_id).map_or(0, |p| p.leader_epoch())
    }

    /// Appends `t` as `transactional_id`'s record (a tombstone for Dead); returns where it ends.
    fn append(&self, broker: &Broker, transactional_id: &str, t: &Txn) -> Result<(Arc<Partition>, i64), TxnError> {
        let topic = self.state_topic(broker)?;
        let index = partition_for(transactional_id, topic.partitions.len() as i32);
        let partition = topic.partition(index).cloned().ok_or(TxnError::NotLeader(index))?;
        if !partition.is_leader() {
            return Err(TxnError::NotLeader(index));
        }
        // Value version 1 (flexible) carries the client's transaction version (KIP-890).
        let value = (t.state != TxnState::Dead).then(|| encode_value(&t.to_value(), if t.client_version >= 2 { 1 } else { 0 }));
        let now = broker.now_ms();
        let record = Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: 0,
            sequence: -1,
            timestamp: now,
            key: Some(encode_key(transactional_id)),
            value,
            headers: Default::default(),
        };
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode(&mut buf, [&record], &RecordEncodeOptions { version: 2, compression: Compression::None })
            .map_err(|e| TxnError::Encode(e.to_string()))?;
        let appended = partition.append(buf.freeze(), now).map_err(|source| TxnError::Append { partition: index, source })?;
        Ok((partition, appended.next_offset))
    }

    /// Writes the prepared transition `t` of `transactional_id` and, once it is replicated,
    /// makes it the id's state; on failure the transition is abandoned.
    async fn write(&self, broker: &Broker, transactional_id: &str, t: &Txn) -> Result<(), ResponseError> {
        let outcome = match self.append(broker, transactional_id, t) {
            Ok((partition, end)) => match partition.wait_replicated(end, WRITE_TIMEOUT).await {
                Ok(()) => Ok(()),
                Err(ReplicationWait::NotLeader) => Err(ResponseError::NotCoordinator),
                Err(_) => Err(ResponseError::CoordinatorNotAvailable),
            },
            Err(TxnError::NotLeader(_)) => Err(ResponseError::NotCoordinator),
            Err(e) => {
                tracing::error!(transactional_id, state = ?t.state, error = %error_chain(&e), "writing a transaction state failed");
                Err(ResponseError::CoordinatorNotAvailable)
            }
        };
        let mut cache = self.cache.lock();
        let Some(m) = cache.get_mut(transactional_id) else { return Err(ResponseError::CoordinatorNotAvailable) };
        match outcome {
            Ok(()) => m.complete(t),
            Err(e) => {
                m.abandon();
                Err(e)
            }
        }
    }

    /// A fresh producer id, from the blocks the controller allocates (as an idempotent
    /// producer's, see `api::producer_id`).
    async fn new_producer_id(broker: &Broker) -> Result<i64, ResponseError> {
        let Some(view) = broker.cluster() else {
            let id = broker.allocate_producer_id();
            return id.map_err(|e| {
                tracing::error!(error = %error_chain(&e), "allocating a producer id for a transactional id failed");
                ResponseError::UnknownServerError
            });
        };
        view.allocate_producer_id().await.map_err(|e| {
            tracing::warn!(error = %e, "no producer id block from the controller; the client will retry");
            ResponseError::CoordinatorLoadInProgress
        })
    }

    /// Whether `transactional_id` will need a new producer id for its next InitProducerId or
    /// end: it is new, or its epochs ran out.
    fn needs_producer_id(&self, transactional_id: &str) -> bool {
        self.cache.lock().get(transactional_id).is_none_or(|m| super::metadata::epoch_exhausted(m.txn.producer_epoch))
    }

    /// InitProducerId with a transactional id: the producer id and the epoch it now holds.
    pub async fn init_producer_id(
        &self,
        broker: &Arc<Broker>,
        transactional_id: &str,
        timeout_ms: i32,
        expected: Option<(i64, i16)>,
    ) -> Result<(i64, i16), ResponseError> {
        check_init(transactional_id, timeout_ms, self.config.max_timeout_ms)?;
        if let Some(e) = self.not_ready(broker, transactional_id) {
            return Err(e);
        }
        let now = broker.now_ms();
        // A new id gets a producer id of its own, as does one whose epochs ran out.
        let fresh = if self.needs_producer_id(transactional_id) { Self::new_producer_id(broker).await? } else { -1 };
        let decision = {
            let mut cache = self.cache.lock();
            let m = cache.get_or_insert(TxnMetadata::new(transactional_id, fresh, timeout_ms, now));
            m.init_producer_id(timeout_ms, expected, || fresh, now)
        };
        match decision {
            InitDecision::Refuse(e) => Err(e),
            InitDecision::Write(t) => {
                self.write(broker, transactional_id, &t).await?;
                Ok((t.producer_id, t.producer_epoch))
            }
            InitDecision::FenceAndAbort(epoch) => {
                self.abort_fenced(broker, transactional_id, epoch);
                Err(ResponseError::ConcurrentTransactions)
            }
        }
    }

    /// Aborts `transactional_id`'s ongoing transaction at the fenced `epoch` (its fence is
    /// pending): the abort is written and its markers follow, in a task.
    fn abort_fenced(&self, broker: &Arc<Broker>, transactional_id: &str, epoch: i16) {
        let now = broker.now_ms();
        let decision = {
            let mut cache = self.cache.lock();
            let Some(m) = cache.get_mut(transactional_id) else { return };
            let (producer_id, version) = (m.txn.producer_id, m.txn.client_version);
            // No new producer id: under transactions v2 (not served yet) one would be needed
            // when the abort's bump uses up the epochs.
            let d = m.end_txn(producer_id, epoch, false, false, version, || -1, now);
            if !matches!(d, EndDecision::Write(_)) {
                m.abandon();
            }
            d
        };
        match decision {
            EndDecision::Write(t) => {
                let b = broker.clone();
                let id = transactional_id.to_string();
                tokio::spawn(async move {
                    if b.txns().write(&b, &id, &t).await.is_ok() {
                        b.txns().finish(&b, id, t).await;
                    }
                });
            }
            other => tracing::error!(transactional_id, ?other, "could not abort a fenced transaction"),
        }
    }

    /// AddPartitionsToTxn (v0-3): adds `partitions` to the producer's transaction.
    pub async fn add_partitions(
        &self,
        broker: &Arc<Broker>,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        partitions: &BTreeSet<TxnPartition>,
    ) -> Result<(), ResponseError> {
        if let Some(e) = self.not_ready(broker, transactional_id) {
            return Err(e);
        }
        let now = broker.now_ms();
        let decision = {
            let mut cache = self.cache.lock();
            let m = cache.get_mut(transactional_id).ok_or(ResponseError::InvalidProducerIdMapping)?;
            m.add_partitions(producer_id, epoch, partitions, now, 0)
        };
        match decision {
            AddDecision::Refuse(e) => Err(e),
            AddDecision::AlreadyIn => Ok(()),
            AddDecision::Write(t) => self.write(broker, transactional_id, &t).await,
        }
    }

    /// EndTxn: decides the transaction's outcome and starts writing its markers; answers the
    /// producer id and epoch the client holds afterwards.
    pub async fn end_txn(
        &self,
        broker: &Arc<Broker>,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        commit: bool,
        client_version: i16,
    ) -> Result<(i64, i16), ResponseError> {
        if let Some(e) = self.not_ready(broker, transactional_id) {
            return Err(e);
        }
        let now = broker.now_ms();
        let fresh = if client_version >= 2 && self.needs_producer_id(transactional_id) { Self::new_producer_id(broker).await? } else { -1 };
        let decision = {
            let mut cache = self.cache.lock();
            let m = cache.get_mut(transactional_id).ok_or(ResponseError::InvalidProducerIdMapping)?;
            m.end_txn(producer_id, epoch, commit, true, client_version, || fresh, now)
        };
        match decision {
            EndDecision::Refuse(e) => Err(e),
            EndDecision::Done => {
                let cache = self.cache.lock();
                let m = cache.get(transactional_id).ok_or(ResponseError::CoordinatorNotAvailable)?;
                Ok((m.txn.producer_id, m.txn.producer_epoch))
            }
            EndDecision::Write(t) => {
                self.write(broker, transactional_id, &t).await?;
                let answer = (t.producer_id, t.producer_epoch);
                let b = broker.clone();
                let id = transactional_id.to_string();
                tokio::spawn(async move { b.txns().finish(&b, id, t).await });
                Ok(answer)
            }
        }
    }

    /// Whether producer `producer_id` at `epoch` may write transactional records to `partition`
    /// of `topic` (KIP-890 part 1): it must be in the id's ongoing transaction. Errors as
    /// Kafka's coordinator answers a verification.
    pub fn verify(&self, transactional_id: &str, producer_id: i64, epoch: i16, topic: &str, partition: i32) -> Result<(), ResponseError> {
        let cache = self.cache.lock();
        let m = cache.get(transactional_id).ok_or(ResponseError::InvalidProducerIdMapping)?;
        if m.txn.producer_id != producer_id {
            return Err(ResponseError::InvalidProducerIdMapping);
        }
        if m.txn.producer_epoch != epoch {
            return Err(ResponseError::ProducerFenced);
        }
        if m.pending().is_some_and(|p| p != TxnState::Ongoing) {
            return Err(ResponseError::ConcurrentTransactions);
        }
        if m.txn.state != TxnState::Ongoing || !m.txn.partitions.contains(&(topic.to_string(), partition)) {
            return Err(ResponseError::InvalidTxnState);
        }
        Ok(())
    }

    /// Writes the markers of the decided transaction `t` and then its completion. One task per
    /// id at a time; another call for the same id returns at once.
    async fn finish(&self, broker: &Arc<Broker>, transactional_id: String, t: Txn) {
        if !self.finishing.lock().insert(transactional_id.clone()) {
            return;
        }
        let kind = if t.state == TxnState::PrepareCommit { MarkerKind::Commit } else { MarkerKind::Abort };
        let marker = EndMarker { kind, coordinator_epoch: self.coordinator_epoch(broker, &transactional_id) };
        for (topic, index) in &t.partitions {
            write_marker(broker, &transactional_id, &t, topic, *index, marker).await;
        }
        let now = broker.now_ms();
        let prepared = {
            let mut cache = self.cache.lock();
            match cache.get_mut(&transactional_id) {
                // Still the transaction these markers were for.
                Some(m) if m.txn == t => Some(m.prepare_complete(now)),
                _ => None,
            }
        };
        match prepared {
            Some(Ok(done)) => {
                if let Err(e) = self.write(broker, &transactional_id, &done).await {
                    tracing::warn!(transactional_id, error = ?e, "writing a transaction's completion failed; retried by the next tick");
                }
            }
            Some(Err(e)) => tracing::error!(transactional_id, error = ?e, "could not complete a transaction whose markers are written"),
            None => {}
        }
        self.finishing.lock().remove(&transactional_id);
    }

    /// The periodic work: aborts transactions open past their timeout (fencing their producer),
    /// carries decided transactions without a task to their end, and forgets ids idle past
    /// `transactional.id.expiration.ms` (when `expire`).
    pub fn tick(&self, broker: &Arc<Broker>, expire: bool) {
        let now = broker.now_ms();
        let (timed_out, decided, expired) = {
            let cache = self.cache.lock();
            let finishing = self.finishing.lock();
            let ids = |v: Vec<&TxnMetadata>| v.into_iter().map(|m| m.transactional_id.clone()).collect::<Vec<_>>();
            let decided: Vec<(String, Txn)> = cache
                .awaiting_markers()
                .into_iter()
                .filter(|m| m.pending().is_none() && !finishing.contains(&m.transactional_id))
                .map(|m| (m.transactional_id.clone(), m.txn.clone()))
                .collect();
            let expired = if expire { ids(cache.expired(now, self.config.id_expiration_ms)) } else { Vec::new() };
            (ids(cache.timed_out(now)), decided, expired)
        };
        for id in timed_out {
            let fenced = {
                let mut cache = self.cache.lock();
                cache.get_mut(&id).map(|m| m.prepare_fence_epoch())
            };
            match fenced {
                Some(Ok(f)) => {
                    tracing::info!(transactional_id = %id, producer_id = f.producer_id, epoch = f.producer_epoch, "aborting a transaction open past its timeout");
                    self.abort_fenced(broker, &id, f.producer_epoch);
                }
                Some(Err(e)) => tracing::warn!(transactional_id = %id, error = ?e, "could not fence a timed-out transaction"),
                None => {}
            }
        }
        for (id, t) in decided {
            let b = broker.clone();
            tokio::spawn(async move { b.txns().finish(&b, id, t).await });
        }
        for id in expired {
            let dead = self.cache.lock().get_mut(&id).map(|m| m.prepare_dead());
            if let Some(Ok(t)) = dead {
                let b = broker.clone();
                tokio::spawn(async move {
                    if b.txns().write(&b, &id, &t).await.is_ok() {
                        b.txns().cache.lock().remove(&id);
                        tracing::info!(transactional_id = %id, "forgot a transactional id idle past transactional.id.expiration.ms");
                    }
                });
            }
        }
    }

    /// Replays one `__transaction_state` partition below `end`; returns the records applied.
    fn replay(&self, partition: &Partition, end: i64) -> Result<usize, TxnError> {
        let mut count = 0usize;
        let mut cache = self.cache.lock();
        partition
            .for_each_keyed_record(end, |offset, key, value| match cache.replay(key, value) {
                Ok(_) => count += 1,
                Err(e) => tracing::warn!(partition = partition.index, offset, error = %e, "skipping undecodable __transaction_state record"),
            })
            .map_err(|(offset, source)| TxnError::Read { partition: partition.index, offset, source })?;
        Ok(count)
    }
}

/// Writes one marker of `t` into `topic`-`index` (led here) and waits for it to be replicated,
/// retrying a storage error with backoff; see the module's "Failure behaviour".
async fn write_marker(broker: &Broker, transactional_id: &str, t: &Txn, topic: &str, index: i32, marker: EndMarker) {
    let mut backoff = Duration::from_millis(100);
    loop {
        let Some(p) = broker.partition(topic, index) else {
            tracing::info!(transactional_id, topic, partition = index, "not writing a transaction marker to a partition that no longer exists");
            return;
        };
        let outcome = match p.append_marker(t.producer_id, t.producer_epoch, marker, broker.now_ms()) {
            Ok(end) => match p.wait_replicated(end, WRITE_TIMEOUT).await {
                Ok(()) => return,
                Err(wait) => format!("{wait:?}"),
            },
            Err(e @ (AppendError::InvalidProducerEpoch | AppendError::CoordinatorFenced)) => {
                tracing::warn!(transactional_id, topic, partition = index, error = %e, "a partition refused a transaction marker; not retrying");
                return;
            }
            Err(e) => error_chain(&e),
        };
        tracing::warn!(transactional_id, topic, partition = index, error = %outcome, retry_ms = backoff.as_millis() as u64, "writing a transaction marker failed; retrying");
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

/// Background task: [`Txns::tick`] every `transaction.abort.timed.out.transaction.cleanup.interval.ms`
/// (at most every second, so that a decided transaction whose task failed is soon resumed),
/// with expiration every `transaction.remove.expired.transaction.cleanup.interval.ms`.
pub async fn run(broker: Arc<Broker>) {
    let config = broker.txns().config.clone();
    let every = Duration::from_millis(config.abort_timed_out_interval_ms.clamp(1, 1000) as u64);
    let expire_every = Duration::from_millis(config.remove_expired_interval_ms.max(1) as u64);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_expiry = tokio::time::Instant::now();
    loop {
        tick.tick().await;
        let expire = last_expiry.elapsed() >= expire_every;
        if expire {
            last_expiry = tokio::time::Instant::now();
        }
        broker.txns().tick(&broker, expire);
    }
}
