//! The group coordinator: classic consumer groups (JoinGroup/SyncGroup/Heartbeat/LeaveGroup),
//! committed offsets, and their persistence in the compacted `__consumer_offsets` topic.
//!
//! Split as a pure core and a thin driver:
//! - [`classic`] is one classic group's state machine; [`coordinator`] owns every group and its
//!   offsets. Neither does I/O nor reads a clock: every call takes `now_ms`, and what must happen
//!   afterwards comes back as data — [`Completion`]s (delayed JoinGroup/SyncGroup answers, keyed
//!   by the waiter token the driver handed in) and [`records::CoordinatorRecord`]s to append to
//!   `__consumer_offsets`.
//! - [`driver`] (tokio) holds the core behind a mutex, parks delayed requests on oneshot channels,
//!   appends records to the log, replays the log at startup and ticks timers.
//!
//! The coordinator is this node for every group (a single-node cluster leads every
//! `__consumer_offsets` partition); a group still lives in partition
//! `abs(javaHashCode(group_id)) % offsets.topic.num.partitions` so a Kafka log dir reads the same.
//!
//! # Invariants
//! - A member id appears in at most one of a group's members and pending (KIP-394) members; a
//!   `group.instance.id` maps to at most one member.
//! - Every parked JoinGroup/SyncGroup waiter is answered exactly once: by completion of the phase,
//!   by the member's removal or replacement (an error), or by the driver when the group goes away.
//! - A state change that Kafka persists (generation completion, assignment, empty group, deletion,
//!   offset commit/expiry/deletion) is appended to `__consumer_offsets` before the request that
//!   caused it is answered.
//! - Client-controlled sizes are bounded: members per group (`group.max.size`), protocol metadata
//!   and assignment bytes per member, committed metadata (`offset.metadata.max.bytes`).
//!
//! # Failure behaviour
//! A failed append to `__consumer_offsets` is logged with the group and answered with
//! COORDINATOR_NOT_AVAILABLE (what Kafka maps storage failures to); the in-memory state keeps the
//! change, so a retry by the client converges. On restart the log is replayed in offset order and
//! the last record per key wins (tombstones delete), exactly as compaction would leave it.

pub mod classic;
pub mod config;
pub mod assignor;
pub mod consumer;
pub mod coordinator;
pub mod driver;
pub mod records;
pub mod view;

pub use classic::{ClassicGroup, GroupState};
pub use config::GroupConfig;
pub use coordinator::GroupCoordinator;
pub use driver::Groups;

/// Name of the internal topic holding offsets and group metadata.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// An answer to a parked JoinGroup or SyncGroup request, for the driver to deliver.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    /// The token the driver passed when the request was parked.
    pub token: u64,
    pub reply: Reply,
}

/// The delayed answers a classic group produces.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Join(classic::JoinReply),
    Sync(classic::SyncReply),
}

/// Failures of the coordinator's storage layer (the core itself answers with Kafka error codes).
#[derive(Debug, thiserror::Error)]
pub enum GroupError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error("creating {OFFSETS_TOPIC}: {0}")]
    CreateOffsetsTopic(String),
    #[error("appending to {OFFSETS_TOPIC}-{partition}")]
    Append {
        partition: i32,
        #[source]
        source: crate::replication::AppendError,
    },
    #[error("reading {OFFSETS_TOPIC}-{partition} at offset {offset}")]
    Read {
        partition: i32,
        offset: i64,
        #[source]
        source: crate::log::LogError,
    },
    #[error("encoding a record batch for {OFFSETS_TOPIC}: {0}")]
    Encode(String),
}

/// Java's `Utils.abs(groupId.hashCode()) % partitions`: the `__consumer_offsets` partition of a group.
pub fn partition_for(group_id: &str, partitions: i32) -> i32 {
    let mut h: i32 = 0;
    for unit in group_id.encode_utf16() {
        h = h.wrapping_mul(31).wrapping_add(unit as i32);
    }
    (h & 0x7fff_ffff) % partitions.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_for_matches_java_string_hash_code() {
        // "my-group".hashCode() = -1906497762 in Java; Utils.abs gives 240985886; % 50 = 36.
        assert_eq!(partition_for("my-group", 50), 36);
        // A hash with the sign bit set: Utils.abs masks it rather than negating.
        let h = "polygenelubricants".encode_utf16().fold(0i32, |h, u| h.wrapping_mul(31).wrapping_add(u as i32));
        assert_eq!(h, i32::MIN);
        assert_eq!(partition_for("polygenelubricants", 50), 0);
        // Non-BMP characters hash as their UTF-16 surrogate pairs.
        assert_eq!(partition_for("\u{1F600}", 1000), ((0xD83D * 31 + 0xDE00) & 0x7fff_ffff) % 1000);
    }
}
