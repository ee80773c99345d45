//! ListOffsets: earliest (-2), latest (-1), max timestamp (-3), earliest local (-4), and offset
//! by timestamp. Latest is the high watermark, for read_committed (isolation level 1) the last
//! stable offset; lookups by timestamp find nothing at or past that bound. OffsetForLeaderEpoch: where a leader epoch ends in the log.

use kafka_protocol::messages::list_offsets_response::*;
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse, OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};
use kafka_protocol::ResponseError;

use super::RequestContext;
use crate::broker::error_chain;
use crate::replication::Partition;

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL: i64 = -4;
const EARLIEST_PENDING_UPLOAD: i64 = -6;
const LATEST_TIERED: i64 = -5;

fn lookup(p: &Partition, timestamp: i64, committed: bool) -> Result<(i64, i64), ResponseError> {
    let visible = if committed { p.last_stable_offset() } else { p.high_watermark() };
    let found = match timestamp {
        LATEST => return Ok((visible, -1)),
        EARLIEST | EARLIEST_LOCAL => return Ok((p.log_start_offset(), -1)),
        MAX_TIMESTAMP => p.max_timestamp_offset(),
        t if t == EARLIEST_PENDING_UPLOAD || t == LATEST_TIERED => return Ok((-1, -1)),
        t if t < 0 => return Err(ResponseError::InvalidRequest),
        t => p.offset_for_timestamp(t),
    };
    match found {
        Ok(Some((offset, ts))) if offset < visible => Ok((offset, ts)),
        Ok(_) => Ok((-1, -1)),
        Err(e) => {
            tracing::error!(partition = ?p, error = %error_chain(&e), "offset lookup failed");
            Err(ResponseError::KafkaStorageError)
        }
    }
}

/// The partition this broker leads, or the error for a request about it: not led here, unknown,
/// or a client leader epoch newer (UNKNOWN_LEADER_EPOCH) or older (FENCED_LEADER_EPOCH, KIP-320)
/// than this leader's.
fn led_partition(
    ctx: &RequestContext,
    name: &str,
    topic: Option<&crate::broker::Topic>,
    index: i32,
    current_leader_epoch: i32,
) -> Result<std::sync::Arc<Partition>, ResponseError> {
    if let Some(nl) = ctx.broker.not_leader(name, index) {
        return Err(if nl.unknown() { ResponseError::UnknownTopicOrPartition } else { ResponseError::NotLeaderOrFollower });
    }
    let p = topic.and_then(|t| t.partition(index)).ok_or(ResponseError::UnknownTopicOrPartition)?;
    if current_leader_epoch >= 0 && current_leader_epoch > p.leader_epoch() {
        return Err(ResponseError::UnknownLeaderEpoch);
    }
    if current_leader_epoch >= 0 && current_leader_epoch < p.leader_epoch() {
        return Err(ResponseError::FencedLeaderEpoch);
    }
    Ok(p.clone())
}

pub async fn handle(ctx: &RequestContext, req: ListOffsetsRequest) -> ListOffsetsResponse {
    let broker = &ctx.broker;
    let version = ctx.api_version;
    let committed = req.isolation_level == 1;
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let topic = broker.topic(&t.name.0);
            let partitions = t
                .partitions
                .into_iter()
                .map(|rp| {
                    let resp = ListOffsetsPartitionResponse::default()
                        .with_partition_index(rp.partition_index)
                        .with_timestamp(-1)
                        .with_offset(-1);
                    let p = match led_partition(ctx, &t.name.0, topic.as_deref(), rp.partition_index, rp.current_leader_epoch) {
                        Ok(p) => p,
                        Err(code) => return resp.with_error_code(code.code()),
                    };
                    match lookup(&p, rp.timestamp, committed) {
                        Ok((offset, ts)) => {
                            let resp = resp.with_offset(offset).with_timestamp(ts);
                            // leader_epoch exists from v4; older versions must leave the default.
                            if offset >= 0 && version >= 4 {
                                resp.with_leader_epoch(p.leader_epoch())
                            } else {
                                resp.with_leader_epoch(-1)
                            }
                        }
                        Err(code) => resp.with_error_code(code.code()),
                    }
                })
                .collect();
            ListOffsetsTopicResponse::default().with_name(t.name).with_partitions(partitions)
        })
        .collect();
    ListOffsetsResponse::default().with_topics(topics)
}

/// OffsetForLeaderEpoch (KIP-101, KIP-320): for each partition this broker leads, the largest
/// epoch at or below the one asked for and where it ends in this log (the log end for the
/// latest epoch), or UNDEFINED (-1, -1) where the log has no such epoch. A consumer uses it after
/// a leader change to find out whether the log it read from was truncated; a stale
/// `CurrentLeaderEpoch` gets FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH.
pub async fn offset_for_leader_epoch(ctx: &RequestContext, req: OffsetForLeaderEpochRequest) -> OffsetForLeaderEpochResponse {
    use kafka_protocol::messages::offset_for_leader_epoch_response::{EpochEndOffset, OffsetForLeaderTopicResult};
    let broker = &ctx.broker;
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let topic = broker.topic(&t.topic.0);
            let partitions = t
                .partitions
                .iter()
                .map(|rp| {
                    let resp = EpochEndOffset::default().with_partition(rp.partition).with_leader_epoch(-1).with_end_offset(-1);
                    let p = match led_partition(ctx, &t.topic.0, topic.as_deref(), rp.partition, rp.current_leader_epoch) {
                        Ok(p) => p,
                        Err(code) => return resp.with_error_code(code.code()),
                    };
                    match p.end_offset_for_epoch(rp.leader_epoch) {
                        Some((epoch, end)) => resp.with_leader_epoch(epoch).with_end_offset(end),
                        None => resp,
                    }
                })
                .collect();
            OffsetForLeaderTopicResult::default().with_topic(t.topic).with_partitions(partitions)
        })
        .collect();
    OffsetForLeaderEpochResponse::default().with_topics(topics)
}
