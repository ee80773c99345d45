//! Produce: validate each partition's record batches, check idempotent-producer sequences,
//! assign offsets and append. Errors are per partition; one bad partition does not fail others.
//!
//! acks=0 gets no response (the dispatcher closes the connection if any partition failed, as
//! Kafka does); acks=1 answers after the leader's append. acks=-1 is refused with
//! NOT_ENOUGH_REPLICAS while the ISR is smaller than `min.insync.replicas`, and answered once the
//! high watermark has passed the batch (every in-sync replica has it: on one node at once; in a
//! cluster when the followers have fetched it), or with REQUEST_TIMED_OUT after the request's
//! timeout, NOT_LEADER_OR_FOLLOWER if leadership moved and NOT_ENOUGH_REPLICAS_AFTER_APPEND if
//! the ISR shrank below the minimum meanwhile. With `flush.acks.all`, acks=all waits
//! until the appended batches are fsynced too ([`Partition::sync_to`], the partitions of one
//! request in parallel). An append that reaches `flush.messages` or `flush.ms` waits for the
//! same fsync whatever its acks, as Kafka flushes inside such an append before answering; the
//! fsync runs on the blocking pool, not on the connection's worker. A failed fsync answers
//! KAFKA_STORAGE_ERROR for that partition.
//!
//! [`append`] does the appends, in request order, and returns what is left to wait for;
//! [`Written::finish`] waits. The connection runs the wait as a task of its own and goes on
//! with the requests behind it (see `network/connection.rs`), so the pipelined requests of one
//! producer share an fsync too.
//!
//! Where the appends run: a request of less than [`OFF_RUNTIME_FROM`] bytes is appended on the
//! connection's task: the small requests of a producer at a moderate rate would otherwise each
//! pay a hand-off to another thread and back in latency. A larger one is appended on the
//! blocking pool: its batches of 64 KiB or more go to the device with `O_DIRECT` and each such
//! write waits for the device, and smaller ones still copy that much into the page cache. On
//! the runtime thread either would stall every connection the thread serves. The connection's
//! task waits for the append and reads nothing more meanwhile, as for any request, so requests
//! keep their order. Reading the next request during the append was tried: each request then
//! arrived in a freshly allocated read buffer, as the one before still held the last, and the
//! page faults on those cost about as much CPU as the thread switches they saved.

use std::sync::Arc;

use kafka_protocol::messages::produce_response::*;
use kafka_protocol::messages::{BrokerId, ProduceRequest, ProduceResponse};
use kafka_protocol::ResponseError;

use super::{str_bytes, Dispatch, RequestContext};
use crate::broker::error_chain;
use crate::log::LogError;
use crate::protocol::record_batch::ProduceValidationError;
use crate::replication::{AppendError, Partition, ReplicationWait};

/// Requests of this many bytes or more are appended on the blocking pool (see the module docs):
/// the size from which an append goes to the device with `O_DIRECT` (`log.io.direct`).
pub const OFF_RUNTIME_FROM: usize = crate::log::io::direct::DIRECT_FROM as usize;

/// Appends `req` (`size` bytes as received) and answers it: on the connection's task if it is
/// small, else on the blocking pool while the connection's task waits (see the module docs).
pub async fn handle(ctx: RequestContext, req: ProduceRequest, size: usize) -> Dispatch {
    let acks = req.acks;
    if size < OFF_RUNTIME_FROM {
        let written = append(&ctx, req);
        return answer(ctx, acks, written).await;
    }
    let (ctx, written) = super::off_runtime(move || {
        let written = append(&ctx, req);
        (ctx, written)
    })
    .await;
    answer(ctx, acks, written).await
}

