//! The Kafka protocol on the controller listener: what brokers and `--bootstrap-controller`
//! tools send a controller. Decode the typed request (kafka-protocol), ask the
//! [`ActiveController`] or the quorum, encode the typed response.
//!
//! | API | answered |
//! |---|---|
//! | ApiVersions 0-4 | the controller's APIs, its supported and finalized features |
//! | DescribeCluster 0-2 | `endpoint_type` 2: the voters' controller endpoints and the active controller; brokers' endpoint type gets MISMATCHED_ENDPOINT_TYPE, as a Kafka controller answers |
//! | DescribeQuorum 0-2 | on the active controller: leader, epoch (the Raft term), high watermark, voters' log end offsets and last-answer times, voters' endpoints; elsewhere NOT_LEADER_OR_FOLLOWER |
//! | BrokerRegistration 0-4 | a new broker epoch, or DUPLICATE_BROKER_REGISTRATION, INCONSISTENT_CLUSTER_ID, NOT_CONTROLLER |
//! | BrokerHeartbeat 0-1 | fenced / caught up / may shut down, or STALE_BROKER_EPOCH, BROKER_ID_NOT_REGISTERED, NOT_CONTROLLER |
//! | CreateTopics 2-7 | per topic: its id, partitions and replication factor (placed across the unfenced brokers), or Kafka's error; brokers forward their clients' creations here |
//! | DeleteTopics 1-6 | per topic, by name |
//! | CreatePartitions 0-3 | per topic: new partitions placed as Kafka places them, or Kafka's error |
//! | IncrementalAlterConfigs 0-1 | topics and dynamic broker configs, SET and DELETE (brokers resolve APPEND/SUBTRACT and send the result) |
//! | AlterPartition 2–3 | a partition leader's new ISR, checked by `controller::alter_partition` (leader, broker and partition epochs, eligible members); per partition the new state or its error; NOT_CONTROLLER, STALE_BROKER_EPOCH at the top |
//! | ElectLeaders 0–2 | preferred elections where the preferred replica is in the ISR and eligible, unclean ones for partitions without a leader (`controller::elect_leaders`); brokers forward it here |
//! | AllocateProducerIds 0 | the next block of 1000 producer ids for a registered broker at its current epoch, or STALE_BROKER_EPOCH, NOT_CONTROLLER |
//!
//! Offsets in DescribeQuorum count Raft log entries (one entry is one proposal of one or more
//! metadata records), where Kafka's count records; the lag between voters means the same.
//!
//! # Failure behaviour
//! An unknown api key, an unsupported version (other than ApiVersions, answered in v0 with
//! UNSUPPORTED_VERSION so the client can retry) or a body that does not decode closes the
//! connection, as Kafka does; nothing else does.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::api_versions_response::{ApiVersion, FinalizedFeatureKey, SupportedFeatureKey};
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::describe_quorum_response::{self as dq, ReplicaState};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion};

use super::controller::{codes, AlterIsr, Heartbeat, Registration};
use super::driver::{ActiveController, NewTopic, METADATA_VERSION};
use super::quorum::{ClientFrames, MetadataQuorum};
use super::records::{Endpoint, SupportedFeature};
use crate::api::{frame_response, str_bytes};

/// The metadata log's name in DescribeQuorum.
pub const METADATA_TOPIC: &str = "__cluster_metadata";
/// DescribeCluster's endpoint types (KIP-919).
const BROKER_ENDPOINTS: i8 = 1;
const CONTROLLER_ENDPOINTS: i8 = 2;

/// The (api key, min, max) versions a controller serves.
pub const CONTROLLER_APIS: &[(ApiKey, i16, i16)] = &[
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::DescribeCluster, 0, 2),
    (ApiKey::DescribeQuorum, 0, 2),
    (ApiKey::BrokerRegistration, 0, 4),
    (ApiKey::BrokerHeartbeat, 0, 1),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::AllocateProducerIds, 0, 0),
    (ApiKey::AlterPartition, 2, 3),
    (ApiKey::ElectLeaders, 0, 2),
    (ApiKey::AlterPartitionReassignments, 0, 1),
    (ApiKey::ListPartitionReassignments, 0, 0),
];

