//! The tokio driver around [`GroupCoordinator`]: parks delayed JoinGroup/SyncGroup requests on
//! oneshot channels, appends the core's records to `__consumer_offsets`, replays that topic at
//! startup and fires timers.
//!
//! # In a cluster
//! A broker coordinates the groups of the `__consumer_offsets` partitions it leads. When it
//! becomes a partition's leader (a new leader epoch), the groups of that partition are dropped
//! from the core and replayed from the partition's log, which followers copied
//! ([`Groups::follow_leadership`]); until then their requests get COORDINATOR_LOAD_IN_PROGRESS.
//! When leadership moves away, the partition's groups are dropped. Records are appended only to
//! partitions this broker leads: a follower's log is the leader's copy.
//!
//! # Ordering and durability
//! One mutex guards the core and the waiter table. Every call runs the core, then — still under
//! the lock — appends the produced records (one batch per `__consumer_offsets` partition) and only
//! then delivers parked answers, so an answer never overtakes the record it depends on and records
//! of one group are appended in the order the state changed. Appends are page-cache writes like
//! any produce (flushed per the topic's flush settings and at shutdown).
//!
//! # Failure behaviour
//! A failed append is logged with the partition and reported to the caller (OffsetCommit answers
//! COORDINATOR_NOT_AVAILABLE); parked answers are still delivered. A waiter whose sender is dropped
//! (group deleted under it) answers COORDINATOR_NOT_AVAILABLE.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};
use kafka_protocol::ResponseError;
use parking_lot::Mutex;
use tokio::sync::oneshot;

use super::classic::{JoinReply, JoinRequest, Outcome, SyncReply};
use super::consumer::{Heartbeat, HeartbeatReply};
use super::coordinator::{GroupCoordinator, OffsetCommit};
use super::records::CoordinatorRecord;
use super::{partition_for, Completion, GroupConfig, GroupError, Reply, OFFSETS_TOPIC};
use crate::broker::Broker;

struct Inner {
    core: GroupCoordinator,
    waiters: HashMap<u64, oneshot::Sender<Reply>>,
}

/// The group coordinator service the api handlers call.
pub struct Groups {
    inner: Mutex<Inner>,
    next_token: AtomicU64,
    /// False until `__consumer_offsets` has been replayed; requests get COORDINATOR_LOAD_IN_PROGRESS.
    loaded: AtomicBool,
    /// In a cluster: `__consumer_offsets` partition -> the leader epoch its groups were loaded in.
    led: Mutex<BTreeMap<i32, i32>>,
    pub config: GroupConfig,
}

impl Groups {
    pub fn new(config: GroupConfig) -> Groups {
        Groups {
            inner: Mutex::new(Inner { core: GroupCoordinator::new(config.clone()), waiters: HashMap::new() }),
            next_token: AtomicU64::new(1),
            loaded: AtomicBool::new(false),
            led: Mutex::new(BTreeMap::new()),
            config,
        }
    }

    pub fn is_loaded(&self) -> bool {
        self.loaded.load(Ordering::Acquire)
    }

    /// In a cluster: whether the groups of `__consumer_offsets` partition `partition` are loaded
    /// for leader epoch `epoch`.
    pub fn is_partition_loaded(&self, partition: i32, epoch: i32) -> bool {
        self.led.lock().get(&partition) == Some(&epoch)
    }

    /// A cluster member starts with no groups: each partition's are loaded when the image says
    /// this broker leads it.
    pub fn start_empty(&self) {
        self.loaded.store(true, Ordering::Release);
    }

    /// Brings the loaded groups in line with which `__consumer_offsets` partitions this broker
    /// leads: `leaders` maps each partition to `(leader, leader epoch)`. A partition newly led
    /// (or led in a new epoch) has its groups replayed from its log; one no longer led has its
    /// groups dropped.
    pub fn follow_leadership(&self, broker: &Broker, leaders: &BTreeMap<i32, (i32, i32)>) {
        let partitions = leaders.len() as i32;
        let mut led = self.led.lock().clone();
        for (p, now_led) in leadership_changes(&led, leaders, broker.node_id) {
            let dropped = self.inner.lock().core.unload(|group| partition_for(group, partitions) == p);
            let Some(epoch) = now_led else {
                led.remove(&p);
                tracing::info!(partition = p, groups = dropped, "no longer the coordinator of this __consumer_offsets partition");
                continue;
            };
            let Some(partition) = broker.topic(OFFSETS_TOPIC).and_then(|t| t.partition(p).cloned()) else { continue };
            let started = std::time::Instant::now();
            match self.replay(broker, &partition, partition.log_end_offset()) {
                Ok(records) => {
                    led.insert(p, epoch);
                    tracing::info!(partition = p, leader_epoch = epoch, records, elapsed_ms = started.elapsed().as_millis() as u64,
                        "loaded the groups of a __consumer_offsets partition this broker now leads");
                }
                Err(e) => tracing::error!(partition = p, error = %crate::broker::error_chain(&e), "loading groups failed; retrying at the next metadata change"),
            }
        }
        *self.led.lock() = led;
    }

