//! OffsetCommit, OffsetFetch (single group up to v7, batched groups from v8) and OffsetDelete.
//!
//! Partitions of topics this broker does not have get UNKNOWN_TOPIC_OR_PARTITION, as Kafka's
//! request handler answers before the coordinator sees them; everything else is the coordinator's.

use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

use super::{code, not_ready};
use crate::api::{str_bytes, RequestContext};
use crate::group::coordinator::OffsetCommit;

fn partition_exists(ctx: &RequestContext, topic: &str, partition: i32) -> bool {
    ctx.broker.partition_exists(topic, partition)
}

pub async fn offset_commit(ctx: &RequestContext, req: OffsetCommitRequest) -> OffsetCommitResponse {
    // (topic, partition, result) in request order; None = to be decided by the coordinator.
    let mut slots: Vec<(usize, i32, Option<ResponseError>)> = Vec::new();
    let mut commits = Vec::new();
    for (ti, t) in req.topics.iter().enumerate() {
        for p in &t.partitions {
            if partition_exists(ctx, &t.name, p.partition_index) {
                slots.push((ti, p.partition_index, None));
                commits.push(OffsetCommit {
                    topic: t.name.to_string(),
                    partition: p.partition_index,
                    offset: p.committed_offset,
                    leader_epoch: if ctx.api_version >= 6 { p.committed_leader_epoch } else { -1 },
                    metadata: p.committed_metadata.as_ref().map(|m| m.to_string()),
                });
            } else {
                slots.push((ti, p.partition_index, Some(ResponseError::UnknownTopicOrPartition)));
            }
        }
    }
    let results: Result<Vec<Option<ResponseError>>, ResponseError> = match not_ready(ctx, &req.group_id) {
        Some(e) => Err(e),
        None if commits.is_empty() => Ok(Vec::new()),
        None => ctx.broker.groups().commit_offsets(
            &ctx.broker,
            &req.group_id,
            &req.member_id,
            req.group_instance_id.as_deref(),
            req.generation_id_or_member_epoch,
            commits,
        ).await,
    };
    let mut decided = match &results {
        Ok(v) => v.clone().into_iter(),
        Err(_) => Vec::new().into_iter(),
    };
    let mut topics: Vec<offset_commit_response::OffsetCommitResponseTopic> = req
        .topics
        .iter()
        .map(|t| offset_commit_response::OffsetCommitResponseTopic::default().with_name(t.name.clone()).with_topic_id(t.topic_id))
        .collect();
    for (ti, partition, pre) in slots {
        let e = match (pre, &results) {
            (Some(e), _) => Some(e),
            (None, Err(e)) => Some(*e),
            (None, Ok(_)) => decided.next().flatten(),
        };
        topics[ti].partitions.push(offset_commit_response::OffsetCommitResponsePartition::default().with_partition_index(partition).with_error_code(code(e)));
    }
    OffsetCommitResponse::default().with_topics(topics)
}

/// (partition, committed offset, leader epoch, metadata).
type OffsetRow = (i32, i64, i32, String);

/// One group's offsets: `topics` None = every committed partition.
fn fetch_group(ctx: &RequestContext, group_id: &str, topics: Option<Vec<(String, Vec<i32>)>>) -> Vec<(String, Vec<OffsetRow>)> {
    let wanted = topics.as_ref().map(|ts| ts.iter().flat_map(|(t, ps)| ps.iter().map(move |p| (t.clone(), *p))).collect());
    let found = ctx.broker.groups().with_core(|core| core.fetch_offsets(group_id, wanted));
    let mut out: Vec<(String, Vec<OffsetRow>)> = Vec::new();
    for (t, p, v) in found {
        let row = match v {
            Some(v) => (p, v.offset, v.leader_epoch, v.metadata),
            None => (p, -1, -1, String::new()),
        };
        match out.iter_mut().find(|(name, _)| *name == t) {
            Some((_, rows)) => rows.push(row),
            None => out.push((t, vec![row])),
        }
    }
    out
}

