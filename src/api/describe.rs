//! Read-only cluster descriptions: DescribeCluster, DescribeTopicPartitions, DescribeLogDirs,
//! ListPartitionReassignments and AlterPartitionReassignments and ElectLeaders (forwarded to the
//! active controller), and
//! SaslHandshake (no SASL mechanism is enabled on any listener yet).

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::describe_log_dirs_response::*;
use kafka_protocol::messages::describe_topic_partitions_response::*;
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

use super::metadata::AUTHORIZED_OPERATIONS_OMITTED;
use super::{str_bytes, topic_name, RequestContext};

pub async fn describe_cluster(ctx: &RequestContext, req: DescribeClusterRequest) -> DescribeClusterResponse {
    let broker = &ctx.broker;
    // endpoint_type 1 = brokers; 2 = controllers (sluice's node is both).
    if req.endpoint_type != 1 && req.endpoint_type != 2 && ctx.api_version >= 1 {
        return DescribeClusterResponse::default()
            .with_error_code(ResponseError::UnsupportedEndpointType.code())
            .with_endpoint_type(req.endpoint_type);
    }
    let brokers = broker
        .live_brokers(&ctx.listener)
        .into_iter()
        .map(|b| {
            DescribeClusterBroker::default()
                .with_broker_id(BrokerId(b.id))
                .with_host(str_bytes(&b.host))
                .with_port(b.port as i32)
                .with_rack(b.rack.as_deref().map(str_bytes))
        })
        .collect();
    DescribeClusterResponse::default()
        .with_endpoint_type(if ctx.api_version >= 1 { req.endpoint_type } else { 1 })
        .with_cluster_id(str_bytes(&broker.cluster_id))
        .with_controller_id(BrokerId(broker.node_id))
        .with_brokers(brokers)
        .with_cluster_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED)
}

/// DescribeQuorum: a member of a cluster forwards it to the active controller, as Kafka's
/// brokers do (`kafka-metadata-quorum --bootstrap-server`); a single node answers
/// UNSUPPORTED_VERSION (it does not list the API).
pub async fn describe_quorum(ctx: &RequestContext, req: DescribeQuorumRequest) -> DescribeQuorumResponse {
    let Some(view) = ctx.broker.cluster() else {
        return DescribeQuorumResponse::default().with_error_code(ResponseError::UnsupportedVersion.code());
    };
    match view.call_controller(&req, ctx.api_version).await {
        Ok(resp) => resp,
        Err(e) => DescribeQuorumResponse::default()
            .with_error_code(ResponseError::RequestTimedOut.code())
            .with_error_message(Some(str_bytes(&format!("the active controller did not answer: {e}")))),
    }
}

pub async fn describe_topic_partitions(ctx: &RequestContext, req: DescribeTopicPartitionsRequest) -> DescribeTopicPartitionsResponse {
    let broker = &ctx.broker;
    let limit = req.response_partition_limit.clamp(1, 2000) as usize;
    let mut names: Vec<String> = if req.topics.is_empty() {
        broker.all_topic_infos().into_iter().map(|t| t.name).collect()
    } else {
        req.topics.iter().map(|t| t.name.0.to_string()).collect()
    };
    names.sort();
    names.dedup();
    let (start_topic, start_partition) = match &req.cursor {
        Some(c) => (Some(c.topic_name.0.to_string()), c.partition_index.max(0) as usize),
        None => (None, 0),
    };
    let ids = |v: &[i32]| v.iter().map(|b| BrokerId(*b)).collect::<Vec<_>>();
    let mut topics = Vec::new();
    let mut budget = limit;
    let mut next_cursor = None;
    for name in names {
        if let Some(start) = &start_topic {
            if &name < start {
                continue;
            }
        }
        let Some(topic) = broker.topic_info(&name) else {
            topics.push(
                DescribeTopicPartitionsResponseTopic::default()
                    .with_name(Some(topic_name(&name)))
                    .with_error_code(ResponseError::UnknownTopicOrPartition.code())
                    .with_topic_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED),
            );
            continue;
        };
        if budget == 0 {
            next_cursor = Some(Cursor::default().with_topic_name(topic_name(&name)).with_partition_index(0));
            break;
        }
        let first = if start_topic.as_deref() == Some(name.as_str()) { start_partition } else { 0 };
        let mut partitions = Vec::new();
        for p in topic.partitions.iter().skip(first) {
            if budget == 0 {
                next_cursor = Some(Cursor::default().with_topic_name(topic_name(&name)).with_partition_index(p.index));
                break;
            }
            budget -= 1;
            partitions.push(
                DescribeTopicPartitionsResponsePartition::default()
                    .with_error_code(if p.leader < 0 { ResponseError::LeaderNotAvailable.code() } else { 0 })
                    .with_partition_index(p.index)
                    .with_leader_id(BrokerId(p.leader))
                    .with_leader_epoch(p.leader_epoch)
                    .with_replica_nodes(ids(&p.replicas))
                    .with_isr_nodes(ids(&p.isr))
                    .with_offline_replicas(ids(&p.offline))
                    .with_eligible_leader_replicas(Some(ids(&p.eligible_leader_replicas)))
                    .with_last_known_elr(Some(ids(&p.last_known_elr))),
            );
        }
        topics.push(
            DescribeTopicPartitionsResponseTopic::default()
                .with_name(Some(topic_name(&name)))
                .with_topic_id(topic.id)
                .with_is_internal(topic.internal)
                .with_partitions(partitions)
                .with_topic_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED),
        );
        if next_cursor.is_some() {
            break;
        }
    }
    DescribeTopicPartitionsResponse::default().with_topics(topics).with_next_cursor(next_cursor)
}

