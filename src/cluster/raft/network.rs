//! The metadata quorum's peer messages over TCP (openraft's `RaftNetwork`), on the controller
//! listener.
//!
//! # Wire format
//! ```text
//! request:  u32 length | JSON {"cluster": cluster id, "to": node id, "rpc": Append | Vote | Snapshot | Observe | PreVote}
//! response: u32 length | JSON of the handler's Result
//! ```
//! `Observe` is how a broker that is not a voter (`process.roles=broker`) follows the metadata:
//! it names the metadata offset it has, and the active controller answers once its image is
//! past it (or after the request's wait) with the whole image as metadata records, the way a
//! snapshot carries it; any other voter answers at once with the leader it knows, so a broker
//! never takes a lagging voter's image for the cluster's. Every answer lists the voters and
//! their addresses, and an `Observe` may be addressed to [`ANY_VOTER`]: that is how a broker
//! that knows only `controller.quorum.bootstrap.servers` learns the voters.
//! One request at a time per connection; a client keeps its connection and reconnects after an
//! error. The same listener serves Kafka-protocol clients (brokers registering and
//! heartbeating, `kafka-metadata-quorum`): a connection whose first frame does not start with
//! `{` is a Kafka one (a Kafka request starts with its 16-bit api key, whose first byte is 0),
//! and its frames, at most [`MAX_CLIENT_FRAME`] bytes, go to the [`ClientFrames`] handler. A length above [`MAX_FRAME`] closes the connection before anything is allocated for
//! it, as does a request addressed to another node id (a voter moved to another address must
//! not be answered by whatever now listens there) or to another cluster id (a node formatted
//! for another cluster must not join this one), or one that does not parse: nothing a peer
//! sends can crash the node or make it allocate without bound.

use std::time::Duration;

use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::{BasicNode, Raft};
use serde::de::DeserializeOwned;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::watch;

use super::prevote::{self, Contact, PreVoteRequest, PreVoteResponse};
use super::TypeConfig;
use crate::cluster::image::MetadataImage;
use crate::cluster::quorum::ClientFramesSlot;
use crate::cluster::records;

/// The largest message accepted from a peer (snapshots are sent in chunks well below it).
pub const MAX_FRAME: usize = 64 << 20;
/// The largest Kafka request accepted on the controller listener (registrations, heartbeats
/// and quorum descriptions are a few hundred bytes).
pub const MAX_CLIENT_FRAME: usize = 1 << 20;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

#[derive(serde::Serialize, serde::Deserialize)]
enum Rpc {
    Append(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<u64>),
    Snapshot(InstallSnapshotRequest<TypeConfig>),
    Observe(ObserveRequest),
    PreVote(PreVoteRequest),
}

/// A broker's request for the metadata image past `after` (see the module docs).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ObserveRequest {
    /// The metadata offset the broker's image has (-1: none).
    pub after: i64,
    /// How long the active controller may wait for a newer image, at most [`MAX_OBSERVE_WAIT`].
    pub wait_ms: u64,
}

/// The `to` of an [`ObserveRequest`] sent to a bootstrap server, whose node id the broker does
/// not know yet: any voter answers it.
pub const ANY_VOTER: u64 = u64::MAX;

/// The answer to an [`ObserveRequest`].
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ObserveResponse {
    /// The active controller as the voter asked knows it.
    pub leader: Option<u64>,
    /// The voters and the addresses of their controller listeners.
    #[serde(default)]
    pub voters: BTreeMap<u64, String>,
    /// The image's metadata offset; -1 when this voter is not the active controller.
    pub offset: i64,
    /// The image as encoded metadata records, when `offset` is past the request's `after`.
    pub records: Option<Vec<Vec<u8>>>,
}

/// The longest an [`ObserveRequest`] is held.
pub const MAX_OBSERVE_WAIT: Duration = Duration::from_secs(5);

#[derive(serde::Serialize, serde::Deserialize)]
struct Envelope {
    cluster: String,
    to: u64,
    rpc: Rpc,
}

