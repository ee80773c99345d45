//! DescribeAcls, CreateAcls and DeleteAcls on a broker without an authorizer.
//!
//! sluice has no authorizer yet, so it answers the ACL APIs as Apache Kafka does when
//! `authorizer.class.name` is not set: every request (or, for create and delete, every entry of
//! it) fails with SECURITY_DISABLED and Kafka's message. Tools then report that ACLs are off
//! (`kafka-acls.sh --list`: "SecurityDisabledException: No Authorizer is configured on the
//! broker"), as against such a Kafka, rather than that the broker lacks the API.

use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::DeleteAclsFilterResult;
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

use super::{str_bytes, RequestContext};

/// Kafka's messages for SECURITY_DISABLED when no authorizer is configured (Apache Kafka 4.4's
/// broker words it one way for DescribeAcls, its controller another for CreateAcls and
/// DeleteAcls).
const NO_AUTHORIZER_DESCRIBE: &str = "No Authorizer is configured on the broker";
const NO_AUTHORIZER: &str = "No Authorizer is configured.";

pub async fn describe_acls(_ctx: &RequestContext, _req: DescribeAclsRequest) -> DescribeAclsResponse {
    DescribeAclsResponse::default()
        .with_error_code(ResponseError::SecurityDisabled.code())
        .with_error_message(Some(str_bytes(NO_AUTHORIZER_DESCRIBE)))
}

pub async fn create_acls(_ctx: &RequestContext, req: CreateAclsRequest) -> CreateAclsResponse {
    let results = req
        .creations
        .iter()
        .map(|_| AclCreationResult::default().with_error_code(ResponseError::SecurityDisabled.code()).with_error_message(Some(str_bytes(NO_AUTHORIZER))))
        .collect();
    CreateAclsResponse::default().with_results(results)
}

pub async fn delete_acls(_ctx: &RequestContext, req: DeleteAclsRequest) -> DeleteAclsResponse {
    let results = req
        .filters
        .iter()
        .map(|_| DeleteAclsFilterResult::default().with_error_code(ResponseError::SecurityDisabled.code()).with_error_message(Some(str_bytes(NO_AUTHORIZER))))
        .collect();
    DeleteAclsResponse::default().with_filter_results(results)
}
