//! The cluster as a broker sees it: the metadata image (who is alive, which topics and
//! partitions exist, who leads each in which epoch), the active controller, and a Kafka-protocol
//! client for the requests a broker sends the controller (its registration and heartbeats, the
//! admin requests it forwards).
//!
//! A broker in a cluster answers every question about topics, partitions and brokers from
//! [`ClusterView::image`], never from its local files: the files hold data, the image says what
//! exists and who serves it.
//!
//! # Failure behaviour
//! A controller call that cannot connect, times out or is answered NOT_CONTROLLER is retried
//! against the leader the quorum names next, until [`CALL_TIMEOUT`]; then it fails with a
//! message the caller turns into a retriable error for its client (REQUEST_TIMED_OUT). A call
//! in flight is abandoned as soon as the quorum names another leader, and sent there: a
//! controller that was paused or cut off never answers, and a broker heartbeat waiting on it
//! would outlast the session the new controller counts from its election. (Abandoned writes
//! are retried as Kafka's forwarding does: one the old controller committed before it lost
//! the lead is answered as already done, e.g. TOPIC_ALREADY_EXISTS.)
//! Responses larger than [`MAX_RESPONSE`] are refused before they are read.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::Request;
use tokio::sync::watch;

use super::image::{MetadataImage, PartitionState};

/// How long a controller call keeps trying.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest controller response read.
pub const MAX_RESPONSE: usize = 16 << 20;
const NOT_CONTROLLER: i16 = 41;

/// The cluster from one broker.
pub struct ClusterView {
    pub node_id: i32,
    image: watch::Receiver<Arc<MetadataImage>>,
    /// The quorum leader this node knows of (the active controller).
    leader: Box<dyn Fn() -> Option<i32> + Send + Sync>,
    /// Controller id -> `host:port` of its controller listener.
    voters: Box<dyn Fn(i32) -> Option<String> + Send + Sync>,
    /// The listener clients use (`PLAINTEXT`), whose endpoints Metadata lists.
    pub client_listener: String,
    /// Set once the controller has unfenced this broker: its image has caught up with the
    /// metadata log at least to its registration.
    caught_up: watch::Sender<bool>,
    /// Set once the local logs have followed an image taken after `caught_up` was.
    synced: watch::Sender<bool>,
    /// The offset of the last image the local logs were brought in line with.
    synced_offset: watch::Sender<i64>,
    /// This broker's epoch from its registration; -1 while not registered.
    broker_epoch: std::sync::atomic::AtomicI64,
    /// The producer ids this broker may hand out: `next..end` of the block the controller
    /// allocated it last. Held across the controller call so one block is asked for at a time.
    producer_ids: tokio::sync::Mutex<(i64, i64)>,
}

impl ClusterView {
    pub fn new(
        node_id: i32,
        image: watch::Receiver<Arc<MetadataImage>>,
        leader: Box<dyn Fn() -> Option<i32> + Send + Sync>,
        voters: Box<dyn Fn(i32) -> Option<String> + Send + Sync>,
        client_listener: String,
    ) -> ClusterView {
        ClusterView {
            node_id,
            image,
            leader,
            voters,
            client_listener,
            caught_up: watch::Sender::new(false),
            synced: watch::Sender::new(false),
            synced_offset: watch::Sender::new(-1),
            broker_epoch: std::sync::atomic::AtomicI64::new(-1),
            producer_ids: tokio::sync::Mutex::new((0, 0)),
        }
    }

    pub fn broker_epoch(&self) -> i64 {
        self.broker_epoch.load(std::sync::atomic::Ordering::Acquire)
    }

    pub fn set_broker_epoch(&self, epoch: i64) {
        self.broker_epoch.store(epoch, std::sync::atomic::Ordering::Release);
    }

    /// A producer id no other broker of the cluster hands out: from this broker's current block,
    /// or from a new block the active controller allocates (AllocateProducerIds, recorded in the
    /// metadata log, so ids are unique across brokers and restarts).
    pub async fn allocate_producer_id(&self) -> Result<i64, String> {
        let mut block = self.producer_ids.lock().await;
        if block.0 >= block.1 {
            let epoch = self.broker_epoch();
            if epoch < 0 {
                return Err("this broker is not registered with the controller yet".into());
            }
            let req = kafka_protocol::messages::AllocateProducerIdsRequest::default()
                .with_broker_id(kafka_protocol::messages::BrokerId(self.node_id))
                .with_broker_epoch(epoch);
            let resp = self.call_controller(&req, 0).await?;
            if resp.error_code != 0 || resp.producer_id_len <= 0 || resp.producer_id_start.0 < 0 {
                return Err(format!("the controller refused a producer id block (error code {})", resp.error_code));
            }
            *block = (resp.producer_id_start.0, resp.producer_id_start.0 + resp.producer_id_len as i64);
        }
        let id = block.0;
        block.0 += 1;
        Ok(id)
    }

