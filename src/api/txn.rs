//! Transaction APIs (KIP-98): InitProducerId with a transactional id, AddPartitionsToTxn
//! (v0-3, from clients) and EndTxn, translated to and from [`crate::txn::Txns`]; and the check
//! of a transactional Produce against the coordinator ([`verify_produce`]).
//!
//! Every outcome is an error code in the response, never a closed connection. A broker that is
//! not the only one of its cluster coordinates no transactions yet (see `txn::driver`, "Scope"):
//! FindCoordinator refuses them with a message ([`serves_transactions`]).

use std::collections::BTreeSet;

use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, EndTxnRequest, EndTxnResponse, InitProducerIdRequest,
    InitProducerIdResponse, ProducerId,
};
use kafka_protocol::ResponseError;

use super::RequestContext;

/// Whether transactions are served: while this broker is the only one of its cluster.
pub(crate) fn serves_transactions(ctx: &RequestContext) -> bool {
    ctx.broker.live_brokers(&ctx.listener).len() <= 1
}

/// Why this broker cannot act for `transactional_id` now, if it cannot.
fn not_ready(ctx: &RequestContext, transactional_id: &str) -> Option<ResponseError> {
    if !serves_transactions(ctx) {
        return Some(ResponseError::NotCoordinator);
    }
    ctx.broker.txns().not_ready(&ctx.broker, transactional_id)
}

/// Has the controller create `__transaction_state` (`transaction.state.log.num.partitions`,
/// `transaction.state.log.replication.factor`) if it does not exist yet; a failure is logged,
/// and the request then gets COORDINATOR_NOT_AVAILABLE and is retried.
pub(crate) async fn ensure_state_topic(ctx: &RequestContext) {
    if ctx.broker.topic_info(crate::txn::STATE_TOPIC).is_some() {
        return;
    }
    let txns = ctx.broker.txns();
    // Kafka's default is 3; a single node has one broker to place on.
    let default_rf = if ctx.broker.config.is_single_voter() { 1 } else { 3 };
    let rf = ctx.broker.config.raw.get("transaction.state.log.replication.factor").and_then(|v| v.trim().parse().ok()).unwrap_or(default_rf);
    let created = super::topics::forward_create(&ctx.broker, crate::txn::STATE_TOPIC, txns.config.state_partitions, rf, txns.state_topic_configs()).await;
    if let Err(e) = created {
        tracing::warn!(error = %e, "creating the transaction state topic through the controller failed");
    }
}

/// InitProducerId with a (non-empty) transactional id: the id's producer id and new epoch,
/// fencing any older producer with the same id. A producer recovering from an error gives its
/// current producer id and epoch (KIP-360); -1/-1 otherwise.
pub async fn init_producer_id(ctx: &RequestContext, req: InitProducerIdRequest, transactional_id: &str) -> InitProducerIdResponse {
    let resp = InitProducerIdResponse::default().with_producer_id(ProducerId(-1)).with_producer_epoch(-1);
    ensure_state_topic(ctx).await;
    if let Some(e) = not_ready(ctx, transactional_id) {
        return resp.with_error_code(e.code());
    }
    let expected = (req.producer_id.0 >= 0).then_some((req.producer_id.0, req.producer_epoch));
    match ctx.broker.txns().init_producer_id(&ctx.broker, transactional_id, req.transaction_timeout_ms, expected).await {
        Ok((id, epoch)) => resp.with_producer_id(ProducerId(id)).with_producer_epoch(epoch),
        // Clients before v4 know PRODUCER_FENCED as INVALID_PRODUCER_EPOCH (as Kafka answers).
        Err(ResponseError::ProducerFenced) if ctx.api_version < 4 => resp.with_error_code(ResponseError::InvalidProducerEpoch.code()),
        Err(e) => resp.with_error_code(e.code()),
    }
}

