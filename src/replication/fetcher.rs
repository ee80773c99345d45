//! A follower's fetches: one task per source broker, fetching every partition this broker
//! follows from it (less those a replication throttle holds back, [`super::throttle`]) in one
//! Kafka Fetch (v17: `ReplicaState` with this broker's id and epoch,
//! `CurrentLeaderEpoch`, `LastFetchedEpoch`), appending what comes back byte for byte (the
//! leader's offsets, epochs and CRCs) and taking the leader's high watermark.
//!
//! What a response asks for, per partition (Kafka's `AbstractFetcherThread`):
//! - records: appended ([`Partition::append_from_leader`]); the log start moves up to the
//!   leader's (retention and DeleteRecords there);
//! - `DivergingEpoch {epoch, end}`: the log ends differently from the leader's after that epoch.
//!   If this log has `epoch` too, it is truncated to the smaller of the two ends; if not, to the
//!   end of its largest epoch below, and the next fetch checks again ([`truncation_point`]);
//! - OFFSET_OUT_OF_RANGE: behind the leader's log start, the log is emptied and restarts there;
//!   ahead of the leader's log end (no epoch to compare), truncated to the leader's high
//!   watermark;
//! - NOT_LEADER_OR_FOLLOWER, FENCED/UNKNOWN_LEADER_EPOCH and the like: the metadata is about to
//!   change; the partition is fetched again after a pause.
//!
//! # Failure behaviour
//! A connection that fails or a response that does not decode is logged with the source broker
//! and dropped; the task connects again after [`RETRY_BACKOFF`]. An append or truncation that
//! fails is logged with the partition and its path; it poisons the log (disk full, I/O error),
//! and a poisoned partition is no longer fetched: it falls behind, the leader takes it out of
//! the ISR, and the broker goes on serving everything else. A restart reopens the log.
//! A task ends when no partition is followed from its broker any more.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ReplicaState};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse};
use parking_lot::Mutex;
use tokio::sync::watch;
use uuid::Uuid;

use super::throttle::Quota;
use super::Partition;
use crate::network::client::Connection;

/// The Fetch version followers send (Kafka 4.x brokers answer up to 17 or more).
pub const FETCH_VERSION: i16 = 17;
/// Pause after a failed fetch or a partition-level error.
pub const RETRY_BACKOFF: Duration = Duration::from_millis(200);
/// `replica.fetch.wait.max.ms` and `replica.fetch.max.bytes` / `replica.fetch.response.max.bytes`
/// at Kafka's defaults.
const MAX_WAIT_MS: i32 = 500;
const PARTITION_MAX_BYTES: i32 = 1 << 20;
const RESPONSE_MAX_BYTES: i32 = 10 << 20;
/// The largest response read: the fetch limit plus room for the framing.
const MAX_RESPONSE: usize = (RESPONSE_MAX_BYTES as usize) * 2 + (1 << 20);

/// One partition followed from a leader.
#[derive(Clone)]
pub struct Followed {
    pub topic_id: Uuid,
    pub partition: Arc<Partition>,
    pub leader_epoch: i32,
    /// Outside the ISR and named by the topic's `follower.replication.throttled.replicas`: left
    /// out of fetches while `follower.replication.throttled.rate` is exceeded
    /// ([`super::throttle`]).
    pub throttled: bool,
}

/// What to fetch from one source broker.
#[derive(Clone)]
pub struct Source {
    /// `host:port` of the leader's inter-broker listener.
    pub addr: String,
    pub partitions: Vec<Followed>,
}

/// The fetcher tasks of one broker.
pub struct ReplicaFetchers {
    node_id: i32,
    broker_epoch: Arc<dyn Fn() -> i64 + Send + Sync>,
    assignment: watch::Sender<Arc<BTreeMap<i32, Source>>>,
    tasks: Mutex<BTreeMap<i32, tokio::task::JoinHandle<()>>>,
    /// `follower.replication.throttled.rate`.
    quota: Arc<Quota>,
}

impl ReplicaFetchers {
    pub fn new(node_id: i32, broker_epoch: Arc<dyn Fn() -> i64 + Send + Sync>, quota: Arc<Quota>) -> Arc<ReplicaFetchers> {
        let (assignment, _) = watch::channel(Arc::new(BTreeMap::new()));
        Arc::new(ReplicaFetchers { node_id, broker_epoch, assignment, tasks: Mutex::new(BTreeMap::new()), quota })
    }

    /// Follows these partitions from these leaders from now on: a task starts for each new
    /// source; one whose source is gone ends at its next turn.
    pub fn set(self: &Arc<Self>, by_leader: BTreeMap<i32, Source>) {
        let leaders: Vec<i32> = by_leader.keys().copied().collect();
        self.assignment.send_replace(Arc::new(by_leader));
        // A task leaving removes itself under this lock (see `run`); one that ended otherwise
        // (a panic) is replaced.
        let mut tasks = self.tasks.lock();
        tasks.retain(|_, t| !t.is_finished());
        for leader in leaders {
            if !tasks.contains_key(&leader) {
                let me = self.clone();
                tasks.insert(leader, tokio::spawn(async move { me.run(leader).await }));
            }
        }
    }

