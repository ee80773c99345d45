//! Fetch: whole record batches from each partition's log up to the high watermark, with long
//! polling and incremental fetch sessions.
//!
//! Fetch from follower (KIP-392): a consumer's fetch (v11+) of a partition this broker holds a
//! replica of but does not lead is served from the local copy, up to its own high watermark
//! (which follows the leader's, so nothing uncommitted is read; an offset past its log end is
//! OFFSET_OUT_OF_RANGE, on which clients go back to the leader). With
//! `replica.selector.class` set to Kafka's rack-aware selector, a leader answers a consumer
//! whose rack has an in-sync follower but not the leader with that follower as its preferred
//! read replica, at once and without records.
//!
//! Long poll: if the first pass gathers fewer than `min_bytes`, the request waits on the
//! partitions' append notifications (registered before the re-read, so none is missed) until
//! enough data arrived or `max_wait_ms` passed. No timer loop polls the logs.
//!
//! Limits: the response holds at most `max_bytes` (request) and each partition at most its
//! `partition_max_bytes`, except that the first batch of the first partition with data is always
//! returned whole (KIP-74) so a batch larger than the limits cannot stall a consumer.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::FetchRequest;
use kafka_protocol::ResponseError;
use uuid::Uuid;

use super::fetch_frame::{FetchReply, NodeEndpointReply, PartitionReply, TopicReply};
use super::fetch_session::{PartitionKey, SessionPartition, SessionPlan};
use super::RequestContext;
use crate::broker::error_chain;
use crate::log::{LogError, SliceRead};
use crate::replication::Partition;

/// Longest wait honoured, whatever the client asks (Kafka bounds it by the request timeout).
const MAX_WAIT_CAP: Duration = Duration::from_secs(60);

/// One partition to answer.
struct Wanted {
    key: PartitionKey,
    topic_id: Uuid,
    fetch_offset: i64,
    max_bytes: i32,
    current_leader_epoch: i32,
    /// Followers (v12+): the epoch of the last batch they have, checked against this log.
    last_fetched_epoch: i32,
    partition: Result<Arc<Partition>, ResponseError>,
    /// KIP-951: the leader and its epoch, for a partition another broker leads.
    leader_hint: Option<(i32, i32)>,
    /// For incremental sessions: what was last sent (to skip partitions without news).
    last_sent: Option<(i64, i64)>,
    /// A follower outside the ISR fetching a partition under `leader.replication.throttled.*`:
    /// answered without records while the leader's replication quota is exceeded.
    throttled: bool,
    /// KIP-392: the follower this consumer should read from instead (answered at once, without
    /// records).
    preferred: Option<i32>,
}

struct Outcome {
    error: ResponseError,
    records: Option<SliceRead>,
    high_watermark: i64,
    /// The last stable offset (the high watermark for a read_uncommitted fetch).
    last_stable_offset: i64,
    log_start_offset: i64,
    /// For a follower whose log diverged: `(epoch, end offset)` to truncate to.
    diverging_epoch: Option<(i32, i64)>,
    /// read_committed: the aborted transactions `(producer id, first offset)` overlapping the
    /// records returned.
    aborted: Vec<(i64, i64)>,
}

impl Outcome {
    fn error(e: ResponseError) -> Outcome {
        Outcome {
            error: e,
            records: None,
            high_watermark: -1,
            last_stable_offset: -1,
            log_start_offset: -1,
            diverging_epoch: None,
            aborted: Vec::new(),
        }
    }

    /// Offsets without records.
    fn empty(p: &crate::replication::Partition, committed: bool) -> Outcome {
        let high_watermark = p.high_watermark();
        Outcome {
            error: ResponseError::Unknown(0),
            records: None,
            high_watermark,
            last_stable_offset: if committed { p.last_stable_offset() } else { high_watermark },
            log_start_offset: p.log_start_offset(),
            diverging_epoch: None,
            aborted: Vec::new(),
        }
    }
}