    pub fn is_caught_up(&self) -> bool {
        *self.caught_up.borrow()
    }

    pub fn mark_caught_up(&self) {
        self.caught_up.send_replace(true);
    }

    /// Returns once [`ClusterView::mark_caught_up`] was called.
    pub async fn wait_caught_up(&self) {
        let mut rx = self.caught_up.subscribe();
        let _ = rx.wait_for(|c| *c).await;
    }

    /// The local logs follow the image at `offset` (`broker::cluster::run`); `caught_up`: an
    /// image taken once caught up.
    pub fn mark_synced(&self, offset: i64, caught_up: bool) {
        self.synced_offset.send_replace(offset);
        if caught_up {
            self.synced.send_replace(true);
        }
    }

    /// Returns once the local logs follow the image as it is now, or after `timeout`: what an
    /// admin request forwarded to the controller waits for, so that what it changed is what
    /// this broker serves and describes next (the active controller beside this broker applied
    /// the change to the image before answering).
    async fn wait_synced_to_current(&self, timeout: Duration) {
        let offset = self.image().offset;
        let mut rx = self.synced_offset.subscribe();
        let _ = tokio::time::timeout(timeout, rx.wait_for(|o| *o >= offset)).await;
    }

    /// Returns once [`ClusterView::mark_synced`] was called.
    pub async fn wait_synced(&self) {
        let mut rx = self.synced.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }

    pub fn image(&self) -> Arc<MetadataImage> {
        self.image.borrow().clone()
    }

    pub fn subscribe(&self) -> watch::Receiver<Arc<MetadataImage>> {
        self.image.clone()
    }

    /// The active controller's id, -1 when none is known.
    pub fn controller_id(&self) -> i32 {
        (self.leader)().unwrap_or(-1)
    }

    /// A partition's state in the image.
    pub fn partition(&self, topic: &str, index: i32) -> Option<PartitionState> {
        let image = self.image.borrow();
        let id = image.topic_ids.get(topic)?;
        image.topics.get(id)?.partitions.get(&index).cloned()
    }

    /// Unfenced brokers' endpoints on `listener`: (id, host, port, rack). As in Kafka, a broker
    /// without that listener is left out; a name no broker registered (a request that did not
    /// come through a listener) gets the client listener's endpoints.
    pub fn live_brokers(&self, listener: &str) -> Vec<(i32, String, u16, Option<String>)> {
        let image = self.image.borrow();
        let registered = image.brokers.values().any(|b| b.endpoints.iter().any(|e| e.name == listener));
        let name = if registered { listener } else { self.client_listener.as_str() };
        image
            .brokers
            .values()
            .filter(|b| !b.fenced)
            .filter_map(|b| {
                let e = b.endpoints.iter().find(|e| e.name == name).or_else(|| (!registered).then(|| b.endpoints.first()).flatten())?;
                Some((b.id, e.host.clone(), e.port, b.rack.clone()))
            })
            .collect()
    }

