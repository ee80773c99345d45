//! A broker's life in the cluster, as Kafka's `BrokerLifecycleManager` runs it: register with
//! the active controller (a new incarnation id per process start, so the controller tells a
//! restart from a second process with the same `node.id`), then heartbeat every
//! `broker.heartbeat.interval.ms` with the metadata offset this broker has applied. The
//! controller unfences the broker once that offset reaches its registration; a broker that
//! stops heartbeating is fenced by the controller after `broker.session.timeout.ms`.
//!
//! Controlled shutdown ([`BrokerLifecycle::shut_down`]): heartbeats ask to shut down until the
//! controller answers that every leadership has moved away, then the process may stop serving.
//!
//! A clean stop leaves [`CLEAN_SHUTDOWN`] in every log dir with the broker epoch it had; the
//! next start reads and removes it and registers with that epoch as its previous one. Without
//! it (a crash, or a first start) the previous epoch is -1 and the controller takes the broker
//! out of every ISR and eligible-leader-replica set (KIP-966): after an unclean stop its log may
//! lack what it had acknowledged.
//!
//! # Failure behaviour
//! A registration that is refused (DUPLICATE_BROKER_REGISTRATION: another live process has this
//! `node.id`; INCONSISTENT_CLUSTER_ID) or that cannot reach a controller is logged with the
//! reason and retried every heartbeat interval; the broker stays out of Metadata meanwhile. A
//! heartbeat answered STALE_BROKER_EPOCH or BROKER_ID_NOT_REGISTERED registers again. A
//! controlled shutdown that the controller does not confirm within its timeout is logged and
//! the broker stops anyway (its partitions then move when its session expires).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::broker_registration_request::{Feature, Listener};
use kafka_protocol::messages::{BrokerHeartbeatRequest, BrokerRegistrationRequest};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::controller::codes;
use super::driver::METADATA_VERSION;
use super::view::ClusterView;

/// A client listener to register: (name, host, port).
pub type ListenerEndpoint = (String, String, u16);

/// The broker's registration and heartbeats.
pub struct BrokerLifecycle {
    view: Arc<ClusterView>,
    cluster_id: String,
    incarnation: Uuid,
    listeners: Vec<ListenerEndpoint>,
    rack: Option<String>,
    interval: Duration,
    fenced: AtomicBool,
    want_shutdown: AtomicBool,
    /// The epoch of the last clean shutdown, from [`take_clean_shutdown`]; -1 if none.
    previous_epoch: i64,
}

/// The clean-shutdown marker's file name in each log dir (Kafka's is `.kafka_cleanshutdown`,
/// with the same JSON).
pub const CLEAN_SHUTDOWN: &str = ".sluice_clean_shutdown";

#[derive(serde::Serialize, serde::Deserialize)]
struct CleanShutdown {
    version: i32,
    #[serde(rename = "brokerEpoch")]
    broker_epoch: i64,
}

/// Records a clean shutdown in broker epoch `epoch` in every log dir (after their logs are
/// flushed). A dir it cannot be written to is logged: the next start is then taken as after a
/// crash, which costs the broker its place in the eligible leader replicas, nothing else.
pub fn mark_clean_shutdown(log_dirs: &[std::path::PathBuf], epoch: i64) {
    let body = serde_json::to_vec(&CleanShutdown { version: 0, broker_epoch: epoch }).expect("serialises");
    for dir in log_dirs {
        let path = dir.join(CLEAN_SHUTDOWN);
        if let Err(e) = std::fs::write(&path, &body).and_then(|_| std::fs::File::open(&path)?.sync_all()) {
            tracing::warn!(path = %path.display(), error = %e, "could not record the clean shutdown");
        }
    }
}

/// The broker epoch of the last clean shutdown, if every log dir recorded the same one; the
/// markers are removed, so that a crash from now on is not taken for a clean stop. -1 otherwise.
pub fn take_clean_shutdown(log_dirs: &[std::path::PathBuf]) -> i64 {
    let mut epochs = Vec::new();
    for dir in log_dirs {
        let path = dir.join(CLEAN_SHUTDOWN);
        let epoch = std::fs::read(&path).ok().and_then(|b| serde_json::from_slice::<CleanShutdown>(&b).ok()).map(|m| m.broker_epoch);
        if let Err(e) = std::fs::remove_file(&path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(path = %path.display(), error = %e, "could not remove the clean shutdown marker");
                return -1;
            }
        }
        epochs.push(epoch);
    }
    match epochs.first() {
        Some(Some(first)) if epochs.iter().all(|e| *e == Some(*first)) => *first,
        _ => -1,
    }
}

impl BrokerLifecycle {
    pub fn new(
        view: Arc<ClusterView>,
        cluster_id: String,
        listeners: Vec<ListenerEndpoint>,
        rack: Option<String>,
        interval: Duration,
    ) -> BrokerLifecycle {
        BrokerLifecycle {
            view,
            cluster_id,
            incarnation: Uuid::new_v4(),
            listeners,
            rack,
            interval,
            fenced: AtomicBool::new(true),
            want_shutdown: AtomicBool::new(false),
            previous_epoch: -1,
        }
    }

