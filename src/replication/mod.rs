//! Partition replicas: log + high watermark + leader epoch + producer state, and how they are
//! kept in step across brokers.
//!
//! - [`leader`]: a leader's view of its followers (high watermark, ISR changes); a pure core.
//! - [`partition`]: one replica as the broker serves it, leading or following.
//! - [`fetcher`]: a follower's fetches from its leaders, one task per source broker.
//! - [`throttle`]: replication throttles for reassignments (rates and throttled replicas).
//! - `simulation` (tests): seeded schedules of faults over these cores and the controller's,
//!   checking that no acknowledged record is lost.
pub mod fetcher;
pub mod leader;
pub mod partition;
pub mod producer_state;
pub mod throttle;
#[cfg(test)]
mod simulation;

pub use partition::{AppendError, Appended, Partition, ReplicationWait, Role};