    /// Runs `f` on the core, persists what it produced and delivers parked answers.
    /// Returns f's result and whether persisting succeeded.
    fn run<T>(&self, broker: &Broker, f: impl FnOnce(&mut GroupCoordinator, &mut Parking) -> T) -> (T, Result<Written, GroupError>) {
        let mut inner = self.inner.lock();
        let Inner { core, waiters } = &mut *inner;
        let mut park = Parking { waiters, next_token: &self.next_token, parked: None };
        let out = f(core, &mut park);
        let (records, completions) = core.drain();
        let persisted = self.persist(broker, &records);
        if let Err(e) = &persisted {
            tracing::error!(error = %crate::broker::error_chain(e), records = records.len(), "writing group coordinator records failed");
        }
        deliver(&mut inner.waiters, completions);
        (out, persisted)
    }

    /// Read-only access to the core.
    pub fn with_core<T>(&self, f: impl FnOnce(&GroupCoordinator) -> T) -> T {
        f(&self.inner.lock().core)
    }

    pub async fn join(&self, broker: &Broker, group_id: &str, req: JoinRequest) -> JoinReply {
        let member_id = req.member_id.clone();
        let now = broker.now_ms();
        let (rx, _) = self.run(broker, |core, park| {
            let token = park.token();
            match core.join(group_id, req, token, now) {
                Outcome::Now(r) => Answer::Now(Box::new(r)),
                Outcome::Parked => Answer::Wait(park.park(token)),
            }
        });
        match rx {
            Answer::Now(now) => *now,
            Answer::Wait(rx) => match rx.await {
                Ok(Reply::Join(r)) => r,
                _ => JoinReply::error(ResponseError::CoordinatorNotAvailable, &member_id),
            },
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub async fn sync(
        &self,
        broker: &Broker,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation_id: i32,
        protocol_type: Option<&str>,
        protocol_name: Option<&str>,
        assignments: Vec<(String, Bytes)>,
    ) -> SyncReply {
        let now = broker.now_ms();
        let (rx, persisted) = self.run(broker, |core, park| {
            let token = park.token();
            match core.sync(group_id, member_id, instance_id, generation_id, protocol_type, protocol_name, assignments, token, now) {
                Outcome::Now(r) => Answer::Now(Box::new(r)),
                Outcome::Parked => Answer::Wait(park.park(token)),
            }
        });
        let reply = match rx {
            Answer::Now(now) => *now,
            Answer::Wait(rx) => match rx.await {
                Ok(Reply::Sync(r)) => r,
                _ => SyncReply::error(ResponseError::CoordinatorNotAvailable),
            },
        };
        // Kafka fails the leader's SyncGroup when the assignment could not be written.
        let failed = settled(persisted).await;
        match failed {
            Some(e) if reply.error.is_none() => SyncReply::error(e),
            _ => reply,
        }
    }

    pub fn heartbeat(&self, broker: &Broker, group_id: &str, member_id: &str, instance_id: Option<&str>, generation_id: i32) -> Option<ResponseError> {
        let now = broker.now_ms();
        self.run(broker, |core, _| core.heartbeat(group_id, member_id, instance_id, generation_id, now)).0
    }

    pub fn leave(&self, broker: &Broker, group_id: &str, members: &[(String, Option<String>)]) -> Result<Vec<Option<ResponseError>>, ResponseError> {
        let now = broker.now_ms();
        self.run(broker, |core, _| core.leave(group_id, members, now)).0
    }

    /// OffsetCommit; answered once the commit is replicated (see [`Written::replicated`]).
    pub async fn commit_offsets(
        &self,
        broker: &Broker,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation_id: i32,
        commits: Vec<OffsetCommit>,
    ) -> Result<Vec<Option<ResponseError>>, ResponseError> {
        let now = broker.now_ms();
        let (out, persisted) = self.run(broker, |core, _| core.commit_offsets(group_id, member_id, instance_id, generation_id, commits, now));
        let failed = settled(persisted).await;
        match (out, failed) {
            (Ok(v), Some(e)) => Ok(v.into_iter().map(|x| x.or(Some(e))).collect()),
            (out, _) => out,
        }
    }

    pub fn delete_offsets(&self, broker: &Broker, group_id: &str, partitions: &[(String, i32)]) -> Result<Vec<Option<ResponseError>>, ResponseError> {
        let (out, persisted) = self.run(broker, |core, _| core.delete_offsets(group_id, partitions));
        match (out, persisted) {
            (Ok(_), Err(_)) => Err(ResponseError::CoordinatorNotAvailable),
            (out, _) => out,
        }
    }

    pub fn delete_group(&self, broker: &Broker, group_id: &str) -> Option<ResponseError> {
        let now = broker.now_ms();
        let (out, persisted) = self.run(broker, |core, _| core.delete_group(group_id, now));
        out.or(persisted.err().map(|_| ResponseError::CoordinatorNotAvailable))
    }

    /// Fires timers (sessions, join/sync deadlines, initial delay).
    pub fn tick(&self, broker: &Broker) {
        let now = broker.now_ms();
        let topics = broker.partition_counts();
        // A failed append is logged by `run`; timers keep running.
        let _ = self.run(broker, |core, _| core.tick(&topics, now));
    }

    /// ConsumerGroupHeartbeat (KIP-848); answered once what it changed in the group is
    /// replicated, so that a member's epoch and assignment survive a coordinator move.
    pub async fn consumer_heartbeat(&self, broker: &Broker, group_id: &str, req: Heartbeat) -> HeartbeatReply {
        let now = broker.now_ms();
        let topics = broker.partition_counts();
        let member_id = req.member_id.clone();
        let (reply, persisted) = self.run(broker, |core, _| core.consumer_heartbeat(group_id, req, &topics, now));
        let failed = settled(persisted).await;
        match failed {
            Some(e) if reply.error.is_none() => HeartbeatReply {
                error: Some(e),
                error_message: Some("the group's state could not be written".into()),
                member_id,
                member_epoch: -1,
                assignment: None,
            },
            _ => reply,
        }
    }

    /// Forgets committed offsets of a deleted topic (tombstones in `__consumer_offsets`).
    pub fn forget_topic(&self, broker: &Broker, topic: &str) -> usize {
        self.run(broker, |core, _| core.forget_topic(topic)).0
    }

    pub fn expire_offsets(&self, broker: &Broker) -> usize {
        let now = broker.now_ms();
        self.run(broker, |core, _| core.expire_offsets(now)).0
    }

    /// The `__consumer_offsets` topic, created (compacted, `offsets.topic.num.partitions`) on first use.
    ///
    /// Creating it fsyncs (see [`Broker::create_topic`]), and one fsync behind a few GiB of
    /// writeback took 4 s on the bench machine, so the api layer calls this on tokio's blocking
    /// pool when a group request arrives before the topic exists (`api::group::ensure_offsets_topic`).
    /// [`Groups::persist`] creates it here too, on the caller's thread under the group lock, only
    /// if it vanished after that.
    pub(crate) fn offsets_topic(&self, broker: &Broker) -> Result<Arc<crate::broker::Topic>, GroupError> {
        if let Some(t) = broker.topic(OFFSETS_TOPIC) {
            return Ok(t);
        }
        match broker.create_topic(OFFSETS_TOPIC, self.config.offsets_partitions, 1, self.offsets_topic_configs()) {
            Ok(t) => Ok(t),
            Err(crate::broker::TopicError::AlreadyExists(_)) => broker.topic(OFFSETS_TOPIC).ok_or_else(|| GroupError::CreateOffsetsTopic("vanished".into())),
            Err(e) => Err(GroupError::CreateOffsetsTopic(e.to_string())),
        }
    }

    /// The configs `__consumer_offsets` is created with.
    pub(crate) fn offsets_topic_configs(&self) -> BTreeMap<String, String> {
        let mut configs = BTreeMap::new();
        configs.insert("cleanup.policy".to_string(), "compact".to_string());
        configs.insert("compression.type".to_string(), "producer".to_string());
        configs.insert("segment.bytes".to_string(), self.config.offsets_segment_bytes.to_string());
        configs
    }

    /// Appends records, one uncompressed batch per `__consumer_offsets` partition; returns
    /// where each batch ends, for [`Written::replicated`].
    fn persist(&self, broker: &Broker, records: &[CoordinatorRecord]) -> Result<Written, GroupError> {
        let mut written = Written::default();
        if records.is_empty() {
            return Ok(written);
        }
        let topic = self.offsets_topic(broker)?;
        let partitions = topic.partitions.len() as i32;
        let mut by_partition: BTreeMap<i32, Vec<&CoordinatorRecord>> = BTreeMap::new();
        for r in records {
            by_partition.entry(partition_for(r.group(), partitions)).or_default().push(r);
        }
        let now = broker.now_ms();
        for (p, recs) in by_partition {
            let Some(partition) = topic.partition(p) else { continue };
            if !partition.is_leader() {
                tracing::warn!(partition = p, records = recs.len(), "not appending group records to a __consumer_offsets partition another broker leads");
                continue;
            }
            let batch: Vec<Record> = recs
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    let (key, value) = r.encode(&|t| broker.topic_id_of(t));
                    Record {
                        transactional: false,
                        control: false,
                        delete_horizon: false,
                        partition_leader_epoch: -1,
                        producer_id: -1,
                        producer_epoch: -1,
                        timestamp_type: TimestampType::Creation,
                        offset: i as i64,
                        sequence: i as i32 - 1,
                        timestamp: now,
                        key: Some(key),
                        value,
                        headers: Default::default(),
                    }
                })
                .collect();
            let mut buf = BytesMut::new();
            RecordBatchEncoder::encode(&mut buf, &batch, &RecordEncodeOptions { version: 2, compression: Compression::None })
                .map_err(|e| GroupError::Encode(e.to_string()))?;
            let appended = partition.append(buf.freeze(), now).map_err(|source| GroupError::Append { partition: p, source })?;
            written.0.push((partition.clone(), appended.next_offset));
        }
        Ok(written)
    }

