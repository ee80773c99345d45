//! The classic protocol's request/answer types as the core sees them, the group states, and
//! the one piece of client metadata the coordinator reads (subscribed topics, for OffsetDelete).

use bytes::Bytes;
use kafka_protocol::ResponseError;

/// Kafka's classic group states (names as ListGroups/DescribeGroups print them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

/// A JoinGroup request as the core sees it (validated for session timeout by the coordinator).
#[derive(Debug, Clone, Default)]
pub struct JoinRequest {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
    /// JoinGroup v4+: a new member first gets MEMBER_ID_REQUIRED (KIP-394).
    pub require_known_member_id: bool,
}

/// A member as the leader's JoinGroup response lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct JoinedMember {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub metadata: Bytes,
}

/// A JoinGroup answer.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct JoinReply {
    pub error: Option<ResponseError>,
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    pub member_id: String,
    /// Only the leader gets the members.
    pub members: Vec<JoinedMember>,
    /// JoinGroup v9: the leader of a replaced static member must not reassign.
    pub skip_assignment: bool,
}

impl JoinReply {
    pub fn error(error: ResponseError, member_id: &str) -> JoinReply {
        JoinReply { error: Some(error), generation_id: -1, member_id: member_id.to_string(), ..Default::default() }
    }
}

/// A SyncGroup answer.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SyncReply {
    pub error: Option<ResponseError>,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

impl SyncReply {
    pub fn error(error: ResponseError) -> SyncReply {
        SyncReply { error: Some(error), ..Default::default() }
    }
}

/// What a JoinGroup or SyncGroup call did: answered now, or parked until a [`Completion`].
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome<T> {
    Now(T),
    Parked,
}

/// Topics of a ConsumerProtocolSubscription (any version: `version i16 | topics [string] | ...`).
/// Malformed metadata yields what could be read.
pub fn parse_subscription_topics(data: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let mut pos = 2usize;
    let Some(n) = data.get(pos..pos + 4).map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]])) else { return out };
    pos += 4;
    for _ in 0..n.max(0) {
        let Some(len) = data.get(pos..pos + 2).map(|b| i16::from_be_bytes([b[0], b[1]])) else { break };
        pos += 2;
        let len = len.max(0) as usize;
        let Some(s) = data.get(pos..pos + len) else { break };
        out.push(String::from_utf8_lossy(s).into_owned());
        pos += len;
    }
    out
}