/// Whether a follower's fetch counts as its progress: in the leader's epoch (when it names one)
/// and consistent with this log ([`crate::replication::Partition::follower_fetch_is_consistent`]).
fn follower_progress_is_valid(w: &Wanted, p: &crate::replication::Partition) -> bool {
    (w.current_leader_epoch < 0 || w.current_leader_epoch == p.leader_epoch())
        && p.follower_fetch_is_consistent(w.fetch_offset, w.last_fetched_epoch)
}

/// Reads one partition: for a consumer up to the high watermark (read_committed, `committed`:
/// up to the last stable offset, with the aborted transactions among the records), for a
/// follower (`replica`) up to the log end, after checking that the follower's last epoch ends
/// where it thinks (else it gets the diverging epoch and no records, KIP-595's check that
/// Kafka's followers rely on).
fn read_one(w: &Wanted, budget: usize, first: bool, replica: bool, committed: bool) -> Outcome {
    let p = match &w.partition {
        Ok(p) => p,
        Err(e) => return Outcome::error(*e),
    };
    if w.current_leader_epoch >= 0 && w.current_leader_epoch > p.leader_epoch() {
        return Outcome::error(ResponseError::UnknownLeaderEpoch);
    }
    if w.current_leader_epoch >= 0 && w.current_leader_epoch < p.leader_epoch() {
        return Outcome::error(ResponseError::FencedLeaderEpoch);
    }
    let hw = p.high_watermark();
    let max = budget.min(w.max_bytes.max(0) as usize);
    if replica && w.last_fetched_epoch >= 0 {
        match p.end_offset_for_epoch(w.last_fetched_epoch) {
            Some((epoch, end)) if epoch == w.last_fetched_epoch && end >= w.fetch_offset => {}
            found => {
                let (epoch, end) = found.unwrap_or((-1, -1));
                return Outcome { diverging_epoch: Some((epoch, end)), ..Outcome::empty(p, false) };
            }
        }
    }
    let committed = committed && !replica;
    let end = if replica { p.log_end_offset() } else { hw };
    let result = if committed {
        p.read_slice_committed(w.fetch_offset, max, first)
    } else if w.fetch_offset == end && w.fetch_offset >= p.log_start_offset() {
        Ok((None, hw, Vec::new()))
    } else if replica {
        p.read_slice_for_replica(w.fetch_offset, max, first).map(|r| (r, hw, Vec::new()))
    } else {
        p.read_slice(w.fetch_offset, max, first).map(|r| (r, hw, Vec::new()))
    };
    match result {
        Ok((records, last_stable_offset, aborted)) => Outcome {
            error: ResponseError::Unknown(0),
            records: records.filter(|r| !r.slice.is_empty()),
            high_watermark: hw,
            last_stable_offset,
            log_start_offset: p.log_start_offset(),
            diverging_epoch: None,
            aborted: aborted.iter().map(|t| (t.producer_id, t.first_offset)).collect(),
        },
        // A follower is told where the leader's log starts and ends, to start over from there.
        Err(LogError::OffsetOutOfRange { .. }) if replica => Outcome {
            high_watermark: hw,
            log_start_offset: p.log_start_offset(),
            ..Outcome::error(ResponseError::OffsetOutOfRange)
        },
        // Kafka reports -1 offsets alongside OFFSET_OUT_OF_RANGE.
        Err(LogError::OffsetOutOfRange { .. }) => Outcome::error(ResponseError::OffsetOutOfRange),
        Err(e) => {
            tracing::error!(partition = ?p, offset = w.fetch_offset, error = %error_chain(&e), "fetch read failed");
            Outcome::error(ResponseError::KafkaStorageError)
        }
    }
}

