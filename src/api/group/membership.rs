//! JoinGroup, SyncGroup, Heartbeat and LeaveGroup (the classic group protocol).
//!
//! JoinGroup and SyncGroup may be parked by the coordinator until the rebalance phase completes;
//! the connection task simply awaits the handler (requests on one connection are answered in
//! order, as Kafka does).

use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;


use super::{code, not_ready};
use crate::api::{str_bytes, RequestContext};
use crate::group::classic::{JoinReply, JoinRequest};

fn join_response(ctx: &RequestContext, r: JoinReply) -> JoinGroupResponse {
    // protocol_name is nullable only from v7; older versions carry "" instead.
    let protocol_name = match (r.protocol_name, ctx.api_version >= 7) {
        (Some(n), _) => Some(str_bytes(&n)),
        (None, true) => None,
        (None, false) => Some(str_bytes("")),
    };
    JoinGroupResponse::default()
        .with_error_code(code(r.error))
        .with_generation_id(r.generation_id)
        .with_protocol_type(r.protocol_type.map(|t| str_bytes(&t)))
        .with_protocol_name(protocol_name)
        .with_leader(str_bytes(&r.leader))
        .with_skip_assignment(r.skip_assignment && ctx.api_version >= 9)
        .with_member_id(str_bytes(&r.member_id))
        .with_members(
            r.members
                .into_iter()
                .map(|m| {
                    join_group_response::JoinGroupResponseMember::default()
                        .with_member_id(str_bytes(&m.member_id))
                        .with_group_instance_id(m.instance_id.map(|i| str_bytes(&i)))
                        .with_metadata(m.metadata)
                })
                .collect(),
        )
}

pub async fn join_group(ctx: &RequestContext, req: JoinGroupRequest) -> JoinGroupResponse {
    if let Some(e) = not_ready(ctx, &req.group_id) {
        return join_response(ctx, JoinReply::error(e, &req.member_id));
    }
    let rebalance_timeout_ms = if ctx.api_version >= 1 && req.rebalance_timeout_ms >= 0 { req.rebalance_timeout_ms } else { req.session_timeout_ms };
    let join = JoinRequest {
        member_id: req.member_id.to_string(),
        instance_id: req.group_instance_id.as_ref().map(|s| s.to_string()),
        client_id: ctx.client_id.clone().unwrap_or_default(),
        client_host: ctx.client_host(),
        session_timeout_ms: req.session_timeout_ms,
        rebalance_timeout_ms,
        protocol_type: req.protocol_type.to_string(),
        protocols: req.protocols.iter().map(|p| (p.name.to_string(), p.metadata.clone())).collect(),
        require_known_member_id: ctx.api_version >= 4,
    };
    let reply = ctx.broker.groups().join(&ctx.broker, &req.group_id, join).await;
    join_response(ctx, reply)
}

pub async fn sync_group(ctx: &RequestContext, req: SyncGroupRequest) -> SyncGroupResponse {
    if let Some(e) = not_ready(ctx, &req.group_id) {
        return SyncGroupResponse::default().with_error_code(e.code());
    }
    // Kafka (SyncGroupRequest.areMandatoryProtocolTypeAndNamePresent): v5+ must carry both.
    if ctx.api_version >= 5 && (req.protocol_type.is_none() || req.protocol_name.is_none()) {
        return SyncGroupResponse::default().with_error_code(ResponseError::InconsistentGroupProtocol.code());
    }
    let assignments = req.assignments.iter().map(|a| (a.member_id.to_string(), a.assignment.clone())).collect();
    let r = ctx
        .broker
        .groups()
        .sync(
            &ctx.broker,
            &req.group_id,
            &req.member_id,
            req.group_instance_id.as_deref(),
            req.generation_id,
            req.protocol_type.as_deref(),
            req.protocol_name.as_deref(),
            assignments,
        )
        .await;
    SyncGroupResponse::default()
        .with_error_code(code(r.error))
        .with_protocol_type(r.protocol_type.map(|t| str_bytes(&t)))
        .with_protocol_name(r.protocol_name.map(|t| str_bytes(&t)))
        .with_assignment(r.assignment)
}

pub async fn heartbeat(ctx: &RequestContext, req: HeartbeatRequest) -> HeartbeatResponse {
    let e = not_ready(ctx, &req.group_id).or_else(|| {
        ctx.broker.groups().heartbeat(&ctx.broker, &req.group_id, &req.member_id, req.group_instance_id.as_deref(), req.generation_id)
    });
    HeartbeatResponse::default().with_error_code(code(e))
}

pub async fn leave_group(ctx: &RequestContext, req: LeaveGroupRequest) -> LeaveGroupResponse {
    if let Some(e) = not_ready(ctx, &req.group_id) {
        return LeaveGroupResponse::default().with_error_code(e.code());
    }
    let members: Vec<(String, Option<String>)> = if ctx.api_version >= 3 {
        req.members.iter().map(|m| (m.member_id.to_string(), m.group_instance_id.as_ref().map(|s| s.to_string()))).collect()
    } else {
        vec![(req.member_id.to_string(), None)]
    };
    match ctx.broker.groups().leave(&ctx.broker, &req.group_id, &members) {
        Err(e) => LeaveGroupResponse::default().with_error_code(e.code()),
        Ok(results) if ctx.api_version < 3 => LeaveGroupResponse::default().with_error_code(code(results.into_iter().next().flatten())),
        Ok(results) => LeaveGroupResponse::default().with_members(
            members
                .into_iter()
                .zip(results)
                .map(|((m, i), e)| {
                    leave_group_response::MemberResponse::default()
                        .with_member_id(str_bytes(&m))
                        .with_group_instance_id(i.map(|i| str_bytes(&i)))
                        .with_error_code(code(e))
                })
                .collect(),
        ),
    }
}

