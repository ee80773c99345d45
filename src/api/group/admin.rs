//! ListGroups (states filter v4+, types filter v5+), DescribeGroups and DeleteGroups.

use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

use super::{code, not_loaded, not_ready};
use crate::api::{str_bytes, RequestContext};
use crate::group::GroupState;

/// Group ACL operations Kafka reports when asked and no authorizer denies anything:
/// READ(3), DELETE(6), DESCRIBE(8), DESCRIBE_CONFIGS(10), ALTER_CONFIGS(11).
const GROUP_OPERATIONS: i32 = (1 << 3) | (1 << 6) | (1 << 8) | (1 << 10) | (1 << 11);

pub async fn list_groups(ctx: &RequestContext, req: ListGroupsRequest) -> ListGroupsResponse {
    if let Some(e) = not_loaded(ctx) {
        return ListGroupsResponse::default().with_error_code(e.code());
    }
    let states: Vec<String> = req.states_filter.iter().map(|s| s.to_lowercase()).collect();
    let types: Vec<String> = req.types_filter.iter().map(|s| s.to_lowercase()).collect();
    let groups = ctx.broker.groups().with_core(|core| core.list_groups());
    let listed = groups
        .into_iter()
        .filter(|g| g.state != GroupState::Dead.name())
        .filter(|g| states.is_empty() || states.contains(&g.state.to_lowercase()))
        .filter(|g| types.is_empty() || types.iter().any(|t| t == g.group_type))
        .map(|g| {
            list_groups_response::ListedGroup::default()
                .with_group_id(GroupId(str_bytes(&g.group_id)))
                .with_protocol_type(str_bytes(&g.protocol_type))
                .with_group_state(str_bytes(g.state))
                .with_group_type(str_bytes(g.group_type))
        })
        .collect();
    ListGroupsResponse::default().with_groups(listed)
}

fn describe_one(ctx: &RequestContext, group_id: &GroupId, with_ops: bool) -> describe_groups_response::DescribedGroup {
    let base = describe_groups_response::DescribedGroup::default()
        .with_group_id(group_id.clone())
        .with_authorized_operations(if with_ops { GROUP_OPERATIONS } else { i32::MIN });
    if let Some(e) = not_ready(ctx, group_id) {
        return base.with_error_code(e.code());
    }
    ctx.broker.groups().with_core(|core| {
        // Kafka 4.x describes only classic groups here; a consumer (KIP-848) group answers like
        // a missing one ("is not a classic group").
        let Some(entry) = core.group(group_id).filter(|e| e.classic.state() != GroupState::Dead && e.consumer.is_none()) else {
            // Kafka 4.x (KIP-1043): v6 answers GROUP_ID_NOT_FOUND; older versions a Dead group.
            let base = base.with_group_state(str_bytes(GroupState::Dead.name()));
            return if ctx.api_version >= 6 {
                base.with_error_code(ResponseError::GroupIdNotFound.code())
                    .with_error_message(Some(str_bytes(&format!("Group {} not found.", &**group_id))))
            } else {
                base
            };
        };
        let g = &entry.classic;
        let stable = g.state() == GroupState::Stable;
        let protocol = if stable { g.protocol_name().unwrap_or_default().to_string() } else { String::new() };
        let members = g
            .members()
            .map(|m| {
                let mut d = describe_groups_response::DescribedGroupMember::default()
                    .with_member_id(str_bytes(&m.member_id))
                    .with_group_instance_id(m.instance_id.as_ref().map(|i| str_bytes(i)))
                    .with_client_id(str_bytes(&m.client_id))
                    .with_client_host(str_bytes(&m.client_host));
                if stable {
                    let metadata = m.protocols.iter().find(|(n, _)| *n == protocol).map(|(_, b)| b.clone()).unwrap_or_default();
                    d = d.with_member_metadata(metadata).with_member_assignment(m.assignment.clone());
                }
                d
            })
            .collect();
        base.with_group_state(str_bytes(g.state().name()))
            .with_protocol_type(str_bytes(g.protocol_type().unwrap_or_default()))
            .with_protocol_data(str_bytes(&protocol))
            .with_members(members)
    })
}

pub async fn describe_groups(ctx: &RequestContext, req: DescribeGroupsRequest) -> DescribeGroupsResponse {
    let groups = req.groups.iter().map(|g| describe_one(ctx, g, req.include_authorized_operations)).collect();
    DescribeGroupsResponse::default().with_groups(groups)
}

pub async fn delete_groups(ctx: &RequestContext, req: DeleteGroupsRequest) -> DeleteGroupsResponse {
    let results = req
        .groups_names
        .iter()
        .map(|g| {
            let e = not_ready(ctx, g).or_else(|| ctx.broker.groups().delete_group(&ctx.broker, g));
            delete_groups_response::DeletableGroupResult::default().with_group_id(g.clone()).with_error_code(code(e))
        })
        .collect();
    DeleteGroupsResponse::default().with_results(results)
}
