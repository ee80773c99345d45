//! Group coordinator APIs: FindCoordinator, the classic membership protocol
//! ([`membership`]), committed offsets ([`offsets`]) and group administration ([`admin`]).
//!
//! Handlers translate between kafka-protocol's versioned structs and [`crate::group`]'s core
//! types; every group-level outcome is an error code in the response, never a closed connection.
//! A group's coordinator is the leader of its `__consumer_offsets` partition, a transactional
//! id's the leader of its `__transaction_state` partition. Transactions are served only while
//! a broker is the only one of its cluster (see `txn::driver`, "Scope"); otherwise a lookup of
//! their coordinator gets UNSUPPORTED_VERSION with [`NO_TRANSACTIONS`] as its message. That error is not
//! retriable, so a transactional producer fails at once and says why (the Java client: "Could not
//! find a coordinator with type TRANSACTION ... due to unexpected error: <message>") instead of
//! retrying COORDINATOR_NOT_AVAILABLE until its `max.block.ms` runs out.

pub mod admin;
pub mod consumer;
pub mod membership;
pub mod offsets;

use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

use super::{str_bytes, RequestContext};

/// Error code of an optional Kafka error (0 = none).
pub(crate) fn code(e: Option<ResponseError>) -> i16 {
    e.map(|e| e.code()).unwrap_or(0)
}

/// COORDINATOR_LOAD_IN_PROGRESS until `__consumer_offsets` has been replayed.
pub(crate) fn not_loaded(ctx: &RequestContext) -> Option<ResponseError> {
    (!ctx.broker.groups().is_loaded()).then_some(ResponseError::CoordinatorLoadInProgress)
}

/// Why this broker may not act for `group` now: in a cluster, NOT_COORDINATOR unless it leads
/// the group's `__consumer_offsets` partition; COORDINATOR_LOAD_IN_PROGRESS until the offsets
/// are replayed.
pub(crate) fn not_ready(ctx: &RequestContext, group: &str) -> Option<ResponseError> {
    if ctx.broker.cluster().is_some() {
        let Some(offsets) = ctx.broker.topic_info(crate::group::OFFSETS_TOPIC) else {
            return Some(ResponseError::CoordinatorNotAvailable);
        };
        let p = crate::group::partition_for(group, offsets.partitions.len() as i32);
        if ctx.broker.not_leader(crate::group::OFFSETS_TOPIC, p).is_some() {
            return Some(ResponseError::NotCoordinator);
        }
        // Led here, but its groups not yet replayed in this leader epoch.
        let epoch = offsets.partitions.iter().find(|x| x.index == p).map_or(-1, |x| x.leader_epoch);
        if !ctx.broker.groups().is_partition_loaded(p, epoch) {
            return Some(ResponseError::CoordinatorLoadInProgress);
        }
    }
    not_loaded(ctx)
}

/// Creates `__consumer_offsets` on tokio's blocking pool if it does not exist yet. Called before
/// FindCoordinator for a group (where Kafka creates it too) and before every request that may
/// write group records, so that the coordinator never creates it inline: that fsyncs, and it
/// would run on a runtime thread under the group lock, stalling that thread's connections and
/// every group request for as long as the fsync takes (4 s behind a few GiB of writeback on the
/// bench machine). A failure is logged here; the request then runs as before, and the
/// coordinator's own attempt reports it to the client.
pub(crate) async fn ensure_offsets_topic(ctx: &RequestContext) {
    if ctx.broker.cluster().is_some() {
        // The controller creates it, with `offsets.topic.replication.factor` replicas.
        if ctx.broker.topic_info(crate::group::OFFSETS_TOPIC).is_none() {
            let groups = ctx.broker.groups();
            // Kafka's default is 3; a single node has one broker to place on, and needs no
            // configuration to keep its groups.
            let default_rf = if ctx.broker.config.is_single_voter() { 1 } else { 3 };
            let rf = ctx.broker.config.raw.get("offsets.topic.replication.factor").and_then(|v| v.trim().parse().ok()).unwrap_or(default_rf);
            let created = super::topics::forward_create(
                &ctx.broker,
                crate::group::OFFSETS_TOPIC,
                groups.config.offsets_partitions,
                rf,
                groups.offsets_topic_configs(),
            )
            .await;
            if let Err(e) = created {
                tracing::warn!(error = %e, "creating the consumer offsets topic through the controller failed");
            }
        }
        return;
    }
    if ctx.broker.topic(crate::group::OFFSETS_TOPIC).is_some() {
        return;
    }
    let b = ctx.broker.clone();
    if let Err(e) = super::off_runtime(move || b.groups().offsets_topic(&b).map(drop)).await {
        tracing::warn!(error = %crate::broker::error_chain(&e), "creating the consumer offsets topic failed");
    }
}