    /// Replays `__consumer_offsets` (if it exists) into the core. Called once before serving.
    pub fn load(&self, broker: &Broker) -> Result<(), GroupError> {
        let started = std::time::Instant::now();
        let mut count = 0usize;
        if let Some(topic) = broker.topic(OFFSETS_TOPIC) {
            for partition in &topic.partitions {
                count += self.replay(broker, partition, partition.high_watermark())?;
            }
        }
        self.loaded.store(true, Ordering::Release);
        tracing::info!(records = count, elapsed_ms = started.elapsed().as_millis() as u64, "loaded consumer groups");
        Ok(())
    }

    /// Replays one `__consumer_offsets` partition below `end` into the core; returns the
    /// number of records applied.
    fn replay(&self, broker: &Broker, partition: &crate::replication::Partition, end: i64) -> Result<usize, GroupError> {
        let now = broker.now_ms();
        let mut count = 0usize;
        let mut inner = self.inner.lock();
        partition
            .for_each_keyed_record(end, |offset, key, value| {
                match CoordinatorRecord::decode(key, value, &|id| broker.topic_name_of(id)) {
                    Ok(Some(r)) => {
                        inner.core.replay(r, now);
                        count += 1;
                    }
                    Ok(None) => {}
                    Err(e) => tracing::warn!(partition = partition.index, offset, error = %e, "skipping undecodable __consumer_offsets record"),
                }
            })
            .map_err(|(offset, source)| GroupError::Read { partition: partition.index, offset, source })?;
        let _ = inner.core.drain();
        Ok(count)
    }
}