fn supported(key: ApiKey, version: i16) -> bool {
    CONTROLLER_APIS.iter().any(|(k, min, max)| *k == key && (*min..=*max).contains(&version))
}

/// A voter's controller endpoint, from `controller.quorum.voters`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VoterEndpoint {
    pub host: String,
    pub port: u16,
}

/// The controller's Kafka API.
pub struct ControllerApi<Q> {
    pub controller: Arc<ActiveController<Q>>,
    pub cluster_id: String,
    /// The controller listener's name (`CONTROLLER`), as voters' endpoints are listed.
    pub listener_name: String,
    pub voters: BTreeMap<i32, VoterEndpoint>,
    /// `num.partitions` and `default.replication.factor`, for CreateTopics that leave them -1.
    pub num_partitions: i32,
    pub default_replication_factor: i16,
    pub delete_topic_enable: bool,
}

impl<Q: MetadataQuorum + 'static> ClientFrames for ControllerApi<Q> {
    fn answer<'a>(
        &'a self,
        request: Bytes,
        _peer: std::net::SocketAddr,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<BytesMut, String>> + Send + 'a>> {
        Box::pin(self.handle(request))
    }
}

fn respond<R: Encodable + HeaderVersion>(correlation_id: i32, version: i16, body: &R) -> Result<BytesMut, String> {
    frame_response(correlation_id, version, body)
}

