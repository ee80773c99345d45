//! Transactions (KIP-98, with transactions v2 of KIP-890): the pieces of the transaction
//! coordinator that are independent of I/O.
//!
//! - [`state`]: a transaction's states at its coordinator and which may follow which.
//! - [`records`]: the records of `__transaction_state`, in Kafka's schemas.
//! - [`cache`]: the transactional ids a coordinator holds, rebuilt by replaying
//!   `__transaction_state`, and the markers that replay leaves to write.
//! - [`metadata`]: one transactional id at its coordinator: InitProducerId's and
//!   AddPartitionsToTxn's and EndTxn's decisions and each transition, written before it counts.
//!
//! Nothing here is served yet: a transactional producer is still refused (see
//! `api::producer_id`).

pub mod cache;
pub mod metadata;
pub mod records;
pub mod state;
