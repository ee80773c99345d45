//! Topic administration: CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords.

use std::collections::BTreeMap;

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::{CreatableTopicConfigs, CreatableTopicResult};
use kafka_protocol::messages::delete_records_response::{DeleteRecordsPartitionResult, DeleteRecordsTopicResult};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

use std::sync::Arc;

use super::{str_bytes, topic_name, RequestContext};
use crate::broker::{error_chain, Broker, TopicError};

/// Kafka's error code for a topic operation failure.
pub fn topic_error_code(e: &TopicError) -> ResponseError {
    match e {
        TopicError::AlreadyExists(_) => ResponseError::TopicAlreadyExists,
        TopicError::InvalidName(_) => ResponseError::InvalidTopicException,
        TopicError::InvalidPartitions(_) => ResponseError::InvalidPartitions,
        TopicError::InvalidReplicationFactor(_) => ResponseError::InvalidReplicationFactor,
        TopicError::InvalidConfig(_) => ResponseError::InvalidConfig,
        TopicError::UnknownTopic => ResponseError::UnknownTopicOrPartition,
        TopicError::DeletionDisabled => ResponseError::TopicDeletionDisabled,
        TopicError::Storage(_) => ResponseError::KafkaStorageError,
    }
}

/// Kafka's config source codes used in CreateTopics/DescribeConfigs responses.
pub const SOURCE_DYNAMIC_TOPIC: i8 = 1;
pub const SOURCE_STATIC_BROKER: i8 = 4;
pub const SOURCE_DEFAULT: i8 = 5;

pub async fn create_topics(ctx: &RequestContext, req: CreateTopicsRequest) -> CreateTopicsResponse {
    let broker = &ctx.broker;
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for t in &req.topics {
        *seen.entry(t.name.0.to_string()).or_default() += 1;
    }
    let mut results = Vec::with_capacity(req.topics.len());
    // In a cluster: (index in results, the topic, its configs), for the controller.
    let mut forwarded = Vec::new();
    for t in req.topics {
        let name = t.name.0.to_string();
        let mut result = CreatableTopicResult::default()
            .with_name(t.name.clone())
            .with_num_partitions(-1)
            .with_replication_factor(-1);
        if seen.get(&name).copied().unwrap_or(0) > 1 {
            result.error_code = ResponseError::InvalidRequest.code();
            result.error_message = Some(str_bytes(&format!("Create topics request from client contains a duplicate topic: {name}")));
            results.push(result);
            continue;
        }
        let mut configs = BTreeMap::new();
        for c in &t.configs {
            if let Some(v) = &c.value {
                configs.insert(c.name.to_string(), v.to_string());
            }
        }
        let (mut partitions, mut rf) = (t.num_partitions, t.replication_factor);
        if !t.assignments.is_empty() {
            if partitions != -1 || rf != -1 {
                result.error_code = ResponseError::InvalidRequest.code();
                result.error_message = Some(str_bytes(
                    "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time.",
                ));
                results.push(result);
                continue;
            }
            partitions = t.assignments.len() as i32;
            rf = t.assignments[0].broker_ids.len() as i16;
            if broker.cluster().is_none() && t.assignments.iter().any(|a| a.broker_ids.iter().any(|b| b.0 != broker.node_id)) {
                result.error_code = ResponseError::InvalidReplicaAssignment.code();
                result.error_message = Some(str_bytes("Replica assignment names a broker that is not registered."));
                results.push(result);
                continue;
            }
        }
        if broker.cluster().is_some() {
            // Forwarded together below, in one request.
            forwarded.push((results.len(), t, configs));
            results.push(result);
            continue;
        }
        let outcome = if req.validate_only {
            broker.check_create(&name, partitions, rf, &configs).map(|(p, r)| (p, r, None)).map_err(topic_failure)
        } else {
            let (b, n, c) = (broker.clone(), name.clone(), configs.clone());
            super::off_runtime(move || b.create_topic(&n, partitions, rf, c))
                .await
                .map(|t| (t.partitions.len() as i32, 1, Some(t.id)))
                .map_err(topic_failure)
        };
        created(ctx, &mut result, outcome, &configs);
        results.push(result);
    }
    if !forwarded.is_empty() {
        let topics = forwarded.iter().map(|(_, t, _)| t.clone()).collect();
        let forward = CreateTopicsRequest::default().with_topics(topics).with_validate_only(req.validate_only).with_timeout_ms(req.timeout_ms);
        let outcomes = forward_creation(broker, forward).await;
        for ((i, _, configs), outcome) in forwarded.iter().zip(outcomes) {
            created(ctx, &mut results[*i], outcome, configs);
        }
    }
    CreateTopicsResponse::default().with_topics(results)
}

