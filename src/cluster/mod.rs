//! The cluster layer: the metadata every node agrees on — which brokers are alive (with their
//! epochs), which topics exist (with their ids), each partition's replicas, ISR, leader and
//! epochs, configs, feature levels and producer-id blocks — kept as Kafka keeps it, as a log of
//! Kafka's own metadata records.
//!
//! - [`records`]: the metadata record kinds in Kafka's schemas, byte-compatible with the
//!   records in a Kafka KRaft cluster's `__cluster_metadata` log.
//! - [`image`]: the metadata image, the state those records build, replayed record by record
//!   (a pure core: no I/O, no clock).
//! - [`placement`]: where a new partition's replicas go, as Kafka places them.
//! - [`partition_change`]: one partition's next leader, ISR and eligible leader replicas
//!   (Kafka's PartitionChangeBuilder, KIP-966), pure.
//! - [`controller`]: the active controller's decisions (registration, fencing, controlled
//!   shutdown, topic creation, ISR changes, preferred leaders) as records to propose; a pure core.
//! - [`quorum`]: [`quorum::MetadataQuorum`], the replicated metadata log as the rest of sluice
//!   sees it, and [`raft`], that trait on openraft.
//! - [`driver`]: the active controller, proposing [`controller`]'s decisions (registrations,
//!   heartbeats, session expiry, bootstrap records) while this node leads.
//! - [`kafka_api`]: the Kafka protocol on the controller listener (ApiVersions,
//!   DescribeCluster, DescribeQuorum, BrokerRegistration, BrokerHeartbeat, AllocateProducerIds
//!   and the admin requests brokers forward).
//! - [`node`]: a voter with its controller listener: a dedicated controller process
//!   (`process.roles=controller`), or the controller half of a combined node.
//! - [`view`]: the cluster as a broker sees it (the image, the active controller, a client for
//!   requests to it); [`lifecycle`]: a broker's registration, heartbeats and controlled
//!   shutdown; [`observer`]: how a broker-only node (`process.roles=broker`) gets the image
//!   from the active controller.
//!
//! Every broker is a cluster member (`crate::broker::cluster`): it answers from the image and
//! keeps its local logs in line with it. A single node is the one voter of its own quorum; a data
//! dir from before the metadata log has what it holds written into a new log at its first start
//! (`crate::broker::cluster::local_state_records`).
//!
//! # Failure behaviour
//! A record that cannot be decoded, or that does not apply to the image (a partition of an
//! unknown topic, a change to an unknown broker), is an error naming its offset and kind: a node
//! stops rather than skip it, since a skipped record makes its metadata differ from its peers'.

pub mod controller;
pub mod driver;
pub mod image;
pub mod kafka_api;
pub mod lifecycle;
pub mod node;
pub mod observer;
pub mod partition_change;
pub mod placement;
pub mod quorum;
pub mod raft;
pub mod records;
pub mod view;

/// Why metadata could not be read or applied.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// Bytes that do not decode as the kind they claim to be.
    #[error("malformed {kind} at offset {offset}: {reason}")]
    Malformed { offset: i64, kind: &'static str, reason: String },
    /// A record kind or version sluice does not read (yet).
    #[error(
        "metadata record at offset {offset} is {name} (kind {api_key}) version {version}, which sluice does not read; \
         stopping rather than skipping it"
    )]
    UnknownRecord { offset: i64, api_key: u64, version: u64, name: &'static str },
    /// A record that contradicts the image built so far.
    #[error("metadata record at offset {offset} ({kind}) does not apply: {reason}")]
    Inconsistent { offset: i64, kind: &'static str, reason: String },
    /// A metadata log file that could not be read.
    #[error("cannot read metadata log {path}")]
    Read {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
}
