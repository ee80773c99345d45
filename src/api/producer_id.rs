//! InitProducerId for idempotent producers: a fresh producer id at epoch 0 per call.
//! Transactional ids need the transaction coordinator, which sluice does not have yet; such
//! requests get UNSUPPORTED_VERSION, which clients do not retry (as for a FindCoordinator of a
//! transaction coordinator, see `group`). An empty (non-null) transactional id is malformed, and
//! gets INVALID_REQUEST as from Kafka.

use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};
use kafka_protocol::ResponseError;

use super::RequestContext;
use crate::broker::error_chain;

pub async fn handle(ctx: &RequestContext, req: InitProducerIdRequest) -> InitProducerIdResponse {
    let resp = InitProducerIdResponse::default().with_producer_id(ProducerId(-1)).with_producer_epoch(-1);
    match req.transactional_id.as_ref().map(|id| id.is_empty()) {
        None => {}
        Some(true) => return resp.with_error_code(ResponseError::InvalidRequest.code()),
        Some(false) => return resp.with_error_code(ResponseError::UnsupportedVersion.code()),
    }
    // Starting a new block of ids writes its end with fsync: on the blocking pool.
    let broker = ctx.broker.clone();
    match super::off_runtime(move || broker.allocate_producer_id()).await {
        Ok(id) => resp.with_producer_id(ProducerId(id)).with_producer_epoch(0),
        Err(e) => {
            tracing::error!(error = %error_chain(&e), "allocating a producer id failed");
            resp.with_error_code(ResponseError::UnknownServerError.code())
        }
    }
}