fn disk_space(path: &std::path::Path) -> (i64, i64) {
    match rustix::fs::statvfs(path) {
        Ok(st) => ((st.f_blocks * st.f_frsize) as i64, (st.f_bavail * st.f_frsize) as i64),
        Err(_) => (-1, -1),
    }
}

pub async fn describe_log_dirs(ctx: &RequestContext, req: DescribeLogDirsRequest) -> DescribeLogDirsResponse {
    let broker = &ctx.broker;
    let filter: Option<Vec<(String, Vec<i32>)>> =
        req.topics.map(|ts| ts.into_iter().map(|t| (t.topic.0.to_string(), t.partitions)).collect());
    let mut results = Vec::new();
    for dir in &broker.config.log_dirs {
        let abs = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.clone());
        let mut topics = Vec::new();
        for topic in broker.all_topics() {
            let wanted: Option<&Vec<i32>> = match &filter {
                None => None,
                Some(f) => match f.iter().find(|(n, _)| n.as_str() == topic.name.as_ref()) {
                    Some((_, ps)) => Some(ps),
                    None => continue,
                },
            };
            let partitions: Vec<_> = topic
                .partitions
                .iter()
                .filter(|p| wanted.map(|w| w.contains(&p.index)).unwrap_or(true))
                .filter(|p| p.log_dir().starts_with(dir) || p.log_dir().starts_with(&abs))
                .map(|p| DescribeLogDirsPartition::default().with_partition_index(p.index).with_partition_size(p.size_bytes() as i64))
                .collect();
            if !partitions.is_empty() {
                topics.push(DescribeLogDirsTopic::default().with_name(topic_name(&topic.name)).with_partitions(partitions));
            }
        }
        let (total, usable) = disk_space(&abs);
        results.push(
            DescribeLogDirsResult::default()
                .with_log_dir(str_bytes(&abs.to_string_lossy()))
                .with_topics(topics)
                .with_total_bytes(total)
                .with_usable_bytes(usable),
        );
    }
    DescribeLogDirsResponse::default().with_results(results)
}

/// ListPartitionReassignments: the active controller answers from the metadata image (as
/// Kafka's broker forwards it).
pub async fn list_partition_reassignments(
    ctx: &RequestContext,
    req: ListPartitionReassignmentsRequest,
) -> ListPartitionReassignmentsResponse {
    let Some(view) = ctx.broker.cluster() else {
        return ListPartitionReassignmentsResponse::default().with_error_message(None);
    };
    match view.call_controller(&req, ctx.api_version).await {
        Ok(resp) => resp,
        Err(e) => {
            tracing::info!(error = %e, "forwarding ListPartitionReassignments to the active controller failed");
            ListPartitionReassignmentsResponse::default().with_error_code(ResponseError::RequestTimedOut.code())
        }
    }
}

