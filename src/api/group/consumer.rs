//! ConsumerGroupHeartbeat and ConsumerGroupDescribe (KIP-848, `group.protocol=consumer`).
//!
//! The wire names partitions by topic id; the coordinator core works with topic names, so ids
//! are mapped here (ids of topics that no longer exist are dropped).

use std::collections::BTreeSet;

use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;
use uuid::Uuid;

use super::not_ready;
use crate::api::{str_bytes, topic_name, RequestContext};
use crate::group::assignor::TopicPartition;
use crate::group::consumer::{self, Heartbeat};

/// Group ACL operations reported when asked (see admin.rs).
const GROUP_OPERATIONS: i32 = (1 << 3) | (1 << 6) | (1 << 8) | (1 << 10) | (1 << 11);

fn topic_id(ctx: &RequestContext, name: &str) -> Uuid {
    ctx.broker.topic_id_of(name).unwrap_or(Uuid::nil())
}

pub async fn consumer_group_heartbeat(ctx: &RequestContext, req: ConsumerGroupHeartbeatRequest) -> ConsumerGroupHeartbeatResponse {
    let interval = ctx.broker.groups().config.consumer_heartbeat_interval_ms;
    let base = ConsumerGroupHeartbeatResponse::default().with_heartbeat_interval_ms(interval).with_member_epoch(-1);
    if let Some(e) = not_ready(ctx, &req.group_id) {
        return base.with_error_code(e.code());
    }
    let owned: Option<BTreeSet<TopicPartition>> = req.topic_partitions.as_ref().map(|tps| {
        tps.iter()
            .filter_map(|tp| ctx.broker.topic_by_id(tp.topic_id).map(|t| (t.name.to_string(), tp.partitions.clone())))
            .flat_map(|(name, ps)| ps.into_iter().map(move |p| (name.clone(), p)))
            .collect()
    });
    let member_id = if req.member_id.is_empty() && req.member_epoch == 0 { Uuid::new_v4().to_string() } else { req.member_id.to_string() };
    let hb = Heartbeat {
        member_id,
        member_epoch: req.member_epoch,
        instance_id: req.instance_id.as_ref().map(|s| s.to_string()),
        rack_id: req.rack_id.as_ref().map(|s| s.to_string()),
        rebalance_timeout_ms: req.rebalance_timeout_ms,
        subscribed_topic_names: req.subscribed_topic_names.as_ref().map(|ts| ts.iter().map(|t| t.to_string()).collect()),
        subscribed_topic_regex: req.subscribed_topic_regex.as_ref().map(|r| r.to_string()),
        server_assignor: req.server_assignor.as_ref().map(|s| s.to_string()),
        owned,
        client_id: ctx.client_id.clone().unwrap_or_default(),
        client_host: ctx.client_host(),
    };
    let r = ctx.broker.groups().consumer_heartbeat(&ctx.broker, &req.group_id, hb).await;
    let assignment = r.assignment.map(|parts| {
        consumer_group_heartbeat_response::Assignment::default().with_topic_partitions(
            group_by_topic(&parts)
                .into_iter()
                .map(|(t, ps)| consumer_group_heartbeat_response::TopicPartitions::default().with_topic_id(topic_id(ctx, &t)).with_partitions(ps))
                .collect(),
        )
    });
    base.with_error_code(r.error.map(|e| e.code()).unwrap_or(0))
        .with_error_message(r.error_message.map(|m| str_bytes(&m)))
        .with_member_id(Some(str_bytes(&r.member_id)))
        .with_member_epoch(r.member_epoch)
        .with_assignment(assignment)
}

fn group_by_topic(parts: &BTreeSet<TopicPartition>) -> Vec<(String, Vec<i32>)> {
    let mut out: Vec<(String, Vec<i32>)> = Vec::new();
    for (t, p) in parts {
        match out.last_mut() {
            Some((name, ps)) if name == t => ps.push(*p),
            _ => out.push((t.clone(), vec![*p])),
        }
    }
    out
}

fn describe_assignment(ctx: &RequestContext, parts: &BTreeSet<TopicPartition>) -> consumer_group_describe_response::Assignment {
    consumer_group_describe_response::Assignment::default().with_topic_partitions(
        group_by_topic(parts)
            .into_iter()
            .map(|(t, ps)| {
                consumer_group_describe_response::TopicPartitions::default()
                    .with_topic_id(topic_id(ctx, &t))
                    .with_topic_name(topic_name(&t))
                    .with_partitions(ps)
            })
            .collect(),
    )
}

pub async fn consumer_group_describe(ctx: &RequestContext, req: ConsumerGroupDescribeRequest) -> ConsumerGroupDescribeResponse {
    let groups = req
        .group_ids
        .iter()
        .map(|gid| {
            let base = consumer_group_describe_response::DescribedGroup::default()
                .with_group_id(gid.clone())
                .with_authorized_operations(if req.include_authorized_operations { GROUP_OPERATIONS } else { i32::MIN });
            if let Some(e) = not_ready(ctx, gid) {
                return base.with_error_code(e.code());
            }
            ctx.broker.groups().with_core(|core| {
                let Some(c) = core.group(gid).and_then(|e| e.consumer.as_ref()) else {
                    let msg = match core.group(gid) {
                        Some(_) => format!("Group {} is not a consumer group.", &**gid),
                        None => format!("Group {} not found.", &**gid),
                    };
                    return base.with_error_code(ResponseError::GroupIdNotFound.code()).with_error_message(Some(str_bytes(&msg)));
                };
                let members = c
                    .members
                    .values()
                    .map(|m| {
                        let target = c.target.get(&m.member_id).cloned().unwrap_or_default();
                        consumer_group_describe_response::Member::default()
                            .with_member_id(str_bytes(&m.member_id))
                            .with_instance_id(m.instance_id.as_ref().map(|i| str_bytes(i)))
                            .with_rack_id(m.rack_id.as_ref().map(|i| str_bytes(i)))
                            .with_member_epoch(m.member_epoch)
                            .with_client_id(str_bytes(&m.client_id))
                            .with_client_host(str_bytes(&m.client_host))
                            .with_subscribed_topic_names(m.subscribed_topics.iter().map(|t| topic_name(t)).collect())
                            .with_subscribed_topic_regex(m.subscribed_regex.as_deref().map(str_bytes))
                            .with_assignment(describe_assignment(ctx, &m.assigned))
                            .with_target_assignment(describe_assignment(ctx, &target))
                            .with_member_type(1)
                    })
                    .collect();
                base.with_group_state(str_bytes(consumer::state_name(c)))
                    .with_group_epoch(c.group_epoch)
                    .with_assignment_epoch(c.assignment_epoch)
                    .with_assignor_name(str_bytes(c.assignor_name()))
                    .with_members(members)
            })
        })
        .collect();
    ConsumerGroupDescribeResponse::default().with_groups(groups)
}