    /// Stops every task (shutdown).
    pub fn stop(&self) {
        self.assignment.send_replace(Arc::new(BTreeMap::new()));
        for (_, t) in std::mem::take(&mut *self.tasks.lock()) {
            t.abort();
        }
    }

    async fn run(self: Arc<Self>, leader: i32) {
        let mut conn: Option<(String, Connection)> = None;
        loop {
            let source = self.assignment.borrow().get(&leader).cloned();
            let Some(source) = source else {
                // Decided under the task table's lock, so that a `set` that brings this source
                // back either is seen here or finds the task gone and starts another.
                let mut tasks = self.tasks.lock();
                if self.assignment.borrow().contains_key(&leader) {
                    continue;
                }
                tasks.remove(&leader);
                tracing::debug!(leader, "no partition is followed from this broker any more");
                return;
            };
            if conn.as_ref().is_some_and(|(addr, _)| *addr != source.addr) {
                conn = None;
            }
            if conn.is_none() {
                match Connection::connect(&source.addr, "sluice-replica-fetcher", MAX_RESPONSE).await {
                    Ok(c) => conn = Some((source.addr.clone(), c)),
                    Err(e) => {
                        tracing::debug!(leader, addr = %source.addr, error = %e, "cannot connect to the leader to fetch");
                        tokio::time::sleep(RETRY_BACKOFF).await;
                        continue;
                    }
                }
            }
            let Some((_, c)) = conn.as_mut() else { continue };
            // Throttled partitions sit out while the follower quota is exceeded; a poisoned log
            // (a failed write: disk full, I/O error) is not fetched for at all, so the leader
            // drops this replica from the ISR when it falls behind.
            let throttling = source.partitions.iter().any(|f| f.throttled) && self.quota.is_limited();
            let held_back = throttling && self.quota.exceeded(now_ms());
            let partitions: Vec<Followed> =
                source.partitions.iter().filter(|f| !(f.partition.is_poisoned() || (held_back && f.throttled))).cloned().collect();
            if partitions.is_empty() {
                tokio::time::sleep(RETRY_BACKOFF).await;
                continue;
            }
            let request = self.request(&partitions);
            let timeout = Duration::from_millis(MAX_WAIT_MS as u64) + Duration::from_secs(10);
            let response = match tokio::time::timeout(timeout, c.send(&request, FETCH_VERSION)).await {
                Ok(Ok(r)) => r,
                Ok(Err(e)) => {
                    tracing::info!(leader, addr = %source.addr, error = %e, "fetch from the leader failed; connecting again");
                    conn = None;
                    tokio::time::sleep(RETRY_BACKOFF).await;
                    continue;
                }
                Err(_) => {
                    tracing::info!(leader, addr = %source.addr, "fetch from the leader timed out; connecting again");
                    conn = None;
                    continue;
                }
            };
            if throttling {
                let bytes: usize = response
                    .responses
                    .iter()
                    .flat_map(|t| t.partitions.iter().map(move |pd| (t.topic_id, pd)))
                    .filter(|(id, pd)| partitions.iter().any(|f| f.throttled && f.topic_id == *id && f.partition.index == pd.partition_index))
                    .map(|(_, pd)| pd.records.as_ref().map_or(0, |r| r.len()))
                    .sum();
                self.quota.record(bytes as u64, now_ms());
            }
            let backoff = crate::runtime::off_runtime(move || apply_response(leader, &partitions, response)).await;
            if backoff {
                tokio::time::sleep(RETRY_BACKOFF).await;
            }
        }
    }

