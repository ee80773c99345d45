//! [`MetadataQuorum`] on openraft: the only module that sees openraft's types.
//!
//! - `log_store`: the Raft log and vote in files, fsynced before openraft is told they are
//!   durable.
//! - `state_machine`: committed entries applied to the metadata image; snapshots of the image
//!   (as Kafka records), after [`QuorumConfig::snapshot_every`] entries, after which openraft
//!   purges the log below them; a lagging voter is caught up with the snapshot.
//! - `network`: peer messages over TCP on the controller listener.
//! - `prevote`: when this voter stands for election: only after a majority grants it a
//!   pre-vote, so a voter back from a pause or a partition does not depose a working leader
//!   (openraft's own election timer is off).
//!
//! Every voter of the static quorum (`controller.quorum.voters`) initialises the same
//! membership at first start (openraft accepts identical initialisation on every voter); after
//! that, membership is what the log says.
//!
//! # Failure behaviour
//! A voter that cannot reach a majority keeps retrying (pre-vote rounds, openraft's
//! per-peer backoff) and reports no leader in [`QuorumStatus`]; proposals on it fail with
//! `NotLeader` rather than wait. A storage error stops the node's Raft (openraft treats it as
//! fatal); the error is logged with the directory.

mod log_store;
mod network;
mod prevote;
mod state_machine;
#[cfg(test)]
mod tests;

pub use network::{ObserveRequest, ObserveResponse, PeerClient, ANY_VOTER};
pub use state_machine::image_from_records;

use std::collections::BTreeMap;
use std::io::Cursor;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{CheckIsLeaderError, ClientWriteError, InitializeError, RaftError};
use openraft::{BasicNode, Config, Raft, SnapshotPolicy};
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::image::MetadataImage;
use super::quorum::{ClientFrames, ClientFramesSlot, MetadataQuorum, QuorumError, QuorumStatus, VoterStatus};
use super::records::{self, VersionedRecord};

/// One proposal: metadata records in Kafka's encoding, applied together.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MetadataBatch {
    pub records: Vec<Vec<u8>>,
}

openraft::declare_raft_types!(
    /// openraft's types for the metadata quorum.
    pub TypeConfig:
        D = MetadataBatch,
        R = i64,
);

/// Timing and snapshot settings of the quorum.
#[derive(Debug, Clone, Copy)]
pub struct QuorumConfig {
    pub heartbeat_ms: u64,
    pub election_timeout_ms: u64,
    /// Take a snapshot after this many entries since the last one.
    pub snapshot_every: u64,
}

impl Default for QuorumConfig {
    fn default() -> Self {
        // Kafka's controller.quorum.fetch.timeout.ms is 2 s and election backoff up to 1 s;
        // these elect within about a second on a local network.
        QuorumConfig { heartbeat_ms: 100, election_timeout_ms: 1000, snapshot_every: 5000 }
    }
}

/// How long [`RaftQuorum::start`] waits for the only voter of a quorum to lead before returning
/// anyway (its callers retry until it does).
const SINGLE_VOTER_ELECTION: std::time::Duration = std::time::Duration::from_secs(5);

/// A voter of the metadata quorum.
pub struct RaftQuorum {
    node_id: i32,
    raft: Raft<TypeConfig>,
    state: state_machine::StateMachine,
    server: tokio::task::JoinHandle<()>,
    elector: tokio::task::JoinHandle<()>,
    clients: ClientFramesSlot,
    acks: network::LastAcks,
}