    /// Sends `req` to the active controller and returns its response, retrying on another
    /// controller while the one asked is not (or no longer) the active one.
    pub async fn call_controller<R: Request>(&self, req: &R, version: i16) -> Result<R::Response, String>
    where
        R::Response: 'static,
    {
        let deadline = tokio::time::Instant::now() + CALL_TIMEOUT;
        let mut last = String::from("no active controller is known");
        // Short at first: a quorum that is electing knows its leader within milliseconds.
        let mut pause = Duration::from_millis(5);
        loop {
            if let Some(leader) = (self.leader)() {
                match (self.voters)(leader) {
                    Some(addr) => match tokio::select! {
                        answer = tokio::time::timeout_at(deadline, call(&addr, req, version)) => answer,
                        () = self.leader_moves_from(leader) => {
                            // A paused or cut-off controller may never answer: the new one is asked
                            // now, within the broker session the new one counts from its election.
                            last = format!("controller {leader} at {addr} stopped leading the quorum before it answered");
                            continue;
                        }
                    } {
                        Ok(Ok((resp, code))) if code != Some(NOT_CONTROLLER) => {
                            if ADMIN_WRITES.contains(&R::KEY) {
                                self.wait_synced_to_current(SYNC_WAIT).await;
                            }
                            return Ok(resp);
                        }
                        Ok(Ok(_)) => last = format!("controller {leader} is not the active controller"),
                        Ok(Err(e)) => last = format!("controller {leader} at {addr}: {e}"),
                        Err(_) => last = format!("controller {leader} at {addr} did not answer in time"),
                    },
                    None => last = format!("the active controller {leader} is not in controller.quorum.voters"),
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(last);
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(100));
        }
    }

    /// Returns once the quorum names a leader other than `leader` (or none), checked every
    /// [`LEADER_CHECK`].
    async fn leader_moves_from(&self, leader: i32) {
        loop {
            tokio::time::sleep(LEADER_CHECK).await;
            if (self.leader)() != Some(leader) {
                return;
            }
        }
    }
}

/// How often a controller call in flight checks that its controller still leads the quorum.
const LEADER_CHECK: Duration = Duration::from_millis(50);

/// Forwarded admin requests after which the broker waits to serve their outcome: CreateTopics,
/// DeleteTopics, AlterConfigs, CreatePartitions, ElectLeaders, IncrementalAlterConfigs.
const ADMIN_WRITES: &[i16] = &[19, 20, 33, 37, 43, 44];
/// How long at most.
const SYNC_WAIT: Duration = Duration::from_secs(5);

/// One request over a fresh connection; the response and its error code where it has one.
async fn call<R: Request>(addr: &str, req: &R, version: i16) -> std::io::Result<(R::Response, Option<i16>)>
where
    R::Response: 'static,
{
    let mut conn = crate::network::client::Connection::connect(addr, "sluice-broker", MAX_RESPONSE).await?;
    let resp = conn.send(req, version).await?;
    // Registration and heartbeat answers carry NOT_CONTROLLER at the top level; peek at it.
    let code = top_level_error(R::KEY, &resp);
    Ok((resp, code))
}

fn top_level_error<T: std::any::Any>(key: i16, resp: &T) -> Option<i16> {
    use kafka_protocol::messages::{BrokerHeartbeatResponse, BrokerRegistrationResponse, CreateTopicsResponse};
    let any = resp as &dyn std::any::Any;
    if key == ApiKey::BrokerRegistration as i16 {
        return any.downcast_ref::<BrokerRegistrationResponse>().map(|r| r.error_code);
    }
    if key == ApiKey::BrokerHeartbeat as i16 {
        return any.downcast_ref::<BrokerHeartbeatResponse>().map(|r| r.error_code);
    }
    if key == ApiKey::CreateTopics as i16 {
        return any.downcast_ref::<CreateTopicsResponse>().and_then(|r| r.topics.iter().map(|t| t.error_code).find(|c| *c == NOT_CONTROLLER));
    }
    if key == ApiKey::IncrementalAlterConfigs as i16 {
        return any
            .downcast_ref::<kafka_protocol::messages::IncrementalAlterConfigsResponse>()
            .and_then(|r| r.responses.iter().map(|t| t.error_code).find(|c| *c == NOT_CONTROLLER));
    }
    if key == ApiKey::ElectLeaders as i16 {
        return any.downcast_ref::<kafka_protocol::messages::ElectLeadersResponse>().map(|r| r.error_code);
    }
    if key == ApiKey::AlterPartition as i16 {
        return any.downcast_ref::<kafka_protocol::messages::AlterPartitionResponse>().map(|r| r.error_code);
    }
    if key == ApiKey::AllocateProducerIds as i16 {
        return any.downcast_ref::<kafka_protocol::messages::AllocateProducerIdsResponse>().map(|r| r.error_code);
    }
    if key == ApiKey::CreatePartitions as i16 {
        return any
            .downcast_ref::<kafka_protocol::messages::CreatePartitionsResponse>()
            .and_then(|r| r.results.iter().map(|t| t.error_code).find(|c| *c == NOT_CONTROLLER));
    }
    if key == ApiKey::DeleteTopics as i16 {
        return any
            .downcast_ref::<kafka_protocol::messages::DeleteTopicsResponse>()
            .and_then(|r| r.responses.iter().map(|t| t.error_code).find(|c| *c == NOT_CONTROLLER));
    }
    None
}
