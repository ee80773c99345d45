//! InitProducerId for idempotent producers: a fresh producer id at epoch 0 per call (on a single
//! node from the local allocator, in a cluster from blocks the controller allocates); and
//! DescribeProducers, the producers a partition keeps sequence state for.
//! A transactional id goes to the transaction coordinator ([`super::txn`]). An empty
//! (non-null) transactional id is malformed, and gets INVALID_REQUEST as from Kafka.

use kafka_protocol::messages::describe_producers_response::{PartitionResponse, ProducerState, TopicResponse};
use kafka_protocol::messages::{
    DescribeProducersRequest, DescribeProducersResponse, InitProducerIdRequest, InitProducerIdResponse, ProducerId,
};
use kafka_protocol::ResponseError;

use super::RequestContext;
use crate::broker::error_chain;

pub async fn handle(ctx: &RequestContext, req: InitProducerIdRequest) -> InitProducerIdResponse {
    let resp = InitProducerIdResponse::default().with_producer_id(ProducerId(-1)).with_producer_epoch(-1);
    match req.transactional_id.as_ref().map(|id| id.to_string()) {
        None => {}
        Some(id) if id.is_empty() => return resp.with_error_code(ResponseError::InvalidRequest.code()),
        Some(id) => return super::txn::init_producer_id(ctx, req, &id).await,
    }
    if let Some(view) = ctx.broker.cluster() {
        // In a cluster the ids come in blocks from the controller. Without a block (no active
        // controller, this broker not registered yet) the client is told to retry, as Kafka's
        // broker answers while its next block is on the way.
        return match view.allocate_producer_id().await {
            Ok(id) => resp.with_producer_id(ProducerId(id)).with_producer_epoch(0),
            Err(e) => {
                tracing::warn!(error = %e, "no producer id block from the controller; the client will retry");
                resp.with_error_code(ResponseError::CoordinatorLoadInProgress.code())
            }
        };
    }
    // Starting a new block of ids writes its end with fsync: on the blocking pool.
    let broker = ctx.broker.clone();
    match super::off_runtime(move || broker.allocate_producer_id()).await {
        Ok(id) => resp.with_producer_id(ProducerId(id)).with_producer_epoch(0),
        Err(e) => {
            tracing::error!(error = %error_chain(&e), "allocating a producer id failed");
            resp.with_error_code(ResponseError::UnknownServerError.code())
        }
    }
}

/// Each partition's producers with their epoch, last sequence, last timestamp, the coordinator
/// epoch of their last marker and the start offset of their open transaction (-1 for none), as
/// Kafka's `kafka-transactions.sh describe-producers` shows them. A partition this node does
/// not have is UNKNOWN_TOPIC_OR_PARTITION; in a cluster, one it does not lead is
/// NOT_LEADER_OR_FOLLOWER.
pub async fn describe_producers(ctx: &RequestContext, req: DescribeProducersRequest) -> DescribeProducersResponse {
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let partitions = t
                .partition_indexes
                .iter()
                .map(|&index| {
                    let r = PartitionResponse::default().with_partition_index(index);
                    // In a cluster only the leader keeps the producers' state (Kafka's admin
                    // client sends this request to each partition's leader).
                    match ctx.broker.not_leader(&t.name, index) {
                        Some(nl) if nl.unknown() => return r.with_error_code(ResponseError::UnknownTopicOrPartition.code()),
                        Some(_) => return r.with_error_code(ResponseError::NotLeaderOrFollower.code()),
                        None => {}
                    }
                    let Some(p) = ctx.broker.partition(&t.name, index) else {
                        return r.with_error_code(ResponseError::UnknownTopicOrPartition.code());
                    };
                    let producers = p
                        .active_producers()
                        .into_iter()
                        .map(|a| {
                            ProducerState::default()
                                .with_producer_id(ProducerId(a.producer_id))
                                .with_producer_epoch(a.epoch.into())
                                .with_last_sequence(a.last_sequence)
                                .with_last_timestamp(a.last_timestamp)
                                .with_coordinator_epoch(a.coordinator_epoch)
                                .with_current_txn_start_offset(a.txn_start_offset)
                        })
                        .collect();
                    r.with_active_producers(producers)
                })
                .collect();
            TopicResponse::default().with_name(t.name).with_partitions(partitions)
        })
        .collect();
    DescribeProducersResponse::default().with_topics(topics)
}