pub async fn offset_fetch(ctx: &RequestContext, req: OffsetFetchRequest) -> OffsetFetchResponse {
    if ctx.api_version >= 8 {
        let groups = req
            .groups
            .iter()
            .map(|g| {
                let group = offset_fetch_response::OffsetFetchResponseGroup::default().with_group_id(g.group_id.clone());
                if let Some(e) = not_ready(ctx, &g.group_id) {
                    return group.with_error_code(e.code());
                }
                let member = g.member_id.as_deref();
                if let Some(e) = ctx.broker.groups().with_core(|core| core.validate_offset_fetch(&g.group_id, member, g.member_epoch)) {
                    return group.with_error_code(e.code());
                }
                let topics = g.topics.as_ref().map(|ts| ts.iter().map(|t| (t.name.to_string(), t.partition_indexes.clone())).collect());
                let rows = fetch_group(ctx, &g.group_id, topics);
                group.with_topics(
                    rows.into_iter()
                        .map(|(t, ps)| {
                            offset_fetch_response::OffsetFetchResponseTopics::default().with_name(crate::api::topic_name(&t)).with_partitions(
                                ps.into_iter()
                                    .map(|(p, o, e, m)| {
                                        offset_fetch_response::OffsetFetchResponsePartitions::default()
                                            .with_partition_index(p)
                                            .with_committed_offset(o)
                                            .with_committed_leader_epoch(e)
                                            .with_metadata(Some(str_bytes(&m)))
                                    })
                                    .collect(),
                            )
                        })
                        .collect(),
                )
            })
            .collect();
        return OffsetFetchResponse::default().with_groups(groups);
    }
    if let Some(e) = not_ready(ctx, &req.group_id) {
        return OffsetFetchResponse::default().with_error_code(e.code());
    }
    let topics = req.topics.as_ref().map(|ts| ts.iter().map(|t| (t.name.to_string(), t.partition_indexes.clone())).collect());
    let rows = fetch_group(ctx, &req.group_id, topics);
    OffsetFetchResponse::default().with_topics(
        rows.into_iter()
            .map(|(t, ps)| {
                offset_fetch_response::OffsetFetchResponseTopic::default().with_name(crate::api::topic_name(&t)).with_partitions(
                    ps.into_iter()
                        .map(|(p, o, e, m)| {
                            offset_fetch_response::OffsetFetchResponsePartition::default()
                                .with_partition_index(p)
                                .with_committed_offset(o)
                                .with_committed_leader_epoch(e)
                                .with_metadata(Some(str_bytes(&m)))
                        })
                        .collect(),
                )
            })
            .collect(),
    )
}

pub async fn offset_delete(ctx: &RequestContext, req: OffsetDeleteRequest) -> OffsetDeleteResponse {
    if let Some(e) = not_ready(ctx, &req.group_id) {
        return OffsetDeleteResponse::default().with_error_code(e.code());
    }
    let mut wanted = Vec::new();
    for t in &req.topics {
        for p in &t.partitions {
            if partition_exists(ctx, &t.name, p.partition_index) {
                wanted.push((t.name.to_string(), p.partition_index));
            }
        }
    }
    let results = match ctx.broker.groups().delete_offsets(&ctx.broker, &req.group_id, &wanted) {
        Ok(r) => r,
        Err(e) => return OffsetDeleteResponse::default().with_error_code(e.code()),
    };
    let mut decided = wanted.into_iter().zip(results);
    let topics = req
        .topics
        .iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let e = if partition_exists(ctx, &t.name, p.partition_index) {
                        decided.next().and_then(|(_, e)| e)
                    } else {
                        Some(ResponseError::UnknownTopicOrPartition)
                    };
                    offset_delete_response::OffsetDeleteResponsePartition::default().with_partition_index(p.partition_index).with_error_code(code(e))
                })
                .collect();
            offset_delete_response::OffsetDeleteResponseTopic::default().with_name(t.name.clone()).with_partitions(partitions)
        })
        .collect();
    OffsetDeleteResponse::default().with_topics(topics)
}