/// Fills a topic's CreateTopics result from the outcome of its creation: (partitions,
/// replication factor, topic id) or Kafka's error code and message.
fn created(ctx: &RequestContext, result: &mut CreatableTopicResult, outcome: Result<(i32, i16, Option<uuid::Uuid>), (i16, String)>, configs: &BTreeMap<String, String>) {
    match outcome {
        Ok((p, r, id)) => {
            result.num_partitions = p;
            result.replication_factor = r;
            if let Some(id) = id {
                result.topic_id = id;
            }
            // v5+ echoes the topic's configs; older versions have no such field.
            let effective = crate::config::topic::effective(&ctx.broker.topic_defaults(), configs);
            result.configs = (ctx.api_version >= 5).then(|| {
                effective
                    .iter()
                    .filter(|(k, v)| crate::config::topic::listed(k, v))
                    .map(|(k, v)| {
                        CreatableTopicConfigs::default()
                            .with_name(str_bytes(k))
                            .with_value(Some(str_bytes(v)))
                            .with_config_source(if configs.contains_key(k) { SOURCE_DYNAMIC_TOPIC } else { SOURCE_DEFAULT })
                    })
                    .collect()
            });
        }
        Err((code, message)) => {
            result.error_code = code;
            result.error_message = Some(str_bytes(&message));
        }
    }
}

fn topic_failure(e: TopicError) -> (i16, String) {
    (topic_error_code(&e).code(), e.to_string())
}