/// What a coordinator must do as the leaders of its topic's partitions change: `led` is what it
/// has loaded (partition -> leader epoch), `leaders` each partition's `(leader, leader epoch)`.
/// Returns, in partition order, each partition to drop and reload in a new epoch
/// (`Some(epoch)`: led here now) or only to drop (`None`: no longer led here).
pub(crate) fn leadership_changes(led: &BTreeMap<i32, i32>, leaders: &BTreeMap<i32, (i32, i32)>, me: i32) -> Vec<(i32, Option<i32>)> {
    leaders
        .iter()
        .filter_map(|(&p, &(leader, epoch))| match (leader == me, led.get(&p)) {
            (true, Some(e)) if *e == epoch => None,
            (false, None) => None,
            (true, _) => Some((p, Some(epoch))),
            (false, Some(_)) => Some((p, None)),
        })
        .collect()
}

/// How long a coordinator write may take to be replicated before the request fails (Kafka's
/// `offsets.commit.timeout.ms` default).
const WRITE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Where the records of one coordinator call end, per `__consumer_offsets` partition.
#[derive(Default)]
pub struct Written(Vec<(Arc<crate::replication::Partition>, i64)>);

impl Written {
    /// Waits until every write is below its partition's high watermark, as Kafka's coordinator
    /// answers only committed writes: an offset commit or a member's epoch acknowledged to a
    /// client survives the loss of this broker. Errors as Kafka's coordinator maps them:
    /// leadership gone is NOT_COORDINATOR, a timeout or too few replicas
    /// COORDINATOR_NOT_AVAILABLE (both make the client find the coordinator and retry).
    pub async fn replicated(&self, timeout: std::time::Duration) -> Result<(), ResponseError> {
        for (partition, end) in &self.0 {
            match partition.wait_replicated(*end, timeout).await {
                Ok(()) => {}
                Err(crate::replication::ReplicationWait::NotLeader) => return Err(ResponseError::NotCoordinator),
                Err(_) => return Err(ResponseError::CoordinatorNotAvailable),
            }
        }
        Ok(())
    }
}