/// The answer to a produce whose batches are appended: none for acks=0 (the connection closes
/// if a partition failed, as Kafka does), else the response, from a task of its own if it
/// waits for fsyncs.
async fn answer(ctx: RequestContext, acks: i16, written: Written) -> Dispatch {
    if acks == 0 {
        // acks=0 waits only for an fsync due by flush.messages / flush.ms, on the blocking
        // pool; a failure closes the connection like any other.
        match first_error(&written.finish().await) {
            Some(code) => Dispatch::Close(format!("acks=0 produce failed with error code {code}")),
            None => Dispatch::Silent,
        }
    } else if written.is_complete() {
        super::respond(&ctx, &written.finish().await)
    } else {
        Dispatch::Later(tokio::spawn(async move { super::respond(&ctx, &written.finish().await) }))
    }
}

/// Maps an append failure to Kafka's error code and message.
fn append_error(e: &AppendError) -> (ResponseError, String) {
    let code = match e {
        AppendError::InvalidProducerEpoch => ResponseError::InvalidProducerEpoch,
        AppendError::OutOfOrderSequence => ResponseError::OutOfOrderSequenceNumber,
        AppendError::UnknownProducerId => ResponseError::UnknownProducerId,
        AppendError::InvalidTxnState => ResponseError::InvalidTxnState,
        AppendError::CoordinatorFenced => ResponseError::TransactionCoordinatorFenced,
        AppendError::Corrupt(_) => ResponseError::CorruptMessage,
        AppendError::InvalidRecord(_) | AppendError::RecordErrors { .. } => ResponseError::InvalidRecord,
        AppendError::Log(LogError::Validation(v)) => match v {
            ProduceValidationError::CorruptMessage(_) => ResponseError::CorruptMessage,
            ProduceValidationError::MessageTooLarge { .. } => ResponseError::MessageTooLarge,
            ProduceValidationError::InvalidRecord(_) => ResponseError::InvalidRecord,
            ProduceValidationError::UnsupportedCompression(_) => ResponseError::UnsupportedCompressionType,
        },
        AppendError::Log(LogError::Poisoned { .. }) => ResponseError::KafkaStorageError,
        AppendError::Log(_) => ResponseError::KafkaStorageError,
    };
    (code, error_chain(e))
}

/// The response of a produce whose batches are appended, and the fsyncs it still waits for.
pub struct Written {
    response: ProduceResponse,
    /// (topic index, partition index in the response, partition, offset to sync below)
    to_sync: Vec<(usize, usize, Arc<Partition>, i64)>,
    /// acks=all appends the followers have yet to fetch: (topic index, partition index in the
    /// response, partition, offset the high watermark must reach)
    to_replicate: Vec<(usize, usize, Arc<Partition>, i64)>,
    timeout: std::time::Duration,
}

impl Written {
    /// Whether the response is final as it is.
    pub fn is_complete(&self) -> bool {
        self.to_sync.is_empty() && self.to_replicate.is_empty()
    }

    /// The response, once every partition that waits for an fsync (`flush.acks.all`,
    /// `flush.messages`, `flush.ms`) has it; a partition whose fsync failed answers
    /// KAFKA_STORAGE_ERROR.
    pub async fn finish(self) -> ProduceResponse {
        let Written { mut response, to_sync, to_replicate, timeout } = self;
        let synced = futures::future::join_all(to_sync.iter().map(|(_, _, p, end)| p.sync_to(*end))).await;
        for ((t, i, p, _), r) in to_sync.iter().zip(synced) {
            if let Err(e) = r {
                let message = error_chain(&e);
                tracing::error!(topic = %p.topic, partition = p.index, error = %message, "fsync before acknowledging failed");
                crate::metrics::response_error(kafka_protocol::messages::ApiKey::Produce, ResponseError::KafkaStorageError.code());
                let resp = &mut response.responses[*t].partition_responses[*i];
                *resp = PartitionProduceResponse::default()
                    .with_index(resp.index)
                    .with_base_offset(-1)
                    .with_log_append_time_ms(-1)
                    .with_log_start_offset(-1)
                    .with_error_code(ResponseError::KafkaStorageError.code())
                    .with_error_message(Some(str_bytes(&message)));
            }
        }
        let replicated = futures::future::join_all(to_replicate.iter().map(|(_, _, p, end)| p.wait_replicated(*end, timeout))).await;
        for ((t, i, p, _), r) in to_replicate.iter().zip(replicated) {
            let resp = &mut response.responses[*t].partition_responses[*i];
            let code = match r {
                Ok(()) => continue,
                // An fsync failure above already answered for this partition.
                Err(_) if resp.error_code != 0 => continue,
                Err(ReplicationWait::TimedOut) => ResponseError::RequestTimedOut,
                Err(ReplicationWait::NotLeader) => ResponseError::NotLeaderOrFollower,
                Err(ReplicationWait::NotEnoughReplicasAfterAppend) => ResponseError::NotEnoughReplicasAfterAppend,
            };
            tracing::debug!(topic = %p.topic, partition = p.index, ?code, "acks=all produce not acknowledged");
            crate::metrics::response_error(kafka_protocol::messages::ApiKey::Produce, code.code());
            *resp = PartitionProduceResponse::default()
                .with_index(resp.index)
                .with_base_offset(-1)
                .with_log_append_time_ms(-1)
                .with_log_start_offset(-1)
                .with_error_code(code.code());
        }
        response
    }
}

