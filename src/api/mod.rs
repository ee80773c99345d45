//! One handler per Kafka API key: decode the typed request (kafka-protocol), call the broker,
//! encode the typed response.
//!
//! # Invariants
//! - Only the (api key, version) pairs in [`versions::SUPPORTED`] reach a handler; the network
//!   layer answers or closes for everything else (see [`Dispatch`]).
//! - Domain failures become per-partition / per-topic Kafka error codes inside a normal response;
//!   a handler never fails the connection for them.
//! - A request body that does not decode closes the connection, as Kafka does
//!   (`InvalidRequestException`), and is logged with the api key, version and client.

pub mod acls;
pub mod api_versions;
pub mod configs;
pub mod describe;
pub mod fetch;
pub mod fetch_frame;
pub mod fetch_session;
pub mod group;
pub mod list_offsets;
pub mod metadata;
pub mod produce;
pub mod producer_id;
pub mod topics;
pub mod txn;
pub mod versions;

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};

use crate::broker::Broker;

/// Per-connection facts a handler may need.
pub struct RequestContext {
    pub broker: Arc<Broker>,
    pub api_version: i16,
    pub correlation_id: i32,
    pub client_id: Option<String>,
    pub fetch_sessions: Arc<fetch_session::FetchSessionCache>,
    /// The client's address, for the host group members are listed with.
    pub peer: std::net::SocketAddr,
    /// The listener the request came in on: Metadata, FindCoordinator and leader hints name
    /// brokers by their endpoints on this listener, as Kafka does.
    pub listener: Arc<str>,
}

impl RequestContext {
    /// The client's host as Kafka lists group members (`InetAddress.toString()` of an address
    /// it did not look up: "/127.0.0.1").
    pub fn client_host(&self) -> String {
        format!("/{}", self.peer.ip())
    }
}

/// What the connection should do after a request.
#[derive(Debug)]
pub enum Dispatch {
    /// Write this already-framed response.
    Respond(BytesMut),
    /// Write these parts in order: a framed response with records sent from segment files.
    Stream(Vec<fetch_frame::ResponsePart>),
    /// Nothing to send (acks=0 produce).
    Silent,
    /// The response is still being made by this task (an acks=all produce waiting for its
    /// fsyncs under `flush.acks.all`); requests behind it may be handled meanwhile, but their
    /// responses are written after this one.
    Later(tokio::task::JoinHandle<Dispatch>),
    /// Close the connection (bad request, or a failed acks=0 produce), with the reason logged.
    Close(String),
}

/// Encodes `size | response header | body` for `version`.
pub fn frame_response<R: Encodable + HeaderVersion>(correlation_id: i32, version: i16, body: &R) -> Result<BytesMut, String> {
    // Sized up front: a fetch response carries up to max_bytes of records, and growing the
    // buffer while encoding would copy them several times over.
    let body_size = body.compute_size(version).map_err(|e| e.to_string())?;
    let mut buf = BytesMut::with_capacity(4 + 16 + body_size);
    buf.put_i32(0);
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    header.encode(&mut buf, R::header_version(version)).map_err(|e| e.to_string())?;
    body.encode(&mut buf, version).map_err(|e| e.to_string())?;
    let size = (buf.len() - 4) as i32;
    buf[0..4].copy_from_slice(&size.to_be_bytes());
    Ok(buf)
}

pub(crate) use crate::runtime::off_runtime;

/// Makes a kafka-protocol string.
pub fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// Makes a topic name.
pub fn topic_name(s: &str) -> TopicName {
    TopicName(str_bytes(s))
}

fn respond<R: Encodable + HeaderVersion>(ctx: &RequestContext, resp: &R) -> Dispatch {
    match frame_response(ctx.correlation_id, ctx.api_version, resp) {
        Ok(b) => Dispatch::Respond(b),
        Err(e) => Dispatch::Close(format!("encoding response failed: {e}")),
    }
}