/// One pass over every wanted partition; returns outcomes and total bytes. With `withhold`
/// (the leader's replication quota exceeded), throttled partitions get no records.
fn read_all(wanted: &[Wanted], max_bytes: usize, replica: bool, committed: bool, withhold: bool) -> (Vec<Outcome>, usize) {
    let mut total = 0usize;
    let mut outcomes = Vec::with_capacity(wanted.len());
    let mut have_data = false;
    for w in wanted {
        let budget = max_bytes.saturating_sub(total);
        let o = if (budget == 0 && have_data) || (withhold && w.throttled) || w.preferred.is_some() {
            // Out of budget: report offsets without data.
            match &w.partition {
                Ok(p) => Outcome::empty(p, committed && !replica),
                Err(e) => Outcome::error(*e),
            }
        } else {
            read_one(w, budget, !have_data, replica, committed)
        };
        if let Some(r) = &o.records {
            total += r.slice.len();
            have_data = true;
        }
        outcomes.push(o);
    }
    (outcomes, total)
}

fn code(e: ResponseError) -> i16 {
    match e {
        ResponseError::Unknown(0) => 0,
        other => other.code(),
    }
}

/// Answers a Fetch; records stay in the segment files (see [`super::fetch_frame`]).
pub async fn handle(ctx: &RequestContext, req: FetchRequest) -> FetchReply {
    let broker = &ctx.broker;
    let uses_ids = ctx.api_version >= 13;

    // Resolve requested partitions.
    let mut requested: Vec<(PartitionKey, SessionPartition)> = Vec::new();
    let mut unresolved: Vec<(Uuid, String, i32, ResponseError)> = Vec::new();
    for t in &req.topics {
        let name = if uses_ids { broker.topic_name_of(t.topic_id) } else { Some(t.topic.0.to_string()) };
        let Some(name) = name else {
            for p in &t.partitions {
                unresolved.push((t.topic_id, String::new(), p.partition, ResponseError::UnknownTopicId));
            }
            continue;
        };
        for p in &t.partitions {
            requested.push((
                (name.clone(), p.partition),
                SessionPartition {
                    fetch_offset: p.fetch_offset,
                    max_bytes: p.partition_max_bytes,
                    current_leader_epoch: p.current_leader_epoch,
                    last_fetched_epoch: p.last_fetched_epoch,
                    last_high_watermark: -1,
                    last_log_start_offset: -1,
                },
            ));
        }
    }
    let forgotten: Vec<PartitionKey> = req
        .forgotten_topics_data
        .iter()
        .flat_map(|f| {
            let name = if uses_ids {
                broker.topic_name_of(f.topic_id).unwrap_or_default()
            } else {
                f.topic.0.to_string()
            };
            f.partitions.iter().map(move |p| (name.clone(), *p))
        })
        .collect();

    let plan = if ctx.api_version >= 7 {
        ctx.fetch_sessions.plan(req.session_id, req.session_epoch, &requested, &forgotten, Instant::now())
    } else {
        SessionPlan::Full { session_id: 0 }
    };
    let (session_id, incremental, targets) = match plan {
        SessionPlan::Error(e) => {
            crate::metrics::response_error(kafka_protocol::messages::ApiKey::Fetch, e.code());
            return FetchReply::error(e.code());
        }
        SessionPlan::Full { session_id } => (session_id, false, requested),
        SessionPlan::Incremental { session_id, partitions } => (session_id, true, partitions),
    };

    // A follower's fetch names its replica id; a consumer's (v11+, which carries its rack) may
    // be served by a follower replica (KIP-392).
    let replica = if ctx.api_version >= 15 { req.replica_state.replica_id.0 } else { req.replica_id.0 };
    let replica_epoch = if ctx.api_version >= 15 { req.replica_state.replica_epoch } else { -1 };
    let is_replica = replica >= 0;
    let from_follower = !is_replica && ctx.api_version >= 11;
    let mut wanted: Vec<Wanted> = targets
        .into_iter()
        .map(|(key, sp)| {
            let topic = broker.topic(&key.0);
            let not_leader = broker.not_leader(&key.0, key.1);
            let leader_hint = not_leader.as_ref().filter(|nl| !nl.unknown() && nl.leader >= 0).map(|nl| (nl.leader, nl.leader_epoch));
            let partition = match (&topic, not_leader) {
                // In a cluster, only the leader serves a partition's records.
                (_, Some(nl)) if nl.unknown() => Err(ResponseError::UnknownTopicOrPartition),
                // A replica serves consumers from its own copy, up to its high watermark.
                (Some(t), Some(_)) if from_follower && broker.is_replica(&key.0, key.1) => {
                    t.partition(key.1).cloned().ok_or(ResponseError::NotLeaderOrFollower)
                }
                (_, Some(_)) => Err(ResponseError::NotLeaderOrFollower),
                (Some(t), None) => t.partition(key.1).cloned().ok_or(ResponseError::UnknownTopicOrPartition),
                (None, None) if uses_ids => Err(ResponseError::UnknownTopicId),
                (None, None) => Err(ResponseError::UnknownTopicOrPartition),
            };
            Wanted {
                topic_id: topic.map(|t| t.id).unwrap_or_default(),
                key,
                fetch_offset: sp.fetch_offset,
                max_bytes: sp.max_bytes,
                current_leader_epoch: sp.current_leader_epoch,
                last_fetched_epoch: sp.last_fetched_epoch,
                partition,
                leader_hint,
                last_sent: incremental.then_some((sp.last_high_watermark, sp.last_log_start_offset)),
                throttled: false,
                preferred: None,
            }
        })
        .collect();

    let max_bytes = if ctx.api_version >= 3 { req.max_bytes.max(0) as usize } else { i32::MAX as usize };
    let min_bytes = req.min_bytes.max(0) as usize;
    let deadline = tokio::time::Instant::now() + Duration::from_millis(req.max_wait_ms.max(0) as u64).min(MAX_WAIT_CAP);

    // Kafka sends null aborted transactions for read_uncommitted and a list for read_committed.
    let committed = req.isolation_level == 1;
    // A follower's fetch says how far it has come: the high watermark may move before we read.
    if is_replica {
        let now = broker.now_ms();
        for w in wanted.iter_mut() {
            // Only a replica of the partition reads past the high watermark (Kafka answers
            // anyone else NOT_LEADER_OR_FOLLOWER).
            if let Ok(p) = &w.partition {
                let known = if follower_progress_is_valid(w, p) {
                    p.follower_fetched(replica, replica_epoch, w.fetch_offset, now)
                } else {
                    p.is_follower(replica)
                };
                if !known {
                    w.partition = Err(ResponseError::NotLeaderOrFollower);
                }
            }
        }
    }
    // Replication throttles (a reassignment's `--throttle`): followers outside the ISR of
    // partitions whose leader.replication.throttled.replicas names this broker.
    let throttling = is_replica && broker.leader_quota.is_limited();
    if throttling {
        for w in wanted.iter_mut() {
            if let Ok(p) = &w.partition {
                let listed = broker.topic(&w.key.0).is_some_and(|t| {
                    t.overrides.get("leader.replication.throttled.replicas").is_some_and(|v| {
                        crate::replication::throttle::names_replica(v, w.key.1, broker.node_id)
                    })
                });
                w.throttled = listed && !p.leader_has_in_isr(replica);
            }
        }
    }
    let throttling = throttling && wanted.iter().any(|w| w.throttled);
    // KIP-392: with the rack-aware selector, a leader sends a consumer in another rack to an
    // in-sync follower in its own.
    if from_follower && broker.config.replica_selector_rack_aware && !req.rack_id.is_empty() {
        let now = broker.now_ms();
        let rack_of = |b: i32| broker.broker_info(b, &ctx.listener).and_then(|i| i.rack);
        for w in wanted.iter_mut() {
            if let Ok(p) = &w.partition {
                w.preferred = p.preferred_read_replica(w.fetch_offset, now, req.rack_id.as_str(), rack_of);
            }
        }
    }
    let redirected = wanted.iter().any(|w| w.preferred.is_some());
    let withhold = || throttling && broker.leader_quota.exceeded(broker.now_ms());
    let (mut outcomes, mut total) = read_all(&wanted, max_bytes, is_replica, committed, withhold());
    let any_error = outcomes.iter().any(|o| code(o.error) != 0);
    while total < min_bytes && !any_error && !redirected && !wanted.is_empty() && tokio::time::Instant::now() < deadline {
        let parts: Vec<&Arc<Partition>> = wanted.iter().filter_map(|w| w.partition.as_ref().ok()).collect();
        let mut waits: Vec<_> = parts.iter().map(|p| Box::pin(p.appended.notified())).collect();
        for w in waits.iter_mut() {
            w.as_mut().enable();
        }
        // Re-read after registering so an append that raced the first pass is not missed.
        (outcomes, total) = read_all(&wanted, max_bytes, is_replica, committed, withhold());
        if total >= min_bytes {
            break;
        }
        if waits.is_empty() || tokio::time::timeout_at(deadline, futures::future::select_all(waits)).await.is_err() {
            break;
        }
        (outcomes, total) = read_all(&wanted, max_bytes, is_replica, committed, withhold());
    }

    // Build the response, grouping consecutive partitions of a topic.
    let mut responses: Vec<TopicReply> = Vec::new();
    crate::metrics::fetch_response(total);
    for (w, o) in wanted.iter().zip(outcomes) {
        crate::metrics::response_error(kafka_protocol::messages::ApiKey::Fetch, code(o.error));
        if let (Some(r), Ok(p)) = (&o.records, &w.partition) {
            // Offsets covered, which is the record count unless compaction removed some.
            let records = (r.next_offset - r.first_offset).max(0) as u64;
            broker.metrics.record_fetch(&p.topic, p.index, records, r.slice.len());
            if w.throttled {
                broker.leader_quota.record(r.slice.len() as u64, broker.now_ms());
            }
        }
        if let Some((last_hw, last_start)) = w.last_sent {
            let news = o.records.is_some()
                || code(o.error) != 0
                || o.high_watermark != last_hw
                || o.log_start_offset != last_start;
            if !news {
                continue;
            }
        }
        ctx.fetch_sessions.record_sent(session_id, &w.key, o.high_watermark, o.log_start_offset);
        let data = PartitionReply {
            partition_index: w.key.1,
            error_code: code(o.error),
            high_watermark: o.high_watermark,
            last_stable_offset: o.last_stable_offset,
            log_start_offset: o.log_start_offset,
            aborted_transactions: committed.then_some(o.aborted),
            preferred_read_replica: w.preferred.unwrap_or(-1),
            records: o.records.map(|r| r.slice),
            current_leader: w.leader_hint.filter(|_| code(o.error) == ResponseError::NotLeaderOrFollower.code()),
            diverging_epoch: o.diverging_epoch,
        };
        let same_topic = responses.last().map(|r| r.name == w.key.0 && (!uses_ids || r.topic_id == w.topic_id));
        if same_topic == Some(true) {
            if let Some(last) = responses.last_mut() {
                last.partitions.push(data);
            }
        } else {
            responses.push(TopicReply { name: w.key.0.clone(), topic_id: w.topic_id, partitions: vec![data] });
        }
    }
    for (id, name, p, e) in unresolved {
        crate::metrics::response_error(kafka_protocol::messages::ApiKey::Fetch, e.code());
        responses.push(TopicReply {
            name,
            topic_id: id,
            partitions: vec![PartitionReply {
                partition_index: p,
                error_code: e.code(),
                high_watermark: -1,
                last_stable_offset: -1,
                log_start_offset: -1,
                aborted_transactions: committed.then(Vec::new),
                preferred_read_replica: -1,
                records: None,
                current_leader: None,
                diverging_epoch: None,
            }],
        });
    }
    // The endpoints of the leaders named above, so the client can go there at once.
    let mut leaders: Vec<i32> = responses.iter().flat_map(|t| &t.partitions).filter_map(|p| p.current_leader.map(|(id, _)| id)).collect();
    leaders.sort_unstable();
    leaders.dedup();
    let node_endpoints = leaders
        .into_iter()
        .filter_map(|id| broker.broker_info(id, &ctx.listener))
        .map(|b| NodeEndpointReply { node_id: b.id, host: b.host, port: b.port as i32, rack: b.rack })
        .collect();
    FetchReply { session_id, responses, node_endpoints, ..FetchReply::default() }
}