async fn read_frame(conn: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let len = conn.read_u32().await? as usize;
    read_body(conn, len, MAX_FRAME, None).await
}

/// Reads a frame's `len` bytes, of which `first` was read already; refuses frames over `max`
/// before allocating for them.
async fn read_body(conn: &mut TcpStream, len: usize, max: usize, first: Option<u8>) -> std::io::Result<Vec<u8>> {
    if len > max {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("frame of {len} bytes is over {max}")));
    }
    let mut buf = vec![0u8; len];
    let start = match first {
        Some(b) if len > 0 => {
            buf[0] = b;
            1
        }
        _ => 0,
    };
    conn.read_exact(&mut buf[start..]).await?;
    Ok(buf)
}

async fn write_frame(conn: &mut TcpStream, bytes: &[u8]) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(bytes.len() + 4);
    buf.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    buf.extend_from_slice(bytes);
    conn.write_all(&buf).await
}

/// Serves peers' requests to `voter` on `listener` until the task is dropped. Connection tasks
/// live in a `JoinSet` owned by this task, so dropping it closes every connection too: a
/// stopped voter must not keep answering on connections its peers still hold.
pub async fn serve(voter: Voter, cluster_id: String, listener: TcpListener, clients: ClientFramesSlot, image: watch::Receiver<Arc<MetadataImage>>) {
    let voter = Arc::new(voter);
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let (conn, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a metadata quorum connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            Some(_) = connections.join_next() => continue,
        };
        let (voter, cluster_id, clients, image) = (voter.clone(), cluster_id.clone(), clients.clone(), image.clone());
        connections.spawn(async move {
            if let Err(e) = serve_connection(&voter, &cluster_id, conn, peer, clients, image).await {
                if e.kind() == std::io::ErrorKind::PermissionDenied {
                    tracing::warn!(%peer, error = %e, "refused a metadata quorum peer");
                } else if e.kind() != std::io::ErrorKind::UnexpectedEof {
                    tracing::debug!(%peer, error = %e, "metadata quorum connection closed");
                }
            }
        });
    }
}

/// This voter, as its peer server sees it.
pub struct Voter {
    pub node_id: u64,
    pub raft: Raft<TypeConfig>,
    /// Updated as leaders' appends and candidates' votes are accepted.
    pub contact: Contact,
    /// openraft's leader lease, for [`prevote::grants`].
    pub lease: Duration,
}

async fn serve_connection(
    voter: &Voter,
    cluster_id: &str,
    mut conn: TcpStream,
    peer: std::net::SocketAddr,
    clients: ClientFramesSlot,
    mut image: watch::Receiver<Arc<MetadataImage>>,
) -> std::io::Result<()> {
    conn.set_nodelay(true)?;
    let len = conn.read_u32().await? as usize;
    let first = if len > 0 { Some(conn.read_u8().await?) } else { None };
    if first != Some(b'{') {
        return serve_client(conn, peer, len, first, clients).await;
    }
    let mut pending = Some(read_body(&mut conn, len, MAX_FRAME, first).await?);
    loop {
        let bytes = match pending.take() {
            Some(b) => b,
            None => read_frame(&mut conn).await?,
        };
        let envelope: Envelope =
            serde_json::from_slice(&bytes).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
        if envelope.cluster != cluster_id {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!("a node of cluster {} called this node of cluster {cluster_id}", envelope.cluster),
            ));
        }
        let observer_bootstrap = envelope.to == ANY_VOTER && matches!(envelope.rpc, Rpc::Observe(_));
        let (node_id, raft) = (voter.node_id, &voter.raft);
        if envelope.to != node_id && !observer_bootstrap {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("request for node {} reached node {node_id}", envelope.to),
            ));
        }
        let reply = match envelope.rpc {
            Rpc::Append(r) => {
                let result = raft.append_entries(r).await;
                if matches!(&result, Ok(r) if !matches!(r, AppendEntriesResponse::HigherVote(_))) {
                    voter.contact.heard_leader();
                }
                serde_json::to_vec(&result)
            }
            Rpc::Vote(r) => {
                let result = raft.vote(r).await;
                if matches!(&result, Ok(r) if r.vote_granted) {
                    voter.contact.granted_vote();
                }
                serde_json::to_vec(&result)
            }
            Rpc::Snapshot(r) => {
                let from = r.vote;
                let result = raft.install_snapshot(r).await;
                if matches!(&result, Ok(r) if r.vote == from) {
                    voter.contact.heard_leader();
                }
                serde_json::to_vec(&result)
            }
            Rpc::Observe(r) => serde_json::to_vec(&observe(node_id, raft, &mut image, &r).await),
            Rpc::PreVote(r) => serde_json::to_vec(&pre_vote(voter, &r)),
        }
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
        write_frame(&mut conn, &reply).await?;
    }
}