impl<Q: MetadataQuorum + 'static> ControllerApi<Q> {
    async fn handle(&self, mut body: Bytes) -> Result<BytesMut, String> {
        if body.len() < 8 {
            return Err(format!("a request of {} bytes has no header", body.len()));
        }
        let raw_key = i16::from_be_bytes([body[0], body[1]]);
        let version = i16::from_be_bytes([body[2], body[3]]);
        let correlation_id = i32::from_be_bytes([body[4], body[5], body[6], body[7]]);
        let key = ApiKey::try_from(raw_key).map_err(|_| format!("unknown api key {raw_key}"))?;
        if !supported(key, version) {
            if key == ApiKey::ApiVersions {
                let resp = ApiVersionsResponse::default()
                    .with_error_code(kafka_protocol::ResponseError::UnsupportedVersion.code())
                    .with_api_keys(vec![ApiVersion::default().with_api_key(ApiKey::ApiVersions as i16).with_min_version(0).with_max_version(4)]);
                return respond(correlation_id, 0, &resp);
            }
            return Err(format!("unsupported version {version} of {key:?} on the controller listener"));
        }
        crate::protocol::frame::decode_request_header(&mut body, key, version).map_err(|e| e.to_string())?;
        macro_rules! decode {
            ($req:ty) => {
                <$req>::decode(&mut body, version).map_err(|e| format!("malformed {} v{version}: {e}", stringify!($req)))?
            };
        }
        match key {
            ApiKey::ApiVersions => {
                let _ = decode!(ApiVersionsRequest);
                respond(correlation_id, version, &self.api_versions())
            }
            ApiKey::DescribeCluster => {
                let req = decode!(DescribeClusterRequest);
                respond(correlation_id, version, &self.describe_cluster(&req, version))
            }
            ApiKey::DescribeQuorum => {
                let req = decode!(DescribeQuorumRequest);
                respond(correlation_id, version, &self.describe_quorum(&req))
            }
            ApiKey::BrokerRegistration => {
                let req = decode!(BrokerRegistrationRequest);
                respond(correlation_id, version, &self.broker_registration(req).await)
            }
            ApiKey::BrokerHeartbeat => {
                let req = decode!(BrokerHeartbeatRequest);
                respond(correlation_id, version, &self.broker_heartbeat(&req).await)
            }
            ApiKey::CreateTopics => {
                let req = decode!(CreateTopicsRequest);
                respond(correlation_id, version, &self.create_topics(req).await)
            }
            ApiKey::DeleteTopics => {
                let req = decode!(DeleteTopicsRequest);
                respond(correlation_id, version, &self.delete_topics(req).await)
            }
            ApiKey::IncrementalAlterConfigs => {
                let req = decode!(IncrementalAlterConfigsRequest);
                respond(correlation_id, version, &self.incremental_alter_configs(req).await)
            }
            ApiKey::CreatePartitions => {
                let req = decode!(CreatePartitionsRequest);
                respond(correlation_id, version, &self.create_partitions(req).await)
            }
            ApiKey::AllocateProducerIds => {
                let req = decode!(AllocateProducerIdsRequest);
                respond(correlation_id, version, &self.allocate_producer_ids(&req).await)
            }
            ApiKey::ElectLeaders => {
                let req = decode!(ElectLeadersRequest);
                respond(correlation_id, version, &self.elect_leaders(req, version).await)
            }
            ApiKey::AlterPartition => {
                let req = decode!(AlterPartitionRequest);
                respond(correlation_id, version, &self.alter_partition(&req, version).await)
            }
            ApiKey::AlterPartitionReassignments => {
                let req = decode!(AlterPartitionReassignmentsRequest);
                respond(correlation_id, version, &self.alter_partition_reassignments(req).await)
            }
            ApiKey::ListPartitionReassignments => {
                let req = decode!(ListPartitionReassignmentsRequest);
                respond(correlation_id, version, &self.list_partition_reassignments(&req))
            }
            other => Err(format!("{other:?} is not served on the controller listener")),
        }
    }

    fn api_versions(&self) -> ApiVersionsResponse {
        let image = self.controller.quorum().image().borrow().clone();
        let api_keys = CONTROLLER_APIS
            .iter()
            .map(|(k, min, max)| ApiVersion::default().with_api_key(*k as i16).with_min_version(*min).with_max_version(*max))
            .collect();
        // kraft.version is the quorum's own level, not a metadata record: 0, a static quorum.
        let mut levels = image.features.clone();
        levels.entry("kraft.version".to_string()).or_insert(0);
        let finalized = levels
            .iter()
            .map(|(name, level)| FinalizedFeatureKey::default().with_name(str_bytes(name)).with_min_version_level(*level).with_max_version_level(*level))
            .collect();
        let feature = |name: &str, min: i16, max: i16| SupportedFeatureKey::default().with_name(str_bytes(name)).with_min_version(min).with_max_version(max);
        ApiVersionsResponse::default()
            .with_api_keys(api_keys)
            .with_supported_features(vec![
                feature(super::controller::ELR_FEATURE, 0, 1),
                feature("kraft.version", 0, 0),
                feature("metadata.version", METADATA_VERSION, METADATA_VERSION),
            ])
            .with_finalized_features_epoch(image.offset)
            .with_finalized_features(finalized)
    }

    fn describe_cluster(&self, req: &DescribeClusterRequest, version: i16) -> DescribeClusterResponse {
        let resp = DescribeClusterResponse::default().with_cluster_id(str_bytes(&self.cluster_id)).with_endpoint_type(CONTROLLER_ENDPOINTS);
        // v0 has no endpoint type: it asks for brokers.
        let wanted = if version >= 1 { req.endpoint_type } else { BROKER_ENDPOINTS };
        if wanted != CONTROLLER_ENDPOINTS {
            let (code, message) = if wanted == BROKER_ENDPOINTS {
                (
                    codes::MISMATCHED_ENDPOINT_TYPE,
                    "The request was sent to an endpoint of type CONTROLLER, but we wanted an endpoint of type BROKER".to_string(),
                )
            } else {
                (codes::UNSUPPORTED_ENDPOINT_TYPE, format!("Unsupported endpoint type {wanted}"))
            };
            return resp.with_error_code(code).with_error_message(Some(str_bytes(&message)));
        }
        let leader = self.controller.quorum().status().leader.unwrap_or(-1);
        let brokers = self
            .voters
            .iter()
            .map(|(id, e)| DescribeClusterBroker::default().with_broker_id((*id).into()).with_host(str_bytes(&e.host)).with_port(e.port as i32))
            .collect();
        resp.with_controller_id(leader.into()).with_brokers(brokers).with_cluster_authorized_operations(i32::MIN)
    }

    fn describe_quorum(&self, req: &DescribeQuorumRequest) -> DescribeQuorumResponse {
        let status = self.controller.quorum().status();
        let leading = status.leader == Some(status.node_id);
        let nodes = self
            .voters
            .iter()
            .map(|(id, e)| {
                dq::Node::default().with_node_id((*id).into()).with_listeners(vec![dq::Listener::default()
                    .with_name(str_bytes(&self.listener_name))
                    .with_host(str_bytes(&e.host))
                    .with_port(e.port)])
            })
            .collect();
        let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0);
        let topics = req
            .topics
            .iter()
            .map(|t| {
                let partitions = t
                    .partitions
                    .iter()
                    .map(|p| {
                        let known = t.topic_name.0.as_str() == METADATA_TOPIC && p.partition_index == 0;
                        let out = dq::PartitionData::default().with_partition_index(p.partition_index);
                        if !known {
                            return out.with_error_code(kafka_protocol::ResponseError::UnknownTopicOrPartition.code());
                        }
                        if !leading {
                            return out
                                .with_error_code(codes::NOT_LEADER_OR_FOLLOWER)
                                .with_error_message(Some(str_bytes("This controller is not the quorum's leader")));
                        }
                        let voters = status
                            .voters
                            .iter()
                            .map(|v| {
                                let seen = v.millis_since_ack.map(|ago| now_ms - ago as i64).unwrap_or(-1);
                                ReplicaState::default()
                                    .with_replica_id(v.id.into())
                                    .with_log_end_offset(v.log_end_offset.map(|o| o as i64).unwrap_or(-1))
                                    .with_last_fetch_timestamp(seen)
                                    .with_last_caught_up_timestamp(seen)
                            })
                            .collect();
                        out.with_leader_id(status.node_id.into())
                            .with_leader_epoch(status.term as i32)
                            .with_high_watermark(status.applied_index.map(|i| i as i64 + 1).unwrap_or(-1))
                            .with_current_voters(voters)
                    })
                    .collect();
                dq::TopicData::default().with_topic_name(t.topic_name.clone()).with_partitions(partitions)
            })
            .collect();
        DescribeQuorumResponse::default().with_topics(topics).with_nodes(nodes)
    }

    async fn broker_registration(&self, req: BrokerRegistrationRequest) -> BrokerRegistrationResponse {
        let resp = BrokerRegistrationResponse::default().with_broker_epoch(-1);
        if req.cluster_id.as_str() != self.cluster_id {
            tracing::warn!(broker = req.broker_id.0, cluster = %req.cluster_id.as_str(), "refused the registration of a broker of another cluster");
            return resp.with_error_code(codes::INCONSISTENT_CLUSTER_ID);
        }
        let registration = Registration {
            broker_id: req.broker_id.0,
            incarnation_id: req.incarnation_id,
            endpoints: req
                .listeners
                .iter()
                .map(|l| Endpoint { name: l.name.to_string(), host: l.host.to_string(), port: l.port, security_protocol: l.security_protocol })
                .collect(),
            features: req
                .features
                .iter()
                .map(|f| SupportedFeature {
                    name: f.name.to_string(),
                    min_supported_version: f.min_supported_version,
                    max_supported_version: f.max_supported_version,
                })
                .collect(),
            rack: req.rack.as_ref().map(|r| r.to_string()),
            previous_broker_epoch: req.previous_broker_epoch,
        };
        match self.controller.register(&registration).await {
            Ok(epoch) => resp.with_broker_epoch(epoch),
            Err(refusal) => {
                if refusal.code != codes::NOT_CONTROLLER {
                    tracing::warn!(broker = req.broker_id.0, error = %refusal, "refused a broker registration");
                }
                resp.with_error_code(refusal.code)
            }
        }
    }

    async fn broker_heartbeat(&self, req: &BrokerHeartbeatRequest) -> BrokerHeartbeatResponse {
        let hb = Heartbeat {
            broker_id: req.broker_id.0,
            broker_epoch: req.broker_epoch,
            metadata_offset: req.current_metadata_offset,
            want_shutdown: req.want_shut_down,
        };
        match self.controller.heartbeat(&hb).await {
            Ok(reply) => BrokerHeartbeatResponse::default()
                .with_is_caught_up(!reply.is_fenced || req.current_metadata_offset >= req.broker_epoch)
                .with_is_fenced(reply.is_fenced)
                .with_should_shut_down(reply.should_shut_down),
            Err(refusal) => BrokerHeartbeatResponse::default().with_error_code(refusal.code).with_is_fenced(true),
        }
    }

    async fn allocate_producer_ids(&self, req: &AllocateProducerIdsRequest) -> AllocateProducerIdsResponse {
        match self.controller.allocate_producer_ids(req.broker_id.0, req.broker_epoch).await {
            Ok(start) => AllocateProducerIdsResponse::default()
                .with_producer_id_start(ProducerId(start))
                .with_producer_id_len(super::controller::PRODUCER_ID_BLOCK as i32),
            Err(refusal) => AllocateProducerIdsResponse::default().with_error_code(refusal.code).with_producer_id_start(ProducerId(-1)),
        }
    }

    async fn elect_leaders(&self, req: ElectLeadersRequest, version: i16) -> ElectLeadersResponse {
        use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
        if version >= 1 && !(0..=1).contains(&req.election_type) {
            return ElectLeadersResponse::default().with_error_code(codes::INVALID_REQUEST);
        }
        let asked: Option<Vec<(String, i32)>> = req
            .topic_partitions
            .map(|ts| ts.iter().flat_map(|t| t.partitions.iter().map(move |p| (t.topic.0.to_string(), *p))).collect());
        let election_type = if version >= 1 { req.election_type } else { 0 };
        let results = match self.controller.elect_leaders(election_type, asked.as_deref()).await {
            Ok(r) => r,
            Err(refusal) => return ElectLeadersResponse::default().with_error_code(refusal.code),
        };
        let mut topics: Vec<ReplicaElectionResult> = Vec::new();
        if asked.is_none() {
            // Every partition asked for: as Kafka's controller answers, every topic is listed,
            // with only the partitions an election was tried for.
            let image = self.controller.quorum().image().borrow().clone();
            let mut names: Vec<&String> = image.topics.values().map(|t| &t.name).collect();
            names.sort();
            topics = names.into_iter().map(|n| ReplicaElectionResult::default().with_topic(TopicName(str_bytes(n)))).collect();
        }
        for e in results {
            if let Some(t) = topics.iter_mut().find(|t| t.topic.as_str() == e.topic) {
                t.partition_result.push(
                    PartitionResult::default()
                        .with_partition_id(e.partition)
                        .with_error_code(e.code)
                        .with_error_message((!e.message.is_empty()).then(|| str_bytes(&e.message))),
                );
                continue;
            }
            let pr = PartitionResult::default()
                .with_partition_id(e.partition)
                .with_error_code(e.code)
                .with_error_message((!e.message.is_empty()).then(|| str_bytes(&e.message)));
            match topics.last_mut().filter(|t| t.topic.as_str() == e.topic) {
                Some(t) => t.partition_result.push(pr),
                None => topics.push(ReplicaElectionResult::default().with_topic(TopicName(str_bytes(&e.topic))).with_partition_result(vec![pr])),
            }
        }
        ElectLeadersResponse::default().with_replica_election_results(topics)
    }

    async fn alter_partition_reassignments(&self, req: AlterPartitionReassignmentsRequest) -> AlterPartitionReassignmentsResponse {
        use kafka_protocol::messages::alter_partition_reassignments_response::{ReassignablePartitionResponse, ReassignableTopicResponse};
        let asks: Vec<(String, i32, Option<Vec<i32>>)> = req
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(move |p| {
                    (t.name.0.to_string(), p.partition_index, p.replicas.as_ref().map(|r| r.iter().map(|b| b.0).collect()))
                })
            })
            .collect();
        let outcomes = match self.controller.reassign_partitions(&asks, req.allow_replication_factor_change).await {
            Ok(o) => o,
            Err(refusal) => {
                return AlterPartitionReassignmentsResponse::default()
                    .with_error_code(refusal.code)
                    .with_error_message(Some(str_bytes(&refusal.message)))
            }
        };
        let mut topics: Vec<ReassignableTopicResponse> = Vec::new();
        for ((topic, partition, _), outcome) in asks.iter().zip(outcomes) {
            let (code, message) = match outcome {
                Ok(()) => (0, None),
                Err(r) => (r.code, Some(str_bytes(&r.message))),
            };
            let pr = ReassignablePartitionResponse::default().with_partition_index(*partition).with_error_code(code).with_error_message(message);
            match topics.last_mut().filter(|t| t.name.as_str() == topic) {
                Some(t) => t.partitions.push(pr),
                None => topics.push(ReassignableTopicResponse::default().with_name(TopicName(str_bytes(topic))).with_partitions(vec![pr])),
            }
        }
        AlterPartitionReassignmentsResponse::default()
            .with_allow_replication_factor_change(req.allow_replication_factor_change)
            .with_error_message(None)
            .with_responses(topics)
    }

    /// The reassignments in progress (of the partitions asked for; `None`: all), from the image.
    fn list_partition_reassignments(&self, req: &ListPartitionReassignmentsRequest) -> ListPartitionReassignmentsResponse {
        use kafka_protocol::messages::list_partition_reassignments_response::{OngoingPartitionReassignment, OngoingTopicReassignment};
        let image = self.controller.quorum().image().borrow().clone();
        let ids = |v: &[i32]| v.iter().map(|b| BrokerId(*b)).collect::<Vec<_>>();
        let ongoing = |p: &super::image::PartitionState| !p.adding_replicas.is_empty() || !p.removing_replicas.is_empty();
        let mut names: Vec<&String> = image.topics.values().map(|t| &t.name).collect();
        names.sort();
        let mut topics = Vec::new();
        for name in names {
            let asked: Option<&Vec<i32>> = match &req.topics {
                None => None,
                Some(ts) => match ts.iter().find(|t| t.name.as_str() == name.as_str()) {
                    Some(t) => Some(&t.partition_indexes),
                    None => continue,
                },
            };
            let Some(t) = image.topic(name) else { continue };
            let partitions: Vec<OngoingPartitionReassignment> = t
                .partitions
                .iter()
                .filter(|(i, p)| ongoing(p) && asked.is_none_or(|a| a.contains(i)))
                .map(|(i, p)| {
                    OngoingPartitionReassignment::default()
                        .with_partition_index(*i)
                        .with_replicas(ids(&p.replicas))
                        .with_adding_replicas(ids(&p.adding_replicas))
                        .with_removing_replicas(ids(&p.removing_replicas))
                })
                .collect();
            if !partitions.is_empty() {
                topics.push(OngoingTopicReassignment::default().with_name(TopicName(str_bytes(name))).with_partitions(partitions));
            }
        }
        ListPartitionReassignmentsResponse::default().with_error_message(None).with_topics(topics)
    }

    async fn alter_partition(&self, req: &AlterPartitionRequest, version: i16) -> AlterPartitionResponse {
        use kafka_protocol::messages::alter_partition_response::{PartitionData, TopicData};
        let mut asks = Vec::new();
        for t in &req.topics {
            for p in &t.partitions {
                let new_isr = if version >= 3 {
                    p.new_isr_with_epochs.iter().map(|b| (b.broker_id.0, b.broker_epoch)).collect()
                } else {
                    p.new_isr.iter().map(|b| (b.0, -1)).collect()
                };
                asks.push(AlterIsr {
                    broker_id: req.broker_id.0,
                    broker_epoch: req.broker_epoch,
                    topic_id: t.topic_id,
                    partition: p.partition_index,
                    leader_epoch: p.leader_epoch,
                    partition_epoch: p.partition_epoch,
                    new_isr,
                    leader_recovery_state: p.leader_recovery_state,
                });
            }
        }
        let outcomes = match self.controller.alter_partitions(&asks).await {
            Ok(o) => o,
            Err(refusal) => return AlterPartitionResponse::default().with_error_code(refusal.code),
        };
        // A request from a stale broker epoch is refused as a whole, as Kafka does.
        if outcomes.contains(&Err(codes::STALE_BROKER_EPOCH)) {
            return AlterPartitionResponse::default().with_error_code(codes::STALE_BROKER_EPOCH);
        }
        let image = self.controller.quorum().image().borrow().clone();
        let mut topics: Vec<TopicData> = Vec::new();
        for (ask, outcome) in asks.iter().zip(outcomes) {
            let mut pd = PartitionData::default().with_partition_index(ask.partition);
            let state = image.topics.values().find(|t| t.id == ask.topic_id).and_then(|t| t.partitions.get(&ask.partition));
            match (outcome, state) {
                (Ok(()), Some(p)) => {
                    pd = pd
                        .with_leader_id(BrokerId(p.leader))
                        .with_leader_epoch(p.leader_epoch)
                        .with_isr(p.isr.iter().map(|b| BrokerId(*b)).collect())
                        .with_leader_recovery_state(p.leader_recovery_state)
                        .with_partition_epoch(p.partition_epoch);
                }
                (Ok(()), None) => pd = pd.with_error_code(codes::UNKNOWN_TOPIC_OR_PARTITION),
                (Err(code), _) => pd = pd.with_error_code(code),
            }
            match topics.last_mut().filter(|t| t.topic_id == ask.topic_id) {
                Some(t) => t.partitions.push(pd),
                None => topics.push(TopicData::default().with_topic_id(ask.topic_id).with_partitions(vec![pd])),
            }
        }
        AlterPartitionResponse::default().with_topics(topics)
    }

    async fn create_topics(&self, req: CreateTopicsRequest) -> CreateTopicsResponse {
        use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
        // As Kafka's controller: a name given more than once is answered once, INVALID_REQUEST,
        // and none of its entries is created.
        let mut seen = BTreeMap::new();
        for t in &req.topics {
            *seen.entry(t.name.0.to_string()).or_insert(0) += 1;
        }
        let mut results: Vec<Option<CreatableTopicResult>> = Vec::with_capacity(req.topics.len());
        // (index into results, the topic as the controller gets it)
        let mut wanted: Vec<(usize, TopicName, NewTopic)> = Vec::new();
        for t in &req.topics {
            let name = t.name.0.to_string();
            let result = CreatableTopicResult::default().with_name(t.name.clone()).with_num_partitions(-1).with_replication_factor(-1);
            match seen.get_mut(&name) {
                Some(n) if *n > 1 => {
                    *n = 0;
                    results.push(Some(
                        result.with_error_code(codes::INVALID_REQUEST).with_error_message(Some(str_bytes("Duplicate topic name."))),
                    ));
                    continue;
                }
                Some(0) => continue,
                _ => {}
            }
            let mut configs = BTreeMap::new();
            let mut bad_config = None;
            for c in &t.configs {
                let Some(v) = &c.value else { continue };
                if let Err(e) = crate::config::topic::validate(&c.name, v) {
                    bad_config = Some(match crate::config::topic::lookup(&c.name) {
                        None => format!("Unknown topic config name: {}", c.name.as_str()),
                        Some(_) => e.to_string(),
                    });
                }
                configs.insert(c.name.to_string(), v.to_string());
            }
            if let Some(message) = bad_config {
                results.push(Some(result.with_error_code(kafka_protocol::ResponseError::InvalidConfig.code()).with_error_message(Some(str_bytes(&message)))));
                continue;
            }
            let assignments: BTreeMap<i32, Vec<i32>> =
                t.assignments.iter().map(|a| (a.partition_index, a.broker_ids.iter().map(|b| b.0).collect())).collect();
            let partitions = if t.num_partitions == -1 { self.num_partitions } else { t.num_partitions };
            let rf = if t.replication_factor == -1 { self.default_replication_factor } else { t.replication_factor };
            if assignments.is_empty() && rf <= 0 {
                results.push(Some(
                    result
                        .with_error_code(codes::INVALID_REPLICATION_FACTOR)
                        .with_error_message(Some(str_bytes("Replication factor must be larger than 0."))),
                ));
                continue;
            }
            wanted.push((results.len(), t.name.clone(), NewTopic { name, partitions, replication_factor: rf, assignments, configs }));
            results.push(None);
        }
        let topics: Vec<NewTopic> = wanted.iter().map(|(_, _, t)| t.clone()).collect();
        let created = self.controller.create_topics(&topics, req.validate_only).await;
        for ((i, name, t), outcome) in wanted.into_iter().zip(created) {
            let result = CreatableTopicResult::default().with_name(name).with_num_partitions(-1).with_replication_factor(-1);
            results[i] = Some(match outcome {
                Ok(id) => {
                    let (p, r) = match t.assignments.get(&0) {
                        Some(first) => (t.assignments.len() as i32, first.len() as i16),
                        None => (t.partitions, t.replication_factor),
                    };
                    result.with_topic_id(id).with_num_partitions(p).with_replication_factor(r)
                }
                Err(refusal) => result.with_error_code(refusal.code).with_error_message(Some(str_bytes(&refusal.message))),
            });
        }
        CreateTopicsResponse::default().with_topics(results.into_iter().flatten().collect())
    }

    async fn delete_topics(&self, req: DeleteTopicsRequest) -> DeleteTopicsResponse {
        use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
        let names: Vec<TopicName> = if !req.topics.is_empty() {
            req.topics.iter().filter_map(|t| t.name.clone()).collect()
        } else {
            req.topic_names.clone()
        };
        let mut results = Vec::with_capacity(names.len());
        for name in names {
            let result = DeletableTopicResult::default().with_name(Some(name.clone()));
            if !self.delete_topic_enable {
                results.push(result.with_error_code(kafka_protocol::ResponseError::TopicDeletionDisabled.code()));
                continue;
            }
            let image = self.controller.quorum().image().borrow().clone();
            let id = image.topic_ids.get(name.0.as_str()).copied().unwrap_or_default();
            match self.controller.delete_topic(name.0.as_str()).await {
                Ok(()) => results.push(result.with_topic_id(id)),
                Err(refusal) => {
                    results.push(result.with_error_code(refusal.code).with_error_message(Some(str_bytes(&refusal.message))))
                }
            }
        }
        DeleteTopicsResponse::default().with_responses(results)
    }

    async fn create_partitions(&self, req: CreatePartitionsRequest) -> CreatePartitionsResponse {
        use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
        let mut results = Vec::with_capacity(req.topics.len());
        for t in &req.topics {
            let result = CreatePartitionsTopicResult::default().with_name(t.name.clone());
            let assignments: Vec<Vec<i32>> =
                t.assignments.iter().flatten().map(|a| a.broker_ids.iter().map(|b| b.0).collect()).collect();
            results.push(match self.controller.create_partitions(t.name.0.as_str(), t.count, &assignments, req.validate_only).await {
                Ok(()) => result,
                Err(refusal) => result.with_error_code(refusal.code).with_error_message(Some(str_bytes(&refusal.message))),
            });
        }
        CreatePartitionsResponse::default().with_results(results)
    }

    async fn incremental_alter_configs(&self, req: IncrementalAlterConfigsRequest) -> IncrementalAlterConfigsResponse {
        use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
        const SET: i8 = 0;
        const DELETE: i8 = 1;
        let mut responses = Vec::with_capacity(req.resources.len());
        for r in &req.resources {
            let resp = AlterConfigsResourceResponse::default().with_resource_type(r.resource_type).with_resource_name(r.resource_name.clone());
            let mut changes = Vec::with_capacity(r.configs.len());
            let mut bad = None;
            for c in &r.configs {
                match (c.config_operation, &c.value) {
                    (SET, Some(v)) => changes.push((c.name.to_string(), Some(v.to_string()))),
                    (DELETE, _) => changes.push((c.name.to_string(), None)),
                    (op, _) => bad = Some(format!("config operation {op} for {} is resolved by the broker; the controller takes SET and DELETE", c.name.as_str())),
                }
            }
            let outcome = match bad {
                Some(message) => Err(super::controller::Refusal { code: codes::INVALID_REQUEST, message }),
                None => self.controller.alter_configs(r.resource_type, r.resource_name.as_str(), &changes, req.validate_only).await,
            };
            responses.push(match outcome {
                Ok(()) => resp,
                Err(refusal) => resp.with_error_code(refusal.code).with_error_message(Some(str_bytes(&refusal.message))),
            });
        }
        IncrementalAlterConfigsResponse::default().with_responses(responses)
    }
}