/// How long a forwarded creation waits for this broker's image (and local logs) to have the
/// new topic, so that the client's next request finds it here.
const CREATED_VISIBLE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Sends CreateTopics to the active controller (a cluster member's creations go there) and
/// waits, up to [`CREATED_VISIBLE_WAIT`], until this broker hosts what was created; for each
/// topic of `req`, in its order: (partitions, replication factor, topic id) or Kafka's error
/// code and message.
async fn forward_creation(broker: &Arc<Broker>, req: CreateTopicsRequest) -> Vec<Result<(i32, i16, Option<uuid::Uuid>), (i16, String)>> {
    let view = broker.cluster().expect("called in a cluster");
    let validate_only = req.validate_only;
    let resp = match view.call_controller(&req, 7).await {
        Ok(resp) => resp,
        Err(e) => {
            let failure = (ResponseError::RequestTimedOut.code(), format!("the active controller did not answer: {e}"));
            return req.topics.iter().map(|_| Err(failure.clone())).collect();
        }
    };
    let mut answers: BTreeMap<String, CreatableTopicResult> = resp.topics.into_iter().map(|r| (r.name.0.to_string(), r)).collect();
    let outcomes: Vec<_> = req
        .topics
        .iter()
        .map(|t| match answers.remove(t.name.0.as_str()) {
            None => Err((ResponseError::UnknownServerError.code(), "the controller answered nothing for this topic".to_string())),
            Some(r) if r.error_code != 0 => Err((r.error_code, r.error_message.map(|m| m.to_string()).unwrap_or_default())),
            Some(r) => Ok((r.num_partitions, r.replication_factor, (!validate_only).then_some(r.topic_id))),
        })
        .collect();
    if !validate_only {
        let deadline = tokio::time::Instant::now() + CREATED_VISIBLE_WAIT;
        for (t, outcome) in req.topics.iter().zip(&outcomes) {
            let Ok((_, _, Some(id))) = outcome else { continue };
            let name = t.name.0.as_str();
            loop {
                let hosted = broker.topic_info(name).is_some_and(|t| t.partitions.iter().all(|p| !p.replicas.contains(&broker.node_id)))
                    || broker.topic(name).is_some_and(|t| t.id == *id);
                if hosted || tokio::time::Instant::now() >= deadline {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        }
    }
    outcomes
}

/// Asks the controller to create `name` with these counts (-1: the defaults), as auto-creation
/// does in a cluster.
pub async fn forward_create(
    broker: &Arc<Broker>,
    name: &str,
    partitions: i32,
    replication_factor: i16,
    configs: BTreeMap<String, String>,
) -> Result<(), String> {
    use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
    let topic = CreatableTopic::default()
        .with_name(topic_name(name))
        .with_num_partitions(partitions)
        .with_replication_factor(replication_factor)
        .with_configs(configs.iter().map(|(k, v)| CreatableTopicConfig::default().with_name(str_bytes(k)).with_value(Some(str_bytes(v)))).collect());
    let outcome = forward_creation(broker, CreateTopicsRequest::default().with_topics(vec![topic]).with_timeout_ms(30_000)).await.pop();
    match outcome {
        Some(Ok(_)) => Ok(()),
        Some(Err((code, message))) => Err(format!("error code {code}: {message}")),
        None => Err("no answer for the topic".to_string()),
    }
}

/// Deleting removes the partitions' files (gigabytes of segments for a large topic), so it runs
/// on the blocking pool ([`super::off_runtime`]).
pub async fn delete_topics(ctx: &RequestContext, req: DeleteTopicsRequest) -> DeleteTopicsResponse {
    let broker = ctx.broker.clone();
    if let Some(view) = broker.cluster() {
        // The controller deletes; every broker then removes its local logs (broker::cluster).
        let version = ctx.api_version.min(6);
        return match view.call_controller(&req, version).await {
            Ok(resp) => resp,
            Err(e) => {
                tracing::warn!(error = %e, "forwarding DeleteTopics to the controller failed");
                let mut names: Vec<TopicName> = req.topic_names.clone();
                names.extend(req.topics.iter().filter_map(|t| t.name.clone()));
                DeleteTopicsResponse::default().with_responses(
                    names
                        .into_iter()
                        .map(|n| DeletableTopicResult::default().with_name(Some(n)).with_error_code(ResponseError::RequestTimedOut.code()))
                        .collect(),
                )
            }
        };
    }
    super::off_runtime(move || delete_topics_blocking(&broker, req)).await
}

fn delete_topics_blocking(broker: &Broker, req: DeleteTopicsRequest) -> DeleteTopicsResponse {
    // v0-v5 list names; v6 lists (name | id) states.
    let mut targets: Vec<(Option<String>, uuid::Uuid)> =
        req.topic_names.iter().map(|n| (Some(n.0.to_string()), uuid::Uuid::nil())).collect();
    targets.extend(req.topics.iter().map(|t| (t.name.as_ref().map(|n| n.0.to_string()), t.topic_id)));
    let responses = targets
        .into_iter()
        .map(|(name, id)| {
            let found = match (&name, id.is_nil()) {
                (Some(n), _) => broker.topic(n).ok_or(ResponseError::UnknownTopicOrPartition),
                (None, false) => broker.topic_by_id(id).ok_or(ResponseError::UnknownTopicId),
                (None, true) => Err(ResponseError::InvalidRequest),
            };
            let result = DeletableTopicResult::default().with_name(name.as_deref().map(topic_name)).with_topic_id(id);
            match found {
                Ok(topic) => {
                    let result = result.with_name(Some(topic_name(&topic.name))).with_topic_id(topic.id);
                    match broker.delete_topic(&topic) {
                        Ok(()) => result,
                        Err(e) => result.with_error_code(topic_error_code(&e).code()).with_error_message(Some(str_bytes(&e.to_string()))),
                    }
                }
                Err(code) => result.with_error_code(code.code()),
            }
        })
        .collect();
    DeleteTopicsResponse::default().with_responses(responses)
}

pub async fn create_partitions(ctx: &RequestContext, req: CreatePartitionsRequest) -> CreatePartitionsResponse {
    let broker = &ctx.broker;
    if let Some(view) = broker.cluster() {
        // The controller places the new partitions; every broker then makes its local logs.
        return match view.call_controller(&req, ctx.api_version.min(3)).await {
            Ok(resp) => resp,
            Err(e) => {
                tracing::warn!(error = %e, "forwarding CreatePartitions to the controller failed");
                CreatePartitionsResponse::default().with_results(
                    req.topics
                        .iter()
                        .map(|t| {
                            CreatePartitionsTopicResult::default()
                                .with_name(t.name.clone())
                                .with_error_code(ResponseError::RequestTimedOut.code())
                        })
                        .collect(),
                )
            }
        };
    }
    let mut results = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        let name = t.name.0.to_string();
        let result = CreatePartitionsTopicResult::default().with_name(t.name);
        let outcome = match broker.topic(&name) {
            None => Err(TopicError::UnknownTopic),
            Some(topic) if t.count <= topic.partitions.len() as i32 => Err(TopicError::InvalidPartitions(format!(
                "Topic currently has {} partitions, which is higher than the requested {}.",
                topic.partitions.len(),
                t.count
            ))),
            Some(_) if req.validate_only => Ok(()),
            Some(_) => {
                let (b, count) = (broker.clone(), t.count);
                super::off_runtime(move || b.create_partitions(&name, count)).await
            }
        };
        results.push(match outcome {
            Ok(()) => result,
            Err(e) => {
                let msg = match &e {
                    TopicError::InvalidPartitions(m) => m.clone(),
                    other => other.to_string(),
                };
                result.with_error_code(topic_error_code(&e).code()).with_error_message(Some(str_bytes(&msg)))
            }
        });
    }
    CreatePartitionsResponse::default().with_results(results)
}

/// Moving the log start deletes segment files and rewrites the leader-epoch checkpoint with
/// fsync, so it runs on the blocking pool ([`super::off_runtime`]).
pub async fn delete_records(ctx: &RequestContext, req: DeleteRecordsRequest) -> DeleteRecordsResponse {
    let broker = ctx.broker.clone();
    super::off_runtime(move || delete_records_blocking(&broker, req)).await
}

fn delete_records_blocking(broker: &Broker, req: DeleteRecordsRequest) -> DeleteRecordsResponse {
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let topic = broker.topic(&t.name.0);
            let partitions = t
                .partitions
                .into_iter()
                .map(|rp| {
                    let result = DeleteRecordsPartitionResult::default().with_partition_index(rp.partition_index).with_low_watermark(-1);
                    let Some(p) = topic.as_ref().and_then(|t| t.partition(rp.partition_index)) else {
                        return result.with_error_code(ResponseError::UnknownTopicOrPartition.code());
                    };
                    let hw = p.high_watermark();
                    // -1 means "up to the high watermark".
                    let offset = if rp.offset == -1 { hw } else { rp.offset };
                    if offset < 0 || offset > hw {
                        return result.with_error_code(ResponseError::OffsetOutOfRange.code());
                    }
                    match p.delete_records_before(offset) {
                        Ok(low) => result.with_low_watermark(low),
                        Err(e) => {
                            tracing::error!(partition = ?p, error = %error_chain(&e), "delete records failed");
                            result.with_error_code(ResponseError::KafkaStorageError.code())
                        }
                    }
                })
                .collect();
            DeleteRecordsTopicResult::default().with_name(t.name).with_partitions(partitions)
        })
        .collect();
    // The new log start offsets must survive a restart before we acknowledge.
    broker.write_checkpoints(false);
    DeleteRecordsResponse::default().with_topics(topics)
}
