//! The metadata quorum as the rest of sluice sees it: propose metadata records, watch the image
//! they build once committed, ask who leads. [`MetadataQuorum`] is ours; the consensus behind
//! it is openraft's (`cluster::raft`), so its types and API changes stay in that one module.
//!
//! # Guarantees
//! - [`MetadataQuorum::propose`] returns once the records are committed (on a majority of the
//!   voters, each fsynced there) and applied to this node's image; the offset it returns is the
//!   last record's. The records are checked against the current image first: a batch that would
//!   not apply is refused before anything is written.
//! - Every voter applies the same records in the same order, so every image that reached an
//!   offset is the same image.
//! - Only the leader accepts proposals; others answer [`QuorumError::NotLeader`] with the
//!   leader they know of, for the caller to forward to.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::watch;

use super::image::MetadataImage;
use super::records::VersionedRecord;

/// Why a proposal was not committed.
#[derive(Debug, thiserror::Error)]
pub enum QuorumError {
    #[error("this node is not the active controller (the leader is {leader:?})")]
    NotLeader { leader: Option<i32> },
    #[error("the records do not apply to the metadata image: {0}")]
    Invalid(#[source] super::ClusterError),
    #[error("the metadata quorum failed: {0}")]
    Raft(String),
    #[error("metadata quorum storage in {path}: {source}")]
    Storage {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// One voter as this node sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VoterStatus {
    pub id: i32,
    /// The leader's view of how far the voter's log reaches, in Raft log entries (None on
    /// followers, or unknown).
    pub log_end_offset: Option<u64>,
    /// On the leader: how long ago the voter last answered it (0 for the leader itself).
    pub millis_since_ack: Option<u64>,
}

/// The quorum's state, for DescribeQuorum and `/healthz`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumStatus {
    pub node_id: i32,
    pub leader: Option<i32>,
    pub term: u64,
    /// The Raft log's last index on this node.
    pub last_log_index: Option<u64>,
    /// The Raft log index applied to this node's image.
    pub applied_index: Option<u64>,
    pub voters: Vec<VoterStatus>,
}

/// A replicated metadata log and the image it builds.
pub trait MetadataQuorum: Send + Sync {
    /// Appends `records` as one batch; see the module docs for when it returns.
    fn propose(&self, records: Vec<VersionedRecord>) -> impl Future<Output = Result<i64, QuorumError>> + Send;
    /// The image as of the last record applied on this node, updated as records apply.
    fn image(&self) -> watch::Receiver<Arc<MetadataImage>>;
    fn status(&self) -> QuorumStatus;
    /// Returns once this node has confirmed it leads (heard from a majority) and its image holds
    /// every record committed before: what a leader waits for before deciding from its image.
    fn leader_caught_up(&self) -> impl Future<Output = Result<(), QuorumError>> + Send;
}

/// Answers the Kafka-protocol requests that arrive on the controller listener, which carries
/// the quorum's peer messages too (a connection's first frame tells which it is).
pub trait ClientFrames: Send + Sync {
    /// `request` is one request frame without its size prefix (header and body); the answer is
    /// the whole response frame, size prefix included, or why the connection is closed.
    fn answer<'a>(
        &'a self,
        request: bytes::Bytes,
        peer: std::net::SocketAddr,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<bytes::BytesMut, String>> + Send + 'a>>;
}

/// Where the quorum's listener hands Kafka-protocol connections; empty until the controller's
/// API is ready (connections made before are closed).
pub type ClientFramesSlot = Arc<std::sync::OnceLock<Arc<dyn ClientFrames>>>;