/// AlterPartitionReassignments (`kafka-reassign-partitions --execute/--cancel`), forwarded to
/// the active controller (see `cluster::controller::Controller::reassign`).
pub async fn alter_partition_reassignments(
    ctx: &RequestContext,
    req: AlterPartitionReassignmentsRequest,
) -> AlterPartitionReassignmentsResponse {
    let Some(view) = ctx.broker.cluster() else {
        return AlterPartitionReassignmentsResponse::default()
            .with_error_code(ResponseError::InvalidRequest.code())
            .with_error_message(Some(str_bytes("this broker is not a cluster member")));
    };
    match view.call_controller(&req, ctx.api_version).await {
        Ok(resp) => resp,
        Err(e) => {
            tracing::info!(error = %e, "forwarding AlterPartitionReassignments to the active controller failed");
            AlterPartitionReassignmentsResponse::default().with_error_code(ResponseError::RequestTimedOut.code())
        }
    }
}

/// Every partition of a single node is led by its only (preferred) replica, so no election is
/// ever needed: each partition asked for gets ELECTION_NOT_NEEDED, or UNKNOWN_TOPIC_OR_PARTITION
/// with Kafka's message. Asked for every partition (a null list), Kafka lists each topic with the
/// partitions it elected, which here is none.
///
/// In a cluster the request goes to the active controller, which moves leadership back to the
/// preferred replica where it is in the ISR and may lead (see `cluster::controller`).
pub async fn elect_leaders(ctx: &RequestContext, req: ElectLeadersRequest) -> ElectLeadersResponse {
    use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
    let broker = &ctx.broker;
    if let Some(view) = broker.cluster() {
        return match view.call_controller(&req, ctx.api_version).await {
            Ok(resp) => resp,
            Err(e) => {
                tracing::info!(error = %e, "forwarding ElectLeaders to the active controller failed");
                ElectLeadersResponse::default().with_error_code(ResponseError::RequestTimedOut.code())
            }
        };
    }
    // 0 = preferred, 1 = unclean
    if ctx.api_version >= 1 && !(0..=1).contains(&req.election_type) {
        return ElectLeadersResponse::default().with_error_code(ResponseError::InvalidRequest.code());
    }
    let results = match req.topic_partitions {
        None => broker.all_topic_infos().iter().map(|t| ReplicaElectionResult::default().with_topic(topic_name(&t.name))).collect(),
        Some(topics) => topics
            .into_iter()
            .map(|t| {
                let topic = broker.topic_info(&t.topic);
                let partitions = t
                    .partitions
                    .iter()
                    .map(|&p| {
                        let r = PartitionResult::default().with_partition_id(p);
                        match topic.as_ref().map(|topic| topic.partitions.iter().find(|x| x.index == p)) {
                            None => r
                                .with_error_code(ResponseError::UnknownTopicOrPartition.code())
                                .with_error_message(Some(str_bytes(&format!("No such topic as {}", t.topic.as_str())))),
                            Some(None) => r
                                .with_error_code(ResponseError::UnknownTopicOrPartition.code())
                                .with_error_message(Some(str_bytes(&format!("No such partition as {}-{p}", t.topic.as_str())))),
                            Some(Some(part)) if part.replicas.first() == Some(&part.leader) => r
                                .with_error_code(ResponseError::ElectionNotNeeded.code())
                                .with_error_message(Some(str_bytes("Leader election not needed for topic partition."))),
                            // Not on a single node, where the only replica leads.
                            Some(Some(_)) => r
                                .with_error_code(ResponseError::PreferredLeaderNotAvailable.code())
                                .with_error_message(Some(str_bytes("The preferred replica cannot lead."))),
                        }
                    })
                    .collect();
                ReplicaElectionResult::default().with_topic(t.topic).with_partition_result(partitions)
            })
            .collect(),
    };
    ElectLeadersResponse::default().with_replica_election_results(results)
}

/// No listener has SASL enabled: Kafka answers a handshake on such a listener with
/// ILLEGAL_SASL_STATE and an empty mechanism list, which is what we do.
pub async fn sasl_handshake(_ctx: &RequestContext, _req: SaslHandshakeRequest) -> SaslHandshakeResponse {
    SaslHandshakeResponse::default().with_error_code(ResponseError::IllegalSaslState.code()).with_mechanisms(vec![])
}
