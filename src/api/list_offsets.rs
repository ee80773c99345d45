//! ListOffsets: earliest (-2), latest (-1), max timestamp (-3), earliest local (-4), and offset
//! by timestamp. Latest is the high watermark (the LSO for read_committed, equal without
//! transactions).

use kafka_protocol::messages::list_offsets_response::*;
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};
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

fn lookup(p: &Partition, timestamp: i64) -> Result<(i64, i64), ResponseError> {
    let found = match timestamp {
        LATEST => return Ok((p.high_watermark(), -1)),
        EARLIEST | EARLIEST_LOCAL => return Ok((p.log_start_offset(), -1)),
        MAX_TIMESTAMP => p.max_timestamp_offset(),
        t if t == EARLIEST_PENDING_UPLOAD || t == LATEST_TIERED => return Ok((-1, -1)),
        t if t < 0 => return Err(ResponseError::InvalidRequest),
        t => p.offset_for_timestamp(t),
    };
    match found {
        Ok(Some((offset, ts))) if offset < p.high_watermark() => Ok((offset, ts)),
        Ok(_) => Ok((-1, -1)),
        Err(e) => {
            tracing::error!(partition = ?p, error = %error_chain(&e), "offset lookup failed");
            Err(ResponseError::KafkaStorageError)
        }
    }
}

pub async fn handle(ctx: &RequestContext, req: ListOffsetsRequest) -> ListOffsetsResponse {
    let broker = &ctx.broker;
    let version = ctx.api_version;
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
                    if let Some(nl) = broker.not_leader(&t.name.0, rp.partition_index) {
                        let code = if nl.unknown() { ResponseError::UnknownTopicOrPartition } else { ResponseError::NotLeaderOrFollower };
                        return resp.with_error_code(code.code());
                    }
                    let Some(p) = topic.as_ref().and_then(|t| t.partition(rp.partition_index)) else {
                        return resp.with_error_code(ResponseError::UnknownTopicOrPartition.code());
                    };
                    if rp.current_leader_epoch >= 0 && rp.current_leader_epoch > p.leader_epoch() {
                        return resp.with_error_code(ResponseError::UnknownLeaderEpoch.code());
                    }
                    if rp.current_leader_epoch >= 0 && rp.current_leader_epoch < p.leader_epoch() {
                        return resp.with_error_code(ResponseError::FencedLeaderEpoch.code());
                    }
                    match lookup(p, rp.timestamp) {
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
