//! A dedicated controller process (`process.roles=controller`): one voter of the metadata
//! quorum, serving no clients' data. A thin driver around [`RaftQuorum`]: it binds the
//! controller listener, starts the voter with its files in `<metadata.log.dir>/__sluice_metadata`,
//! logs leadership changes, and, as the active controller of an empty log, writes the bootstrap
//! records (the `metadata.version` feature level, its own controller registration).
//!
//! # Failure behaviour
//! A voter that cannot reach a majority keeps retrying; it logs a warning every
//! [`NO_LEADER_WARNING`] while it knows no leader and reports itself unhealthy on `/healthz`
//! (503 with its status), so nothing reads its image as current. kill -9 at any point loses
//! nothing that was committed: the log and vote are fsynced before they count.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use uuid::Uuid;

use super::quorum::{MetadataQuorum, QuorumError};
use super::raft::{QuorumConfig, RaftQuorum};
use super::records::{Endpoint as RecordEndpoint, MetadataRecord, RegisterController, VersionedRecord};
use crate::config::BrokerConfig;

/// Kafka 4.4's `metadata.version` level, which sluice's record versions (`records.rs`) follow.
pub const METADATA_VERSION: i16 = 33;
/// How often a voter without a leader says so in its log.
pub const NO_LEADER_WARNING: Duration = Duration::from_secs(5);

/// A running dedicated controller.
pub struct ControllerNode {
    quorum: Arc<RaftQuorum>,
    watcher: tokio::task::JoinHandle<()>,
}

impl ControllerNode {
    /// Binds the controller listener and starts the voter; returns once it runs (it may not
    /// know a leader yet).
    pub async fn start(config: &BrokerConfig, cluster_id: &str) -> Result<ControllerNode, QuorumError> {
        let dir = config.metadata_log_dir.join("__sluice_metadata");
        let io = |source| QuorumError::Storage { path: dir.clone(), source };
        // The config check guarantees a controller listener on this node's voter port.
        let endpoint = config
            .listeners
            .iter()
            .find(|l| config.controller_listener_names.contains(&l.name))
            .ok_or_else(|| QuorumError::Raft("no listener is named in controller.listener.names".into()))?;
        let host = if endpoint.host.is_empty() { "0.0.0.0" } else { endpoint.host.as_str() };
        let listener = TcpListener::bind((host, endpoint.port)).await.map_err(io)?;
        let local = listener.local_addr().map_err(io)?;
        eprintln!("sluice controller listening on {}://{local}", endpoint.name);
        let quorum = Arc::new(RaftQuorum::start(config.node_id, cluster_id, listener, &config.quorum_voters, &dir, QuorumConfig::default()).await?);
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
        let watcher = tokio::spawn(watch(quorum.clone(), registration));
        Ok(ControllerNode { quorum, watcher })
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
        });
        (s.leader.is_some() && s.applied_index.is_some(), body.to_string())
    }

    pub async fn shutdown(self) {
        self.watcher.abort();
        match Arc::try_unwrap(self.quorum) {
            Ok(q) => q.shutdown().await,
            Err(_) => tracing::warn!("metadata quorum still in use at shutdown"),
        }
    }
}

/// Logs leadership changes; as the leader, writes what an empty log lacks.
async fn watch(quorum: Arc<RaftQuorum>, registration: RegisterController) {
    let mut last_leader = None;
    let mut last_warning = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let status = quorum.status();
        if status.leader != last_leader {
            match status.leader {
                Some(l) => tracing::info!(leader = l, term = status.term, "metadata quorum leader elected"),
                None => tracing::warn!(term = status.term, "metadata quorum has no leader; retrying"),
            }
            last_leader = status.leader;
            last_warning = tokio::time::Instant::now();
        } else if status.leader.is_none() && last_warning.elapsed() >= NO_LEADER_WARNING {
            tracing::warn!(term = status.term, voters = ?status.voters.iter().map(|v| v.id).collect::<Vec<_>>(), "metadata quorum still has no leader; retrying");
            last_warning = tokio::time::Instant::now();
        }
        if status.leader != Some(status.node_id) {
            continue;
        }
        let missing = |image: &super::image::MetadataImage| {
            let mut out = Vec::new();
            if !image.features.contains_key("metadata.version") {
                out.push(VersionedRecord {
                    version: 0,
                    record: MetadataRecord::FeatureLevel { name: "metadata.version".into(), feature_level: METADATA_VERSION },
                });
            }
            if !image.controllers.contains_key(&registration.controller_id) {
                out.push(VersionedRecord { version: 0, record: MetadataRecord::RegisterController(registration.clone()) });
            }
            out
        };
        if missing(&quorum.image().borrow()).is_empty() {
            continue;
        }
        // A leader fresh from a restart may not have applied the committed log yet: look again
        // once it has.
        if quorum.leader_caught_up().await.is_err() {
            continue;
        }
        let bootstrap = missing(&quorum.image().borrow());
        if !bootstrap.is_empty() {
            if let Err(e) = quorum.propose(bootstrap).await {
                tracing::warn!(error = %e, "writing the metadata bootstrap records failed; retrying");
            }
        }
    }
}
