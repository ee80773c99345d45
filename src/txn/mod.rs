//! Transactions (KIP-98, with transactions v2 of KIP-890): the transaction coordinator.
//! Its decisions are pure (no I/O); [`driver`] runs them over `__transaction_state`.
//!
//! - [`state`]: a transaction's states at its coordinator and which may follow which.
//! - [`records`]: the records of `__transaction_state`, in Kafka's schemas.
//! - [`cache`]: the transactional ids a coordinator holds, rebuilt by replaying
//!   `__transaction_state`, and the markers that replay leaves to write.
//! - [`metadata`]: one transactional id at its coordinator: InitProducerId's and
//!   AddPartitionsToTxn's and EndTxn's decisions and each transition, written before it counts.
//! - [`config`]: the coordinator's broker settings.
//! - [`driver`]: the service the api handlers call: writes, markers, timeouts, loading.
//!
//! The partitions' side (markers, the last stable offset, read_committed) is in
//! `replication::partition` and `log::txn_index`.

pub mod cache;
pub mod config;
pub mod driver;
pub mod metadata;
pub mod records;
pub mod state;

pub use driver::{TxnError, Txns, STATE_TOPIC};