macro_rules! handle_with {
    ($ctx:expr, $body:expr, $req:ty, $handler:expr) => {{
        match <$req>::decode(&mut $body, $ctx.api_version) {
            Ok(req) => {
                let resp = $handler(&$ctx, req).await;
                respond(&$ctx, &resp)
            }
            Err(e) => Dispatch::Close(format!("malformed {} request: {e}", stringify!($req))),
        }
    }};
}

/// Decodes a request body of `api_key`/`version` without running it: the decode half of
/// [`dispatch`], for fuzzing and tests. Unsupported pairs are an error.
pub fn decode_request(api_key: ApiKey, version: i16, mut body: Bytes) -> Result<(), String> {
    macro_rules! decode {
        ($($key:ident => $req:ty),* $(,)?) => {
            match api_key {
                $(ApiKey::$key => <$req>::decode(&mut body, version).map(|_| ()).map_err(|e| e.to_string()),)*
                other => Err(format!("api {other:?} is not implemented")),
            }
        };
    }
    if !versions::is_supported(api_key, version) {
        return Err(format!("unsupported version {version} of {api_key:?}"));
    }
    decode!(
        ApiVersions => ApiVersionsRequest,
        Metadata => MetadataRequest,
        Produce => ProduceRequest,
        Fetch => FetchRequest,
        ListOffsets => ListOffsetsRequest,
        InitProducerId => InitProducerIdRequest,
        AddPartitionsToTxn => AddPartitionsToTxnRequest,
        EndTxn => EndTxnRequest,
        CreateTopics => CreateTopicsRequest,
        DeleteTopics => DeleteTopicsRequest,
        CreatePartitions => CreatePartitionsRequest,
        DeleteRecords => DeleteRecordsRequest,
        DescribeConfigs => DescribeConfigsRequest,
        AlterConfigs => AlterConfigsRequest,
        IncrementalAlterConfigs => IncrementalAlterConfigsRequest,
        DescribeCluster => DescribeClusterRequest,
        DescribeQuorum => DescribeQuorumRequest,
        DescribeTopicPartitions => DescribeTopicPartitionsRequest,
        DescribeLogDirs => DescribeLogDirsRequest,
        SaslHandshake => SaslHandshakeRequest,
        ListPartitionReassignments => ListPartitionReassignmentsRequest,
        AlterPartitionReassignments => AlterPartitionReassignmentsRequest,
        ElectLeaders => ElectLeadersRequest,
        OffsetForLeaderEpoch => OffsetForLeaderEpochRequest,
        DescribeAcls => DescribeAclsRequest,
        CreateAcls => CreateAclsRequest,
        DeleteAcls => DeleteAclsRequest,
        DescribeProducers => DescribeProducersRequest,
        FindCoordinator => FindCoordinatorRequest,
        JoinGroup => JoinGroupRequest,
        SyncGroup => SyncGroupRequest,
        Heartbeat => HeartbeatRequest,
        LeaveGroup => LeaveGroupRequest,
        OffsetCommit => OffsetCommitRequest,
        OffsetFetch => OffsetFetchRequest,
        OffsetDelete => OffsetDeleteRequest,
        ListGroups => ListGroupsRequest,
        DescribeGroups => DescribeGroupsRequest,
        DeleteGroups => DeleteGroupsRequest,
        ConsumerGroupHeartbeat => ConsumerGroupHeartbeatRequest,
        ConsumerGroupDescribe => ConsumerGroupDescribeRequest,
    )
}