/// A transactional batch must come with its producer's transactional id and go to a partition
/// of its ongoing transaction ([`super::txn::verify_produce`]); the error if it does not.
fn check_transactional(ctx: &RequestContext, transactional_id: Option<&str>, topic: &str, partition: i32, records: Option<&[u8]>) -> Option<(ResponseError, String)> {
    let header = crate::protocol::record_batch::BatchHeader::parse(records?).ok()?;
    if !header.is_transactional() {
        return None;
    }
    let Some(id) = transactional_id else {
        return Some((ResponseError::InvalidTxnState, "a transactional record batch needs its producer's transactional id".into()));
    };
    super::txn::verify_produce(ctx, id, header.producer_id, header.producer_epoch, topic, partition).err()
}

/// Appends every partition's batches; see the module docs.
pub fn append(ctx: &RequestContext, req: ProduceRequest) -> Written {
    let broker = &ctx.broker;
    let acks_valid = matches!(req.acks, -1..=1);
    let transactional_id = req.transactional_id.as_ref().map(|id| id.to_string());
    let now = broker.now_ms();
    let sync = req.acks == -1;
    let mut to_sync = Vec::new();
    let mut to_replicate = Vec::new();
    let timeout = std::time::Duration::from_millis(req.timeout_ms.clamp(0, 300_000) as u64);
    let mut responses = Vec::with_capacity(req.topic_data.len());
    // Leaders named in NOT_LEADER_OR_FOLLOWER answers, whose endpoints go with the response.
    let mut leaders: Vec<i32> = Vec::new();
    for topic_data in req.topic_data {
        let name = topic_data.name.0.to_string();
        let topic = broker.topic(&name);
        let mut partition_responses = Vec::with_capacity(topic_data.partition_data.len());
        for pd in topic_data.partition_data {
            let mut resp = PartitionProduceResponse::default()
                .with_index(pd.index)
                .with_base_offset(-1)
                .with_log_append_time_ms(-1)
                .with_log_start_offset(-1);
            let partition = topic.as_ref().and_then(|t| t.partition(pd.index).cloned());
            let not_leader = broker.not_leader(&name, pd.index);
            let result = if let Some(nl) = not_leader {
                if nl.unknown() {
                    Err((ResponseError::UnknownTopicOrPartition, String::new()))
                } else {
                    // KIP-951: tell the client who leads, so it need not refresh its metadata.
                    resp = resp.with_current_leader(
                        LeaderIdAndEpoch::default().with_leader_id(BrokerId(nl.leader)).with_leader_epoch(nl.leader_epoch),
                    );
                    if nl.leader >= 0 && !leaders.contains(&nl.leader) {
                        leaders.push(nl.leader);
                    }
                    Err((ResponseError::NotLeaderOrFollower, String::new()))
                }
            } else if !acks_valid {
                Err((ResponseError::InvalidRequiredAcks, String::new()))
            } else if let Some(e) = check_transactional(ctx, transactional_id.as_deref(), &name, pd.index, pd.records.as_deref()) {
                Err(e)
            } else if let Some(p) = partition.as_ref().filter(|p| sync && !p.has_min_isr()) {
                Err((
                    ResponseError::NotEnoughReplicas,
                    format!("the in-sync replicas of {}-{} are fewer than min.insync.replicas", p.topic, p.index),
                ))
            } else if let Some(p) = &partition {
                match pd.records {
                    None => Err((ResponseError::InvalidRecord, "no record batches".to_string())),
                    Some(r) if r.is_empty() => Err((ResponseError::InvalidRecord, "no record batches".to_string())),
                    Some(records) => {
                        let appended = p.append(records, now);
                        if let Err(AppendError::RecordErrors { records, log_start_offset, .. }) = &appended {
                            // Kafka answers per-record errors (KIP-467) with the log start offset.
                            resp = resp.with_log_start_offset(*log_start_offset).with_record_errors(
                                records
                                    .iter()
                                    .map(|(i, m)| {
                                        BatchIndexAndErrorMessage::default()
                                            .with_batch_index(*i)
                                            .with_batch_index_error_message(Some(str_bytes(m)))
                                    })
                                    .collect(),
                            );
                        }
                        appended.map_err(|e| append_error(&e))
                    }
                }
            } else {
                Err((ResponseError::UnknownTopicOrPartition, String::new()))
            };
            match result {
                Ok(a) => {
                    if let Some(t) = &topic {
                        broker.metrics.record_produce(&t.name, pd.index, a.records, a.bytes);
                    }
                    resp = resp
                        .with_base_offset(a.base_offset)
                        .with_log_append_time_ms(a.log_append_time)
                        .with_log_start_offset(a.log_start_offset);
                    if let Some(p) = partition.as_ref().filter(|p| sync && p.high_watermark() < a.next_offset) {
                        to_replicate.push((responses.len(), partition_responses.len(), p.clone(), a.next_offset));
                    }
                    if let Some(p) = partition.filter(|p| a.flush_due || (sync && p.flush_acks_all())) {
                        to_sync.push((responses.len(), partition_responses.len(), p, a.next_offset));
                    }
                }
                Err((code, message)) => {
                    crate::metrics::response_error(kafka_protocol::messages::ApiKey::Produce, code.code());
                    if code == ResponseError::KafkaStorageError {
                        tracing::error!(topic = %name, partition = pd.index, error = %message, "append failed");
                    } else {
                        tracing::debug!(topic = %name, partition = pd.index, ?code, error = %message, "produce refused");
                    }
                    resp = resp.with_error_code(code.code());
                    if !message.is_empty() {
                        resp = resp.with_error_message(Some(str_bytes(&message)));
                    }
                }
            }
            partition_responses.push(resp);
        }
        responses.push(TopicProduceResponse::default().with_name(topic_data.name).with_partition_responses(partition_responses));
    }
    let node_endpoints = leaders
        .into_iter()
        .filter_map(|id| broker.broker_info(id, &ctx.listener))
        .map(|b| {
            NodeEndpoint::default()
                .with_node_id(BrokerId(b.id))
                .with_host(str_bytes(&b.host))
                .with_port(b.port as i32)
                .with_rack(b.rack.as_deref().map(str_bytes))
        })
        .collect();
    Written {
        response: ProduceResponse::default().with_responses(responses).with_node_endpoints(node_endpoints),
        to_sync,
        to_replicate,
        timeout,
    }
}

/// The first non-zero error code in a response (acks=0 closes the connection on errors).
fn first_error(resp: &ProduceResponse) -> Option<i16> {
    resp.responses
        .iter()
        .flat_map(|t| t.partition_responses.iter())
        .map(|p| p.error_code)
        .find(|c| *c != 0)
}