/// Answers a broker's [`ObserveRequest`]: on the active controller, the image once it is past
/// `after` (or as it is when the wait ends); elsewhere only the leader this voter knows.
async fn observe(node_id: u64, raft: &Raft<TypeConfig>, image: &mut watch::Receiver<Arc<MetadataImage>>, r: &ObserveRequest) -> ObserveResponse {
    let (leader, voters) = {
        let m = raft.metrics();
        let m = m.borrow();
        let voters = m.membership_config.membership().nodes().map(|(id, n)| (*id, n.addr.clone())).collect();
        (m.current_leader, voters)
    };
    if leader != Some(node_id) {
        return ObserveResponse { leader, voters, offset: -1, records: None };
    }
    let wait = Duration::from_millis(r.wait_ms).min(MAX_OBSERVE_WAIT);
    let _ = tokio::time::timeout(wait, image.wait_for(|i| i.offset > r.after)).await;
    let current = image.borrow().clone();
    let encoded = (current.offset > r.after).then(|| current.to_records().iter().map(records::encode).collect());
    ObserveResponse { leader: raft.metrics().borrow().current_leader, voters, offset: current.offset, records: encoded }
}

/// Answers a candidate's pre-vote (see [`prevote`]).
fn pre_vote(voter: &Voter, req: &PreVoteRequest) -> PreVoteResponse {
    let (leading_acked, last_log_id) = {
        let m = voter.raft.metrics().borrow().clone();
        let d = voter.raft.data_metrics().borrow().clone();
        let leading = m.current_leader == Some(voter.node_id);
        (leading.then(|| d.millis_since_quorum_ack.map(Duration::from_millis)), d.last_log)
    };
    let local = prevote::Local { since_leader: voter.contact.since_leader(), leading_acked, last_log_id };
    let granted = prevote::grants(&local, req, voter.lease);
    tracing::debug!(candidate = req.candidate, granted, "pre-vote");
    PreVoteResponse { granted }
}

/// Serves a Kafka-protocol connection: one request at a time, answered in order.
async fn serve_client(
    mut conn: TcpStream,
    peer: std::net::SocketAddr,
    mut len: usize,
    mut first: Option<u8>,
    clients: ClientFramesSlot,
) -> std::io::Result<()> {
    let closed = |why: String| std::io::Error::new(std::io::ErrorKind::InvalidData, why);
    let Some(handler) = clients.get().cloned() else {
        return Err(closed("the controller's Kafka API is not ready yet".into()));
    };
    loop {
        let request = read_body(&mut conn, len, MAX_CLIENT_FRAME, first).await?;
        let response = handler.answer(bytes::Bytes::from(request), peer).await.map_err(closed)?;
        conn.write_all(&response).await?;
        len = conn.read_u32().await? as usize;
        first = None;
    }
}

/// When each peer last answered an append (replication or heartbeat), for DescribeQuorum's
/// fetch timestamps.
pub type LastAcks = std::sync::Arc<parking_lot::Mutex<std::collections::BTreeMap<u64, std::time::Instant>>>;