/// What a lookup of a transaction coordinator is told.
pub(crate) const NO_TRANSACTIONS: &str = "sluice does not support transactions in a cluster of several brokers yet: only a single node coordinates them";

/// Key types: 0 = GROUP, 1 = TRANSACTION (refused in a cluster), 2 = SHARE.
fn coordinator_for(ctx: &RequestContext, key: &str, key_type: i8) -> find_coordinator_response::Coordinator {
    let c = find_coordinator_response::Coordinator::default().with_key(str_bytes(key)).with_node_id(BrokerId(-1)).with_port(-1);
    if !(0..=2).contains(&key_type) {
        return c.with_error_code(ResponseError::InvalidRequest.code()).with_error_message(Some(str_bytes(&format!("Unknown key type {key_type}"))));
    }
    if key_type == 1 && !super::txn::serves_transactions(ctx) {
        return c.with_error_code(ResponseError::UnsupportedVersion.code()).with_error_message(Some(str_bytes(NO_TRANSACTIONS)));
    }
    if let Some(e) = not_loaded(ctx) {
        return c.with_error_code(e.code());
    }
    if ctx.broker.cluster().is_some() {
        // The broker leading the key's `__consumer_offsets` (or `__transaction_state`) partition
        // coordinates it.
        let topic = if key_type == 1 { crate::txn::STATE_TOPIC } else { crate::group::OFFSETS_TOPIC };
        let leader = ctx.broker.topic_info(topic).and_then(|t| {
            let p = crate::group::partition_for(key, t.partitions.len() as i32);
            t.partitions.iter().find(|x| x.index == p).map(|x| x.leader)
        });
        return match leader.and_then(|l| ctx.broker.broker_info(l, &ctx.listener)) {
            Some(b) => c.with_node_id(BrokerId(b.id)).with_host(str_bytes(&b.host)).with_port(b.port as i32),
            None => c.with_error_code(ResponseError::CoordinatorNotAvailable.code()),
        };
    }
    let Some(endpoint) = ctx.broker.live_brokers(&ctx.listener).into_iter().next() else {
        return c.with_error_code(ResponseError::CoordinatorNotAvailable.code());
    };
    c.with_node_id(BrokerId(ctx.broker.node_id)).with_host(str_bytes(&endpoint.host)).with_port(endpoint.port as i32)
}

pub async fn find_coordinator(ctx: &RequestContext, req: FindCoordinatorRequest) -> FindCoordinatorResponse {
    if req.key_type == 0 {
        ensure_offsets_topic(ctx).await;
    }
    if req.key_type == 1 {
        super::txn::ensure_state_topic(ctx).await;
    }
    if ctx.api_version >= 4 {
        let coordinators = req.coordinator_keys.iter().map(|k| coordinator_for(ctx, k, req.key_type)).collect();
        return FindCoordinatorResponse::default().with_coordinators(coordinators);
    }
    let c = coordinator_for(ctx, &req.key, req.key_type);
    FindCoordinatorResponse::default()
        .with_error_code(c.error_code)
        .with_error_message(c.error_message)
        .with_node_id(c.node_id)
        .with_host(c.host)
        .with_port(c.port)
}
