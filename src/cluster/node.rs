//! A voter of the metadata quorum with its controller listener: a dedicated controller process
//! (`process.roles=controller`, serving no clients' data), or the controller half of a combined
//! node of a cluster (`main.rs` runs the broker beside it). A thin driver around [`RaftQuorum`]: it binds the
//! controller listener, starts the voter with its files in `<metadata.log.dir>/__sluice_metadata`,
//! runs the [`ActiveController`] (registrations, heartbeats, session expiry, the bootstrap
//! records of an empty log) and serves the controller's Kafka API ([`ControllerApi`]) on the same
//! listener as the quorum's peer messages.
//!
//! # Failure behaviour
//! A voter that cannot reach a majority keeps retrying; it logs a warning every
//! [`NO_LEADER_WARNING`] while it knows no leader and reports itself unhealthy on `/healthz`
//! (503 with its status), so nothing reads its image as current. kill -9 at any point loses
//! nothing that was committed: the log and vote are fsynced before they count.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::net::TcpListener;
use uuid::Uuid;

pub use super::driver::{METADATA_VERSION, NO_LEADER_WARNING};
use super::driver::ActiveController;
use super::kafka_api::{ControllerApi, VoterEndpoint};
use super::quorum::{MetadataQuorum, QuorumError};
use super::raft::{QuorumConfig, RaftQuorum};
use super::records::{Endpoint as RecordEndpoint, RegisterController, VersionedRecord};
use crate::config::BrokerConfig;

/// A running voter with its controller listener.
pub struct ControllerNode {
    quorum: Arc<RaftQuorum>,
    watcher: tokio::task::JoinHandle<()>,
    /// The voters' controller endpoints (`host:port`), this node's as bound.
    voters: BTreeMap<i32, String>,
}

/// The name of a single node's own controller listener (loopback, an ephemeral port).
pub const LOCAL_CONTROLLER_LISTENER: &str = "CONTROLLER";

impl ControllerNode {
    /// Binds the controller listener and starts the voter; returns once it runs (it may not
    /// know a leader yet). `imported` is what the log dirs held before the metadata log
    /// existed, written after the bootstrap records if this node writes them.
    pub async fn start(config: &BrokerConfig, cluster_id: &str, imported: Vec<VersionedRecord>) -> Result<ControllerNode, QuorumError> {
        let dir = config.metadata_log_dir.join("__sluice_metadata");
        let io = |source| QuorumError::Storage { path: dir.clone(), source };
        // The config check guarantees a controller listener on this node's voter port, unless
        // no quorum is configured at all: a single node is the one voter of its own quorum, on
        // a loopback port of its choosing that only its broker half uses.
        let endpoint = match config.listeners.iter().find(|l| config.controller_listener_names.contains(&l.name)) {
            Some(e) => e.clone(),
            None if config.quorum_voters.is_empty() => {
                crate::config::Endpoint { name: LOCAL_CONTROLLER_LISTENER.into(), host: "127.0.0.1".into(), port: 0 }
            }
            None => return Err(QuorumError::Raft("no listener is named in controller.listener.names".into())),
        };
        let host = if endpoint.host.is_empty() { "0.0.0.0" } else { endpoint.host.as_str() };
        let listener = TcpListener::bind((host, endpoint.port)).await.map_err(io)?;
        let local = listener.local_addr().map_err(io)?;
        let quorum_voters = if config.quorum_voters.is_empty() {
            tracing::debug!(addr = %local, "a single node: the one voter of its own metadata quorum");
            BTreeMap::from([(config.node_id, local.to_string())])
        } else {
            eprintln!("sluice controller listening on {}://{local}", endpoint.name);
            config.quorum_voters.clone()
        };
        let quorum = Arc::new(RaftQuorum::start(config.node_id, cluster_id, listener, &quorum_voters, &dir, QuorumConfig::default()).await?);
        let registration = RegisterController {
            controller_id: config.node_id,
            incarnation_id: Uuid::new_v4(),
            zk_migration_ready: false,
            endpoints: vec![RecordEndpoint {
                name: endpoint.name.clone(),
                host: endpoint.host.clone(),
                port: local.port(),
                security_protocol: 0,
            }],
            features: Vec::new(),
        };
        let unclean = config.topic_defaults.get("unclean.leader.election.enable").is_some_and(|v| v == "true");
        let mut controller = ActiveController::new(quorum.clone(), registration, config.broker_session_timeout_ms)
            .with_imported(imported)
            .with_unclean_default(unclean)
            .with_min_isr_default(config.topic_defaults.get("min.insync.replicas").and_then(|v| v.trim().parse().ok()).unwrap_or(1));
        if config.auto_leader_rebalance_enable {
            controller = controller.with_leader_rebalance(
                config.leader_imbalance_check_interval_seconds * 1000,
                config.leader_imbalance_per_broker_percentage,
            );
        }
        let controller = Arc::new(controller);
        let voters = quorum_voters
            .iter()
            .filter_map(|(id, addr)| {
                let (host, port) = addr.rsplit_once(':')?;
                Some((*id, VoterEndpoint { host: host.trim_matches(['[', ']']).to_string(), port: port.parse().ok()? }))
            })
            .collect();
        quorum.serve_clients(Arc::new(ControllerApi {
            controller: controller.clone(),
            cluster_id: cluster_id.to_string(),
            listener_name: endpoint.name.clone(),
            voters,
            num_partitions: config.num_partitions,
            default_replication_factor: config.default_replication_factor,
            delete_topic_enable: config.delete_topic_enable,
        }));
        let watcher = tokio::spawn(controller.run());
        Ok(ControllerNode { quorum, watcher, voters: quorum_voters })
    }

    /// The voters' controller endpoints (`host:port`), this node's as bound.
    pub fn voters(&self) -> &BTreeMap<i32, String> {
        &self.voters
    }

    /// The quorum this node is a voter of.
    pub fn quorum(&self) -> &Arc<RaftQuorum> {
        &self.quorum
    }

    /// `/healthz`: healthy while a leader is known and this voter has applied the committed log
    /// at least once since it started (a restarted voter learns what is committed only from the
    /// leader); the body is the status as JSON.
    pub fn health(&self) -> (bool, String) {
        let s = self.quorum.status();
        let image = self.quorum.image().borrow().clone();
        let body = serde_json::json!({
            "node_id": s.node_id,
            "leader": s.leader,
            "term": s.term,
            "applied_index": s.applied_index,
            "voters": s.voters.iter().map(|v| v.id).collect::<Vec<_>>(),
            "metadata_offset": image.offset,
            "features": image.features,
            "controllers": image.controllers.keys().collect::<Vec<_>>(),
            "brokers": image.brokers.values().map(|b| serde_json::json!({
                "id": b.id,
                "epoch": b.epoch,
                "fenced": b.fenced,
                "in_controlled_shutdown": b.in_controlled_shutdown,
            })).collect::<Vec<_>>(),
        });
        (s.leader.is_some() && s.applied_index.is_some(), body.to_string())
    }

    pub async fn shutdown(self) {
        self.watcher.abort();
        self.quorum.shutdown().await;
    }
}