/// Runs one request whose header has been read; `body` is positioned at the request message.
pub async fn dispatch(ctx: RequestContext, api_key: ApiKey, mut body: Bytes) -> Dispatch {
    if matches!(
        api_key,
        ApiKey::JoinGroup
            | ApiKey::SyncGroup
            | ApiKey::Heartbeat
            | ApiKey::LeaveGroup
            | ApiKey::OffsetCommit
            | ApiKey::OffsetDelete
            | ApiKey::DeleteGroups
            | ApiKey::ConsumerGroupHeartbeat
    ) {
        group::ensure_offsets_topic(&ctx).await;
    }
    match api_key {
        ApiKey::ApiVersions => handle_with!(ctx, body, ApiVersionsRequest, api_versions::handle),
        ApiKey::Metadata => handle_with!(ctx, body, MetadataRequest, metadata::handle),
        ApiKey::Produce => match (body.len(), ProduceRequest::decode(&mut body, ctx.api_version)) {
            (size, Ok(req)) => produce::handle(ctx, req, size).await,
            (_, Err(e)) => Dispatch::Close(format!("malformed ProduceRequest: {e}")),
        },
        ApiKey::Fetch => match FetchRequest::decode(&mut body, ctx.api_version) {
            Ok(req) => {
                let reply = fetch::handle(&ctx, req).await;
                match fetch_frame::frame(&reply, ctx.correlation_id, ctx.api_version, fetch_frame::INLINE_MAX) {
                    Ok(parts) => Dispatch::Stream(parts),
                    Err(e) => {
                        tracing::error!(error = %e, "reading fetched records failed; closing the connection");
                        Dispatch::Close(format!("reading fetched records failed: {e}"))
                    }
                }
            }
            Err(e) => Dispatch::Close(format!("malformed FetchRequest request: {e}")),
        },
        ApiKey::ListOffsets => handle_with!(ctx, body, ListOffsetsRequest, list_offsets::handle),
        ApiKey::InitProducerId => handle_with!(ctx, body, InitProducerIdRequest, producer_id::handle),
        ApiKey::AddPartitionsToTxn => handle_with!(ctx, body, AddPartitionsToTxnRequest, txn::add_partitions_to_txn),
        ApiKey::EndTxn => handle_with!(ctx, body, EndTxnRequest, txn::end_txn),
        ApiKey::CreateTopics => handle_with!(ctx, body, CreateTopicsRequest, topics::create_topics),
        ApiKey::DeleteTopics => handle_with!(ctx, body, DeleteTopicsRequest, topics::delete_topics),
        ApiKey::CreatePartitions => handle_with!(ctx, body, CreatePartitionsRequest, topics::create_partitions),
        ApiKey::DeleteRecords => handle_with!(ctx, body, DeleteRecordsRequest, topics::delete_records),
        ApiKey::DescribeConfigs => handle_with!(ctx, body, DescribeConfigsRequest, configs::describe_configs),
        ApiKey::AlterConfigs => handle_with!(ctx, body, AlterConfigsRequest, configs::alter_configs),
        ApiKey::IncrementalAlterConfigs => {
            handle_with!(ctx, body, IncrementalAlterConfigsRequest, configs::incremental_alter_configs)
        }
        ApiKey::DescribeCluster => handle_with!(ctx, body, DescribeClusterRequest, describe::describe_cluster),
        ApiKey::DescribeQuorum => handle_with!(ctx, body, DescribeQuorumRequest, describe::describe_quorum),
        ApiKey::DescribeTopicPartitions => {
            handle_with!(ctx, body, DescribeTopicPartitionsRequest, describe::describe_topic_partitions)
        }
        ApiKey::DescribeLogDirs => handle_with!(ctx, body, DescribeLogDirsRequest, describe::describe_log_dirs),
        ApiKey::SaslHandshake => handle_with!(ctx, body, SaslHandshakeRequest, describe::sasl_handshake),
        ApiKey::ListPartitionReassignments => {
            handle_with!(ctx, body, ListPartitionReassignmentsRequest, describe::list_partition_reassignments)
        }
        ApiKey::AlterPartitionReassignments => {
            handle_with!(ctx, body, AlterPartitionReassignmentsRequest, describe::alter_partition_reassignments)
        }
        ApiKey::ElectLeaders => handle_with!(ctx, body, ElectLeadersRequest, describe::elect_leaders),
        ApiKey::OffsetForLeaderEpoch => {
            handle_with!(ctx, body, OffsetForLeaderEpochRequest, list_offsets::offset_for_leader_epoch)
        }
        ApiKey::DescribeAcls => handle_with!(ctx, body, DescribeAclsRequest, acls::describe_acls),
        ApiKey::CreateAcls => handle_with!(ctx, body, CreateAclsRequest, acls::create_acls),
        ApiKey::DeleteAcls => handle_with!(ctx, body, DeleteAclsRequest, acls::delete_acls),
        ApiKey::DescribeProducers => handle_with!(ctx, body, DescribeProducersRequest, producer_id::describe_producers),
        ApiKey::FindCoordinator => handle_with!(ctx, body, FindCoordinatorRequest, group::find_coordinator),
        ApiKey::JoinGroup => handle_with!(ctx, body, JoinGroupRequest, group::membership::join_group),
        ApiKey::SyncGroup => handle_with!(ctx, body, SyncGroupRequest, group::membership::sync_group),
        ApiKey::Heartbeat => handle_with!(ctx, body, HeartbeatRequest, group::membership::heartbeat),
        ApiKey::LeaveGroup => handle_with!(ctx, body, LeaveGroupRequest, group::membership::leave_group),
        ApiKey::OffsetCommit => handle_with!(ctx, body, OffsetCommitRequest, group::offsets::offset_commit),
        ApiKey::OffsetFetch => handle_with!(ctx, body, OffsetFetchRequest, group::offsets::offset_fetch),
        ApiKey::OffsetDelete => handle_with!(ctx, body, OffsetDeleteRequest, group::offsets::offset_delete),
        ApiKey::ListGroups => handle_with!(ctx, body, ListGroupsRequest, group::admin::list_groups),
        ApiKey::DescribeGroups => handle_with!(ctx, body, DescribeGroupsRequest, group::admin::describe_groups),
        ApiKey::DeleteGroups => handle_with!(ctx, body, DeleteGroupsRequest, group::admin::delete_groups),
        ApiKey::ConsumerGroupHeartbeat => {
            handle_with!(ctx, body, ConsumerGroupHeartbeatRequest, group::consumer::consumer_group_heartbeat)
        }
        ApiKey::ConsumerGroupDescribe => {
            handle_with!(ctx, body, ConsumerGroupDescribeRequest, group::consumer::consumer_group_describe)
        }
        other => Dispatch::Close(format!("api {other:?} is not implemented")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        /// Arbitrary bodies for every advertised (api, version) decode to a value or an error,
        /// never a panic or an allocation sized by a client-sent count.
        #[test]
        fn arbitrary_request_bodies_never_panic(
            idx in 0usize..versions::SUPPORTED.len(),
            v in 0i16..20,
            body in proptest::collection::vec(any::<u8>(), 0..512),
        ) {
            let s = versions::SUPPORTED[idx];
            let version = s.min + v % (s.max - s.min + 1);
            let _ = decode_request(s.key, version, Bytes::from(body));
        }
    }

    #[test]
    fn every_advertised_pair_decodes_an_encoded_default_request() {
        // A default request encodes and decodes at every advertised version: the table does not
        // promise a version the decoder cannot read.
        fn check<R: Encodable + Default>(key: ApiKey, version: i16) {
            let mut buf = BytesMut::new();
            if R::default().encode(&mut buf, version).is_ok() {
                decode_request(key, version, buf.freeze()).unwrap_or_else(|e| panic!("{key:?} v{version}: {e}"));
            }
        }
        for s in versions::SUPPORTED {
            for v in s.min..=s.max {
                if versions::is_refused(s.key, v) {
                    continue;
                }
                match s.key {
                    ApiKey::Metadata => check::<MetadataRequest>(s.key, v),
                    ApiKey::Fetch => check::<FetchRequest>(s.key, v),
                    ApiKey::Produce => check::<ProduceRequest>(s.key, v),
                    ApiKey::ApiVersions => check::<ApiVersionsRequest>(s.key, v),
                    _ => {}
                }
            }
        }
    }
}