impl RaftQuorum {
    /// Starts voter `node_id` of `voters` (id -> `host:port` of their controller listeners),
    /// serving peers on `listener`, with its log, vote and snapshot in `dir`. Peers formatted
    /// with another `cluster_id` are refused, in both directions.
    pub async fn start(
        node_id: i32,
        cluster_id: &str,
        listener: TcpListener,
        voters: &BTreeMap<i32, String>,
        dir: &Path,
        config: QuorumConfig,
    ) -> Result<RaftQuorum, QuorumError> {
        let storage = |source| QuorumError::Storage { path: dir.to_path_buf(), source };
        let log = log_store::LogStore::open(dir).map_err(storage)?;
        let state = state_machine::StateMachine::open(dir).map_err(|e| QuorumError::Raft(e.to_string()))?;
        let raft_config = Config {
            cluster_name: "sluice-metadata".into(),
            heartbeat_interval: config.heartbeat_ms,
            election_timeout_min: config.election_timeout_ms,
            election_timeout_max: config.election_timeout_ms * 2,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(config.snapshot_every),
            max_in_snapshot_log_to_keep: 0,
            // Elections are started by prevote::run_elector.
            enable_elect: false,
            ..Default::default()
        }
        .validate()
        .map_err(|e| QuorumError::Raft(e.to_string()))?;
        let acks = network::LastAcks::default();
        let peers = network::Network { cluster_id: cluster_id.to_string(), acks: acks.clone() };
        let tick = Duration::from_millis(raft_config.heartbeat_interval);
        let timeout_min = Duration::from_millis(raft_config.election_timeout_min);
        // openraft's leader lease is its election_timeout_max.
        let lease = Duration::from_millis(raft_config.election_timeout_max);
        let raft = Raft::new(node_id as u64, Arc::new(raft_config), peers, log, state.clone())
            .await
            .map_err(|e| QuorumError::Raft(e.to_string()))?;
        let clients = ClientFramesSlot::default();
        let contact = prevote::Contact::default();
        let voter = network::Voter { node_id: node_id as u64, raft: raft.clone(), contact: contact.clone(), lease };
        let server = tokio::spawn(network::serve(voter, cluster_id.to_string(), listener, clients.clone(), state.subscribe()));
        let elector = tokio::spawn(prevote::run_elector(
            node_id as u64,
            cluster_id.to_string(),
            raft.clone(),
            contact,
            tick,
            timeout_min,
            lease,
        ));
        let members: BTreeMap<u64, BasicNode> =
            voters.iter().map(|(id, addr)| (*id as u64, BasicNode { addr: addr.clone() })).collect();
        // A restarted voter's log already holds the membership (openraft would refuse, and log
        // an error, if asked again).
        let initialized = raft.is_initialized().await.map_err(|e| QuorumError::Raft(e.to_string()))?;
        if !initialized {
            match raft.initialize(members).await {
                Ok(()) => {}
                // A peer's log reached us first.
                Err(RaftError::APIError(InitializeError::NotAllowed(_))) => {}
                Err(e) => return Err(QuorumError::Raft(e.to_string())),
            }
        }
        // The only voter elects itself at once (or, restarted, resumes leading); waiting for it
        // here spares the broker beside it a retry pause before its registration.
        if voters.len() == 1 && voters.contains_key(&node_id) {
            let _ = raft.wait(Some(SINGLE_VOTER_ELECTION)).current_leader(node_id as u64, "the only voter leads").await;
        }
        Ok(RaftQuorum { node_id, raft, state, server, elector, clients, acks })
    }

    /// Hands the Kafka-protocol connections of the controller listener to `handler` from now
    /// on (once; later calls are ignored).
    pub fn serve_clients(&self, handler: std::sync::Arc<dyn ClientFrames>) {
        let _ = self.clients.set(handler);
    }

    /// Stops this voter (its peers see it as unreachable).
    pub async fn shutdown(&self) {
        self.server.abort();
        self.elector.abort();
        if let Err(e) = self.raft.shutdown().await {
            tracing::warn!(error = %e, "metadata quorum shutdown");
        }
    }
}

impl MetadataQuorum for RaftQuorum {
    async fn propose(&self, records: Vec<VersionedRecord>) -> Result<i64, QuorumError> {
        let batch = MetadataBatch { records: records.iter().map(records::encode).collect() };
        // Validation before anything is written: the batch must apply to the image as it is.
        let mut check = (*self.state.image()).clone();
        state_machine::apply_batch(&mut check, &batch).map_err(QuorumError::Invalid)?;
        match self.raft.client_write(batch).await {
            Ok(resp) => Ok(resp.data),
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
                Err(QuorumError::NotLeader { leader: f.leader_id.map(|l| l as i32) })
            }
            Err(e) => Err(QuorumError::Raft(e.to_string())),
        }
    }

    async fn leader_caught_up(&self) -> Result<(), QuorumError> {
        match self.raft.ensure_linearizable().await {
            Ok(_) => Ok(()),
            Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f))) => {
                Err(QuorumError::NotLeader { leader: f.leader_id.map(|l| l as i32) })
            }
            Err(e) => Err(QuorumError::Raft(e.to_string())),
        }
    }

    fn image(&self) -> watch::Receiver<Arc<MetadataImage>> {
        self.state.subscribe()
    }

    fn status(&self) -> QuorumStatus {
        let m = self.raft.metrics().borrow().clone();
        let replication = m.replication.clone().unwrap_or_default();
        let leading = m.current_leader == Some(self.node_id as u64);
        let acks = self.acks.lock().clone();
        let voters = m
            .membership_config
            .membership()
            .voter_ids()
            .map(|id| {
                let me = id == self.node_id as u64;
                VoterStatus {
                    id: id as i32,
                    log_end_offset: if me && leading {
                        m.last_log_index.map(|i| i + 1)
                    } else {
                        replication.get(&id).and_then(|l| l.map(|l| l.index + 1))
                    },
                    millis_since_ack: if !leading {
                        None
                    } else if me {
                        Some(0)
                    } else {
                        acks.get(&id).map(|t| t.elapsed().as_millis() as u64)
                    },
                }
            })
            .collect();
        QuorumStatus {
            node_id: self.node_id,
            leader: m.current_leader.map(|l| l as i32),
            term: m.current_term,
            last_log_index: m.last_log_index,
            applied_index: m.last_applied.map(|l| l.index),
            voters,
        }
    }
}

// Cursor is named by declare_raft_types!'s default SnapshotData.
const _: Option<Cursor<Vec<u8>>> = None;
