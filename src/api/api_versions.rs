//! ApiVersions: the advertised ranges. A request with an unsupported ApiVersions version is
//! answered by the network layer with [`unsupported_version_response`] in v0 framing, which every
//! client understands, so it can retry with a version we speak.

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};
use kafka_protocol::ResponseError;

use super::versions::SUPPORTED;
use super::RequestContext;

fn api_keys(in_cluster: bool) -> Vec<ApiVersion> {
    SUPPORTED
        .iter()
        .filter(|s| in_cluster || !super::versions::cluster_only(s.key))
        .map(|s| ApiVersion::default().with_api_key(s.key as i16).with_min_version(s.min).with_max_version(s.max))
        .collect()
}

pub async fn handle(ctx: &RequestContext, _req: ApiVersionsRequest) -> ApiVersionsResponse {
    // KIP-511 client name/version fields are informational; Kafka validates their characters
    // only to reject obviously broken clients, which none of the real clients are.
    ApiVersionsResponse::default().with_api_keys(api_keys(ctx.broker.cluster().is_some())).with_finalized_features_epoch(-1)
}

/// The v0 response for an ApiVersions request whose version we do not support. Like Kafka, it
/// lists only the ApiVersions range: all the client needs to retry with a version we speak.
pub fn unsupported_version_response() -> ApiVersionsResponse {
    ApiVersionsResponse::default()
        .with_error_code(ResponseError::UnsupportedVersion.code())
        .with_api_keys(api_keys(false).into_iter().filter(|k| k.api_key == ApiKey::ApiVersions as i16).collect())
}