/// Why a call's writes did not become durable, if they did not: not appended
/// (COORDINATOR_NOT_AVAILABLE, as Kafka answers a failed write), or not replicated in time
/// ([`Written::replicated`]).
async fn settled(persisted: Result<Written, GroupError>) -> Option<ResponseError> {
    match persisted {
        Ok(written) => written.replicated(WRITE_TIMEOUT).await.err(),
        Err(_) => Some(ResponseError::CoordinatorNotAvailable),
    }
}

/// An answer available now, or a parked request's channel.
enum Answer<T> {
    Now(Box<T>),
    Wait(oneshot::Receiver<Reply>),
}

/// Token allocation and parking, handed to the closure run under the lock.
pub struct Parking<'a> {
    waiters: &'a mut HashMap<u64, oneshot::Sender<Reply>>,
    next_token: &'a AtomicU64,
    parked: Option<u64>,
}

impl Parking<'_> {
    fn token(&mut self) -> u64 {
        self.next_token.fetch_add(1, Ordering::Relaxed)
    }

    fn park(&mut self, token: u64) -> oneshot::Receiver<Reply> {
        let (tx, rx) = oneshot::channel();
        self.waiters.insert(token, tx);
        self.parked = Some(token);
        rx
    }
}

fn deliver(waiters: &mut HashMap<u64, oneshot::Sender<Reply>>, completions: Vec<Completion>) {
    for c in completions {
        if let Some(tx) = waiters.remove(&c.token) {
            // The requester may have disconnected; nothing to do then.
            let _ = tx.send(c.reply);
        }
    }
}

/// Background task: ticks group timers every 100 ms and expires offsets every
/// `offsets.retention.check.interval.ms`.
pub async fn run(broker: Arc<Broker>) {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let check_every = Duration::from_millis(broker.groups().config.offsets_retention_check_interval_ms.max(1) as u64);
    let mut last_expiry = tokio::time::Instant::now();
    loop {
        tick.tick().await;
        let b = broker.clone();
        let expire = last_expiry.elapsed() >= check_every;
        if expire {
            last_expiry = tokio::time::Instant::now();
        }
        // Appends may touch the disk; keep them off the async workers.
        let _ = tokio::task::spawn_blocking(move || {
            b.groups().tick(&b);
            if expire {
                let n = b.groups().expire_offsets(&b);
                if n > 0 {
                    tracing::info!(offsets = n, "expired committed offsets");
                }
            }
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_coordinator_reloads_partitions_newly_led_or_in_a_new_epoch_and_drops_lost_ones() {
        let led = BTreeMap::from([(0, 3), (1, 5), (2, 1)]);
        // 0: still led in epoch 3; 1: led in a new epoch; 2: moved away; 3: newly led; 4: not ours.
        let leaders = BTreeMap::from([(0, (1, 3)), (1, (1, 6)), (2, (2, 2)), (3, (1, 0)), (4, (3, 9))]);
        assert_eq!(leadership_changes(&led, &leaders, 1), vec![(1, Some(6)), (2, None), (3, Some(0))]);
    }
}
