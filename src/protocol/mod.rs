//! Wire-level pieces that are not Kafka message structs: request framing and the
//! record-batch header view. Message types come from the `kafka-protocol` crate.
pub mod codec;
pub mod compression;
pub mod control;
pub mod frame;
pub mod record_batch;