    /// The broker epoch of this broker's last clean shutdown ([`take_clean_shutdown`]).
    pub fn with_previous_epoch(mut self, epoch: i64) -> BrokerLifecycle {
        self.previous_epoch = epoch;
        self
    }

    pub fn epoch(&self) -> i64 {
        self.view.broker_epoch()
    }

    pub fn is_fenced(&self) -> bool {
        self.fenced.load(Ordering::Acquire)
    }

    async fn register(&self) -> Result<i64, String> {
        let req = BrokerRegistrationRequest::default()
            .with_broker_id(self.view.node_id.into())
            .with_cluster_id(StrBytes::from_string(self.cluster_id.clone()))
            .with_incarnation_id(self.incarnation)
            .with_listeners(
                self.listeners
                    .iter()
                    .map(|(name, host, port)| {
                        Listener::default()
                            .with_name(StrBytes::from_string(name.clone()))
                            .with_host(StrBytes::from_string(host.clone()))
                            .with_port(*port)
                    })
                    .collect(),
            )
            .with_features(vec![Feature::default()
                .with_name(StrBytes::from_static_str("metadata.version"))
                .with_min_supported_version(METADATA_VERSION)
                .with_max_supported_version(METADATA_VERSION)])
            .with_rack(self.rack.clone().map(StrBytes::from_string))
            .with_previous_broker_epoch(self.previous_epoch);
        let resp = self.view.call_controller(&req, 4).await?;
        match resp.error_code {
            0 => Ok(resp.broker_epoch),
            codes::DUPLICATE_BROKER_REGISTRATION => Err(format!(
                "the controller refused this broker's registration: another live broker is registered with node.id={} \
                 (DUPLICATE_BROKER_REGISTRATION); retrying",
                self.view.node_id
            )),
            codes::INCONSISTENT_CLUSTER_ID => Err(format!(
                "the controller refused this broker's registration: its cluster id differs from this broker's {} \
                 (INCONSISTENT_CLUSTER_ID)",
                self.cluster_id
            )),
            code => Err(format!("the controller refused this broker's registration with error code {code}")),
        }
    }

    /// One heartbeat; returns whether the controller says the broker may shut down.
    async fn heartbeat(&self) -> Result<bool, String> {
        let epoch = self.epoch();
        let req = BrokerHeartbeatRequest::default()
            .with_broker_id(self.view.node_id.into())
            .with_broker_epoch(epoch)
            .with_current_metadata_offset(self.view.image().offset)
            .with_want_shut_down(self.want_shutdown.load(Ordering::Acquire));
        let resp = self.view.call_controller(&req, 1).await?;
        match resp.error_code {
            0 => {
                let was = self.fenced.swap(resp.is_fenced, Ordering::AcqRel);
                if was != resp.is_fenced {
                    if resp.is_fenced {
                        tracing::warn!(epoch, "this broker is fenced by the controller");
                    } else {
                        tracing::info!(epoch, "this broker is unfenced: it serves the partitions it leads");
                        self.view.mark_caught_up();
                    }
                }
                Ok(resp.should_shut_down)
            }
            codes::STALE_BROKER_EPOCH | codes::BROKER_ID_NOT_REGISTERED => {
                tracing::warn!(epoch, code = resp.error_code, "the controller no longer knows this broker's epoch; registering again");
                self.view.set_broker_epoch(-1);
                self.fenced.store(true, Ordering::Release);
                Ok(false)
            }
            code => Err(format!("heartbeat answered with error code {code}")),
        }
    }

    /// Registers, then heartbeats, until the task is dropped.
    pub async fn run(self: Arc<Self>) {
        let mut last_error = String::new();
        loop {
            let registering = self.epoch() < 0;
            let outcome = if registering {
                self.register().await.map(|epoch| {
                    tracing::info!(epoch, incarnation = %self.incarnation, "registered with the active controller");
                    self.view.set_broker_epoch(epoch);
                })
            } else {
                self.heartbeat().await.map(drop)
            };
            // The first heartbeat follows a registration at once: it is what unfences.
            if registering && outcome.is_ok() {
                continue;
            }
            match outcome {
                Ok(()) => last_error.clear(),
                Err(e) if e != last_error => {
                    tracing::warn!(error = %e, "broker registration or heartbeat failed");
                    last_error = e;
                }
                Err(_) => {}
            }
            // Heartbeat at once while fenced and caught up on a registration, as Kafka's
            // broker does, so unfencing takes one round trip rather than an interval.
            let pause = if self.epoch() >= 0 && self.is_fenced() { self.interval.min(Duration::from_millis(200)) } else { self.interval };
            tokio::time::sleep(pause).await;
        }
    }

    /// Controlled shutdown: asks the controller to move this broker's leaderships away and
    /// returns once it confirms, or after `timeout`.
    pub async fn shut_down(&self, timeout: Duration) {
        if self.epoch() < 0 {
            return;
        }
        self.want_shutdown.store(true, Ordering::Release);
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match tokio::time::timeout_at(deadline, self.heartbeat()).await {
                Ok(Ok(true)) => {
                    tracing::info!("controlled shutdown: the controller moved every leadership away");
                    return;
                }
                Ok(Ok(false)) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "controlled shutdown heartbeat failed"),
                Err(_) => {}
            }
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!(?timeout, "controlled shutdown was not confirmed in time; stopping anyway");
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