/// AddPartitionsToTxn v0-3: every partition gets the same outcome; partitions of unknown
/// topics get UNKNOWN_TOPIC_OR_PARTITION and then the rest OPERATION_NOT_ATTEMPTED, as Kafka
/// answers. (v4+, the brokers' batched verification, is not served.)
pub async fn add_partitions_to_txn(ctx: &RequestContext, req: AddPartitionsToTxnRequest) -> AddPartitionsToTxnResponse {
    let id = req.v3_and_below_transactional_id.0.to_string();
    let wanted: Vec<(String, i32)> = req
        .v3_and_below_topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(move |p| (t.name.0.to_string(), *p)))
        .collect();
    let unknown: BTreeSet<(String, i32)> = wanted.iter().filter(|(t, p)| ctx.broker.partition(t, *p).is_none()).cloned().collect();
    let outcome = |tp: &(String, i32)| -> ResponseError {
        if unknown.contains(tp) {
            ResponseError::UnknownTopicOrPartition
        } else {
            ResponseError::OperationNotAttempted
        }
    };
    let result: Result<(), ResponseError> = if let Some(e) = not_ready(ctx, &id) {
        Err(e)
    } else if !unknown.is_empty() {
        Err(ResponseError::UnknownTopicOrPartition)
    } else {
        let partitions: BTreeSet<(String, i32)> = wanted.iter().cloned().collect();
        let (pid, epoch) = (req.v3_and_below_producer_id.0, req.v3_and_below_producer_epoch);
        ctx.broker.txns().add_partitions(&ctx.broker, &id, pid, epoch, &partitions).await
    };
    let code = |tp: &(String, i32)| match result {
        Ok(()) => 0,
        Err(ResponseError::UnknownTopicOrPartition) => outcome(tp).code(),
        // Old clients know PRODUCER_FENCED as INVALID_PRODUCER_EPOCH (Kafka does the same).
        Err(ResponseError::ProducerFenced) if ctx.api_version < 2 => ResponseError::InvalidProducerEpoch.code(),
        Err(e) => e.code(),
    };
    let mut topics: Vec<AddPartitionsToTxnTopicResult> = Vec::new();
    for t in &req.v3_and_below_topics {
        let results = t
            .partitions
            .iter()
            .map(|p| {
                AddPartitionsToTxnPartitionResult::default()
                    .with_partition_index(*p)
                    .with_partition_error_code(code(&(t.name.0.to_string(), *p)))
            })
            .collect();
        topics.push(AddPartitionsToTxnTopicResult::default().with_name(t.name.clone()).with_results_by_partition(results));
    }
    AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(topics)
}

/// EndTxn v0-4: commits or aborts the producer's transaction; answered once the decision is
/// written (its markers follow).
pub async fn end_txn(ctx: &RequestContext, req: EndTxnRequest) -> EndTxnResponse {
    let resp = EndTxnResponse::default().with_producer_id(ProducerId(-1)).with_producer_epoch(-1);
    let id = req.transactional_id.0.to_string();
    if let Some(e) = not_ready(ctx, &id) {
        return resp.with_error_code(e.code());
    }
    let version = if ctx.api_version >= 5 { 2 } else { 0 };
    match ctx.broker.txns().end_txn(&ctx.broker, &id, req.producer_id.0, req.producer_epoch, req.committed, version).await {
        Ok((pid, epoch)) => resp.with_producer_id(ProducerId(pid)).with_producer_epoch(epoch),
        Err(ResponseError::ProducerFenced) if ctx.api_version < 2 => resp.with_error_code(ResponseError::InvalidProducerEpoch.code()),
        Err(e) => resp.with_error_code(e.code()),
    }
}

/// Whether a Produce from `transactional_id` may write its transactional batch (producer
/// `producer_id` at `epoch`) to `topic`-`partition`: Kafka's verification (KIP-890 part 1),
/// answered with the codes Kafka gives a producer.
pub fn verify_produce(ctx: &RequestContext, transactional_id: &str, producer_id: i64, epoch: i16, topic: &str, partition: i32) -> Result<(), (ResponseError, String)> {
    match ctx.broker.txns().verify(transactional_id, producer_id, epoch, topic, partition) {
        Ok(()) => Ok(()),
        Err(ResponseError::InvalidTxnState) => Err((ResponseError::InvalidTxnState, "Partition was not added to the transaction".into())),
        Err(ResponseError::ProducerFenced) => Err((ResponseError::InvalidProducerEpoch, String::new())),
        Err(e @ ResponseError::ConcurrentTransactions) => Err((
            ResponseError::NotEnoughReplicas,
            format!("Unable to verify the partition has been added to the transaction. Underlying error: {e:?}"),
        )),
        Err(e) => Err((e, String::new())),
    }
}
