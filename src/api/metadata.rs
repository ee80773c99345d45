//! Metadata: brokers, cluster id, controller, and per topic its id and partitions (leader,
//! epoch, replicas, ISR). Auto-creates requested topics when both the request and
//! `auto.create.topics.enable` allow it, as Kafka does.

use kafka_protocol::messages::metadata_response::*;
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse};
use kafka_protocol::ResponseError;

use super::{str_bytes, topic_name, RequestContext};
use crate::broker::cluster::TopicInfo;
use crate::broker::{Broker, TopicError};

/// Kafka's "authorized operations not requested" marker.
pub const AUTHORIZED_OPERATIONS_OMITTED: i32 = i32::MIN;

pub fn response_partitions(topic: &TopicInfo) -> Vec<MetadataResponsePartition> {
    let ids = |v: &[i32]| v.iter().map(|b| BrokerId(*b)).collect::<Vec<_>>();
    topic
        .partitions
        .iter()
        .map(|p| {
            MetadataResponsePartition::default()
                .with_error_code(if p.leader < 0 { ResponseError::LeaderNotAvailable.code() } else { 0 })
                .with_partition_index(p.index)
                .with_leader_id(BrokerId(p.leader))
                .with_leader_epoch(p.leader_epoch)
                .with_replica_nodes(ids(&p.replicas))
                .with_isr_nodes(ids(&p.isr))
                .with_offline_replicas(ids(&p.offline))
        })
        .collect()
}

fn topic_response(topic: &TopicInfo, include_ops: bool) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_name(Some(topic_name(&topic.name)))
        .with_topic_id(topic.id)
        .with_is_internal(topic.internal)
        .with_partitions(response_partitions(topic))
        .with_topic_authorized_operations(if include_ops { all_topic_operations() } else { AUTHORIZED_OPERATIONS_OMITTED })
}

/// With no authorizer every operation is allowed: READ..DESCRIBE_CONFIGS, ALTER_CONFIGS bits.
fn all_topic_operations() -> i32 {
    // Bits: READ(3) WRITE(4) CREATE(5) DELETE(6) ALTER(7) DESCRIBE(8) DESCRIBE_CONFIGS(10) ALTER_CONFIGS(11)
    [3, 4, 5, 6, 7, 8, 10, 11].iter().fold(0, |acc, b| acc | (1 << b))
}

pub async fn handle(ctx: &RequestContext, req: MetadataRequest) -> MetadataResponse {
    let broker = &ctx.broker;
    let v = ctx.api_version;
    let include_ops = req.include_topic_authorized_operations;
    let mut topics = Vec::new();
    match req.topics {
        // v0 used an empty list for "all"; v1+ uses null.
        None => topics.extend(broker.all_topic_infos().iter().map(|t| topic_response(t, include_ops))),
        Some(list) if list.is_empty() && v == 0 => {
            topics.extend(broker.all_topic_infos().iter().map(|t| topic_response(t, include_ops)))
        }
        Some(list) => {
            let auto_create = broker.config.auto_create_topics_enable && (v < 4 || req.allow_auto_topic_creation);
            for requested in list {
                // A non-zero id wins over the name: the Java admin client sends an empty
                // (not null) name when it describes topics by id.
                let by_name = requested.name.as_ref().filter(|n| !n.0.is_empty() || requested.topic_id.is_nil());
                let name = match (by_name, requested.topic_id.is_nil()) {
                    (Some(n), _) => n.0.to_string(),
                    (None, false) => match broker.topic_info_by_id(requested.topic_id) {
                        Some(t) => {
                            topics.push(topic_response(&t, include_ops));
                            continue;
                        }
                        None => {
                            topics.push(
                                MetadataResponseTopic::default()
                                    .with_topic_id(requested.topic_id)
                                    .with_error_code(ResponseError::UnknownTopicId.code()),
                            );
                            continue;
                        }
                    },
                    (None, true) => {
                        topics.push(MetadataResponseTopic::default().with_error_code(ResponseError::InvalidRequest.code()));
                        continue;
                    }
                };
                if let Some(t) = broker.topic_info(&name) {
                    topics.push(topic_response(&t, include_ops));
                    continue;
                }
                let error = if crate::metadata::validate_topic_name(&name).is_err() {
                    ResponseError::InvalidTopicException
                } else if auto_create && broker.cluster().is_some() {
                    // The controller creates it, and this broker waits until its image has it
                    // (as after any forwarded CreateTopics). Kafka answers LEADER_NOT_AVAILABLE
                    // for a topic it is creating and clients retry, librdkafka only a second
                    // later; where the image already has the topic, it is returned at once.
                    if let Err(e) = super::topics::forward_create(broker, &name, -1, -1, Default::default()).await {
                        tracing::warn!(topic = %name, error = %e, "auto-creating topic failed");
                    }
                    match broker.topic_info(&name) {
                        Some(t) => {
                            topics.push(topic_response(&t, include_ops));
                            continue;
                        }
                        None => ResponseError::LeaderNotAvailable,
                    }
                } else if auto_create {
                    let (b, n) = (broker.clone(), name.clone());
                    match super::off_runtime(move || b.create_topic(&n, -1, -1, Default::default())).await {
                        // Kafka answers LEADER_NOT_AVAILABLE for a topic it just created; clients
                        // retry. We can serve at once, so return the topic itself.
                        Ok(_) => match broker.topic_info(&name) {
                            Some(t) => {
                                topics.push(topic_response(&t, include_ops));
                                continue;
                            }
                            None => ResponseError::LeaderNotAvailable,
                        },
                        Err(TopicError::AlreadyExists(_)) => match broker.topic_info(&name) {
                            Some(t) => {
                                topics.push(topic_response(&t, include_ops));
                                continue;
                            }
                            None => ResponseError::LeaderNotAvailable,
                        },
                        Err(e) => {
                            tracing::warn!(topic = %name, error = %e, "auto-creating topic failed");
                            ResponseError::UnknownTopicOrPartition
                        }
                    }
                } else {
                    ResponseError::UnknownTopicOrPartition
                };
                topics.push(
                    MetadataResponseTopic::default()
                        .with_name(Some(topic_name(&name)))
                        .with_error_code(error.code())
                        .with_topic_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED),
                );
            }
        }
    }
    MetadataResponse::default()
        .with_brokers(brokers(broker, &ctx.listener))
        .with_cluster_id(Some(str_bytes(&broker.cluster_id)))
        // In KRaft mode Kafka names a live broker here (clients send admin requests to it and it
        // forwards them); this one is live.
        .with_controller_id(BrokerId(broker.node_id))
        .with_topics(topics)
        .with_cluster_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED)
}

fn brokers(broker: &Broker, listener: &str) -> Vec<MetadataResponseBroker> {
    broker
        .live_brokers(listener)
        .into_iter()
        .map(|b| {
            MetadataResponseBroker::default()
                .with_node_id(BrokerId(b.id))
                .with_host(str_bytes(&b.host))
                .with_port(b.port as i32)
                .with_rack(b.rack.as_deref().map(str_bytes))
        })
        .collect()
}