/// Makes a [`PeerClient`] per voter.
pub struct Network {
    pub cluster_id: String,
    pub acks: LastAcks,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = PeerClient;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> PeerClient {
        PeerClient { cluster_id: self.cluster_id.clone(), target, addr: node.addr.clone(), conn: None, acks: self.acks.clone() }
    }
}

/// Sends requests to one voter over one connection, made when first needed.
pub struct PeerClient {
    cluster_id: String,
    target: u64,
    addr: String,
    conn: Option<TcpStream>,
    acks: LastAcks,
}

impl PeerClient {
    /// A client for voter `target` at `addr` outside openraft's replication: a broker
    /// observing the metadata (see [`ObserveRequest`]), a candidate asking for pre-votes.
    pub fn observer(cluster_id: &str, target: u64, addr: &str) -> PeerClient {
        PeerClient { cluster_id: cluster_id.to_string(), target, addr: addr.to_string(), conn: None, acks: LastAcks::default() }
    }

    /// The voter's address.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Asks the voter for its pre-vote (see [`prevote`]); no answer within `ttl` is an error.
    pub async fn pre_vote(&mut self, req: PreVoteRequest, ttl: Duration) -> std::io::Result<PreVoteResponse> {
        self.call(Rpc::PreVote(req), ttl).await
    }

    /// Asks the voter for the image past `req.after`. A voter that has not answered 2 s after
    /// the wait it was given is taken as gone (paused or cut off): the observer then stops
    /// naming it the leader, so that the broker's controller calls move on well within a broker
    /// session.
    pub async fn observe(&mut self, req: ObserveRequest) -> std::io::Result<ObserveResponse> {
        let ttl = Duration::from_millis(req.wait_ms).min(MAX_OBSERVE_WAIT) + Duration::from_secs(2);
        self.call(Rpc::Observe(req), ttl).await
    }

    async fn call<T: DeserializeOwned>(&mut self, rpc: Rpc, ttl: Duration) -> Result<T, std::io::Error> {
        let request = serde_json::to_vec(&Envelope { cluster: self.cluster_id.clone(), to: self.target, rpc })
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
        let result = tokio::time::timeout(ttl, async {
            if self.conn.is_none() {
                let conn = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&self.addr))
                    .await
                    .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))??;
                conn.set_nodelay(true)?;
                self.conn = Some(conn);
            }
            let conn = self.conn.as_mut().expect("connected above");
            write_frame(conn, &request).await?;
            let reply = read_frame(conn).await?;
            serde_json::from_slice::<T>(&reply).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
        })
        .await
        .unwrap_or_else(|_| Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "no reply in time")));
        if result.is_err() {
            // The reply may still come; a fresh connection never mixes it up with the next one.
            self.conn = None;
        }
        result
    }
}

fn rpc_error<E: std::error::Error>(target: u64, e: std::io::Error) -> RPCError<u64, BasicNode, E> {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::TimedOut => {
            tracing::trace!(target, error = %e, "metadata quorum peer unreachable");
            RPCError::Unreachable(Unreachable::new(&e))
        }
        _ => RPCError::Network(NetworkError::new(&e)),
    }
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        let r: Result<AppendEntriesResponse<u64>, RaftError<u64>> =
            self.call(Rpc::Append(rpc), option.hard_ttl()).await.map_err(|e| rpc_error(self.target, e))?;
        if r.is_ok() {
            self.acks.lock().insert(self.target, std::time::Instant::now());
        }
        r.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<u64>, RPCError<u64, BasicNode, RaftError<u64, InstallSnapshotError>>> {
        let r: Result<InstallSnapshotResponse<u64>, RaftError<u64, InstallSnapshotError>> =
            self.call(Rpc::Snapshot(rpc), option.hard_ttl()).await.map_err(|e| rpc_error(self.target, e))?;
        r.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        let r: Result<VoteResponse<u64>, RaftError<u64>> =
            self.call(Rpc::Vote(rpc), option.hard_ttl()).await.map_err(|e| rpc_error(self.target, e))?;
        r.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}