    fn request(&self, partitions: &[Followed]) -> FetchRequest {
        let mut topics: Vec<FetchTopic> = Vec::new();
        for f in partitions {
            let p = &f.partition;
            let fp = FetchPartition::default()
                .with_partition(p.index)
                .with_current_leader_epoch(f.leader_epoch)
                .with_fetch_offset(p.log_end_offset())
                .with_last_fetched_epoch(p.latest_epoch().unwrap_or(-1))
                .with_log_start_offset(p.log_start_offset())
                .with_partition_max_bytes(PARTITION_MAX_BYTES);
            match topics.last_mut().filter(|t| t.topic_id == f.topic_id) {
                Some(t) => t.partitions.push(fp),
                None => topics.push(FetchTopic::default().with_topic_id(f.topic_id).with_partitions(vec![fp])),
            }
        }
        FetchRequest::default()
            .with_replica_state(ReplicaState::default().with_replica_id(BrokerId(self.node_id)).with_replica_epoch((self.broker_epoch)()))
            .with_max_wait_ms(MAX_WAIT_MS)
            .with_min_bytes(1)
            .with_max_bytes(RESPONSE_MAX_BYTES)
            .with_isolation_level(0)
            .with_session_id(0)
            .with_session_epoch(-1)
            .with_topics(topics)
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// Where a follower truncates on `DivergingEpoch {epoch, end}`, given its own answer for that
/// epoch (`local`: `(largest epoch <= epoch, its end offset)`) and its log end.
pub fn truncation_point(diverging_epoch: i32, diverging_end: i64, local: Option<(i32, i64)>, log_end: i64) -> i64 {
    match local {
        Some((e, end)) if e == diverging_epoch => end.min(diverging_end),
        Some((_, end)) => end,
        None => diverging_end.min(log_end),
    }
}

/// Applies one fetch response; true when something failed and the task should pause.
fn apply_response(leader: i32, partitions: &[Followed], response: FetchResponse) -> bool {
    const OFFSET_OUT_OF_RANGE: i16 = 1;
    if response.error_code != 0 {
        tracing::info!(leader, error_code = response.error_code, "the leader refused the fetch");
        return true;
    }
    let mut backoff = false;
    for t in response.responses {
        for pd in t.partitions {
            let Some(f) = partitions.iter().find(|f| f.topic_id == t.topic_id && f.partition.index == pd.partition_index) else {
                continue;
            };
            let p = &f.partition;
            // Leadership moved while the fetch was out: what it brought is from a leader this
            // replica no longer follows.
            if p.is_leader() || p.leader_epoch() != f.leader_epoch {
                continue;
            }
            let result = match pd.error_code {
                0 if pd.diverging_epoch.epoch >= 0 || pd.diverging_epoch.end_offset >= 0 => {
                    let (epoch, end) = (pd.diverging_epoch.epoch, pd.diverging_epoch.end_offset);
                    let local = p.end_offset_for_epoch(epoch);
                    let to = if end < 0 { p.high_watermark() } else { truncation_point(epoch, end, local, p.log_end_offset()) };
                    // How much of its own log the follower gives up (offsets: records, unless
                    // compaction removed some).
                    let dropped = (p.log_end_offset() - to).max(0);
                    tracing::info!(partition = ?p, leader, diverging_epoch = epoch, leader_end_offset = end, truncate_to = to, dropped_offsets = dropped,
                        "log diverged from the leader's; dropping what the leader does not have");
                    p.truncate_to(to, now_ms())
                }
                0 => p.append_from_leader(pd.records.unwrap_or_default(), pd.high_watermark).and_then(|_| {
                    // Retention and DeleteRecords on the leader move its log start; the copy
                    // follows (never past its own log end).
                    if pd.log_start_offset > p.log_start_offset() {
                        p.delete_records_before(pd.log_start_offset)?;
                    }
                    Ok(())
                }),
                OFFSET_OUT_OF_RANGE => {
                    let leo = p.log_end_offset();
                    if leo < pd.log_start_offset {
                        tracing::info!(partition = ?p, leader, log_end_offset = leo, leader_log_start = pd.log_start_offset, "behind the leader's log start; starting over there");
                        p.restart_at(pd.log_start_offset)
                    } else {
                        tracing::info!(partition = ?p, leader, log_end_offset = leo, leader_high_watermark = pd.high_watermark,
                            dropped_offsets = (leo - pd.high_watermark.max(p.log_start_offset())).max(0), "ahead of the leader's log; truncating to its high watermark");
                        p.truncate_to(pd.high_watermark.max(p.log_start_offset()), now_ms())
                    }
                }
                code => {
                    tracing::debug!(partition = ?p, leader, error_code = code, "the leader refused a partition");
                    backoff = true;
                    Ok(())
                }
            };
            if let Err(e) = result {
                tracing::warn!(partition = ?p, leader, error = %e, "applying a fetch from the leader failed");
                backoff = true;
            }
        }
    }
    backoff
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_follower_with_the_leaders_epoch_truncates_to_the_smaller_end() {
        // The old leader wrote 100..110 in epoch 5 that nobody else has; the new leader's epoch 5
        // ended at 100.
        assert_eq!(truncation_point(5, 100, Some((5, 110)), 110), 100);
        // The follower is behind within the epoch: nothing of its own to drop.
        assert_eq!(truncation_point(5, 100, Some((5, 90)), 90), 90);
    }

    #[test]
    fn a_follower_without_the_leaders_epoch_truncates_to_the_end_of_its_own_earlier_epoch() {
        assert_eq!(truncation_point(5, 100, Some((3, 80)), 120), 80);
    }

    #[test]
    fn a_follower_with_no_epochs_truncates_to_the_leaders_end() {
        assert_eq!(truncation_point(5, 100, None, 120), 100);
        assert_eq!(truncation_point(5, 100, None, 40), 40);
    }
}
